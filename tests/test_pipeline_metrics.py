"""Metrics on one small hand-written trace whose every number can be worked out on paper."""

from __future__ import annotations

from typing import Any

import pytest
from pyspark.sql import Row
from pyspark.testing import assertDataFrameEqual

from gossamer.pipeline import metrics
from trace_frames import deliver, frame, publish, row

pytestmark = pytest.mark.spark


def send(t: float, node: str, msg: str, peer: str) -> Any:
    return row(t, node, "send", msg=msg, origin=msg.split(":")[0], peer=peer, size=10,
               info={"type": "fifo.data"})


def recv(t: float, node: str, msg: str, peer: str) -> Any:
    return row(t, node, "recv", msg=msg, origin=msg.split(":")[0], peer=peer, size=10,
               info={"type": "fifo.data"})


# a:1 reaches b in 0.1 s and c in 0.3 s (c also gets a duplicate); b:1 reaches a in 0.2 s
# and c in 0.6 s; a crashes before the run ends
ROWS = [
    publish(1.0, "a", 1), deliver(1.0, "a", "a", 1),
    send(1.0, "a", "a:1", "b"), send(1.0, "a", "a:1", "c"),
    recv(1.1, "b", "a:1", "a"), deliver(1.1, "b", "a", 1, info={"hop": 1}),
    recv(1.3, "c", "a:1", "a"), deliver(1.3, "c", "a", 1, info={"hop": 2}),
    recv(1.4, "c", "a:1", "a"),
    publish(2.0, "b", 1), deliver(2.0, "b", "b", 1),
    send(2.0, "b", "b:1", "a"), send(2.0, "b", "b:1", "c"),
    recv(2.2, "a", "b:1", "b"), deliver(2.2, "a", "b", 1),
    recv(2.6, "c", "b:1", "b"), deliver(2.6, "c", "b", 1),
    row(2.5, "a", "crash", layer="sim"),
]


@pytest.fixture(scope="module")
def trace(spark: Any) -> Any:
    return frame(spark, ROWS)


def test_latency_per_delivery_and_percentiles(trace: Any) -> None:
    samples = metrics.latency_samples(trace)
    assertDataFrameEqual(samples, [
        Row(run="r1", layer="fifo", msg="a:1", node="b", latency=0.1),
        Row(run="r1", layer="fifo", msg="a:1", node="c", latency=0.3),
        Row(run="r1", layer="fifo", msg="b:1", node="a", latency=0.2),
        Row(run="r1", layer="fifo", msg="b:1", node="c", latency=0.6),
    ])
    assertDataFrameEqual(metrics.latency_summary(samples), [Row(
        run="r1", layer="fifo", deliveries=4, latency_mean=0.3, latency_p50=0.2,
        latency_p95=0.6, latency_p99=0.6, latency_max=0.6)])
    assertDataFrameEqual(metrics.latency_cdf(samples, points=2), [
        Row(run="r1", fraction=0.0, latency=0.1), Row(run="r1", fraction=1.0, latency=0.6)])


def test_messages_per_operation(trace: Any) -> None:
    assertDataFrameEqual(metrics.messages_per_operation(trace), [Row(
        run="r1", operations=2, messages=4, bytes=40, messages_per_operation=2.0,
        bytes_per_operation=20.0)])


def test_node_load_and_its_distribution(trace: Any) -> None:
    load = metrics.node_load(trace)
    assertDataFrameEqual(load, [
        Row(run="r1", node="a", sent=2, received=1, delivered=2, bytes_sent=20,
            bytes_received=10, stored=None, stored_items=None, load=3),
        Row(run="r1", node="b", sent=2, received=1, delivered=2, bytes_sent=20,
            bytes_received=10, stored=None, stored_items=None, load=3),
        Row(run="r1", node="c", sent=0, received=3, delivered=2, bytes_sent=0,
            bytes_received=30, stored=None, stored_items=None, load=3),
    ])
    assertDataFrameEqual(metrics.load_histogram(load, bins=3),
                         [Row(bin=0, low=3.0, high=4.0, nodes=3)])


def test_throughput_per_bucket(trace: Any) -> None:
    assertDataFrameEqual(metrics.throughput(trace, bucket=1.0), [
        Row(run="r1", second=1.0, deliveries=3, per_second=3.0),
        Row(run="r1", second=2.0, deliveries=3, per_second=3.0),
    ])


def test_convergence_time_per_message(trace: Any) -> None:
    times = metrics.convergence_times(trace)
    assertDataFrameEqual(times, [
        Row(run="r1", layer="fifo", msg="a:1", t_publish=1.0, last_delivery=1.3, deliveries=3,
            convergence=0.3),
        Row(run="r1", layer="fifo", msg="b:1", t_publish=2.0, last_delivery=2.6, deliveries=3,
            convergence=0.6),
    ])
    assertDataFrameEqual(metrics.convergence_summary(times), [Row(
        run="r1", convergence_p50=0.3, convergence_p95=0.6, convergence_p99=0.6,
        convergence_max=0.6)])


