"""The terminal summary of an analysis: a rich table of checks and one of metrics over runs."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .analysis import Analysis
from .checks import PARTIAL_NOTE, Status
from .report import format_value

__all__ = ["checks_table", "metrics_table", "print_summary", "verdict_line"]

_STYLE = {Status.PASS: "green", Status.FAIL: "bold red", Status.NOT_APPLICABLE: "dim",
          Status.ERROR: "bold yellow"}
_METRICS = [
    ("reliability", "reliability (delivered / expected)"),
    ("failure_fraction", "nodes crashed (fraction)"),
    ("latency_p50", "latency p50 (s)"), ("latency_p95", "latency p95 (s)"),
    ("latency_p99", "latency p99 (s)"), ("latency_max", "latency max (s)"),
    ("convergence_p95", "convergence p95 (s)"),
    ("messages_per_operation", "messages per publish"), ("rmr", "RMR"),
    ("last_hop_max", "last delivery hop"), ("peak_throughput", "peak deliveries / s"),
    ("stored_max", "stored bytes, largest node"), ("hops_mean", "lookup hops mean"),
    ("hops_p99", "lookup hops p99"), ("owned_max", "topics owned per node, max"),
    ("owned_p99_over_mean", "topics owned per node, p99 / mean"),
    ("abort_rate", "atomic multicasts aborted (fraction)"),
    ("delivered_fraction", "atomic multicasts delivered (fraction of sent)"),
    ("commit_latency_p50", "atomic commit latency p50 (s)"),
    ("requests_per_loss", "SRM requests per loss"), ("repairs_per_loss", "SRM repairs per loss"),
    ("decisions_per_s", "Paxos decisions / s"), ("decide_latency_p50", "Paxos decide p50 (s)"),
    ("failover_max", "Paxos fail-over max (s)"),
    ("round_time_p50", "APSYN round time p50 (s)"),
    ("visible_p99", "APSYN visible everywhere p99 (s)"),
    ("request_visible_p99", "APSYN request to visible p99 (s)"),
    ("conflicts_per_round", "APSYN conflicts per round"),
    ("bytes_per_round", "APSYN bytes per round"),
]


def verdict_line(analysis: Analysis) -> str:
    """The verdict in one line: what failed, what could not be checked, what held."""
    by_status: dict[Status, list[str]] = {}
    for check in analysis.checks:
        by_status.setdefault(check.status, []).append(check.name)
    held = len(by_status.get(Status.PASS, []))
    na = len(by_status.get(Status.NOT_APPLICABLE, []))
    parts = []
    if by_status.get(Status.FAIL):
        parts.append(f"violated: {', '.join(by_status[Status.FAIL])}")
    if by_status.get(Status.ERROR):
        parts.append(f"could not be checked: {', '.join(by_status[Status.ERROR])}")
    parts.append(f"{held} held")
    parts.append(f"{na} not applicable")
    word = ("COULD NOT ANALYSE" if analysis.errored else "VIOLATED" if analysis.failed
            else "EVERY GUARANTEE HELD" if held else "NOTHING TO CHECK")
    return f"verdict: {word} ({'; '.join(parts)})"


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
            seed = "" if first.get("seed") is None else f" seed {first.get('seed')}"
            note = (f"{check.reason}; e.g. run {first.get('run')}{seed} "
                    f"node {first.get('node')} msg {first.get('msg')}: {first.get('detail')}")
            replay = analysis.replay.get(str(first.get("run")))
            if replay:
                note += f"; replay: {replay}"
        count = "-" if check.status in (Status.NOT_APPLICABLE, Status.ERROR) \
            else f"{check.violations:,}"
        table.add_row(check.name, f"[{style}]{check.status.value}[/]", count, escape(note))
    return table


def metrics_table(analysis: Analysis) -> Table:
    """One row per metric: its minimum, mean and maximum over the runs it applies to (the
    report has each run); "not applicable" where no run has it."""
    table = Table(title=f"metrics over {len(analysis.runs)} runs")
    table.add_column("metric")
    table.add_column("runs", justify="right")
    for label in ("min", "mean", "max"):
        table.add_column(label, justify="right")
    for key, label in _METRICS:
        values = [float(run[key]) for run in analysis.runs if run.get(key) is not None]
        if not values:
            table.add_row(label, "0", "[dim]not applicable[/]", "", "")
            continue
        table.add_row(label, str(len(values)), format_value(min(values)),
                      format_value(sum(values) / len(values)), format_value(max(values)))
    return table


def print_summary(analysis: Analysis, console: Console) -> None:
    style = "bold red" if analysis.failed else "bold yellow" if analysis.errored else "bold green"
    console.print(f"[{style}]{escape(verdict_line(analysis))}[/]", soft_wrap=True)
    console.print(checks_table(analysis))
    console.print(metrics_table(analysis))
    for line in analysis.settings_notes:
        console.print(f"settings: {escape(line)}", soft_wrap=True, highlight=False)
    for line in analysis.recovery_notes():
        console.print(f"[yellow]{escape(line)}[/]", highlight=False, soft_wrap=True)
    if analysis.runs_without_wall:
        console.print(f"[yellow]cross-process latency is not available for runs "
                      f"{', '.join(analysis.runs_without_wall)}: their trace files have no "
                      "wall column (written before it), and their run clocks (t) are not "
                      "comparable across processes[/]")
    if analysis.left_out:
        console.print(f"[yellow]{len(analysis.left_out)} trace files were left out "
                      f"(--allow-partial; {PARTIAL_NOTE}):[/]", soft_wrap=True)
        for path, problem in analysis.left_out:
            console.print(f"[yellow]  left out {escape(str(path))}: {escape(problem)}[/]",
                          soft_wrap=True, highlight=False)
    console.print(f"{analysis.rows:,} trace rows; tables under {analysis.out_dir}")
    if analysis.report is not None:
        console.print(f"report: {analysis.report}")
