"""The APSYN browser client (web/appsync/apsyn.js) and demo page against a real ``gossamer
appsync`` server, in headless Chromium driven by Playwright.

One ``AppSyncWsServer`` on 127.0.0.1 (port 0) serves the protocol at ``/`` and the demo page
beside it; two demo pages and a Python ``AppSyncClient`` join one session. Every wait is on a
condition with a timeout (``wait_for_function``, ``wait_until``, or polling the pages'
``apsyn.state()`` against a deadline); nothing sleeps for a fixed time. Skipped when
/usr/bin/chromium is missing (``scripts/setup.sh`` installs it).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import re
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from gossamer.protocols.appsync import Join, Mode
from gossamer.services.appsync.net import AppSyncClient, AppSyncWsServer
from test_appsync_wire import REFUSED_40, REFUSED_ACTIONS, WIRE, codec, doc_vectors, rqst_with

CHROMIUM = Path("/usr/bin/chromium")
WEB_ROOT = Path(__file__).resolve().parent.parent / "web" / "appsync"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        # every page is a foreground page: timers and WebSockets run at full speed
        "--disable-background-timer-throttling", "--disable-renderer-backgrounding",
        "--disable-backgrounding-occluded-windows"]
WAIT = 15.0  # seconds for any one condition
POLL = 0.05
SESSION = "board1"

pytestmark = [pytest.mark.browser, pytest.mark.skipif(
    not CHROMIUM.exists(), reason="/usr/bin/chromium is missing (scripts/setup.sh installs it)")]
async_api = pytest.importorskip("playwright.async_api", reason="playwright is not installed")

READY_JS = """() => window.apsyn && apsyn.synced
    && apsyn.value(`C/${apsyn.clientId}/note`) !== undefined
    && apsyn.value(`C/${apsyn.clientId}/player`) !== undefined"""
# what the browser's JSON.parse cannot refuse: a duplicated key (the last one wins) and an
# integer beyond 64 bits (read as a float); everything else the Python codec refuses, it does
DUPLICATE_KEY = '"id":"s","id":"t"'
BIG_INTEGER = '{"t":"upd","i":{"s":"G","n":"a"},"d":123456789012345678901234567890}'


class Stack:
    def __init__(self, server: AppSyncWsServer, context: Any, py: AppSyncClient) -> None:
        self.server = server
        self.context = context
        self.py = py
        self.pages: list[Any] = []
        self.first_frames: list[list[str]] = []
        self.errors: list[str] = []

    async def open(self, query: str = f"session={SESSION}", ready: str = READY_JS,
                   route: Callable[[Any], None] | None = None) -> Any:
        page = await self.context.new_page()
        if route is not None:  # the page's WebSocket through this handler
            await page.route_web_socket(self.server.url, route)
        sent: list[str] = []
        name = f"page{len(self.pages)}"
        page.on("pageerror", lambda exc: self.errors.append(f"{name}: {exc}"))
        page.on("console", lambda msg: self.errors.append(f"{name}: {msg.text}")
                if msg.type == "error" else None)
        page.on("websocket", lambda ws: ws.on("framesent", lambda payload: sent.append(
            payload if isinstance(payload, str) else payload.decode())))
        await page.goto(f"{self.server.page_url}?{query}&reconnect=0.1")
        await page.wait_for_function(ready, timeout=WAIT * 1000)
        self.pages.append(page)
        self.first_frames.append(sent)
        return page

    async def states(self, pages: list[Any]) -> list[dict[str, Any]]:
        return [await page.evaluate("apsyn.state()") for page in pages]

    def py_shared(self) -> dict[str, Any]:
        core = self.py.core
        assert core is not None
        return {key: obj.value for key, obj in sorted(core.objects.items())
                if obj.mode is not Mode.NA}

    async def converged(self, *pages: Any) -> dict[str, Any]:
        """Wait until ``pages`` and the Python peer answered every request and see the same
        objects (an NA object is seen by its owner only: left out of the comparison);
        returns that state."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + WAIT
        while True:
            states = await self.states(list(pages))
            want = self.py_shared()
            shared = [{k: v for k, v in s["objects"].items() if s["modes"][k] != "NA"}
                      for s in states]
            if self.py.core is not None and self.py.core.synced and all(
                    s["synced"] for s in states) and all(x == want for x in shared):
                return want
            if loop.time() > deadline:
                pytest.fail("did not converge:\n" + json.dumps(
                    {"pages": states, "py": self.py.objects()}, indent=1, default=str))
            await asyncio.sleep(POLL)  # poll the pages; the deadline bounds the wait


