"""Atomic multicast between real processes on a loopback IP multicast group: four members,
one killed with SIGKILL right after a YES of its own left (its write of the message on disk,
the outcome perhaps not yet heard) and restarted on its data directory, which then delivers
that message if it committed, exactly once. The 10-member, 1,000-message version judged by
``gossamer analyze`` is ``scripts/atomic_kill_acceptance.py`` (by hand; ``BENCHMARKS.md``)."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from collections.abc import Callable
from pathlib import Path

import orjson
import pyarrow.parquet as pq
import pytest

from gossamer.cli.workloads import run_workload, validate_run
from gossamer.core.errors import ConfigError
from gossamer.pipeline.experiment import RunSpec
from gossamer.services.atomic.journal import read_journal
from gossamer.services.atomic.processes import loopback_group_address
from harness_procs import WAIT, LineProc

CLI = (sys.executable, "-m", "gossamer.cli.main", "atomic", "node")


class Member(LineProc):
    async def expect(self, pred: Callable[[str], bool], what: str,
                     timeout: float = WAIT) -> str:
        try:
            return await super().expect(pred, what, timeout)
        except TimeoutError:
            raise AssertionError(f"{self.name}: no {what} in {timeout}s; output: {self.lines}"
                                 ) from None

    async def delivers(self, mid: str) -> None:
        """Returns once this member printed ``delivered MID`` (before now or later)."""
        if mid not in self.delivered():
            await self.expect(lambda line: line.startswith(f"delivered {mid} "),
                              f"delivered {mid}")

    def delivered(self) -> list[str]:
        return [line.split()[1] for line in self.lines if line.startswith("delivered ")]


async def spawn(tmp: Path, label: str, group: str) -> Member:
    args = ["--group", group, "--data-dir", str(tmp / label), "--interactive",
            "--print-votes", "--session-period", "0.2"]
    with (tmp / f"{label}.stderr").open("ab") as err:
        proc = await asyncio.create_subprocess_exec(
            *CLI, *args, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=err)
    member = Member(label, proc)
    ready = await member.expect(lambda line: line.startswith("ready "), "ready")
    member.name = ready.split()[1]
    return member


async def await_group(member: Member, names: set[str]) -> None:
    """Ask ``members`` until ``member`` knows all of ``names`` (each answer waited for)."""
    async with asyncio.timeout(WAIT):
        while True:
            member.write("members")
            line = await member.expect(lambda line: line.startswith("members "), "members")
            if set(line.split()[1].split(",")) >= names:
                return
            await asyncio.sleep(0.1)  # poll interval, not a wait for an event


async def send(sender: Member, text: str) -> tuple[str, bool]:
    sender.write(f"send {text}")
    line = await sender.expect(lambda line: line.startswith(("committed ", "aborted ")),
                               "a decision")
    return line.split()[1], line.startswith("committed ")


def journaled(data_dir: Path) -> list[str]:
    return [entry["mid"] for entry in read_journal(data_dir)]


async def _until(condition: Callable[[], bool], what: str) -> None:
    try:
        async with asyncio.timeout(WAIT):
            while not condition():
                await asyncio.sleep(0.05)  # poll a file, not a wait for an event
    except TimeoutError:
        raise AssertionError(f"no {what} in {WAIT}s") from None


async def four_members_and_a_killed_one(tmp: Path) -> None:
    group = loopback_group_address()
    members = {label: await spawn(tmp, label, group) for label in "abcd"}
    first_d = members["d"]
    try:
        sender = members["a"]
        names = {m.name for m in members.values()}
        for member in members.values():
            await await_group(member, names)
        outcomes = [await send(sender, f'"m{i}"') for i in range(3)]
        assert all(ok for _, ok in outcomes), outcomes  # everyone up: all commit
        for mid, _ in outcomes:
            await first_d.delivers(mid)
        sender.write('send "y"')  # d is killed the moment its YES for it has left
        yes = await first_d.expect(lambda line: line.startswith("voted ") and
                                   line.endswith(" yes"), "its YES")
        first_d.proc.send_signal(signal.SIGKILL)
        killed_on = yes.split()[1]
        line = await sender.expect(lambda line: line.startswith(("committed ", "aborted ")),
                                   "a decision")
        assert line.split()[1] == killed_on, line
        outcomes.append((killed_on, line.startswith("committed ")))
        await first_d.proc.wait()
        assert first_d.proc.stdout is not None  # what it printed before it died, read
        first_d.lines += (await first_d.proc.stdout.read()).decode().splitlines()
        outcomes += [await send(sender, f'"k{i}"') for i in range(2)]  # d is down
        members["d"] = await spawn(tmp, "d", group)  # the same data dir, the same name
        assert members["d"].name == first_d.name
        for member in members.values():
            await await_group(member, names)
        outcomes += [await send(sender, f'"r{i}"') for i in range(2)]
        committed = {mid for mid, ok in outcomes if ok}
        aborted = {mid for mid, ok in outcomes if not ok}
        assert {mid for mid, _ in outcomes[-2:]} <= committed, outcomes
        for label in "abc":
            for mid in committed:
                await members[label].delivers(mid)
        for mid, _ in outcomes[-2:]:
            await members["d"].delivers(mid)
        if killed_on in committed:  # voted YES, killed: delivered after the restart
            await _until(lambda: killed_on in journaled(tmp / "d"), f"d journals {killed_on}")
        at_d = journaled(tmp / "d")  # d's record over both lives: what it printed and more
        assert len(at_d) == len(set(at_d)), f"d delivered twice: {at_d}"  # never twice
        assert set(first_d.delivered() + members["d"].delivered()) <= set(at_d)
        assert set(journaled(tmp / "a")) == set(members["a"].delivered()) == committed
        for member in [*members.values(), first_d]:
            assert not set(member.delivered()) & aborted, (member.name, aborted)
            assert set(member.delivered()) <= committed, (member.name, committed)
    finally:
        for member in members.values():
            if member.proc.returncode is None:
                member.proc.send_signal(signal.SIGTERM)
        for member in members.values():
            with contextlib.suppress(ProcessLookupError):
                async with asyncio.timeout(WAIT):
                    await member.proc.wait()


@pytest.mark.processes
def test_four_members_and_a_killed_one(tmp_path: Path) -> None:
    asyncio.run(four_members_and_a_killed_one(tmp_path))


@pytest.mark.processes
def test_the_loopback_workload_runs_member_processes_and_writes_their_traces(
        tmp_path: Path) -> None:
    spec = RunSpec("atomic-lb", "atomic", "loopback", 1,
                   {"members": 3, "messages": 6, "inflight": 2, "session_period": 0.2,
                    "drop_rate": 0.2, "timeout": 60.0})
    result = run_workload(spec, str(tmp_path))
    assert result["committed"] + result["aborted"] == 6, result
    assert result["missing"] == result["twice"] == result["errors"] == 0, result
    assert result["deliveries"] == 3 * result["committed"], result
    files = sorted((tmp_path / "trace" / "atomic-lb").glob("*.parquet"))
    assert len(files) == 3, files
    rows = [row for f in files for row in pq.read_table(f).to_pylist()]
    assert any(r["event"] == "deliver" and r["layer"] == "atomic" for r in rows)
    dropped = [r for r in rows if r["event"] == "drop" and '"injected"' in (r["info"] or "")]
    assert dropped, "a drop rate of 20% dropped nothing"
    # every datagram sent is a send row with its type, as in the simulator (SRM's requests
    # and repairs per loss are counted from them)
    sent = {orjson.loads(r["info"])["type"] for r in rows if r["event"] == "send"}
    assert {"srm.data", "srm.session"} <= sent, sent
    with pytest.raises(ConfigError):
        validate_run(RunSpec("x", "atomic", "loopback", 1, {"drop_rate": 1.0}))
