"""``gossamer paxos node --interactive`` against bad input: integers beyond 64 bits (which once
crashed every replica after they were decided, and again at each restart), digits that are
not ASCII, over-long lines, commands piped in and the end of input right after them, and a
damaged store. A group of one replica, so every command is decided by the process itself."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gossamer.core.errors import ConfigError
from gossamer.services.paxos import KeyValue
from gossamer.services.paxos.api import INT_MAX, INT_MIN
from harness_net import reserve_port
from harness_procs import WAIT

pytestmark = pytest.mark.processes

CLI = (sys.executable, "-m", "gossamer.cli.main", "paxos", "node")


def test_an_incr_beyond_64_bits_is_refused_and_changes_nothing() -> None:
    kv = KeyValue()
    assert kv.apply({"op": "set", "key": "n", "value": INT_MAX - 1})
    assert kv.apply({"op": "incr", "key": "n", "by": 1})
    assert not kv.apply({"op": "incr", "key": "n", "by": 1})
    assert kv.apply({"op": "set", "key": "m", "value": INT_MIN})
    assert not kv.apply({"op": "incr", "key": "m", "by": -1})
    assert not kv.apply({"op": "incr", "key": "k", "by": INT_MAX + 1})
    assert kv.data == {"n": INT_MAX, "m": INT_MIN}
    with pytest.raises(ConfigError, match="beyond 64 bits"):
        KeyValue.check({"op": "incr", "key": "n", "by": -(2**64)})
    copy = KeyValue()
    copy.restore(kv.snapshot())
    assert copy.data == kv.data


def run_replica(data: Path, commands: str) -> subprocess.CompletedProcess[str]:
    me = f"127.0.0.1:{reserve_port()}"
    return subprocess.run(
        [*CLI, "--listen", me, "--member", me, "--interactive", "--data-dir", str(data),
         "--heartbeat", "0.2", "--suspect", "1.0"],
        input=commands, capture_output=True, text=True, timeout=WAIT, check=False)


def answers(out: str) -> list[str]:
    return [line for line in out.splitlines()
            if not line.startswith(("leader ", "ready "))]


def test_piped_commands_are_all_answered_and_bad_integers_refused(tmp_path: Path) -> None:
    big = 2**64 - 6
    commands = "\n".join([
        f"set n {big}",
        "incr n 5",  # to 2**64 - 1: the last integer the log carries
        "incr n 5",  # beyond: refused where it applies (this replica saw n absent)
        "incr k 99999999999999999999",
        "incr k ²",
        "set long " + "x" * 20_000,
        "set x 1",
    ]) + "\n"  # and the end of input right after
    done = run_replica(tmp_path / "r", commands)
    assert done.returncode == 0, done.stderr
    lines = answers(done.stdout)
    assert [line.split()[0] for line in lines if line.startswith(("applied", "refused"))] == [
        "applied", "applied", "refused", "applied"], lines
    assert any(line.startswith("applied ") and line.endswith(f" n {big}") for line in lines)
    assert any(line.endswith(f" n {2**64 - 1}") and line.startswith("applied ")
               for line in lines)
    assert any(line.startswith("refused ") and line.endswith(" n") for line in lines)
    errors = [line for line in lines if line.startswith("error: ")]
    assert len(errors) == 3, lines  # the 20-digit incr, the "²" and the long line
    assert any("beyond 64 bits" in line for line in errors)
    assert any("at most 16384 bytes" in line for line in errors)
    assert len([line for line in lines if line.startswith("ok ")]) == 4  # all decided
    assert "Traceback" not in done.stderr

    # the refused incr replays as refused: the restarted replica comes up with the same state
    again = run_replica(tmp_path / "r", "get n\nget x\nget long\n")
    assert again.returncode == 0, again.stderr
    assert f"value n {2**64 - 1}" in again.stdout.splitlines()
    assert "value x 1" in again.stdout.splitlines()
    assert "value long null" in again.stdout.splitlines()


def test_a_damaged_store_is_one_error_line(tmp_path: Path) -> None:
    data = tmp_path / "r"
    data.mkdir()
    (data / "paxos.sqlite").write_bytes(b"not a database at all" * 100)
    done = run_replica(data, "")
    assert done.returncode == 2, done
    assert "Traceback" not in done.stderr
    assert "not a replica's store" in done.stdout + done.stderr


def test_a_proposal_waiting_when_the_replica_stops_is_answered_and_it_starts_once() -> None:
    import asyncio

    from gossamer.core.errors import OperationError, StateError
    from gossamer.services.paxos import ReplicatedLog

    async def main() -> None:
        members = [f"127.0.0.1:{reserve_port()}" for _ in range(3)]
        log = ReplicatedLog(members[0], members)  # the others never come: no majority
        await log.start()
        waiting = asyncio.ensure_future(log.propose(2))  # no timeout of its own
        await asyncio.sleep(0)  # one turn: it proposed and waits
        await log.stop()
        with pytest.raises(OperationError, match="stopped before the decision") as raised:
            await asyncio.wait_for(waiting, WAIT)
        assert raised.value.definite is False
        with pytest.raises(StateError, match="starts once"):
            await log.start()

    asyncio.run(main())
