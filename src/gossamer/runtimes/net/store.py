"""The network runtime's durable store: one sqlite table of (table, key) -> bytes.

Reads see uncommitted writes of the same store; closing without ``commit()`` loses them, which
is exactly what a crash does to a real node.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

from ...core.env import Store
from ...core.errors import ConfigError, StateError

__all__ = ["SqliteStore"]

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS kv ("
    "tbl TEXT NOT NULL, key TEXT NOT NULL, value BLOB NOT NULL, PRIMARY KEY (tbl, key))"
)


class SqliteStore(Store):
    """``Store`` on a sqlite file (WAL, synchronous=NORMAL), or ``":memory:"``."""

    def __init__(self, path: str | Path = ":memory:") -> None:
        if not isinstance(path, str | Path) or str(path) == "":
            raise ConfigError(f"store path must be a non-empty str or Path, got {path!r}")
        self.path = str(path)
        # autocommit mode: transactions are opened explicitly on the first write, so a close
        # without commit() rolls back instead of committing behind our back
        self._db: sqlite3.Connection | None = sqlite3.connect(self.path, isolation_level=None)
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
        self._writing().execute(
            "INSERT INTO kv (tbl, key, value) VALUES (?, ?, ?) "
            "ON CONFLICT (tbl, key) DO UPDATE SET value = excluded.value",
            (table, key, value),
        )

    def delete(self, table: str, key: str) -> None:
        self._writing().execute("DELETE FROM kv WHERE tbl = ? AND key = ?", (table, key))

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
