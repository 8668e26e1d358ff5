"""Seed 000 clients in the simulator: causal delivery, per-object total order, conflicts, rebase.

Every scenario has one ``hub`` (``HubService``, listening at ``hub:8080``) and N clients
(``ReplicaNode``, each owning a ``ReplicaClient`` and its connection to the hub), and every
message crosses the seed's exact wire format (``ReplicaCodec``) as one frame on a connection.
Connections are TCP-like: their faults are cuts (what was in flight is lost; the client redials,
resubscribes and repairs), partitions (frames held until the heal), crashes and latency.
The oracles below read only trace rows and re-derive what must hold (causal order, the winning
revision of every key by the lowest-id rule, which writes lost), so they do not trust the
protocol's own state.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import random
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar, cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from checks import assert_one_seed_one_trace, count, named
from gossamer.core import ConfigError, Env, InvalidMessage, MemorySink, Message, node_ids
from gossamer.core.backoff import FibonacciBackoff
from gossamer.protocols.replica import (
    HUB_ID,
    CausalConfig,
    Conflict,
    Data,
    HubService,
    KeeperConfig,
    LinkState,
    Nack,
    ReplicaClient,
    ReplicaCodec,
    ReplicaConfig,
    ReplicaNode,
    Retry,
    Subscribe,
    crc_of,
)
from gossamer.protocols.replica.hub_service import DEFAULT_KEEPER
from gossamer.protocols.replica.node import DEFAULT_MAX_FRAME
from gossamer.runtimes.sim import Latency, LinkModel, MemoryStore, Scenario, Simulation, Uniform
from gossamer.runtimes.sim.connections import SimConn
from gossamer.services.replica.experiment import HUB_ADDRESS, HUB_LISTENER
from gossamer.testing import FakeEnv

HUB = HUB_ID
LAYER = "replica"

# -- oracles over trace rows ---------------------------------------------------------------


def _info(row: Any) -> dict[str, Any]:
    return json.loads(row.info) if row.info else {}


def causal_violations(rows: Iterable[Sequence[object]]) -> list[str]:
    """At every node, each delivered message's vector was delivered there before it: all of
    (k, 1..vector[k]) except the message itself; own publishes count as delivered, and so does
    everything an installed snapshot's vector covers. Also: no message is delivered twice
    (not even across a crash: a node that commits in groups, like the hub's keeper, traces a
    delivery once it is on disk), and ``vector[origin]`` is the message's own seq."""
    seen: dict[str, dict[str, set[int]]] = defaultdict(lambda: defaultdict(set))
    upto: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    floor: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))  # snapshots
    problems: list[str] = []
    for row in named(rows):
        if row.layer == "sim" and row.event == "crash":
            continue
        if row.layer != LAYER:
            continue
        if row.event == "snapshot":
            for origin, high in _info(row)["vector"].items():
                upto[row.node][origin] = max(upto[row.node][origin], high)
                floor[row.node][origin] = max(floor[row.node][origin], high)
            continue
        if row.event not in ("publish", "deliver"):
            continue
        node, origin, seq = row.node, str(row.origin), int(cast(int, row.seq))
        vector: dict[str, int] = _info(row)["vector"]
        if vector.get(origin) != seq:
            problems.append(f"{node}: {row.msg} carries vector[{origin}]={vector.get(origin)}")
        if seq in seen[node][origin] or seq <= floor[node][origin]:
            problems.append(f"{node} delivered {row.msg} twice")
        for other, high in vector.items():
            need = high - 1 if other == origin else high
            if upto[node][other] < need:
                problems.append(f"{node} {row.event} {row.msg} before {other}:{need} "
                                f"(had {other}:1..{upto[node][other]})")
        seen[node][origin].add(seq)
        while upto[node][origin] + 1 in seen[node][origin]:
            upto[node][origin] += 1
    return problems


def reused_sequence_numbers(rows: Iterable[Sequence[object]]) -> list[str]:
    published: set[str] = set()
    problems = []
    for row in named(rows):
        if row.layer == LAYER and row.event == "publish":
            if row.msg in published:
                problems.append(f"{row.msg} published twice")
            published.add(str(row.msg))
    return problems


def missing_deliveries(rows: Iterable[Sequence[object]], nodes: Iterable[str]) -> list[str]:
    """Published messages some node of ``nodes`` neither published, delivered nor received
    in an installed snapshot."""
    published: set[tuple[str, int]] = set()
    have: dict[str, set[tuple[str, int]]] = defaultdict(set)
    snapshot: dict[str, dict[str, int]] = defaultdict(dict)
    for row in named(rows):
        if row.layer != LAYER:
            continue
        if row.event in ("publish", "deliver"):
            ident = (str(row.origin), int(cast(int, row.seq)))
            have[row.node].add(ident)
            if row.event == "publish":
                published.add(ident)
        elif row.event == "snapshot":
            for origin, high in _info(row)["vector"].items():
                snapshot[row.node][origin] = max(snapshot[row.node].get(origin, 0), high)
    return [f"{node} misses {origin}:{seq}" for node in sorted(nodes)
            for origin, seq in sorted(published - have[node])
            if seq > snapshot[node].get(origin, 0)]


@dataclasses.dataclass(frozen=True)
class Write:
    msg: str
    writer: str
    seq: int
    key: str
    old: str | None
    rev: str
    deleted: bool


def published_writes(rows: Iterable[Sequence[object]]) -> list[Write]:
    writes = []
    for row in named(rows):
        if row.layer == LAYER and row.event == "publish":
            info = _info(row)
            writes.append(Write(str(row.msg), str(row.origin), int(cast(int, row.seq)),
                                str(row.key), info["old"], info["rev"], info["deleted"]))
    return writes


def winning_paths(writes: Iterable[Write]) -> dict[str, list[Write]]:
    """Per key, the seed's rule over the revision tree: from "no object", follow the child write
    of the lowest writer id (then seq) until a revision has no child."""
    children: dict[tuple[str, str | None], list[Write]] = defaultdict(list)
    keys: set[str] = set()
    for write in writes:
        children[(write.key, write.old)].append(write)
        keys.add(write.key)
    paths: dict[str, list[Write]] = {}
    for key in sorted(keys):
        path: list[Write] = []
        revision: str | None = None
        while children.get((key, revision)):
            best = min(children[(key, revision)], key=lambda w: (w.writer, w.seq))
            path.append(best)
            revision = best.rev
        paths[key] = path
    return paths


