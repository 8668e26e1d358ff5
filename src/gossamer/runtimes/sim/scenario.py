"""Scenarios: a seed, nodes, a network model and a schedule of faults, built into a Simulation.

Used by tests and by ``gossamer sim``. Faults are data (``Fault`` rows) so a scenario can be
printed, compared and replayed; churn schedules are drawn from the scenario's seed.
"""

from __future__ import annotations

import dataclasses
import enum
import random
from collections.abc import Callable, Sequence

from ...core.conn import ListenerSpec
from ...core.env import ProcessFactory
from ...core.errors import ConfigError
from ...core.ids import NodeId, node_ids
from ...core.messages import WireCodec
from ...core.trace import TraceSink
from .kernel import OWN_CODECS, OwnCodecs, Simulation
from .network import LinkModel

__all__ = ["Fault", "FaultKind", "Scenario"]


class FaultKind(enum.Enum):
    CRASH = "crash"
    RECOVER = "recover"
    JOIN = "join"
    LEAVE = "leave"
    PARTITION = "partition"
    HEAL = "heal"
    CUT = "cut"  # reset the connections of ``node`` (with ``peer`` only, if given)


@dataclasses.dataclass(frozen=True, slots=True)
class Fault:
    at: float
    kind: FaultKind
    node: NodeId | None = None
    groups: tuple[tuple[NodeId, ...], ...] = ()
    peer: NodeId | None = None

    def __post_init__(self) -> None:
        if self.at < 0:
            raise ConfigError(f"fault time must be >= 0, got {self.at}")
        needs_node = self.kind in (FaultKind.CRASH, FaultKind.RECOVER, FaultKind.JOIN,
                                   FaultKind.LEAVE, FaultKind.CUT)
        if needs_node and self.node is None:
            raise ConfigError(f"{self.kind.value} needs a node")
        if self.kind is FaultKind.PARTITION and len(self.groups) < 1:
            raise ConfigError("partition needs at least one group")


