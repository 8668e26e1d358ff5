"""Atomic multicast on a group-committing store (``WriteBehindStore``): a member's YES leaves
only once its write of the message is on disk, the sender's decision only once it is on disk,
and many writes share one commit; the sequence numbers SRM names items with are committed once
per lease, and a restart skips past the lease it had."""

from __future__ import annotations

import asyncio
import random
import socket
import threading
from pathlib import Path
from typing import Any

import pytest

from gossamer.core.env import DurableSequence, put_json
from gossamer.core.errors import ConfigError
from gossamer.core.trace import MemorySink
from gossamer.protocols.dissemination.srm import SrmData
from gossamer.protocols.membership.srm_group import GroupJoin
from gossamer.protocols.ordering.atomic import (
    CODEC,
    AtomicProcess,
    AtomicProcessConfig,
    Data,
    OutcomeQuery,
    Vote,
)
from gossamer.protocols.ordering.atomic.records import payload_of
from gossamer.runtimes.net import (
    MulticastEnv,
    SqliteStore,
    WriteBehindStore,
    resolve_group_key,
)
from gossamer.runtimes.net.store import _Group
from gossamer.runtimes.sim import MemoryStore
from gossamer.services.atomic.api import AtomicGroup, Delivered
from gossamer.testing import FakeEnv

WAIT = 20.0


def _group() -> tuple[str, int]:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"239.255.{random.randrange(1, 255)}.{random.randrange(1, 255)}", int(port)