def loser_problems(rows: Iterable[Sequence[object]]) -> list[str]:
    """Every write off its key's winning path lost a conflict somewhere, and its writer resolved
    it exactly once (rebased it as a new write, itself judged the same way, or gave it up);
    no write on the winning path was reported as a loser."""
    rows = named(rows)
    writes = published_writes(rows)
    on_path = {w.msg for path in winning_paths(writes).values() for w in path}
    reported = {_info(r)["loser"] for r in rows if r.layer == LAYER and r.event == "conflict"}
    resolves: dict[str, int] = defaultdict(int)
    for row in rows:
        if row.layer == LAYER and row.event == "resolve":
            resolves[f"{row.node}:{_info(row)['original']}"] += 1
    problems = [f"{msg} is on the winning path but was reported losing"
                for msg in sorted(reported & on_path)]
    for write in writes:
        if write.msg in on_path:
            continue
        if write.msg not in reported:
            problems.append(f"{write.msg} lost but no replica reported a conflict")
        if resolves[write.msg] != 1:
            problems.append(f"{write.msg} lost and was resolved {resolves[write.msg]} times")
    return problems


def convergence_problems(
    rows: Iterable[Sequence[object]], states: dict[str, tuple[dict[str, str], dict[str, Any]]]
) -> list[str]:
    """``states``: node -> (revisions, items). All equal, and equal to the winning paths' ends."""
    rows = named(rows)
    expected_revisions = {key: path[-1].rev for key, path in winning_paths(
        published_writes(rows)).items()}
    problems = []
    items_seen = {json.dumps(items, sort_keys=True) for _, items in states.values()}
    if len(items_seen) > 1:
        problems.append(f"{len(items_seen)} different items() among {len(states)} replicas")
    for node, (revisions, _items) in sorted(states.items()):
        if revisions != expected_revisions:
            wrong = sorted(k for k in expected_revisions.keys() | revisions.keys()
                           if revisions.get(k) != expected_revisions.get(k))
            problems.append(f"{node} differs from the winning revisions on {wrong}")
    return problems


# -- scenarios ------------------------------------------------------------------------------

LATENCY = Uniform(0.005, 0.05)
# one connection keeps its frames in order whatever their delays; a wide spread interleaves
# what different clients send, and what the hub sends them, in many orders
WIDE = Uniform(0.001, 0.3)
# the experiment's redial backoff: a cut client is back within a second
BACKOFF_UNIT, BACKOFF_CAP = 0.05, 1.0
# repair switched off, as the experiment's ``repair = false``: no NACKs, no re-NACKs, no
# announcements within any run (a subscribe on (re)connecting still goes out)
NEVER = 1e9
NO_REPAIR = CausalConfig(nack_delay=NEVER, nack_retry=NEVER, nack_retry_cap=NEVER,
                         announce_interval=NEVER, announce_cap=NEVER)


def client_of(sim: Simulation, node: str) -> ReplicaClient:
    return cast(ReplicaNode, sim.process(node)).client


def cut_at_random(scenario: Scenario, *, rate: float, window: tuple[float, float],
                  clients: Sequence[str] | None = None) -> int:
    """Reset each client's connection to the hub at random moments of ``window``, ``rate``
    times per virtual second on average (one Poisson process per client, drawn from the
    scenario's seed, as the experiment's cuts are). Returns how many cuts were scheduled."""
    faults = random.Random(f"{scenario.seed}/cuts")
    scheduled = 0
    for node in clients if clients is not None else scenario.nodes[1:]:
        at = window[0] + faults.expovariate(rate)
        while at < window[1]:
            scenario.cut(at, node, HUB)
            scheduled += 1
            at += faults.expovariate(rate)
    return scheduled


def make_scenario(
    *,
    clients: int,
    seed: int,
    writes: int,
    keys: int,
    window: tuple[float, float] = (0.2, 5.0),
    delete_rate: float = 0.1,
    latency: Latency = LATENCY,
    cuts: float = 0.0,
) -> Scenario:
    """One hub listening at ``HUB_ADDRESS`` and ``clients`` clients; ``writes`` random writes
    (some deletes) on ``keys`` keys, each by a random client that is up, drawn from the
    scenario's rng; ``cuts``: resets of each client's connection per virtual second during
    the writes (``cut_at_random``)."""
    scenario = Scenario(seed=seed, nodes=[HUB, *node_ids(clients)],
                        link=LinkModel(latency=latency))
    scenario.listen(HUB, HUB_LISTENER)
    times = random.Random(f"{seed}/write-times")
    for number in range(writes):

        def write(sim: Simulation, number: int = number) -> None:
            up = [n for n in sim.alive() if n != HUB]
            if not up:
                return
            node = sim.rng.choice(up)
            key = f"k{sim.rng.randrange(keys)}"
            if sim.rng.random() < delete_rate:
                sim.call(node, lambda p: cast(ReplicaNode, p).client.delete(key))
            else:
                sim.call(node, lambda p: cast(ReplicaNode, p).client.set(key, {"n": number}))

        scenario.at(times.uniform(*window), write)
    if cuts > 0:
        cut_at_random(scenario, rate=cuts, window=window)
    return scenario


def run(
    scenario: Scenario,
    *,
    until: float,
    config: ReplicaConfig | None = None,
    keeper: KeeperConfig | None = DEFAULT_KEEPER,
    client: Callable[..., ReplicaNode] = ReplicaNode,
) -> tuple[Simulation, MemorySink]:
    """Build and run; ``keeper`` None runs the seed's bare relay. ``client(env, hub=...,
    backoff=..., config=...)`` builds each client process: ``ReplicaNode``, a subclass, or a
    function adding options (``client_class``, ``on_clear``, ...)."""
    sink = MemorySink()

    def factory(env: Env) -> HubService | ReplicaNode:
        if env.node == HUB:
            return HubService(env, keeper=keeper)
        return client(env, hub=HUB_ADDRESS, config=config,
                      backoff=FibonacciBackoff(unit=BACKOFF_UNIT, cap=BACKOFF_CAP))

    sim = scenario.build(factory, trace=sink, codec=ReplicaCodec())
    sim.run(until=until)
    return sim, sink


