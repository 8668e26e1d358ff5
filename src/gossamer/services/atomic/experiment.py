"""Seed 004 as a simulated workload: N members of one multicast group, a few of them senders,
under loss, duplication and reordering, with members crashing before or after they vote YES
and senders crashing between the phases, everyone recovering before the end.

The run's trace holds the ``atomic`` rows the atomicity check judges
(``gossamer.services.atomic.check`` here, the pipeline's Spark check on a trace directory).

With ``inbox`` each member keeps a durable inbox and runs an application over it that handles
each delivery a few milliseconds after it is handed over (a crash may fall between), commits
the position it handled with its effect, and acknowledges later: its ``handle`` rows, one per
message and member, are what the exactly-once rule for applications is judged on.
"""

from __future__ import annotations

import collections
import dataclasses
import random
import time
from typing import Any

from ...core.env import Env
from ...core.errors import ConfigError, check_fractions
from ...core.trace import MemorySink, Row, TraceSink
from ...protocols.dissemination.srm import SrmSession
from ...protocols.ordering.atomic import AtomicConfig, AtomicProcess, AtomicProcessConfig
from ...runtimes.sim import LinkModel, NodeStatus, RouterTree, Simulation, Uniform
from .check import judge_atomicity

__all__ = ["AtomicRunOptions", "AtomicRunResult", "InboxAppProcess", "run_atomic_experiment",
           "run_atomic_sim"]

GROUP = "239.1.2.3:5000"


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class AtomicRunOptions:
    """``member_crashes``: members crashed, each around one send (before or after its vote,
    as the draw falls); ``sender_crashes``: senders crashed just after a send of theirs, at a
    random step of the commit; ``down_for``: session periods a crashed node stays down;
    ``trace_sessions`` False leaves SRM's session messages out of the trace (their rows grow
    with the square of the group: for groups of 100 and more; no check reads them);
    ``inbox``: members keep a durable inbox, with an application over it (module doc)."""

    members: int = 5
    senders: int = 2
    messages: int = 20
    gap: float = 0.3
    loss: float = 0.0
    duplicate: float = 0.0
    reorder: float = 0.0
    member_crashes: int = 0
    sender_crashes: int = 0
    down_for: float = 8.0
    session_period: float = 0.5
    tree: bool = False
    settle: float = 40.0
    trace_sessions: bool = True
    inbox: bool = False
    seed: int = 0
    run: str = "atomic"

    def __post_init__(self) -> None:
        if self.members < 2 or not 1 <= self.senders <= self.members:
            raise ConfigError(f"need members >= 2 and 1 <= senders <= members, got members "
                              f"{self.members}, senders {self.senders}")
        counts = {"messages": self.messages, "member_crashes": self.member_crashes,
                  "sender_crashes": self.sender_crashes}
        for name, count in counts.items():
            if count < 0:
                raise ConfigError(f"{name} must be >= 0, got {count}")
        check_fractions(self, "loss", "duplicate", "reorder")
        if not (self.gap >= 0 and self.settle >= 0 and self.down_for > 0
                and self.session_period > 0):
            raise ConfigError(f"need gap >= 0, settle >= 0, down_for > 0 and session_period "
                              f"> 0, got {self.gap}, {self.settle}, {self.down_for} and "
                              f"{self.session_period}")


