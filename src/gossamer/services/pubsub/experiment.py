"""Seed 001 as a simulated workload for ``gossamer experiment``: topic pub/sub over gossip
(HyParView + flooding or Plumtree-style trees) or over Scribe trees on Chord.

The run is built the way the pub/sub simulator tests build theirs: nodes ``n000``, ``n001``, ...
join one by one (gossip: through a random earlier node; scribe: through the first three, the
first creating the ring), then subscribe to topics ``t0``, ``t1``, ... (``subscribers`` random
nodes per topic, or each node with ``subscribe_probability``, at least one per topic), then publish
``publishes_per_node`` messages each, round-robin (or ``publishes_total`` in all, from nodes
spread over the ids), at ``rate`` per virtual second on random
topics. Faults: message loss, duplication and reordering on every link; a fraction of the
nodes crashing at once ``crash_at`` seconds into the publishing (they stay down; with
``crash_publishers = false`` they publish nothing); a partition into two halves that heals
after ``partition_for`` seconds. As over TCP, a message to a crashed node fails at its
sender (``connection_refused``; HyParView then repairs at once), while a partition is silent.

The trace's pub/sub rows (layer ``pubsub``: ``subscribe``/``unsubscribe`` with key = topic,
``publish``, ``deliver``) let the pipeline's reliability check derive who should receive each
message. At the end each topic's owner (the Chord root of the topic: in scribe mode the live
nodes that hold the topic's tree as its root, otherwise the successor of the topic's identifier
on the ring of live nodes) is traced as an ``owner`` row (layer ``pubsub``, key = topic) for the
topic-balance metric.

``backups`` > 0 (scribe mode only) replicates topic owners: every node of the run is a
founding node of the ring, each leads a Multi-Paxos group of itself and its next ``backups``
ring nodes (``TopicOwners`` as Scribe's orderer, the seed's phase 3), and a publish is
acknowledged once its topic's group decided it; ``paxos_heartbeat`` / ``paxos_suspect`` are
the groups' timers. ``spares`` > 0 (scribe mode only, instead of ``backups``) is the seed's own
placement: each of the ``nodes`` ring nodes runs with ``spares`` spare processes outside the
ring (``n003.s1``, ``n003.s2``: they publish and subscribe nothing), the group of the three
orders its topics, and a spare takes a crashed node's place on the ring
(``protocols/dissemination/scribe/placement.py``); ``crash`` may then crash ring nodes in
scribe mode too; ``grow`` = 1 starts one more group (``g...`` and its spares, a name that
takes one of the topics from its owner) ``grow_at`` seconds into the publishing, which takes
its key range from the group after it through both logs (``scribe/handover.py``). Judge such
runs with total order per topic (``experiments/pubsub_owned.toml``).
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import random
import time
from collections import Counter
from collections.abc import Callable, Iterable

from ...core.env import Env, Process
from ...core.errors import ConfigError
from ...core.ids import NodeId, node_ids
from ...core.trace import Row, TraceSink, encode_info
from ...protocols.dissemination.gossip import GossipConfig
from ...protocols.dissemination.scribe import ScribeConfig, TreeRole
from ...protocols.dissemination.scribe.handover import taker_name
from ...protocols.dissemination.scribe.owners import spare_groups
from ...protocols.membership.chord import ChordConfig, chord_id
from ...protocols.membership.hyparview import HyParViewConfig
from ...protocols.ordering.paxos import PaxosConfig
from ...runtimes.sim import LinkModel, NodeStatus, Scenario, Simulation, parse_latency
from .node import LAYER, PubSubNode
from .owned import owned_stack, placed_stack

__all__ = ["MODES", "PubSubRunOptions", "PubSubRunResult", "run_pubsub_sim", "topic_owners"]

MODES = ("gossip", "gossip-tree", "scribe")
_JOIN_START = 0.1
_SCRIBE_CONTACTS = 3


@dataclasses.dataclass(frozen=True, slots=True)
class PubSubRunOptions:
    """One simulated seed-001 group; the fields are what an experiment's [options] set."""

    nodes: int = 20
    mode: str = "gossip"  # gossip (flood) | gossip-tree (Plumtree-style) | scribe
    topics: int = 1  # topics t0, t1, ...
    subscribers: int = 0  # per topic, random nodes; 0: each node with subscribe_probability
    subscribe_probability: float = 1.0
    publishes_per_node: int = 10
    publishes_total: int = 0  # > 0: this many publishes in all, from nodes spread over the ids
    rate: float = 50.0  # publishes per virtual second over the whole group
    latency: str = "uniform:0.005,0.05"
    loss: float = 0.0
    duplicate: float = 0.0  # fraction of messages delivered twice
    reorder: float = 0.0  # fraction of messages held back up to 0.1 s (later ones overtake)
    crash: float = 0.0  # fraction of the nodes crashed at once (they stay down)
    crash_at: float = 0.0  # seconds into the publishing
    # false: the nodes that crash publish nothing (the others take their share). A publisher
    # that crashes for good may take its last publishes with it (a publish is acknowledged to
    # no one), so only what the survivors publish is a guarantee under crashes
    crash_publishers: bool = True
    partition: bool = False  # split the nodes into two halves for a while
    partition_at: float = 0.0  # seconds into the publishing
    partition_for: float = 2.0  # then the partition heals
    join_spacing: float = 0.0  # seconds between joins (0: 0.005 gossip, 0.02 scribe)
    warmup: float = 2.0  # after the last join, before the subscribes
    subscribe_settle: float = 1.5  # after the subscribes, before the first publish
    active_size: int = 5  # HyParView's active view (gossip modes)
    ihave_interval: float = 0.05  # gossip-tree: IHAVE batching
    connection_refused: bool = True  # a send to a crashed node fails at once, as over TCP
    settle: float = 10.0  # virtual seconds after the last publish or fault for repair
    until: float | None = None  # the end of the run (default: workload, faults, settle)
    backups: int = 0  # scribe: replicated topic owners, each with this many backups (0: none)
    spares: int = 0  # scribe: the seed's placement, this many spare processes per ring node
    # spares: a group (an active node and its spares) that joins the running placement
    # ``grow_at`` seconds into the publishing and takes its key range from the group after it
    grow: int = 0
    grow_at: float = 0.0
    paxos_heartbeat: float = 1.0  # ... their leaders' NOOP period (the seed's default)
    paxos_suspect: float = 2.0  # ... followers suspect a silent leader after this
    seed: int = 1
    run: str | None = None

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ConfigError(f"mode must be one of {', '.join(MODES)}, got {self.mode!r}")
        if (self.nodes < 1 or self.topics < 1 or self.publishes_per_node < 0
                or self.publishes_total < 0):
            raise ConfigError("need nodes >= 1, topics >= 1, publishes_per_node >= 0 and "
                              "publishes_total >= 0")
        if not 0 <= self.subscribers <= self.nodes:
            raise ConfigError(f"subscribers must be in [0, nodes], got {self.subscribers}")
        if self.rate <= 0 or self.settle < 0 or self.warmup < 0 or self.subscribe_settle < 0:
            raise ConfigError("need rate > 0 and settle, warmup, subscribe_settle >= 0")
        for name in ("loss", "duplicate", "reorder", "crash", "subscribe_probability"):
            if not 0 <= getattr(self, name) <= 1:
                raise ConfigError(f"{name} must be in [0, 1], got {getattr(self, name)}")
        if self.loss >= 1:
            raise ConfigError("loss must be < 1: nothing would ever arrive")
        if self.crash_at < 0 or self.partition_at < 0 or self.partition_for <= 0:
            raise ConfigError("need crash_at >= 0, partition_at >= 0 and partition_for > 0")
        if self.join_spacing < 0 or self.active_size < 1 or self.ihave_interval < 0:
            raise ConfigError("need join_spacing >= 0, active_size >= 1, ihave_interval >= 0")
        if self.until is not None and self.until <= 0:
            raise ConfigError("until must be > 0")
        if self.backups < 0 or (self.backups and self.mode != "scribe"):
            raise ConfigError("backups (replicated topic owners) must be >= 0, and > 0 only "
                              "in scribe mode")
        if self.spares < 0 or (self.spares and (self.mode != "scribe" or self.backups)):
            raise ConfigError("spares (the seed's placement of topic owners) must be >= 0, "
                              "and > 0 only in scribe mode without backups")
        if self.grow not in (0, 1) or (self.grow and not self.spares) or self.grow_at < 0:
            raise ConfigError("grow (a group joining the seed's placement while it runs) is "
                              "0 or 1, 1 only with spares, and grow_at >= 0")
        if self.backups >= self.nodes:
            raise ConfigError(f"backups must be fewer than the nodes ({self.nodes})")
        if not 0 < self.paxos_heartbeat < self.paxos_suspect:
            raise ConfigError("need 0 < paxos_heartbeat < paxos_suspect")
        parse_latency(self.latency)

    @property
    def publishes(self) -> int:
        if self.publishes_total:
            return self.publishes_total
        return self.nodes * self.publishes_per_node

    @property
    def spacing(self) -> float:
        if self.join_spacing > 0:
            return self.join_spacing
        return 0.02 if self.mode == "scribe" else 0.005

    @property
    def subscribe_at(self) -> float:
        return _JOIN_START + (self.nodes - 1) * self.spacing + self.warmup

    @property
    def publish_start(self) -> float:
        return self.subscribe_at + self.subscribe_settle

    @property
    def workload_end(self) -> float:
        return self.publish_start + self.publishes / self.rate

    @property
    def end(self) -> float:
        """The run's end: ``until``, or the workload and the faults, then ``settle``."""
        if self.until is not None:
            return self.until
        last = self.workload_end
        if self.crash > 0:
            last = max(last, self.publish_start + self.crash_at)
        if self.partition:
            last = max(last, self.publish_start + self.partition_at + self.partition_for)
        return last + self.settle


