"""The VOPR's schedules, without Spark: a pure function of (service, seed), different across
seeds, every option within its documented range and accepted by its workload, every fault
drawn on some seeds and off on others; one schedule gives one trace; the command's input
errors exit 2 before anything runs."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from gossamer.cli.main import main
from gossamer.cli.workloads import WORKLOADS, run_workload, validate_run
from gossamer.core.errors import ConfigError
from gossamer.pipeline import PipelineError, load_experiment
from gossamer.pipeline.vopr import (
    PLANS,
    SERVICES,
    VOPR_CHECKS,
    Campaign,
    SeedVerdict,
    check_out_dir,
    draw_schedule,
    fifo_repair_time,
    latency_within,
    parse_overrides,
    sort_checks,
    unproven_checks,
)

REPO = Path(__file__).resolve().parents[1]
SEEDS = range(1, 301)


def test_the_vopr_covers_the_seven_services() -> None:
    assert SERVICES == ("fifo", "replica", "pubsub", "activity", "paxos", "atomic", "appsync")


@pytest.mark.parametrize("service", SERVICES)
def test_a_schedule_is_a_pure_function_of_service_and_seed(service: str) -> None:
    for seed in range(1, 60):
        first, again = draw_schedule(service, seed), draw_schedule(service, seed)
        assert first == again, f"service={service} seed={seed}"
        assert first.run == f"vopr-{service}-s{seed}"
        assert first.spec().seed == seed and first.spec().workload == service
    drawn = [tuple(sorted(draw_schedule(service, seed).options.items())) for seed in SEEDS]
    assert len(set(drawn)) == len(drawn), f"{service}: two seeds drew the same schedule"
    # not the global random: drawing after reseeding it changes nothing
    import random
    random.seed(12345)
    assert draw_schedule(service, 7) == draw_schedule(service, 7)


@pytest.mark.parametrize("service", SERVICES)
def test_every_option_is_within_its_documented_range_and_fits_the_workload(
    service: str,
) -> None:
    plan = PLANS[service]
    fields = {f.name for f in dataclasses.fields(WORKLOADS[service]["sim"])}
    documented = {knob.option for knob in plan.knobs}
    assert documented <= fields, f"{service}: knobs without a workload option"
    for seed in SEEDS:
        schedule = draw_schedule(service, seed)
        assert set(schedule.options) <= documented, (
            f"{service} seed={seed}: undocumented {set(schedule.options) - documented}")
        for option, value in schedule.options.items():
            assert plan.within(option, value), (
                f"{service} seed={seed}: {option}={value!r} outside {plan.knob(option)}")
        validate_run(schedule.spec())  # the workload accepts it (raises ConfigError if not)
        assert schedule.checks == VOPR_CHECKS


def test_the_ranges_reject_what_is_outside_them() -> None:
    fifo = PLANS["fifo"]
    assert fifo.within("loss", 0.6) and not fifo.within("loss", 0.61)
    assert not fifo.within("loss", True) and not fifo.within("partition", 1)
    assert not fifo.within("retransmit", True)  # not drawn: only an override sets it
    assert latency_within("uniform:0.001,0.1", 0.1)
    assert not latency_within("uniform:0.001,0.2", 0.1)
    assert not latency_within("lognormal:0.06,0.5", 0.1)
    assert not latency_within("const:0.01", 0.1)


@pytest.mark.parametrize(("service", "faults"), [
    ("fifo", {"loss": 0.0, "duplicate": 0.0, "reorder": 0.0, "crash": 0.0, "partition": False}),
    ("replica", {"cuts": 0.0, "crash": 0.0, "offline": 0.0, "hub_crash": False,
                 "partition": False}),
    ("pubsub", {"loss": 0.0, "duplicate": 0.0, "reorder": 0.0, "crash": 0.0,
                "partition": False}),
    ("activity", {"crash": 0.0}),
])
def test_each_fault_is_on_in_some_seeds_and_off_in_others(
    service: str, faults: dict[str, object],
) -> None:
    schedules = [draw_schedule(service, seed) for seed in SEEDS]
    for option, off in faults.items():
        on = sum(1 for s in schedules if s.options[option] != off)
        assert 0.15 * len(schedules) < on < 0.85 * len(schedules), (
            f"{service}: {option} on in {on} of {len(schedules)} seeds")
    kinds = {str(s.options["latency"]).partition(":")[0] for s in schedules}
    assert kinds == {"uniform", "lognormal", "exp"}
    if service == "pubsub":
        assert {s.options["mode"] for s in schedules} == {"gossip", "gossip-tree", "scribe"}


def test_fifo_settles_longer_the_more_is_lost_and_after_the_last_fault() -> None:
    times = [fifo_repair_time(loss, 8, 100) for loss in (0.0, 0.1, 0.3, 0.5, 0.6)]
    assert times == sorted(times) and times[0] == 10.0 and times[-1] > 300
    assert fifo_repair_time(0.3, 12, 150) > fifo_repair_time(0.3, 3, 20)
    for seed in SEEDS:
        o = draw_schedule("fifo", seed).options
        workload = float(o["messages"]) / float(o["rate"])
        ends = [workload]
        if o["crash"]:
            ends.append(float(o["crash_at"]) + float(o["recover_after"]))
            assert float(o["crash_at"]) <= workload
        if o["partition"]:
            ends.append(float(o["partition_at"]) + float(o["partition_for"]))
        repair = fifo_repair_time(float(o["loss"]), int(o["nodes"]), int(o["messages"]))
        assert float(o["settle"]) >= max(ends) - workload + repair - 0.1, f"seed={seed}"


def test_overrides_sit_on_top_of_the_draw_and_in_the_replay_command() -> None:
    plain = draw_schedule("fifo", 4)
    broken = draw_schedule("fifo", 4, overrides=parse_overrides(["retransmit=false"]))
    assert broken.options == {**plain.options, "retransmit": False}
    assert broken.replay_command() == ("gossamer vopr fifo --seed 4 --override retransmit=false"
                                       " --out runs/vopr/replay/vopr-fifo-s4")
    assert plain.replay_command() == ("gossamer vopr fifo --seed 4"
                                      " --out runs/vopr/replay/vopr-fifo-s4")
    assert "override retransmit=false" in broken.faults
    assert parse_overrides(["loss=0.3", "mode=scribe", "x=true"]) == {
        "loss": 0.3, "mode": "scribe", "x": True}
    for bad in (["loss"], ["=1"], ["loss=[1]"]):
        with pytest.raises(PipelineError):
            parse_overrides(bad)
    with pytest.raises(PipelineError):
        draw_schedule("fifo", 1, overrides={"seed": 3})
    with pytest.raises(PipelineError):
        draw_schedule("chord", 1)
    with pytest.raises(ConfigError):  # the workload has no such option
        validate_run(draw_schedule("fifo", 1, overrides={"no_such": 1}).spec())


def test_the_vopr_judges_with_the_quickstart_analysis_settings() -> None:
    assert load_experiment(REPO / "experiments" / "quickstart.toml").checks == VOPR_CHECKS


def _table(folder: Path, run: str) -> object:
    [file] = sorted((folder / "trace" / run).glob("*.parquet"))
    return pq.read_table(file)


@pytest.mark.parametrize(("service", "seed"), [
    ("fifo", 3), ("replica", 2), ("pubsub", 3), ("activity", 1)])
def test_one_seed_one_schedule_one_trace(service: str, seed: int, tmp_path: Path) -> None:
    """Drawn twice and run twice (as a Spark task would): the same trace, row for row."""
    spec = draw_schedule(service, seed).spec()
    run_workload(spec, str(tmp_path / "a"))
    run_workload(draw_schedule(service, seed).spec(), str(tmp_path / "b"))
    first, second = _table(tmp_path / "a", spec.run), _table(tmp_path / "b", spec.run)
    assert first.num_rows > 100  # type: ignore[attr-defined]
    assert first.equals(second), f"service={service} seed={seed}"  # type: ignore[attr-defined]


def test_dry_run_prints_the_ranges_and_the_schedules(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["vopr", "fifo", "--seeds", "3", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "what a seed may draw" in out and "partition_for" in out
    assert "settle" in out and out.count("nodes=") == 3


@pytest.mark.parametrize("argv", [
    ["vopr", "fifo", "--seeds", "0"],
    ["vopr", "fifo", "--seed", "-1"],
    ["vopr", "fifo", "--seed", "0"],  # campaigns run seeds 1..N
    ["vopr", "fifo", "--seed", str(1 << 63)],  # the trace's seed column is 64-bit
    ["vopr", "fifo", "--seeds", "100001", "--dry-run"],  # drew 100,000,000 schedules first
    ["vopr", "chord", "--seeds", "2"],
    ["vopr", "fifo"],
    ["vopr", "fifo", "--seeds", "2", "--seed", "1"],
])
def test_bad_arguments_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(argv)
    assert stopped.value.code == 2


def test_bad_input_found_before_spark_starts_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["vopr", "fifo", "--seeds", "2", "--override", "no_such=1", "--dry-run"]) == 2
    assert "no option 'no_such'" in capsys.readouterr().out
    assert main(["vopr", "fifo", "--seeds", "2", "--override", "loss"]) == 2
    assert main(["vopr", "fifo", "--seeds", "2", "--override", "loss=5", "--dry-run"]) == 2
    assert "loss must be in [0, 1)" in capsys.readouterr().out
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "keep.txt").write_text("not a campaign")
    assert main(["vopr", "fifo", "--seeds", "2", "--out", str(taken)]) == 2
    assert "something else than a VOPR campaign" in capsys.readouterr().out
    assert (taken / "keep.txt").is_file()
    with pytest.raises(PipelineError):
        check_out_dir(taken / "keep.txt")
    check_out_dir(tmp_path / "new")  # new or empty: fine


def test_every_service_names_the_checks_its_guarantee_rests_on() -> None:
    for service, plan in PLANS.items():
        assert plan.checks, service
        assert len(set(plan.checks)) == len(plan.checks), service


def test_a_guarantee_check_that_did_not_apply_leaves_the_guarantee_unproven() -> None:
    plan = PLANS["replica"]
    applied = ["reliability", "duplicates", "validity", "fifo", "causal", "total order"]
    why = {"convergence": "no apply row carries a revision", "atomicity": "no atomic rows"}
    assert unproven_checks(plan, applied, why) == {
        "convergence": "no apply row carries a revision"}
    assert unproven_checks(plan, [*applied, "convergence"], {"atomicity": "x"}) == {}
    renamed = dataclasses.replace(plan, checks=("fifo", "fiffo"))
    assert unproven_checks(renamed, applied, why) == {"fiffo": "the analysis has no such check"}


def test_a_guarantee_check_that_could_not_run_is_not_proven_either() -> None:
    from gossamer.pipeline.analysis import CheckSummary
    from gossamer.pipeline.checks import Status

    def summary(name: str, status: Status, reason: str = "") -> CheckSummary:
        return CheckSummary(name, status, reason, 0, [])

    checks = [summary("reliability", Status.PASS), summary("duplicates", Status.PASS),
              summary("validity", Status.PASS),
              summary("fifo", Status.ERROR, "cannot check: no column seq"),
              summary("atomicity", Status.NOT_APPLICABLE, "no atomic rows")]
    applied, na, unproven = sort_checks(PLANS["activity"], checks)
    assert applied == ["reliability", "duplicates", "validity", "fifo"]  # shown in the table
    assert na == {"atomicity": "no atomic rows"}
    assert unproven == {"fifo": "it could not run: cannot check: no column seq"}
    checks[3] = summary("fifo", Status.FAIL, "2 violations")
    assert sort_checks(PLANS["activity"], checks)[2] == {}  # failed: proven to fail


def test_the_summary_says_not_proven_and_lists_other_checks_by_name_only(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from rich.console import Console

    from gossamer.cli.vopr import _print_summary

    schedule = draw_schedule("activity", 1)
    na = {"atomicity": "no atomic multicast here: a long reason",
          "fifo": "nothing was delivered in layers activity"}
    campaign = Campaign("activity", tmp_path, [SeedVerdict(schedule, {})],
                        ["reliability", "duplicates", "validity"], na, None,
                        unproven_checks(PLANS["activity"],
                                        ["reliability", "duplicates", "validity"], na))
    _print_summary(campaign, Console(width=400))
    text = capsys.readouterr().out
    assert "not proven: the activity guarantee rests on the fifo check, which did not apply: " \
           "nothing was delivered in layers activity" in text
    assert "the guarantee is not proven: 1 of 1 seeds held the checks that applied" in text
    assert "held every guarantee" not in text
    assert f"not applicable to these seeds' traces: atomicity (why: gossamer analyze " \
           f"{tmp_path})" in text
    assert "a long reason" not in text
    proven = dataclasses.replace(campaign, unproven={})
    _print_summary(proven, Console(width=400))
    assert "1 of 1 seeds held every guarantee" in capsys.readouterr().out
