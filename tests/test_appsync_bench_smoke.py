"""``benchmarks/appsync_rounds.py`` still runs: a tiny session, every figure present, no timing
assertions."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.bench

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "appsync_rounds.py"


def test_a_tiny_round_benchmark_reports_every_figure() -> None:
    spec = importlib.util.spec_from_file_location("benchmarks_appsync_rounds", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    result = module.measure(5, 2)
    assert result["peers"] == 5 and result["rounds"] == 2
    assert result["median_ms"] > 0 and result["max_ms"] >= result["median_ms"]
    assert result["round_ms"] == 50 and result["headroom"] > 0