@dataclasses.dataclass
class PubSubRunResult:
    run: str
    nodes: int
    mode: str
    requested: int  # publishes the workload asked for
    published: int  # of those, made by a node that was up
    skipped: int  # asked of a node that was down
    expected: int  # (message, live subscriber) pairs
    delivered: int  # of those, delivered
    reliability: float
    sent: dict[str, int]  # messages sent per layer (gossip, hyparview, scribe, chord, ...)
    messages_per_publish: float  # every message sent during the run, per publish
    dissemination_per_publish: float  # gossip or scribe layer messages per publish
    crashed: list[NodeId]
    owners: dict[str, list[NodeId]]  # topic -> its owner(s) at the end
    latencies: list[float]  # publish to delivery at each other subscriber (seconds)
    convergence: list[float]  # per message: publish to its last delivery (seconds)
    events: int
    virtual_seconds: float
    wall_seconds: float


class _Tap(TraceSink):
    """Counts what the workload needs from the trace and passes every row on."""

    def __init__(self, inner: TraceSink | None) -> None:
        self.inner = inner
        self.sent: Counter[str] = Counter()
        self.publish_times: dict[str, float] = {}
        self.publish_topics: dict[str, str] = {}
        self.publishers: dict[str, str] = {}
        self.deliveries: dict[str, dict[str, float]] = {}
        self.subscribed: dict[str, set[str]] = {}
        self.expected: dict[str, set[str]] = {}

    def append(self, row: Row) -> None:
        event, layer = row[4], row[3]
        if event == "send":
            self.sent[str(layer)] += 1
        elif layer == LAYER:
            node, key, msg = str(row[2]), str(row[8]), str(row[5])
            if event == "subscribe":
                self.subscribed.setdefault(key, set()).add(node)
            elif event == "unsubscribe":
                self.subscribed.setdefault(key, set()).discard(node)
            elif event == "publish":
                self.publish_times[msg] = float(row[1])
                self.publish_topics[msg] = key
                self.publishers[msg] = node
                self.expected[msg] = set(self.subscribed.get(key, ()))
            elif event == "deliver":
                self.deliveries.setdefault(msg, {}).setdefault(node, float(row[1]))
        if self.inner is not None:
            self.inner.append(row)

    def flush(self) -> None:
        if self.inner is not None:
            self.inner.flush()

    @property
    def enabled(self) -> bool:
        return True


