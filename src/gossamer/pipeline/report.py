"""The report: one self-contained HTML file with the verdicts, per-run metrics and PNG plots.

Plots are matplotlib figures (no pyplot: no display, no global state) drawn from the aggregates
an ``Analysis`` holds, embedded as base64 so the file can be mailed or archived on its own.
"""

from __future__ import annotations

import base64
import html
import io
import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from matplotlib.axes import Axes
from matplotlib.figure import Figure

from .analysis import Analysis
from .checks import Status

__all__ = ["format_value", "plots", "write_report"]

_MAX_SERIES = 12  # lines per plot before the legend stops being readable

_RUN_COLUMNS = [
    ("run", "run"), ("seed", "seed"), ("nodes", "nodes"),
    ("failure_fraction", "failed"), ("published", "published"),
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
    figure = Figure(figsize=(6.4, 4.0))
    axes = figure.subplots()
    axes.set_title(title)
    axes.set_xlabel(xlabel)
    axes.set_ylabel(ylabel)
    axes.grid(True, alpha=0.3)
    return figure, axes


def _latency_cdf(analysis: Analysis) -> str | None:
    series: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for run, fraction, latency in analysis.latency_cdf:
        series[run].append((latency, fraction))
    if not series:
        return None
    figure, axes = _figure("Latency CDF (publish to delivery)", "latency (s)",
                           "fraction of deliveries")
    for run in sorted(series)[:_MAX_SERIES]:
        points = sorted(series[run])
        axes.plot([p[0] for p in points], [p[1] for p in points], label=run)
    if len(series) > 1:
        axes.legend(fontsize="x-small")
    return _png(figure)


def _messages_against_load(analysis: Analysis) -> str | None:
    points = [(r["offered_load"], r["messages_per_operation"], r["run"]) for r in analysis.runs
              if r.get("offered_load") is not None
              and r.get("messages_per_operation") is not None]
    if not points:
        return None
    figure, axes = _figure("Messages against load", "offered load (publishes / s)",
                           "messages sent per publish")
    axes.scatter([p[0] for p in points], [p[1] for p in points])
    if len(points) <= _MAX_SERIES:
        for x, y, run in points:
            axes.annotate(run, (x, y), fontsize="xx-small", alpha=0.7)
    return _png(figure)


def _load_distribution(analysis: Analysis) -> str | None:
    if not analysis.load_histogram:
        return None
    figure, axes = _figure("Load across nodes (all runs)", "messages sent + received per node",
                           "nodes")
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
    figure, axes = _figure("Reliability against failure fraction",
                           "fraction of nodes crashed or left", "delivered / expected")
    axes.scatter([p[0] for p in points], [p[1] for p in points], alpha=0.5, label="runs")
    xs = sorted(by_fraction)
    axes.plot(xs, [sum(by_fraction[x]) / len(by_fraction[x]) for x in xs], label="mean")
    axes.set_ylim(min(0.0, *(p[1] for p in points)) - 0.02, 1.02)
    axes.legend(fontsize="small")
    return _png(figure)


def _throughput(analysis: Analysis) -> str | None:
    series: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for run, second, per_second in analysis.throughput:
        series[run].append((second, per_second))
    if not series:
        return None
    figure, axes = _figure("Throughput over time", "time (s)", "deliveries per second")
    for run in sorted(series)[:_MAX_SERIES]:
        points = sorted(series[run])
        axes.step([p[0] for p in points], [p[1] for p in points], where="post", label=run)
    if len(series) > 1:
        axes.legend(fontsize="x-small")
    return _png(figure)


def _lookup_hops_by_nodes(analysis: Analysis) -> str | None:
    groups = [g for g in analysis.lookups_by_nodes if g.get("nodes") is not None]
    if not groups:
        return None
    figure, axes = _figure("Lookup hops against node count", "nodes", "hops")
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
    figure, axes = _figure("Lookup hops distribution", "hops", "fraction of lookups")
    for nodes in sorted(series, key=lambda n: (n is None, n or 0))[:_MAX_SERIES]:
        counts = series[nodes]
        total = sum(counts.values())
        xs = sorted(counts)
        axes.plot(xs, [counts[x] / total for x in xs], marker="o",
                  label=f"{nodes} nodes" if nodes is not None else "all")
    axes.legend(fontsize="x-small")
    return _png(figure)


_PLOTS: Sequence[tuple[str, Callable[[Analysis], str | None]]] = (
    ("latency CDF", _latency_cdf),
    ("reliability against failure fraction", _reliability_against_failures),
    ("messages against load", _messages_against_load),
    ("load distribution across nodes", _load_distribution),
    ("throughput over time", _throughput),
    ("lookup hops against node count", _lookup_hops_by_nodes),
    ("lookup hops distribution", _lookup_hop_distribution),
)


def plots(analysis: Analysis) -> dict[str, str]:
    """Plot title -> base64 PNG, for the plots the analysis has data for."""
    made = {}
    for title, draw in _PLOTS:
        image = draw(analysis)
        if image is not None:
            made[title] = image
    return made


def _table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = []
    for row in rows:
        cells = []
        for value in row:
            numeric = isinstance(value, int | float) and not isinstance(value, bool)
            css = ' class="num"' if numeric else ""
            cells.append(f"<td{css}>{html.escape(format_value(value))}</td>")
        body.append(f"<tr>{''.join(cells)}</tr>")
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


_STATUS_CSS = {Status.PASS: "pass", Status.FAIL: "fail", Status.NOT_APPLICABLE: "na",
               Status.ERROR: "fail"}


def write_report(analysis: Analysis, path: str | Path | None = None) -> Path:
    """Write the HTML report (default ``OUT/report.html``) and return its path."""
    target = Path(path) if path is not None else analysis.out_dir / "report.html"
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        "<title>gossamer analysis</title>",
        f"<style>{_CSS}</style></head><body>",
        "<h1>gossamer analysis</h1>",
        f"<p>Trace: <code>{html.escape(str(analysis.run_dir / 'trace'))}</code>, "
        f"{analysis.rows:,} rows, {len(analysis.runs)} runs. Tables (Parquet): "
        f"<code>{html.escape(str(analysis.out_dir))}</code>.</p>",
    ]
    if analysis.unfinished_files:
        parts.append(f"<p class='fail'>{len(analysis.unfinished_files)} unfinished trace files "
                     "(no Parquet footer) were left out.</p>")
    for note in analysis.recovery_notes():
        parts.append(f"<p class='fail'>{html.escape(note)}</p>")
    if analysis.runs_without_wall:
        runs = html.escape(", ".join(analysis.runs_without_wall))
        parts.append(f"<p class='fail'>Cross-process latency is not available for runs {runs}: "
                     "their trace files have no <code>wall</code> column.</p>")
    parts.append("<h2>Checks</h2><table><tr><th>check</th><th>status</th><th>violations</th>"
                 "<th>reason</th></tr>")
    for check in analysis.checks:
        parts.append(
            f"<tr><td>{html.escape(check.name)}</td>"
            f"<td class='{_STATUS_CSS[check.status]}'>{html.escape(check.status.value)}</td>"
            f"<td class='num'>{check.violations:,}</td><td>{html.escape(check.reason)}</td></tr>")
    parts.append("</table>")
    for check in analysis.checks:
        if check.examples:
            parts.append(f"<h3>{html.escape(check.name)}: first {len(check.examples)} of "
                         f"{check.violations:,} violations</h3>")
            columns = ["run", "seed", "node", "msg", "origin", "seq", "detail"]
            parts.append(_table(columns, [[e.get(c) for c in columns] for e in check.examples]))
    parts.append("<h2>Runs</h2>")
    parts.append(_table([label for _, label in _RUN_COLUMNS],
                        [[run.get(key) for key, _ in _RUN_COLUMNS] for run in analysis.runs]))
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
    parts.append("<h2>Plots</h2><div class='plots'>")
    for title, image in plots(analysis).items():
        parts.append(f"<figure><img alt='{html.escape(title)}' "
                     f"src='data:image/png;base64,{image}'><figcaption>{html.escape(title)}"
                     "</figcaption></figure>")
    parts.append("</div></body></html>")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("\n".join(parts), encoding="utf-8")
    analysis.report = target
    return target
