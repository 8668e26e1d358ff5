"""The report: one self-contained HTML file with the verdicts, per-run metrics and PNG plots.

Plots are matplotlib figures (no pyplot: no display, no global state) drawn from the aggregates
an ``Analysis`` holds, embedded as base64 so the file can be mailed or archived on its own.
"""

from __future__ import annotations

import base64
import dataclasses
import html
import io
import json
import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .analysis import Analysis
from .checks import PARTIAL_NOTE, Status

if TYPE_CHECKING:  # matplotlib is imported when a report is drawn, not with the pipeline
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["format_value", "plots", "sweep_points", "write_report"]

_MAX_SERIES = 12  # lines per plot of per node-count series before the legend stops being read

_RUN_COLUMNS = [
    ("run", "run"), ("workload", "workload"), ("seed", "seed"), ("nodes", "nodes"),
    ("failure_fraction", "crashed"), ("published", "published"),
    ("reliability", "reliability"), ("latency_p50", "lat p50 s"),
    ("latency_p95", "lat p95 s"), ("latency_p99", "lat p99 s"), ("latency_max", "lat max s"),
    ("messages_per_operation", "msgs/op"), ("rmr", "RMR"), ("last_hop_max", "last hop"),
    ("convergence_p95", "conv p95 s"), ("peak_throughput", "peak deliv/s"),
    ("stored_bytes", "stored B"), ("stored_max", "stored max B"),
    ("hops_mean", "hops mean"), ("hops_p99", "hops p99"),
    ("owned_expected", "owned exp"), ("owned_min", "owned min"), ("owned_max", "owned max"),
    ("owned_p99", "owned p99"), ("owned_p99_over_mean", "owned p99/mean"),
]
_STORED_COLUMNS = [("run", "run"), ("node", "node"), ("stored", "stored bytes"),
                   ("stored_items", "items"), ("sent", "sent"), ("received", "received")]
_LOOKUP_COLUMNS = [("nodes", "nodes"), ("lookups", "lookups"), ("hops_mean", "mean"),
                   ("hops_p50", "p50"), ("hops_p99", "p99"), ("hops_max", "max")]