def topic_owners(topic: str, nodes: Iterable[NodeId], *, bits: int) -> NodeId:
    """The Chord root of ``topic`` on the ring of ``nodes``: the successor of its identifier."""
    ring = sorted((chord_id(node, bits), node) for node in nodes)
    if not ring:
        raise ConfigError("no nodes: no topic has an owner")
    index = bisect.bisect_left(ring, (chord_id(topic, bits), ""))
    return ring[index % len(ring)][1]


def _subscriptions(options: PubSubRunOptions, ids: list[NodeId]) -> dict[str, list[NodeId]]:
    rng = random.Random(f"{options.seed}/pubsub-subscriptions")
    out: dict[str, list[NodeId]] = {}
    for index in range(options.topics):
        topic = f"t{index}"
        if options.subscribers:
            out[topic] = sorted(rng.sample(ids, options.subscribers))
        else:
            out[topic] = [n for n in ids if rng.random() < options.subscribe_probability]
            if not out[topic] and options.subscribe_probability > 0:
                # at least one: a run whose topics nobody subscribed to traces no subscribe
                # row, and the pipeline then owes every message to every node (README: limits)
                out[topic] = [rng.choice(ids)]
    return out


def run_pubsub_sim(
    options: PubSubRunOptions,
    trace_sink: TraceSink | None = None,
    *,
    gossip_config: GossipConfig | None = None,
    hyparview_config: HyParViewConfig | None = None,
    scribe_config: ScribeConfig | None = None,
    chord_config: ChordConfig | None = None,
    progress: Callable[[float, float], None] | None = None,
) -> PubSubRunResult:
    """Simulate the group and write its trace to ``trace_sink`` (flushed, not closed: the
    caller owns it). The config arguments replace what ``options`` would build."""
    mode = options.mode
    gossip = mode != "scribe"
    if gossip_config is None and gossip:
        gossip_config = GossipConfig(mode="tree" if mode == "gossip-tree" else "flood",
                                     ihave_interval=options.ihave_interval)
    if hyparview_config is None and gossip:
        hyparview_config = HyParViewConfig(active_size=options.active_size)
    chord = chord_config if chord_config is not None else ChordConfig()
    link = LinkModel(latency=parse_latency(options.latency), loss=options.loss,
                     duplicate=options.duplicate, reorder=options.reorder)
    ids = node_ids(options.nodes)
    spares = {n: tuple(f"{n}.s{k}" for k in range(1, options.spares + 1)) for n in ids}
    groups = spare_groups(spares) if options.spares else {}
    every = [*ids, *(s for pair in spares.values() for s in pair)]
    scenario = Scenario(seed=options.seed, nodes=[ids[0], *every[len(ids):]], link=link,
                        connection_refused=options.connection_refused)
    grown: tuple[NodeId, ...] = ()  # the group that joins while it runs, its processes
    if options.grow:
        # a name that takes one of the topics from its owner, so a topic moves
        topic = f"t{random.Random(f'{options.seed}/pubsub-grow').randrange(options.topics)}"
        active = taker_name(ids, topic, chord.bits)
        grown = (active, *(f"{active}.s{k}" for k in range(1, options.spares + 1)))
        for node in grown:
            scenario.join(options.publish_start + options.grow_at, node)
        every += grown
    for index, node in enumerate(ids[1:]):
        scenario.join(_JOIN_START + index * options.spacing, node)
    contact_rng = random.Random(f"{options.seed}/pubsub-contacts")
    contacts = {node: [ids[contact_rng.randrange(i)]] if i else [] for i, node in enumerate(ids)}
    run_id = options.run or f"pubsub-{mode}-n{options.nodes}-s{options.seed}"
    apps: dict[NodeId, PubSubNode] = {}
    counts = {"published": 0, "skipped": 0}

    def factory(env: Env) -> Process:
        node = env.node
        if gossip:
            app = PubSubNode(env, "gossip", contacts=contacts[node],
                             hyparview_config=hyparview_config, gossip_config=gossip_config)
        elif options.spares:
            def built(app: PubSubNode) -> None:
                apps[node] = app

            new = node in grown
            return placed_stack(
                env, {**groups, grown[0]: grown} if new else groups,
                grown=grown[:1] if new else (),
                paxos=PaxosConfig(heartbeat_interval=options.paxos_heartbeat,
                                  suspect_timeout=options.paxos_suspect),
                contacts=tuple(ids[:_SCRIBE_CONTACTS]), create=node == ids[0],
                chord_config=chord, scribe_config=scribe_config, on_build=built)
        elif options.backups:
            app, process = owned_stack(
                env, tuple(ids), backups=options.backups,
                paxos=PaxosConfig(heartbeat_interval=options.paxos_heartbeat,
                                  suspect_timeout=options.paxos_suspect),
                contacts=() if node == ids[0] else tuple(ids[:_SCRIBE_CONTACTS]),
                chord_config=chord, scribe_config=scribe_config)
            apps[node] = app
            return process
        else:
            app = PubSubNode(env, "scribe", contacts=ids[:_SCRIBE_CONTACTS],
                             create=node == ids[0], chord_config=chord,
                             scribe_config=scribe_config)
        apps[node] = app
        return app.process

    def subscribe(sim: Simulation, *, node: NodeId, topic: str) -> None:
        if sim.status(node) is NodeStatus.UP:
            sim.call(node, lambda _p: apps[node].subscribe(topic))

    def publish(sim: Simulation, *, node: NodeId, topic: str, number: int) -> None:
        if sim.status(node) is not NodeStatus.UP:
            counts["skipped"] += 1
            return
        app = apps[node]
        if not app.has_room():  # back-pressure: a real publisher would wait; this one skips
            counts["skipped"] += 1
            return
        sim.call(node, lambda _p: app.publish(topic, {"n": number}))
        counts["published"] += 1

    for topic, members in _subscriptions(options, ids).items():
        for node in members:
            scenario.at(options.subscribe_at,
                        functools.partial(subscribe, node=node, topic=topic))
    faults = random.Random(f"{options.seed}/pubsub-faults")
    pool = ids[_SCRIBE_CONTACTS:] if not gossip else ids  # keep the ring's contacts up
    victims = sorted(faults.sample(pool, min(len(pool), round(len(ids) * options.crash))))
    publishers = ids
    if not options.crash_publishers:
        publishers = [n for n in ids if n not in set(victims)] or ids
    choices = random.Random(f"{options.seed}/pubsub-publishes")
    interval = 1.0 / options.rate
    for number in range(options.publishes):
        if options.publishes_total:
            node = publishers[number * len(publishers) // options.publishes % len(publishers)]
        else:
            node = publishers[number % len(publishers)]
        topic = f"t{choices.randrange(options.topics)}"
        scenario.at(options.publish_start + number * interval,
                    functools.partial(publish, node=node, topic=topic, number=number))

    for node in victims:
        scenario.crash(options.publish_start + options.crash_at, node)
    if options.partition:
        shuffled = list(every)
        faults.shuffle(shuffled)
        half = len(shuffled) // 2
        start = options.publish_start + options.partition_at
        scenario.partition(start, [sorted(shuffled[:half]), sorted(shuffled[half:])],
                           heal_at=start + options.partition_for)

    tap = _Tap(trace_sink)
    sim = scenario.build(factory, trace=tap, run=run_id)
    until = options.end
    report = (lambda now, _events: progress(now, until)) if progress is not None else None
    started = time.perf_counter()
    sim.run(until=until, progress=report, progress_every=20_000)
    wall = time.perf_counter() - started

    alive = [n for n in ids if sim.status(n) is NodeStatus.UP]
    owners = _owners(options, apps, [n for n in every if sim.status(n) is NodeStatus.UP],
                     chord.bits)
    for topic, nodes in owners.items():
        for node in nodes:
            tap.append((run_id, sim.now, node, LAYER, "owner", None, None, None, topic, None,
                        None, encode_info({"how": "scribe" if not gossip else "ring"}),
                        sim.wall))
    sim.trace_storage()
    tap.flush()

    live = set(alive)
    expected = delivered = 0
    latencies: list[float] = []
    convergence: list[float] = []
    for mid, want in tap.expected.items():
        got = tap.deliveries.get(mid, {})
        sent_at = tap.publish_times[mid]
        targets = (want & live) - {tap.publishers[mid]}
        expected += len(targets)
        delivered += len(targets & set(got))
        latencies.extend(got[n] - sent_at for n in targets if n in got)
        if got:
            convergence.append(max(got.values()) - sent_at)
    published = counts["published"]
    dissemination = sum(tap.sent[layer] for layer in ("gossip", "scribe"))
    return PubSubRunResult(
        run=run_id, nodes=options.nodes, mode=mode, requested=options.publishes,
        published=published, skipped=counts["skipped"], expected=expected,
        delivered=delivered, reliability=delivered / expected if expected else 1.0,
        sent=dict(tap.sent),
        messages_per_publish=sum(tap.sent.values()) / published if published else 0.0,
        dissemination_per_publish=dissemination / published if published else 0.0,
        crashed=victims, owners=owners, latencies=latencies, convergence=convergence,
        events=sim.events, virtual_seconds=sim.now, wall_seconds=wall)


def _owners(options: PubSubRunOptions, apps: dict[NodeId, PubSubNode], alive: list[NodeId],
            bits: int) -> dict[str, list[NodeId]]:
    """topic -> its owner(s): the live scribe roots, else the ring successor of the topic."""
    out: dict[str, list[NodeId]] = {}
    if not alive:
        return out
    for index in range(options.topics):
        topic = f"t{index}"
        roots: list[NodeId] = []
        if options.mode == "scribe":
            for node in alive:
                scribe = apps[node].scribe
                if scribe is not None and scribe.role(topic) is TreeRole.ROOT:
                    roots.append(node)
        out[topic] = roots or [topic_owners(topic, alive, bits=bits)]
    return out
