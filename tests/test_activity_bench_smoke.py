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
