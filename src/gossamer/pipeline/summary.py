"""The terminal summary of an analysis: a rich table of checks and one of metrics over runs."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from .analysis import Analysis
from .checks import Status
from .report import format_value

__all__ = ["checks_table", "metrics_table", "print_summary"]

_STYLE = {Status.PASS: "green", Status.FAIL: "bold red", Status.NOT_APPLICABLE: "dim"}
_METRICS = [
    ("reliability", "reliability (delivered / expected)"),
    ("failure_fraction", "nodes crashed or left (fraction)"),
    ("latency_p50", "latency p50 (s)"), ("latency_p95", "latency p95 (s)"),
    ("latency_p99", "latency p99 (s)"), ("latency_max", "latency max (s)"),
    ("convergence_p95", "convergence p95 (s)"),
    ("messages_per_operation", "messages per publish"), ("rmr", "RMR"),
    ("last_hop_max", "last delivery hop"), ("peak_throughput", "peak deliveries / s"),
    ("stored_max", "stored bytes, largest node"), ("hops_mean", "lookup hops mean"),
    ("hops_p99", "lookup hops p99"), ("owned_max", "topics owned per node, max"),
    ("owned_p99_over_mean", "topics owned per node, p99 / mean"),
]


def checks_table(analysis: Analysis) -> Table:
    table = Table(title="checks")
    table.add_column("check")
    table.add_column("status")
    table.add_column("violations", justify="right")
    table.add_column("reason / first violation")
    for check in analysis.checks:
        style = _STYLE[check.status]
        note = check.reason
        if check.examples:
            first = check.examples[0]
            note = (f"{check.reason}; e.g. run {first.get('run')} seed {first.get('seed')} "
                    f"node {first.get('node')} msg {first.get('msg')}: {first.get('detail')}")
        table.add_row(check.name, f"[{style}]{check.status.value}[/]", f"{check.violations:,}",
                      note)
    return table


def metrics_table(analysis: Analysis) -> Table:
    """One row per metric: its minimum, mean and maximum over the runs (the report has each
    run)."""
    table = Table(title=f"metrics over {len(analysis.runs)} runs")
    table.add_column("metric")
    for label in ("min", "mean", "max"):
        table.add_column(label, justify="right")
    for key, label in _METRICS:
        values = [float(run[key]) for run in analysis.runs if run.get(key) is not None]
        if not values:
            table.add_row(label, "-", "-", "-")
            continue
        table.add_row(label, format_value(min(values)),
                      format_value(sum(values) / len(values)), format_value(max(values)))
    return table


def print_summary(analysis: Analysis, console: Console) -> None:
    console.print(checks_table(analysis))
    console.print(metrics_table(analysis))
    for line in analysis.recovery_notes():
        console.print(f"[yellow]{line}[/]", highlight=False)
    if analysis.runs_without_wall:
        console.print(f"[yellow]cross-process latency is not available for runs "
                      f"{', '.join(analysis.runs_without_wall)}: their trace files have no "
                      "wall column (written before it), and their run clocks (t) are not "
                      "comparable across processes[/]")
    if analysis.unfinished_files:
        console.print(f"[yellow]{len(analysis.unfinished_files)} unfinished trace files "
                      "(no Parquet footer) were left out[/]")
    console.print(f"{analysis.rows:,} trace rows; tables under {analysis.out_dir}")
    if analysis.report is not None:
        console.print(f"report: {analysis.report}")
