"""benchmarks/store.py still runs in --quick mode and reports every figure with its ratio (no
timing assertions)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.bench

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "store.py"
CASES = ["sqlite NORMAL", "sqlite FULL", "sqlite FULL batch 10",
         "write-behind before, 10 writers", "write-behind FULL, 10 writers"]


def test_store_benchmark_quick_reports_every_case_and_ratio(tmp_path: Path) -> None:
    out = tmp_path / "store.json"
    env = {**os.environ, "COLUMNS": "200"}  # rich wraps a table to the terminal's width
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--dir", str(tmp_path), "--json", str(out)],
        capture_output=True, text=True, timeout=120, env=env, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(out.read_text())
    assert result["quick"] is True and list(result["cases"]) == CASES
    cases = result["cases"]
    for name, row in cases.items():
        assert row["writes"] > 0 and row["commits"] > 0, name
        assert row["durable"] is (name != "sqlite NORMAL" and "before" not in name), name
        assert row["ratio"] == pytest.approx(
            row["writes_per_s"] / cases[row["against"]]["writes_per_s"]), name
        # name, on disk at reply, writes/s, commits/s, writes/commit, ratio, against
        assert re.search(rf"^. {re.escape(name)} +. +(yes|no) . +[\d,]+ . +[\d,]+ . "
                         rf"+\d+\.\d . +\d+\.\d\dx . {re.escape(row['against'])} +.$",
                         done.stdout, re.M), name
    assert cases["sqlite FULL batch 10"]["writes_per_commit"] == 10.0
    assert cases["sqlite FULL"]["writes_per_commit"] == 1.0
    assert "x the writes/s of one commit per write" in done.stdout
    assert not list(tmp_path.glob("gossamer-store-bench-*"))  # its files are removed
