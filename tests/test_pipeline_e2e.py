"""End to end: a small simulated FIFO experiment through ``gossamer experiment``, analysed; then
the same with retransmission switched off, which the analysis must report as violating."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from gossamer.cli.main import main
from gossamer.cli.workloads import run_workload
from gossamer.pipeline import load_experiment, read_run_settings, run_experiment

pytestmark = pytest.mark.spark

SPARK_ARGS = ["--master", "local[2]", "--conf", "spark.sql.shuffle.partitions=1"]


def experiment_file(folder: Path, *, retransmit: bool) -> Path:
    path = folder / "tiny.toml"
    path.write_text(f"""
name = "tiny"
workload = "fifo"
mode = "sim"
seeds = [3]

[options]
nodes = 5
messages = 30
loss = 0.2
duplicate = 0.1
reorder = 0.2
recover_after = 0.3
settle = 10.0
retransmit = {str(retransmit).lower()}

[sweep]
crash = [0.0, 0.4]

[analysis]
layers = ["fifo"]
""")
    return path


def table(spark: Any, out: Path, name: str) -> list[Any]:
    return spark.read.parquet(str(out / "analysis" / name)).collect()  # type: ignore[no-any-return]


def test_fifo_experiment_is_reliable_and_ordered(spark: Any, tmp_path: Path) -> None:
    toml, out = experiment_file(tmp_path, retransmit=True), tmp_path / "run"
    assert main(["experiment", str(toml), "--out", str(out), *SPARK_ARGS]) == 0

    checks = {r.check: r for r in table(spark, out, "checks")}
    assert checks["reliability"].status == "pass"
    assert checks["fifo"].status == "pass"
    assert checks["causal"].status == "not applicable"
    assert checks["atomicity"].status == "not applicable"
    assert sum(r.violations for r in checks.values()) == 0
    runs = table(spark, out, "runs")
    assert sorted(r.run for r in runs) == ["tiny-crash0.0-s3", "tiny-crash0.4-s3"]
    assert all(r.reliability == 1.0 and r.expected > 0 and r.seed == 3 for r in runs)
    assert {r.failure_fraction for r in runs} == {0.0, 0.4}
    # the tables of services this trace has no rows of: not computed, written empty with
    # their columns (a reader of the output finds every table)
    for name, column in (("paxos", "decided"), ("atomic", "commit_rate"),
                         ("topic_balance", "owned_max"), ("layer_messages", "per_publish")):
        written = spark.read.parquet(str(out / "analysis" / name))
        assert written.count() == 0 and column in written.columns, name
    report = (out / "analysis" / "report.html").read_text()
    assert report.count("data:image/png;base64,") >= 4
    assert "reliability against failure fraction" in report

    # each run's record keeps what the run reported
    record = json.loads((out / "runs" / "tiny-crash0.4-s3.json").read_text())
    assert record["result"]["published"] > 0 and record["seconds"] > 0, record
    # finished runs are skipped on a re-run: nothing is simulated again
    stamps = {p: p.stat().st_mtime_ns for p in (out / "trace").rglob("*.parquet")}
    outcomes = run_experiment(spark, load_experiment(toml).runs(), out, run_workload)
    assert [o.status for o in outcomes] == ["skipped", "skipped"]
    assert stamps == {p: p.stat().st_mtime_ns for p in (out / "trace").rglob("*.parquet")}


def test_fifo_experiment_without_retransmission_is_reported_violating(
    spark: Any, tmp_path: Path
) -> None:
    toml, out = experiment_file(tmp_path, retransmit=False), tmp_path / "run"
    assert main(["experiment", str(toml), "--out", str(out), *SPARK_ARGS]) == 1

    checks = {r.check: r for r in table(spark, out, "checks")}
    assert checks["reliability"].status == "fail"
    assert checks["reliability"].violations > 0
    missing = spark.read.parquet(str(out / "analysis" / "violations" / "reliability"))
    first = missing.first()
    assert first is not None and first.seed == 3 and first.run.startswith("tiny-")
    assert first.detail.startswith("not delivered")
    assert all(r.reliability < 1.0 for r in table(spark, out, "runs"))
    # the whole violations folder is one table to pandas and pyarrow, each row naming its check
    every = pq.read_table(out / "analysis" / "violations").to_pandas()
    assert len(every) == sum(c.violations for c in checks.values() if c.status == "fail")
    assert set(every["check"]) == {name for name, c in checks.items() if c.status == "fail"}

    # analyze on its own reads the same trace to the same verdict
    again = tmp_path / "again"
    assert main(["analyze", str(out), "--out", str(again), "--layer", "fifo", *SPARK_ARGS]) == 1
    assert (again / "report.html").is_file()
    recount = {r.check: r.violations
               for r in spark.read.parquet(str(again / "checks")).collect()}
    assert recount["reliability"] == checks["reliability"].violations


REPO = Path(__file__).resolve().parents[1]
#: one run of each workload of the quickstart, the hardest of its sweep (loss, crashes, cuts)
QUICKSTART_RUNS = ("quickstart-loss0.2-crash0.5-s1", "quickstart-replica-cuts1.0-crash0.25-s1",
                   "quickstart-activity-s1", "quickstart-pubsub-modescribe-s1",
                   "quickstart-pubsub_faults-s1")


def test_reanalysing_quickstart_output_reproduces_the_experiments_verdict(
    spark: Any, tmp_path: Path
) -> None:
    quickstart = REPO / "experiments" / "quickstart.toml"
    out = tmp_path / "quickstart"
    only = [arg for run in QUICKSTART_RUNS for arg in ("--only", run)]
    assert main(["experiment", str(quickstart), "--out", str(out), *only, *SPARK_ARGS]) == 0
    verdict = {r.check: (r.status, r.reason, r.violations) for r in table(spark, out, "checks")}
    assert verdict["reliability"][0] == verdict["fifo"][0] == "pass"

    # each run keeps the settings it was judged by, and the command that makes it again
    expected = load_experiment(quickstart).checks
    for run in QUICKSTART_RUNS:
        stored = read_run_settings(out)[run]
        assert stored.checks == expected
        assert stored.replay is not None and f"--only {run}" in stored.replay

    # analysed again without any option: the same verdict, check for check
    again = tmp_path / "again"
    assert main(["analyze", str(out), "--out", str(again), *SPARK_ARGS]) == 0
    assert {r.check: (r.status, r.reason, r.violations)
            for r in spark.read.parquet(str(again / "checks")).collect()} == verdict


def test_an_option_written_at_its_default_skips_the_done_run(
    spark: Any, tmp_path: Path, capsys: Any
) -> None:
    # the driver's check took the defaults into account, run_experiment's did not: refused
    toml = tmp_path / "exp.toml"
    toml.write_text('name = "d"\nworkload = "fifo"\nseeds = [1]\n[options]\nnodes = 3\n'
                    "messages = 10\nsettle = 5.0\n")
    out = tmp_path / "out"
    assert main(["experiment", str(toml), "--out", str(out), *SPARK_ARGS]) == 0
    capsys.readouterr()
    toml.write_text(toml.read_text() + "duplicate = 0.0\n")
    assert main(["experiment", str(toml), "--out", str(out), *SPARK_ARGS]) == 0
    assert "runs: 0 done, 1 skipped" in capsys.readouterr().out