@dataclasses.dataclass
class Scenario:
    """What to simulate. ``nodes`` start at time 0; ``joiners`` exist only once they JOIN."""

    seed: int = 0
    nodes: list[NodeId] = dataclasses.field(default_factory=list)
    link: LinkModel = dataclasses.field(default_factory=LinkModel)
    faults: list[Fault] = dataclasses.field(default_factory=list)
    joiners: list[NodeId] = dataclasses.field(default_factory=list)
    actions: list[tuple[float, Callable[[Simulation], None]]] = dataclasses.field(
        default_factory=list
    )
    connection_refused: bool = False  # see Simulation: senders hear of a down destination
    #: the listeners of nodes that accept connections (see ``gossamer.core.conn``)
    listeners: dict[NodeId, tuple[ListenerSpec, ...]] = dataclasses.field(default_factory=dict)

    @classmethod
    def of(cls, count: int, *, seed: int = 0, link: LinkModel | None = None) -> Scenario:
        if count < 1:
            raise ConfigError(f"a scenario needs at least one node, got {count}")
        return cls(seed=seed, nodes=node_ids(count), link=link or LinkModel())

    # fluent schedule builders --------------------------------------------------------------

    def crash(self, at: float, node: NodeId, *, recover_after: float | None = None) -> Scenario:
        self.faults.append(Fault(at, FaultKind.CRASH, node))
        if recover_after is not None:
            self.faults.append(Fault(at + recover_after, FaultKind.RECOVER, node))
        return self

    def recover(self, at: float, node: NodeId) -> Scenario:
        self.faults.append(Fault(at, FaultKind.RECOVER, node))
        return self

    def join(self, at: float, node: NodeId) -> Scenario:
        if node not in self.joiners and node not in self.nodes:
            self.joiners.append(node)
        self.faults.append(Fault(at, FaultKind.JOIN, node))
        return self

    def leave(self, at: float, node: NodeId) -> Scenario:
        self.faults.append(Fault(at, FaultKind.LEAVE, node))
        return self

    def partition(
        self, at: float, groups: Sequence[Sequence[NodeId]], *, heal_at: float | None = None
    ) -> Scenario:
        self.faults.append(Fault(at, FaultKind.PARTITION, groups=tuple(tuple(g) for g in groups)))
        if heal_at is not None:
            self.heal(heal_at)
        return self

    def heal(self, at: float) -> Scenario:
        self.faults.append(Fault(at, FaultKind.HEAL))
        return self

    def cut(self, at: float, node: NodeId, peer: NodeId | None = None) -> Scenario:
        """Reset ``node``'s connections (only those to ``peer``, if given) at ``at``."""
        self.faults.append(Fault(at, FaultKind.CUT, node, peer=peer))
        return self

    def listen(self, node: NodeId, *specs: ListenerSpec) -> Scenario:
        """``node`` accepts connections on these listeners (from its start)."""
        self.listeners[node] = (*self.listeners.get(node, ()), *specs)
        return self

    def at(self, time: float, action: Callable[[Simulation], None]) -> Scenario:
        """Run ``action(sim)`` at ``time`` (workload steps: broadcasts, writes, ...)."""
        self.actions.append((time, action))
        return self

    def crash_fraction(
        self, at: float, fraction: float, *, recover_after: float | None = None
    ) -> list[NodeId]:
        """Crash a seeded random ``fraction`` of the initial nodes at once; returns them."""
        if not 0 <= fraction <= 1:
            raise ConfigError(f"fraction must be in [0, 1], got {fraction}")
        rng = random.Random(f"{self.seed}/crash_fraction/{at}")
        victims = sorted(rng.sample(self.nodes, round(len(self.nodes) * fraction)))
        for node in victims:
            self.crash(at, node, recover_after=recover_after)
        return victims

    def churn(
        self,
        *,
        start: float,
        end: float,
        rate: float,
        downtime: float,
        pool: Sequence[NodeId] | None = None,
        leave: bool = False,
    ) -> Scenario:
        """Churn: ``rate`` departures per second over [start, end), each node away for
        ``downtime`` seconds; a node never departs again while away.

        Departures are crashes followed by recovery, or with ``leave=True`` graceful leaves
        followed by a rejoin (the process's ``stop()`` runs; the store is kept)."""
        if end <= start or rate <= 0 or downtime <= 0:
            raise ConfigError("churn needs end > start, rate > 0 and downtime > 0")
        candidates = list(pool if pool is not None else self.nodes)
        rng = random.Random(f"{self.seed}/churn/{start}")
        down_until: dict[NodeId, float] = {}
        t = start + rng.expovariate(rate)
        while t < end:
            up = [n for n in candidates if down_until.get(n, -1.0) <= t]
            if up:
                node = rng.choice(up)
                if leave:
                    self.leave(t, node)
                    self.join(t + downtime, node)
                else:
                    self.crash(t, node, recover_after=downtime)
                down_until[node] = t + downtime
            t += rng.expovariate(rate)
        return self

    # building ---------------------------------------------------------------------------

    def build(
        self,
        factory: ProcessFactory,
        *,
        trace: TraceSink | None = None,
        run: str | None = None,
        codec: WireCodec | OwnCodecs | None = OWN_CODECS,
        trace_messages: bool = True,
    ) -> Simulation:
        sim = Simulation(seed=self.seed, link=self.link, run=run, trace=trace, codec=codec,
                         trace_messages=trace_messages,
                         connection_refused=self.connection_refused)
        for node in self.nodes:
            sim.add_node(node, factory, listeners=self.listeners.get(node, ()))
        # stable order: by time, then by the order they were added
        ordered = sorted(enumerate(self.faults), key=lambda item: (item[1].at, item[0]))
        known = set(self.nodes)
        for _, fault in ordered:
            if fault.kind is FaultKind.JOIN and fault.node in known:
                sim.schedule(fault.at, sim.rejoin, fault.node)  # it was here before: back again
                continue
            if fault.kind is FaultKind.JOIN and fault.node is not None:
                known.add(fault.node)
            self._schedule_fault(sim, fault, factory, self.listeners)
        for time, action in sorted(self.actions, key=lambda item: item[0]):
            sim.schedule(time, action, sim)
        return sim

    @staticmethod
    def _schedule_fault(sim: Simulation, fault: Fault, factory: ProcessFactory,
                        listeners: dict[NodeId, tuple[ListenerSpec, ...]]) -> None:
        kind, node = fault.kind, fault.node
        if kind is FaultKind.JOIN:
            assert node is not None
            sim.add_node(node, factory, at=fault.at, listeners=listeners.get(node, ()))
        elif kind is FaultKind.CUT:
            assert node is not None
            sim.schedule(fault.at, sim.cut, node, fault.peer)
        elif kind is FaultKind.CRASH:
            sim.schedule(fault.at, sim.crash, node)
        elif kind is FaultKind.RECOVER:
            sim.schedule(fault.at, sim.recover, node)
        elif kind is FaultKind.LEAVE:
            sim.schedule(fault.at, sim.leave, node)
        elif kind is FaultKind.PARTITION:
            sim.schedule(fault.at, sim.partition, fault.groups)
        else:
            sim.schedule(fault.at, sim.heal)
