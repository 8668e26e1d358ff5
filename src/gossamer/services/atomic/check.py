"""The atomicity verdict over trace rows, in plain Python (tests and the VOPR's quick look;
the pipeline's Spark check, ``gossamer.pipeline.atomic_checks``, applies the same rules).

Rules, per message id: at most one decision (``commit`` or ``abort`` row, layer ``atomic``);
a committed message is delivered exactly once by every member of its snapshot that is up at
the end of the run, and by no one outside it; an aborted or undecided message is delivered by
no one. A ``redeliver`` row (an inbox handing a delivery over again after a restart) is no
second delivery, but stands for one whose ``deliver`` row a kill kept out of the trace; it
carries the position of that delivery, and a message a member handed over under two
positions was delivered twice.

Where a run has an application over the inbox (``handle`` rows: its effect of a delivery, on
disk), each member handles each message it delivered exactly once (a member up at the end has
handled all it delivered), and nothing it did not deliver.
"""

from __future__ import annotations

import dataclasses
from collections import Counter, defaultdict
from collections.abc import Iterable

import orjson

from ...core.trace import TraceRow

__all__ = ["AtomicVerdict", "judge_atomicity"]


@dataclasses.dataclass(frozen=True, slots=True)
class AtomicVerdict:
    published: int
    committed: int
    aborted: int
    undecided: int
    deliveries: int
    violations: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.violations


def judge_atomicity(rows: Iterable[TraceRow]) -> AtomicVerdict:
    decisions: dict[str, list[tuple[str, tuple[str, ...]]]] = defaultdict(list)
    published: set[str] = set()
    delivered: Counter[tuple[str, str]] = Counter()
    handled: Counter[tuple[str, str]] = Counter()
    positions: dict[tuple[str, str], set[int]] = defaultdict(set)
    down: dict[str, bool] = {}
    for row in rows:
        if row.layer == "sim" and row.event in ("crash", "recover", "leave", "join"):
            down[row.node] = row.event in ("crash", "leave")
        if row.layer != "atomic" or row.msg is None:
            continue
        if row.event == "publish":
            published.add(row.msg)
        elif row.event in ("commit", "abort"):
            info = orjson.loads(row.info or "{}")
            decisions[row.msg].append((row.event, tuple(info.get("snapshot", ()))))
        elif row.event in ("deliver", "redeliver"):
            # a redeliver is seen, not counted again: its position says which delivery it is
            delivered[(row.msg, row.node)] += row.event == "deliver"
            position = orjson.loads(row.info or "{}").get("position")
            if position is not None:
                positions[(row.msg, row.node)].add(position)
        elif row.event == "handle":
            handled[(row.msg, row.node)] += 1
    violations: list[str] = []
    by_mid: dict[str, list[str]] = defaultdict(list)
    for (mid, node), count in delivered.items():
        by_mid[mid].append(node)
        if count > 1:
            violations.append(f"{mid}: delivered {count} times by {node}")
        elif len(positions.get((mid, node), ())) > 1:
            violations.append(f"{mid}: handed over by {node} under "
                              f"{len(positions[(mid, node)])} positions")
    committed = aborted = 0
    for mid in sorted(published | set(decisions) | set(by_mid)):
        kinds = decisions.get(mid, [])
        if len({kind for kind, _ in kinds}) > 1:
            violations.append(f"{mid}: both committed and aborted")
            continue
        receivers = set(by_mid.get(mid, ()))
        if not kinds:
            if receivers:
                violations.append(f"{mid}: delivered by {sorted(receivers)} but never committed")
            continue
        kind, snapshot = kinds[0]
        if kind == "abort":
            aborted += 1
            if receivers:
                violations.append(f"{mid}: aborted but delivered by {sorted(receivers)}")
            continue
        committed += 1
        outside = receivers - set(snapshot)
        if outside:
            violations.append(f"{mid}: delivered outside its snapshot by {sorted(outside)}")
        missing = {m for m in snapshot if not down.get(m, False)} - receivers
        if missing:
            violations.append(f"{mid}: committed but not delivered by {sorted(missing)}")
    if handled:  # an application over the inbox
        for (mid, node), count in sorted(handled.items()):
            if count > 1:
                violations.append(f"{mid}: handled {count} times by {node}'s application")
            if (mid, node) not in delivered:
                violations.append(f"{mid}: handled by {node}'s application, never delivered")
        for mid, node in sorted(set(delivered) - set(handled)):
            if not down.get(node, False):
                violations.append(f"{mid}: delivered by {node}, never handled by its "
                                  f"application")
    undecided = len(published - set(decisions))
    return AtomicVerdict(len(published), committed, aborted, undecided,
                         sum(delivered.values()), tuple(violations))
