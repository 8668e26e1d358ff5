"""One conformance suite for every service, on both runtimes: the same scenario and the same
assertions in the simulator and over real sockets on 127.0.0.1 (the services' own framings:
JSON lines for seed 003, WebSocket for seed 000's hub, peer links for pub/sub).

The FIFO broadcast has its own suite (``test_conformance.py``); this one runs the services of
the connection contract: the seed-000 hub with its clients, the seed-003 server tree with its
clients, and topic pub/sub over gossip.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import Any, Protocol, cast

import pytest

from gossamer.core import (
    Env,
    FibonacciBackoff,
    Framing,
    ListenerSpec,
    MemorySink,
    Process,
)
from gossamer.protocols.activity import (
    ActivityClientNode,
    ActivityServer,
    ClientScript,
    ServerConfig,
    TreeState,
)
from gossamer.protocols.replica import HUB_ID, LinkState
from gossamer.protocols.replica.hub_service import HubService
from gossamer.protocols.replica.node import ReplicaNode
from gossamer.services.pubsub.node import PubSubNode, codec_for
from harness_sim import SimCluster

RUNTIMES = ["sim", "net", "uvloop"]  # uvloop: over sockets on uvloop's event loop
TIMEOUT = {"sim": 60.0, "net": 30.0, "uvloop": 30.0}  # virtual seconds in the sim, wall else


class Cluster(Protocol):
    node_ids: list[str]
    trace: MemorySink

    def process(self, node: str) -> Process: ...
    def call(self, node: str, fn: Callable[[Process], None]) -> None: ...
    def run_until(self, predicate: Callable[[], bool], timeout: float) -> bool: ...
    def listener_address(self, node: str, name: str) -> str: ...
    def close(self) -> None: ...


@pytest.fixture(params=RUNTIMES)
def runtime(request: pytest.FixtureRequest) -> str:
    return cast(str, request.param)


@pytest.fixture
def make_cluster(runtime: str) -> Iterator[Callable[..., Cluster]]:
    made: list[Cluster] = []

    def make(node_ids: list[str], factory: Callable[[Env, Any], Process], *,
             listeners: dict[str, list[ListenerSpec]], seed: int = 0) -> Cluster:
        cluster: Cluster
        if runtime == "sim":
            cluster = SimCluster(node_ids, factory, seed=seed,  # type: ignore[arg-type]
                                 listeners=listeners, sees_cluster=True)
        else:
            from harness_net import NetCluster, uvloop_factory

            cluster = NetCluster(node_ids, factory, transport="tcp",  # type: ignore[arg-type]
                                 seed=seed, listeners=listeners, sees_cluster=True,
                                 codec=codec_for("gossip"),
                                 **({"loop_factory": uvloop_factory()}
                                    if runtime == "uvloop" else {}))
        made.append(cluster)
        return cluster

    yield make
    for cluster in made:
        cluster.close()


def delivered_rows(cluster: Cluster, layer: str) -> dict[str, list[tuple[str, int]]]:
    out: dict[str, list[tuple[str, int]]] = defaultdict(list)
    for row in cluster.trace.named():
        if row.layer == layer and row.event == "deliver" and row.origin is not None:
            assert row.seq is not None
            out[row.node].append((row.origin, row.seq))
    return out


# -- seed 000: the hub and its clients -----------------------------------------------------

HUB_PORT = 8080
HUB_SPEC = ListenerSpec(name="clients", port=HUB_PORT, framing=Framing.WS, path="/ws",
                        handshake_timeout=None)
CLIENTS = ["ada", "bob", "cy"]


def hub_factory(env: Env, cluster: Cluster) -> Process:
    if env.node == HUB_ID:
        return HubService(env)
    return ReplicaNode(env, hub=cluster.listener_address(HUB_ID, "clients"),
                       backoff=FibonacciBackoff(unit=0.05, cap=0.5))


def test_replica_clients_converge_through_the_hub(make_cluster: Callable[..., Cluster],
                                                  runtime: str) -> None:
    cluster = make_cluster([HUB_ID, *CLIENTS], hub_factory, listeners={HUB_ID: [HUB_SPEC]})

    def node(name: str) -> ReplicaNode:
        return cast(ReplicaNode, cluster.process(name))

    assert cluster.run_until(lambda: all(node(c).client.link is LinkState.ONLINE
                                         for c in CLIENTS), TIMEOUT[runtime])
    for index, name in enumerate(CLIENTS):
        for n in range(5):
            cluster.call(name, lambda p, n=n, i=index: cast(ReplicaNode, p).client.set(
                f"own-{i}", n))
        # everyone writes the same key: conflicts, lowest id wins, losers rebase
        cluster.call(name, lambda p, i=index: cast(ReplicaNode, p).client.set("shared", i))

    def converged() -> bool:
        states = [node(c).client.items() for c in CLIENTS]
        return (all(s == states[0] for s in states) and len(states[0]) == len(CLIENTS) + 1
                and all(not node(c).client.rebase_queue and node(c).client.causal.caught_up
                        for c in CLIENTS))

    assert cluster.run_until(converged, TIMEOUT[runtime]), [
        node(c).client.items() for c in CLIENTS]
    final = node(CLIENTS[0]).client.items()
    assert [final[f"own-{i}"] for i in range(len(CLIENTS))] == [4] * len(CLIENTS)
    hub = cast(HubService, cluster.process(HUB_ID))
    assert hub.keeper is not None and hub.keeper.replica.items() == final
    joins = [r.peer for r in cluster.trace.named() if r.layer == "hub" and r.event == "join"]
    assert sorted(joins) == sorted(CLIENTS)


# -- seed 003: a server tree and its clients -----------------------------------------------

ACTIVITY_PORT = 3780
ACTIVITY_SPEC = ListenerSpec(name="activity", port=ACTIVITY_PORT, reserved_for_peers=4)
TREE = {"s1": None, "s2": "s1"}
USERS = ["u1", "u2", "u3", "u4"]
PER_USER = 5


def activity_factory(env: Env, cluster: Cluster) -> Process:
    if env.node in TREE:
        parent = TREE[env.node]
        remote = None
        if parent is not None:
            host, port = cluster.listener_address(parent, "activity").rsplit(":", 1)
            remote = (host, int(port))
        here = cluster.listener_address(env.node, "activity").rsplit(":", 1)
        return ActivityServer(env, ServerConfig(
            secret="conformance", hostname=here[0], port=int(here[1]), remote=remote,
            announce_interval=0.5, reconnect_delay=0.5, hash_iterations=10))
    server = "s1" if USERS.index(env.node) % 2 == 0 else "s2"
    return ActivityClientNode(env, ClientScript(
        servers=(cluster.listener_address(server, "activity"),), username=env.node,
        secret=f"pw-{env.node}", register=True))


def test_activities_reach_every_other_client_once_in_sender_order(
        make_cluster: Callable[..., Cluster], runtime: str) -> None:
    cluster = make_cluster([*TREE, *USERS], activity_factory,
                           listeners={s: [ACTIVITY_SPEC] for s in TREE})

    def client(name: str) -> ActivityClientNode:
        return cast(ActivityClientNode, cluster.process(name))

    def ready() -> bool:
        child = cast(ActivityServer, cluster.process("s2"))
        return child.state is TreeState.ATTACHED and all(client(u).joined for u in USERS)

    assert cluster.run_until(ready, TIMEOUT[runtime])
    assert all(client(u).register_result for u in USERS)
    for n in range(PER_USER):
        for user in USERS:
            cluster.call(user, lambda p, n=n: cast(ActivityClientNode, p).publish({"n": n}))

    def everyone_has_all() -> bool:
        got = delivered_rows(cluster, "activity")
        return all(len(got[u]) == PER_USER * len(USERS) for u in USERS)  # own ones included

    assert cluster.run_until(everyone_has_all, TIMEOUT[runtime])
    got = delivered_rows(cluster, "activity")
    for user in USERS:
        assert len(set(got[user])) == len(got[user]), f"{user} got a duplicate"
        for origin in USERS:
            seqs = [seq for o, seq in got[user] if o == origin]
            assert seqs == list(range(1, PER_USER + 1)), (user, origin, seqs)
    # every server delivered every activity that passed through it, once
    for server in TREE:
        assert len(got[server]) == len(set(got[server]))


# -- seed 001: topic pub/sub over gossip --------------------------------------------------

PEERS = ["p0", "p1", "p2", "p3"]


def test_pubsub_delivers_each_topic_to_its_subscribers_only(
        make_cluster: Callable[..., Cluster], runtime: str) -> None:
    nodes: dict[str, PubSubNode] = {}

    def pubsub_factory(env: Env, cluster: Cluster) -> Process:
        contacts = [] if env.node == "p0" else ["p0"]
        node = nodes[env.node] = PubSubNode(env, "gossip", contacts=contacts)
        if env.node != "p3":
            node.subscribe("news")
        node.subscribe("other")
        return node.process

    cluster = make_cluster(PEERS, pubsub_factory, listeners={})

    def members() -> bool:
        return all(len(cast(Any, nodes[p].gossip).membership.active_view()) >= 2
                   for p in PEERS)

    assert cluster.run_until(members, TIMEOUT[runtime])
    sent = []
    for index, name in enumerate(PEERS):
        for topic in ("news", "other"):
            cluster.call(name, lambda p, t=topic, i=index: sent.append(
                (t, nodes[PEERS[i]].publish(t, f"{t} from {PEERS[i]}"))))

    def all_delivered() -> bool:
        got = delivered_rows(cluster, "pubsub")
        return all(len(got[p]) == (8 if p != "p3" else 4) for p in PEERS)

    assert cluster.run_until(all_delivered, TIMEOUT[runtime])
    rows = [r for r in cluster.trace.named() if r.layer == "pubsub" and r.event == "deliver"]
    assert not [r for r in rows if r.node == "p3" and r.key == "news"]  # not subscribed
    per_node = defaultdict(list)
    for row in rows:
        per_node[row.node].append(row.msg)
    for node, msgs in per_node.items():
        assert len(msgs) == len(set(msgs)), f"{node} delivered a message twice"