def only_at(node: str, build: Callable[..., ReplicaNode]) -> Callable[..., ReplicaNode]:
    """A ``client`` for ``run``: ``build`` at ``node``, a plain ``ReplicaNode`` elsewhere."""

    def client(env: Env, **options: Any) -> ReplicaNode:
        return (build if env.node == node else ReplicaNode)(env, **options)

    return client


def check_all(sim: Simulation, sink: MemorySink, seed: int) -> None:
    """Every oracle: causal order, reliability, unique seqs, convergence, losers resolved;
    and every client is back online with nothing left to send."""
    clients = [n for n in sim.alive() if n != HUB]
    assert len(clients) == len(sim.nodes()) - 1, f"seed={seed}: a client is down at the end"
    where = f"seed={seed}"
    assert causal_violations(sink.rows) == [], where
    assert reused_sequence_numbers(sink.rows) == [], where
    assert missing_deliveries(sink.rows, clients) == [], where
    states = {n: (client_of(sim, n).revisions(), client_of(sim, n).items()) for n in clients}
    assert convergence_problems(sink.rows, states) == [], where
    assert loser_problems(sink.rows) == [], where
    assert all(client_of(sim, n).holdback_size == 0 for n in clients), where
    assert sum(client_of(sim, n).stale_conflicts for n in clients) == 0, where
    offline = [n for n in clients if client_of(sim, n).link is not LinkState.ONLINE
               or client_of(sim, n).offline_queue]
    assert offline == [], f"{where}: not online, or writes still queued, at the end"


@dataclasses.dataclass(frozen=True)
class Repairs:
    """What the trace shows of repair."""

    nacks: int  # ``nack`` rows: a gap asked for
    renacks: int  # NACKs asking again for a message the same node NACKed before (the retry loop)
    delivered_after_nack: int  # messages a node delivered after it had NACKed them
    served: int  # subscribes the hub's keeper answered with a retry of what the client lacked


def repairs(rows: Iterable[Sequence[object]]) -> Repairs:
    asked: dict[tuple[str, str], set[int]] = defaultdict(set)
    nacks = renacks = delivered = served = 0
    for row in named(rows):
        if row.layer != LAYER:
            continue
        if row.event == "nack":
            nacks += 1
            wanted = asked[(row.node, str(row.origin))]
            span = range(int(cast(int, row.seq)), int(_info(row)["end"]) + 1)
            renacks += any(seq in wanted for seq in span)
            wanted.update(span)
        elif row.event == "deliver":
            delivered += int(cast(int, row.seq)) in asked.get((row.node, str(row.origin)), ())
        elif row.event == "serve":
            info = _info(row)
            served += info["kind"] == "retry" and info["messages"] > 0
    return Repairs(nacks, renacks, delivered, served)


def cuts_made(rows: Iterable[Sequence[object]]) -> int:
    """Connections the simulator reset (its ``cut`` rows)."""
    return sum(_info(r)["connections"] for r in named(rows)
               if r.layer == "sim" and r.event == "cut")


# -- whole-system runs ----------------------------------------------------------------------


def cut_scenario(clients: int, writes: int, seed: int) -> Scenario:
    """Clients whose connections are cut half a time per second each while they write, with
    a wide latency spread."""
    return make_scenario(clients=clients, seed=seed, writes=writes, keys=6, window=(0.2, 8.0),
                         latency=WIDE, cuts=0.5)


@pytest.mark.parametrize(("clients", "writes"), [
    (20, 50), pytest.param(50, 120, marks=pytest.mark.slow)])
def test_clients_under_connection_cuts_converge_in_causal_order(clients: int,
                                                                writes: int) -> None:
    seed = 1
    sim, sink = run(cut_scenario(clients, writes, seed), until=45.0)
    check_all(sim, sink, seed)
    assert cuts_made(sink.rows) > clients, f"seed={seed}"
    assert count(sink.rows, layer=LAYER, event="conflict") > 0, f"seed={seed}"
    assert count(sink.rows, layer=LAYER, event="resolve") > 0, f"seed={seed}"
    repaired = repairs(sink.rows)
    assert repaired.nacks > 0 and repaired.delivered_after_nack > 0, f"seed={seed}: {repaired}"
    assert repaired.renacks > 0, f"seed={seed}: the NACK retry loop ran: {repaired}"
    assert repaired.served > 0, f"seed={seed}: reconnecting clients were served: {repaired}"
    # deletes happened and converged too
    deletes = [w for w in published_writes(sink.rows) if w.deleted]
    assert deletes, f"seed={seed}"


def test_without_repair_the_oracles_report_what_the_cuts_lost() -> None:
    """The run above with NACKs, re-NACKs and announcements switched off (the clients' and
    the keeper's): what a cut lost on the way to the hub stays lost, and the oracles say so.
    The runs above converge because of repair, not because nothing was lost."""
    seed = 1
    config = ReplicaConfig(causal=NO_REPAIR)
    sim, sink = run(cut_scenario(20, 50, seed), until=45.0, config=config,
                    keeper=KeeperConfig(replica=config))
    assert repairs(sink.rows).nacks == 0, f"seed={seed}"
    clients = [n for n in sim.alive() if n != HUB]
    assert missing_deliveries(sink.rows, clients) != [], f"seed={seed}"
    keeper = cast(HubService, sim.process(HUB)).keeper
    assert keeper is not None
    # the hub relays only what its keeper delivered: what came after a lost message waits for
    # it at the hub (and at any client that got it otherwise)
    held = keeper.replica.holdback_size + sum(client_of(sim, n).holdback_size for n in clients)
    assert held > 0, f"seed={seed}: what came after a lost message waits for it for ever"
    states = {n: (client_of(sim, n).revisions(), client_of(sim, n).items()) for n in clients}
    assert convergence_problems(sink.rows, states) != [], f"seed={seed}: replicas diverged"


