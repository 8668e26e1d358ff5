"""Test oracles over trace rows, independent of the protocols' own bookkeeping.

The PySpark pipeline will check the same properties at scale; these are the small, obviously
correct versions the protocol tests rely on.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence

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


# -- one seed, one trace ---------------------------------------------------------------------


def trace_difference(left: Sequence[Sequence[object]],
                     right: Sequence[Sequence[object]]) -> str | None:
    """None when two traces are equal row for row, else where they first differ."""
    for index, (a, b) in enumerate(zip(left, right, strict=False)):
        if a != b:
            return f"row {index} of {len(left)}/{len(right)} differs:\n  {a!r}\n  {b!r}"
    if len(left) != len(right):
        return f"one trace ends at row {min(len(left), len(right))}: {len(left)}/{len(right)} rows"
    return None


def assert_one_seed_one_trace(run: Callable[[int], Sequence[Sequence[object]]], seed: int,
                              ) -> Sequence[Sequence[object]]:
    """``run(seed)`` twice gives the same trace row for row, and ``run(seed + 1)`` another
    (so the check could fail); returns the trace, to check that it did what it claims."""
    first, again = run(seed), run(seed)
    difference = trace_difference(first, again)
    assert difference is None, f"seed={seed}: two runs of one seed differ at {difference}"
    assert len(first) > 0, f"seed={seed}: an empty trace proves nothing"
    other = seed + 1
    assert trace_difference(first, run(other)) is not None, (
        f"seed={other} gave the very trace of seed={seed}: the seed does not reach the run")
    return first


def link_faults(rows: Iterable[Sequence[object]]) -> Counter[str]:
    """What the network did to messages that carry an id, seen from send and recv rows
    (``trace_messages``): ``lost`` sends never received (a crash in flight counts),
    ``duplicated`` receipts beyond the sends, ``reordered`` first receipts on a link that came
    before a message sent earlier on it."""
    sent: dict[tuple[object, ...], int] = Counter()
    got: dict[tuple[object, ...], int] = Counter()
    send_order: dict[tuple[object, object], dict[tuple[object, ...], int]] = defaultdict(dict)
    recv_order: dict[tuple[object, object], list[tuple[object, ...]]] = defaultdict(list)
    for row in named(rows):
        if row.msg is None or row.event not in ("send", "recv"):
            continue
        if row.event == "send":
            link, message = (row.node, row.peer), (row.msg, row.info)
            sent[(*link, *message)] += 1
            send_order[link].setdefault(message, len(send_order[link]))
        else:
            link, message = (row.peer, row.node), (row.msg, row.info)
            got[(*link, *message)] += 1
            if got[(*link, *message)] == 1:
                recv_order[link].append(message)
    faults: Counter[str] = Counter()
    for key, times in sent.items():
        faults["lost"] += max(0, times - got[key])
    for key, times in got.items():
        faults["duplicated"] += max(0, times - sent[key])
    for link, received in recv_order.items():
        latest = -1
        for message in received:
            position = send_order[link].get(message, -1)
            if position < latest:
                faults["reordered"] += 1
            latest = max(latest, position)
    return faults
