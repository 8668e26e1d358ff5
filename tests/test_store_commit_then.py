"""Group commit (``Store.commit_then``): a callback runs only once its group is durable, in the
order given, each once; a crash or ``close()`` before the group is durable loses its writes and
never runs it; many writers share one group (one fsync). On every store: the default (sqlite:
commit, then call), the simulator's ``MemoryStore`` (the group lands as the node's next event),
``FakeEnv``'s store (at the next ``run_due``) and ``WriteBehindStore`` (the writer thread, then
the event loop)."""

from __future__ import annotations

import asyncio
import functools
import os
import shutil
import threading
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, cast

import pytest

from gossamer.core import Env, MemorySink, StateError, Store
from gossamer.core.segments import SegmentSink, _segments_of, read_segment
from gossamer.runtimes.net import NetNode, SqliteStore, WriteBehindStore
from gossamer.runtimes.sim import MemoryStore, Simulation
from gossamer.testing import FakeEnv

WAIT = 20.0  # seconds: an upper bound only, never a measurement


def rows(path: Path, table: str = "t") -> list[tuple[str, bytes]]:
    """What another connection reads from the file: what is committed."""
    store = SqliteStore(path)
    try:
        return list(store.scan(table))
    finally:
        store.close()


def run(scenario: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(asyncio.wait_for(scenario(), 60))


# -- the default: commit at once, then call -----------------------------------------------------


def test_the_default_commits_then_calls_at_once(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    store = SqliteStore(path)
    seen: list[list[tuple[str, bytes]]] = []
    store.put("t", "a", b"1")
    store.commit_then(lambda: seen.append(rows(path)))
    assert seen == [[("a", b"1")]]  # called before commit_then returned, the row on disk
    store.close()

    alone = MemoryStore()  # no runtime attached: the same default
    alone.put("t", "a", b"1")
    alone.commit_then(lambda: seen.append([("uncommitted", bytes([alone.uncommitted]))]))
    assert seen[-1] == [("uncommitted", b"\x00")]


# -- FakeEnv: the group lands at the next run_due ------------------------------------------------


def test_fake_env_runs_callbacks_once_their_group_is_durable_in_order_and_once() -> None:
    env = FakeEnv("a")
    store = env.store
    assert isinstance(store, MemoryStore)
    ran: list[tuple[int, int]] = []

    def reply(n: int) -> None:
        ran.append((n, store.uncommitted))

    for n in range(3):  # three writers in one instant: one group
        store.put("t", f"k{n}", b"x")
        store.commit_then(functools.partial(reply, n))
    store.put("t", "later", b"y")  # after the last commit_then: not in the group
    assert ran == [] and len(env.pending_timers()) == 1  # one landing for the group
    env.run_due()
    assert ran == [(0, 1), (1, 1), (2, 1)]  # in order; durable but "later"
    env.advance(1.0)
    assert ran == [(0, 1), (1, 1), (2, 1)]  # each once
    env.crash()
    assert [key for key, _ in store.scan("t")] == ["k0", "k1", "k2"]


def test_fake_env_a_crash_before_the_group_lands_loses_it_and_its_callbacks() -> None:
    env = FakeEnv("a")
    store = env.store
    ran: list[str] = []
    store.put("t", "kept", b"1")
    store.commit_then(lambda: ran.append("kept"))
    env.run_due()
    store.put("t", "lost", b"2")
    store.commit_then(lambda: ran.append("lost"))
    env.crash()  # between the commit and the reply
    env.advance(1.0)
    assert ran == ["kept"]
    assert list(store.scan("t")) == [("kept", b"1")]
    again = FakeEnv("a", store=store)  # the next incarnation owns the store
    store.put("t", "next", b"3")
    store.commit_then(lambda: ran.append("next"))
    again.run_due()
    assert ran == ["kept", "next"]


def test_fake_env_commit_makes_the_group_durable_at_once_and_its_callbacks_still_wait() -> None:
    env = FakeEnv("a")
    store = env.store
    assert isinstance(store, MemoryStore)
    ran: list[str] = []
    store.put("t", "grouped", b"1")
    store.commit_then(lambda: ran.append("grouped"))
    store.put("t", "direct", b"2")
    store.commit()
    assert store.uncommitted == 0 and ran == []
    store.crash()  # durable, but the callback belonged to the crashed incarnation
    assert [key for key, _ in store.scan("t")] == ["direct", "grouped"]
    env.run_due()
    assert ran == []


# -- the simulator: a node crashes between its commit and its reply ------------------------------


class Ledger:
    """Records entries: write, commit, then reply (a ``reply`` trace row)."""

    def __init__(self, env: Env) -> None:
        self.env = env

    def start(self) -> None:
        """Nothing to start: it only answers what it is sent."""

    def stop(self) -> None:
        """Nothing to stop: it holds no timers."""

    def record(self, n: int, *, grouped: bool, reply_after: float = 0.01) -> None:
        store = self.env.store
        store.put("ledger", f"{n:04d}", b"entry")
        if grouped:
            store.commit_then(lambda: self._reply(n))
        else:
            store.commit()
            self.env.set_timer(reply_after, lambda: self._reply(n))
        store.put("scratch", f"{n:04d}", b"not committed")

    def _reply(self, n: int) -> None:
        self.env.trace("reply", layer="ledger", seq=n)


def replies(sink: MemorySink) -> list[tuple[float, str, int | None]]:
    return [(row.t, row.node, row.seq) for row in sink.named() if row.event == "reply"]


def ledger_sim(seed: int = 1) -> tuple[Simulation, MemorySink]:
    sink = MemorySink()
    sim = Simulation(seed=seed, trace=sink)
    sim.add_node("n1", Ledger)
    return sim, sink


def record(sim: Simulation, n: int, *, grouped: bool) -> None:
    sim.call("n1", lambda p: cast(Ledger, p).record(n, grouped=grouped))


def test_sim_a_crash_between_commit_and_reply_keeps_the_commit_and_loses_the_rest() -> None:
    sim, sink = ledger_sim()
    record(sim, 1, grouped=False)
    sim.run(until=0.005)  # committed; the reply is due at 0.01
    sim.crash("n1")
    sim.recover("n1")
    sim.run(until=1.0)
    store = sim.store("n1")
    assert store.get("ledger", "0001") == b"entry"
    assert store.get("scratch", "0001") is None
    assert replies(sink) == []


def test_sim_a_crash_before_the_group_lands_loses_its_writes_and_replies() -> None:
    sim, sink = ledger_sim()
    record(sim, 1, grouped=True)
    sim.crash("n1")  # the group is on its way to disk: a power loss now loses it
    sim.recover("n1")
    sim.run(until=1.0)
    assert sim.store("n1").get("ledger", "0001") is None
    assert replies(sink) == []
    for n in (2, 3, 4):  # three writers in one instant share one group
        record(sim, n, grouped=True)
    assert sim.pending_events == 1
    sim.run(until=2.0)
    assert replies(sink) == [(1.0, "n1", 2), (1.0, "n1", 3), (1.0, "n1", 4)]
    sim.crash("n1")  # after the replies: what they answered for survives
    store = sim.store("n1")
    assert [key for key, _ in store.scan("ledger")] == ["0002", "0003", "0004"]
    # a write joins the group of the next commit_then after it: the last one was never committed
    assert [key for key, _ in store.scan("scratch")] == ["0002", "0003"]


def test_sim_a_node_that_leaves_keeps_the_group_it_handed_over_but_never_replies() -> None:
    sim, sink = ledger_sim()
    record(sim, 1, grouped=True)
    sim.leave("n1")  # a graceful stop: the disk finishes the group, the process is gone
    sim.run(until=1.0)
    sim.rejoin("n1")
    sim.run(until=2.0)
    sim.crash("n1")  # what survives a crash now is on disk
    assert sim.store("n1").get("ledger", "0001") == b"entry"
    assert replies(sink) == []


class Writers:
    """Writes at random times and replies through a group commit (for the determinism test)."""

    def __init__(self, env: Env) -> None:
        self.env = env
        self.n = 0

    def start(self) -> None:
        self.env.set_timer(self.env.rng.uniform(0.0, 0.02), self._tick)

    def stop(self) -> None:
        """Nothing to clean up: its timer ends with its incarnation."""

    def _tick(self) -> None:
        self.n += 1
        n = self.n
        store = self.env.store
        store.put("w", f"{n:06d}", b"x")
        store.commit_then(lambda: self.env.trace("reply", layer="writers", seq=n))
        # a round number of milliseconds: writers often commit in the same instant
        self.env.set_timer(self.env.rng.randrange(1, 4) / 1000, self._tick)


def writers_trace(seed: int) -> list[tuple[Any, ...]]:
    sink = MemorySink()
    sim = Simulation(seed=seed, trace=sink)
    sim.add_nodes([f"w{n}" for n in range(6)], Writers)
    sim.schedule(0.05, sim.crash, "w3")
    sim.schedule(0.08, sim.recover, "w3")
    sim.run(until=0.2)
    return sink.rows


def test_sim_group_commits_replay_row_for_row() -> None:
    first = writers_trace(7)
    assert first == writers_trace(7)
    assert first != writers_trace(8)
    assert sum(1 for row in first if row[4] == "reply") > 100


# -- WriteBehindStore: the writer thread, then the event loop ------------------------------------


class Gate:
    """Holds the writer thread inside its next group until ``open`` is set."""

    def __init__(self, store: WriteBehindStore, monkeypatch: pytest.MonkeyPatch) -> None:
        self.open = threading.Event()
        self.entered = threading.Event()
        assert store.redo is not None
        real = store.redo.append

        def gated(puts: bytes, deletes: bytes, **options: Any) -> None:
            self.entered.set()
            assert self.open.wait(WAIT)
            real(puts, deletes, **options)

        monkeypatch.setattr(store.redo, "append", gated)

    async def writing(self) -> None:
        """Until the writer is inside a group."""
        assert await asyncio.to_thread(self.entered.wait, WAIT)


async def turns(count: int = 3) -> None:
    """Let the loop run what is ready (what the writer thread scheduled before it stopped)."""
    for _ in range(count):
        await asyncio.sleep(0)


def test_write_behind_callbacks_run_on_the_loop_only_once_the_group_is_on_disk(
        tmp_path: Path) -> None:
    path = tmp_path / "wb.sqlite"

    async def scenario() -> None:
        store = WriteBehindStore(path)
        loop_thread = threading.current_thread()
        seen: list[tuple[list[tuple[str, bytes]], bool]] = []
        done = asyncio.Event()

        def reply() -> None:
            assert threading.current_thread() is loop_thread
            seen.append((rows(path), store.uncommitted))
            done.set()

        store.put("t", "a", b"1")
        store.commit_then(reply)
        assert seen == []  # never before commit_then returns: the group is on its way
        await asyncio.wait_for(done.wait(), WAIT)
        assert seen == [([("a", b"1")], False)]
        store.close()

    run(scenario)


def test_write_behind_many_writers_share_one_group_and_callbacks_run_in_order_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "wb.sqlite"

    async def scenario() -> None:
        store = WriteBehindStore(path)
        gate = Gate(store, monkeypatch)
        ran: list[int] = []
        on_disk: dict[int, bool] = {}

        def reply(n: int) -> None:
            ran.append(n)
            on_disk[n] = (f"w{n:02d}", b"x") in rows(path)

        store.put("t", "w00", b"x")
        store.commit_then(lambda: reply(0))
        await gate.writing()  # the first group is being written; the next one forms
        for n in range(1, 21):
            store.put("t", f"w{n:02d}", b"x")
            store.commit_then(functools.partial(reply, n))
        assert store.groups_in_flight == 1 and ran == []
        done = asyncio.Event()
        store.commit_then(done.set)  # nothing new to write: waits for the groups before it
        gate.open.set()
        await asyncio.wait_for(done.wait(), WAIT)
        assert ran == list(range(21))
        assert all(on_disk.values())
        assert store.groups_written == 2  # twenty writers, one fsync
        await turns()
        assert ran == list(range(21))  # each once
        store.close()

    run(scenario)


def test_write_behind_writers_that_wait_for_their_reply_write_again_in_one_group(
        tmp_path: Path) -> None:
    writers, rounds = 10, 5

    async def scenario() -> None:
        store = WriteBehindStore(tmp_path / "wb.sqlite")
        left = {writer: rounds for writer in range(writers)}
        answered = [0]
        done = asyncio.Event()

        def write(writer: int) -> None:
            left[writer] -= 1
            store.put("t", f"{writer}-{left[writer]}", b"x")
            store.commit_then(functools.partial(replied, writer))

        def replied(writer: int) -> None:
            answered[0] += 1
            if left[writer]:
                write(writer)  # its next write, as a client does after its reply
            elif answered[0] == writers * rounds:
                done.set()

        for writer in range(writers):
            write(writer)
        await asyncio.wait_for(done.wait(), WAIT)
        # the first writer's group, then one group a round: the writers a group answered
        # commit again while its callbacks run and share the next fsync
        assert store.groups_written <= rounds + 1
        assert len(rows(tmp_path / "wb.sqlite")) == writers * rounds
        store.close()

    run(scenario)


def test_write_behind_closing_before_the_group_is_on_disk_never_runs_its_callbacks(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "wb.sqlite"

    async def scenario() -> None:
        store = WriteBehindStore(path)
        gate = Gate(store, monkeypatch)
        ran: list[str] = []
        store.put("t", "writing", b"1")
        store.commit_then(lambda: ran.append("writing"))
        await gate.writing()
        store.put("t", "forming", b"2")
        store.commit_then(lambda: ran.append("forming"))
        releaser = threading.Timer(0.01, gate.open.set)  # close waits for the writer
        releaser.start()
        store.close()
        releaser.join()
        await turns()
        assert ran == []
        # the group being written was finished; the one still forming was lost, as in a crash
        assert rows(path) == [("writing", b"1")]

    run(scenario)


def test_write_behind_a_failed_group_runs_no_callback_and_the_node_hears_of_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "wb.sqlite"

    async def scenario() -> None:
        store = WriteBehindStore(path)
        failures: list[BaseException] = []
        store.bind(asyncio.get_running_loop(), on_failure=failures.append)
        ran: list[str] = []
        store.put("t", "kept", b"1")
        store.commit_then(lambda: ran.append("kept"))
        store.commit()

        def broken(puts: bytes, deletes: bytes, **_: Any) -> None:
            raise OSError("disk full")

        assert store.redo is not None
        monkeypatch.setattr(store.redo, "append", broken)
        store.put("t", "lost", b"2")
        store.commit_then(lambda: ran.append("lost"))
        store.commit_then(lambda: ran.append("after"))  # joins the same group
        while not failures:
            await asyncio.sleep(0.001)
        assert [str(exc) for exc in failures] == ["disk full"]
        await turns()
        assert ran == ["kept"]
        with pytest.raises(StateError, match="disk full"):
            store.put("t", "more", b"3")
        with pytest.raises(StateError):
            store.commit_then(lambda: ran.append("never"))
        store.close()
        assert rows(path) == [("kept", b"1")]

    run(scenario)


def test_write_behind_writes_no_group_after_one_that_failed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "wb.sqlite"

    async def scenario() -> None:
        store = WriteBehindStore(path, max_group_writes=1)  # every commit_then: a group
        failures: list[BaseException] = []
        store.bind(asyncio.get_running_loop(), on_failure=failures.append)
        release = threading.Event()
        real = os.fdatasync
        calls = [0]

        def first_fails(fd: int) -> None:
            calls[0] += 1
            if calls[0] == 1:  # the record is written, then its sync "fails"
                assert release.wait(WAIT)
                raise OSError("disk full")
            real(fd)

        monkeypatch.setattr(os, "fdatasync", first_fails)
        ran: list[str] = []
        store.put("t", "a", b"1")
        store.commit_then(lambda: ran.append("a"))
        store.put("t", "b", b"2")
        store.commit_then(lambda: ran.append("b"))  # a second group, queued behind the first
        assert store.groups_in_flight == 2
        release.set()
        async with asyncio.timeout(WAIT):
            while not failures:
                await asyncio.sleep(0.001)
        store.close()
        assert ran == [] and calls[0] == 1  # the second group was never written
        assert rows(path) == []  # nor the failed one: its record was cut off the log

    run(scenario)


def test_write_behind_bounds_groups_in_flight_and_writes_per_group(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "wb.sqlite"

    async def scenario() -> None:
        store = WriteBehindStore(path, max_groups=1, max_group_writes=2)
        gate = Gate(store, monkeypatch)
        ran: list[str] = []
        store.put("t", "a", b"1")
        store.commit_then(lambda: ran.append("a"))
        await gate.writing()
        store.put("t", "b", b"2")
        store.commit_then(lambda: ran.append("b"))  # one write: it waits for the writer
        assert store.groups_in_flight == 1
        store.put("t", "c", b"3")
        releaser = threading.Timer(0.01, gate.open.set)
        releaser.start()
        # two writes: handed over at once, after the one group allowed in flight is written
        store.commit_then(lambda: ran.append("c"))
        assert gate.open.is_set()  # it waited: back-pressure on the caller
        assert store.groups_in_flight == 2 and ran == []
        done = asyncio.Event()
        store.commit_then(done.set)
        await asyncio.wait_for(done.wait(), WAIT)
        releaser.join()
        assert ran == ["a", "b", "c"] and store.groups_written == 2
        store.close()

    run(scenario)


def test_write_behind_without_a_loop_commits_but_cannot_call_back(tmp_path: Path) -> None:
    store = WriteBehindStore(tmp_path / "wb.sqlite")
    assert store.loop is None
    store.put("t", "a", b"1")
    with pytest.raises(StateError, match="event loop"):
        store.commit_then(lambda: None)
    store.commit()
    assert rows(tmp_path / "wb.sqlite") == [("a", b"1")]
    store.close()


# -- on a NetNode: callbacks and failures go through the node ------------------------------------


class Recorder:
    def __init__(self, env: Env) -> None:
        self.env = env
        self.replied: list[int] = []

    def start(self) -> None:
        """Nothing to start: it only answers what it is sent."""

    def stop(self) -> None:
        """Nothing to stop: it holds no timers."""

    def record(self, n: int, *, bug: bool = False) -> None:
        self.env.store.put("t", f"{n:04d}", b"x")
        self.env.store.commit_then(lambda: self._reply(n, bug))

    def _reply(self, n: int, bug: bool) -> None:
        if bug:
            raise RuntimeError("a bug in a reply")
        self.replied.append(n)


def test_a_net_node_runs_callbacks_guarded_and_stops_on_a_bug_or_a_failed_commit(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    async def node_with(path: Path) -> tuple[NetNode, WriteBehindStore]:
        store = WriteBehindStore(path)
        node = NetNode(node_id="n1", factory=Recorder, listen=None, store=store)
        await node.start()
        return node, store

    async def until(condition: Callable[[], bool]) -> None:
        async with asyncio.timeout(WAIT):
            while not condition():
                await asyncio.sleep(0.001)

    async def scenario() -> None:
        node, _store = await node_with(tmp_path / "a.sqlite")
        process = cast(Recorder, node.process)
        node.call(lambda p: cast(Recorder, p).record(1))
        await until(lambda: process.replied == [1])
        node.call(lambda p: cast(Recorder, p).record(2, bug=True))
        await until(lambda: node.failure is not None)
        assert "a bug in a reply" in str(node.failure)
        await node.close()

        node, store = await node_with(tmp_path / "b.sqlite")

        def broken(puts: bytes, deletes: bytes, **_: Any) -> None:
            raise OSError("disk gone")

        assert store.redo is not None
        monkeypatch.setattr(store.redo, "append", broken)
        node.call(lambda p: cast(Recorder, p).record(3))
        await until(lambda: node.failure is not None)
        assert isinstance(node.failure, OSError)
        assert cast(Recorder, node.process).replied == []
        await node.close()

    with caplog.at_level("CRITICAL"):  # the node logs both failures loudly, as it should
        run(scenario)


class TracingRecorder(Recorder):
    def record(self, n: int, *, bug: bool = False) -> None:
        self.env.trace("deliver", layer="test", seq=n)
        super().record(n, bug=bug)


def test_a_row_traced_before_a_write_is_in_its_file_once_the_write_is_durable(
        tmp_path: Path) -> None:
    """A kill -9 that keeps a write keeps the rows traced before it: the node's store writes
    the trace sink's queued rows to their segment before each commit (the sink's own flusher
    is off here, so only that can have written them)."""
    part = tmp_path / "trace" / "r1" / "n1.parquet"
    part.parent.mkdir(parents=True)

    def on_disk() -> list[int]:
        segments = _segments_of(part)
        files = [path for _, path in segments.completed] + (
            [segments.partial] if segments.partial is not None else [])
        return [row["seq"] for path in files for row in read_segment(path).table.to_pylist()
                if row["event"] == "deliver"]

    seen: list[int] = []

    async def scenario(store: Store) -> None:
        sink = SegmentSink(part, background=False)
        node = NetNode(node_id="n1", factory=TracingRecorder, listen=None, store=store,
                       trace=sink, run="r1")
        await node.start()
        process = cast(TracingRecorder, node.process)
        node.call(lambda p: cast(TracingRecorder, p).record(7))
        async with asyncio.timeout(WAIT):
            while process.replied != [7]:
                await asyncio.sleep(0.001)
        seen.extend(on_disk())  # the reply ran: the write is durable
        recorder = cast(TracingRecorder, node.process)
        recorder.env.trace("deliver", layer="test", seq=8)
        recorder.env.store.put("t", "8", b"x")
        recorder.env.store.commit()
        seen.extend(on_disk())
        await node.close()
        sink.close()

    for store in (WriteBehindStore(tmp_path / "wb.sqlite"), SqliteStore(tmp_path / "s.sqlite")):
        seen.clear()
        run(lambda: scenario(store))  # noqa: B023 (run at once)
        assert seen == [7, 7, 8], (type(store).__name__, seen)
        shutil.rmtree(part.parent)
        part.parent.mkdir()
