"""``gossamer analyze`` on input it cannot analyse: exit 2 and one line naming the file and the
problem (no Java traceback); ``--allow-partial`` analyses the readable files and lists the rest.
The traces are copies of a recorded real-process run (``tests/fixtures/traces/fifo``)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from gossamer.cli.main import main

pytestmark = pytest.mark.spark

SPARK_ARGS = ["--master", "local[2]", "--conf", "spark.sql.shuffle.partitions=1"]
RECORDED = Path(__file__).parent / "fixtures" / "traces" / "fifo"


def recorded_copy(tmp_path: Path) -> tuple[Path, list[Path]]:
    run_dir = tmp_path / "run"
    shutil.copytree(RECORDED, run_dir)
    return run_dir, sorted((run_dir / "trace").glob("*/*.parquet"))


def error_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("error:")]


def analyse(run_dir: Path, *extra: str) -> int:
    return main(["analyze", str(run_dir), "--out", str(run_dir / "analysis"), *extra,
                 *SPARK_ARGS])


def test_a_truncated_file_is_named_in_one_line_with_exit_2(spark: Any, tmp_path: Path,
                                                          capsys: Any) -> None:
    run_dir, files = recorded_copy(tmp_path)
    victim = files[1]
    data = victim.read_bytes()
    victim.write_bytes(data[: len(data) // 2])
    assert analyse(run_dir) == 2
    output = capsys.readouterr().out
    [line] = error_lines(output)
    assert str(victim) in line and "truncated" in line and "--allow-partial" in line
    assert "Traceback" not in output and "java" not in output.lower()


def test_a_corrupt_file_is_named_in_one_line_with_exit_2(spark: Any, tmp_path: Path,
                                                        capsys: Any) -> None:
    run_dir, files = recorded_copy(tmp_path)
    victim = files[0]
    data = bytearray(victim.read_bytes())
    # keep the magic at both ends, scramble the footer's metadata before its length
    for i in range(len(data) - 60, len(data) - 8):
        data[i] = 0xFF
    victim.write_bytes(bytes(data))
    assert analyse(run_dir) == 2
    output = capsys.readouterr().out
    [line] = error_lines(output)
    assert str(victim) in line and "corrupt" in line
    assert "Traceback" not in output and "java" not in output.lower()


def test_a_file_that_is_no_parquet_at_all_is_named_with_exit_2(spark: Any, tmp_path: Path,
                                                              capsys: Any) -> None:
    run_dir, files = recorded_copy(tmp_path)
    files[2].write_text("node,event\nn1,deliver\n")
    assert analyse(run_dir) == 2
    [line] = error_lines(capsys.readouterr().out)
    assert str(files[2]) in line and "not a Parquet file" in line


def test_a_missing_run_directory_is_an_error_with_exit_2(tmp_path: Path, capsys: Any) -> None:
    assert main(["analyze", str(tmp_path / "nowhere"), *SPARK_ARGS]) == 2
    [line] = error_lines(capsys.readouterr().out)
    assert "nowhere" in line and "no such directory" in line


@pytest.mark.parametrize("uri", ["hdfs://namenode:8020/runs/q", "s3a://bucket/runs/q"])
def test_a_store_uri_is_refused_with_what_to_do(uri: str, capsys: Any) -> None:
    assert main(["analyze", uri, *SPARK_ARGS]) == 2
    [line] = error_lines(capsys.readouterr().out)
    assert uri in line and "mount the store" in line


def test_a_trace_without_a_column_a_check_needs_exits_2_naming_it(spark: Any, tmp_path: Path,
                                                                  capsys: Any) -> None:
    run_dir, files = recorded_copy(tmp_path)
    victim = files[-1]  # one file of several: it is the one named
    pq.write_table(pq.read_table(victim).drop_columns(["seq"]), victim)
    assert analyse(run_dir) == 2
    output = capsys.readouterr().out
    assert "COULD NOT ANALYSE" in output and "could not be checked: fifo" in output
    assert "no column seq" in output
    checks = {r.check: r for r in
              spark.read.parquet(str(run_dir / "analysis" / "checks")).collect()}
    assert checks["fifo"].status == "error"
    assert f"{victim} has no column seq" in checks["fifo"].reason, checks["fifo"].reason
    assert checks["reliability"].status == "pass"  # what can be checked still is


def test_allow_partial_analyses_the_readable_files_and_lists_the_rest(
    spark: Any, tmp_path: Path, capsys: Any
) -> None:
    run_dir, files = recorded_copy(tmp_path)
    victim = files[-1]
    data = victim.read_bytes()
    victim.write_bytes(data[: len(data) // 3])
    code = analyse(run_dir, "--allow-partial")
    output = capsys.readouterr().out
    assert "left out" in output and str(victim) in output and "truncated" in output
    assert "not checked against the publishes" in output
    # the node whose file is gone delivered nothing any more: what it sent is still owed by
    # the others, which delivered it; its own deliveries are simply absent from the verdict;
    # a delivery of its messages elsewhere is no "never published" (its publish rows are in
    # the file left out): every check that can be judged holds
    assert code == 0, output
    rows = spark.read.parquet(str(run_dir / "analysis" / "runs")).collect()
    assert len(rows) == 1


@pytest.mark.parametrize("verb", ["analyze", "vopr"])
def test_a_spark_that_cannot_start_is_one_line_with_exit_2_and_no_java_log(
        tmp_path: Path, verb: str) -> None:
    # its own process: the shared session's JVM is already up, and this one must fail to start
    # (an event log directory that does not exist)
    if verb == "analyze":
        run_dir, _ = recorded_copy(tmp_path)
        what = [str(run_dir), "--out", str(tmp_path / "out")]
    else:
        what = ["fifo", "--seeds", "1", "--out", str(tmp_path / "campaign")]
    missing = tmp_path / "no-such-dir"
    done = subprocess.run(
        [sys.executable, "-m", "gossamer.cli.main", verb, *what, "--master", "local[1]",
         "--conf", "spark.eventLog.enabled=true", "--conf", f"spark.eventLog.dir={missing}"],
        capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 2, done.stderr[-2000:]
    errors = error_lines(done.stdout)
    assert len(errors) == 1 and "FileNotFoundException" in errors[0], done.stdout
    assert str(missing) in errors[0] and "--debug shows the traceback" in errors[0]
    assert "\tat " not in done.stderr and "Exception" not in done.stderr, done.stderr[-2000:]


@pytest.mark.parametrize(("given", "says"), [
    (["--layer", "fiffo"],
     "--layer fiffo (layers): no row of the trace is in that layer (its layers: "),
    (["--layer", "fifo", "--total-order", "replica"], "--total-order replica (total_order"),
    (["--ignore-stored-settings", "--layer", "fifo", "--layer", "fiffo"], "--layer fiffo"),
])
def test_a_layer_named_on_the_command_line_that_the_trace_lacks_is_exit_2(
    spark: Any, tmp_path: Path, capsys: Any, given: list[str], says: str
) -> None:
    # a misspelt --layer said "EVERY GUARANTEE HELD (0 held; 12 not applicable)", exit 0
    run_dir, _ = recorded_copy(tmp_path)
    assert analyse(run_dir, *given) == 2
    [line] = error_lines(capsys.readouterr().out)
    assert says in line and "fifo" in line.split("its layers:")[-1], line


def test_stored_settings_whose_layers_name_nothing_in_the_trace_are_exit_2(
    spark: Any, tmp_path: Path, capsys: Any
) -> None:
    run_dir, files = recorded_copy(tmp_path)
    settings = files[0].parent / "analysis.json"
    raw = json.loads(settings.read_text())
    # an experiment's [analysis] layers, misspelt: every check was "not applicable", exit 0
    raw["checks"] = {"layers": ["fiffo", "replica"]}
    settings.write_text(json.dumps(raw))
    assert analyse(run_dir) == 2
    [line] = error_lines(capsys.readouterr().out)
    assert ("layers fiffo, replica: no row of the trace is in any of them, so nothing was "
            "checked") in line, line
    raw["checks"]["layers"] = ["fifo", "replica"]  # several services' layers: one is enough
    settings.write_text(json.dumps(raw))
    assert analyse(run_dir) == 0, capsys.readouterr().out


def test_layer_checks_only_that_layer_and_a_verdict_with_nothing_checked_says_so(
    spark: Any, tmp_path: Path, capsys: Any
) -> None:
    # --layer net went on judging FIFO on layer fifo (the stored fifo_layers) and said
    # "EVERY GUARANTEE HELD (1 held; 11 not applicable)"
    run_dir, _ = recorded_copy(tmp_path)
    assert analyse(run_dir, "--layer", "net") == 0
    output = capsys.readouterr().out
    assert "verdict: NOTHING TO CHECK (0 held; 12 not applicable)" in output, output
    assert analyse(run_dir, "--layer", "fifo") == 0
    assert "verdict: EVERY GUARANTEE HELD (" in capsys.readouterr().out