def test_partition_heals_and_both_sides_converge() -> None:
    seed = 2
    scenario = make_scenario(clients=12, seed=seed, writes=80, keys=4, window=(0.2, 6.0),
                             latency=WIDE)
    cut_off = scenario.nodes[7:]  # these clients lose the hub for a while
    scenario.partition(1.0, [[HUB, *scenario.nodes[1:7]], cut_off], heal_at=4.0)
    cut_at_random(scenario, rate=0.3, window=(4.0, 6.0))  # and the connections break after
    sim, sink = run(scenario, until=50.0)
    check_all(sim, sink, seed)
    rows = named(sink.rows)
    during = [r for r in rows if r.event == "publish" and r.node in cut_off and 1.0 < r.t < 4.0]
    assert during, f"seed={seed}: the cut-off side wrote while partitioned"
    late = [r for r in rows if r.event == "deliver" and r.msg in {d.msg for d in during}
            and r.node not in cut_off]
    assert late and min(r.t for r in late) >= 4.0, f"seed={seed}: delivered only after heal"
    assert cuts_made(sink.rows) > 0, f"seed={seed}"


@pytest.mark.parametrize("seed", [3, 4])
def test_clients_crash_and_recover_from_their_durable_store(seed: int) -> None:
    scenario = make_scenario(clients=15, seed=seed, writes=100, keys=4, window=(0.2, 7.0),
                             latency=WIDE, cuts=0.3)
    for index, node in enumerate(scenario.nodes[1:6]):
        scenario.crash(1.0 + index, node, recover_after=1.5)
    sim, sink = run(scenario, until=50.0)
    check_all(sim, sink, seed)
    assert count(sink.rows, layer="sim", event="recover") == 5, f"seed={seed}"
    crashed = set(scenario.nodes[1:6])
    after = [r for r in named(sink.rows) if r.event == "publish" and r.node in crashed
             and r.t > 2.5]
    assert after, f"seed={seed}: recovered clients wrote again (and reused no seq)"
    assert repairs(sink.rows).nacks > 0, f"seed={seed}"


def test_one_seed_one_trace() -> None:
    def once(seed: int) -> list[Any]:
        scenario = make_scenario(clients=8, seed=seed, writes=40, keys=3, latency=WIDE,
                                 cuts=0.5)
        scenario.crash(2.0, scenario.nodes[3], recover_after=1.0)
        _sim, sink = run(scenario, until=20.0)
        return sink.rows

    rows = assert_one_seed_one_trace(once, 9)
    assert len(rows) > 1000
    assert cuts_made(rows) > 0 and repairs(rows).nacks > 0, "seed=9: the faults happened"


class CorruptFirstData(ReplicaNode):
    """A client whose first data message leaves with a wrong CRC (a flipped bit); its send
    log keeps the message intact, so what it resends is good."""

    corrupted = False

    def _send(self, msg: Message) -> None:
        if isinstance(msg, Data) and self.open and not self.corrupted:
            self.corrupted = True
            msg = dataclasses.replace(msg, crc=msg.crc ^ 1)
        super()._send(msg)


@pytest.mark.parametrize("keeper", [True, False])
def test_corrupt_message_is_dropped_nacked_and_repaired(keeper: bool) -> None:
    """With the keeper the hub refuses the corrupt frame; with the seed's bare relay every
    client drops it. Either way it is asked for again and delivered intact."""
    seed = 5
    scenario = make_scenario(clients=5, seed=seed, writes=0, keys=1)
    writer = scenario.nodes[1]
    scenario.at(0.5, lambda sim: client_of(sim, writer).set("k", {"v": 1}))
    sim, sink = run(scenario, until=10.0, keeper=DEFAULT_KEEPER if keeper else None,
                    client=only_at(writer, CorruptFirstData))
    assert cast(CorruptFirstData, sim.process(writer)).corrupted
    rows = named(sink.rows)
    crc_drops = [r for r in rows if r.event == "drop" and "crc" in str(r.info)]
    droppers = {HUB} if keeper else set(scenario.nodes[2:])
    assert {r.node for r in crc_drops} == droppers, f"seed={seed}"
    if not keeper:
        assert all(r.msg == f"{writer}:1" for r in crc_drops)
    nacks = [r for r in rows if r.event == "nack" and r.origin == writer]
    assert nacks, f"seed={seed}: the corrupt message was asked for again"
    check_all(sim, sink, seed)
    assert all(client_of(sim, n).get("k") == {"v": 1} for n in scenario.nodes[1:])


class DropLastData(ReplicaNode):
    """A client whose data messages after the ``keep``-th never reach the hub (tail loss)."""

    def __init__(self, env: Env, *, keep: int, **options: Any) -> None:
        super().__init__(env, **options)
        self.keep = keep
        self.data_sent = 0

    def _send(self, msg: Message) -> None:
        if isinstance(msg, Data):  # a Retry that carries it later is not a Data
            self.data_sent += 1
            if self.data_sent > self.keep:
                return
        super()._send(msg)


@pytest.mark.parametrize(("announce", "keeper"), [(True, False), (False, True), (False, False)])
def test_lost_last_message_is_found_by_announcements(announce: bool, keeper: bool) -> None:
    """The writer's last message never leaves it and nothing follows it: only an announcement
    (a Subscribe with a vector) can reveal the gap: the writer's own, or the hub keeper's (it
    announces its vector after deliveries, and the writer answers what the keeper lacks). With
    the clients' announcements pushed beyond the run and no keeper, the oracle must see the loss."""
    seed = 6
    scenario = make_scenario(clients=4, seed=seed, writes=0, keys=1)
    writer = scenario.nodes[1]
    for number, at in enumerate((0.5, 1.0, 1.5)):
        scenario.at(at, lambda sim, n=number: client_of(sim, writer).set("k", {"v": n}))
    causal = CausalConfig() if announce else CausalConfig(announce_interval=100.0,
                                                          announce_cap=100.0)
    sim, sink = run(scenario, until=15.0, config=ReplicaConfig(causal=causal),
                    keeper=DEFAULT_KEEPER if keeper else None,
                    client=only_at(writer, functools.partial(DropLastData, keep=2)))
    assert cast(DropLastData, sim.process(writer)).data_sent == 3
    readers = scenario.nodes[2:]
    missing = missing_deliveries(sink.rows, readers)
    if announce or keeper:
        assert missing == [], f"seed={seed}"
        assert all(client_of(sim, n).get("k") == {"v": 2} for n in readers)
        check_all(sim, sink, seed)
    else:
        assert missing == [f"{n} misses {writer}:3" for n in readers], f"seed={seed}"


