"""Scribe over Chord in the simulator: subscribed nodes deliver every publish exactly once,
others nothing; unsubscribing stops delivery; trees repair after forwarders crash; bad input is
dropped with a traced reason.

Every check reads the trace (the oracle), never Scribe's own bookkeeping. Every assertion
message names the seed.
"""

from __future__ import annotations

import random
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

import pytest

from checks import named
from gossamer.core import MemorySink, Message, node_ids
from gossamer.protocols.dissemination import (
    Heartbeat,
    Publish,
    PublishAck,
    Scribe,
    ScribeConfig,
    ScribeData,
    ScribeLeave,
    TreeRole,
)
from gossamer.protocols.membership.chord import Chord, ChordConfig
from gossamer.runtimes.sim import LinkModel, Scenario, Simulation, Uniform
from test_hyparview_sim import FakeEnv

LINK = LinkModel(latency=Uniform(0.005, 0.05))
CONTACTS = 3


class ScribeNet:
    """``count`` Chord+Scribe nodes; the first creates the ring, the others join by 0.02 s."""

    def __init__(self, count: int, *, seed: int, spacing: float = 0.02,
                 config: ScribeConfig | None = None) -> None:
        self.seed = seed
        self.ids = node_ids(count)
        self.scenario = Scenario(seed=seed, nodes=[self.ids[0]], link=LINK)
        for i, node in enumerate(self.ids[1:]):
            self.scenario.join(0.1 + i * spacing, node)
        self.joined_by = 0.1 + (count - 1) * spacing
        self.config = config or ScribeConfig()
        self.apps: dict[str, Scribe] = {}
        self.sink = MemorySink()
        self.published: list[str] = []

    def factory(self, env: Any) -> Scribe:
        chord = Chord(env, contacts=self.ids[:CONTACTS], create=env.node == self.ids[0],
                      config=ChordConfig())
        app = Scribe(env, chord, config=self.config)
        self.apps[env.node] = app
        return app

    def build(self) -> Simulation:
        return self.scenario.build(self.factory, trace=self.sink, trace_messages=False)

    def subscribe_at(self, when: float, nodes: Iterable[str], topic: str) -> None:
        for node in nodes:
            self.scenario.at(when, lambda sim, n=node: sim.call(
                n, lambda p: p.subscribe(topic)))  # type: ignore[attr-defined]

    def unsubscribe_at(self, when: float, nodes: Iterable[str], topic: str) -> None:
        for node in nodes:
            self.scenario.at(when, lambda sim, n=node: sim.call(
                n, lambda p: p.unsubscribe(topic)))  # type: ignore[attr-defined]

    def publish_at(self, when: float, topic: str, origin: str | None = None) -> None:
        def go(sim: Simulation) -> None:
            node = origin if origin is not None else sim.rng.choice(sorted(sim.alive()))
            sim.call(node, lambda p: self.published.append(
                p.publish(topic, {"n": len(self.published)})))  # type: ignore[attr-defined]

        self.scenario.at(when, go)


def delivered(rows: Sequence[Any], layer: str = "scribe") -> dict[tuple[str, str], int]:
    """(node, msg id) -> times delivered."""
    out: dict[tuple[str, str], int] = defaultdict(int)
    for row in named(rows):
        if row.layer == layer and row.event == "deliver":
            assert row.msg is not None
            out[(row.node, row.msg)] += 1
    return out


def published(rows: Sequence[Any], layer: str = "scribe") -> dict[str, tuple[float, str]]:
    """msg id -> (time, topic)."""
    return {row.msg: (row.t, row.key) for row in named(rows)
            if row.layer == layer and row.event == "publish" and row.msg and row.key}


def problems(rows: Sequence[Any], expected: dict[str, set[str]],
             since: float = 0.0, layer: str = "scribe") -> list[str]:
    """Every message published at or after ``since`` on topic T reached exactly
    ``expected[T]``, each node once."""
    got = delivered(rows, layer)
    out: list[str] = []
    receivers: dict[str, set[str]] = defaultdict(set)
    for (node, mid), times in got.items():
        receivers[mid].add(node)
        if times != 1:
            out.append(f"{node} delivered {mid} {times} times")
    for mid, (t, topic) in sorted(published(rows, layer).items()):
        if t < since:
            continue
        want = expected.get(topic, set())
        missing = sorted(want - receivers[mid])
        extra = sorted(receivers[mid] - want)
        if missing:
            out.append(f"{mid} on {topic} missed by {missing[:5]} (+{len(missing)})")
        if extra:
            out.append(f"{mid} on {topic} delivered at non-subscribers {extra[:5]}")
    return out