@contextlib.asynccontextmanager
async def stack(tmp_path: Path) -> AsyncIterator[Stack]:
    server = AppSyncWsServer(port=0, min_ms=20, max_ms=500, tout=100, key_iterations=10,
                             web_root=WEB_ROOT, session_keys={"locked": "sesame"})
    async with server, async_api.async_playwright() as pw:
        context = await pw.chromium.launch_persistent_context(
            str(tmp_path / "profile"), executable_path=str(CHROMIUM), headless=True, args=ARGS)
        py = AppSyncClient(server.url, SESSION, timeout=WAIT, node="py")
        st = Stack(server, context, py)
        try:
            await py.connect()
            yield st
            assert not st.errors, "errors in the pages:\n" + "\n".join(st.errors)
        finally:
            await context.close()
            await py.close()


def test_two_pages_and_a_python_peer_share_a_board(tmp_path: Path) -> None:
    asyncio.run(asyncio.wait_for(_share_a_board(tmp_path), 100))


async def _share_a_board(tmp_path: Path) -> None:
    async with stack(tmp_path) as st:
        py = st.py
        board = py.share("board", {})
        py.share("note", {"text": "python's secret"}, scope="C", mode="NA")
        await py.synced()
        a = await st.open()
        b = await st.open()
        # the first frame each page wrote is its join, in the grammar's exact bytes
        for frames in st.first_frames:
            assert re.fullmatch(r'\{"h":\{"p":"APSYN/01","c":"","r":"0000","l":"0000"\},'
                                r'"b":\{"id":"' + SESSION + r';peer=[0-9a-f]{36}"\}\}',
                                frames[0]), frames[0]
            assert isinstance(codec.decode_from_peer(frames[0].encode()), Join)
        ids = [await page.evaluate("apsyn.clientId") for page in (a, b)]
        assert len({*ids, py.client_id}) == 3
        # each changes something: a click on the page, the module's API, a Python set
        await a.evaluate("""() => { window.seen = [];
            apsyn.share('board').onChange((value) => seen.push(value)); }""")
        await a.click('[data-cell="r0c0"]')
        await b.evaluate("""() => {
            apsyn.share('board').set('r1c1', apsyn.clientId);
            apsyn.share('note', {}, {scope: 'C', mode: 'NA'}).set('text', 'b only');
        }""")
        board["r2c2"] = py.client_id
        state = await st.converged(a, b)
        assert state["G//board"] == {"r0c0": ids[0], "r1c1": ids[1], "r2c2": py.client_id}
        # the change callback saw the board grow to the end: a step each, or steps of one
        # round in one (a round's property changes go out as one upd)
        seen = await a.evaluate("seen")
        assert 1 <= len(seen) <= 3 and seen[-1] == state["G//board"], seen
        assert all(earlier.items() < later.items()
                   for earlier, later in itertools.pairwise(seen)), seen
        # each tab's player object (C, RO) is seen by all: one per tab
        assert {key for key in state if key.endswith("/player")} == {
            f"C/{cid}/player" for cid in ids}
        await a.wait_for_selector(f'[data-cell="r1c1"]:text("{ids[1]}")', timeout=WAIT * 1000)
        # a C object with mode NA is seen by its owner only, never by the others
        notes = {cid: f"C/{cid}/note" for cid in (*ids, py.client_id)}
        for page, cid in zip((a, b), ids, strict=True):
            objects = (await page.evaluate("apsyn.state()"))["objects"]
            assert [k for k in objects if k.endswith("/note")] == [notes[cid]]
        assert (await b.evaluate("apsyn.state()"))["objects"][notes[ids[1]]] == {
            "text": "b only"}
        assert [k for k in py.objects() if k.endswith("/note")] == [notes[py.client_id]]
        # a RO object of another client: refused 43 on the page, nothing changes
        code = await a.evaluate("(id) => apsyn.set('player', 'clicks', 99, {scope: 'C', "
                                "owner: id})", ids[1])
        assert code == 43
        await a.click("#clear")  # a merge patch of nulls: every cell removed, everywhere
        await py.wait_until(lambda: py.value("G//board") == {})
        assert (await st.converged(a, b))["G//board"] == {}
        prop, winner = await _conflict(st, a, b, ids)
        final = await st.converged(a, b)
        assert final["G//board"] == {prop: winner}
        assert final[f"C/{ids[0]}/player"] == {"clicks": 1}  # the click counted
        assert final[f"C/{ids[1]}/player"] == {"clicks": 0}  # the refused set changed nothing