def test_redundancy_and_last_delivery_hop(trace: Any) -> None:
    # a:1: 3 receipts over 2 other nodes -> 0.5; b:1: 2 over 2 -> 0; mean 0.25
    assertDataFrameEqual(metrics.redundancy(trace), [Row(
        run="r1", rmr=0.25, last_hop_mean=2.0, last_hop_max=2)])


def test_failure_fraction_and_run_overview(trace: Any) -> None:
    assertDataFrameEqual(metrics.failure_fraction(trace), [Row(
        run="r1", nodes=3, failed_nodes=1, failure_fraction=1 / 3)])
    assertDataFrameEqual(metrics.run_overview(trace), [Row(
        run="r1", rows=len(ROWS), t_start=1.0, t_end=2.6, publishes=2, offered_load=1.0)])


def test_bad_metric_arguments_are_refused(trace: Any) -> None:
    with pytest.raises(ValueError, match="bucket"):
        metrics.throughput(trace, bucket=0)
    with pytest.raises(ValueError, match="points"):
        metrics.latency_cdf(metrics.latency_samples(trace), points=1)


def stored(t: float, node: str, size: int, items: int) -> Any:
    return row(t, node, "stored", layer="store", size=size, info={"items": items})


def test_node_load_has_the_latest_stored_bytes_and_items(spark: Any) -> None:
    rows = [*ROWS, stored(1.0, "a", 100, 2), stored(3.0, "a", 150, 3),
            stored(3.0, "b", 0, 0), stored(3.0, "d", 40, 1)]
    load = metrics.node_load(frame(spark, rows)).select("node", "sent", "stored",
                                                        "stored_items")
    assertDataFrameEqual(load, [
        Row(node="a", sent=2, stored=150, stored_items=3),
        Row(node="b", sent=2, stored=0, stored_items=0),
        Row(node="c", sent=0, stored=None, stored_items=None),
        Row(node="d", sent=0, stored=40, stored_items=1),  # a node that only stored
    ])


def lookup(t: float, node: str, hops: int | None, *, run: str = "r1",
           layer: str = "chord") -> Any:
    info = {"root": "n007"} if hops is None else {"hops": hops, "root": "n007"}
    return row(t, node, "lookup", layer=layer, key="k", info=info, run=run)


LOOKUPS = [
    *(lookup(i, "a", hops) for i, hops in enumerate([1, 2, 3, 4, 10])),
    lookup(1.0, "b", 2, run="r2"), lookup(2.0, "b", 4, run="r2"),
    lookup(3.0, "b", None, run="r2"),  # no hops: not a sample
    lookup(4.0, "b", 50, run="r2", layer="pastry"),  # another layer's lookups
]


def test_lookup_hops_per_run_overall_and_by_node_count(spark: Any) -> None:
    samples = metrics.lookup_samples(frame(spark, LOOKUPS))
    assert samples.count() == 7
    assertDataFrameEqual(metrics.lookup_summary(samples), [
        Row(run="r1", lookups=5, hops_mean=4.0, hops_p50=3, hops_p99=10, hops_max=10),
        Row(run="r2", lookups=2, hops_mean=3.0, hops_p50=2, hops_p99=4, hops_max=4),
    ])
    assertDataFrameEqual(metrics.lookup_summary(samples, by=()), [
        Row(lookups=7, hops_mean=26 / 7, hops_p50=3, hops_p99=10, hops_max=10)])
    nodes = samples.sparkSession.createDataFrame([("r1", 16), ("r2", 16)], "run string, "
                                                 "nodes long")
    with_nodes = samples.join(nodes, "run")
    assertDataFrameEqual(metrics.lookup_summary(with_nodes, by=("nodes",)), [
        Row(nodes=16, lookups=7, hops_mean=26 / 7, hops_p50=3, hops_p99=10, hops_max=10)])
    assertDataFrameEqual(metrics.lookup_hop_counts(samples), [
        Row(hops=h, lookups=n) for h, n in [(1, 1), (2, 2), (3, 1), (4, 2), (10, 1)]])


def test_no_lookup_rows_no_samples(trace: Any) -> None:
    assert metrics.lookup_samples(trace).count() == 0


def test_topic_balance_counts_topics_owned_per_live_node(spark: Any) -> None:
    rows = [
        row(0.1, "a", "send", layer="pubsub", peer="b"), row(0.1, "b", "send", layer="pubsub"),
        row(0.1, "c", "send", layer="pubsub"), row(0.1, "d", "send", layer="pubsub"),
        row(1.0, "d", "crash", layer="sim"),  # down at the end: not counted
        row(5.0, "a", "owner", layer="pubsub", key="t0"),
        row(5.0, "a", "owner", layer="pubsub", key="t1"),
        row(5.0, "b", "owner", layer="pubsub", key="t2"),
        row(1.0, "x", "owner", layer="pubsub", key="t0", run="r2"),
    ]
    got = {r.run: r.asDict() for r in metrics.topic_balance(frame(spark, rows)).collect()}
    # owned per node: a 2, b 1, c 0 (mean 1): p99 is the largest, 2
    assert got["r1"] == {"run": "r1", "topics": 3, "nodes": 3, "owned_expected": 1.0,
                         "owned_min": 0, "owned_max": 2, "owned_p99": 2,
                         "owned_p99_over_mean": 2.0}
    assert got["r2"] == {"run": "r2", "topics": 1, "nodes": 1, "owned_expected": 1.0,
                         "owned_min": 1, "owned_max": 1, "owned_p99": 1,
                         "owned_p99_over_mean": 1.0}


