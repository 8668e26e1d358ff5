"""Replicated topic owners in the simulator: a ring of ``ReplicatedScribe`` nodes and the run
whose topic owner crashes mid-stream, shared by the simulator and pipeline tests."""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from checks import named
from gossamer.core import MemorySink, node_ids
from gossamer.protocols.dissemination.scribe import Scribe
from gossamer.protocols.dissemination.scribe.handover import taker_name
from gossamer.protocols.dissemination.scribe.owners import (
    ReplicatedScribe,
    TopicOwners,
    owner_groups,
    spare_groups,
)
from gossamer.protocols.dissemination.scribe.placement import OwnerProcess
from gossamer.protocols.membership.chord import Chord, ChordConfig
from gossamer.protocols.ordering.paxos import PaxosConfig
from gossamer.runtimes.sim import LinkModel, Scenario, Simulation, Uniform
from gossamer.testing import FakeEnv

TOPIC = "news"
PAXOS = PaxosConfig(heartbeat_interval=0.3, suspect_timeout=0.9, election_jitter=0.3)
BITS = ChordConfig().bits


class OwnedNet:
    """``count`` Chord nodes running ``ReplicatedScribe`` over the founding ring of them all."""

    def __init__(self, count: int, *, seed: int, loss: float = 0.0,
                 trace_messages: bool = False) -> None:
        self.seed = seed
        self.ids = node_ids(count)
        self.trace_messages = trace_messages
        link = LinkModel(latency=Uniform(0.005, 0.03), loss=loss)
        self.scenario = Scenario(seed=seed, nodes=[self.ids[0]], link=link)
        for i, node in enumerate(self.ids[1:]):
            self.scenario.join(0.1 + 0.02 * i, node)
        self.joined_by = 0.1 + 0.02 * count
        self.sink = MemorySink()
        self.apps: dict[str, ReplicatedScribe] = {}
        self.owner = TopicOwners(FakeEnv(self.ids[0]), self.ids, bits=BITS).owner_of(TOPIC)
        self.group = owner_groups(self.ids, bits=BITS)[self.owner]

    def factory(self, env: Any) -> ReplicatedScribe:
        chord = Chord(env, contacts=self.ids[:3], create=env.node == self.ids[0],
                      config=ChordConfig())
        app = self.apps[env.node] = ReplicatedScribe(env, chord, self.ids, paxos=PAXOS)
        return app

    def build(self) -> Simulation:
        return self.scenario.build(self.factory, trace=self.sink,
                                   trace_messages=self.trace_messages)



@dataclasses.dataclass
class OwnerCrash:
    net: OwnedNet
    rows: list[Any]
    subscribers: set[str]
    alive: set[str]
    crash_at: float
    count: int


def owner_crash(seed: int, loss: float, *, count: int = 60, trace_messages: bool = False,
                recover_after: float | None = None) -> OwnerCrash:
    """8 nodes, 4 subscribers of ``TOPIC`` and 2 publishers (none of them its owner); the
    publishers send ``count`` publishes 50 ms apart and the owner crashes 1.2 s in (and comes
    back on its store after ``recover_after``, if given)."""
    net = OwnedNet(8, seed=seed, loss=loss, trace_messages=trace_messages)
    others = [n for n in net.ids if n != net.owner]
    subscribers = set(others[:4])
    publishers = [n for n in others if n not in subscribers][:2]
    t0 = net.joined_by + 2.0
    for node in sorted(subscribers):
        net.scenario.at(t0, lambda sim, n=node: sim.call(
            n, lambda p: p.subscribe(TOPIC)))
    start = t0 + 2.0
    for i in range(count):
        origin = publishers[i % 2]
        net.scenario.at(start + 0.05 * i, lambda sim, n=origin, i=i: sim.call(
            n, lambda p: p.publish(TOPIC, {"i": i})))
    crash_at = start + 1.2  # mid-stream
    net.scenario.crash(crash_at, net.owner, recover_after=recover_after)
    sim = net.build()
    sim.run(until=start + 0.05 * count + 14.0)
    return OwnerCrash(net, list(net.sink.rows), subscribers, set(sim.alive()), crash_at, count)