async def _conflict(st: Stack, a: Any, b: Any, ids: list[str]) -> tuple[str, str]:
    """Both pages set board.hot in one round: one gets 22 (preferred), the other 32
    (inferior), shown on the page; everyone ends with the preferred value."""
    hold = """([target, prop]) => {
        if (!apsyn.holdUntil(target)) return false;
        apsyn.set('board', prop, apsyn.clientId);
        return true;
    }"""
    for attempt in range(5):  # the held round may pass before both pages hold: try again
        prop = f"hot{attempt}" if attempt else "hot"
        now = max([await page.evaluate("apsyn.round") for page in (a, b)])
        target = now + 10 * (attempt + 1)
        if await a.evaluate(hold, [target, prop]) and await b.evaluate(hold, [target, prop]):
            break
    else:
        pytest.fail("the pages could not hold a request for one round")
    answered = f"""() => apsyn.state().results.some((e) => e.what === 'upd G//board.{prop}'
        && e.code !== undefined)"""
    entries = []
    for page in (a, b):
        await page.wait_for_function(answered, timeout=WAIT * 1000)
        results = (await page.evaluate("apsyn.state()"))["results"]
        entries.append(next(e for e in results if e["what"] == f"upd G//board.{prop}"))
    assert entries[0]["round"] == entries[1]["round"] == target, entries
    assert sorted(e["code"] for e in entries) == [22, 32], entries
    winner = ids[[e["code"] for e in entries].index(22)]
    for page, entry in zip((a, b), entries, strict=True):
        phrase = "22 Request Preferred" if entry["code"] == 22 else "32 Request Inferior"
        await page.wait_for_selector(
            f'#requests li[data-code="{entry["code"]}"] .code:text-is("{phrase}")',
            timeout=WAIT * 1000)
    await st.py.wait_until(lambda: (st.py.value("G//board") or {}).get(prop) == winner)
    return prop, winner


def test_the_modules_codec_a_refused_join_and_a_lost_sync(tmp_path: Path) -> None:
    """apsyn.js writes the doc's wire vectors byte for byte and refuses what the Python codec
    refuses (but for what JSON.parse cannot see), with the same status; a join with the wrong
    session key is closed 4041, shown on the page and not retried; the right key joins; a sync
    lost on the way to a page is noticed (a gap) and resent by the server."""
    asyncio.run(asyncio.wait_for(_vectors(tmp_path), 100))


