"""``gossamer paxos node`` as three OS processes on 127.0.0.1: a replicated key/value store
that keeps deciding when its leader is killed with SIGKILL, and a killed replica that restarts
on its data dir and catches up. Every wait is on a process's output with a timeout."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from harness_net import reserve_port
from harness_procs import WAIT, LineProc

pytestmark = pytest.mark.processes

CLI = (sys.executable, "-m", "gossamer.cli.main", "paxos", "node")


class Replica(LineProc):
    """One ``gossamer paxos node --interactive`` process; its stdout read on demand."""

    async def expect(self, pred: Callable[[str], bool], what: str,
                     timeout: float = WAIT) -> str:
        try:
            return await super().expect(pred, what, timeout)
        except TimeoutError:
            raise AssertionError(f"{self.name}: no {what} in {timeout}s; output: {self.lines}"
                                 ) from None


async def spawn(tmp: Path, me: str, members: list[str]) -> Replica:
    args = ["--listen", me, "--interactive", "--heartbeat", "0.2", "--suspect", "1.0",
            "--data-dir", str(tmp / me.replace(":", "_"))]
    for member in members:
        args += ["--member", member]
    with (tmp / f"{me.replace(':', '_')}.stderr").open("ab") as err:
        proc = await asyncio.create_subprocess_exec(
            *CLI, *args, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=err)
    replica = Replica(me, proc)
    await replica.expect(lambda line: line == f"ready {me}", "ready")
    return replica


def applied(key: str, value: str) -> Callable[[str], bool]:
    return lambda line: line.startswith("applied ") and line.split()[3:] == [key, value]


async def agreed_leader(replicas: dict[str, Replica], timeout: float = WAIT) -> str:
    """The leader every replica names in its latest ``leader`` line. At start two replicas
    may each win a ballot before one of them is everyone's (duelling proposers), so a
    replica's first leader line need not be the one they all settle on."""
    latest: dict[str, str] = {}
    waits: dict[str, asyncio.Task[str]] = {}
    try:
        async with asyncio.timeout(timeout):
            while len(latest) < len(replicas) or len(set(latest.values())) > 1:
                for name, replica in replicas.items():
                    if name not in waits:
                        waits[name] = asyncio.ensure_future(replica.expect(
                            lambda line: line.startswith("leader "), "a leader", timeout))
                done, _ = await asyncio.wait(waits.values(),
                                             return_when=asyncio.FIRST_COMPLETED)
                for name, task in list(waits.items()):
                    if task in done:
                        latest[name] = task.result().split()[1]
                        del waits[name]
    except TimeoutError:
        raise AssertionError(f"no leader every replica names in {timeout}s: {latest}") from None
    finally:
        for task in waits.values():
            task.cancel()
        # a cancelled wait must be over before anyone reads that replica's output again
        await asyncio.gather(*waits.values(), return_exceptions=True)
    return next(iter(latest.values()))


async def three_replicas_survive_a_killed_leader(tmp: Path) -> None:
    members = [f"127.0.0.1:{reserve_port()}" for _ in range(3)]
    replicas = {m: await spawn(tmp, m, members) for m in members}
    try:
        leader = await agreed_leader(replicas)
        follower = next(m for m in members if m != leader)
        replicas[follower].write("set x 1")
        for replica in replicas.values():
            await replica.expect(applied("x", "1"), "x applied")
        # applied (handed to the state machine) comes before the proposer's answer
        await replicas[follower].expect(lambda line: line.startswith("ok "), "ok for x")

        replicas[leader].proc.send_signal(signal.SIGKILL)
        await replicas[leader].proc.wait()
        survivors = [m for m in members if m != leader]
        replicas[survivors[0]].write("incr n 5")
        for member in survivors:
            new = await replicas[member].expect(
                lambda line: line.startswith("leader ") and line.split()[1] != leader,
                "a new leader")
            assert new.split()[1] in survivors
            await replicas[member].expect(applied("n", "5"), "n applied after the kill")
        await replicas[survivors[0]].expect(lambda line: line.startswith("ok "), "ok for n")

        back = replicas[leader] = await spawn(tmp, leader, members)  # same data dir
        back.pos = 0  # the replay of its own log comes before "ready"
        await back.expect(applied("x", "1"), "x replayed from its store")
        await back.expect(applied("n", "5"), "n caught up")
        back.write("get n")
        assert await back.expect(lambda line: line.startswith("value "), "get") == "value n 5"
    finally:
        for replica in replicas.values():
            if replica.proc.returncode is None:
                replica.proc.send_signal(signal.SIGTERM)
        for replica in replicas.values():
            with contextlib.suppress(ProcessLookupError):
                async with asyncio.timeout(WAIT):
                    await replica.proc.wait()


def test_three_replicas_survive_a_killed_leader(tmp_path: Path) -> None:
    asyncio.run(three_replicas_survive_a_killed_leader(tmp_path))
