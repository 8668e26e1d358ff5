"""The gossamer command: sim writes a trace and judges the run; trace show summarises it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from checks import fifo_violations, missing_deliveries
from gossamer.cli.main import main
from gossamer.core.segments import SegmentSink
from gossamer.core.traceio import SCHEMA, read_trace, trace_path
from gossamer.pipeline.analysis import OUTPUT_MARKER, check_out_dir
from gossamer.pipeline.errors import PipelineError


def test_help_lists_the_verbs(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    for verb in ("sim", "trace", "bench"):
        assert verb in out


def test_sim_writes_a_trace_and_reports_success(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["sim", "--nodes", "6", "--messages", "60", "--loss", "0.2", "--duplicate",
                 "0.1", "--reorder", "0.2", "--crash", "0.34", "--recover-after", "0.5",
                 "--seed", "4", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "100.0000%" in out
    table = read_trace(tmp_path)
    assert table.schema == SCHEMA
    events = set(zip(table["layer"].to_pylist(), table["event"].to_pylist(), strict=True))
    assert {("fifo", "publish"), ("fifo", "deliver"), ("sim", "crash"),
            ("sim", "recover")} <= events


def test_sim_exits_1_when_the_guarantee_is_broken(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["sim", "--nodes", "5", "--messages", "50", "--loss", "0.3", "--no-retransmit",
                 "--out", str(tmp_path)])
    assert code == 1
    assert "violated" in capsys.readouterr().out


def test_trace_show_summarises_by_layer_and_event(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["sim", "--nodes", "3", "--messages", "9", "--out", str(tmp_path)]) == 0
    capsys.readouterr()
    assert main(["trace", "show", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "deliver" in out and "publish" in out and "time span" in out


def test_trace_show_on_a_directory_without_trace_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["trace", "show", str(tmp_path)]) == 2
    assert "no trace files" in capsys.readouterr().out


@pytest.mark.parametrize("bad", [["--loss", "1.5"], ["--nodes", "0"]])
def test_bad_options_are_refused(bad: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["sim", *bad])
    assert exit_info.value.code == 2


@pytest.mark.bench
def test_bench_sim_quick_runs_through_the_cli(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("simpy")
    assert main(["bench", "sim", "--quick"]) == 0
    out = capsys.readouterr().out
    assert "gossamer/heapq" in out and "kernel bytes per idle node" in out


@pytest.mark.parametrize("transport", ["tcp", "ws"])
def test_loopback_runs_real_sockets_with_one_trace_file_per_node(
    tmp_path: Path, transport: str, capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture
) -> None:
    code = main(["loopback", "--nodes", "4", "--messages", "60", "--loss", "0.1",
                 "--transport", transport, "--rate", "1000", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0, out
    files = sorted(p.name for p in (tmp_path / "trace").rglob("*.parquet"))
    assert files == ["n000.parquet", "n001.parquet", "n002.parquet", "n003.parquet"]
    rows = [tuple(r.values()) for r in read_trace(tmp_path).to_pylist()]
    assert fifo_violations(rows) == []
    assert missing_deliveries(rows, ["n000", "n001", "n002", "n003"]) == []
    # its nodes share a key drawn for the run: no advice about a --cluster-key it has not
    assert "cluster key" not in caplog.text, caplog.text


@pytest.mark.parametrize("argv", [["--follow", "{tmp}/nowhere"],
                                  ["--follow", "{tmp}/file.txt"],
                                  ["{tmp}", "--follow", "{tmp}"],
                                  []])
def test_analyze_follow_without_a_directory_exits_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    (tmp_path / "file.txt").write_text("not a directory")
    code = main(["analyze", *(a.format(tmp=tmp_path) for a in argv)])
    out = capsys.readouterr().out
    assert code == 2
    assert len(out.strip().splitlines()) == 1 and out.startswith("error:"), out


@pytest.mark.parametrize(("what", "says"), [("nowhere", "no such directory"),
                                            ("file.txt", "a file, not a run directory"),
                                            ("empty", "trace: no such directory")])
def test_analyze_without_a_run_directory_is_exit_2_before_spark_debug_or_not(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], what: str, says: str
) -> None:
    (tmp_path / "file.txt").write_text("not a directory")
    (tmp_path / "empty").mkdir()
    for debug in ([], ["--debug"]):  # --debug shows the traceback; the exit code stays 2
        code = main(["analyze", str(tmp_path / what), "--master", "no-spark-is-started",
                     *debug])
        captured = capsys.readouterr()
        assert code == 2, (debug, captured)
        assert says in captured.out, captured.out
        assert ("Traceback" in captured.err) is bool(debug), captured.err


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


@pytest.mark.parametrize(("out", "says"), [
    (".", "holds the run directory"),  # it replaced ./runs, an experiment's run records
    ("exp", "holds the run directory"),  # the run directory itself
    ("exp/trace", "inside the run's trace directory"),
    ("exp/trace/r1", "inside the run's trace directory"),
    ("other", "holds files an analysis did not write (notes.txt, runs)"),
    ("file.txt", "a file, not a directory"),
])
def test_analyze_refuses_an_output_directory_it_would_wreck_and_changes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
    out: str, says: str
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["sim", "--nodes", "3", "--messages", "9", "--out", "exp"]) == 0
    (tmp_path / "exp" / "runs").mkdir()
    (tmp_path / "exp" / "runs" / "r1.json").write_text("{}")
    (tmp_path / "other" / "runs").mkdir(parents=True)
    (tmp_path / "other" / "runs" / "r1.json").write_text("{}")
    (tmp_path / "other" / "notes.txt").write_text("mine")
    (tmp_path / "file.txt").write_text("mine")
    before = _tree(tmp_path)
    capsys.readouterr()
    code = main(["analyze", "exp", "--out", out, "--master", "no-spark-is-started"])
    captured = capsys.readouterr().out
    assert code == 2, captured
    assert says in captured, captured
    assert _tree(tmp_path) == before


def test_an_earlier_analysis_output_or_a_new_directory_is_taken(tmp_path: Path) -> None:
    run = tmp_path / "run"
    (run / "trace").mkdir(parents=True)
    check_out_dir(run / "analysis", run)  # the default, not there yet
    check_out_dir(tmp_path / "new" / "deeper", run)
    earlier = tmp_path / "earlier"  # what an older version wrote: tables only, no marker
    for name in ("checks", "runs", "latency", "report.html"):
        (earlier / name).mkdir(parents=True) if "." not in name else (earlier / name).touch()
    check_out_dir(earlier, run)
    (earlier / "mine.txt").touch()
    with pytest.raises(PipelineError, match=r"mine\.txt"):
        check_out_dir(earlier, run)
    (earlier / OUTPUT_MARKER).touch()  # marked as an analysis's: what else is there is kept
    check_out_dir(earlier, run)
    (earlier / "runs" / "r1.json").touch()  # but a folder it would replace must be its own
    with pytest.raises(PipelineError, match=r"\(runs\)"):
        check_out_dir(earlier, run)


def test_trace_show_reads_segments_and_names_a_damaged_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["sim", "--nodes", "3", "--messages", "9", "--out", str(tmp_path)]) == 0
    capsys.readouterr()
    some = read_trace(tmp_path).slice(0, 5).to_pylist()
    # a process still running (or killed): its rows are in segment files, no Parquet yet
    sink = SegmentSink(trace_path(tmp_path, "live", "n9"), background=False)
    try:
        for one in some:
            sink.append(tuple({**one, "run": "live", "node": "n9"}.values()))
        sink.flush()
        assert main(["trace", "show", str(tmp_path)]) == 0
        out = capsys.readouterr().out
        assert "1 of the parts read from segment files" in out, out
        assert "live" in out
        # a damaged file is named, in one error line
        damaged = tmp_path / "trace" / "live" / "n8.parquet"
        damaged.write_bytes(b"PAR1 but not really")
        assert main(["trace", "show", str(tmp_path)]) == 2
        out = capsys.readouterr().out
        assert "n8.parquet: not a readable trace file" in out, out
    finally:
        sink.close()


def test_sim_runs_differing_in_an_option_are_separate_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # they had one name (nodes, messages, seed) and the second replaced the first's trace
    base = ["sim", "--nodes", "3", "--messages", "9", "--out", str(tmp_path)]
    assert main(base) == 0
    assert main([*base, "--loss", "0.2", "--latency", "const:0.01"]) == 0
    assert main([*base, "--no-retransmit", "--crash", "0.34", "--recover-after", "1"]) in (0, 1)
    capsys.readouterr()
    assert main([*base, "--loss", "0.2000001", "--latency", "const:0.01"]) == 0  # not cut
    capsys.readouterr()
    assert sorted(p.name for p in (tmp_path / "trace").iterdir()) == [
        "fifo-n3-m9-s1", "fifo-n3-m9-s1-crash0.34-recover1.0-noretransmit",
        "fifo-n3-m9-s1-loss0.2-latconst_0.01", "fifo-n3-m9-s1-loss0.2000001-latconst_0.01"]


def test_sim_refuses_a_negative_recovery_time_naming_the_flag(
    capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["sim", "--recover-after", "-1"])
    assert exit_info.value.code == 2
    assert "argument --recover-after: must be >= 0, got -1" in capsys.readouterr().err


def test_the_console_script_exits_130_on_a_ctrl_c_while_loading(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    # a Ctrl-C in the second or more that Spark's modules take to load was a traceback
    import types

    import gossamer.cli

    class Loading(types.ModuleType):
        def __getattr__(self, name: str) -> object:
            raise KeyboardInterrupt

    monkeypatch.setitem(sys.modules, "gossamer.cli.main", Loading("gossamer.cli.main"))
    assert gossamer.cli.run() == 130


def test_analyze_refuses_an_empty_layer_and_an_output_it_cannot_make(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["sim", "--nodes", "3", "--messages", "9", "--out", str(tmp_path / "run")]) == 0
    capsys.readouterr()
    spark = ["--master", "no-spark-is-started"]
    assert main(["analyze", str(tmp_path / "run"), "--layer", "", *spark]) == 2
    assert "error: --layer needs a layer name" in capsys.readouterr().out
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere" / "deeper")
    # a traceback (FileExistsError) and exit 1 once Spark had run
    assert main(["analyze", str(tmp_path / "run"), "--out", str(tmp_path / "dangling"),
                 *spark]) == 2
    assert "cannot be made" in capsys.readouterr().out