async def _vectors(tmp_path: Path) -> None:
    vectors = {name: frame.decode() for name, frame in doc_vectors().items()}
    assert {name: codec.encode(msg).decode() for name, msg in WIRE.items()} == vectors
    peer_side = ["join", "rqst", "empty"]
    refused = [f for f in REFUSED_40 if DUPLICATE_KEY not in f] + [
        rqst_with(x).decode() for x in REFUSED_ACTIONS if x != BIG_INTEGER]
    async with stack(tmp_path) as st:
        page = await st.open()
        got = await page.evaluate("""async ([vectors, peerSide, refused]) => {
            const m = await import("/apsyn.js");
            const out = {};
            for (const [name, text] of Object.entries(vectors)) {
                const decode = peerSide.includes(name) ? m.decodeFromPeer : m.decodeFromServer;
                out[name] = m.encode(decode(text));
            }
            const status = (text, decode) => {
                try { decode(text); return null; } catch (e) { return e.status; } };
            // a client over a fake socket, joined as 0007 to round 0005 of a session whose
            // rounds last 40 ms at least and `max` (hex) at most, tout 6: what it sends
            const joined = (options, max = "C8") => {
                const sent = [];
                class FakeSocket {
                    constructor() { this.readyState = 1; FakeSocket.last = this; }
                    send(text) { sent.push(text); }
                    close() {}
                }
                const client = new m.ApsynClient("ws://x/", "s",
                                                 { ...options, WebSocketImpl: FakeSocket });
                client.connect();
                FakeSocket.last.onopen();
                const server = (text) => FakeSocket.last.onmessage({ data: text });
                server('{"h":{"p":"APSYN/01","c":"0007","r":"0000","l":"0005"},"b":{"sc":'
                       + `{"min":"28","max":"${max}","tout":"6"},"cr":[]}}`);
                return { client, sent, server };
            };
            return {
                encoded: out,
                refused: refused.map((t) => status(t, m.decodeFromPeer)),
                version: status('{"h":{"p":"APSYN/02","c":"","r":"0000","l":"0000"},'
                                + '"b":{"id":"s"}}', m.decodeFromPeer),
                lower: m.encode(m.decodeFromPeer(
                    '{ "h" : { "l":"00fe", "r":"00ff", "c":"00ab", "p":"APSYN/01" }, "b":[] }')),
                wrap: [m.nextRound(0xffff), m.nextRound(1)],
                badAck: status('{"h":{"p":"APSYN/01","c":"0001","r":"0002","l":"0001"},'
                               + '"b":{"ack":[99],"syn":[]}}', m.decodeFromServer),
                gather: await (async () => {
                    // a gathering client (gather 0.5 of a 40 ms min round) answers its init
                    // 20 ms late, with the request made in the wait
                    const { client: c, sent } = joined({ gather: 0.5 });
                    const atOnce = sent.length;
                    c.request({ t: "cre", i: { s: "G", n: "late" }, m: "RW", d: 1 });
                    await new Promise((resolve) => setTimeout(resolve, 60));
                    let refused = null;
                    try { new m.ApsynClient("ws://x/", "s", { gather: 1 }); }
                    catch (e) { refused = e.name; }
                    return { atOnce, sent: sent.slice(1), refused };
                })(),
                eager: await (async () => {
                    // an eager client (gather 0.5 of a 40 ms min round): a request made
                    // before the answer is due sends it at once; two made after it go
                    // together in a rqst of their own for the same round
                    const { client: c, sent } = joined({ gather: 0.5, eager: true });
                    c.request({ t: "cre", i: { s: "G", n: "a" }, m: "RW", d: 1 });
                    await new Promise((resolve) => setTimeout(resolve, 0));
                    const early = sent.length;  // the join and the answer, long before 20 ms
                    c.request({ t: "cre", i: { s: "G", n: "b" }, m: "RW", d: 2 });
                    c.request({ t: "cre", i: { s: "G", n: "c" }, m: "RW", d: 3 });
                    await new Promise((resolve) => setTimeout(resolve, 60));
                    return { early, sent: sent.slice(1) };
                })(),
                quiet: await (async () => {
                    // a quiet client: in rounds of a fixed 40 ms (tout 6) it answers only
                    // every third round, or a round with a request queued; in rounds that
                    // wait for every answer (max 200 ms) it answers each one
                    const run = async (max) => {
                        const { client: c, sent, server } = joined({ quiet: true }, max);
                        const sync = (r) => server('{"h":{"p":"APSYN/01","c":"0007",'
                            + `"r":"${r}","l":"0005"},"b":{"ack":[],"syn":[]}}`);
                        for (const r of ["0006", "0007", "0008"]) sync(r);
                        c.request({ t: "cre", i: { s: "G", n: "q" }, m: "RW", d: 1 });
                        sync("0009");
                        await new Promise((resolve) => setTimeout(resolve, 0));
                        return sent.slice(1).map((t) => JSON.parse(t));
                    };
                    return { fixed: await run("28"), waiting: await run("C8") };
                })(),
            };
        }""", [vectors, peer_side, refused])
        assert got["encoded"] == vectors
        assert got["refused"] == [40] * len(refused), [
            f for f, s in zip(refused, got["refused"], strict=True) if s != 40]
        assert got["version"] == 55
        assert got["lower"] == '{"h":{"p":"APSYN/01","c":"00AB","r":"00FF","l":"00FE"},"b":[]}'
        assert got["wrap"] == [1, 2]
        assert got["badAck"] == 40
        assert got["gather"]["atOnce"] == 1  # the join only
        assert got["gather"]["sent"] == ['{"h":{"p":"APSYN/01","c":"0007","r":"0005",'
                                         '"l":"0005"},"b":[{"t":"cre","i":{"s":"G","n":"late"},'
                                         '"m":"RW","d":1}]}']
        assert got["gather"]["refused"] == "RangeError"
        head = '{"h":{"p":"APSYN/01","c":"0007","r":"0005","l":"0005"},"b":'
        assert got["eager"]["early"] == 2
        assert got["eager"]["sent"] == [  # nothing more when the gathered time passed
            head + '[{"t":"cre","i":{"s":"G","n":"a"},"m":"RW","d":1}]}',
            head + '[{"t":"cre","i":{"s":"G","n":"b"},"m":"RW","d":2},'
                   '{"t":"cre","i":{"s":"G","n":"c"},"m":"RW","d":3}]}']
        answered = {kind: [(msg["h"]["r"], len(msg["b"])) for msg in frames]
                    for kind, frames in got["quiet"].items()}
        assert answered["fixed"] == [("0007", 0), ("0009", 1)]
        assert answered["waiting"] == [("0005", 0), ("0006", 0), ("0007", 0), ("0008", 0),
                                       ("0009", 1)]
        flagged = await st.open(f"session={SESSION}&eager=1&quiet=1")  # the demo's options
        assert await flagged.evaluate("[apsyn.eager, apsyn.quiet]") == [True, True]
        assert await page.evaluate("[apsyn.eager, apsyn.quiet]") == [False, False]
        wrong = await st.open("session=locked&key=wrong",
                              "() => window.apsyn && apsyn.phase === 'closed'")
        state = await wrong.evaluate("apsyn.state()")
        assert state["refused"]["code"] == 4041 and state["joins"] == 1, state
        assert state["refused"]["reason"].startswith("41 Unauthorized")
        await wrong.wait_for_selector("#refused:text('join refused: 4041 41 Unauthorized')",
                                      timeout=WAIT * 1000)
        right = await st.open("session=locked&key=sesame")
        assert (await right.evaluate("apsyn.state()"))["joins"] == 1
        assert re.search(r'"b":\{"id":"locked;key=sesame;peer=[0-9a-f]{36}"\}\}$',
                         st.first_frames[-1][0]), st.first_frames[-1][0]
        assert await wrong.evaluate("apsyn.joins") == 1  # still: a refused join is final
        await _lost_sync(st)


async def _lost_sync(st: Stack) -> None:
    dropped: list[str] = []

    def route(ws: Any) -> None:  # CTRL -> page: drop the sync that creates "lossy"
        server = ws.connect_to_server()
        ws.on_message(server.send)

        def down(message: str | bytes) -> None:
            text = message if isinstance(message, str) else message.decode()
            if not dropped and '"n":"lossy"' in text and '"r":"0000"' not in text:
                dropped.append(text)
                return
            ws.send(message)
        server.on_message(down)

    page = await st.open(route=route)
    st.py.share("lossy", {"n": 1})
    await page.wait_for_function("() => apsyn.value('G//lossy') !== undefined",
                                 timeout=WAIT * 1000)
    assert len(dropped) == 1 and '"syn":[{"t":"cre"' in dropped[0]
    lines = await page.evaluate("apsyn.lines")
    assert any(line.startswith("gap:") for line in lines), lines
    assert await page.evaluate("apsyn.joins") == 1  # repaired on the same connection
    assert (await st.converged(page))["G//lossy"] == {"n": 1}