def test_topic_balance_p99_is_the_nearest_rank_over_many_nodes(spark: Any) -> None:
    # 200 nodes owning 0, 1, ..., 199 keys: p99 is the 198th smallest (nearest rank), 197
    rows = [row(0.1, f"n{i:03d}", "stored", layer="store") for i in range(200)]
    rows += [row(1.0, f"n{i:03d}", "owner", layer="pubsub", key=f"k{i}-{j}")
             for i in range(200) for j in range(i)]
    (got,) = metrics.topic_balance(frame(spark, rows)).collect()
    mean = sum(range(200)) / 200
    assert (got.nodes, got.owned_min, got.owned_max, got.owned_p99) == (200, 0, 199, 197)
    assert got.owned_expected == mean
    assert got.owned_p99_over_mean == pytest.approx(197 / mean)


def test_layer_messages_per_publish_counts_sends_per_layer(spark: Any) -> None:
    rows = [
        publish(1.0, "a", 1, layer="pubsub", key="t"), publish(1.0, "a", 1, layer="gossip"),
        publish(2.0, "a", 2, layer="pubsub", key="t"),
        row(1.0, "a", "send", layer="gossip", peer="b"),
        row(1.0, "a", "send", layer="gossip", peer="c"),
        row(1.5, "a", "send", layer="hyparview", peer="b"),
    ]
    got = {r.sender_layer: (r.publishes, r.sent, r.per_publish)
           for r in metrics.layer_messages_per_publish(frame(spark, rows)).collect()}
    assert got == {"gossip": (2, 2, 1.0), "hyparview": (2, 1, 0.5)}


# Three processes whose run clocks (t) started at different wall times: a at W, b 4.5 s
# later, c 7.25 s later. a publishes at wall W + 10; b delivers 5 ms later, c 8 ms later.
W = 1_700_000_000.0
STARTED = {"a": W, "b": W + 4.5, "c": W + 7.25}


def at(wall: float, node: str, event: str, **kw: Any) -> Any:
    """A row stamped by ``node``'s process: its ``t`` counts from that process's start."""
    return row(wall - STARTED[node], node, event, wall=wall, **kw)


CROSS_PROCESS = [
    at(W + 10.0, "a", "publish", msg="a:1", origin="a", seq=1),
    # a's own delivery, 20 ms later on its run clock; its wall clock was stepped meanwhile
    # (wall 3 s back), which a delay inside one process must not see
    row(10.02, "a", "deliver", msg="a:1", origin="a", seq=1, wall=W + 7.0),
    at(W + 10.005, "b", "deliver", msg="a:1", origin="a", seq=1),
    at(W + 10.008, "c", "deliver", msg="a:1", origin="a", seq=1),
]


def test_latency_across_processes_is_measured_on_wall(spark: Any) -> None:
    trace = frame(spark, CROSS_PROCESS)
    # on t, b would seem to deliver 4.495 s before the publish and c 7.242 s before it
    # (wall values near 1.7e9 s carry about 0.2 us of float64 rounding: atol 1 us)
    assertDataFrameEqual(metrics.latency_samples(trace), [
        Row(run="r1", layer="fifo", msg="a:1", node="b", latency=0.005),
        Row(run="r1", layer="fifo", msg="a:1", node="c", latency=0.008),
    ], atol=1e-6)
    # the longest delay is a's own delivery, timed on a's run clock
    assertDataFrameEqual(metrics.convergence_times(trace), [
        Row(run="r1", layer="fifo", msg="a:1", t_publish=10.0, last_delivery=10.02,
            deliveries=3, convergence=0.02),
    ], atol=1e-6)
    assert metrics.runs_without_wall(trace).count() == 0


def test_rows_without_wall_give_no_cross_process_latency(spark: Any) -> None:
    # r0 was written before the wall column: b's delivery has no wall, so neither its latency
    # nor the message's convergence is known; a's own delivery (one process) still is
    old = [row(1.0, "a", "publish", msg="a:1", origin="a", seq=1, run="r0", wall=None),
           row(1.0, "a", "deliver", msg="a:1", origin="a", seq=1, run="r0", wall=None),
           row(6.0, "b", "deliver", msg="a:1", origin="a", seq=1, run="r0", wall=None)]
    trace = frame(spark, [*CROSS_PROCESS, *old])
    assert {r.run for r in metrics.latency_samples(trace).collect()} == {"r1"}
    times = {r.run: r.convergence for r in metrics.convergence_times(trace).collect()}
    assert times["r0"] is None
    assert times["r1"] == pytest.approx(0.02)
    assertDataFrameEqual(metrics.runs_without_wall(trace), [Row(run="r0", rows=3)])