def ordered_at(rows: Sequence[Any]) -> tuple[dict[int, str], list[str]]:
    """The decided order of ``TOPIC`` (position -> msg) and any disagreement between nodes."""
    order: dict[int, str] = {}
    problems: list[str] = []
    for row in named(rows):
        if row.event == "ordered" and row.key == TOPIC:
            assert row.seq is not None and row.msg is not None
            if order.setdefault(row.seq, row.msg) != row.msg:
                problems.append(f"position {row.seq}: {order[row.seq]} and {row.msg} at "
                                f"{row.node}")
    return order, problems


def order_problems(rows: Sequence[Any], subscribers: set[str], alive: set[str]) -> list[str]:
    order, problems = ordered_at(rows)
    first_at: dict[str, int] = {}
    for pos in sorted(order):
        first_at.setdefault(order[pos], pos)  # a publish decided twice counts where first
    delivered: dict[str, list[tuple[int, str]]] = defaultdict(list)
    for row in named(rows):
        if row.event == "deliver" and row.layer == "scribe" and row.key == TOPIC:
            delivered[row.node].append((row.seq, row.msg))
    for node, seen in delivered.items():
        positions = [pos for pos, _ in seen]
        if positions != sorted(set(positions)):
            problems.append(f"{node} delivered positions out of order: {positions[:20]}")
        for pos, mid in seen:
            if order.get(pos) != mid or first_at.get(mid) != pos:
                problems.append(f"{node} delivered {mid} at {pos}; decided there: "
                                f"{order.get(pos)}")
    acked = {row.msg for row in named(rows) if row.event == "acked" and row.key == TOPIC}
    for mid in sorted(acked):
        if mid not in first_at:
            problems.append(f"acknowledged {mid} was never decided")
        for node in sorted(subscribers & alive):
            if mid not in {m for _, m in delivered[node]}:
                problems.append(f"acknowledged {mid} never delivered at {node}")
    return problems


class SpareNet:
    """The seed's placement: ``active`` ring nodes, each with two spare processes outside the
    ring; the three are one group that orders the active node's topics (``OwnerProcess``)."""

    def __init__(self, active: int, *, seed: int, loss: float = 0.0, reserves: int = 0,
                 owner_joins_at: float | None = None, grow: bool = False) -> None:
        """``owner_joins_at``: the topic's owner joins the ring then (its spares are up from
        the start), not with the others. ``grow``: there is a new group (``grown``, its active
        node and two spares, given the whole placement; the others were not told of it), its
        active node between ``TOPIC`` and the topic's owner on the ring, so it takes the
        topic's range from the owner's group when it starts (scheduled by the caller)."""
        self.seed = seed
        ids = node_ids(active * (3 + reserves))
        self.ring = ids[:active]
        self.spares = {a: (ids[active + 2 * i], ids[active + 2 * i + 1])
                       for i, a in enumerate(self.ring)}
        first = active * 3
        self.reserves = {a: tuple(ids[first + reserves * i + k] for k in range(reserves))
                         for i, a in enumerate(self.ring)}
        self.groups = spare_groups(self.spares)
        link = LinkModel(latency=Uniform(0.005, 0.03), loss=loss)
        spares = [s for pair in (*self.spares.values(), *self.reserves.values()) for s in pair]
        self.owner = TopicOwners(FakeEnv(self.ring[0]), groups=self.groups,
                                 bits=BITS).owner_of(TOPIC)
        self.scenario = Scenario(seed=seed, nodes=[self.ring[0], *spares], link=link)
        for i, node in enumerate(self.ring[1:]):
            late = node == self.owner and owner_joins_at is not None
            self.scenario.join(owner_joins_at if late else 0.1 + 0.02 * i, node)
        self.joined_by = 0.1 + 0.02 * active
        self.sink = MemorySink()
        self.procs: dict[str, OwnerProcess] = {}
        self.second: str | None = None  # the active node of a second crash
        self.grown: str | None = None
        self.grown_groups = self.groups
        if grow:
            self.grown = taker_name(self.ring, TOPIC, BITS)
            members = (self.grown, f"{self.grown}.s1", f"{self.grown}.s2")
            self.grown_groups = {**self.groups, self.grown: members}

    def factory(self, env: Any) -> OwnerProcess:
        new = self.grown is not None and env.node in self.grown_groups[self.grown]
        groups = self.grown_groups if new else self.groups
        owner = next(o for o, members in groups.items()
                     if env.node in (*members, *self.reserves.get(o, ())))
        owners = TopicOwners(env, groups=groups, reserves=self.reserves, bits=BITS,
                             config=PAXOS, grown=[owner] if new else ())

        def build() -> Scribe:
            chord = Chord(env, contacts=self.ring[:3], create=env.node == self.ring[0],
                          config=ChordConfig(identity=owner))
            return Scribe(env, chord, orderer=owners)

        proc = self.procs[env.node] = OwnerProcess(env, owners, build)
        return proc

    def workload(self, count: int, *, publish_after: float = 2.0) -> tuple[set[str], float]:
        """3 ring nodes (none the topic's owner) subscribe to ``TOPIC`` 2 s after the joins,
        and 2 others publish ``count`` messages 50 ms apart from ``publish_after`` later;
        returns the subscribers and when the first publish is made."""
        others = [n for n in self.ring if n != self.owner]
        subscribers, publishers = set(others[:3]), others[3:5]
        t0 = self.joined_by + 2.0
        for node in sorted(subscribers):
            self.scenario.at(t0, lambda sim, n=node: sim.call(
                n, lambda p: p.inner.subscribe(TOPIC)))
        start = t0 + publish_after
        for i in range(count):
            self.scenario.at(start + 0.05 * i, lambda sim, i=i: sim.call(
                publishers[i % 2], lambda p: p.inner.publish(TOPIC, {"i": i})))
        return subscribers, start

    def scribe(self, node: str) -> Scribe:
        return self.procs[node].inner  # type: ignore[return-value]

    def build(self) -> Simulation:
        return self.scenario.build(self.factory, trace=self.sink)


