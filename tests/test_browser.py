"""The browser client (web/) against a real hub, in headless Chromium driven by Playwright.

Each test starts a ``HubServer`` on 127.0.0.1 (port 0) serving the repo's ``web/``, opens demo
pages in /usr/bin/chromium with a fresh profile, and joins a Python ``Replica`` to the same hub.
Every wait is on a condition with a timeout (``wait_for_function``, ``wait_until``, or polling
the pages' ``window.gossamer`` state); nothing sleeps for a fixed time. Skipped when
/usr/bin/chromium is missing (``scripts/setup.sh`` installs it).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import zlib
from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path
from typing import Any

import orjson
import pytest

from gossamer.core import FibonacciBackoff
from gossamer.protocols.replica import Data, LinkState, ReplicaCodec, crc_of
from gossamer.protocols.replica.keeper import KeeperConfig
from gossamer.services.replica import HubServer, JoinRefused, Replica

CHROMIUM = Path("/usr/bin/chromium")
WEB_ROOT = Path(__file__).resolve().parent.parent / "web"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        # every page is a foreground page: timers and WebSockets run at full speed
        "--disable-background-timer-throttling", "--disable-renderer-backgrounding",
        "--disable-backgrounding-occluded-windows"]
WAIT = 15.0  # seconds for any one condition
POLL = 0.05
CODEC = ReplicaCodec()

pytestmark = [pytest.mark.browser, pytest.mark.skipif(
    not CHROMIUM.exists(), reason="/usr/bin/chromium is missing (scripts/setup.sh installs it)")]
async_api = pytest.importorskip("playwright.async_api", reason="playwright is not installed")

STATE_JS = """() => ({id: gossamer.id, link: gossamer.link, synced: gossamer.synced,
    revisions: gossamer.revisions(), items: gossamer.items(), vector: gossamer.vector(),
    queued: gossamer.offlineQueue().length, held: gossamer.holdback().length})"""
RED_BOX_JS = """(key) => [...document.querySelectorAll(
    `.object[data-key="${key}"] .rev.conflict`)].some(
    (e) => getComputedStyle(e).borderTopColor === "rgb(224, 0, 0)")"""


def run(scenario: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(asyncio.wait_for(scenario(), 100))


class Stack:
    """A hub, a browser with demo pages (by client id) and a Python replica."""

    def __init__(self, hub: HubServer, context: Any, replica: Replica) -> None:
        self.hub = hub
        self.context = context
        self.py = replica
        self.pages: dict[str, Any] = {}
        self.errors: list[str] = []

    @property
    def ws_url(self) -> str:
        host, port = self.hub.address
        return f"ws://{host}:{port}/ws"

    async def open(self, client_id: str) -> Any:
        page = await self.context.new_page()
        page.on("pageerror", lambda exc: self.errors.append(f"{client_id}: {exc}"))
        page.on("console", lambda msg: self.errors.append(f"{client_id}: {msg.text}")
                if msg.type == "error" else None)
        await page.goto(f"{self.hub.url}?id={client_id}&backoff=0.1")
        await page.wait_for_function("() => window.gossamer && gossamer.synced",
                                     timeout=WAIT * 1000)
        self.pages[client_id] = page
        return page

    async def states(self) -> dict[str, dict[str, Any]]:
        return {cid: await page.evaluate(STATE_JS) for cid, page in self.pages.items()}

    def py_state(self) -> dict[str, Any]:
        py = self.py
        return {"link": py.link.value, "revisions": py.revisions(), "items": py.items(),
                "vector": py.vector, "queued": len(py.offline_queue)}

    async def converged(self, timeout: float = WAIT) -> dict[str, Any]:
        """Wait until every page and the Python replica are synced and hold the same
        revisions (and the hub's keeper too); returns the agreed items."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        keeper = self.hub.keeper
        while True:
            states = await self.states()
            py = self.py.replica
            want = py.revisions()
            if (py.link is LinkState.ONLINE and not py.offline_queue and py.causal.caught_up
                    and not py.rebase_queue
                    and (keeper is None or keeper.replica.revisions() == want)
                    and all(s["synced"] and s["revisions"] == want for s in states.values())):
                items = self.py.items()
                for cid, state in states.items():
                    assert state["items"] == items, f"{cid}: same revisions, other items"
                return items
            if loop.time() > deadline:
                pytest.fail("did not converge:\n" + json.dumps(
                    {"pages": states, "py": self.py_state()}, indent=1, default=str))
            await asyncio.sleep(POLL)  # poll the pages; the deadline bounds the wait


@contextlib.asynccontextmanager
async def stack(tmp_path: Path, *page_ids: str, py_id: str = "carol",
                keeper: KeeperConfig | None = None) -> AsyncIterator[Stack]:
    hub_server = HubServer(web_root=WEB_ROOT, keeper=keeper or KeeperConfig())
    async with hub_server as hub, async_api.async_playwright() as pw:
        context = await pw.chromium.launch_persistent_context(
            str(tmp_path / "profile"), executable_path=str(CHROMIUM), headless=True, args=ARGS)
        replica = Replica(f"ws://{hub.address[0]}:{hub.address[1]}/ws", client_id=py_id,
                          backoff=FibonacciBackoff(unit=0.02, cap=0.5))
        st = Stack(hub, context, replica)
        try:
            await replica.start()
            await replica.synced(WAIT)
            for page_id in page_ids:
                await st.open(page_id)
            yield st
            assert not st.errors, "errors in the pages:\n" + "\n".join(st.errors)
        finally:
            await context.close()
            await replica.close()


def test_the_checksum_agrees_with_python(tmp_path: Path) -> None:
    """The doc's test vectors, Python-encoded frames with floats, and JS-written content."""

    contents: list[Any] = [
        {"score": 12, "name": "ada"}, 1.0, -0.0, 0.1, 1e-5, 1e-6, 1.5e-7, 1e15, 1e16, 1.5e17,
        1e21, 123456.789, 2**53 + 2, [1, 2.5, {"b": True, "a": None}],
        {"é": "x", "z": {"\U0001f600": 1, "\uffff": 2, "a\u0000": 3}},
        "quote\" backslash\\ \b\f\n\r\t\x01\x7f\u2028 é 😀",
    ]
    frames = [CODEC.encode(Data(id="py", key="k", old_value=None, value="abc123",
                                crc=crc_of("k", "abc123", c), vector={"py": 1}, data=c)).decode()
              for c in contents]
    # what this client writes: integers and non-integral numbers, read back by Python
    js_contents: list[Any] = [{"n": 7, "x": 0.5, "s": "ß"}, 1.5e-6, 3.25e-9, 0.1, -17,
                              2**53 - 1, [{"b": 1, "a": [0.001]}]]

    async def scenario() -> None:
        async with stack(tmp_path, "alice") as st:
            page = st.pages["alice"]
            got = await page.evaluate("""async ([frames, contents]) => {
                const w = await import("/wire.js");
                return {
                    frames: frames.map((f) => w.decode(f).msg[w.CRC_OK]),
                    vectors: [w.crcOf("obj-3", "9b00e4"),
                              w.crcOf("obj-3", "51d0aa7e21c4", {score: 12, name: "ada"})],
                    written: contents.map((c) => [JSON.stringify(c), w.crcOf("k", "v", c)]),
                    refused: [2 ** 60, NaN, "\\ud800", {f: () => 1}].map((c) => {
                        try { w.canonical(c); return false; } catch { return true; } }),
                };
            }""", [frames, js_contents])
            assert got["frames"] == [True] * len(frames)
            assert got["vectors"] == [2443379021, 2701343626]
            for text, crc in got["written"]:
                assert crc == crc_of("k", "v", orjson.loads(text)), text
            assert got["refused"] == [True] * 4
            assert zlib.crc32(b"obj-3|9b00e4") == 2443379021

    run(scenario)


def test_two_pages_and_a_python_client_converge(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with stack(tmp_path, "alice", "bob") as st:
            alice, bob, py = st.pages["alice"], st.pages["bob"], st.py
            await alice.evaluate("gossamer.set('from-alice', {n: 1})")
            await bob.evaluate("gossamer.set('from-bob', 'b')")
            py.set("from-py", [1, 2, 3])
            items = await st.converged()
            assert items == {"from-alice": {"n": 1}, "from-bob": "b", "from-py": [1, 2, 3]}
            # the demo's writers: Start at 20 writes/s on both pages, then the stop-all button
            for page in (alice, bob):
                await page.click("#start")
                await page.check('input[name="speed"][value="20"]')
            await alice.wait_for_function("() => gossamer.written >= 15 && gossamer.speed === 20",
                                          timeout=WAIT * 1000)
            await bob.wait_for_function("() => gossamer.written >= 15", timeout=WAIT * 1000)
            await bob.click("#stop-all")
            for page in (alice, bob):
                await page.wait_for_function("() => !gossamer.writing", timeout=WAIT * 1000)
            items = await st.converged()
            assert sum(key.startswith("obj-") for key in items) >= 5
            # a reload resumes from localStorage: same id, same vector, same objects
            before = (await st.states())["bob"]
            await bob.reload()
            await bob.wait_for_function("() => window.gossamer && gossamer.synced",
                                        timeout=WAIT * 1000)
            after = (await st.states())["bob"]
            assert after["vector"]["bob"] == before["vector"]["bob"] > 0
            assert after["items"] == items
            await bob.evaluate("gossamer.set('after-reload', true)")
            items = await st.converged()
            assert items["after-reload"] is True
            # the picture has a row per object with a box per write
            assert await alice.locator('.object[data-key="from-py"] .rev').count() >= 1

    run(scenario)


def test_offline_writes_sync_and_converge_on_reconnect(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with stack(tmp_path, "alice", "bob") as st:
            alice, bob, py = st.pages["alice"], st.pages["bob"], st.py
            py.set("doc", "v1")
            await st.converged()
            connects = await alice.evaluate("gossamer.connects")
            await alice.click("#offline")
            await alice.wait_for_function("() => gossamer.link === 'offline'", timeout=WAIT * 1000)
            await py.wait_until(lambda: st.hub.connections == 2, WAIT)  # alice is gone
            await alice.wait_for_function(
                "() => document.getElementById('offline').textContent === 'Reconnect'",
                timeout=WAIT * 1000)
            # a draft of doc, replaced by the write after it (the same key, the default
            # rebase): six queued writes, not seven; writes to other keys each keep theirs
            await alice.evaluate("""() => {
                gossamer.set('doc', 'alice-draft');
                gossamer.set('doc', 'alice-offline');
                for (let n = 0; n < 5; n++) gossamer.set('offline-' + n, n);
            }""")
            assert await alice.evaluate("gossamer.get('doc')") == "alice-offline"
            await alice.wait_for_function(
                "() => document.querySelectorAll('#offline-queue li').length === 6",
                timeout=WAIT * 1000)
            assert await alice.evaluate("gossamer.offlineQueue().length") == 6
            # meanwhile the others move on: alice's queued write is based on a stale revision
            py.set("doc", "v2")
            await bob.evaluate("gossamer.set('from-bob', 1)")
            await bob.wait_for_function("() => gossamer.get('doc') === 'v2'", timeout=WAIT * 1000)
            assert await alice.evaluate("gossamer.link") == "offline"
            assert await alice.evaluate("gossamer.connects") == connects  # no reconnect by itself
            await alice.click("#offline")  # Reconnect
            items = await st.converged()
            assert items["doc"] == "alice-offline"  # rebased on v2 and sent after the sync
            assert all(items[f"offline-{n}"] == n for n in range(5))
            assert items["from-bob"] == 1
            assert await alice.evaluate("gossamer.offlineQueue().length") == 0
            assert await alice.evaluate("gossamer.conflicts.length") == 0  # synced, then sent
            events = await alice.evaluate("gossamer.events()")
            assert any(e.startswith("Consuming offline queue") for e in events), events

    run(scenario)


def test_a_conflict_shows_in_red_and_converges_to_the_rebased_result(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with stack(tmp_path, "alice", "bob") as st:
            alice, bob, py = st.pages["alice"], st.pages["bob"], st.py
            py.set("race", "base")
            await st.converged()
            base = py.revision("race")
            # both pages write "race" from the same base before either sees the other's write
            for page in (alice, bob):
                await page.evaluate("gossamer.debug.holdIncoming(true)")
            await alice.evaluate("gossamer.set('race', 'A')")
            await bob.evaluate("gossamer.set('race', 'B')")
            await py.wait_until(lambda: py.replica.causal.delivered("bob") >= 1
                                and py.replica.causal.delivered("alice") >= 1, WAIT)
            for page in (alice, bob):
                await page.evaluate("gossamer.debug.holdIncoming(false)")
            items = await st.converged()
            # lowest id wins: alice's write stands, bob's lost and was rebased on it (reapply)
            assert items["race"] == "B"
            path = py.replica.history("race")
            writers = [writer for _rev, writer, _seq in path]
            assert writers[-3:] == ["carol", "alice", "bob"], path
            assert path[-3][0] == base
            for page in (alice, bob):
                # a box with a red border in the row of "race"
                await page.wait_for_function(RED_BOX_JS, arg="race", timeout=WAIT * 1000)
                conflicts = await page.evaluate("gossamer.conflicts")
                assert [c["key"] for c in conflicts] == ["race"], conflicts
                assert conflicts[0]["loser"].startswith("bob:")
                assert conflicts[0]["winner"].startswith("alice:")
            await bob.wait_for_selector('.object[data-key="race"] .rev.resolution',
                                        timeout=WAIT * 1000)
            assert len(await bob.evaluate("gossamer.resolutions")) == 1

    run(scenario)


def test_a_newcomer_installs_the_hubs_snapshot_and_clear_reaches_everyone(tmp_path: Path) -> None:
    async def scenario() -> None:
        # the hub keeps 2 messages per origin: a newcomer must bootstrap from its snapshot
        async with stack(tmp_path, keeper=KeeperConfig(log_per_origin=2)) as st:
            py = st.py
            for n in range(8):
                py.set(f"k{n % 4}", {"n": n, "f": n / 4})  # floats too: 0.25, 1.0 (orjson)
            await py.wait_until(lambda: st.hub.keeper is not None
                                and st.hub.keeper.replica.vector.get("carol") == 8, WAIT)
            page = await st.open("dave")
            items = await st.converged()
            assert items == {f"k{n}": {"n": n + 4, "f": (n + 4) / 4} for n in range(4)}
            events = await page.evaluate("gossamer.events()")
            assert any("snapshot" in e for e in events), events
            await page.evaluate("gossamer.set('k0', {n: 100, f: 0.5})")  # on the installed state
            items = await st.converged()
            assert items["k0"] == {"n": 100, "f": 0.5}
            # Clear on the page: every object deleted everywhere, every client told
            cleared: list[str] = []
            py.on_clear = cleared.append
            await page.click("#clear")
            await py.wait_until(lambda: cleared == ["dave"] and not py.items(), WAIT)
            items = await st.converged()
            assert items == {}
            assert (await page.evaluate("gossamer.events()"))[0] == "cleared all clients"

    run(scenario)


def test_a_second_tab_with_the_same_id_is_refused_until_the_first_leaves(tmp_path: Path) -> None:
    """Two tabs of one browser share the id's token (localStorage): the second tab's join is
    refused while the first is connected (4001, shown in its log), and it joins once the
    first tab is closed. A Python client claiming the id without its token is refused."""
    async def scenario() -> None:
        async with stack(tmp_path, "ada") as st:
            first = st.pages["ada"]
            token = await first.evaluate("() => gossamer.client.token")
            assert isinstance(token, str) and token
            second = await st.context.new_page()
            await second.goto(f"{st.hub.url}?id=ada&backoff=0.1")
            await second.wait_for_function(
                "() => window.gossamer && gossamer.refused && gossamer.refused.code === 4001",
                timeout=WAIT * 1000)
            events = await second.evaluate("() => gossamer.events()")
            assert any("refused ada (code 4001)" in line for line in events), events
            stranger = Replica(st.ws_url, client_id="ada", db_path=tmp_path / "stranger.sqlite",
                               backoff=FibonacciBackoff(unit=0.02, cap=0.5))
            await first.close()
            del st.pages["ada"]
            await second.wait_for_function("() => gossamer.synced && !gossamer.refused",
                                           timeout=WAIT * 1000)
            await second.evaluate("() => gossamer.set('o1', {by: 'second tab'})")
            await st.py.wait_until(lambda: st.py.get("o1") == {"by": "second tab"}, WAIT)
            await stranger.start()
            try:
                with pytest.raises(JoinRefused) as refused:
                    await stranger.synced(WAIT)
                assert refused.value.code == 4001  # the second tab holds the id now
            finally:
                await stranger.close()

    run(scenario)
