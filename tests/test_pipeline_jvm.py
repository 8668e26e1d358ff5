"""The driver JVM a local ``gossamer analyze`` starts (``analysis_jvm_options``): a small trace's
analysis gets a JVM that compiles with C1 only, a large one the parallel collector. No Spark
here: the CLI's call to ``get_spark`` is intercepted."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from gossamer.cli import main as cli
from gossamer.pipeline import PipelineError, analysis_jvm_options, trace_dir_bytes
from gossamer.pipeline.spark import (
    LARGE_ANALYSIS_JVM_OPTIONS,
    SMALL_ANALYSIS_BYTES,
    SMALL_ANALYSIS_JVM_OPTIONS,
)


def test_the_jvm_follows_the_trace_size() -> None:
    assert "-XX:TieredStopAtLevel=1" in analysis_jvm_options(0)
    assert analysis_jvm_options(SMALL_ANALYSIS_BYTES) == SMALL_ANALYSIS_JVM_OPTIONS
    assert analysis_jvm_options(SMALL_ANALYSIS_BYTES + 1) == LARGE_ANALYSIS_JVM_OPTIONS
    assert "-XX:+UseParallelGC" in LARGE_ANALYSIS_JVM_OPTIONS


def test_trace_dir_bytes_counts_every_file_under_trace(tmp_path: Path) -> None:
    assert trace_dir_bytes(tmp_path) == 0  # no trace directory
    (tmp_path / "trace" / "r1").mkdir(parents=True)
    (tmp_path / "trace" / "r1" / "n1.parquet").write_bytes(b"x" * 100)
    (tmp_path / "trace" / "r1" / "segments").mkdir()
    (tmp_path / "trace" / "r1" / "segments" / "s-1.jsonl").write_bytes(b"y" * 23)
    (tmp_path / "elsewhere.parquet").write_bytes(b"z" * 1000)  # not under trace/
    assert trace_dir_bytes(tmp_path) == 123


def _java_options_of_analyze(monkeypatch: pytest.MonkeyPatch, run_dir: Path) -> str:
    seen: dict[str, Any] = {}

    def fake_get_spark(*args: Any, **kwargs: Any) -> Any:
        seen.update(kwargs)
        raise PipelineError("stopped here by the test")

    monkeypatch.setattr(cli, "get_spark", fake_get_spark)
    args = cli.build_parser().parse_args(["analyze", str(run_dir)])
    assert cli._cmd_analyze(args, Console(file=io.StringIO())) == 2
    return str(seen["java_options"])


def test_analyze_starts_the_jvm_for_its_traces_size(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    run = tmp_path / "trace" / "r1"
    run.mkdir(parents=True)
    (run / "n1.parquet").write_bytes(b"x" * 1000)
    assert _java_options_of_analyze(monkeypatch, tmp_path) == SMALL_ANALYSIS_JVM_OPTIONS
    with (run / "n2.parquet").open("wb") as big:
        big.truncate(SMALL_ANALYSIS_BYTES)  # sparse: no disk used
    assert _java_options_of_analyze(monkeypatch, tmp_path) == LARGE_ANALYSIS_JVM_OPTIONS