# -- in the simulator --------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [1, 2])
def test_subscribers_get_every_publish_once_and_others_nothing(seed: int) -> None:
    started = time.perf_counter()
    net = ScribeNet(100, seed=seed)
    rng = random.Random(seed)
    topics = {"news": set(rng.sample(net.ids, 30)), "sport": set(rng.sample(net.ids, 10)),
              "empty": set()}
    t0 = net.joined_by + 2.0
    for topic, members in topics.items():
        net.subscribe_at(t0, sorted(members), topic)
    for i in range(12):
        net.publish_at(t0 + 2.0 + 0.1 * i, ("news", "sport", "empty")[i % 3])
    sim = net.build()
    sim.run(until=t0 + 6.0)
    rows = net.sink.rows
    assert len(published(rows)) == 12, f"seed={seed}"
    assert problems(rows, topics) == [], f"seed={seed}"
    # the trees are real trees: every member but the root has a live parent in the tree
    for topic, members in topics.items():
        roots = [n for n in net.ids if net.apps[n].role(topic) is TreeRole.ROOT]
        if members:
            assert len(roots) == 1, f"seed={seed}: roots of {topic}: {roots}"
        for node in members:
            if net.apps[node].role(topic) is not TreeRole.ROOT:
                parent = net.apps[node].parent(topic)
                assert parent is not None and node in net.apps[parent].children(topic), (
                    f"seed={seed}: {node} not a child of its parent {parent} in {topic}")
    assert time.perf_counter() - started < 8, f"seed={seed}"


@pytest.mark.parametrize("seed", [3])
def test_unsubscribe_stops_delivery_and_prunes(seed: int) -> None:
    net = ScribeNet(60, seed=seed)
    rng = random.Random(seed)
    members = set(rng.sample(net.ids, 20))
    leavers = set(rng.sample(sorted(members), 8))
    t0 = net.joined_by + 2.0
    net.subscribe_at(t0, sorted(members), "t")
    for i in range(3):
        net.publish_at(t0 + 2.0 + 0.1 * i, "t")
    net.unsubscribe_at(t0 + 3.0, sorted(leavers), "t")
    for i in range(3):
        net.publish_at(t0 + 4.0 + 0.1 * i, "t")
    net.unsubscribe_at(t0 + 5.0, sorted(members - leavers), "t")
    sim = net.build()
    sim.run(until=t0 + 9.0)
    rows = net.sink.rows
    pubs = published(rows)
    before = {m for m, (t, _) in pubs.items() if t < t0 + 3.0}
    after = set(pubs) - before
    assert len(before) == len(after) == 3, f"seed={seed}"
    got = delivered(rows)
    assert problems([r for r in rows if r[5] in before], {"t": members}) == [], f"seed={seed}"
    assert problems([r for r in rows if r[5] in after], {"t": members - leavers}) == [], (
        f"seed={seed}")
    assert all(got[(n, m)] == 0 for n in leavers for m in after), f"seed={seed}"
    # everyone left: the tree is pruned away everywhere, root and forwarders included
    left = [n for n in net.ids if net.apps[n].topics()]
    assert left == [], f"seed={seed}: still in the tree: {left}"
    assert not any(net.apps[n].is_subscribed("t") for n in net.ids), f"seed={seed}"


@pytest.mark.parametrize("seed", [4, 5])
def test_tree_repairs_after_forwarders_and_root_crash(seed: int) -> None:
    started = time.perf_counter()
    net = ScribeNet(120, seed=seed)
    rng = random.Random(seed)
    members = set(rng.sample(net.ids, 40))
    t0 = net.joined_by + 2.0
    net.subscribe_at(t0, sorted(members), "t")
    crash_at = t0 + 2.0
    victims: list[str] = []

    def crash(sim: Simulation) -> None:
        # the root and forwarders that are not subscribers (interior nodes of the tree)
        root = [n for n in sim.alive() if net.apps[n].role("t") is TreeRole.ROOT]
        interior = sorted(n for n in sim.alive() if net.apps[n].children("t")
                          and n not in members and n not in root)
        victims.extend(root + sim.rng.sample(interior, min(6, len(interior))))
        victims.extend(sim.rng.sample(sorted(members - set(victims)), 4))  # some members too
        for node in victims:
            sim.crash(node)

    net.scenario.at(crash_at, crash)
    repaired = crash_at + 6.0
    for i in range(8):
        net.publish_at(repaired + 0.2 * i, "t")
    sim = net.build()
    sim.run(until=repaired + 4.0)
    rows = net.sink.rows
    assert len(victims) >= 6, f"seed={seed}: {victims}"
    alive = set(sim.alive())
    assert problems(rows, {"t": members & alive}, since=repaired) == [], (
        f"seed={seed}: victims {victims}")
    assert any(r.event == "repair" for r in named(rows) if r.layer == "scribe"), f"seed={seed}"
    assert time.perf_counter() - started < 8, f"seed={seed}"


