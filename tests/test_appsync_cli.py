"""``gossamer appsync server`` and ``gossamer appsync peer`` as processes on 127.0.0.1: the server
serves the demo page beside the protocol, a peer sets a value and gets its status, another peer
sees it in its init, a keyed server refuses a peer without the key, and a restarted server
(same --data-dir) still holds the value; three ``gossamer appsync p2p`` participants choose a
CTRL among themselves and share a value, and choose another when theirs is killed (``kill
-9``), which rejoins on its data dir."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import aiohttp
import orjson
import pytest

from harness_net import reserve_port
from harness_procs import WAIT, LineProc

pytestmark = pytest.mark.processes

GOSSAMER = [sys.executable, "-m", "gossamer.cli.main"]


async def start_server(*extra: str) -> tuple[LineProc, str]:
    proc = await asyncio.create_subprocess_exec(
        *GOSSAMER, "appsync", "server", "--port", "0", "--min-ms", "5", *extra,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
        env={**os.environ, "COLUMNS": "200"})
    server = LineProc("server", proc)
    line = await server.expect(lambda text: "listening on" in text, "its address")
    return server, line.split("listening on", 1)[1].strip()


async def peer(url: str, *extra: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        *GOSSAMER, "appsync", "peer", "--url", url, "--session", "cli", "--watch", "0", *extra,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), WAIT)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def stop(server: LineProc) -> None:
    server.proc.send_signal(signal.SIGTERM)
    assert await asyncio.wait_for(server.proc.wait(), WAIT) == 0


async def scenario(data_dir: Path) -> None:
    server, url = await start_server("--data-dir", str(data_dir))
    try:
        line = await server.expect(lambda text: "demo page:" in text, "the demo page")
        page_url = line.split("demo page:", 1)[1].split()[0]
        assert page_url == url.replace("ws://", "http://")
        async with aiohttp.ClientSession() as http, http.get(page_url) as page:
            assert page.status == 200 and "demo.js" in await page.text()
        rc, _out, err = await peer(url, "--set", "board.x=1")
        assert rc == 0 and "board.x: 21 Accepted" in err, err
        rc, out, _err = await peer(url)
        assert rc == 0
        assert {"key": "G//board", "value": {"x": 1}} in [orjson.loads(x) for x in
                                                          out.splitlines()]
    finally:
        await stop(server)
    server, url = await start_server("--data-dir", str(data_dir), "--session-key", "k1")
    try:
        rc, out, err = await peer(url)
        assert rc == 1 and "4041" in out + err
        rc, out, _err = await peer(url, "--key", "k1")
        assert rc == 0 and '"value":{"x":1}' in out
    finally:
        await stop(server)


def test_server_and_peers_as_processes(tmp_path: Path) -> None:
    asyncio.run(scenario(tmp_path))


def test_three_p2p_participants_choose_a_ctrl_and_share_a_value(tmp_path: Path) -> None:
    asyncio.run(_p2p(tmp_path))


class _P2P:
    """Three ``gossamer appsync p2p`` participants on reserved loopback ports."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.links = [f"127.0.0.1:{reserve_port()}" for _ in range(3)]
        members = [arg for link in self.links
                   for arg in ("--member", f"{link}=ws://127.0.0.1:{reserve_port()}/")]
        self.common = [*members, "--cluster-key", "p2p-cli-test-cluster-key",
                       "--session", "cli"]

    async def start(self, n: int, *extra: str, stderr: int = asyncio.subprocess.PIPE
                    ) -> asyncio.subprocess.Process:
        """Participant ``n``; a long-running one's stderr is better not a pipe nobody reads
        (``asyncio.subprocess.DEVNULL``)."""
        return await asyncio.create_subprocess_exec(
            *GOSSAMER, "appsync", "p2p", "--id", self.links[n], *self.common,
            "--data-dir", str(self.tmp_path / f"p{n}"), *extra,
            stdout=asyncio.subprocess.PIPE, stderr=stderr)


async def _p2p(tmp_path: Path) -> None:
    cluster = _P2P(tmp_path)
    watchers = [LineProc(f"p{n}", await cluster.start(n, stderr=asyncio.subprocess.DEVNULL))
                for n in (1, 2)]
    try:
        setter = await cluster.start(0, "--set", "board.q=1", "--watch", "0")
        _out, err = await asyncio.wait_for(setter.communicate(), WAIT)
        assert setter.returncode == 0 and b"board.q: 21 Accepted" in err, err
        for watcher in watchers:
            await watcher.expect(lambda text: '"value":{"q":1}' in text, "the shared value")
    finally:
        for watcher in watchers:
            watcher.proc.kill()
            await watcher.proc.wait()


def test_p2p_participants_survive_a_kill_9_of_their_ctrl(tmp_path: Path) -> None:
    asyncio.run(_p2p_kill(tmp_path))


async def _p2p_kill(tmp_path: Path) -> None:
    cluster = _P2P(tmp_path)
    links = cluster.links

    async def participant(n: int, *extra: str) -> LineProc:
        return LineProc(f"p{n}", await cluster.start(n, *extra,
                                                     stderr=asyncio.subprocess.DEVNULL))

    def ctrl_of(line: str) -> tuple[str, int] | None:
        data = orjson.loads(line) if line.startswith("{") else {}
        return (data["ctrl"], data["epoch"]) if "ctrl" in data else None

    procs = {0: await participant(0, "--set", "board.q=1")}
    procs.update({n: await participant(n) for n in (1, 2)})
    try:
        first = ctrl_of(await procs[0].expect(lambda t: ctrl_of(t) is not None, "a CTRL"))
        assert first is not None
        for proc in procs.values():
            await proc.expect(lambda t: '"value":{"q":1}' in t, "the shared value")
        dead = links.index(first[0])
        procs[dead].proc.send_signal(signal.SIGKILL)
        await procs[dead].proc.wait()
        survivor = procs[(dead + 1) % 3]
        line = await survivor.expect(
            lambda t: (c := ctrl_of(t)) is not None and c[0] != first[0], "a new CTRL")
        second = ctrl_of(line)
        assert second is not None and second[1] > first[1]
        # the killed participant comes back on its data dir and joins the new CTRL
        procs[dead] = await participant(dead)
        await procs[dead].expect(lambda t: ctrl_of(t) == second, "the new CTRL")
        await procs[dead].expect(lambda t: '"value":{"q":1}' in t, "the value, kept")
    finally:
        for proc in procs.values():
            if proc.proc.returncode is None:
                proc.proc.kill()
                await proc.proc.wait()
