"""Vector clocks: compare, merge, increment, and a compact wire form.

Entries that are zero are never stored, so the wire form lists only nodes that have done
something, and two clocks that differ only by explicit zeros are equal.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Mapping

from .errors import ConfigError, InvalidMessage

__all__ = ["Order", "VectorClock"]


class Order(enum.Enum):
    BEFORE = "before"
    AFTER = "after"
    EQUAL = "equal"
    CONCURRENT = "concurrent"


class VectorClock:
    """A mutable vector clock over node ids. ``copy()`` before handing one to someone else."""

    __slots__ = ("_entries",)

    def __init__(self, entries: Mapping[str, int] | None = None) -> None:
        self._entries: dict[str, int] = {}
        if entries:
            for node, count in entries.items():
                if not isinstance(node, str) or not isinstance(count, int) or count < 0:
                    raise ConfigError(f"bad vector entry {node!r}: {count!r}")
                if count:
                    self._entries[node] = count

    def __getitem__(self, node: str) -> int:
        return self._entries.get(node, 0)

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, VectorClock):
            return NotImplemented
        return self._entries == other._entries

    def __hash__(self) -> int:
        return hash(frozenset(self._entries.items()))

    def __repr__(self) -> str:
        return f"VectorClock({self.to_wire()!r})"

    def items(self) -> Iterator[tuple[str, int]]:
        return iter(self._entries.items())

    def copy(self) -> VectorClock:
        clone = VectorClock()
        clone._entries = dict(self._entries)
        return clone

    def increment(self, node: str, by: int = 1) -> int:
        """Add ``by`` to ``node``'s entry and return the new value."""
        if by < 1:
            raise ConfigError(f"increment must be >= 1, got {by}")
        value = self._entries.get(node, 0) + by
        self._entries[node] = value
        return value

    def set(self, node: str, value: int) -> None:
        if value < 0:
            raise ConfigError(f"vector entries are >= 0, got {value}")
        if value:
            self._entries[node] = value
        else:
            self._entries.pop(node, None)

    def merge(self, other: VectorClock | Mapping[str, int]) -> None:
        """Entry-wise maximum, in place."""
        entries = other._entries if isinstance(other, VectorClock) else other
        mine = self._entries
        for node, count in entries.items():
            if count > mine.get(node, 0):
                mine[node] = count

    def compare(self, other: VectorClock) -> Order:
        """BEFORE if self happened before other, AFTER if after, else EQUAL or CONCURRENT."""
        less = greater = False
        mine, theirs = self._entries, other._entries
        for node, count in mine.items():
            other_count = theirs.get(node, 0)
            if count < other_count:
                less = True
            elif count > other_count:
                greater = True
        for node, count in theirs.items():
            if node not in mine and count > 0:
                less = True
        if less and greater:
            return Order.CONCURRENT
        if less:
            return Order.BEFORE
        if greater:
            return Order.AFTER
        return Order.EQUAL

    def dominates(self, other: VectorClock) -> bool:
        """True if every entry of self is >= other's (self has seen all other has)."""
        return self.compare(other) in (Order.AFTER, Order.EQUAL)

    def to_wire(self) -> dict[str, int]:
        """Compact JSON form: only non-zero entries, keys sorted."""
        return {node: self._entries[node] for node in sorted(self._entries)}

    @classmethod
    def from_wire(cls, data: object) -> VectorClock:
        """Parse the wire form; a peer's malformed vector raises ``InvalidMessage``."""
        if not isinstance(data, dict):
            raise InvalidMessage(f"vector must be an object, got {type(data).__name__}")
        for node, count in data.items():
            if not isinstance(node, str) or type(count) is not int or count < 0:
                raise InvalidMessage(f"bad vector entry {node!r}: {count!r}")
        return cls(data)

    def encode_compact(self) -> str:
        """A short text form ``"a=3,b=1"`` (sorted, zeros omitted) for logs and trace info."""
        return ",".join(f"{node}={count}" for node, count in sorted(self._entries.items()))

    @classmethod
    def decode_compact(cls, text: str) -> VectorClock:
        clock = cls()
        if not text:
            return clock
        for part in text.split(","):
            node, sep, count = part.rpartition("=")
            if not sep or not node or not (count.isascii() and count.isdecimal()):
                raise InvalidMessage(f"bad compact vector entry {part!r}")
            clock.set(node, int(count))
        return clock