def run_atomic_sim(seed: int, options: AtomicRunOptions, *, trace: TraceSink | None = None,
                   run: str | None = None) -> Simulation:
    """Run one seed to the end (every crashed node recovered and settled); returns the
    simulation (its ``trace_sink`` holds the rows)."""
    o = options
    link = LinkModel(latency=Uniform(0.005, 0.02), loss=o.loss, duplicate=o.duplicate,
                     reorder=o.reorder, reorder_delay=0.05)
    sim = Simulation(seed=seed, link=link, trace=trace, run=run,
                     untraced=() if o.trace_sessions else (SrmSession.TYPE,))
    names = [f"m{i:03d}" for i in range(o.members)]
    tree = RouterTree.two_level(names[0], names, fanout=max(1, o.members // 5), delay=0.01,
                                loss=o.loss) if o.tree else None
    sim.add_multicast_group(GROUP, names, tree=tree)
    config = AtomicProcessConfig(group=GROUP, session_period=o.session_period,
                                 atomic=AtomicConfig(inbox=o.inbox))
    sim.add_nodes(names, lambda env: (InboxAppProcess if o.inbox else AtomicProcess)(env, config))
    rng = random.Random(f"{seed}/atomic-workload")
    senders = names[:o.senders]
    start = 3 * o.session_period  # the group has formed
    sends = [(start + i * o.gap, senders[i % len(senders)]) for i in range(o.messages)]
    for at, sender in sends:
        sim.schedule(at, _send, sim, sender, {"n": at})
    down = o.down_for * o.session_period
    for _ in range(o.member_crashes):
        at, _sender = rng.choice(sends) if sends else (start, names[0])
        victim = rng.choice(names[o.senders:] or names)
        # before its vote (the data has not arrived) or after it (before the outcome)
        sim.schedule(at + rng.uniform(-0.01, 0.04), _crash, sim, victim, down)
    for _ in range(o.sender_crashes):
        at, sender = rng.choice(sends) if sends else (start, names[0])
        sim.schedule(at + rng.uniform(0.0, 0.05), _crash, sim, sender, down)
    end = (sends[-1][0] if sends else start) + down + o.settle * o.session_period
    sim.run(until=end)
    return sim


@dataclasses.dataclass(frozen=True, slots=True)
class AtomicRunResult:
    published: int
    committed: int
    aborted: int
    undecided: int
    deliveries: int
    violations: int
    events: int
    wall_seconds: float


def run_atomic_experiment(options: AtomicRunOptions, sink: TraceSink) -> AtomicRunResult:
    """``gossamer experiment`` and the VOPR: one run into ``sink``, its seed and run id from
    ``options``; the result counts what the plain-Python verdict saw (the pipeline judges the
    trace on its own)."""
    rows = MemorySink()
    started = time.monotonic()
    sim = run_atomic_sim(options.seed, options, trace=_Tee(rows, sink), run=options.run)
    verdict = judge_atomicity(rows.named())
    return AtomicRunResult(verdict.published, verdict.committed, verdict.aborted,
                           verdict.undecided, verdict.deliveries, len(verdict.violations),
                           sim.events, time.monotonic() - started)


class _Tee(TraceSink):
    """Rows to two sinks (the run's file, and memory for the quick verdict)."""

    def __init__(self, first: TraceSink, second: TraceSink) -> None:
        self.first = first
        self.second = second

    def append(self, row: Row) -> None:
        self.first.append(row)
        self.second.append(row)

    def flush(self) -> None:
        self.first.flush()
        self.second.flush()


class InboxAppProcess(AtomicProcess):
    """An atomic member with an application over its inbox, as one that keeps state of its
    own is written: deliveries are handled in position order, each 0-50 ms after it was handed
    over; handling one writes the position with the effect and commits them at once (a
    synchronous commit, as ``gossamer atomic node``'s journal does: the effect traced
    ``handle`` is on disk when the row is written, and not before); it acknowledges 0-100 ms
    later (lazily, as applications do). Positions up to the committed one are skipped: a
    hand-over again after a crash that came after the application's commit and before its
    acknowledgement."""

    TABLE = "app.handled"

    def __init__(self, env: Env, config: AtomicProcessConfig) -> None:
        super().__init__(env, config)
        raw = env.store.get(self.TABLE, "position")
        self.handled = 0 if raw is None else int(raw)
        self._queue: collections.deque[tuple[str, str, int]] = collections.deque()
        self._busy = False
        self.atomic.on_deliver = self._handed

    def _handed(self, mid: str, origin: str, body: Any, position: int | None) -> None:
        assert position is not None  # (this member keeps an inbox)
        self._queue.append((mid, origin, position))
        if not self._busy:
            self._busy = True
            self.env.set_timer(self.env.rng.uniform(0.0, 0.05), self._handle_next)

    def _handle_next(self) -> None:
        mid, origin, position = self._queue.popleft()
        if position <= self.handled:  # handled in an earlier life
            self.atomic.acknowledge(position)
        else:
            self.handled = position
            store = self.env.store
            store.put(self.TABLE, "position", str(position).encode())
            store.commit()
            self.env.trace("handle", layer="atomic", msg=mid, origin=origin, position=position)
            self.env.set_timer(self.env.rng.uniform(0.0, 0.1),
                               lambda: self.atomic.acknowledge(position))
        if self._queue:
            self.env.set_timer(self.env.rng.uniform(0.0, 0.05), self._handle_next)
        else:
            self._busy = False


def _send(sim: Simulation, sender: str, body: Any) -> None:
    if sim.status(sender) is NodeStatus.UP:
        sim.call(sender, lambda p: p.atomic.send(body))  # type: ignore[attr-defined]


def _crash(sim: Simulation, node: str, down: float) -> None:
    if sim.status(node) is NodeStatus.UP:
        sim.crash(node, recover_after=down)