@pytest.mark.parametrize("seed", [6])
def test_forwarders_that_crash_and_recover_empty_are_rebuilt_into_the_tree(seed: int) -> None:
    net = ScribeNet(80, seed=seed)
    rng = random.Random(seed)
    members = set(rng.sample(net.ids, 25))
    t0 = net.joined_by + 2.0
    net.subscribe_at(t0, sorted(members), "t")
    victims: list[str] = []

    def crash(sim: Simulation) -> None:
        interior = sorted(n for n in sim.alive() if net.apps[n].children("t")
                          and n not in members and n not in net.ids[:CONTACTS])
        victims.extend(sim.rng.sample(interior, min(5, len(interior))))
        for node in victims:
            sim.crash(node, recover_after=0.5)  # back at once, with no tree state

    net.scenario.at(t0 + 2.0, crash)
    since = t0 + 8.0
    for i in range(5):
        net.publish_at(since + 0.2 * i, "t")
    sim = net.build()
    sim.run(until=since + 4.0)
    assert victims and set(sim.alive()) == set(net.ids), f"seed={seed}: {victims}"
    assert problems(net.sink.rows, {"t": members}, since=since) == [], (
        f"seed={seed}: victims {victims}")


# -- bad input (fake env) ----------------------------------------------------------------------


def fake_scribe() -> tuple[Scribe, FakeEnv]:
    env = FakeEnv("a")
    chord = Chord(env, create=True, config=ChordConfig())  # type: ignore[arg-type]
    app = Scribe(env, chord)  # type: ignore[arg-type]
    app.start()
    env.advance(0.1)
    return app, env


@pytest.mark.parametrize("msg, reason", [
    (ScribeData(topic="t", origin="b", seq=1, payload=None), "not_parent"),
    (ScribeLeave(topic="t"), "not_a_child"),
    (PublishAck(topic="t", seq=7), "unexpected_ack"),
])
def test_unexpected_messages_are_dropped_with_a_reason(msg: Message, reason: str) -> None:
    app, env = fake_scribe()
    before = app.snapshot()
    env.rows.clear()
    app.on_message("b", msg)
    assert [r["reason"] for r in env.drops()] == [reason]
    assert app.snapshot() == before


def test_publish_to_a_non_root_and_own_messages_are_dropped() -> None:
    env = FakeEnv("a")
    chord = Chord(env, contacts=["z"], config=ChordConfig())  # type: ignore[arg-type]
    app = Scribe(env, chord)  # type: ignore[arg-type]
    app.start()
    before = app.snapshot()
    app.on_message("b", Publish(topic="t", origin="b", seq=1))
    app.on_message("a", ScribeLeave(topic="t"))
    assert [r["reason"] for r in env.drops()] == ["not_root", "from_self"]
    assert app.snapshot() == before


def test_malformed_routes_and_frames_never_reach_the_tree() -> None:
    app, env = fake_scribe()
    env.rows.clear()
    assert app.chord.on_forward is not None and app.chord.on_deliver is not None
    assert app.chord.on_forward("t", {"t": "other"}, "b") is False
    app.chord.on_deliver("t", ["junk"])
    assert [r["reason"] for r in env.drops()] == ["bad_route_payload"] * 2
    assert app.topics() == []
    for bad in (dict(topic="", origin="b", seq=1), dict(topic="t", origin="b", seq=0),
                dict(topic="x" * 300, origin="b", seq=1)):
        with pytest.raises(ValueError):
            ScribeData(**bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        Heartbeat(down=(("t", -1),))


def test_alone_on_the_ring_a_node_is_root_and_delivers_its_own_publish() -> None:
    app, env = fake_scribe()
    got: list[tuple[str, Any]] = []
    app.on_deliver = lambda topic, mid, origin, payload: got.append((mid, payload))
    app.subscribe("t")
    env.advance(0.1)
    assert app.role("t") is TreeRole.ROOT
    mid = app.publish("t", {"x": 1})
    env.advance(0.5)
    assert got == [(mid, {"x": 1})]
    app.unsubscribe("t")
    assert app.topics() == []
