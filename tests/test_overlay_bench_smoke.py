"""benchmarks/chord_scale.py and benchmarks/overlay_scale.py still run in --quick mode and
report every figure (no timing assertions)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.bench

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def run(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(BENCHMARKS / script), "--quick", *args],
                          check=False, capture_output=True, text=True, timeout=100)


def test_chord_scale_quick_reports_hops_load_and_targets(tmp_path: Path) -> None:
    out, plot = tmp_path / "chord.json", tmp_path / "chord.png"
    done = run("chord_scale.py", "--json", str(out), "--plot", str(plot))
    assert done.returncode == 0, done.stderr[-2000:]
    figures = json.loads(out.read_text())
    assert {row["build"] for row in figures["hops"]} == {"bootstrap", "joins"}
    assert all(row["right_root"] == row["lookups"] for row in figures["hops"])
    assert [row["vnodes"] for row in figures["load"]] == [1, 5, 20]
    assert figures["targets"] and all("met" in t for t in figures["targets"])
    assert plot.stat().st_size > 0


def test_overlay_scale_quick_reports_steady_state_and_crashes(tmp_path: Path) -> None:
    out = tmp_path / "overlay.json"
    done = run("overlay_scale.py", "--json", str(out))
    assert done.returncode == 0, done.stderr[-2000:]
    figures = json.loads(out.read_text())
    assert {row["mode"] for row in figures["steady"]} == {"flood", "tree"}
    assert all(row["reliability"] == 1.0 for row in figures["steady"])
    assert figures["crashes"][0]["fraction"] == 0.0
    assert all(0.0 <= row["first_final"] <= 1.0 for row in figures["crashes"])
    assert {row["detection"] for row in figures["crashes"][1:]} == {"keepalive", "refused"}
    assert "tree_vs_flood_payload" in figures["ratios"]


def test_glomers_quick_reports_every_setting_against_flooding(tmp_path: Path) -> None:
    out = tmp_path / "glomers.json"
    done = run("glomers.py", "--json", str(out))
    assert done.returncode == 0, done.stderr[-2000:]
    figures = json.loads(out.read_text())
    settings = [row["setting"] for row in figures["summary"]]
    assert settings[0] == "flood, active 3" and len(settings) == 4
    assert figures["summary"][0]["ratio_to_flood_active_3"] == 1.0
    assert all(row["reliability"] == 1.0 for row in figures["summary"])
