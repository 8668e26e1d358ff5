"""End to end: a small simulated seed-000 experiment (hub with keeper, clients writing shared
keys under connection cuts, a crash and an offline client) through ``gossamer
experiment``: every replica converges; then the same with repair switched off, which the
analysis must report as violating convergence (and ``gossamer analyze`` agrees)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gossamer.cli.main import main
from gossamer.pipeline import load_trace

pytestmark = pytest.mark.spark

SPARK_ARGS = ["--master", "local[2]", "--conf", "spark.sql.shuffle.partitions=1"]


def experiment_file(folder: Path, *, repair: bool) -> Path:
    path = folder / "objects.toml"
    path.write_text(f"""
name = "objects"
workload = "replica"
seeds = [3]

[options]
clients = 6
keys = 3
writes_per_client = 6
rate = 10.0
cuts = {1.0 if repair else 2.0}
crash = 0.2
offline = 0.2
settle = 20.0
repair = {str(repair).lower()}

[analysis]
layers = ["replica"]
""")
    return path


def table(spark: Any, out: Path, name: str) -> list[Any]:
    return spark.read.parquet(str(out / "analysis" / name)).collect()  # type: ignore[no-any-return]


def test_replica_experiment_converges_with_no_violations(spark: Any, tmp_path: Path) -> None:
    toml, out = experiment_file(tmp_path, repair=True), tmp_path / "run"
    assert main(["experiment", str(toml), "--out", str(out), *SPARK_ARGS]) == 0

    checks = {r.check: r for r in table(spark, out, "checks")}
    assert {name: checks[name].status for name in checks} == {
        "reliability": "pass", "fifo": "pass", "causal": "pass", "convergence": "pass",
        "duplicates": "pass", "validity": "pass",
        # a writer applies its own write and traces no delivery of it: nothing to check
        "own delivery": "not applicable",
        "total order": "not applicable", "atomicity": "not applicable",
        "paxos agreement": "not applicable", "decided order": "not applicable",
        "acknowledged kept": "not applicable"}
    assert sum(r.violations for r in checks.values()) == 0
    [run] = table(spark, out, "runs")
    assert (run.run, run.seed, run.reliability) == ("objects-s3", 3, 1.0)
    assert run.failure_fraction > 0  # a client crashed (and recovered)
    assert run.stored_bytes > 0 and run.stored_max > 0
    load = {r.node: r for r in table(spark, out, "node_load")}
    assert set(load) == {"hub", *(f"n{i:03d}" for i in range(6))}
    assert all(r.stored > 0 and r.stored_items > 0 for r in load.values())
    trace = load_trace(spark, out)
    events = {r.event for r in trace.filter("layer = 'replica'").select("event").distinct()
              .collect()}
    assert {"apply", "revert", "conflict", "resolve", "offline", "sync"} <= events
    report = (out / "analysis" / "report.html").read_text()
    assert "Stored per node" in report and "no lookup rows" in report


def test_replica_experiment_without_repair_is_reported_violating(
    spark: Any, tmp_path: Path
) -> None:
    toml, out = experiment_file(tmp_path, repair=False), tmp_path / "run"
    assert main(["experiment", str(toml), "--out", str(out), *SPARK_ARGS]) == 1

    checks = {r.check: r for r in table(spark, out, "checks")}
    assert checks["convergence"].status == "fail"
    assert checks["convergence"].violations > 0
    assert checks["reliability"].status == "fail"
    found = spark.read.parquet(str(out / "analysis" / "violations" / "convergence"))
    details = [r.detail for r in found.collect()]
    assert any(d.startswith("final state of key k") for d in details), details
    assert {r.seed for r in found.collect()} == {3}

    # analyze on its own reads the same trace to the same verdict
    again = tmp_path / "again"
    assert main(["analyze", str(out), "--out", str(again), "--layer", "replica",
                 *SPARK_ARGS]) == 1
    recount = {r.check: r.violations
               for r in spark.read.parquet(str(again / "checks")).collect()}
    assert recount["convergence"] == checks["convergence"].violations
