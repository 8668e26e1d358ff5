"""Replicated topic owners in the simulator: a ring of ``ReplicatedScribe`` nodes and the run
whose topic owner crashes mid-stream, shared by the simulator and pipeline tests."""

from __future__ import annotations

import dataclasses
from typing import Any

from gossamer.core import MemorySink, node_ids
from gossamer.protocols.dissemination.scribe.owners import (
    ReplicatedScribe,
    TopicOwners,
    owner_groups,
)
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
