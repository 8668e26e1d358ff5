"""The network runtime's durable store: one sqlite table of (table, key) -> bytes.

Reads see uncommitted writes of the same store; closing without ``commit()`` loses them, which
is exactly what a crash does to a real node. ``WriteBehindStore`` commits on a thread of its
own, for a process that commits in groups and can lose the last group in a crash.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import orjson

from ...core.env import Store, scan_with_pending
from ...core.errors import ConfigError, StateError

__all__ = ["SqliteStore"]

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS kv ("
    "tbl TEXT NOT NULL, key TEXT NOT NULL, value BLOB NOT NULL, PRIMARY KEY (tbl, key))"
)
_UPSERT = ("INSERT INTO kv (tbl, key, value) VALUES (?, ?, ?) "
           "ON CONFLICT (tbl, key) DO UPDATE SET value = excluded.value")
_DELETE = "DELETE FROM kv WHERE tbl = ? AND key = ?"
_UPSERT_JSON = ("INSERT INTO kv (tbl, key, value) "
                "SELECT value ->> 0, value ->> 1, CAST(value ->> 2 AS BLOB) FROM json_each(?) "
                "WHERE true ON CONFLICT (tbl, key) DO UPDATE SET value = excluded.value")
_DELETE_JSON = ("DELETE FROM kv WHERE (tbl, key) IN "
                "(SELECT value ->> 0, value ->> 1 FROM json_each(?))")


class SqliteStore(Store):
    """``Store`` on a sqlite file (WAL, synchronous=NORMAL), or ``":memory:"``."""

    def __init__(self, path: str | Path = ":memory:", *, any_thread: bool = False) -> None:
        """``any_thread``: the connection may be used from other threads than this one (one
        at a time: the caller serialises, as ``WriteBehindStore`` does)."""
        if not isinstance(path, str | Path) or str(path) == "":
            raise ConfigError(f"store path must be a non-empty str or Path, got {path!r}")
        self.path = str(path)
        # autocommit mode: transactions are opened explicitly on the first write, so a close
        # without commit() rolls back instead of committing behind our back
        self._db: sqlite3.Connection | None = sqlite3.connect(
            self.path, isolation_level=None, check_same_thread=not any_thread)
        if self.path != ":memory:":
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute(_SCHEMA)

    def _open_db(self) -> sqlite3.Connection:
        if self._db is None:
            raise StateError(f"store {self.path}: closed, cannot be used")
        return self._db

    def _writing(self) -> sqlite3.Connection:
        db = self._open_db()
        if not db.in_transaction:
            db.execute("BEGIN")
        return db

    def get(self, table: str, key: str) -> bytes | None:
        row = self._open_db().execute(
            "SELECT value FROM kv WHERE tbl = ? AND key = ?", (table, key)
        ).fetchone()
        return None if row is None else bytes(row[0])

    def put(self, table: str, key: str, value: bytes) -> None:
        if not isinstance(value, bytes):
            raise TypeError(f"store values are bytes, got {type(value).__name__}")
        self._writing().execute(_UPSERT, (table, key, value))

    def delete(self, table: str, key: str) -> None:
        self._writing().execute(_DELETE, (table, key))

    def apply(self, changes: Mapping[tuple[str, str], bytes | None]) -> None:
        """The changes in two statements (``executemany``): the puts, then the deletes."""
        puts: list[tuple[str, str, bytes]] = []
        deletes: list[tuple[str, str]] = []
        for (table, key), value in changes.items():
            if value is None:
                deletes.append((table, key))
            elif isinstance(value, bytes):
                puts.append((table, key, value))
            else:
                raise TypeError(f"store values are bytes, got {type(value).__name__}")
        db = self._writing()
        if puts:
            db.executemany(_UPSERT, puts)
        if deletes:
            db.executemany(_DELETE, deletes)

    def apply_json(self, puts: bytes, deletes: bytes) -> None:
        """The changes as two JSON arrays, ``[[table, key, value as UTF-8 text], ...]`` and
        ``[[table, key], ...]``, in two statements: sqlite runs each whole (``json_each``)
        without holding the GIL, where ``executemany`` takes it back for every row."""
        db = self._writing()
        db.execute(_UPSERT_JSON, (puts,))
        db.execute(_DELETE_JSON, (deletes,))

    def scan(self, table: str) -> Iterator[tuple[str, bytes]]:
        # fetched eagerly: the caller may write to the store while it iterates; sqlite's
        # BINARY collation orders UTF-8 like Python orders str (by code point)
        rows = self._open_db().execute(
            "SELECT key, value FROM kv WHERE tbl = ? ORDER BY key", (table,)
        ).fetchall()
        return iter([(str(key), bytes(value)) for key, value in rows])

    def commit(self) -> None:
        db = self._open_db()
        if db.in_transaction:
            db.execute("COMMIT")

    @property
    def uncommitted(self) -> bool:
        """True while there are writes that a crash would lose."""
        return self._db is not None and self._db.in_transaction

    @property
    def items(self) -> int:
        """How many (table, key) rows the store holds, uncommitted writes included."""
        row = self._open_db().execute("SELECT COUNT(*) FROM kv").fetchone()
        return int(row[0])

    @property
    def size(self) -> int:
        """Bytes the store holds: table name, key (UTF-8) and value of every row (not the
        file's size, which has pages and the WAL; the same measure as ``MemoryStore.size``)."""
        row = self._open_db().execute(
            "SELECT COALESCE(SUM(LENGTH(CAST(tbl AS BLOB)) + LENGTH(CAST(key AS BLOB)) "
            "+ LENGTH(value)), 0) FROM kv").fetchone()
        return int(row[0])

    @property
    def closed(self) -> bool:
        return self._db is None

    def close(self) -> None:
        """Close; uncommitted writes are rolled back (lost), as in a crash."""
        db, self._db = self._db, None
        if db is not None:
            db.close()


class WriteBehindStore(Store):
    """A ``SqliteStore`` written by a thread of its own.

    Writes wait in memory (reads see them); ``commit()`` hands them to the writer thread and
    returns at once: they are durable when the writer has committed them (``wait()``; sqlite
    does that work without holding the GIL, so the caller's thread goes on meanwhile). One
    group is written at a time: a ``commit()`` while the previous group is still being written
    waits for it, which bounds what is held to two groups. ``close()`` writes nothing more: what
    was not handed over is lost, as in a crash. A writer failure is raised by the next call.
    """

    def __init__(self, path: str | Path = ":memory:") -> None:
        self.inner = SqliteStore(path, any_thread=True)
        self.path = self.inner.path
        self._lock = threading.Lock()  # the inner store: one thread at a time
        self._pending: dict[tuple[str, str], bytes | None] = {}  # None: deleted
        self._writing: dict[tuple[str, str], bytes | None] = {}  # the group being written
        self._written: Future[None] | None = None
        self._writer: ThreadPoolExecutor | None = ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="store-writer")

    def get(self, table: str, key: str) -> bytes | None:
        row = (table, key)
        if row in self._pending:
            return self._pending[row]
        if row in self._writing:
            return self._writing[row]
        with self._lock:
            return self.inner.get(table, key)

    def put(self, table: str, key: str, value: bytes) -> None:
        if not isinstance(value, bytes):
            raise TypeError(f"store values are bytes, got {type(value).__name__}")
        self._open()
        self._pending[(table, key)] = value

    def delete(self, table: str, key: str) -> None:
        self._open()
        self._pending[(table, key)] = None

    def apply(self, changes: Mapping[tuple[str, str], bytes | None]) -> None:
        self._open()
        for value in changes.values():
            if value is not None and value.__class__ is not bytes:
                raise TypeError(f"store values are bytes, got {type(value).__name__}")
        self._pending.update(changes)

    def scan(self, table: str) -> Iterator[tuple[str, bytes]]:
        with self._lock:
            rows = list(self.inner.scan(table))
        return scan_with_pending(rows, table, self._writing, self._pending)

    def commit(self) -> None:
        """Hand every write so far to the writer thread (after the group before it)."""
        writer = self._open()
        if not self._pending:
            return
        self.wait()
        self._writing, self._pending = self._pending, {}
        changes = self._writing
        try:  # the writer's sqlite work then holds the GIL for two statements, not every row
            puts = orjson.dumps([(table, key, _text(value)) for (table, key), value
                                 in changes.items() if value is not None])
            deletes = orjson.dumps([row for row, value in changes.items() if value is None])
        except ValueError:  # a value that is not text sqlite keeps whole: row by row
            self._written = writer.submit(self._write, changes)
        else:
            self._written = writer.submit(self._write_json, puts, deletes)

    def _write(self, changes: dict[tuple[str, str], bytes | None]) -> None:
        with self._lock:
            self.inner.apply(changes)
            self.inner.commit()

    def _write_json(self, puts: bytes, deletes: bytes) -> None:
        with self._lock:
            self.inner.apply_json(puts, deletes)
            self.inner.commit()

    def wait(self) -> None:
        """Block until the group handed over last is committed (raises what the writer
        raised)."""
        written, self._written = self._written, None
        if written is not None:
            try:
                written.result()
            finally:
                self._writing = {}

    @property
    def uncommitted(self) -> bool:
        """True while there are writes that a crash would lose."""
        return bool(self._pending) or self._written is not None

    def _open(self) -> ThreadPoolExecutor:
        if self._writer is None:
            raise StateError(f"store {self.path}: closed, cannot be used")
        return self._writer

    @property
    def closed(self) -> bool:
        return self._writer is None

    def close(self) -> None:
        """Wait for the group being written, drop what was not handed over, close."""
        writer, self._writer = self._writer, None
        if writer is None:
            return
        try:
            self.wait()
        finally:
            self._pending = {}
            writer.shutdown(wait=True)
            self.inner.close()


def _text(value: bytes) -> str:
    """``value`` as text that sqlite turns back into the same bytes: UTF-8 without NUL (sqlite's
    text functions stop at a NUL); ``ValueError`` (``UnicodeDecodeError`` is one) otherwise."""
    if b"\x00" in value:
        raise ValueError("a NUL byte")
    return value.decode()