class HeldStore(WriteBehindStore):
    """A ``WriteBehindStore`` whose writer, once it is given a group holding a pending atomic
    message, stops before writing it until ``release`` is set (``holding`` says it is there)."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.holding = threading.Event()
        self.release = threading.Event()

    def _write(self, group: _Group) -> None:
        if any(table == "atomic.pending" for table, _ in group.writes):
            self.holding.set()
            if not self.release.wait(WAIT):
                raise TimeoutError("the test never released the held commit")
        super()._write(group)


async def _until(condition: object, what: str) -> None:
    try:
        async with asyncio.timeout(WAIT):
            while not condition():  # type: ignore[operator]
                await asyncio.sleep(0.005)
    except TimeoutError:
        raise AssertionError(f"not within {WAIT} s: {what}") from None


def test_no_yes_leaves_a_member_until_its_write_of_the_message_is_on_disk(
        tmp_path: Path) -> None:
    async def main() -> None:
        group = _group()
        key = resolve_group_key(None, "127.0.0.1")
        config = AtomicProcessConfig(group=f"{group[0]}:{group[1]}", session_period=0.05)
        held = HeldStore(tmp_path / "b.sqlite")
        sinks = {"a": MemorySink(), "b": MemorySink()}
        stores = {"a": WriteBehindStore(tmp_path / "a.sqlite"), "b": held}
        envs = {name: MulticastEnv(name, group=group, key=key, codec=CODEC,
                                   store=stores[name], trace=sinks[name])
                for name in ("a", "b")}
        processes: dict[str, AtomicProcess] = {}
        outcomes: dict[str, bool] = {}

        def build(env: MulticastEnv) -> AtomicProcess:
            process = processes[env.node] = AtomicProcess(env, config)
            return process

        try:
            for env in envs.values():
                await env.open(build)
            a, b = processes["a"], processes["b"]
            a.atomic.on_outcome = lambda mid, committed: outcomes.__setitem__(mid, committed)
            await _until(lambda: a.group.members() == ("a", "b") == b.group.members(),
                         "both members see the group")
            mid = a.atomic.send("hello")
            await asyncio.to_thread(held.holding.wait, WAIT)
            assert held.holding.is_set(), "b never committed the message"
            # b holds the message and its commit is under way, not done: no YES has left b
            assert not [row for row in sinks["b"].rows if row[4] == "vote"]
            assert mid not in outcomes
            held.release.set()
            await _until(lambda: mid in outcomes, "a decides")
            assert outcomes[mid] is True
            votes = [row for row in sinks["b"].rows if row[4] == "vote"]
            assert [row[5] for row in votes] == [mid]
            assert held.get("atomic.pending", mid) is not None or \
                held.get("atomic.delivered", mid) is not None
        finally:
            held.release.set()
            for env in envs.values():
                env.close_group()
            await asyncio.sleep(0)
            for store in stores.values():
                store.close()

    asyncio.run(main())


def _member(node: str, other: str) -> tuple[AtomicProcess, FakeEnv]:
    """A member on ``FakeEnv``: a group commit lands (and its callbacks run) only at the next
    ``run_due``, so until then nothing that waits for it has happened."""
    env = FakeEnv(node, seed=3)
    process = AtomicProcess(env, AtomicProcessConfig(group="g", session_period=1e6))
    process.start()
    process.on_message(other, GroupJoin(other))
    env.run_due()
    env.take_multicast()
    return process, env


def _items(env: FakeEnv, kind: str) -> list[str]:
    return [str(msg.payload["mid"]) for _, msg in env.take_multicast()
            if isinstance(msg, SrmData) and msg.payload.get("k") == kind]


def test_the_decision_leaves_the_sender_only_once_it_is_on_disk() -> None:
    process, env = _member("a", "b")
    decided: list[tuple[str, bool]] = []
    process.atomic.on_outcome = lambda mid, committed: decided.append((mid, committed))
    mid = process.atomic.send("x")
    assert _items(env, "data") == [mid]
    process.on_message("b", SrmData("b", 1, payload_of(Vote(mid, "b", True))))
    assert _items(env, "outcome") == [] and decided == []  # decided, not yet on disk
    assert env.store.get("atomic.outcome", mid) is not None  # written, in the group
    # a vote repeated, or a query, while the record is on its way decides nothing again
    process.on_message("b", SrmData("b", 2, payload_of(Vote(mid, "b", True))))
    process.on_message("b", OutcomeQuery("b", mid))
    assert _items(env, "outcome") == [] and decided == []
    env.crash()  # ... and a crash now loses the decision: it never left
    assert env.store.get("atomic.outcome", mid) is None
    process, env = _member("a", "b")
    process.atomic.on_outcome = lambda mid, committed: decided.append((mid, committed))
    mid = process.atomic.send("y")
    process.on_message("b", SrmData("b", 3, payload_of(Vote(mid, "b", True))))
    env.run_due()
    assert _items(env, "outcome") == [mid]
    assert decided == [(mid, True)]


def test_a_member_votes_for_many_messages_after_one_commit() -> None:
    process, env = _member("b", "a")
    for seq in (1, 2, 3):
        process.on_message("a", SrmData("a", seq, payload_of(Data(f"a:{seq}", ("a", "b"),
                                                                      seq))))
    assert _items(env, "vote") == []  # three writes on their way to disk, no vote yet
    env.run_due()  # one group lands
    assert _items(env, "vote") == ["a:1", "a:2", "a:3"]


def test_a_durable_sequence_commits_once_per_lease_and_a_restart_skips_the_rest() -> None:
    store = MemoryStore()
    commits = 0
    inner_commit = store.commit

    def counting_commit() -> None:
        nonlocal commits
        commits += 1
        inner_commit()

    store.commit = counting_commit  # type: ignore[method-assign]
    sequence = DurableSequence(store, "s", lease=4, restart_gap=100)
    assert [sequence.take() for _ in range(9)] == list(range(1, 10))
    assert commits == 3  # at 1, 5 and 9
    restarted = DurableSequence(store, "s", lease=4, restart_gap=100)
    assert restarted.take() == 13 + 100  # past the lease taken at 9, and the gap
    once = DurableSequence(MemoryStore(), "s")
    assert [once.take() for _ in range(3)] == [1, 2, 3]
    with pytest.raises(ValueError):
        DurableSequence(store, "s", lease=0)
    with pytest.raises(ValueError):
        DurableSequence(store, "s", restart_gap=-1)


def test_the_receive_buffer_is_asked_for_and_the_grant_recorded() -> None:
    async def main() -> None:
        key = resolve_group_key(None, "127.0.0.1")
        with pytest.raises(ConfigError):
            MulticastEnv("a", group=_group(), key=key, codec=CODEC, store=MemoryStore(),
                         recv_buffer=0)
        env = MulticastEnv("a", group=_group(), key=key, codec=CODEC, store=MemoryStore(),
                           recv_buffer=65_536)
        config = AtomicProcessConfig(group=env.group_name, session_period=1.0)
        await env.open(lambda env: AtomicProcess(env, config))
        try:
            assert env.recv_buffer_granted is not None
            assert env.recv_buffer_granted >= 65_536  # Linux grants twice what it is asked
        finally:
            env.close_group()
            await asyncio.sleep(0)

    asyncio.run(main())


def test_a_read_does_not_wait_for_the_group_being_written(tmp_path: Path) -> None:
    """The atomic layer reads its delivery marks on every message: a read waiting for the
    writer's fsync would stall the loop once per message and undo the group commit."""
    async def main() -> None:
        store = WriteBehindStore(tmp_path / "s.sqlite")
        store.put("t", "old", b"1")
        store.commit()
        writing, release = threading.Event(), threading.Event()
        inner_commit = store.inner.commit

        def slow_commit() -> None:  # on the writer thread, holding the store's lock
            writing.set()
            release.wait(WAIT)
            inner_commit()

        store.inner.commit = slow_commit  # type: ignore[method-assign]
        landed = asyncio.Event()
        store.put("t", "new", b"2")
        store.commit_then(landed.set)
        await asyncio.to_thread(writing.wait, WAIT)
        deadline = threading.Timer(WAIT, release.set)  # a read that waits ends here, late
        deadline.start()
        try:
            assert store.get("t", "old") == b"1" and store.get("t", "new") == b"2"
            assert dict(store.scan("t")) == {"old": b"1", "new": b"2"}
            assert not release.is_set(), "a read waited for the group being written"
        finally:
            release.set()
            deadline.cancel()
        await asyncio.wait_for(landed.wait(), WAIT)
        store.close()

    asyncio.run(main())