def test_holdback_is_bounded_and_the_nack_loop_recovers_what_it_dropped() -> None:
    seed = 7
    scenario = make_scenario(clients=6, seed=seed, writes=150, keys=20, window=(0.2, 1.5),
                             latency=WIDE, cuts=2.0)
    config = ReplicaConfig(causal=CausalConfig(holdback_limit=3))
    sim, sink = run(scenario, until=40.0, config=config)
    drops = [r for r in named(sink.rows) if r.event == "drop" and "holdback_full" in str(r.info)]
    assert drops, f"seed={seed}: the bound was hit"
    check_all(sim, sink, seed)


@settings(max_examples=8, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    cuts=st.floats(0.0, 2.0),
    spread=st.floats(0.0, 0.3),
    crash=st.booleans(),
    partition=st.booleans(),
    keeper=st.booleans(),
)
def test_property_any_connection_faults_converge_in_causal_order(
    seed: int, cuts: float, spread: float, crash: bool, partition: bool, keeper: bool,
) -> None:
    """Cuts at any rate, any latency spread, with or without a client crash, a partition
    and the hub's keeper."""
    scenario = make_scenario(clients=8, seed=seed, writes=30, keys=3,
                             latency=Uniform(0.001, 0.001 + spread), cuts=cuts)
    if crash:
        scenario.crash(2.0, scenario.nodes[2], recover_after=1.0)
    if partition:
        scenario.partition(1.0, [[HUB, *scenario.nodes[1:6]], scenario.nodes[6:]],
                           heal_at=3.0)
    sim, sink = run(scenario, until=60.0, keeper=DEFAULT_KEEPER if keeper else None)
    check_all(sim, sink, seed)


@pytest.mark.slow
def test_a_thousand_clients_converge() -> None:
    """Scale: 1,000 clients, some of their connections cut while they write. The cost is the
    seed's join: every Subscribe the keeper cannot serve reaches every client connected, and
    every connection that ends is a ``Left`` to all the others, so few writes and a short run."""
    seed = 8
    scenario = make_scenario(clients=1000, seed=seed, writes=15, keys=3, window=(0.5, 2.0),
                             delete_rate=0.0, cuts=0.05)
    sim, sink = run(scenario, until=8.0)
    check_all(sim, sink, seed)
    assert cuts_made(sink.rows) > 0, f"seed={seed}"
    assert count(sink.rows, layer=LAYER, event="deliver") >= 15 * 999, f"seed={seed}"


# -- the client core, driven by hand --------------------------------------------------------


M = TypeVar("M", bound=Message)


def take(env: FakeEnv, kind: type[M]) -> list[M]:
    """The messages of ``kind`` the client sent (a client sends to the hub only), taken out of
    ``env.sent``."""
    assert all(dst == HUB for dst, _ in env.sent), env.sent
    taken = [msg for _, msg in env.sent if isinstance(msg, kind)]
    env.sent = [(dst, msg) for dst, msg in env.sent if not isinstance(msg, kind)]
    return taken


def start_online(client: ReplicaClient) -> None:
    """Start a client and answer its subscribe as the hub's keeper does (an empty retry): it
    has caught up, so it is online."""
    client.start()
    client.on_message(HUB, Retry(id=HUB, dest=client.me, retry=()))
    assert client.link is LinkState.ONLINE


def write(writer: str, vector: dict[str, int], key: str, old: str | None, rev: str,
          content: Any = None) -> Data:
    content = {"by": writer, "rev": rev} if content is None else content
    return Data(id=writer, key=key, old_value=old, value=rev, crc=crc_of(key, rev, content),
                vector=vector, data=content)


R0 = write("n9", {"n9": 1}, "k", None, "r0")
C1 = write("n3", {"n9": 1, "n3": 1}, "k", "r0", "c1")
C2 = write("n1", {"n9": 1, "n3": 1, "n1": 1}, "k", "c1", "c2")  # built on c1
M = write("n2", {"n9": 1, "n2": 1}, "k", "r0", "m")  # concurrent with c1 and c2


@pytest.mark.parametrize("order", [(R0, C1, C2, M), (R0, M, C1, C2), (R0, C1, M, C2)],
                         ids=["c1-c2-m", "m-c1-c2", "c1-m-c2"])
def test_conflicts_are_decided_where_the_writes_fork_whatever_the_order(
    order: tuple[Data, ...],
) -> None:
    """n2's m beats n3's c1 at their fork r0, so n1's c2 (built on c1) loses with it, in every
    causal order. (Comparing m with every write after r0 would let c2, by n1, beat m in the
    first order and lose in the second: replicas would diverge.)"""
    env = FakeEnv("n8")
    client = ReplicaClient(env)
    start_online(client)
    for msg in order:
        client.on_message(HUB, msg)
    assert client.revision("k") == "m"
    assert client.history("k") == [("r0", "n9", 1), ("m", "n2", 1)]
    conflicts = take(env, Conflict)
    assert sorted((c.dest, c.loser_time, c.winner, c.winner_time) for c in conflicts) == [
        ("n1", 1, "n2", 1), ("n3", 1, "n2", 1)]


def test_a_lost_own_write_is_rebased_once_after_its_winner_even_if_also_told() -> None:
    env = FakeEnv("n5")
    changes: list[tuple[str, Any, str | None]] = []
    client = ReplicaClient(env, on_change=lambda k, c, r: changes.append((k, c, r)))
    start_online(client)
    mine = client.set("k", {"mine": 1})  # seq 1, creates k
    # the peer says so before we have the winner: wait for it and ask for it (footnote 11)
    told = Conflict(id="n7", dest="n5", loser_time=1, winner="n1", winner_time=1, object="k")
    client.on_message(HUB, told)
    assert [(n.dest, n.start, n.end) for n in take(env, Nack)] == []  # NACKed after nack_delay
    env.advance(0.1)
    assert [(n.dest, n.start, n.end) for n in take(env, Nack)] == [("n1", 1, 1)]
    assert client.revision("k") == mine and client.resolved == {}
    winner = write("n1", {"n1": 1}, "k", None, "w1", {"theirs": 1})
    client.on_message(HUB, winner)
    assert client.revision("k") == "w1"  # our creation reverted: n1 < n5
    client.on_message(HUB, told)  # told again: still one rebase
    take(env, Data)
    env.advance(1.0)
    rebased = take(env, Data)
    assert [(d.seq, d.old_value, d.data) for d in rebased] == [(2, "w1", {"mine": 1})]
    assert client.resolved == {1: 2}
    assert client.get("k") == {"mine": 1}
    assert len(env.traced("resolve")) == 1
    assert changes[-1] == ("k", {"mine": 1}, rebased[0].value)
    assert not any(isinstance(m, Conflict) for _, m in env.sent), "never a Conflict to oneself"


