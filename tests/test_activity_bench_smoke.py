"""benchmarks/activity.py still runs in --quick mode and reports every figure (no timing
assertions)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.bench

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "activity.py"


def test_activity_benchmark_quick_reports_every_figure() -> None:
    out = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--json"], check=True,
                         capture_output=True, text=True, timeout=120)
    figures = json.loads(out.stdout.strip().splitlines()[-1])
    assert [row["servers"] for row in figures["throughput"]] == [1, 3, 7]
    assert all(row["deliveries"] == 99 * row["activities"] for row in figures["throughput"])
    assert len(figures["spread"]["loads"]) == 7
    assert "vs 1 server" in out.stdout


def test_activity_load_benchmark_runs_and_reports_server_cpu(tmp_path: Path) -> None:
    script = SCRIPT.parent / "activity_load.py"
    out = tmp_path / "load.json"
    subprocess.run([sys.executable, str(script), "--seconds", "1", "--warmup", "0.5",
                    "--rounds", "1", "--json", str(out)], check=True, capture_output=True,
                   text=True, timeout=180)
    report = json.loads(out.read_text())
    (run,) = report["runs"]["this"]
    assert run["deliveries"] > 0 and run["server_cpu_s"] >= 0
    assert run["server_cpu_us_per_delivery"] == pytest.approx(
        1e6 * run["server_cpu_s"] / run["deliveries"])
