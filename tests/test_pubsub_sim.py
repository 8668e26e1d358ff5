"""The pub/sub service in the simulator, over gossip and over Scribe: subscribers get every
publish exactly once and others nothing, unsubscribing stops delivery, crashes are survived;
malformed payloads are dropped with a traced reason.

The oracle reads the trace: who should receive a message comes from the ``subscribe`` and
``unsubscribe`` rows, who did from the ``deliver`` rows (layer pubsub). Every assertion message
names the seed.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import orjson
import pytest

from checks import assert_one_seed_one_trace, count, link_faults, named
from gossamer.core import ConfigError, MemorySink, Row, node_ids
from gossamer.protocols.dissemination import GossipData
from gossamer.runtimes.sim import LinkModel, Scenario, Simulation, Uniform
from gossamer.services.pubsub import PubSubNode
from gossamer.testing import FakeEnv

LINK = LinkModel(latency=Uniform(0.005, 0.05))
MODES = ["gossip", "scribe"]


class PubSubNet:
    """``count`` pub/sub nodes joining one by one (gossip: through a random earlier node;
    scribe: through the first three nodes, the first creating the ring)."""

    def __init__(self, count: int, *, seed: int, mode: str) -> None:
        self.seed = seed
        self.mode = mode
        self.ids = node_ids(count)
        spacing = 0.02 if mode == "scribe" else 0.005
        self.scenario = Scenario(seed=seed, nodes=[self.ids[0]], link=LINK)
        for i, node in enumerate(self.ids[1:]):
            self.scenario.join(0.1 + i * spacing, node)
        self.ready = 0.1 + (count - 1) * spacing + 2.0
        rng = random.Random(f"{seed}/contacts")
        self.contacts = {node: [self.ids[rng.randrange(i)]] if i else []
                         for i, node in enumerate(self.ids)}
        self.nodes: dict[str, PubSubNode] = {}
        self.got: dict[str, list[tuple[str, Any]]] = defaultdict(list)
        self.sink = MemorySink()

    def factory(self, env: Any) -> Any:
        node = env.node
        if self.mode == "gossip":
            app = PubSubNode(env, "gossip", contacts=self.contacts[node])
        else:
            app = PubSubNode(env, "scribe", contacts=self.ids[:3], create=node == self.ids[0])
        app.on_message = lambda topic, message: self.got[node].append((topic, message))
        self.nodes[node] = app
        return app.process

    def build(self) -> Simulation:
        return self.scenario.build(self.factory, trace=self.sink, trace_messages=False)

    def at(self, when: float, node: str, action: str, *args: Any) -> None:
        self.scenario.at(when, lambda sim: sim.call(
            node, lambda _: getattr(self.nodes[node], action)(*args)) if node in sim.alive()
            else None)

    def publish_at(self, when: float, topic: str) -> None:
        def go(sim: Simulation) -> None:
            node = sim.rng.choice(sorted(sim.alive()))
            sim.call(node, lambda _: self.nodes[node].publish(topic, {"t": when}))

        self.scenario.at(when, go)


def check(rows: Sequence[Any], alive: set[str], *, since: float = 0.0) -> list[str]:
    """Each message published at or after ``since`` reached exactly the live nodes subscribed
    to its topic when it was published, each once (from the pubsub rows only)."""
    subscribed: dict[str, set[str]] = defaultdict(set)
    expected: dict[str, set[str]] = {}
    receivers: dict[str, list[str]] = defaultdict(list)
    for row in named(rows):
        if row.layer != "pubsub":
            continue
        if row.event == "subscribe":
            subscribed[str(row.key)].add(row.node)
        elif row.event == "unsubscribe":
            subscribed[str(row.key)].discard(row.node)
        elif row.event == "publish" and row.t >= since:
            expected[str(row.msg)] = set(subscribed[str(row.key)]) & alive
        elif row.event == "deliver":
            receivers[str(row.msg)].append(row.node)
    problems: list[str] = []
    for mid, want in sorted(expected.items()):
        got = receivers[mid]
        if len(got) != len(set(got)):
            problems.append(f"{mid} delivered twice somewhere")
        missing, extra = sorted(want - set(got)), sorted(set(got) - want - (set(got) - alive))
        if missing:
            problems.append(f"{mid} missed by {missing[:5]} ({len(missing)})")
        if extra:
            problems.append(f"{mid} delivered at non-subscribers {extra[:5]}")
    return problems


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("seed", [11])
def test_subscribers_get_each_publish_once_and_unsubscribe_stops_it(mode: str,
                                                                     seed: int) -> None:
    net = PubSubNet(80, seed=seed, mode=mode)
    rng = random.Random(seed)
    topics = {"a": sorted(rng.sample(net.ids, 25)), "b": sorted(rng.sample(net.ids, 8)),
              "c": []}
    t0 = net.ready
    for topic, members in topics.items():
        for node in members:
            net.at(t0, node, "subscribe", topic)
    for i in range(9):
        net.publish_at(t0 + 1.5 + 0.1 * i, "abc"[i % 3])
    leavers = topics["a"][:10]
    for node in leavers:
        net.at(t0 + 3.0, node, "unsubscribe", "a")
    for i in range(6):
        net.publish_at(t0 + 4.0 + 0.1 * i, "ab"[i % 2])
    sim = net.build()
    sim.run(until=t0 + 7.0)
    rows = net.sink.rows
    publishes = [r for r in named(rows) if r.layer == "pubsub" and r.event == "publish"]
    assert len(publishes) == 15, f"seed={seed} mode={mode}"
    assert check(rows, set(sim.alive())) == [], f"seed={seed} mode={mode}"
    # what the application heard matches the trace, and leavers heard nothing after leaving
    delivers = [r for r in named(rows) if r.layer == "pubsub" and r.event == "deliver"]
    assert sum(len(v) for v in net.got.values()) == len(delivers) > 0, f"seed={seed} {mode}"
    late = {str(r.msg) for r in publishes if r.t >= t0 + 4.0}
    assert not [r for r in delivers if r.node in leavers and r.msg in late and r.key == "a"], (
        f"seed={seed} mode={mode}")
    assert all(topic != "c" for got in net.got.values() for topic, _ in got), f"seed={seed}"


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("seed", [12])
def test_publishes_after_crashes_reach_every_live_subscriber(mode: str, seed: int) -> None:
    net = PubSubNet(100, seed=seed, mode=mode)
    rng = random.Random(seed)
    members = sorted(rng.sample(net.ids, 40))
    t0 = net.ready
    for node in members:
        net.at(t0, node, "subscribe", "t")
    for i in range(3):
        net.publish_at(t0 + 1.5 + 0.1 * i, "t")
    crash_at = t0 + 2.5
    victims = sorted(rng.sample(net.ids[3:], 15))  # keep the ring's contacts alive
    for node in victims:
        net.scenario.crash(crash_at, node)
    since = crash_at + 6.0
    for i in range(6):
        net.publish_at(since + 0.2 * i, "t")
    sim = net.build()
    sim.run(until=since + 4.0)
    rows = net.sink.rows
    alive = set(sim.alive())
    assert alive == set(net.ids) - set(victims), f"seed={seed} mode={mode}"
    assert check(rows, alive, since=since) == [], f"seed={seed} mode={mode} victims={victims}"


# -- one seed, one trace -----------------------------------------------------------------------


def faulty_run(seed: int, mode: str) -> list[Row]:
    """20 nodes, two topics, a subscriber leaving, 12 publishes; loss, duplication, reordering,
    and a node that crashes and recovers while messages flow."""
    net = PubSubNet(20, seed=seed, mode=mode)
    net.scenario.link = LinkModel(latency=Uniform(0.005, 0.05), loss=0.05, duplicate=0.05,
                                  reorder=0.1)
    rng = random.Random(seed)
    t0 = net.ready
    on_a, on_b = sorted(rng.sample(net.ids, 8)), sorted(rng.sample(net.ids, 5))
    for topic, members in (("a", on_a), ("b", on_b)):
        for node in members:
            net.at(t0, node, "subscribe", topic)
    net.at(t0 + 2.0, on_b[0], "unsubscribe", "b")
    net.scenario.crash(t0 + 1.0, net.ids[4], recover_after=1.0)
    for i in range(12):
        net.publish_at(t0 + 0.5 + 0.2 * i, "ab"[i % 2])
    net.scenario.build(net.factory, trace=net.sink, trace_messages=True).run(until=t0 + 6.0)
    return net.sink.rows


@pytest.mark.parametrize("mode", MODES)
def test_one_seed_one_trace(mode: str) -> None:
    seed = 51
    rows = assert_one_seed_one_trace(lambda s: faulty_run(s, mode), seed)
    faults = link_faults(rows)
    assert min(faults[f] for f in ("lost", "duplicated", "reordered")) > 0, (
        f"seed={seed} mode={mode}: the faults did not all happen: {faults}")
    assert count(rows, layer="sim", event="recover") == 1, f"seed={seed} mode={mode}"
    assert count(rows, layer="pubsub", event="publish") == 12, f"seed={seed} mode={mode}"
    assert count(rows, layer="pubsub", event="deliver") > 0, f"seed={seed} mode={mode}"


# -- fake env ----------------------------------------------------------------------------------


def test_gossip_mode_drops_a_malformed_payload_with_a_reason() -> None:
    env = FakeEnv("a")
    node = PubSubNode(env, "gossip")
    got: list[Any] = []
    node.on_message = lambda topic, message: got.append(message)
    node.subscribe("t")
    for seq, payload in enumerate(("junk", {"topic": 3, "message": 1}, {"topic": "t"}), 1):
        env.rows.clear()
        node.process.on_message("b", GossipData(origin="b", seq=seq, hop=1, payload=payload))
        assert env.drop_reasons("pubsub") == ["bad_payload"], payload
        env.sent.clear()
    assert got == []


def test_gossip_mode_delivers_only_subscribed_topics_and_traces_in_order() -> None:
    env = FakeEnv("a")
    node = PubSubNode(env, "gossip")
    got: list[tuple[str, Any]] = []
    node.on_message = lambda topic, message: got.append((topic, message))
    node.subscribe("t")
    node.subscribe("t")  # twice: one row
    mid = node.publish("t", 1)
    node.publish("u", 2)
    node.process.on_message("b", GossipData(origin="b", seq=1, hop=1,
                                            payload={"topic": "u", "message": 3}))
    node.unsubscribe("t")
    node.publish("t", 4)
    assert got == [("t", 1)]
    pubsub = [(r.event, r.key) for r in env.traced(layer="pubsub")]
    assert pubsub == [("subscribe", "t"), ("publish", "t"), ("deliver", "t"), ("publish", "u"),
                      ("unsubscribe", "t"), ("publish", "t")]
    assert [r.msg for r in env.traced("deliver", layer="pubsub")] == [mid]


def test_bad_arguments_are_refused() -> None:
    env = FakeEnv("a")
    with pytest.raises(ConfigError):
        PubSubNode(env, "carrier-pigeon")  # type: ignore[arg-type]
    node = PubSubNode(env, "scribe", create=True)
    with pytest.raises(ValueError):
        node.subscribe("")
    with pytest.raises(ValueError):
        node.publish("x" * 1000, 1)


def test_publishes_total_spreads_that_many_publishes_over_the_nodes() -> None:
    from gossamer.services.pubsub.experiment import PubSubRunOptions, run_pubsub_sim

    options = PubSubRunOptions(nodes=40, publishes_total=4, rate=20.0, settle=2.0, seed=3)
    assert options.publishes == 4
    sink = MemorySink()
    result = run_pubsub_sim(options, sink)
    origins = sorted(r[2] for r in sink.rows if r[3] == "pubsub" and r[4] == "publish")
    assert origins == ["n000", "n010", "n020", "n030"], "seed=3"
    assert result.published == 4 and result.reliability == 1.0, "seed=3"
    with pytest.raises(ConfigError):
        PubSubRunOptions(publishes_total=-1)


@pytest.mark.parametrize("seed", [1, 2])
def test_the_workload_with_replicated_owners_orders_each_topic_through_paxos(seed: int) -> None:
    """``backups`` > 0: each topic's publishes are decided by its owner's Paxos group and
    every subscriber delivers them in the decided order (positions 1, 2, 3, ... per topic)."""
    from gossamer.services.pubsub.experiment import PubSubRunOptions, run_pubsub_sim

    options = PubSubRunOptions(nodes=8, mode="scribe", topics=2, publishes_per_node=3,
                               rate=20.0, warmup=4.0, settle=6.0, backups=2, seed=seed)
    sink = MemorySink()
    result = run_pubsub_sim(options, sink)
    assert result.published == 24 and result.reliability == 1.0, f"seed={seed}"
    decided = [r for r in sink.rows if r[3] == "paxos" and r[4] == "decide"]
    ordered = {(r[8], r[9], r[5]) for r in sink.rows if r[3] == "paxos" and r[4] == "ordered"}
    assert decided and len({(topic, pos) for topic, pos, _ in ordered}) == 24, f"seed={seed}"
    position_of = {(topic, msg): pos for topic, pos, msg in ordered}
    by_node: dict[tuple[str, str], list[int]] = defaultdict(list)
    for r in sink.rows:
        if r[3] == "scribe" and r[4] == "deliver":
            by_node[(r[2], r[8])].append(r[9])
            assert position_of[(r[8], r[5])] == r[9], f"seed={seed}: {r}"
    assert by_node and all(seqs == list(range(1, len(seqs) + 1))
                           for seqs in by_node.values()), f"seed={seed}"


@pytest.mark.parametrize("seed", [2, 3])
def test_the_workload_with_the_seeds_spares_delivers_everything_when_ring_nodes_crash(
        seed: int) -> None:
    """``spares = 2``: two of eight ring nodes crash for good one second into the publishing
    (seeds 2 and 3: the owner of a topic among them); a spare of each takes its place on the
    ring with its Chord identifier, and every publish reaches every live subscriber in the
    group's decided order."""
    from gossamer.services.pubsub.experiment import PubSubRunOptions, run_pubsub_sim

    options = PubSubRunOptions(nodes=8, mode="scribe", topics=3, subscribe_probability=1.0,
                               publishes_per_node=5, rate=20.0, warmup=6.0, settle=15.0,
                               spares=2, crash=0.25, crash_at=1.0, crash_publishers=False,
                               seed=seed)
    sink = MemorySink()
    result = run_pubsub_sim(options, sink)
    assert len(result.crashed) == 2 and result.reliability == 1.0, f"seed={seed}: {result}"
    took = {(r[8], r[2]) for r in sink.rows if r[4] == "join_ring" and r[1] > 8.0}
    assert {owner for owner, _ in took} == {f"owner:{n}" for n in result.crashed}, (
        f"seed={seed}: {took}")
    assert all(node.startswith(owner[6:] + ".s") for owner, node in took), f"seed={seed}"
    replaced = [n for roots in result.owners.values() for n in roots if ".s" in n]
    assert replaced, f"seed={seed}: no spare is a topic's root: {result.owners}"
    position_of: dict[tuple[str, str], int] = {}  # a retry decided twice: its first position
    for r in sink.rows:
        if r[3] == "paxos" and r[4] == "ordered":
            position_of[(r[8], r[5])] = min(r[9], position_of.get((r[8], r[5]), r[9]))
    for r in sink.rows:
        if r[3] == "scribe" and r[4] == "deliver":
            assert position_of[(r[8], r[5])] == r[9], f"seed={seed}: {r}"