@dataclasses.dataclass
class SpareRun:
    net: SpareNet
    rows: list[Any]
    subscribers: set[str]
    alive: set[str]
    crash_at: float
    count: int


def active_crash(seed: int, loss: float, *, count: int = 60,
                 recover_after: float | None = None, reserves: int = 0,
                 second_crash: float | None = None) -> SpareRun:
    """6 active nodes with 2 spares each (and ``reserves`` each), 3 subscribers of ``TOPIC``
    and 2 publishers (ring nodes, none of them its owner); the publishers send ``count``
    publishes 50 ms apart and the topic's active node crashes 1.2 s in (and comes back on its
    store after ``recover_after``, if given); with ``second_crash``, the process active for
    the topic's owner then crashes that many seconds after the first crash."""
    net = SpareNet(6, seed=seed, loss=loss, reserves=reserves)
    subscribers, start = net.workload(count)
    crash_at = start + 1.2
    net.scenario.crash(crash_at, net.owner, recover_after=recover_after)
    if second_crash is not None:
        def crash_the_new_one(sim: Any) -> None:
            (new,) = [n for n in sim.alive() if net.procs[n].owner == net.owner
                      and net.procs[n].active]
            net.second = new
            sim.crash(new)

        net.scenario.at(crash_at + second_crash, crash_the_new_one)
    sim = net.build()
    sim.run(until=start + 0.05 * count + 14.0)
    return SpareRun(net, list(net.sink.rows), subscribers, set(sim.alive()), crash_at, count)


@dataclasses.dataclass
class GrowRun:
    net: SpareNet
    rows: list[Any]
    subscribers: set[str]
    alive: set[str]
    grow_at: float
    count: int


def grow(seed: int, loss: float, *, count: int = 60, crash_new: float | None = None) -> GrowRun:
    """6 active nodes with 2 spares each, the workload of ``SpareNet.workload``, and 1.2 s into
    the publishes a new group starts whose active node takes ``TOPIC``'s range (``grown``);
    with ``crash_new``, its active node crashes that many seconds after it starts."""
    net = SpareNet(6, seed=seed, loss=loss, grow=True)
    subscribers, start = net.workload(count)
    grow_at = start + 1.2
    assert net.grown is not None
    for node in net.grown_groups[net.grown]:
        net.scenario.join(grow_at, node)
    if crash_new is not None:
        net.scenario.crash(grow_at + crash_new, net.grown)
    sim = net.build()
    sim.run(until=start + 0.05 * count + 16.0)
    return GrowRun(net, list(net.sink.rows), subscribers, set(sim.alive()), grow_at, count)
