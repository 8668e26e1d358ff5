"""Append-only logs of numbered entries in one ``Store`` table: a group commit adds the entries
it brings as new rows and never rewrites a row already on disk.

A name (an origin, an object's key) has entries at consecutive positions. ``append`` holds an
entry until ``write_pending``, which puts one row per name that grew: the entries appended
since the last call, keyed by the name and the row's first position. ``drop_before`` deletes the
rows whose every position fell off the front of a bounded log; ``cut_from`` removes a tail (the
rows after the cut are deleted, the one it falls in is rewritten with what it keeps). So what a
write costs the store is in proportion to what is new, whatever the log's length.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator

import orjson

from .env import Store
from .errors import StateError

__all__ = ["RowLog"]


class RowLog:
    """The entries of many names in ``table`` of ``store`` (committing is the caller's).

    ``former_table``: where an older layout kept the same log; a store that still has rows
    there is refused at ``load`` with a clear error rather than read as empty.
    """

    def __init__(self, store: Store, table: str, *, former_table: str | None = None) -> None:
        self._store = store
        self.table = table
        self.former_table = former_table
        self._rows: dict[str, deque[tuple[int, int]]] = {}  # name -> its rows' (first, last)
        self._held: dict[str, list[tuple[int, bytes]]] = {}  # name -> entries not yet in a row
        self._last: dict[str, int] = {}  # name -> its highest position, held or stored

    # -- reading ----------------------------------------------------------------------------

    def load(self) -> dict[str, list[tuple[int, bytes]]]:
        """Every name's stored entries, ``(position, entry)`` in position order; forgets
        whatever this log held in memory before."""
        if self.former_table is not None and next(
                iter(self._store.scan(self.former_table)), None) is not None:
            raise StateError(
                f"the store holds table {self.former_table!r}, written by an older gossamer "
                f"in a layout this one does not read: start on a new data directory")
        self._rows = {}
        self._held = {}
        self._last = {}
        entries: dict[str, dict[int, bytes]] = {}
        spans: dict[str, list[tuple[int, int]]] = {}
        for row_key, raw in self._store.scan(self.table):
            name, first = _parse_key(row_key)
            found = entries.setdefault(name, {})
            last = first
            for position, entry in _entries(raw, row_key):
                found[position] = entry
                last = max(last, position)
            spans.setdefault(name, []).append((first, last))
        for name, name_spans in spans.items():
            rows = self._rows[name] = deque(sorted(name_spans))
            self._last[name] = rows[-1][1]
        return {name: sorted(found.items()) for name, found in entries.items()}

    def last(self, name: str) -> int | None:
        """The highest position of ``name`` here (held or stored), None if it has none."""
        return self._last.get(name)

    @property
    def stored_rows(self) -> int:
        """Rows this log has in the store (written, not yet deleted)."""
        return sum(len(rows) for rows in self._rows.values())

    # -- changing ---------------------------------------------------------------------------

    def append(self, name: str, position: int, entry: bytes) -> None:
        """``entry`` at ``position``, the one after ``name``'s last (any, for a name that has
        none); it reaches the store at ``write_pending``."""
        last = self._last.get(name)
        if last is not None and position != last + 1:
            raise StateError(f"row log {self.table}: {name!r} appends position {position} "
                             f"after {last}")
        self._last[name] = position
        held = self._held.get(name)
        if held is None:
            self._held[name] = [(position, entry)]
        else:
            held.append((position, entry))

    def write_pending(self) -> None:
        """One new row per name appended to since the last call."""
        held, self._held = self._held, {}
        put = self._store.put
        for name, entries in held.items():
            first, last = entries[0][0], entries[-1][0]
            put(self.table, _row_key(name, first), _row(entries))
            rows = self._rows.get(name)
            if rows is None:
                self._rows[name] = deque([(first, last)])
            else:
                rows.append((first, last))

    def drop_before(self, name: str, first: int) -> None:
        """Forget ``name``'s positions below ``first``: the rows wholly below it are deleted
        (one the bound falls in stays whole until its last position goes)."""
        held = self._held.get(name)
        if held and held[0][0] < first:
            self._keep_held(name, lambda position: position >= first)
        rows = self._rows.get(name)
        if rows is not None:
            while rows and rows[0][1] < first:
                self._store.delete(self.table, _row_key(name, rows.popleft()[0]))
            if not rows:
                del self._rows[name]
        self._forget_if_empty(name)

    def cut_from(self, name: str, start: int,
                 entry_at: Callable[[int], bytes | None]) -> None:
        """Remove ``name``'s positions from ``start`` on: later rows are deleted, and the row
        ``start`` falls in is rewritten with its entries before it: ``entry_at(position)``
        gives each, as the caller holds them (None: one the caller no longer keeps, left out)."""
        if self._held.get(name):
            self._keep_held(name, lambda position: position < start)
        rows = self._rows.get(name)
        if rows is not None:
            while rows and rows[-1][0] >= start:
                self._store.delete(self.table, _row_key(name, rows.pop()[0]))
            if rows and rows[-1][1] >= start:
                first = rows[-1][0]
                entries = [(position, entry) for position in range(first, start)
                           for entry in (entry_at(position),) if entry is not None]
                if entries:
                    rows[-1] = (first, start - 1)
                    self._store.put(self.table, _row_key(name, first), _row(entries))
                else:
                    rows.pop()
                    self._store.delete(self.table, _row_key(name, first))
            if not rows:
                del self._rows[name]
        if name in self._last:
            self._last[name] = min(self._last[name], start - 1)
        self._forget_if_empty(name)

    def _keep_held(self, name: str, keep: Callable[[int], bool]) -> None:
        """Of ``name``'s held entries, only those whose position ``keep`` accepts."""
        kept = [item for item in self._held[name] if keep(item[0])]
        if kept:
            self._held[name] = kept
        else:
            del self._held[name]

    def _forget_if_empty(self, name: str) -> None:
        if name not in self._rows and name not in self._held:
            self._last.pop(name, None)


def _row(entries: list[tuple[int, bytes]]) -> bytes:
    return b"".join([b"%d %d %s" % (position, len(entry), entry)
                     for position, entry in entries])


def _row_key(name: str, first: int) -> str:
    return orjson.dumps([name, first]).decode()


def _parse_key(row_key: str) -> tuple[str, int]:
    try:
        name, first = orjson.loads(row_key)
        if not isinstance(name, str) or not isinstance(first, int):
            raise ValueError("not [name, first position]")
    except ValueError as exc:
        raise StateError(f"row log key {row_key!r} is damaged: {exc}") from exc
    return name, first


def _entries(raw: bytes, row_key: str) -> Iterator[tuple[int, bytes]]:
    """The ``(position, entry)`` pairs of one row: ``position length entry``, concatenated."""
    offset = 0
    try:
        while offset < len(raw):
            first = raw.index(b" ", offset)
            second = raw.index(b" ", first + 1)
            length = int(raw[first + 1:second])
            entry = raw[second + 1:second + 1 + length]
            if len(entry) != length:
                raise ValueError("an entry runs past the end of the row")
            yield int(raw[offset:first]), entry
            offset = second + 1 + length
    except ValueError as exc:
        raise StateError(f"row log row {row_key!r} is damaged: {exc}") from exc
