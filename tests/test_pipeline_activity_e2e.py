"""End to end: a small simulated seed-003 network (a server tree, clients publishing activities,
a server crashing and coming back, some clients registering) through ``gossamer experiment``:
reliability and FIFO per origin hold for what the seed promises (sessions, see
``gossamer.services.activity.experiment``); then the same with the root relaying nothing,
which the analysis must report as violating reliability."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gossamer.cli.main import main
from gossamer.pipeline import load_trace

pytestmark = pytest.mark.spark

SPARK_ARGS = ["--master", "local[2]", "--conf", "spark.sql.shuffle.partitions=1"]


def experiment_file(folder: Path, *, broken: bool) -> Path:
    path = folder / "activity.toml"
    path.write_text(f"""
name = "network"
workload = "activity"
seeds = [4]

[options]
servers = 3
clients = 8
activities_per_client = 10
rate = 4.0               # 20 virtual seconds of activities: the crash window is in the middle
crash = 0.34
registered = 0.25
drop_broadcasts = {str(broken).lower()}

[analysis]
layers = ["activity"]
session_layers = ["activity"]
""")
    return path


def table(spark: Any, out: Path, name: str) -> list[Any]:
    return spark.read.parquet(str(out / "analysis" / name)).collect()  # type: ignore[no-any-return]


def test_activity_experiment_has_no_violations(spark: Any, tmp_path: Path) -> None:
    toml, out = experiment_file(tmp_path, broken=False), tmp_path / "run"
    assert main(["experiment", str(toml), "--out", str(out), *SPARK_ARGS]) == 0

    checks = {r.check: r for r in table(spark, out, "checks")}
    assert checks["reliability"].status == "pass"
    assert checks["fifo"].status == "pass"
    assert sum(r.violations for r in checks.values()) == 0
    trace = load_trace(spark, out)
    events = {(r.layer, r.event) for r in trace.select("layer", "event").distinct().collect()}
    # the run did what it says: a server crashed and came back, clients registered, and the
    # crash window is marked by session rows
    assert {("sim", "crash"), ("sim", "recover"), ("activity", "registered"),
            ("activity", "publish"), ("activity", "deliver")} <= events
    reasons = {r.info for r in trace.filter("layer = 'activity' and event = 'join'")
               .select("info").distinct().collect()}
    assert any(info and "healed" in info for info in reasons), reasons
    # reliability expected something: activities were published after the tree healed
    healed = trace.filter("layer = 'activity' and event = 'join' and info like '%healed%'")
    [last] = healed.agg({"t": "max"}).collect()
    later = trace.filter(f"layer = 'activity' and event = 'publish' and t > {last[0] + 0.5}")
    assert later.count() >= 15


def test_activity_experiment_with_a_root_relaying_nothing_is_reported_violating(
    spark: Any, tmp_path: Path
) -> None:
    toml, out = experiment_file(tmp_path, broken=True), tmp_path / "run"
    assert main(["experiment", str(toml), "--out", str(out), *SPARK_ARGS]) == 1

    checks = {r.check: r for r in table(spark, out, "checks")}
    assert checks["reliability"].status == "fail"
    assert checks["reliability"].violations > 0
    found = spark.read.parquet(str(out / "analysis" / "violations" / "reliability"))
    details = [r.detail for r in found.collect()]
    assert all(d.startswith("not delivered") for d in details), details
