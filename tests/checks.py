"""Test oracles over trace rows, independent of the protocols' own bookkeeping.

The PySpark pipeline will check the same properties at scale; these are the small, obviously
correct versions the protocol tests rely on.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence

from gossamer.core import TraceRow


def named(rows: Iterable[Sequence[object]]) -> list[TraceRow]:
    return [row if isinstance(row, TraceRow) else TraceRow(*row) for row in rows]


def fifo_violations(rows: Iterable[Sequence[object]], *, layer: str = "fifo") -> list[str]:
    """Every node delivers each origin's messages as 1, 2, 3, ... exactly once, in row order."""
    last: dict[tuple[str, str], int] = {}
    problems = []
    for row in named(rows):
        if row.layer != layer or row.event != "deliver":
            continue
        assert row.origin is not None and row.seq is not None
        key = (row.node, row.origin)
        expected = last.get(key, 0) + 1
        if row.seq != expected:
            problems.append(f"{row.node} delivered {row.origin}:{row.seq}, expected {expected}")
        last[key] = max(last.get(key, 0), row.seq)
    return problems


def missing_deliveries(
    rows: Iterable[Sequence[object]], nodes: Iterable[str], *, layer: str = "fifo"
) -> list[str]:
    """(node, message) pairs where a published message never reached a node of ``nodes``."""
    published: set[str] = set()
    delivered: dict[str, set[str]] = defaultdict(set)
    for row in named(rows):
        if row.layer != layer:
            continue
        if row.event == "publish":
            assert row.msg is not None
            published.add(row.msg)
        elif row.event == "deliver":
            assert row.msg is not None
            delivered[row.node].add(row.msg)
    return [f"{node} misses {msg}" for node in sorted(nodes)
            for msg in sorted(published - delivered[node])]


def count(rows: Iterable[Sequence[object]], *, layer: str, event: str) -> int:
    return sum(1 for row in named(rows) if row.layer == layer and row.event == event)
