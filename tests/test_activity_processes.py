"""The activity network as separate OS processes (``gossamer activity server|client``) on
127.0.0.1: three servers, listening clients on two of them, an interactive sender on the third;
one server SIGKILLed and restarted on its port and data dir; two concurrent registrations of
one name on different servers; bad input lines to the interactive client. Every wait is on a
process's output with a timeout, never a fixed sleep."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from harness_procs import WAIT, LineProc

pytestmark = pytest.mark.processes

PROBE_WAIT = 0.5  # how long one probe activity is given before the next is sent
CLI = (sys.executable, "-m", "gossamer.cli.main", "activity")
LOGGED_IN = "logged in as user "


class Proc(LineProc):
    """An activity client or server process; its printed activities parsed."""

    def activities(self) -> list[dict[str, Any]]:
        return [orjson.loads(line) for line in self.lines if line.startswith("{")]


class Network:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.procs: list[Proc] = []

    async def spawn(self, name: str, *args: str, stdin: bool = False) -> Proc:
        with (self.tmp / f"{name}.stderr").open("ab") as err:
            proc = await asyncio.create_subprocess_exec(
                *CLI, *args, stdout=asyncio.subprocess.PIPE, stderr=err,
                stdin=asyncio.subprocess.PIPE if stdin else asyncio.subprocess.DEVNULL)
        p = Proc(name, proc)
        self.procs.append(p)
        return p

    async def server(self, name: str, port: int, *join: str,
                     server_id: str | None = None) -> tuple[Proc, int]:
        """Server ``server_id`` (default ``name``) with its data dir, joining via ``join``."""
        server_id = server_id or name
        p = await self.spawn(name, "server", "-lp", str(port), "-a", "200",
                             "--data-dir", str(self.tmp / f"{server_id}.data"),
                             "--id", server_id, *join)
        ready = await p.expect(lambda s: " listening on " in s, "the ready line")
        return p, int(ready.rsplit(":", 1)[1])

    async def client(self, name: str, port: int, *args: str, stdin: bool = False) -> Proc:
        p = await self.spawn(name, "client", "-rp", str(port), "--id", name, *args,
                             stdin=stdin)
        await p.expect(lambda s: s.startswith(LOGGED_IN), "login")
        return p

    async def close(self) -> None:
        for p in self.procs:
            if p.proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    p.proc.kill()
            if p.proc.stdin is not None:
                p.proc.stdin.close()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(p.proc.wait(), WAIT)


async def until_delivered(sender: Proc, listeners: list[Proc], tag: str) -> None:
    """Send probe activities until each listener has one: the servers they are on are then
    attached to the sender's (a server joins its parent asynchronously, after it prints its
    ready line)."""
    async with asyncio.timeout(WAIT):
        waiting = list(listeners)
        k = 0
        while waiting:
            sender.write(orjson.dumps({"probe": tag, "k": k}).decode())
            k += 1
            for listener in list(waiting):
                with contextlib.suppress(TimeoutError):
                    await listener.expect(lambda s: f'"probe":"{tag}"' in s, f"probe {tag}",
                                          timeout=PROBE_WAIT)
                    waiting.remove(listener)


async def numbered(listener: Proc, count: int) -> list[dict[str, Any]]:
    """Wait until ``listener`` printed ``count`` numbered (non-probe) activities; all of them."""
    def got() -> list[dict[str, Any]]:
        return [a for a in listener.activities() if "n" in a]

    async with asyncio.timeout(WAIT):
        while len(got()) < count:
            await listener.expect(lambda s: s.startswith("{") and '"n":' in s,
                                  f"{count} activities (got {got()})")
    return got()


def test_server_and_client_processes(tmp_path: Path) -> None:
    async def scenario() -> None:
        net = Network(tmp_path)
        try:
            s1 = await net.spawn("s1", "server", "-lp", "0", "-a", "200",
                                 "--data-dir", str(tmp_path / "s1.data"), "--id", "s1")
            first = await s1.expect(lambda s: "server secret: " in s, "the secret line")
            secret = first.rsplit(" ", 1)[1]
            p1 = int((await s1.expect(lambda s: " listening on " in s, "ready")).rsplit(":", 1)[1])
            join = ("-rh", "127.0.0.1", "-rp", str(p1), "-s", secret)
            # s3 gives only -rp: it joins on 127.0.0.1 (it started a network of its own)
            (s2, p2), (_s3, p3) = await asyncio.gather(
                net.server("s2", 0, *join), net.server("s3", 0, *join[2:]))
            listen2, listen3, sender = await asyncio.gather(
                net.client("listen2", p2, "--listen"), net.client("listen3", p3, "--listen"),
                net.client("sender", p1, stdin=True))
            assert sender.lines[-1] == LOGGED_IN + "anonymous"

            await until_delivered(sender, [listen2, listen3], "a")
            for n in range(3):
                sender.write(orjson.dumps({"n": n}).decode())
            # bad input: reported on the client's output, the client carries on
            sender.write("this is not json")
            await sender.expect(lambda s: s.startswith("not JSON:"), "the parse error")
            sender.write("[1, 2]")
            await sender.expect(lambda s: "an activity is a JSON object" in s, "non-object")
            for n in range(3, 5):
                sender.write(orjson.dumps({"n": n}).decode())
            for listener in (listen2, listen3):
                got = await numbered(listener, 5)
                assert [a["n"] for a in got] == list(range(5)), listener.name
                assert {a["authenticated_user"] for a in got} == {"anonymous"}
                assert all(a["authenticated_user"] == "anonymous"
                           for a in listener.activities())

            # s2 dies without a word; its listener's connection ends, s3's does not
            s2.proc.kill()
            await asyncio.wait_for(s2.proc.wait(), WAIT)
            await asyncio.wait_for(listen2.proc.wait(), WAIT)
            assert listen3.proc.returncode is None
            sender.write(orjson.dumps({"n": 5}).decode())  # while s2 is down
            assert [a["n"] for a in await numbered(listen3, 6)] == list(range(6))

            # restarted on its port with its data dir, it joins s1 again
            users = tmp_path / "s2.data" / "activity.sqlite"
            assert users.is_file()
            _s2b, port = await net.server("s2b", p2, *join, server_id="s2")
            assert port == p2
            listen2b = await net.client("listen2b", p2, "--listen")
            await until_delivered(sender, [listen2b, listen3], "b")
            for n in range(6, 9):
                sender.write(orjson.dumps({"n": n}).decode())
            got = await numbered(listen2b, 3)
            assert [a["n"] for a in got] == [6, 7, 8]
            assert {a["authenticated_user"] for a in got} == {"anonymous"}
            assert [a["n"] for a in await numbered(listen3, 9)] == list(range(9))

            # the same name registered at once on two servers: at most one succeeds
            racers = await asyncio.gather(*(net.spawn(f"racer{i}", "client", "-rp", str(port),
                                                      "-u", "racer")
                                            for i, port in enumerate((p2, p3))))
            outs = await asyncio.gather(*(asyncio.wait_for(r.proc.communicate(), WAIT)
                                          for r in racers))
            texts = [out.decode() for out, _ in outs]
            codes = [r.proc.returncode for r in racers]
            winners = [i for i, code in enumerate(codes) if code == 0]
            assert len(winners) <= 1, (codes, texts)
            for code, text in zip(codes, texts, strict=True):
                if code == 0:
                    assert "registered racer with secret: " in text, text
                else:
                    assert code == 1 and "register refused" in text, (code, text)
            if winners:  # the name is then known on every server: s1 refuses it too
                again = await net.spawn("again", "client", "-rp", str(p1), "-u", "racer")
                out, _ = await asyncio.wait_for(again.proc.communicate(), WAIT)
                assert again.proc.returncode == 1 and b"register refused" in out, out

            # the sender is still alive after the bad lines, and leaves cleanly on EOF
            assert sender.proc.stdin is not None
            sender.proc.stdin.close()
            assert await asyncio.wait_for(sender.proc.wait(), WAIT) == 0
        finally:
            await net.close()

    asyncio.run(scenario())


def test_ctrl_c_stops_an_interactive_client_waiting_for_input(tmp_path: Path) -> None:
    """SIGINT while the interactive client waits for a line on stdin (a pipe kept open, as a
    terminal is): it exits at once with 130 and no traceback (it waited for the next line, the
    read blocking the interpreter's shutdown, and then printed a traceback)."""

    async def scenario() -> None:
        net = Network(tmp_path)
        try:
            s1 = await net.spawn("s1", "server", "-lp", "0", "--id", "s1")
            port = int((await s1.expect(lambda s: " listening on " in s, "ready"))
                       .rsplit(":", 1)[1])
            with (tmp_path / "typist.stderr").open("ab") as err:
                proc = await asyncio.create_subprocess_exec(
                    *CLI, "client", "-rp", str(port), stdout=asyncio.subprocess.PIPE,
                    stderr=err, stdin=asyncio.subprocess.PIPE,
                    preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
            typist = Proc("typist", proc)
            net.procs.append(typist)
            await typist.expect(lambda s: s.startswith(LOGGED_IN), "login")
            proc.send_signal(signal.SIGINT)
            assert await asyncio.wait_for(proc.wait(), WAIT) == 130
            assert "Traceback" not in (tmp_path / "typist.stderr").read_text()
        finally:
            await net.close()

    asyncio.run(scenario())