def test_two_clients_queueing_hundreds_of_writes_to_one_key_offline_converge() -> None:
    """The README's old limit: two clients offline for a while, each writing one key 300 times
    (more than ``history_limit``, 256), then back. Sent as two chains of 300, each client's own
    chain pushed the common base out of its history before the other's first write came, so
    each judged the other's chain a loser and kept its own value for good. With the default
    rebase, a write queued offline after one to the same key replaces it: one write each."""
    seed = 1
    scenario = Scenario(seed=seed, nodes=[HUB, *node_ids(3)], link=LinkModel(latency=LATENCY))
    scenario.listen(HUB, HUB_LISTENER)
    ada, bob, _cy = scenario.nodes[1:]

    def each(nodes: Sequence[str], fn: Callable[[ReplicaNode], Any]) -> Callable[[Simulation],
                                                                                  None]:
        def act(sim: Simulation) -> None:
            for node in nodes:
                sim.call(node, lambda p: fn(cast(ReplicaNode, p)))
        return act

    scenario.at(0.5, each([ada], lambda n: n.client.set("k", "start")))
    scenario.at(1.0, each([ada, bob], lambda n: n.go_offline()))
    for i in range(300):
        scenario.at(1.5, each([ada, bob], lambda n, i=i: n.client.set("k", f"{n.env.node}-{i}")))
    scenario.at(1.6, each([ada, bob], lambda n: _queued_once(n, "k")))
    scenario.at(2.0, each([ada, bob], lambda n: n.reconnect()))
    sim, sink = run(scenario, until=30.0)
    check_all(sim, sink, seed)
    assert len({client_of(sim, n).get("k") for n in scenario.nodes[1:]}) == 1, f"seed={seed}"


def _queued_once(node: ReplicaNode, key: str) -> None:
    assert [k for k, _c, _d in node.client.offline_queue] == [key]


def test_only_a_run_of_writes_to_one_key_collapses_offline_and_only_with_the_default_rebase(
) -> None:
    """Writes to other keys in between keep every intent in order (a reader that sees b must
    see the a before it); an application's own rebase gets every intent, as it wrote them."""
    for rebase, expected in ((None, [("a", 2), ("b", 1), ("a", 4)]),
                             (lambda key, intended, current: intended,
                              [("a", 1), ("a", 2), ("b", 1), ("a", 3), ("a", 4)])):
        client = ReplicaClient(FakeEnv("ada"), rebase=rebase)
        client.start()  # no hub answered: offline, every write queues
        for key, value in (("a", 1), ("a", 2), ("b", 1), ("a", 3), ("a", 4)):
            client.set(key, value)
        assert [(k, c) for k, c, _deleted in client.offline_queue] == expected


def test_a_queued_rebase_survives_a_crash_and_happens_once() -> None:
    store = MemoryStore()
    env = FakeEnv("n5", store=store)
    client = ReplicaClient(env)
    start_online(client)
    client.set("k", {"mine": 1})
    client.on_message(HUB, write("n1", {"n1": 1}, "k", None, "w1"))  # wins: ours is reverted
    assert client.revision("k") == "w1" and client.resolved == {}
    store.crash()  # before the rebase timer fired
    env = FakeEnv("n5", store=store)
    again = ReplicaClient(env)
    start_online(again)
    env.advance(1.0)
    assert [(d.seq, d.old_value, d.data) for d in take(env, Data)] == [(2, "w1", {"mine": 1})]
    assert again.resolved == {1: 2}
    env.advance(5.0)
    assert take(env, Data) == []


def test_subscribe_and_nack_are_answered_from_the_send_log() -> None:
    env = FakeEnv("n1")
    client = ReplicaClient(env)
    start_online(client)
    for number in range(3):
        client.set("k", {"v": number})
    env.sent.clear()
    client.on_message(HUB, Subscribe(id="n2", vector={"n1": 1}))
    [retry] = take(env, Retry)
    assert retry.dest == "n2" and [d.seq for d in retry.retry] == [2, 3]
    client.on_message(HUB, Nack(id="n3", dest="n1", start=1, end=2))
    [retry] = take(env, Retry)
    assert retry.dest == "n3" and [d.seq for d in retry.retry] == [1, 2]
    client.on_message(HUB, Subscribe(id="n4", vector={"n1": 3}))
    assert take(env, Retry) == []


def test_a_resend_of_many_large_writes_fits_the_link_frame_limit() -> None:
    """A subscribe (or NACK) asking for hundreds of a client's large writes is answered in
    retries that each fit the default frame limit (64 KiB): one retry of 256 writes would not,
    and the codec's refusal stopped the client."""
    env = FakeEnv("n1")
    client = ReplicaClient(env)
    start_online(client)
    for number in range(300):
        client.set(f"k{number}", {"v": number, "pad": "x" * 200})
    env.sent.clear()
    client.on_message(HUB, Subscribe(id="n2", vector={}))
    retries = take(env, Retry)
    codec = ReplicaCodec(max_frame=DEFAULT_MAX_FRAME)
    assert all(len(codec.encode(r)) <= DEFAULT_MAX_FRAME for r in retries)
    assert [d.seq for r in retries for d in r.retry] == list(range(1, 301))


def test_a_corrupt_data_message_is_dropped_without_changing_state() -> None:
    env = FakeEnv("n2")
    client = ReplicaClient(env)
    start_online(client)
    good = write("n1", {"n1": 1}, "k", None, "r1")
    client.on_message(HUB, dataclasses.replace(good, crc=good.crc ^ 1))
    assert client.items() == {} and client.vector == {}
    assert env.drop_reasons() == ["crc"]
    env.advance(0.1)
    assert [(n.dest, n.start) for n in take(env, Nack)] == [("n1", 1)]
    client.on_message(HUB, good)
    assert client.get("k") == good.data and client.vector == {"n1": 1}


