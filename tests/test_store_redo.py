"""``WriteBehindStore``'s redo log: a group is durable once its record is appended and synced,
sqlite gets it at a checkpoint, and whoever opens the store replays what the log holds.

Crash tests with a real ``kill -9`` are in ``test_store_durability.py``; here a "crash" is a
store whose log is left as a killed process leaves it (the file as written, no checkpoint).
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from gossamer.core import StateError
from gossamer.runtimes.net import SqliteStore, WriteBehindStore
from gossamer.runtimes.net.redo import RedoLog, encode_changes, read_redo, redo_path

WAIT = 30.0  # seconds: an upper bound only


def in_sqlite(path: Path, table: str = "t") -> list[tuple[str, bytes]]:
    """What the sqlite file itself holds (a raw connection: no redo log replayed)."""
    db = sqlite3.connect(path)
    try:
        return [(str(k), bytes(v)) for k, v in db.execute(
            "SELECT key, value FROM kv WHERE tbl = ? ORDER BY key", (table,))]
    finally:
        db.close()


def reopened(path: Path, table: str = "t") -> list[tuple[str, bytes]]:
    store = SqliteStore(path)
    try:
        return list(store.scan(table))
    finally:
        store.close()


def crashed(store: WriteBehindStore) -> None:
    """Leave the files as a killed process would: no checkpoint, the log released."""
    assert store._writer is not None and store.redo is not None
    store._writer.shutdown(wait=True)
    store._writer = None
    store.redo.close()
    store.inner.close()
    if store._reader is not None:
        store._reader.close()


def run(scenario: Callable[[], object]) -> None:
    asyncio.run(asyncio.wait_for(scenario(), WAIT))  # type: ignore[arg-type]


async def landed(store: WriteBehindStore) -> None:
    done = asyncio.Event()
    store.commit_then(done.set)
    await asyncio.wait_for(done.wait(), WAIT)


def test_a_landed_group_is_in_the_log_read_from_memory_and_in_sqlite_after_close(
        tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"

    async def scenario() -> None:
        store = WriteBehindStore(path)
        store.put("t", "a", b"1")
        store.put("t", "b", b"2")
        await landed(store)
        store.put("t", "a", b"3")
        store.delete("t", "b")
        await landed(store)
        assert redo_path(path).stat().st_size > 0 and store.checkpoints == 0
        assert in_sqlite(path) == []  # not checkpointed yet: durable in the log only
        assert store.unsynced_rows == 2
        assert store.get("t", "a") == b"3" and store.get("t", "b") is None
        assert list(store.scan("t")) == [("a", b"3")]
        assert reopened(path) == [("a", b"3")]  # a reader beside the live writer
        beside = SqliteStore(path)
        with pytest.raises(StateError, match="live writer"):
            beside.put("t", "c", b"4")
        assert beside.get("t", "a") == b"3" and beside.items == 1
        beside.close()
        store.close()  # a checkpoint
        assert in_sqlite(path) == [("a", b"3")]
        assert redo_path(path).stat().st_size == 0

    run(scenario)


def test_a_crash_before_the_checkpoint_is_replayed_by_whoever_opens_next(
        tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"

    async def scenario() -> None:
        store = WriteBehindStore(path)
        for n in range(5):
            store.put("t", f"k{n}", str(n).encode())
            store.put("t", "last", str(n).encode())
            if n == 3:
                store.delete("t", "k1")
            await landed(store)
        crashed(store)

    run(scenario)
    assert in_sqlite(path) == []
    expected = [("k0", b"0"), ("k2", b"2"), ("k3", b"3"), ("k4", b"4"), ("last", b"4")]
    again = WriteBehindStore(path)  # replays, then goes on
    assert list(again.scan("t")) == expected
    assert in_sqlite(path) == expected and redo_path(path).stat().st_size == 0
    again.put("t", "k5", b"5")
    again.commit()
    again.close()
    assert reopened(path) == [*expected[:4], ("k5", b"5"), ("last", b"4")]


def test_checkpoints_keep_the_log_and_the_memory_bounded(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"

    async def scenario() -> None:
        store = WriteBehindStore(path, checkpoint_bytes=2_000)
        for n in range(200):
            store.put("t", f"k{n:03d}", b"x" * 50)
            await landed(store)
            assert store.redo is not None and store.redo.size < 2_000 + 200
        await asyncio.sleep(0)  # the last checkpoint's word reaches the loop
        assert store.checkpoints >= 5
        assert store.unsynced_rows < 30  # only what came after the last checkpoint
        assert len(in_sqlite(path)) > 170
        assert list(store.scan("t")) == [(f"k{n:03d}", b"x" * 50) for n in range(200)]
        store.close()
        assert len(in_sqlite(path)) == 200

    run(scenario)


def test_values_that_are_not_text_survive_the_log(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    binary = bytes(range(256))

    async def scenario() -> None:
        store = WriteBehindStore(path)
        store.put("t", "bin", binary)
        store.put("t", "nul", b"a\x00b")
        store.put("t", "text", b"plain")
        await landed(store)
        crashed(store)

    run(scenario)
    assert reopened(path) == [("bin", binary), ("nul", b"a\x00b"), ("text", b"plain")]


def test_a_torn_last_record_is_cut_off_and_the_rest_replayed(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "s.sqlite"
    SqliteStore(path).close()
    redo = RedoLog.open(redo_path(path))
    for key, value in (("a", b"1"), ("b", b"2")):
        encoded = encode_changes({("t", key): value})
        assert encoded is not None
        redo.append(*encoded)
    whole = redo.size
    redo.close()
    with open(redo_path(path), "ab") as log:  # a third record, torn by the crash
        log.write(b"\x40\x00\x00\x00\x99\x99\x99\x99J\x05")
    assert len(read_redo(redo_path(path))) == 2
    with caplog.at_level(logging.WARNING, logger="gossamer.store"):
        assert reopened(path) == [("a", b"1"), ("b", b"2")]
    assert "torn" in caplog.text
    assert redo_path(path).stat().st_size == 0 and whole > 0


def test_a_damaged_record_followed_by_more_is_refused_and_nothing_changes(
        tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    SqliteStore(path).close()
    redo = RedoLog.open(redo_path(path))
    for key in ("a", "b", "c"):
        encoded = encode_changes({("t", key): b"v"})
        assert encoded is not None
        redo.append(*encoded)
    redo.close()
    data = bytearray(redo_path(path).read_bytes())
    data[12] ^= 0xFF  # inside the first record's payload
    redo_path(path).write_bytes(bytes(data))
    for opener in (SqliteStore, WriteBehindStore):
        with pytest.raises(StateError, match="damaged at byte 0"):
            opener(path)
    assert redo_path(path).read_bytes() == bytes(data) and in_sqlite(path) == []


def test_one_writer_per_store(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    first = WriteBehindStore(path)
    with pytest.raises(StateError, match="another live process"):
        WriteBehindStore(path)
    first.close()
    WriteBehindStore(path).close()  # the lock went with the first


def test_a_failure_after_the_group_is_durable_stops_the_store_and_keeps_the_group(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "s.sqlite"

    async def scenario() -> None:
        store = WriteBehindStore(path)
        failures: list[BaseException] = []
        store.bind(asyncio.get_running_loop(), on_failure=failures.append)

        def broken(puts: bytes, deletes: bytes) -> None:
            raise OSError("sqlite's disk full")

        monkeypatch.setattr(store.inner, "apply_json", broken)
        ran: list[str] = []
        store.put("t", "a", b"1")
        store.commit_then(lambda: ran.append("a"))
        async with asyncio.timeout(WAIT):
            while not failures:
                await asyncio.sleep(0.001)
        assert ran == ["a"]  # durable in the log before sqlite failed: acknowledged, kept
        with pytest.raises(StateError, match="disk full"):
            store.put("t", "b", b"2")
        store.close()  # no checkpoint after a failure: the log stays whole

    run(scenario)
    assert redo_path(path).stat().st_size > 0
    assert reopened(path) == [("a", b"1")]


def test_a_memory_store_has_no_log() -> None:
    store = WriteBehindStore(":memory:")
    assert store.redo is None
    store.put("t", "a", b"1")
    store.commit()
    assert list(store.scan("t")) == [("a", b"1")]
    store.close()
