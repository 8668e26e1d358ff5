"""The hub keeper's group commit (``_GroupCommitStore``): writes wait in memory and reach the
runtime's store as one group every ``commit_interval`` (or at once past ``max_pending``), made
durable by the store's ``commit_then``; ``commit()`` is durable when it returns. On a network
the group is written and synced by ``WriteBehindStore``'s thread, never by the event loop."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest

from gossamer.protocols.replica import Data, HubKeeper, KeeperConfig, crc_of
from gossamer.protocols.replica.keeper import _GroupCommitStore
from gossamer.protocols.replica.wire import HUB_ID
from gossamer.runtimes.net import SqliteStore, WriteBehindStore
from gossamer.runtimes.net.loopenv import LoopEnv
from gossamer.runtimes.sim import MemoryStore
from gossamer.testing import FakeEnv

WAIT = 20.0  # seconds: an upper bound only


def keys(store: MemoryStore | SqliteStore, table: str = "t") -> list[str]:
    return [key for key, _ in store.scan(table)]


def chain(writer: str, seqs: range) -> list[Data]:
    """``writer``'s consecutive writes of its own object."""
    messages = []
    for seq in seqs:
        rev, content = f"{writer}-{seq}", {"seq": seq}
        messages.append(Data(id=writer, key=f"k-{writer}", old_value=None if seq == 1
                             else f"{writer}-{seq - 1}", value=rev,
                             crc=crc_of(f"k-{writer}", rev, content), vector={writer: seq},
                             data=content))
    return messages


def test_a_group_waits_for_its_interval_or_for_max_pending_and_lands_durably() -> None:
    inner = MemoryStore()
    env = FakeEnv(HUB_ID, store=inner)
    store = _GroupCommitStore(inner, env, 0.05, max_pending=3)
    ran: list[str] = []
    store.put("t", "a", b"1")
    store.put("t", "b", b"2")
    store.delete("t", "a")
    store.commit_then(lambda: ran.append("first"))  # a timer: nothing reaches the store yet
    assert store.get("t", "b") == b"2" and store.get("t", "a") is None
    assert keys(inner) == [] and env.pending_timers() == [0.05]
    store.put("t", "c", b"3")  # the third pending write: the group goes now
    assert store.groups == 1 and ran == []
    env.run_due()  # the inner store's group lands
    assert ran == ["first"] and store.groups_durable == 1
    inner.crash()
    assert keys(inner) == ["b", "c"]
    store.put("t", "d", b"4")
    store.commit_then(lambda: ran.append("second"))
    env.advance(0.04)
    inner.crash()  # before the interval: "d" was never handed over
    assert keys(inner) == ["b", "c"] and store.get("t", "d") == b"4"
    env.advance(1.0)  # the interval's group, then its landing
    assert ran == ["first", "second"]
    inner.crash()
    assert keys(inner) == ["b", "c", "d"]


def test_a_crash_while_the_group_is_on_its_way_loses_it_and_its_callbacks() -> None:
    inner = MemoryStore()
    env = FakeEnv(HUB_ID, store=inner)
    store = _GroupCommitStore(inner, env, 0.05)
    ran: list[str] = []
    store.put("t", "a", b"1")
    store.commit_then(lambda: ran.append("a"))
    store.flush()  # handed to the inner store; its landing is the next event
    env.crash()
    env.advance(1.0)
    assert ran == [] and keys(inner) == []


def test_commit_is_durable_when_it_returns() -> None:
    inner = MemoryStore()
    env = FakeEnv(HUB_ID, store=inner)
    store = _GroupCommitStore(inner, env, 0.05)
    ran: list[str] = []
    store.put("t", "a", b"1")
    store.commit_then(lambda: ran.append("a"))
    store.put("t", "b", b"2")
    store.commit()
    inner.crash()  # right after: nothing of it is lost
    assert keys(inner) == ["a", "b"]
    assert ran == []  # its callback belonged to the group, which the crash took with it


def test_writes_added_just_before_a_group_join_that_group() -> None:
    inner = MemoryStore()
    env = FakeEnv(HUB_ID, store=inner)
    store = _GroupCommitStore(inner, env, 0.05, max_pending=2)
    flushes: list[int] = []

    def last_writes() -> None:  # more writes than max_pending: no group in the middle
        flushes.append(len(flushes))
        for number in range(5):
            store.put("t", f"late{number}", b"x")

    store.before_flush = last_writes
    store.put("t", "a", b"1")
    store.put("t", "b", b"2")  # the second write: a group, once
    assert flushes == [0] and store.groups == 1
    env.run_due()
    inner.crash()
    assert keys(inner) == ["a", "b"] + [f"late{n}" for n in range(5)]


def test_the_keeper_on_a_network_store_commits_in_groups_off_the_event_loop(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "hub.sqlite"
    committed_on: list[str] = []

    async def scenario() -> None:
        store = WriteBehindStore(path)
        assert store.redo is not None
        real_append = store.redo.append

        def append(puts: bytes, deletes: bytes, **options: Any) -> None:  # a group made durable
            committed_on.append(threading.current_thread().name)
            real_append(puts, deletes, **options)

        monkeypatch.setattr(store.redo, "append", append)
        env = LoopEnv(HUB_ID, send=lambda dst, msg: None, store=store)
        keeper = HubKeeper(env, lambda msg: None, config=KeeperConfig(commit_interval=0.01))
        keeper.start()
        messages = chain("a", range(1, 201)) + chain("b", range(1, 101))
        for n, msg in enumerate(messages):
            assert keeper.handle(msg) is msg
            if n % 50 == 0:
                await asyncio.sleep(0.002)  # the next messages arrive a little later
        async with asyncio.timeout(WAIT):
            while keeper.store.groups_durable < keeper.store.groups or not keeper.store.groups:
                await asyncio.sleep(0.005)
        assert 1 <= keeper.store.groups < len(messages) // 10  # groups, not a commit a message
        assert store.groups_written <= keeper.store.groups
        keeper.stop()  # blocks until the last group is on disk
        store.close()

    asyncio.run(scenario())
    assert committed_on and all(name.startswith("store-writer") for name in committed_on)
    reopened = SqliteStore(path)  # the file as the next hub reads it
    keeper = HubKeeper(FakeEnv(HUB_ID, store=reopened), lambda msg: None)
    assert keeper.logged("a") == (1, 200) and keeper.logged("b") == (1, 100)
    assert keeper.replica.causal.vector == {"a": 200, "b": 100}
    assert keeper.replica.revision("k-a") == "a-200"
    reopened.close()
