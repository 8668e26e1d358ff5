"""A standalone Spark cluster on this machine (``scripts/spark-cluster.sh``: a master and two
workers, every JVM on 127.0.0.1): an experiment submitted to it with ``spark-submit`` (the
README's recipe, packing ``dist/gossamer.zip`` itself) reaches the same verdict, check for
check and violation for violation, as ``gossamer analyze`` of its output on ``local[2]``.

The experiment has a planted fault (FIFO without retransmission under loss), so the verdict
compared is a failure with violations, not only a clean pass."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest

pytestmark = [pytest.mark.processes, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "spark-cluster.sh"
TIMEOUT = 900  # seconds for one Spark command on a loaded two-core machine


def tiny_experiment(folder: Path) -> Path:
    path = folder / "tiny.toml"
    path.write_text("""
name = "tiny"
workload = "fifo"
mode = "sim"
seeds = [3]

[options]
nodes = 5
messages = 30
loss = 0.2
recover_after = 0.3
settle = 10.0
retransmit = false

[sweep]
crash = [0.4]

[analysis]
layers = ["fifo"]
""")
    return path


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[str]:
    state = tmp_path / "cluster"
    started = subprocess.run([str(SCRIPT), "start", str(state)], capture_output=True,
                             text=True, timeout=TIMEOUT, cwd=REPO)
    try:
        assert started.returncode == 0, started.stderr
        url = started.stdout.strip().splitlines()[-1]
        assert url.startswith("spark://127.0.0.1:"), started.stdout
        yield url
    finally:
        subprocess.run([str(SCRIPT), "stop", str(state)], capture_output=True, timeout=60,
                       cwd=REPO)


def verdict(analysis: Path) -> tuple[list[tuple[str, str, int]], list[tuple[str, str, str]]]:
    """(check, status, violations) per check, and (run, node, msg) per reliability
    violation, sorted."""
    checks = pq.read_table(analysis / "checks").to_pylist()
    missing = pq.read_table(analysis / "violations" / "reliability").to_pylist()
    return (sorted((r["check"], r["status"], r["violations"]) for r in checks),
            sorted((r["run"], r["node"], r["msg"]) for r in missing))


@pytest.mark.timeout(1800)  # six JVMs on two cores: minutes, and more on a loaded machine
def test_an_experiment_on_a_standalone_cluster_gets_the_local_verdict(
    cluster: str, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    submitted = subprocess.run(
        [str(SCRIPT), "submit", cluster, "experiment", str(tiny_experiment(tmp_path)),
         "--out", str(out), "--conf", "spark.sql.shuffle.partitions=2"],
        capture_output=True, text=True, timeout=TIMEOUT, cwd=REPO)
    assert submitted.returncode == 1, submitted.stdout[-3000:] + submitted.stderr[-3000:]
    assert (REPO / "dist" / "gossamer.zip").is_file()
    on_cluster = verdict(out / "analysis")
    statuses = {check: status for check, status, _ in on_cluster[0]}
    assert statuses["reliability"] == "fail"
    assert on_cluster[1], "the planted fault left no missing delivery"

    again = tmp_path / "again"
    local = subprocess.run(
        [sys.executable, "-m", "gossamer.cli.main", "analyze", str(out), "--out", str(again),
         "--master", "local[2]", "--conf", "spark.sql.shuffle.partitions=2"],
        capture_output=True, text=True, timeout=TIMEOUT, cwd=REPO,
        env=dict(os.environ, SPARK_LOCAL_IP="127.0.0.1"))
    assert local.returncode == 1, local.stdout[-3000:] + local.stderr[-3000:]
    assert verdict(again) == on_cluster