def test_bad_peer_input_is_refused_before_any_state_changes() -> None:
    env = FakeEnv("n2")
    client = ReplicaClient(env)
    start_online(client)
    good = write("n1", {"n1": 1}, "k", None, "r1")
    # a vector key that is not a client id cannot even be built, nor decoded from the wire
    with pytest.raises(ValueError, match="vector key"):
        write("n1", {"n1": 1, "not an id!": 3}, "k", None, "r1")
    with pytest.raises(InvalidMessage, match="vector key"):
        ReplicaCodec().decode('{"id": "n1", "vector": {"": 1}, "subscribe": true}')
    assert client.vector == {} and client.items() == {} and client.causal.gaps() == {}
    # a message that counts writes of ours we never made could never be delivered: dropped
    client.on_message(HUB, write("n1", {"n1": 1, "n2": 4}, "k", None, "r1"))
    assert env.drop_reasons() == ["own_future"]
    client.on_message(HUB, good)
    assert client.vector == {"n1": 1}


def test_the_hub_routes_by_connection_and_drops_what_the_relay_refuses() -> None:
    """A connection is in the relay from its opening; its first frame binds it to the
    client's id, under which the hub routes to it, and a cut moves the id to the client's next
    connection. A NACK for nobody, or in another's name, is dropped and traced."""
    scenario = make_scenario(clients=2, seed=10, writes=0, keys=1)
    one, two = scenario.nodes[1:]
    sim, sink = run(scenario, until=1.0)
    hub = cast(HubService, sim.process(HUB))
    second = cast(ReplicaNode, sim.process(two))
    first = hub.relay.connection_of(two)
    assert isinstance(first, SimConn) and first.node == HUB and first.peer is second.conn
    assert hub.connections == 2 and hub.relay.id_of(first) == two
    joins = {r.peer: _info(r)["conn"] for r in named(sink.rows)
             if r.layer == "hub" and r.event == "join"}
    assert joins == {one: cast(SimConn, hub.relay.connection_of(one)).id, two: first.id}

    def send(msg: Message) -> None:
        sim.call(one, lambda p: cast(ReplicaNode, p).client.send(msg))

    send(Nack(id=one, dest="n9", start=1, end=1))  # no such client
    send(Nack(id=two, dest=two, start=1, end=1))  # speaks for another
    sim.call(one, lambda p: cast(ReplicaNode, p).client.set("k", 1))
    sim.run(until=2.0)
    drops = [r for r in named(sink.rows) if r.layer == "hub" and r.event == "drop"]
    assert len(drops) == 2 and all(r.peer == one for r in drops)
    assert client_of(sim, two).get("k") == 1
    sim.cut(two, HUB)
    sim.run(until=5.0)
    again = hub.relay.connection_of(two)
    assert isinstance(again, SimConn) and again is not first and again.peer is second.conn
    assert hub.connections == 2 and second.connects == 2


def test_a_node_builds_the_client_class_it_is_given_and_links_it_to_its_connection() -> None:
    class Mine(ReplicaClient):
        pass

    env = FakeEnv("n1")
    node = ReplicaNode(env, hub=HUB_ADDRESS, client_class=Mine, config=ReplicaConfig())
    assert type(node.client) is Mine
    node.start()
    [conn] = env.dialed
    node.opened(conn, HUB_ADDRESS)
    [(to, frame)] = env.take_written()  # the subscribe, on the connection, not env.send
    assert to is conn and isinstance(ReplicaCodec().decode(frame), Subscribe)
    assert env.sent == []
    with pytest.raises(ConfigError, match="client_class"):
        ReplicaNode(env, hub=HUB_ADDRESS, client_class=dict)  # type: ignore[arg-type]


def test_a_crash_recovered_client_resumes_and_never_reuses_a_sequence_number() -> None:
    store = MemoryStore()
    env = FakeEnv("n4", store=store)
    client = ReplicaClient(env)
    start_online(client)
    client.set("a", 1)
    client.set("b", 2)
    client.on_message(HUB, write("n1", {"n1": 1}, "c", None, "r1", 3))
    store.crash()  # only committed state survives
    again = ReplicaClient(FakeEnv("n4", store=store))
    assert again.items() == {"a": 1, "b": 2, "c": 3}
    assert again.vector == {"n1": 1, "n4": 2}
    start_online(again)
    again.set("a", 5)
    assert again.causal.sent == 3


# -- the oracles can fail ---------------------------------------------------------------------


def _row(t: float, node: str, event: str, origin: str, seq: int, vector: dict[str, int],
         **info: Any) -> tuple[Any, ...]:
    return ("run", t, node, LAYER, event, f"{origin}:{seq}", origin, None, "k", seq, None,
            json.dumps({"vector": vector, **info}, sort_keys=True))


def test_causal_oracle_reports_a_delivery_before_its_cause() -> None:
    rows = [
        _row(0.0, "a", "publish", "a", 1, {"a": 1}),
        _row(0.1, "b", "deliver", "a", 1, {"a": 1}),
        _row(0.2, "b", "publish", "b", 1, {"a": 1, "b": 1}),
        # c gets b:1 (which depends on a:1) before a:1
        _row(0.3, "c", "deliver", "b", 1, {"a": 1, "b": 1}),
        _row(0.4, "c", "deliver", "a", 1, {"a": 1}),
        _row(0.5, "c", "deliver", "a", 1, {"a": 1}),
    ]
    problems = causal_violations(rows)
    assert problems == ["c deliver b:1 before a:1 (had a:1..0)", "c delivered a:1 twice"]
    assert causal_violations(rows[:3]) == []
    assert missing_deliveries(rows[:2], ["a", "b", "c"]) == ["c misses a:1"]


