"""The workload options the VOPR draws beyond what experiments used before: the FIFO group's
crash time and healed partition, pub/sub's duplication, reordering and crashing non-publishers,
the replica group's partition from the hub. Each fault happens when and where it says, and the
guarantee still holds."""

from __future__ import annotations

import json
from typing import Any

import pytest

from checks import fifo_violations, link_faults, named
from gossamer.core import ConfigError, MemorySink
from gossamer.services.broadcast import FifoRunOptions, run_fifo_sim
from gossamer.services.pubsub.experiment import PubSubRunOptions, run_pubsub_sim
from gossamer.services.replica.experiment import ReplicaRunOptions, run_replica_sim


def fifo(**options: Any) -> tuple[Any, list[Any]]:
    sink = MemorySink()
    result = run_fifo_sim(FifoRunOptions(**options), trace=sink)
    return result, named(sink.rows)


def test_fifo_crashes_at_crash_at_and_heals_its_partition_then_delivers_everything() -> None:
    result, rows = fifo(nodes=6, messages=60, rate=30.0, loss=0.2, crash=0.5, crash_at=0.4,
                        recover_after=0.5, partition=True, partition_at=1.0,
                        partition_for=0.6, settle=40.0, seed=3)
    crashes = [r for r in rows if r.event == "crash"]
    assert len(crashes) == 3 and {r.t for r in crashes} == {0.4}
    assert {r.t for r in rows if r.event == "recover"} == {0.9}
    [split] = [r for r in rows if r.event == "partition"]
    groups = json.loads(split.info)["groups"]
    assert split.t == 1.0 and sorted(len(g) for g in groups) == [3, 3]
    assert sorted(n for g in groups for n in g) == [f"n{i:03d}" for i in range(6)]
    assert [r.t for r in rows if r.event == "heal"] == [1.6]
    assert result.reliability == 1.0 and result.order_violations == 0
    assert fifo_violations(rows) == []
    # the partition cut messages that retransmission then repaired
    assert any(r.event == "nack" for r in rows if r.t > 1.0)


def test_fifo_without_crash_at_still_crashes_mid_workload() -> None:
    _result, rows = fifo(nodes=4, messages=40, rate=20.0, crash=0.5, recover_after=0.5)
    assert {r.t for r in rows if r.event == "crash"} == {1.0}


def test_fifo_fault_times_are_validated() -> None:
    for bad in ({"crash_at": -1.0}, {"partition_at": -0.1}, {"partition_for": 0.0}):
        with pytest.raises(ConfigError):
            FifoRunOptions(**bad)  # type: ignore[arg-type]


def pubsub(**options: Any) -> tuple[Any, list[Any]]:
    sink = MemorySink()
    result = run_pubsub_sim(PubSubRunOptions(**options), sink)
    return result, named(sink.rows)


def test_pubsub_duplicates_and_reorders_and_still_delivers_everything() -> None:
    result, rows = pubsub(nodes=10, publishes_per_node=3, duplicate=0.2, reorder=0.3, seed=4)
    faults = link_faults(rows)
    assert faults["duplicated"] > 0 and faults["reordered"] > 0
    assert result.reliability == 1.0
    assert sum(1 for r in rows if r.layer == "pubsub" and r.event == "deliver") > 0


@pytest.mark.parametrize("mode", ["gossip", "gossip-tree"])
def test_pubsub_nodes_that_crash_publish_nothing_when_asked(mode: str) -> None:
    options = {"nodes": 12, "mode": mode, "publishes_per_node": 3, "crash": 0.25,
               "crash_at": 0.2, "seed": 5}
    result, rows = pubsub(**options, crash_publishers=False)
    publishers = {r.node for r in rows if r.layer == "pubsub" and r.event == "publish"}
    assert len(result.crashed) == 3 and publishers.isdisjoint(result.crashed)
    assert result.published == result.requested == 36 and result.skipped == 0
    assert result.reliability == 1.0
    assert missing_deliveries_of_survivors(rows, result.crashed) == []
    # by default the crashing nodes keep their share: publishes after the crash are skipped
    crashing, _ = pubsub(**options)
    assert crashing.skipped > 0


def missing_deliveries_of_survivors(rows: list[Any], crashed: list[str]) -> list[str]:
    """(pub/sub rows) messages some live subscriber of the topic never delivered."""
    subscribed: dict[str, set[str]] = {}
    want: dict[str, set[str]] = {}
    got: dict[str, set[str]] = {}
    for r in rows:
        if r.layer != "pubsub":
            continue
        if r.event == "subscribe":
            subscribed.setdefault(str(r.key), set()).add(r.node)
        elif r.event == "publish":
            want[str(r.msg)] = subscribed.get(str(r.key), set()) - set(crashed) - {r.node}
        elif r.event == "deliver":
            got.setdefault(str(r.msg), set()).add(r.node)
    return sorted(f"{m} at {n}" for m, nodes in want.items() for n in nodes
                  if n not in got.get(m, set()))


def test_replica_clients_partitioned_from_the_hub_catch_up_after_the_heal() -> None:
    sink = MemorySink()
    options = ReplicaRunOptions(clients=6, keys=2, writes_per_client=6, rate=10.0,
                                partition=True, partition_at=1.0, partition_for=2.0,
                                settle=20.0, seed=6)
    result = run_replica_sim(options, sink)
    rows = named(sink.rows)
    [split] = [r for r in rows if r.event == "partition"]
    cut_off, rest = json.loads(split.info)["groups"]
    assert split.t == 1.5 and len(cut_off) == 3 and "hub" in rest
    assert [r.t for r in rows if r.event == "heal"] == [3.5]
    assert options.end == max(options.workload_end + 2.0, 3.5) + 20.0
    assert result.converged
    with pytest.raises(ConfigError):
        ReplicaRunOptions(partition_for=0.0)
