"""Bulk writes to the sqlite store (``apply``, ``apply_json``) and ``WriteBehindStore``, whose
commits are written by a thread of its own: reads see every write, ``commit()`` returns once the
writer has the group on disk, what was not committed is lost on close (a crash), and a failed
commit is raised, not swallowed. ``commit_then`` is in ``test_store_commit_then.py``."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from gossamer.core import ConfigError, StateError
from gossamer.runtimes.net import SqliteStore, WriteBehindStore
from gossamer.runtimes.sim import MemoryStore


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


def test_write_behind_reads_see_writes_and_commit_returns_once_they_are_on_disk(
        tmp_path: Path) -> None:
    path = tmp_path / "wb.sqlite"
    store = WriteBehindStore(path)
    store.put("t", "a", b"1")
    store.put("t", "b", b"2")
    store.apply({("t", "c"): b"3", ("t", "b"): None})
    assert store.get("t", "b") is None and store.get("t", "c") == b"3"
    assert list(store.scan("t")) == [("a", b"1"), ("c", b"3")]
    assert store.uncommitted
    store.commit()  # blocks until the writer thread committed (and synced) the group
    assert not store.uncommitted
    assert rows(path, "t") == [("a", b"1"), ("c", b"3")]  # another connection sees it
    store.put("t", "d", b"4")
    assert store.get("t", "a") == b"1" and store.get("t", "d") == b"4"
    assert list(store.scan("t")) == [("a", b"1"), ("c", b"3"), ("d", b"4")]
    assert rows(path, "t") == [("a", b"1"), ("c", b"3")]  # "d" is not committed
    store.commit()
    assert rows(path, "t") == [("a", b"1"), ("c", b"3"), ("d", b"4")]
    assert store.groups_written == 2
    store.close()


def test_write_behind_close_loses_what_was_not_committed_and_then_refuses(
        tmp_path: Path) -> None:
    path = tmp_path / "wb.sqlite"
    store = WriteBehindStore(path)
    store.put("t", "kept", b"1")
    store.commit()
    store.put("t", "lost", b"2")
    store.close()  # drops "lost": what a crash does
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
    store.put("t", "nul", b"a\x00b")  # UTF-8, but sqlite's text functions stop at a NUL
    store.commit()
    store.close()
    assert rows(path, "t") == [("bin", binary), ("nul", b"a\x00b"), ("text", b"plain")]


def test_write_behind_a_failed_commit_is_raised_and_the_store_refuses_more(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "wb.sqlite"
    store = WriteBehindStore(path)
    store.put("t", "first", b"1")
    store.commit()

    def broken(puts: bytes, deletes: bytes, **_: object) -> None:
        raise OSError("disk full")

    assert store.redo is not None
    monkeypatch.setattr(store.redo, "append", broken)
    store.put("t", "second", b"2")
    with pytest.raises(OSError, match="disk full"):
        store.commit()
    with pytest.raises(StateError, match="disk full"):
        store.put("t", "third", b"3")
    with pytest.raises(StateError):
        store.commit()
    store.close()
    assert rows(path, "t") == [("first", b"1")]


def test_write_behind_bounds_are_checked() -> None:
    for bad in ({"max_groups": 0}, {"max_group_writes": 0}, {"max_groups": 1.5}):
        with pytest.raises(ConfigError):
            WriteBehindStore(**bad)
