"""The simulator's durable store: in memory, and crash-aware.

Committed writes survive a simulated crash; uncommitted ones are lost, as on a real disk.
``items`` and ``size`` measure what it holds (what a read sees), for the trace's ``stored`` rows.
"""

from __future__ import annotations

from collections.abc import Iterator

from ...core.env import Store, scan_with_pending

__all__ = ["MemoryStore"]

_DELETED = None


class MemoryStore(Store):
    __slots__ = ("_committed", "_pending")

    def __init__(self) -> None:
        self._committed: dict[str, dict[str, bytes]] = {}
        self._pending: dict[tuple[str, str], bytes | None] = {}

    def get(self, table: str, key: str) -> bytes | None:
        pending = self._pending
        if pending and (table, key) in pending:
            return pending[(table, key)]
        rows = self._committed.get(table)
        return None if rows is None else rows.get(key)

    def put(self, table: str, key: str, value: bytes) -> None:
        if not isinstance(value, bytes):
            raise TypeError(f"store values are bytes, got {type(value).__name__}")
        self._pending[(table, key)] = value

    def delete(self, table: str, key: str) -> None:
        self._pending[(table, key)] = _DELETED

    def scan(self, table: str) -> Iterator[tuple[str, bytes]]:
        return scan_with_pending(self._committed.get(table, {}).items(), table, self._pending)

    def commit(self) -> None:
        for (table, key), value in self._pending.items():
            rows = self._committed.setdefault(table, {})
            if value is None:
                rows.pop(key, None)
            else:
                rows[key] = value
        self._pending = {}

    def crash(self) -> None:
        """Forget every write that was not committed."""
        self._pending = {}

    @property
    def uncommitted(self) -> int:
        return len(self._pending)

    def _visible(self) -> Iterator[tuple[str, str, bytes]]:
        """Every (table, key, value) a read sees: committed rows with pending writes over them."""
        pending = self._pending
        for table, rows in self._committed.items():
            for key, value in rows.items():
                if (table, key) not in pending:
                    yield table, key, value
        for (table, key), written in pending.items():
            if written is not None:
                yield table, key, written

    @property
    def items(self) -> int:
        """How many (table, key) rows the store holds, uncommitted writes included."""
        return sum(1 for _ in self._visible())

    @property
    def size(self) -> int:
        """Bytes the store holds: table name, key (UTF-8) and value of every row, as ``items``
        counts them (the same measure as ``SqliteStore.size``)."""
        return sum(len(table.encode()) + len(key.encode()) + len(value)
                   for table, key, value in self._visible())