def test_convergence_and_loser_oracles_report_divergence_and_unresolved_losers() -> None:
    def publish(node: str, seq: int, old: str | None, rev: str) -> tuple[Any, ...]:
        return _row(0.0, node, "publish", node, seq, {node: seq}, old=old, rev=rev,
                    deleted=False)

    rows = [publish("n2", 1, None, "x"), publish("n1", 1, None, "y"),
            publish("n3", 1, "x", "z")]  # n1's y wins at the root; x and z (on x) lose
    assert [w.rev for w in winning_paths(published_writes(rows))["k"]] == ["y"]
    assert convergence_problems(rows, {"n1": ({"k": "y"}, {}), "n2": ({"k": "y"}, {})}) == []
    assert convergence_problems(rows, {"n1": ({"k": "y"}, {}), "n2": ({"k": "z"}, {})}) == [
        "n2 differs from the winning revisions on ['k']"]
    assert loser_problems(rows) == [
        "n2:1 lost but no replica reported a conflict", "n2:1 lost and was resolved 0 times",
        "n3:1 lost but no replica reported a conflict", "n3:1 lost and was resolved 0 times"]
    reported = [("run", 0.1, "n1", LAYER, "conflict", None, None, None, "k", None, None,
                 json.dumps({"loser": loser, "winner": "n1:1"})) for loser in ("n2:1", "n3:1")]
    resolved = [("run", 0.2, node, LAYER, "resolve", None, node, None, "k", None, None,
                 json.dumps({"original": 1, "new": None})) for node in ("n2", "n3", "n3")]
    assert loser_problems(rows + reported + resolved) == ["n3:1 lost and was resolved 2 times"]


def stored_history(store: MemoryStore, key: str) -> dict[int, dict[int, str]]:
    """row (its first position) -> position -> revision, of ``key``'s stored history."""
    rows: dict[int, dict[int, str]] = {}
    for row_key, raw in store.scan("replica.paths"):
        name, first = json.loads(row_key)
        if name == key:
            offset = 0
            while offset < len(raw):  # entries "position length json"
                a = raw.index(b" ", offset)
                b = raw.index(b" ", a + 1)
                end = b + 1 + int(raw[a + 1:b])
                rows.setdefault(first, {})[int(raw[offset:a])] = json.loads(raw[b + 1:end])[0]
                offset = end
    return rows


def positions(rows: dict[int, dict[int, str]]) -> dict[int, str]:
    return {p: rev for row in rows.values() for p, rev in row.items()}


def test_history_is_stored_append_only_bounded_and_reloads_identically() -> None:
    """A push adds a row with its write (it rewrites nothing), a row goes once its positions
    left the bounded history, and a restarted client reloads the same history and goes on
    from its positions."""
    store = MemoryStore()
    env = FakeEnv("n5", store=store)
    client = ReplicaClient(env, config=ReplicaConfig(history_limit=40))
    start_online(client)
    revisions = [client.set("k", {"n": number}) for number in range(100)]
    store.commit()
    rows = stored_history(store, "k")
    # the history is positions 60-99, a row each (a client writes as it goes)
    assert rows == {p: {p: revisions[p]} for p in range(60, 100)}
    again = ReplicaClient(FakeEnv("n5", store=store),
                          config=ReplicaConfig(history_limit=40))
    assert again.history("k") == client.history("k") and len(again.history("k")) == 40
    start_online(again)
    latest = again.set("k", {"n": 100})
    store.commit()
    assert stored_history(store, "k")[100] == {100: latest} and 60 not in stored_history(store, "k")


def test_a_cut_removes_the_reverted_writes_from_the_store() -> None:
    store = MemoryStore()
    env = FakeEnv("n5", store=store)
    client = ReplicaClient(env, config=ReplicaConfig(history_limit=4))
    start_online(client)
    for number in range(7):
        client.set("k", {"n": number})
    mine = client.set("other", 1)
    client.on_message(HUB, write("n1", {"n1": 1}, "other", None, "w1"))  # wins: ours reverted
    store.commit()
    assert stored_history(store, "other") == {0: {0: "w1"}} and mine != "w1"
    assert sorted(positions(stored_history(store, "k"))) == [3, 4, 5, 6]
    again = ReplicaClient(FakeEnv("n5", store=store),
                          config=ReplicaConfig(history_limit=4))
    assert again.history("k") == client.history("k") and len(again.history("k")) == 4
    assert again.get("k") == {"n": 6} and again.revision("other") == "w1"
    start_online(again)
    again.set("k", {"n": 7})  # positions go on from the reloaded ones
    store.commit()
    assert max(positions(stored_history(store, "k"))) == 7


def test_a_cut_inside_a_row_keeps_only_the_positions_before_it() -> None:
    """An observer writes its deliveries as one row per object per group; a winner that forks
    inside that row rewrites it with the positions before the fork."""
    store = MemoryStore()
    observer = ReplicaClient(FakeEnv(HUB, store=store), observer=True)
    observer.start()
    observer.on_message("n1", write("n1", {"n1": 1}, "k", None, "base"))
    previous = "base"
    for seq in range(2, 71):  # n1 extends its own path: positions 0-69
        rev = f"n1-{seq}"
        observer.on_message("n1", write("n1", {"n1": seq}, "k", previous, rev))
        previous = rev
    observer.write_pending()
    assert sorted(stored_history(store, "k")) == [0]  # one row: positions 0-69
    # n0 (a lower id: it wins) wrote on position 20's revision: positions 21-69 are reverted
    observer.on_message("n0", write("n0", {"n0": 1, "n1": 21}, "k", "n1-21", "n0-1"))
    observer.write_pending()
    rows = stored_history(store, "k")
    assert sorted(rows) == [0, 21] and sorted(rows[0]) == list(range(21))
    assert rows[21] == {21: "n0-1"}
    again = ReplicaClient(FakeEnv(HUB, store=store), observer=True)
    assert again.history("k") == observer.history("k") and again.revision("k") == "n0-1"


def test_an_observer_writes_its_history_and_vector_when_asked() -> None:
    store = MemoryStore()
    observer = ReplicaClient(FakeEnv(HUB, store=store), observer=True)
    observer.start()
    previous = None
    for seq in range(1, 35):
        rev = f"n1-{seq}"
        observer.on_message("n1", write("n1", {"n1": seq}, "k", previous, rev))
        previous = rev
    assert stored_history(store, "k") == {}  # with the group
    assert store.get("replica.vector", "n1") is None  # its delivered count: with the group
    observer.write_pending()
    assert store.get("replica.vector", "n1") == b"34"
    assert stored_history(store, "k") == {0: {p: f"n1-{p + 1}" for p in range(34)}}
    again = ReplicaClient(FakeEnv(HUB, store=store), observer=True)
    assert again.history("k") == observer.history("k")
