"""Experiment files: parsing, sweep expansion, option validation, completed-run detection, and
one loopback run through the workload function a Spark task calls (no Spark needed here)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gossamer.cli.main import main
from gossamer.cli.workloads import resolved_options, run_workload, validate_run
from gossamer.core.errors import ConfigError
from gossamer.core.traceio import ParquetSink, trace_path
from gossamer.pipeline import (
    PipelineError,
    RunSpec,
    check_experiment_out,
    is_closed_parquet,
    load_experiment,
    parse_conf,
    run_done,
    write_run_records,
)

REPO = Path(__file__).resolve().parents[1]


def write(folder: Path, text: str) -> Path:
    path = folder / "exp.toml"
    path.write_text(text)
    return path


def test_quickstart_expands_to_a_sweep_times_seeds() -> None:
    experiment = load_experiment(REPO / "experiments" / "quickstart.toml")
    runs = experiment.runs()
    # every seed system: 000 replica, 001 pub/sub and its Paxos log, 002 appsync, 003 activity,
    # 004 atomic multicast
    assert experiment.workloads() == [("fifo", "sim"), ("replica", "sim"), ("activity", "sim"),
                                      ("pubsub", "sim"), ("pubsub", "sim"), ("paxos", "sim"),
                                      ("appsync", "sim"), ("atomic", "sim")]
    # fifo 3 x 3 x 2 seeds, replica 3 x 2 x 2, activity 2, pubsub 3 x 2 and with faults 2,
    # paxos, appsync and atomic 2 each
    assert len(runs) == 3 * 3 * 2 + 3 * 2 * 2 + 2 + 3 * 2 + 2 + 3 * 2
    assert len({r.run for r in runs}) == len(runs)
    assert runs[0].run == "quickstart-loss0.0-crash0.0-s1"
    assert runs[0].params["nodes"] == 12 and runs[0].params["crash"] == 0.0
    replica = [r for r in runs if r.workload == "replica"]
    assert replica[0].run == "quickstart-replica-cuts0.0-crash0.0-s1"
    assert replica[0].params["clients"] == 12 and replica[-1].params["cuts"] == 1.0
    assert experiment.checks.layers == ("fifo", "replica", "activity", "pubsub")
    assert experiment.checks.session_layers == ("activity",)
    for spec in runs:
        validate_run(spec)


def test_parts_add_workloads_with_their_own_seeds_options_and_sweeps(tmp_path: Path) -> None:
    experiment = load_experiment(write(tmp_path, """
name = "x"
workload = "fifo"
seeds = [1, 2]
[options]
nodes = 3
[parts.objects]
workload = "replica"
seeds = [7]
[parts.objects.options]
clients = 4
[parts.objects.sweep]
loss = [0.0, 0.1]
[parts.more]
workload = "fifo"
"""))
    runs = experiment.runs()
    assert [(r.run, r.workload, r.seed) for r in runs] == [
        ("x-s1", "fifo", 1), ("x-s2", "fifo", 2),
        ("x-objects-loss0.0-s7", "replica", 7), ("x-objects-loss0.1-s7", "replica", 7),
        ("x-more-s1", "fifo", 1), ("x-more-s2", "fifo", 2)]
    assert runs[3].params == {"clients": 4, "loss": 0.1}
    assert runs[4].params == {}  # a part does not inherit the file's [options]


def test_sweep_is_a_cartesian_product_with_safe_ids(tmp_path: Path) -> None:
    experiment = load_experiment(write(tmp_path, """
