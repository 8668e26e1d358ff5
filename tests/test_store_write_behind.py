"""Bulk writes to the sqlite store (``apply``, ``apply_json``) and ``WriteBehindStore``, whose
commits are written by a thread of its own: reads see every write, a commit is durable once the
writer is done, what was never handed over is lost on close (a crash), and a writer failure is
raised, not swallowed."""

from __future__ import annotations

import threading
from pathlib import Path

import orjson
import pytest

from gossamer.core import StateError
from gossamer.runtimes.net import SqliteStore, WriteBehindStore
from gossamer.runtimes.sim import MemoryStore

WAIT = 20.0  # seconds: an upper bound only


def rows(path: Path, table: str) -> list[tuple[str, bytes]]:
    store = SqliteStore(path)
    try:
        return list(store.scan(table))
    finally:
        store.close()


def test_apply_puts_and_deletes_in_bulk_on_every_store(tmp_path: Path) -> None:
    for store in (SqliteStore(tmp_path / "a.sqlite"), MemoryStore()):
        store.put("t", "gone", b"0")
        store.put("t", "kept", b"1")
        store.apply({("t", "new"): b"2", ("t", "gone"): None, ("u", "x"): b"3",
                     ("t", "never"): None})
        store.commit()
        assert list(store.scan("t")) == [("kept", b"1"), ("new", b"2")]
        assert list(store.scan("u")) == [("x", b"3")]
        with pytest.raises(TypeError):
            store.apply({("t", "k"): "not bytes"})  # type: ignore[dict-item]
        store.close()


def test_apply_json_writes_text_values_exactly(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    store = SqliteStore(path)
    store.put("t", "old", b"x")
    values = {"a": '{"n":1}', "é": "ünïcode ✓", "empty": ""}
    store.apply_json(orjson.dumps([("t", key, value) for key, value in values.items()]),
                     orjson.dumps([("t", "old"), ("t", "absent")]))
    store.commit()
    store.close()
    assert rows(path, "t") == sorted((key, value.encode()) for key, value in values.items())


def test_write_behind_reads_see_writes_and_a_commit_is_durable_once_written(
        tmp_path: Path) -> None:
    path = tmp_path / "wb.sqlite"
    store = WriteBehindStore(path)
    store.put("t", "a", b"1")
    store.put("t", "b", b"2")
    store.apply({("t", "c"): b"3", ("t", "b"): None})
    assert store.get("t", "b") is None and store.get("t", "c") == b"3"
    assert list(store.scan("t")) == [("a", b"1"), ("c", b"3")]
    assert store.uncommitted
    store.commit()
    store.put("t", "d", b"4")  # while the group may still be being written
    assert store.get("t", "a") == b"1" and store.get("t", "d") == b"4"
    assert list(store.scan("t")) == [("a", b"1"), ("c", b"3"), ("d", b"4")]
    store.wait()
    assert rows(path, "t") == [("a", b"1"), ("c", b"3")]  # "d" was not handed over
    store.commit()
    store.wait()
    assert not store.uncommitted
    assert rows(path, "t") == [("a", b"1"), ("c", b"3"), ("d", b"4")]
    store.close()


def test_write_behind_close_loses_what_was_not_handed_over_and_then_refuses(
        tmp_path: Path) -> None:
    path = tmp_path / "wb.sqlite"
    store = WriteBehindStore(path)
    store.put("t", "kept", b"1")
    store.commit()
    store.put("t", "lost", b"2")
    store.close()  # waits for "kept", drops "lost": what a crash does
    assert rows(path, "t") == [("kept", b"1")]
    with pytest.raises(StateError):
        store.put("t", "x", b"3")
    with pytest.raises(StateError):
        store.commit()
    store.close()  # idempotent
    again = WriteBehindStore(path)
    assert again.get("t", "kept") == b"1" and again.get("t", "lost") is None
    again.close()


def test_write_behind_writes_values_that_are_not_text_row_by_row(tmp_path: Path) -> None:
    path = tmp_path / "wb.sqlite"
    store = WriteBehindStore(path)
    binary = bytes(range(256))
    store.put("t", "bin", binary)
    store.put("t", "text", b"plain")
    store.commit()
    store.wait()
    store.put("t", "nul", b"a\x00b")  # UTF-8, but sqlite's text functions stop at a NUL
    store.commit()
    store.close()
    assert rows(path, "t") == [("bin", binary), ("nul", b"a\x00b"), ("text", b"plain")]


def test_write_behind_one_group_at_a_time_and_a_writer_failure_is_raised(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = WriteBehindStore(tmp_path / "wb.sqlite")
    release = threading.Event()
    started = threading.Event()
    real = store.inner.apply_json

    def slow_apply(puts: bytes, deletes: bytes) -> None:
        started.set()
        assert release.wait(WAIT)
        real(puts, deletes)

    monkeypatch.setattr(store.inner, "apply_json", slow_apply)
    store.put("t", "first", b"1")
    store.commit()
    assert started.wait(WAIT)
    store.put("t", "second", b"2")
    handed = threading.Thread(target=store.commit)  # waits for the first group
    handed.start()
    handed.join(0.05)
    assert handed.is_alive()
    release.set()
    handed.join(WAIT)
    assert not handed.is_alive()
    store.wait()
    assert store.get("t", "second") == b"2"

    def broken(puts: bytes, deletes: bytes) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(store.inner, "apply_json", broken)
    store.put("t", "third", b"3")
    store.commit()
    with pytest.raises(OSError, match="disk full"):
        store.wait()
    store.close()
