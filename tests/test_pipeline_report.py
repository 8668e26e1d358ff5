"""The HTML report from hand-made analysis aggregates (no Spark): stored load per node and
lookup hops, or the sentence saying the trace has none; then lookup hops analysed from a
written trace."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from gossamer.core.traceio import ParquetSink, trace_path
from gossamer.pipeline import (
    Analysis,
    CheckSummary,
    RunSpec,
    Status,
    analyze,
    write_report,
    write_run_records,
)
from gossamer.pipeline.report import plots, sweep_points
from gossamer.pipeline.summary import checks_table, metrics_table
from trace_frames import row


def analysis(tmp_path: Path, **extra: Any) -> Analysis:
    return Analysis(
        run_dir=tmp_path, out_dir=tmp_path / "analysis", rows=10, unfinished_files=[],
        checks=[CheckSummary("convergence", Status.PASS, "no violations", 0, [])],
        runs=[{"run": "r1", "seed": 1, "nodes": 16, "stored_bytes": 300, "stored_max": 200}],
        latency_cdf=[], load_histogram=[], throughput=[], **extra)


def test_report_says_there_are_no_lookup_rows_and_no_stored_rows(tmp_path: Path) -> None:
    made = analysis(tmp_path)
    text = write_report(made).read_text()
    assert "no lookup rows" in text
    assert "no stored rows" in text
    assert not any("lookup" in title for title in plots(made))


def test_report_shows_stored_bytes_per_node_and_lookup_hops(tmp_path: Path) -> None:
    made = analysis(
        tmp_path,
        stored_nodes=[{"run": "r1", "node": "hub", "stored": 200, "stored_items": 7,
                       "sent": 5, "received": 9},
                      {"run": "r1", "node": "n001", "stored": 100, "stored_items": 3,
                       "sent": 2, "received": 4}],
        lookups={"lookups": 12, "hops_mean": 2.5, "hops_p50": 2, "hops_p99": 6,
                 "hops_max": 6},
        lookups_by_nodes=[
            {"nodes": 16, "lookups": 5, "hops_mean": 2.0, "hops_p50": 2, "hops_p99": 3,
             "hops_max": 3},
            {"nodes": 256, "lookups": 7, "hops_mean": 2.857, "hops_p50": 3, "hops_p99": 6,
             "hops_max": 6}],
        lookup_hops=[(16, 2, 4), (16, 3, 1), (256, 2, 2), (256, 3, 4), (256, 6, 1)],
    )
    text = write_report(made).read_text()
    assert "no lookup rows" not in text and "no stored rows" not in text
    assert "<td>hub</td><td class=\"num\">200</td><td class=\"num\">7</td>" in text
    assert "<td>all</td><td class=\"num\">12</td><td class=\"num\">2.5</td>" in text
    assert "stored B" in text and "hops mean" in text
    titles = set(plots(made))
    assert {"lookup hops against node count", "lookup hops distribution"} <= titles
    assert text.count("data:image/png;base64,") == len(titles)


@pytest.mark.spark
def test_analyze_groups_lookup_hops_by_node_count_and_reports_them(
    spark: Any, tmp_path: Path
) -> None:
    def lookup(run: str, t: float, node: str, hops: int) -> Any:
        return row(t, node, "lookup", layer="chord", key="k", info={"hops": hops,
                                                                    "root": "n001"}, run=run)

    traces = {
        "big": [lookup("big", i, "n000", hops) for i, hops in enumerate([3, 4, 5, 4])],
        # no run record: its node count is the members its trace shows (3)
        "small": [lookup("small", i, f"n00{i}", hops) for i, hops in enumerate([1, 2, 1])],
    }
    for run, rows in traces.items():
        sink = ParquetSink(trace_path(tmp_path, run, "sim"))
        sink.extend(rows)
        sink.close()
    write_run_records(tmp_path, [RunSpec("big", "chord", "sim", 1, {"nodes": 64})])
    made = analyze(spark, tmp_path)
    assert made.lookups is not None and made.lookups["lookups"] == 7
    assert [(g["nodes"], g["lookups"], g["hops_max"]) for g in made.lookups_by_nodes] == [
        (3, 3, 2), (64, 4, 5)]
    assert made.lookup_hops == [(3, 1, 2), (3, 2, 1), (64, 3, 1), (64, 4, 2), (64, 5, 1)]
    runs = {r["run"]: r for r in made.runs}
    assert (runs["big"]["lookups"], runs["big"]["hops_mean"]) == (4, 4.0)
    text = write_report(made).read_text()
    assert "no lookup rows" not in text and "lookup hops against node count" in text


def test_report_and_summary_show_topics_owned_per_node(tmp_path: Path) -> None:
    made = analysis(tmp_path)
    made.runs[0].update(owned_expected=100.0, owned_min=40, owned_max=190, owned_p99=172,
                        owned_p99_over_mean=1.72)
    text = write_report(made).read_text()
    assert "owned p99/mean" in text and '<td class="num">1.72</td>' in text
    console = Console(width=200, record=True)
    console.print(metrics_table(made))
    assert "topics owned per node, p99 / mean" in console.export_text()


def sweep_runs(count: int) -> list[dict[str, Any]]:
    """``count`` fifo runs over a sweep of loss (4 values) and seeds; rmr not applicable."""
    runs = []
    for i in range(count):
        loss, seed = (i % 4) / 10, i // 4 + 1
        runs.append({"run": f"q-loss{loss}-s{seed}", "workload": "fifo", "seed": seed,
                     "params": f'{{"loss": {loss}, "nodes": 5}}', "reliability": 1.0 - loss,
                     "rmr": None})
    return runs


def test_report_plots_every_run_by_the_sweep_with_median_and_spread(tmp_path: Path) -> None:
    made = analysis(tmp_path)
    made.runs = sweep_runs(40)  # more runs than a plot once showed (12)
    points = sweep_points(made)
    assert [(p.axes, len(p.runs)) for p in points] == [
        ((("loss", loss),), 10) for loss in (0.0, 0.1, 0.2, 0.3)]
    assert sum(len(p.runs) for p in points) == 40
    # one plot per metric the runs have (rmr: none has it, so no empty plot)
    assert list(plots(made)) == ["fifo: reliability: delivered / owed"]


def test_each_series_of_an_experiment_is_plotted_against_its_own_sweep(tmp_path: Path) -> None:
    """An experiment's own runs and each part's are separate series, each against the option
    it sweeps (not the first option that happens to differ among all runs of the workload:
    the fixed ``crash_at`` of one part once became the axis of every plot)."""
    made = analysis(tmp_path)
    made.runs = [
        *({"run": f"p-replicas{n}-s1", "seed": 1, "series": "p", "swept": '["replicas"]',
           "params": f'{{"replicas": {n}}}', "failover_max": None} for n in (3, 5, 7)),
        *({"run": f"p-failover-suspect{x}-s1", "seed": 1, "series": "p-failover",
           "swept": '["suspect"]', "params": f'{{"crash_at": 1.0, "suspect": {x}}}',
           "failover_max": x + 0.1} for x in (0.5, 1.0)),
    ]
    points = sweep_points(made)
    assert [(p.workload, p.axes) for p in points] == [
        ("p", (("replicas", 3),)), ("p", (("replicas", 5),)), ("p", (("replicas", 7),)),
        ("p-failover", (("suspect", 0.5),)), ("p-failover", (("suspect", 1.0),))]
    made_plots = list(plots(made))
    assert "p-failover: Paxos leader fail-over (crash to next decision)" in made_plots
    assert not any(name.startswith("p: Paxos leader fail-over") for name in made_plots)


def test_report_opens_with_the_verdict_and_links_violations_to_their_replay(
    tmp_path: Path,
) -> None:
    violation = {"run": "q-loss0.3-s2", "seed": 2, "node": "n1", "msg": "n0:4", "origin": "n0",
                 "seq": 4, "detail": "not delivered"}
    made = analysis(tmp_path, replay={"q-loss0.3-s2": "gossamer experiment q.toml --only "
                                                      "q-loss0.3-s2 --out runs/replay"})
    made.runs = sweep_runs(8)
    made.checks = [CheckSummary("reliability", Status.FAIL, "1 violations", 1, [violation]),
                   CheckSummary("causal", Status.NOT_APPLICABLE, "no vector clocks", 0, [])]
    text = write_report(made).read_text()
    assert text.index("Verdict:") < text.index("<h2>Violations") < text.index("<h2>Runs")
    assert "a guarantee was violated" in text
    assert "gossamer experiment q.toml --only q-loss0.3-s2 --out runs/replay" in text
    assert "href='#run-q-loss0.3-s2'" in text and "id='run-q-loss0.3-s2'" in text
    assert "not applicable" in text and "n/a" in text  # rmr of every run


def test_a_violation_of_a_run_without_seed_or_replay_says_neither_wrongly(
        tmp_path: Path) -> None:
    # a run of `gossamer sim` records no seed column and no replay command: the first
    # violation names no "seed None", and the report claims no real processes
    made = analysis(tmp_path)
    violation = {"run": "r1", "seed": None, "node": "n2", "msg": "n1:3", "detail": "late"}
    made.checks = [CheckSummary("fifo", Status.FAIL, "1 violations", 1, [violation])]
    console = Console(width=300, record=True)
    console.print(checks_table(made))
    line = console.export_text()
    assert "e.g. run r1 node n2 msg n1:3: late" in line, line
    assert "None" not in line
    text = write_report(made).read_text()
    assert "no replay command was recorded" in text
    assert "real processes" not in text