_CSS = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; margin: 1em 0; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; }
th { background: #f3f3f3; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.pass { color: #1a7f37; font-weight: bold; }
.fail { color: #cf222e; font-weight: bold; }
.na { color: #6e7781; }
img { max-width: 100%; border: 1px solid #eee; margin: 0.5em 0; }
.plots { display: grid; grid-template-columns: repeat(auto-fit, minmax(480px, 1fr)); gap: 1em; }
"""


def format_value(value: Any) -> str:
    """A table cell: floats to 4 significant digits, ratios in [0, 1] kept as they are."""
    if value is None:
        return "-"
    if isinstance(value, float):
        if math.isnan(value):
            return "-"
        return f"{value:.4g}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def _png(figure: Figure) -> str:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100, bbox_inches="tight")
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def _figure(title: str, xlabel: str, ylabel: str) -> tuple[Figure, Axes]:
    from matplotlib.figure import Figure

    figure = Figure(figsize=(6.4, 4.0))
    axes = figure.subplots()
    axes.set_title(title)
    axes.set_xlabel(xlabel)
    axes.set_ylabel(ylabel)
    axes.grid(True, alpha=0.3)
    return figure, axes


# -- runs grouped by the sweep ------------------------------------------------------------------


_MEDIAN_NOTE = "median over runs; bars: min to max"


@dataclasses.dataclass(frozen=True)
class _Point:
    """One point of an experiment's sweep: its runs (one per seed)."""

    workload: str
    axes: tuple[tuple[str, Any], ...]  # the swept options and their values at this point
    runs: tuple[str, ...]

    def label(self, skip: str | None = None) -> str:
        shown = [f"{axis}={value}" for axis, value in self.axes if axis != skip]
        return ", ".join(shown) or "all runs"


def sweep_points(analysis: Analysis) -> list[_Point]:
    """The runs grouped by series (an experiment's own runs, or one part's: what its run
    record names) and by the options that series sweeps, in the file's order; a record from
    before series were recorded: by the options that vary between the runs. A run without a
    run record (a real deployment) is a point of its own."""
    by_workload: dict[str, list[tuple[str, dict[str, Any]]]] = defaultdict(list)
    swept_of: dict[str, list[str]] = {}
    for run in analysis.runs:
        params = run.get("params")
        try:
            options = json.loads(params) if isinstance(params, str) else {}
            swept = json.loads(run["swept"]) if isinstance(run.get("swept"), str) else None
        except ValueError:
            options, swept = {}, None
        workload = (run.get("series") or run.get("workload")
                    or (str(run["run"]) if not options else "runs"))
        by_workload[str(workload)].append((str(run["run"]), options))
        if isinstance(swept, list):
            swept_of[str(workload)] = [str(key) for key in swept]
    points = []
    for workload, runs in sorted(by_workload.items()):
        keys = swept_of.get(workload) or sorted({key for _, options in runs for key in options})
        varying = [key for key in keys
                   if len({json.dumps(options.get(key)) for _, options in runs}) > 1]
        grouped: dict[tuple[tuple[str, Any], ...], list[str]] = defaultdict(list)
        for name, options in runs:
            grouped[tuple((key, options.get(key)) for key in varying)].append(name)
        for axes, members in sorted(grouped.items(), key=lambda item: _sort_key(item[0])):
            points.append(_Point(workload, axes, tuple(sorted(members))))
    return points


def _at(point: _Point, axis: str | None) -> Any:
    """The value of ``axis`` at ``point`` (None without an axis)."""
    return None if axis is None else dict(point.axes).get(axis)


def _sort_key(axes: tuple[tuple[str, Any], ...]) -> tuple[Any, ...]:
    return tuple((0, value, "") if isinstance(value, int | float) and not isinstance(value, bool)
                 else (1, 0, str(value)) for _, value in axes)


def _median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


#: (run column, what it shows, its unit) of the metrics plotted against the sweep
_SWEEP_METRICS = (
    ("reliability", "reliability: delivered / owed", "fraction"),
    ("latency_p50", "latency p50, publish to delivery", "s"),
    ("latency_p95", "latency p95, publish to delivery", "s"),
    ("convergence_p95", "convergence time p95, publish to last delivery", "s"),
    ("messages_per_operation", "messages sent per publish", "messages"),
    ("rmr", "relative message redundancy (RMR)", "ratio"),
    ("peak_throughput", "peak throughput", "deliveries / s"),
    ("abort_rate", "atomic multicasts aborted, of those decided", "fraction"),
    ("delivered_fraction", "atomic multicasts delivered, of those sent", "fraction"),
    ("commit_latency_p50", "commit latency p50, send to decision at the sender", "s"),
    ("requests_per_loss", "SRM repair requests sent per loss", "requests"),
    ("repairs_per_loss", "SRM repairs sent per loss", "repairs"),
    ("decisions_per_s", "Paxos decisions per second", "decisions / s"),
    ("decide_latency_p50", "Paxos decide latency p50 at the leader", "s"),
    ("messages_per_decision", "Paxos messages sent per decision", "messages"),
    ("failover_max", "Paxos leader fail-over (crash to next decision)", "s"),
    ("round_time_p50", "APSYN round time p50", "s"),
    ("visible_p99", "APSYN change visible at every peer p99, after the server applied it", "s"),
    ("request_visible_p99", "APSYN request to visible at every peer p99", "s"),
    ("conflicts_per_round", "APSYN requests meeting a conflict per round", "requests"),
    ("bytes_per_round", "APSYN sync bytes written to the peers per round", "bytes"),
)


def _metric_against_sweep(analysis: Analysis, column: str, what: str,
                          unit: str) -> dict[str, str]:
    """Per workload with the metric: its median and spread (min to max over the runs of a
    point) against the first swept option, one line per combination of the others."""
    runs = {str(r["run"]): r for r in analysis.runs}
    made: dict[str, str] = {}
    by_workload: dict[str, list[_Point]] = defaultdict(list)
    for point in sweep_points(analysis):
        by_workload[point.workload].append(point)
    for workload, points in by_workload.items():
        values = {p: [float(runs[r][column]) for r in p.runs if runs[r].get(column) is not None]
                  for p in points}
        if not any(values.values()):
            continue
        axis = points[0].axes[0][0] if points[0].axes else None
        xs_all = [_at(p, axis) for p in points]
        numeric = axis is not None and all(
            isinstance(x, int | float) and not isinstance(x, bool) for x in xs_all)
        seeds = max(len(v) for v in values.values())
        against = f" against {axis}" if axis else ""
        figure, axes = _figure(f"{workload}: {what} ({unit}){against}\n"
                               f"{_MEDIAN_NOTE} ({seeds} per point)",
                               axis or "", f"{what} ({unit})")
        series: dict[str, list[tuple[Any, list[float]]]] = defaultdict(list)
        for point in points:
            if values[point]:
                series[point.label(skip=axis)].append((_at(point, axis), values[point]))
        categories = sorted({str(x) for x in xs_all}) if not numeric else []
        for label, entries in sorted(series.items()):
            entries.sort(key=lambda e: e[0] if numeric else categories.index(str(e[0])))
            xs = [e[0] if numeric else categories.index(str(e[0])) for e in entries]
            medians = [_median(v) for _, v in entries]
            low = [m - min(v) for m, (_, v) in zip(medians, entries, strict=True)]
            high = [max(v) - m for m, (_, v) in zip(medians, entries, strict=True)]
            axes.errorbar(xs, medians, yerr=[low, high], marker="o", capsize=3,
                          label=label if len(series) > 1 else None)
        if not numeric:
            axes.set_xticks(range(len(categories)))
            axes.set_xticklabels(categories or ["all runs"], rotation=20, fontsize="small")
        if len(series) > 1:
            axes.legend(fontsize="x-small")
        made[f"{workload}: {what}"] = _png(figure)
    return made


def _latency_cdf(analysis: Analysis) -> dict[str, str]:
    """Per workload, one latency CDF per sweep point: the median over its runs of each
    quantile, shaded from the lowest to the highest run."""
    by_run: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for run, fraction, latency in analysis.latency_cdf:
        by_run[run].append((fraction, latency))
    made: dict[str, str] = {}
    by_workload: dict[str, list[_Point]] = defaultdict(list)
    for point in sweep_points(analysis):
        if any(r in by_run for r in point.runs):
            by_workload[point.workload].append(point)
    for workload, points in by_workload.items():
        figure, axes = _figure(f"{workload}: latency CDF, publish to delivery (s)\n"
                               f"median over the runs of each sweep point; band: min to max",
                               "latency (s)", "fraction of deliveries")
        for point in points:
            curves = [dict(by_run[r]) for r in point.runs if r in by_run]
            fractions = sorted(set.intersection(*(set(c) for c in curves)))
            if not fractions:
                continue
            medians = [_median([c[f] for c in curves]) for f in fractions]
            lows = [min(c[f] for c in curves) for f in fractions]
            highs = [max(c[f] for c in curves) for f in fractions]
            (line,) = axes.plot(medians, fractions, label=point.label())
            axes.fill_betweenx(fractions, lows, highs, alpha=0.15, color=line.get_color())
        if len(points) > 1:
            axes.legend(fontsize="x-small")
        made[f"{workload}: latency CDF"] = _png(figure)
    return made


def _messages_against_load(analysis: Analysis) -> str | None:
    points = [(r["offered_load"], r["messages_per_operation"]) for r in analysis.runs
              if r.get("offered_load") is not None
              and r.get("messages_per_operation") is not None]
    if not points:
        return None
    figure, axes = _figure(f"Messages per publish against offered load (every run, "
                           f"{len(points)})", "offered load (publishes / s)",
                           "messages sent per publish (messages)")
    axes.scatter([p[0] for p in points], [p[1] for p in points], alpha=0.6)
    return _png(figure)


def _load_distribution(analysis: Analysis) -> str | None:
    if not analysis.load_histogram:
        return None
    figure, axes = _figure(f"Load across nodes, all {len(analysis.runs)} runs (messages)",
                           "messages sent + received per node (messages)", "nodes (count)")
    lows = [b[0] for b in analysis.load_histogram]
    widths = [b[1] - b[0] for b in analysis.load_histogram]
    axes.bar(lows, [b[2] for b in analysis.load_histogram], width=widths, align="edge",
             edgecolor="white")
    return _png(figure)


def _reliability_against_failures(analysis: Analysis) -> str | None:
    points = [(r["failure_fraction"], r["reliability"]) for r in analysis.runs
              if r.get("failure_fraction") is not None and r.get("reliability") is not None]
    if len({p[0] for p in points}) < 2:
        return None  # one failure fraction: nothing to plot against
    by_fraction: dict[float, list[float]] = defaultdict(list)
    for fraction, reliability in points:
        by_fraction[fraction].append(reliability)
    xs = sorted(by_fraction)
    medians = [_median(by_fraction[x]) for x in xs]
    figure, axes = _figure(f"Reliability (fraction) against the fraction of nodes crashed\n"
                           f"{_MEDIAN_NOTE} ({len(points)} runs)",
                           "nodes crashed (fraction)", "delivered / owed (fraction)")
    axes.errorbar(xs, medians, yerr=[[m - min(by_fraction[x]) for m, x in zip(medians, xs,
                                                                             strict=True)],
                                     [max(by_fraction[x]) - m for m, x in zip(medians, xs,
                                                                             strict=True)]],
                  marker="o", capsize=3)
    axes.set_ylim(min(0.0, *(p[1] for p in points)) - 0.02, 1.02)
    return _png(figure)


def _throughput(analysis: Analysis) -> dict[str, str]:
    """Per workload, deliveries per second over time per sweep point (median over runs)."""
    by_run: dict[str, dict[float, float]] = defaultdict(dict)
    for run, second, per_second in analysis.throughput:
        by_run[run][second] = per_second
    made: dict[str, str] = {}
    by_workload: dict[str, list[_Point]] = defaultdict(list)
    for point in sweep_points(analysis):
        if any(r in by_run for r in point.runs):
            by_workload[point.workload].append(point)
    for workload, points in by_workload.items():
        figure, axes = _figure(f"{workload}: throughput over time (deliveries / s)\n"
                               "median over the runs of each sweep point",
                               "run time (s)", "deliveries / s")
        for point in points:
            curves = [by_run[r] for r in point.runs if r in by_run]
            seconds = sorted(set().union(*curves))
            axes.step(seconds, [_median([c.get(s, 0.0) for c in curves]) for s in seconds],
                      where="post", label=point.label())
        if len(points) > 1:
            axes.legend(fontsize="x-small")
        made[f"{workload}: throughput over time"] = _png(figure)
    return made


def _lookup_hops_by_nodes(analysis: Analysis) -> str | None:
    groups = [g for g in analysis.lookups_by_nodes if g.get("nodes") is not None]
    if not groups:
        return None
    figure, axes = _figure("Lookup hops against node count (hops)", "nodes (count)",
                           "hops per lookup (hops)")
    xs = [g["nodes"] for g in groups]
    for key, label in (("hops_mean", "mean"), ("hops_p50", "p50"), ("hops_p99", "p99"),
                       ("hops_max", "max")):
        axes.plot(xs, [g[key] for g in groups], marker="o", label=label)
    if len(xs) > 1 and max(xs) >= 10 * min(xs):
        axes.set_xscale("log")
    axes.legend(fontsize="small")
    return _png(figure)


def _lookup_hop_distribution(analysis: Analysis) -> str | None:
    series: dict[int | None, dict[int, int]] = defaultdict(dict)
    for nodes, hops, lookups in analysis.lookup_hops:
        series[nodes][hops] = lookups
    if not series:
        return None
    figure, axes = _figure("Lookup hops distribution (fraction of lookups)", "hops (hops)",
                           "fraction of lookups")
    for nodes in sorted(series, key=lambda n: (n is None, n or 0))[:_MAX_SERIES]:
        counts = series[nodes]
        total = sum(counts.values())
        xs = sorted(counts)
        axes.plot(xs, [counts[x] / total for x in xs], marker="o",
                  label=f"{nodes} nodes" if nodes is not None else "all")
    axes.legend(fontsize="x-small")
    return _png(figure)


_PLOTS: Sequence[tuple[str, Callable[[Analysis], str | None]]] = (
    ("reliability against failure fraction", _reliability_against_failures),
    ("messages against load", _messages_against_load),
    ("load distribution across nodes", _load_distribution),
    ("lookup hops against node count", _lookup_hops_by_nodes),
    ("lookup hops distribution", _lookup_hop_distribution),
)


def plots(analysis: Analysis) -> dict[str, str]:
    """Plot name -> base64 PNG, for the plots the analysis has data for: every metric by the
    sweep's parameters (all runs, median and spread), then the plots over all runs."""
    made: dict[str, str] = {}
    for column, what, unit in _SWEEP_METRICS:
        made.update(_metric_against_sweep(analysis, column, what, unit))
    made.update(_latency_cdf(analysis))
    made.update(_throughput(analysis))
    for title, draw in _PLOTS:
        image = draw(analysis)
        if image is not None:
            made[title] = image
    return made


def _cell(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "<td class='na' title='not applicable to this run'>n/a</td>"
    numeric = isinstance(value, int | float) and not isinstance(value, bool)
    css = ' class="num"' if numeric else ""
    return f"<td{css}>{html.escape(format_value(value))}</td>"


def _table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = ["<tr>" + "".join(_cell(value) for value in row) + "</tr>" for row in rows]
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


_STATUS_CSS = {Status.PASS: "pass", Status.FAIL: "fail", Status.NOT_APPLICABLE: "na",
               Status.ERROR: "fail"}


def _anchor(run: str) -> str:
    return "run-" + "".join(c if c.isalnum() or c in "-_." else "_" for c in run)


def _verdict(analysis: Analysis) -> list[str]:
    """The opening: the verdict, then one row per check (what it found, in words)."""
    if analysis.errored:
        word, css = "could not analyse: some check lacks what it needs", "fail"
    elif analysis.failed:
        word, css = "a guarantee was violated", "fail"
    else:
        word, css = "every applicable guarantee held", "pass"
    parts = [f"<h2>Verdict: <span class='{css}'>{html.escape(word)}</span></h2>",
             "<table><tr><th>check</th><th>verdict</th><th>violations</th><th>what it found"
             "</th></tr>"]
    for check in analysis.checks:
        count = ("" if check.status in (Status.NOT_APPLICABLE, Status.ERROR)
                 else f"{check.violations:,}")
        link = (f" (<a href='#violations-{_anchor(check.name)}'>first violations</a>)"
                if check.examples else "")
        parts.append(
            f"<tr><td>{html.escape(check.name)}</td>"
            f"<td class='{_STATUS_CSS[check.status]}'>{html.escape(check.status.value)}</td>"
            f"<td class='num'>{count}</td><td>{html.escape(check.reason)}{link}</td></tr>")
    parts.append("</table>")
    return parts


def _violations(analysis: Analysis) -> list[str]:
    parts = []
    known_runs = {str(r["run"]) for r in analysis.runs}
    for check in analysis.checks:
        if not check.examples:
            continue
        parts.append(f"<h3 id='violations-{_anchor(check.name)}'>{html.escape(check.name)}: "
                     f"first {len(check.examples)} of {check.violations:,} violations</h3>")
        rows = []
        for example in check.examples:
            run = str(example.get("run"))
            link = (f"<a href='#{_anchor(run)}'>{html.escape(run)}</a>" if run in known_runs
                    else html.escape(run))
            replay = analysis.replay.get(run)
            command = (f"<code>{html.escape(replay)}</code>" if replay else
                       "<span class='na'>no replay command was recorded with this run; "
                       f"<code>gossamer analyze {html.escape(str(analysis.run_dir))}</code> "
                       "checks it again</span>")
            cells = "".join(_cell(example.get(c)) for c in ("seed", "node", "msg", "origin",
                                                             "seq", "detail"))
            rows.append(f"<tr><td>{link}</td>{cells}<td>{command}</td></tr>")
        head = "".join(f"<th>{h}</th>" for h in ("run", "seed", "node", "msg", "origin", "seq",
                                                 "detail", "replay"))
        parts.append(f"<table><tr>{head}</tr>{''.join(rows)}</table>")
    return parts


def write_report(analysis: Analysis, path: str | Path | None = None) -> Path:
    """Write the HTML report (default ``OUT/report.html``) and return its path: the verdict
    per check first, then each violation with its run and the command that replays it, notes
    on the input, the plots (every run, by the sweep's parameters), the runs."""
    target = Path(path) if path is not None else analysis.out_dir / "report.html"
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        "<title>gossamer analysis</title>",
        f"<style>{_CSS}</style></head><body>",
        "<h1>gossamer analysis</h1>",
        *_verdict(analysis),
        f"<p>Trace: <code>{html.escape(str(analysis.run_dir / 'trace'))}</code>, "
        f"{analysis.rows:,} rows, {len(analysis.runs)} runs. Tables (Parquet): "
        f"<code>{html.escape(str(analysis.out_dir))}</code>.</p>",
    ]
    for note in analysis.settings_notes:
        parts.append(f"<p>Settings: {html.escape(note)}.</p>")
    if analysis.left_out:
        parts.append(f"<p class='fail'>{len(analysis.left_out)} trace files were left out "
                     f"(--allow-partial; {html.escape(PARTIAL_NOTE)}):</p><ul>")
        parts += [f"<li><code>{html.escape(str(path))}</code>: {html.escape(problem)}</li>"
                  for path, problem in analysis.left_out]
        parts.append("</ul>")
    for note in analysis.recovery_notes():
        parts.append(f"<p class='fail'>{html.escape(note)}</p>")
    if analysis.runs_without_wall:
        runs = html.escape(", ".join(analysis.runs_without_wall))
        parts.append(f"<p class='fail'>Cross-process latency is not available for runs {runs}: "
                     "their trace files have no <code>wall</code> column.</p>")
    if any(check.examples for check in analysis.checks):
        parts.append("<h2>Violations</h2>")
        parts += _violations(analysis)
    parts.append("<h2>Plots</h2><p>Every run counts: a metric is drawn against the options an "
                 "experiment swept, as the median over the runs of each point (one per seed) "
                 "with bars from the lowest to the highest run. A metric a run has nothing "
                 "for (no lookups, no receipts traced) is left out, and shown as n/a (not "
                 "applicable) in the tables.</p><div class='plots'>")
    for title, image in plots(analysis).items():
        parts.append(f"<figure><img alt='{html.escape(title)}' "
                     f"src='data:image/png;base64,{image}'><figcaption>{html.escape(title)}"
                     "</figcaption></figure>")
    parts.append("</div>")
    parts.append("<h2>Runs</h2>")
    head = "".join(f"<th>{html.escape(label)}</th>" for _, label in _RUN_COLUMNS)
    body = []
    for run in analysis.runs:
        cells = [_cell(run.get(key)) for key, _ in _RUN_COLUMNS]
        body.append(f"<tr id='{_anchor(str(run.get('run')))}'>{''.join(cells)}</tr>")
    parts.append(f"<table><tr>{head}</tr>{''.join(body)}</table>")
    parts.append("<h2>Stored per node</h2>")
    if analysis.stored_nodes:
        parts.append(f"<p>The {len(analysis.stored_nodes)} nodes whose durable store holds "
                     "the most bytes at the end (latest <code>stored</code> row).</p>")
        parts.append(_table([label for _, label in _STORED_COLUMNS],
                            [[node.get(key) for key, _ in _STORED_COLUMNS]
                             for node in analysis.stored_nodes]))
    else:
        parts.append("<p class='na'>no stored rows: the trace does not record what the "
                     "nodes store</p>")
    parts.append("<h2>Lookup hops</h2>")
    if analysis.lookups is None:
        parts.append("<p class='na'>no lookup rows: nothing was looked up (Chord traces "
                     "<code>lookup</code> rows with <code>info.hops</code>)</p>")
    else:
        overall = {**analysis.lookups, "nodes": "all"}
        rows = [*analysis.lookups_by_nodes, overall]
        parts.append(_table([label for _, label in _LOOKUP_COLUMNS],
                            [[row.get(key) for key, _ in _LOOKUP_COLUMNS] for row in rows]))
    parts.append("</body></html>")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("\n".join(parts), encoding="utf-8")
    analysis.report = target
    return target