class FlushedSink(MemorySink):
    """Rows count as written only once flushed (as a segment file holds them after kill -9)."""

    def __init__(self) -> None:
        super().__init__()
        self.flushed = 0

    def flush(self) -> None:
        self.flushed = len(self.rows)


def test_the_deliver_row_is_flushed_before_the_application_hears_of_it(
        tmp_path: Path) -> None:
    async def main() -> None:
        sink = FlushedSink()
        address = "{}:{}".format(*_group())
        member = AtomicGroup(address, data_dir=tmp_path / "a", session_period=0.1,
                             trace=sink)
        heard: list[tuple[str, bool]] = []

        def delivered(message: Delivered) -> None:
            written = sink.rows[:sink.flushed]
            heard.append((message.mid, any(row[4] == "deliver" and row[5] == message.mid
                                           for row in written)))

        member.on_delivered = delivered
        await member.join()
        try:
            sent = await member.send("hi", timeout=WAIT)  # a group of one: it decides alone
            assert sent.committed
            await _until(lambda: bool(heard), "the delivery")
            assert heard == [(sent.mid, True)]
        finally:
            await member.leave()

    asyncio.run(main())


class DiesAfterMarking(WriteBehindStore):
    """A ``WriteBehindStore`` whose process dies the moment a group holding a delivery mark is
    on disk: that group's callbacks and every later one never run, as after a kill -9 then."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.died = False

    def _landed(self, group: Any) -> None:
        if self.died or any(table == "atomic.delivered" for table, _ in group.writes):
            self.died = True
            return
        super()._landed(group)


def test_a_message_marked_delivered_on_disk_was_heard_by_the_application(
        tmp_path: Path) -> None:
    """Found by the 1,000-message kill -9 run: delivered from the callback of the group commit
    of its mark, a message was lost when the process died between the two."""
    async def main() -> None:
        group = _group()
        key = resolve_group_key(None, "127.0.0.1")
        config = AtomicProcessConfig(group=f"{group[0]}:{group[1]}", session_period=0.05)
        dying = DiesAfterMarking(tmp_path / "b.sqlite")
        stores = {"a": WriteBehindStore(tmp_path / "a.sqlite"), "b": dying}
        envs = {name: MulticastEnv(name, group=group, key=key, codec=CODEC,
                                   store=stores[name]) for name in ("a", "b")}
        processes: dict[str, AtomicProcess] = {}
        heard: list[str] = []

        def build(env: MulticastEnv) -> AtomicProcess:
            process = processes[env.node] = AtomicProcess(env, config)
            if env.node == "b":
                process.atomic.on_deliver = lambda mid, origin, body, position: heard.append(mid)
            return process

        try:
            for env in envs.values():
                await env.open(build)
            a, b = processes["a"], processes["b"]
            await _until(lambda: a.group.members() == ("a", "b") == b.group.members(),
                         "both members see the group")
            a.atomic.send("hello")
            await _until(lambda: dying.died, "b marks the message delivered")
        finally:
            for env in envs.values():
                env.close_group()
            await asyncio.sleep(0)
            for store in stores.values():
                store.close()
        on_disk = SqliteStore(tmp_path / "b.sqlite")
        try:
            marked = [mid for mid, _ in on_disk.scan("atomic.delivered")]
        finally:
            on_disk.close()
        assert marked and set(marked) <= set(heard), (marked, heard)

    asyncio.run(main())


def test_a_sender_that_died_between_its_decision_and_its_delivery_delivers_on_restart() -> None:
    env = FakeEnv("a", seed=4)
    mid = "a:1"
    put_json(env.store, "atomic.pending", mid, {"snap": ["a", "b"], "body": "x"})
    put_json(env.store, "atomic.outcome", mid, {"commit": True, "snap": ["a", "b"]})
    env.store.commit()  # what the decision's commit left: the outcome, the data still pending
    process = AtomicProcess(env, AtomicProcessConfig(group="g", session_period=1e6))
    heard: list[str] = []
    process.atomic.on_deliver = lambda mid, origin, body, position: heard.append(mid)
    process.start()
    env.run_due()
    assert heard == [mid]
    assert list(env.store.scan("atomic.pending")) == []
