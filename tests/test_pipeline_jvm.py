"""The driver JVM a local ``gossamer analyze`` starts: a small trace's analysis gets a JVM that
compiles with C1 only (``short_jvm_options``), a large one the JVM's defaults. No Spark here:
the CLI's call to ``get_spark`` is intercepted."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from gossamer.cli import main as cli
from gossamer.pipeline import PipelineError, short_jvm_options, trace_dir_bytes
from gossamer.pipeline.spark import SHORT_JVM_OPTIONS, SHORT_JVM_TRACE_BYTES


def test_the_short_jvm_is_for_traces_up_to_the_limit() -> None:
    assert "-XX:TieredStopAtLevel=1" in short_jvm_options(0)
    assert short_jvm_options(SHORT_JVM_TRACE_BYTES) == SHORT_JVM_OPTIONS
    assert short_jvm_options(SHORT_JVM_TRACE_BYTES + 1) == ""


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


def test_analyze_starts_the_short_jvm_for_a_small_trace_only(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    run = tmp_path / "trace" / "r1"
    run.mkdir(parents=True)
    (run / "n1.parquet").write_bytes(b"x" * 1000)
    assert _java_options_of_analyze(monkeypatch, tmp_path) == SHORT_JVM_OPTIONS
    with (run / "n2.parquet").open("wb") as big:
        big.truncate(SHORT_JVM_TRACE_BYTES)  # sparse: no disk used
    assert _java_options_of_analyze(monkeypatch, tmp_path) == ""