@pytest.mark.parametrize(("seed", "loss"), [(1, 0.0), (2, 0.05)])
def test_the_workload_with_a_group_joining_the_running_placement_moves_a_topic(
        seed: int, loss: float) -> None:
    """``grow = 1``: a new active node and its spares start one second into the publishing,
    named to take one topic from its owner: the range moves through both groups' logs, the
    new node is the topic's root, and every publish reaches every subscriber at the position
    its group decided (the old group's positions, then the new one's after them)."""
    from gossamer.services.pubsub.experiment import PubSubRunOptions, run_pubsub_sim

    options = PubSubRunOptions(nodes=8, mode="scribe", topics=3, subscribe_probability=1.0,
                               publishes_per_node=8, rate=10.0, warmup=6.0, settle=15.0,
                               spares=2, grow=1, grow_at=1.0, loss=loss, seed=seed)
    sink = MemorySink()
    result = run_pubsub_sim(options, sink)
    assert result.reliability == 1.0, f"seed={seed}: {result}"
    [new] = {r[2] for r in sink.rows if r[4] == "join_ring" and r[1] > 8.0}
    taken = [r for r in sink.rows if r[4] == "take"]
    assert taken and all(r[8] == f"owner:{new}" for r in taken), f"seed={seed}: {taken}"
    [moved] = [t for t, roots in result.owners.items() if roots == [new]]
    by_group: dict[str, set[int]] = {}  # the moved topic's positions, by the group deciding
    position_of: dict[tuple[str, str], int] = {}
    for r in sink.rows:
        if r[3] == "paxos" and r[4] == "ordered":
            position_of[(r[8], r[5])] = min(r[9], position_of.get((r[8], r[5]), r[9]))
            if r[8] == moved:
                by_group.setdefault(orjson.loads(r[11])["group"], set()).add(r[9])
    mine = by_group.pop(f"owner:{new}", set())
    [old] = by_group.values()
    assert old and mine and min(mine) > max(old), f"seed={seed}: {by_group}, {mine}"
    for r in sink.rows:
        if r[3] == "scribe" and r[4] == "deliver":
            assert position_of[(r[8], r[5])] == r[9], f"seed={seed}: {r}"


def test_replicated_owners_are_refused_where_they_cannot_work() -> None:
    from gossamer.services.pubsub.experiment import PubSubRunOptions

    with pytest.raises(ConfigError, match="scribe mode"):
        PubSubRunOptions(mode="gossip", backups=2)
    with pytest.raises(ConfigError, match="fewer than the nodes"):
        PubSubRunOptions(mode="scribe", nodes=3, backups=3)
    with pytest.raises(ConfigError, match="paxos_heartbeat"):
        PubSubRunOptions(mode="scribe", backups=2, paxos_heartbeat=2.0, paxos_suspect=2.0)
    with pytest.raises(ConfigError, match="spares"):
        PubSubRunOptions(mode="scribe", backups=2, spares=2)
    with pytest.raises(ConfigError, match="spares"):
        PubSubRunOptions(mode="gossip", spares=2)
    with pytest.raises(ConfigError, match="grow"):
        PubSubRunOptions(mode="scribe", grow=1)  # without the seed's placement
    with pytest.raises(ConfigError, match="grow"):
        PubSubRunOptions(mode="scribe", spares=2, grow=2)
