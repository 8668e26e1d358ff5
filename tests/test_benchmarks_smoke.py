"""The benchmark scripts still run: ``--quick`` sizes, figures present, no timing assertions."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def load_benchmark(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"benchmarks_{name}", BENCHMARKS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while decorating
    spec.loader.exec_module(module)
    return module


def test_sim_kernel_quick_run_reports_every_figure() -> None:
    pytest.importorskip("simpy")  # the "bench" extra
    sim_kernel = load_benchmark("sim_kernel")
    result = sim_kernel.run(quick=True)
    assert set(result["runners"]) == {"gossamer", "heapq", "simpy"}
    events = {r["events"] for r in result["runners"].values()}
    assert len(events) == 1 and events.pop() > 0  # every runner did the same, non-empty work
    for name, runner in result["runners"].items():
        assert runner["events_per_s"] > 0, name
    assert result["memory"]
    for row in result["memory"]:
        assert row["total_bytes_per_node"] > 0
        assert row["process_bytes_per_node"] > 0
        assert row["kernel_bytes_per_node"] > 0
    assert {t["name"] for t in result["targets"]} == {
        "gossamer/heapq",
        "gossamer/simpy",
        "kernel bytes per idle node",
    }


def test_ws_libs_quick_run_measures_all_four_servers() -> None:
    ws_libs = load_benchmark("ws_libs")
    result = ws_libs.run(quick=True)
    assert set(result["modes"]) == {"websockets-direct", "aiohttp-direct", "websockets-queued",
                                    "aiohttp-queued"}
    for mode in result["modes"].values():
        assert mode["deliveries"] > 0
        assert mode["deliveries_per_s"] > 0
    assert result["ratios"]
