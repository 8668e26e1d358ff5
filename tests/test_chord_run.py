"""The ``chord`` workload (gossamer.services.pubsub.chordrun): options, a small bootstrapped ring
whose traced lookups all end at the right root, owner rows on hosts, determinism; then a tiny
chord experiment through ``gossamer experiment`` and the pipeline."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gossamer.cli.main import main
from gossamer.cli.workloads import validate_run
from gossamer.core import MemorySink, TraceRow
from gossamer.core.errors import ConfigError
from gossamer.pipeline import RunSpec
from gossamer.services.pubsub.chordrun import (
    ChordRunOptions,
    IdealRing,
    run_chord_sim,
)

SPARK_ARGS = ["--master", "local[2]", "--conf", "spark.sql.shuffle.partitions=1"]


@pytest.mark.parametrize("fields", [
    {"nodes": 0}, {"vnodes": 0}, {"vnodes": 2000}, {"bits": 0}, {"bits": 300},
    {"lookups": -1}, {"keys": -1}, {"nodes": 300, "bits": 8},
])
def test_bad_options_raise_config_error(fields: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        ChordRunOptions(**fields)


def test_workload_chord_sim_is_registered() -> None:
    validate_run(RunSpec("c", "chord", "sim", 1, {"nodes": 16, "vnodes": 5, "bits": 64}))
    with pytest.raises(ConfigError, match="no option"):
        validate_run(RunSpec("c", "chord", "sim", 1, {"topics": 3}))


def rows(sink: MemorySink) -> list[TraceRow]:
    return [TraceRow._make(r) for r in sink.rows]


def test_small_ring_lookups_reach_the_right_root_and_are_traced() -> None:
    sink = MemorySink()
    result = run_chord_sim(ChordRunOptions(nodes=64, lookups=300, keys=50, seed=3), sink)
    assert result.run == "chord-n64-v1-s3"
    assert (result.lookups, result.completed, result.right_root) == (300, 300, 300)
    assert 1.0 < result.hops_mean < 6.0
    traced = rows(sink)
    lookups = [r for r in traced if (r.layer, r.event) == ("chord", "lookup")]
    assert len(lookups) == 300
    ring = IdealRing([f"n{i:03d}" for i in range(64)], vnodes=1, bits=32)
    for row in lookups:
        info = json.loads(row.info or "{}")
        assert isinstance(info["hops"], int) and info["root"] == row.node
        assert row.key is not None and ring.owner(row.key) == row.node
        assert row.run == result.run
    owners = [r for r in traced if (r.layer, r.event) == ("pubsub", "owner")]
    assert len(owners) == 50 == sum(result.owned.values())
    # every host leaves a row, so one that owns nothing still counts for the balance metric
    assert {r.node for r in traced if r.event == "stored"} == set(result.owned)


def test_owner_rows_with_virtual_nodes_name_hosts() -> None:
    sink = MemorySink()
    result = run_chord_sim(ChordRunOptions(nodes=16, vnodes=5, lookups=40, keys=500), sink)
    hosts = {f"n{i:03d}" for i in range(16)}
    assert set(result.owned) == hosts
    owners = [r for r in rows(sink) if r.event == "owner"]
    assert len(owners) == 500 and {r.node for r in owners} <= hosts
    assert len({r.key for r in owners}) == 500
    ring = IdealRing(sorted(hosts), vnodes=5, bits=32)
    assert all(ring.owner(str(r.key)) == r.node for r in owners)
    assert result.completed == result.right_root == 40


def test_one_seed_one_trace() -> None:
    traces = []
    for _ in range(2):
        sink = MemorySink()
        run_chord_sim(ChordRunOptions(nodes=32, vnodes=2, lookups=100, keys=100, seed=7), sink)
        traces.append(sink.rows)
    assert traces[0] == traces[1]
    other = MemorySink()
    run_chord_sim(ChordRunOptions(nodes=32, vnodes=2, lookups=100, keys=100, seed=8), other)
    assert other.rows != traces[0]


@pytest.mark.spark
def test_chord_experiment_through_the_pipeline(spark: Any, tmp_path: Path) -> None:
    toml, out = tmp_path / "chord.toml", tmp_path / "run"
    toml.write_text("""
name = "ring"
workload = "chord"
seeds = [2]

[options]
lookups = 100
keys = 0

[sweep]
nodes = [16, 64]

[parts.vnodes]
workload = "chord"

[parts.vnodes.options]
nodes = 20
lookups = 0
keys = 400

[parts.vnodes.sweep]
vnodes = [1, 5]

[analysis]
layers = ["chord"]
fifo_layers = []
""")
    assert main(["experiment", str(toml), "--out", str(out), *SPARK_ARGS]) == 0

    def table(name: str) -> list[Any]:
        return spark.read.parquet(str(out / "analysis" / name)).collect()  # type: ignore[no-any-return]

    hops = {r.nodes: r for r in table("lookup_hops")}
    assert set(hops) == {16, 64}  # the vnodes runs did no lookups
    assert all(r.lookups == 100 for r in hops.values())
    assert hops[16].hops_mean < hops[64].hops_mean
    balance = {r.run: r for r in table("topic_balance")}
    assert set(balance) == {"ring-vnodes-vnodes1-s2", "ring-vnodes-vnodes5-s2"}
    for row in balance.values():
        assert (row.topics, row.nodes, row.owned_expected) == (400, 20, 20.0)
        assert row.owned_min <= row.owned_p99 <= row.owned_max
        assert row.owned_p99_over_mean == pytest.approx(row.owned_p99 / 20.0)