name = "x"
workload = "fifo"
seeds = [1, 2]
[sweep]
nodes = [3, 4]
latency = ["const:0.01", "uniform:0.005,0.05"]
"""))
    runs = experiment.runs()
    assert len(runs) == 8
    assert [r.seed for r in runs[:2]] == [1, 2]
    assert runs[2].run == "x-nodes3-latencyuniform_0.005_0.05-s1"
    assert runs[2].params == {"nodes": 3, "latency": "uniform:0.005,0.05"}


@pytest.mark.parametrize(("text", "error"), [
    ('workload = "fifo"\nfoo = 1', "unknown keys"),
    ('workload = "fifo"\nmode = "cluster"', "mode must be one of"),
    ("seeds = [1]", "workload"),
    ('workload = "fifo"\nseeds = []', "seeds"),
    ('workload = "fifo"\nseeds = [1, 1]', "repeat"),
    ('workload = "fifo"\n[options]\nseed = 3', "set by the experiment"),
    ('workload = "fifo"\n[options]\nloss = 0.1\n[sweep]\nloss = [0.2]', "both fixed"),
    ('workload = "fifo"\n[sweep]\nloss = 0.1', "non-empty list"),
    ('workload = "fifo"\n[analysis]\nbogus = 1', "unknown [analysis] keys"),
    ('workload = "fifo"\nname = "a b"', "name must be"),
    ("workload = ", "not valid TOML"),
    ('workload = "fifo"\n[parts.p]\nmode = "sim"', "parts.p.workload"),
    ('workload = "fifo"\n[parts.p]\nworkload = "replica"\nname = "q"', "in [parts.p]"),
    ('workload = "fifo"\n[parts.p]\nworkload = "replica"\nseeds = [2, 2]', "parts.p.seeds"),
    ('workload = "fifo"\n[parts."a b"]\nworkload = "replica"', "part labels"),
    ('workload = "fifo"\n[parts.p]\nworkload = "replica"\n[parts.p.options]\nseed = 1',
     "set by the experiment"),
    ('workload = "fifo"\nparts = 3', "must be a table"),
])
def test_bad_experiment_files_are_refused_with_the_reason(tmp_path: Path, text: str,
                                                          error: str) -> None:
    with pytest.raises(PipelineError, match=error.replace("[", r"\[")):
        load_experiment(write(tmp_path, text))


@pytest.mark.parametrize(("spec", "error"), [
    (RunSpec("r", "fifo", "sim", 1, {"nodez": 3}), "no option 'nodez'"),
    (RunSpec("r", "fifo", "sim", 1, {"nodes": "ten"}), "does not fit"),
    (RunSpec("r", "fifo", "sim", 1, {"nodes": 2.5}), "does not fit"),
    (RunSpec("r", "fifo", "sim", 1, {"retransmit": 1}), "does not fit"),
    (RunSpec("r", "fifo", "sim", 1, {"nodes": 0}), "nodes >= 1"),
    (RunSpec("r", "raft", "sim", 1, {}), "unknown workload"),
    (RunSpec("r", "paxos", "sim", 1, {"replicas": 0}), "replicas <= 9"),
    (RunSpec("r", "fifo", "cluster", 1, {}), "no mode"),
    (RunSpec("r", "replica", "loopback", 1, {}), "no mode"),
    (RunSpec("r", "replica", "sim", 1, {"clientz": 3}), "no option 'clientz'"),
    (RunSpec("r", "replica", "sim", 1, {"cuts": -1.0}), "cuts must be >= 0"),
    (RunSpec("r", "replica", "sim", 1, {"loss": 0.1}), "no option 'loss'"),
    (RunSpec("r", "replica", "sim", 1, {"crash": 1.5}), "crash must be in"),
    (RunSpec("r", "replica", "sim", 1, {"until": "soon"}), "does not fit"),
    (RunSpec("r", "replica", "sim", 1, {"repair": 0}), "does not fit"),
    # these failed inside the Spark task (exit 1), not up front
    (RunSpec("r", "fifo", "sim", 1, {"loss": 1.5}), r"loss must be in \[0, 1\)"),
    (RunSpec("r", "fifo", "sim", 1, {"loss": 1.0}), r"loss must be in \[0, 1\)"),
    (RunSpec("r", "fifo", "sim", 1, {"crash": 1.5}), r"crash must be in \[0, 1\]"),
    (RunSpec("r", "fifo", "sim", 1, {"duplicate": -0.1}), "duplicate must be in"),
    (RunSpec("r", "fifo", "sim", 1, {"recover_after": -1}), "recover_after must be >= 0"),
    (RunSpec("r", "atomic", "sim", 1, {"loss": 5.0}), "loss must be in"),
    (RunSpec("r", "atomic", "sim", 1, {"down_for": 0.0}), "down_for > 0"),
    (RunSpec("r", "atomic", "sim", 1, {"senders": 9}), "got members 5, senders 9$"),
])
def test_workload_options_are_validated_before_anything_runs(spec: RunSpec, error: str) -> None:
    with pytest.raises(ConfigError, match=error):
        validate_run(spec)


def test_a_run_is_done_only_when_its_trace_files_are_closed(tmp_path: Path) -> None:
    assert not run_done(tmp_path, "r1")
    path = trace_path(tmp_path, "r1", "sim")
    sink = ParquetSink(path, buffer_rows=1)
    sink.append(("r1", 0.0, "a", "fifo", "publish", "a:1", "a", None, None, 1, None, None, 0.0))
    assert path.is_file() and not is_closed_parquet(path)  # a row group, but no footer yet
    assert not run_done(tmp_path, "r1")
    sink.close()
    assert run_done(tmp_path, "r1")


def test_a_loopback_run_writes_one_closed_trace_file_per_node(tmp_path: Path) -> None:
    spec = RunSpec("lb-s1", "fifo", "loopback", 1, {"nodes": 3, "messages": 20, "loss": 0.1})
    result = run_workload(spec, str(tmp_path))
    assert result["reliability"] == 1.0
    assert sorted(p.name for p in (tmp_path / "trace" / "lb-s1").iterdir()) == [
        "analysis.json", "n000.parquet", "n001.parquet", "n002.parquet"]  # and its settings
    assert run_done(tmp_path, "lb-s1")


def test_experiment_verb_refuses_a_bad_file_before_starting_spark(tmp_path: Path) -> None:
    bad = write(tmp_path, 'workload = "fifo"\n[options]\nnodez = 3')
    assert main(["experiment", str(bad), "--out", str(tmp_path / "out")]) == 2
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("options", "says"), [
    ("loss = 1.5", "run fifo-s1: loss must be in [0, 1)"),
    ("nodes = \"ten\"", "run fifo-s1: option nodes = 'ten' does not fit"),
])
def test_an_option_out_of_range_is_exit_2_naming_the_file_before_spark(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], options: str, says: str
) -> None:
    bad = write(tmp_path, f'name = "fifo"\nworkload = "fifo"\nseeds = [1]\n[options]\n{options}')
    code = main(["experiment", str(bad), "--out", str(tmp_path / "out"),
                 "--master", "no-spark-is-started"])
    out = capsys.readouterr().out
    assert code == 2, out
    assert f"error: {bad}: {says}" in out, out
    assert not (tmp_path / "out").exists()


def test_an_output_that_is_a_file_is_exit_2_not_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = write(tmp_path, 'name = "fifo"\nworkload = "fifo"\nseeds = [1]')
    (tmp_path / "taken").write_text("mine")
    code = main(["experiment", str(good), "--out", str(tmp_path / "taken"),
                 "--master", "no-spark-is-started"])
    assert code == 2
    assert "a file, not a directory" in capsys.readouterr().out
    assert (tmp_path / "taken").read_text() == "mine"


def test_a_changed_file_into_the_same_output_is_refused_not_half_skipped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # a done run is skipped; its record and settings were rewritten to the new options
    # although its trace was made with the old ones
    out = tmp_path / "out"
    first = write(tmp_path, 'name = "fifo"\nworkload = "fifo"\nseeds = [1]\n[options]\n'
                            "loss = 0.1")
    [spec] = load_experiment(first).runs()
    write_run_records(out, [spec])
    sink = ParquetSink(trace_path(out, spec.run, "n000"), buffer_rows=1)
    sink.append((spec.run, 0.0, "a", "fifo", "publish", "a:1", "a", None, None, 1, None, None,
                 0.0))
    sink.close()
    record = (out / "runs" / f"{spec.run}.json").read_text()
    changed = write(tmp_path, 'name = "fifo"\nworkload = "fifo"\nseeds = [1]\n[options]\n'
                              "loss = 0.2")
    code = main(["experiment", str(changed), "--out", str(out),
                 "--master", "no-spark-is-started"])
    said = capsys.readouterr().out
    assert code == 2, said
    assert "run fifo-s1 was done with other options (loss 0.1 there, 0.2 here)" in said, said
    assert (out / "runs" / f"{spec.run}.json").read_text() == record
    check_experiment_out(out, [spec])  # the same file again: the done run is skipped
    # an option written out at its default value is the same run (it was refused as a change)
    same = write(tmp_path, 'name = "fifo"\nworkload = "fifo"\nseeds = [1]\n[options]\n'
                           "loss = 0.1\nduplicate = 0.0\nnodes = 20")
    check_experiment_out(out, load_experiment(same).runs(), resolved=resolved_options)
    with pytest.raises(PipelineError, match="duplicate"):
        check_experiment_out(out, load_experiment(same).runs())  # without the defaults


def test_the_experiments_analysis_directory_is_checked_before_any_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # it was refused only after every run had run
    good = write(tmp_path, 'name = "fifo"\nworkload = "fifo"\nseeds = [1]')
    (tmp_path / "out" / "analysis").mkdir(parents=True)
    (tmp_path / "out" / "analysis" / "notes.txt").write_text("mine")
    code = main(["experiment", str(good), "--out", str(tmp_path / "out"),
                 "--master", "no-spark-is-started"])
    said = capsys.readouterr().out
    assert code == 2 and "the experiment's analysis directory" in said and "notes.txt" in said
    assert not (tmp_path / "out" / "trace").exists()


def test_conf_pairs_need_an_equals_sign() -> None:
    assert parse_conf(["a.b=1", "c= x=y"]) == {"a.b": "1", "c": " x=y"}
    with pytest.raises(PipelineError, match="KEY=VALUE"):
        parse_conf(["novalue"])


def test_the_local_jvm_heap_can_be_capped_by_the_environment(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from gossamer.pipeline import spark

    monkeypatch.setenv(spark.DRIVER_MEMORY_ENV, "1536m")
    assert spark._local_driver_memory() == "1536m"
    monkeypatch.setenv(spark.DRIVER_MEMORY_ENV, "lots")
    with pytest.raises(PipelineError, match="like 2g or 1536m"):
        spark._local_driver_memory()
    monkeypatch.delenv(spark.DRIVER_MEMORY_ENV)
    assert spark._local_driver_memory().endswith("m")  # a third of this machine's


def test_a_replica_run_writes_one_closed_trace_file_and_converges(tmp_path: Path) -> None:
    spec = RunSpec("rep-s1", "replica", "sim", 1, {"clients": 4, "writes_per_client": 3,
                                                   "cuts": 0.5, "settle": 10.0})
    result = run_workload(spec, str(tmp_path))
    assert result["converged"] is True
    assert result["requested"] == 12 and result["made"] + result["skipped"] == 12
    assert [p.name for p in (tmp_path / "trace" / "rep-s1").iterdir()] == ["sim.parquet"]
    assert run_done(tmp_path, "rep-s1")


@pytest.mark.parametrize("path", sorted((REPO / "experiments").glob("*.toml")),
                         ids=lambda p: p.name)
def test_every_shipped_experiment_file_loads_and_every_run_validates(path: Path) -> None:
    experiment = load_experiment(path)
    runs = experiment.runs()
    assert runs, f"{path.name} expands to no runs"
    assert len({r.run for r in runs}) == len(runs), f"{path.name}: run names collide"
    for spec in runs:
        validate_run(spec)


def test_dry_run_lists_the_runs_whole_and_runs_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    quickstart = REPO / "experiments" / "quickstart.toml"
    runs = load_experiment(quickstart).runs()
    assert main(["experiment", str(quickstart), "--dry-run", "--out", "out"]) == 0
    said = capsys.readouterr().out
    assert f"{len(runs)} runs (nothing run: --dry-run)" in said
    lines = said.splitlines()
    for spec in runs:  # each id whole, first on its line: --only takes it
        assert any(line.startswith(f"{spec.run}  {spec.workload}/sim seed {spec.seed}: ")
                   for line in lines), spec.run
    assert list(tmp_path.iterdir()) == []
    assert main(["experiment", str(quickstart)]) == 2  # neither --out nor --dry-run
    assert "experiment needs --out DIR" in capsys.readouterr().out


def test_a_sweep_repeating_a_value_is_refused_as_repeated_seeds_are(tmp_path: Path) -> None:
    # loss = [0.1, 0.1] made two identical runs, the second named ...-s1-1
    bad = write(tmp_path, 'workload = "fifo"\n[sweep]\nloss = [0.1, 0.1]')
    with pytest.raises(PipelineError, match=r"sweep.loss repeats a value"):
        load_experiment(bad)
    fine = write(tmp_path, 'workload = "fifo"\n[sweep]\nnodes = [1, 2]')
    assert len(load_experiment(fine).runs()) == 2
