"""One conformance suite for every runtime: the same tests on sim, TCP and WebSocket.

Each test builds a cluster through the ``cluster`` fixture (simulator, or a NetHost with all
nodes on 127.0.0.1 ephemeral ports) and drives the unchanged FifoBroadcast protocol.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Protocol, cast

import pytest

from checks import count, fifo_violations, missing_deliveries
from gossamer.core import Env, MemorySink, Process, ProcessFactory
from gossamer.protocols.ordering import FifoBroadcast, FifoData
from gossamer.protocols.ordering.fifo import CODEC as FIFO_CODEC
from harness_sim import SimCluster

# uvloop: TCP peer links on uvloop's event loop instead of asyncio's (its WebSocket listeners:
# test_conformance_services.py)
RUNTIMES = ["sim", "tcp", "ws", "uvloop"]
# virtual seconds in the simulator, wall seconds on sockets
TIMEOUT = {"sim": 120.0, "tcp": 30.0, "ws": 30.0, "uvloop": 30.0}


class Cluster(Protocol):
    node_ids: list[str]
    trace: MemorySink

    def process(self, node: str) -> Process: ...
    def call(self, node: str, fn: Callable[[Process], None]) -> None: ...
    def run_until(self, predicate: Callable[[], bool], timeout: float) -> bool: ...
    def close(self) -> None: ...


MakeCluster = Callable[..., Cluster]


@pytest.fixture(params=RUNTIMES)
def runtime(request: pytest.FixtureRequest) -> str:
    return cast(str, request.param)


@pytest.fixture
def make_cluster(runtime: str) -> Iterator[MakeCluster]:
    made: list[Cluster] = []

    def make(node_ids: list[str], factory: ProcessFactory, *, seed: int = 0,
             loss: float = 0.0) -> Cluster:
        cluster: Cluster
        if runtime == "sim":
            cluster = SimCluster(node_ids, factory, seed=seed, loss=loss)
        else:
            from harness_net import NetCluster, uvloop_factory

            on_uvloop = runtime == "uvloop"
            cluster = NetCluster(node_ids, factory, transport="tcp" if on_uvloop else runtime,
                                 seed=seed, loss=loss, codec=FIFO_CODEC,
                                 **({"loop_factory": uvloop_factory()} if on_uvloop else {}))
        made.append(cluster)
        return cluster

    yield make
    for cluster in made:
        cluster.close()


def fifo_group(ids: list[str]) -> ProcessFactory:
    def factory(env: Env) -> FifoBroadcast:
        return FifoBroadcast(env, ids)

    return factory


def fifo(cluster: Cluster, node: str) -> FifoBroadcast:
    return cast(FifoBroadcast, cluster.process(node))


def all_delivered(cluster: Cluster, per_origin: dict[str, int]) -> Callable[[], bool]:
    def check() -> bool:
        return all(
            fifo(cluster, node).delivered_upto(origin) >= sent
            for node in cluster.node_ids
            for origin, sent in per_origin.items()
        )

    return check


def broadcast_from_all(cluster: Cluster, per_node: int) -> dict[str, int]:
    for i in range(per_node):
        for node in cluster.node_ids:
            cluster.call(node, lambda p, i=i, node=node: cast(FifoBroadcast, p).broadcast(
                {"from": node, "i": i}))
    return {node: per_node for node in cluster.node_ids}


def test_every_member_delivers_every_broadcast_in_order(
    make_cluster: MakeCluster, runtime: str
) -> None:
    ids = ["a", "b", "c", "d"]
    cluster = make_cluster(ids, fifo_group(ids))
    sent = broadcast_from_all(cluster, 25)
    assert cluster.run_until(all_delivered(cluster, sent), TIMEOUT[runtime])
    assert fifo_violations(cluster.trace.rows) == []
    assert missing_deliveries(cluster.trace.rows, ids) == []
    assert count(cluster.trace.rows, layer="fifo", event="deliver") == 4 * 100


def test_losses_are_repaired(make_cluster: MakeCluster, runtime: str) -> None:
    ids = ["a", "b", "c"]
    cluster = make_cluster(ids, fifo_group(ids), seed=5, loss=0.2)
    sent = broadcast_from_all(cluster, 30)
    assert cluster.run_until(all_delivered(cluster, sent), TIMEOUT[runtime])
    assert fifo_violations(cluster.trace.rows) == []
    assert missing_deliveries(cluster.trace.rows, ids) == []
    assert count(cluster.trace.rows, layer="fifo", event="nack") > 0


def test_one_origin_burst_arrives_in_order(make_cluster: MakeCluster, runtime: str) -> None:
    ids = ["a", "b"]
    cluster = make_cluster(ids, fifo_group(ids), seed=2)
    for i in range(300):
        cluster.call("a", lambda p, i=i: cast(FifoBroadcast, p).broadcast(i))
    assert cluster.run_until(all_delivered(cluster, {"a": 300}), TIMEOUT[runtime])
    delivered = [r[9] for r in cluster.trace.rows if r[2] == "b" and r[4] == "deliver"]
    assert delivered == list(range(1, 301))


def test_a_forged_message_is_dropped_and_the_node_keeps_working(
    make_cluster: MakeCluster, runtime: str
) -> None:
    ids = ["a", "b", "c"]
    bodies: dict[str, list[object]] = {node: [] for node in ids}

    def factory(env: Env) -> FifoBroadcast:
        return FifoBroadcast(env, ids, on_deliver=lambda origin, seq, body: bodies[
            env.node].append(body))

    cluster = make_cluster(ids, factory)

    def forge(process: Process) -> None:
        # "a" claims to relay an original of "c": the receiver must refuse it
        cast(FifoBroadcast, process).env.send("b", FifoData(origin="c", seq=1, body="forged"))

    cluster.call("a", forge)
    sent = broadcast_from_all(cluster, 3)

    def dropped_and_delivered() -> bool:
        drops = [r for r in cluster.trace.rows if r[2] == "b" and r[4] == "drop"]
        return bool(drops) and all_delivered(cluster, sent)()

    assert cluster.run_until(dropped_and_delivered, TIMEOUT[runtime])
    assert fifo_violations(cluster.trace.rows) == []
    assert "forged" not in bodies["b"]
    assert {"from": "c", "i": 0} in bodies["b"] and len(bodies["b"]) == 9
