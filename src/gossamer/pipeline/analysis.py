"""The analysis job: extract the trace, transform it into verdicts and metrics, load the tables.

``analyze(spark, RUN_DIR)`` writes every table as Parquet under ``OUT`` (default
``RUN_DIR/analysis``) and returns the small aggregates the report and the terminal summary
need; everything per event stays in Spark.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import re
import shutil
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.pandas.types import to_arrow_schema

from ..core.segments import Recovery, recover_segments
from . import metrics
from .atomic_checks import ATOMIC_LAYER
from .atomic_metrics import ATOMIC_METRICS_SCHEMA, ATOMIC_RUN_COLUMNS, SRM_LAYER, atomic_metrics
from .checks import (
    LAYER_LISTS,
    CheckConfig,
    CheckResult,
    Status,
    default_checks,
    evaluate,
    reliability_summary,
)
from .errors import PipelineError, TraceInputError
from .overlap import Overlap
from .paxos_checks import PAXOS_LAYER, PAXOS_METRICS_SCHEMA, paxos_metrics, paxos_run_summary
from .round_metrics import ROUND_METRICS_SCHEMA, round_metrics, round_run_summary
from .schema import (
    checkpoint,
    inspect_trace_files,
    node_events,
    read_trace,
    release,
    sharing_intermediates,
    table_schema,
    unreadable_files,
)
from .settings import RunSettings, read_run_settings
from .spark import overlap_workers, tuned_for

__all__ = ["Analysis", "AnalysisConfig", "CheckSummary", "analyze", "check_run_dir",
           "read_run_params", "refuse_uri"]

Progress = Callable[[str, int, int], None]
_SLUG = re.compile(r"[^a-z0-9]+")
_URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


@dataclasses.dataclass(frozen=True, kw_only=True)
class AnalysisConfig:
    checks: CheckConfig = dataclasses.field(default_factory=CheckConfig)
    throughput_bucket: float = 1.0  # seconds per throughput bucket
    cdf_points: int = 50  # quantiles per run in the latency CDF
    load_bins: int = 30  # bins of the per-node load histogram
    examples_per_check: int = 10  # violations per check shown in the summary and report
    stored_nodes: int = 20  # nodes storing the most bytes, listed in the report

    def __post_init__(self) -> None:
        if self.throughput_bucket <= 0 or self.cdf_points < 2 or self.load_bins < 1:
            raise PipelineError("need throughput_bucket > 0, cdf_points >= 2, load_bins >= 1")
        if self.examples_per_check < 0 or self.stored_nodes < 0:
            raise PipelineError("examples_per_check and stored_nodes must be >= 0")


@dataclasses.dataclass(frozen=True)
class CheckSummary:
    name: str
    status: Status
    reason: str
    violations: int
    examples: list[dict[str, Any]]


@dataclasses.dataclass
class Analysis:
    """What the driver keeps: verdicts, one row per run, and the series behind the plots."""

    run_dir: Path
    out_dir: Path
    rows: int
    unfinished_files: list[Path]
    checks: list[CheckSummary]
    runs: list[dict[str, Any]]
    latency_cdf: list[tuple[str, float, float]]
    load_histogram: list[tuple[float, float, int]]
    throughput: list[tuple[str, float, float]]
    report: Path | None = None
    #: the nodes storing the most bytes (run, node, stored, stored_items, sent, received)
    stored_nodes: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    #: lookup hops over every run (None: the trace has no lookup rows), and per node count
    lookups: dict[str, Any] | None = None
    lookups_by_nodes: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    #: (nodes, hops, lookups): how many lookups took each number of hops, per node count
    lookup_hops: list[tuple[int | None, int, int]] = dataclasses.field(default_factory=list)
    #: runs with rows that have no ``wall`` (trace files older than the column): their
    #: cross-process latency and convergence are not available
    runs_without_wall: list[str] = dataclasses.field(default_factory=list)
    #: trace segments compacted before reading (parts whose process was killed), and parts
    #: left out because a live process still writes them
    recovered: list[Recovery] = dataclasses.field(default_factory=list)
    #: trace files left out (``allow_partial``) and why: (path, problem)
    left_out: list[tuple[Path, str]] = dataclasses.field(default_factory=list)
    #: which settings judged which runs, in words
    settings_notes: list[str] = dataclasses.field(default_factory=list)
    #: run -> the command that makes it again (from its stored settings)
    replay: dict[str, str] = dataclasses.field(default_factory=dict)

    @property
    def failed(self) -> bool:
        return any(c.status is Status.FAIL for c in self.checks)

    @property
    def errored(self) -> bool:
        """Some check could not be run on this trace (a column it needs is missing)."""
        return any(c.status is Status.ERROR for c in self.checks)

    def recovery_notes(self) -> list[str]:
        """One line per trace part recovered from segments, torn tail, or live part left
        out."""
        lines = []
        recovered = [r for r in self.recovered if r.segments]
        if recovered:
            rows = sum(r.rows for r in recovered)
            lines.append(f"recovered {rows:,} rows from the trace segments of {len(recovered)} "
                         "parts whose process did not close them (killed?): "
                         + ", ".join(f"{r.parquet.stem} {r.rows:,}" for r in recovered))
        for recovery in self.recovered:
            for path, size in recovery.torn:
                lines.append(f"torn tail: the last {size:,} bytes of {path} were not a whole "
                             "record and were skipped")
            if recovery.live:
                lines.append(f"{recovery.parquet.stem}: a live process still writes this "
                             "part; its rows are left out (analyse again once it exits)")
        return lines


def read_run_params(run_dir: str | Path) -> dict[str, dict[str, Any]]:
    """Run id -> what ``gossamer experiment`` recorded about it (``RUN_DIR/runs/*.json``)."""
    params: dict[str, dict[str, Any]] = {}
    for path in sorted((Path(run_dir) / "runs").glob("*.json")):
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise PipelineError(f"unreadable run record {path}: {exc}") from exc
        if isinstance(record, dict) and isinstance(record.get("run"), str):
            params[record["run"]] = record
    return params


_PARAMS_SCHEMA = T.StructType([
    T.StructField("run", T.StringType()),
    T.StructField("seed", T.LongType()),
    T.StructField("params", T.StringType()),
    T.StructField("series", T.StringType()),  # experiment name, or NAME-PART
    T.StructField("swept", T.StringType()),  # JSON list of the options its series sweeps
])


_CHECKS_SCHEMA = table_schema("check string, status string, reason string, violations long")


def _slug(name: str) -> str:
    return _SLUG.sub("_", name.lower()).strip("_")


def _write(frame: DataFrame, path: Path) -> DataFrame:
    """``frame`` written as Parquet at ``path``, and read back from there (computed once).
    The read is given the schema, which spares the job that would infer it from the files."""
    # absolute: the JVM resolves a relative path against its own directory, which is not
    # this process's once it changed directory (a Spark session outlives a chdir)
    where = str(path.absolute())
    frame.write.mode("overwrite").parquet(where)
    return frame.sparkSession.read.schema(frame.schema).parquet(where)


def _write_if(present: bool, build: Callable[[], DataFrame], schema: T.StructType,
              path: Path) -> DataFrame | None:
    """``_write(build(), path)`` if the trace has the rows the table is made of; else an empty
    table of ``schema`` (the table's declared columns) at ``path`` and None: its plan is not
    even built (a metric's plan over a trace of another service took 0.2-0.5 s to build)."""
    if present:
        return _write(build(), path)
    _write_local([], schema, path)
    return None


def _write_local(rows: Sequence[Sequence[Any]], schema: T.StructType, path: Path) -> None:
    """``rows`` (tuples in ``schema``'s order, few: the driver has them) as a Parquet table at
    ``path`` in the layout Spark writes, by the driver itself: a Spark write of a few rows is
    a job and a commit of its own (0.15-0.25 s each on a small analysis)."""
    arrow = to_arrow_schema(schema)
    table = pa.Table.from_pylist([dict(zip(arrow.names, row, strict=True)) for row in rows],
                                 schema=arrow)
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    pq.write_table(table, path / "part-00000.parquet")


def _as_dicts(frame: DataFrame) -> list[dict[str, Any]]:
    return [row.asDict() for row in frame.collect()]


@dataclasses.dataclass(frozen=True)
class _Group:
    """Runs judged by one check config: ``runs`` None means every run not in another group."""

    checks: CheckConfig
    runs: tuple[str, ...] | None
    trace: DataFrame

    def apply(self, fn: Callable[[DataFrame, CheckConfig], DataFrame]) -> DataFrame:
        return fn(self.trace, self.checks)


def _groups(trace: DataFrame, runs: Sequence[str], stored: Mapping[str, RunSettings],
            default: CheckConfig) -> list[_Group]:
    """The runs split by the check config that judges them: their stored settings', else
    ``default``. One group needs no filter."""
    by_config: dict[CheckConfig, list[str]] = {}
    for run in runs:
        by_config.setdefault(stored[run].checks if run in stored else default, []).append(run)
    if len(by_config) <= 1:
        config = next(iter(by_config), default)
        return [_Group(config, None, trace)]
    return [_Group(config, tuple(members), trace.filter(F.col("run").isin(members)))
            for config, members in by_config.items()]


def _union(frames: Sequence[DataFrame]) -> DataFrame:
    return functools.reduce(lambda a, b: a.unionByName(b), frames)


def _merge(name: str, results: Sequence[tuple[_Group, CheckResult]]) -> tuple[Status, str]:
    """One verdict from the verdicts of the groups: an error or a failure anywhere decides;
    a pass anywhere beats "not applicable"."""
    for status in (Status.ERROR, Status.FAIL, Status.PASS):
        if any(r.status is status for _, r in results):
            break
    else:
        status = Status.NOT_APPLICABLE
    if status in (Status.FAIL, Status.PASS):
        count = sum(r.violation_count for _, r in results)
        return status, f"{count:,} violations" if count else "no violations"
    reasons = []
    for _group, result in results:
        if result.status is status and result.reason not in reasons:
            reasons.append(result.reason)
    return status, "; ".join(reasons)


def analyze(
    spark: SparkSession,
    run_dir: str | Path,
    *,
    out_dir: str | Path | None = None,
    config: AnalysisConfig | None = None,
    progress: Progress | None = None,
    use_stored_settings: bool = True,
    overrides: Mapping[str, Any] | None = None,
    allow_partial: bool = False,
) -> Analysis:
    """Run every check and metric over ``RUN_DIR/trace`` and write the tables under ``OUT``.

    Each run is judged by the check settings stored beside its trace (``analysis.json``),
    unless ``use_stored_settings`` is False; runs without stored settings by ``config``.
    ``overrides`` (``CheckConfig`` fields) replace those fields for every run.
    A trace file that is truncated, corrupt or not Parquet is an error (``TraceInputError``,
    naming it), unless ``allow_partial``: then the readable files are analysed and the others
    listed in ``Analysis.left_out``.
    """
    config = config if config is not None else AnalysisConfig()
    refuse_uri(str(run_dir))
    run_dir = Path(run_dir)
    out = Path(out_dir) if out_dir is not None else run_dir / "analysis"
    steps = 4 + len(default_checks(config.checks))
    done = 0

    def step(what: str) -> None:
        nonlocal done
        if progress is not None:
            progress(what, done, steps)
        done += 1

    step("reading the trace")
    check_run_dir(run_dir)
    check_out_dir(out, run_dir)
    stored = read_run_settings(run_dir) if use_stored_settings else {}
    if overrides:
        try:
            stored = {run: dataclasses.replace(settings, checks=_overridden(
                settings.checks, overrides)) for run, settings in stored.items()}
            config = dataclasses.replace(config, checks=_overridden(config.checks, overrides))
        except TypeError as exc:
            raise PipelineError(f"unknown check setting: {exc}") from exc
    # segments of processes that were killed (or never closed) become their Parquet files
    recovered = [r for r in recover_segments(run_dir) if r.segments or r.live]
    files = inspect_trace_files(run_dir)
    left_out = list(files.problems)
    if files.problems and not allow_partial:
        raise TraceInputError(_first_problem(files.problems))
    try:
        with _scope(spark, files.rows) as overlap:
            return _analyze(spark, run_dir, out, config, step, steps, progress, stored,
                            files.good, files.absent_columns, recovered, left_out,
                            overrides or {}, overlap)
    except PipelineError:
        raise
    except Exception as exc:  # a file Spark could not read (corrupt pages): find it, name it
        bad = unreadable_files(files.good)
        if not bad:
            raise
        if not allow_partial:
            raise TraceInputError(_first_problem(bad)) from exc
        good = [f for f in files.good if f not in {path for path, _ in bad}]
        with _scope(spark, files.rows) as overlap:
            return _analyze(spark, run_dir, out, config, step, steps, progress, stored, good,
                            files.absent_columns, recovered, left_out + bad, overrides or {},
                            overlap)


@contextlib.contextmanager
def _scope(spark: SparkSession, trace_rows: int) -> Iterator[Overlap]:
    """One analysis of a trace of ``trace_rows`` rows: its intermediates shared (and freed at
    its end), the session's settings tuned for its size, and the threads that start its
    independent actions."""
    with sharing_intermediates(release_at_end=True), tuned_for(spark, trace_rows), \
            Overlap(overlap_workers(trace_rows)) as overlap:
        yield overlap


def check_run_dir(run_dir: Path) -> None:
    """``TraceInputError`` unless ``run_dir`` is a directory with a ``trace/`` one."""
    if run_dir.exists() and not run_dir.is_dir():
        raise TraceInputError(f"{run_dir}: a file, not a run directory (one holds its trace "
                              "files under trace/<run>/)")
    if not run_dir.is_dir():
        raise TraceInputError(f"{run_dir}: no such directory")
    if not (run_dir / "trace").is_dir():
        raise TraceInputError(f"{run_dir / 'trace'}: no such directory (a run directory holds "
                              "its trace files under trace/<run>/)")


#: what an analysis writes into its output directory (tables, the report), and its marker
OUTPUT_MARKER = ".gossamer-analysis"
OUTPUT_NAMES = frozenset({
    OUTPUT_MARKER, "report.html", "checks", "violations", "runs", "latency", "node_load",
    "convergence", "messages_per_operation", "redundancy", "throughput", "reliability",
    "latency_summary", "latency_cdf", "lookups", "lookup_hops", "topic_balance", "appsync",
    "paxos", "atomic", "layer_messages"})


def check_out_dir(out: Path, run_dir: Path, *, what: str = "--out") -> None:
    """``PipelineError`` unless ``out`` may take an analysis's tables: the analysis replaces
    folders named like its tables (``runs/``, ``checks/``...), so ``out`` must be new, empty or
    an earlier analysis's output, and must neither hold the run directory nor lie in its
    trace. (``analyze RUN --out .`` replaced ``./runs``, an experiment's run records.)"""
    where, home = out.resolve(), run_dir.resolve()
    if where == home or where in home.parents:
        raise PipelineError(f"{what} {out}: holds the run directory {run_dir} (the analysis "
                            "writes folders such as runs/ and checks/ there); give a directory "
                            f"of its own, e.g. the default {run_dir / 'analysis'}")
    if where == home / "trace" or (home / "trace") in where.parents:
        raise PipelineError(f"{what} {out}: inside the run's trace directory; give a directory "
                            f"of its own, e.g. the default {run_dir / 'analysis'}")
    if out.exists() and not out.is_dir():
        raise PipelineError(f"{what} {out}: a file, not a directory")
    if not out.is_dir():
        try:  # now, not once Spark ran: a dangling link, a path no one may write
            out.mkdir(parents=True)
        except OSError as exc:
            raise PipelineError(f"{what} {out}: cannot be made ({exc.strerror or exc})"
                                ) from None
        return
    marked = (out / OUTPUT_MARKER).exists()
    foreign = sorted(entry.name for entry in out.iterdir()
                     if (entry.name not in OUTPUT_NAMES and not marked)
                     or (entry.name in OUTPUT_NAMES and not _written_by_analysis(entry)))
    if foreign:
        shown = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3
                                          else "")
        raise PipelineError(f"{what} {out}: holds files an analysis did not write ({shown}); "
                            "give a new or empty directory, or an earlier analysis's output")


def _written_by_analysis(entry: Path) -> bool:
    """Whether ``entry`` (named like an output) can be what an analysis wrote: the report or
    marker file, or a folder of Parquet parts (an experiment's ``runs/`` holds JSON)."""
    if not entry.is_dir():
        return entry.name in (OUTPUT_MARKER, "report.html")
    return all(p.is_dir() or p.suffix in (".parquet", ".crc") or p.name.startswith("_")
               for p in entry.rglob("*"))


def refuse_uri(run_dir: str) -> None:
    """A run directory given as a URI (``hdfs://``, ``s3a://``) is refused, saying what to do:
    the driver inspects every trace file as a local path before Spark reads it. (Call it
    before the text becomes a ``Path``, which folds ``//`` into ``/``.)"""
    if _URI.match(run_dir):
        raise TraceInputError(f"{run_dir}: a URI is not read directly (the driver inspects every "
                              "trace file first); mount the store and give the mount point "
                              "(README: On a cluster)")


def _first_problem(problems: Sequence[tuple[Path, str]]) -> str:
    path, problem = problems[0]
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    return (f"{path}: {problem}{more}; --allow-partial analyses the readable files and lists "
            "the rest")


def _analyze(
    spark: SparkSession,
    run_dir: Path,
    out: Path,
    config: AnalysisConfig,
    step: Callable[[str], None],
    steps: int,
    progress: Progress | None,
    stored: Mapping[str, RunSettings],
    files: Sequence[Path],
    absent_columns: Mapping[str, Sequence[Path]],
    recovered: list[Recovery],
    left_out: list[tuple[Path, str]],
    overrides: Mapping[str, Any],
    overlap: Overlap,
) -> Analysis:
    if not files:
        raise TraceInputError(f"no readable trace files (*.parquet) under {run_dir / 'trace'}")
    # computed once and its lineage cut (see ``sharing_intermediates``)
    trace = read_trace(spark, files)
    held: list[DataFrame] = []  # each check's violations, in memory until the end
    held_checkpoints: list[DataFrame] = []  # freed at the end, with the trace
    try:
        # rows per run, and which (layer, event) pairs occur: the metrics of a service the
        # trace has no rows of are not computed (each would be a job finding nothing)
        per_run: dict[str, int] = {}
        present: set[tuple[str, str]] = set()
        for r in (node_events(trace).groupBy("run", "layer", "event")
                  .agg(F.sum("rows").alias("count")).collect()):
            per_run[r["run"]] = per_run.get(r["run"], 0) + int(r["count"])
            present.add((r["layer"], r["event"]))
        layers = {layer for layer, _ in present}
        rows = sum(per_run.values())
        if rows == 0:
            raise TraceInputError(f"the trace under {run_dir / 'trace'} has no rows")
        runs = sorted(r for r in per_run if r is not None)
        groups = _groups(trace, runs, stored, config.checks)
        _refuse_absent_layers(overrides, layers)
        notes = _settings_notes(runs, stored, config.checks, overrides)
        out.mkdir(parents=True, exist_ok=True)
        (out / OUTPUT_MARKER).write_text("an analysis's output: gossamer analyze replaces "
                                         "what it wrote here\n")
        recorded = read_run_params(run_dir)
        run_params = spark.createDataFrame(
            [(run, record.get("seed"), json.dumps(record.get("params", {}), sort_keys=True),
              record.get("series"),
              json.dumps(record["swept"]) if isinstance(record.get("swept"), list) else None)
             for run, record in sorted(recorded.items())], _PARAMS_SCHEMA)

        violations_dir = out / "violations"
        shutil.rmtree(violations_dir, ignore_errors=True)
        per_check: dict[str, list[tuple[_Group, CheckResult]]] = {}
        names: list[str] = []
        absent = {column: files for column, files in absent_columns.items() if column != "wall"}
        for index, group in enumerate(groups):

            def materialize(name: str, violations: DataFrame) -> DataFrame:
                # kept in memory: counted, then written only if there are any, and the
                # summary's examples come from here (no table of a passing check to write
                # and read back: a clean analysis writes no violations at all)
                with_seed = violations.join(run_params.select("run", "seed"), "run", "left")
                kept = with_seed.withColumn("check", F.lit(name)).persist(
                    StorageLevel.MEMORY_AND_DISK)
                held.append(kept)
                return kept

            results = evaluate(group.trace, default_checks(group.checks,
                                                           complete=not left_out),
                               materialize=materialize, absent_columns=absent,
                               on_check=(lambda name: step(f"check: {name}")) if index == 0
                               else None, overlap=overlap)
            for result in results:
                if result.violations is not None and result.violation_count:
                    # one folder per check, its groups appended; every row names its check
                    # (no check=... folders: a reader taking them for partitions would find
                    # the column twice, pandas and pyarrow refused the table)
                    result.violations.write.mode("append").parquet(
                        str((violations_dir / _slug(result.name)).absolute()))
                if result.name not in per_check:
                    names.append(result.name)
                per_check.setdefault(result.name, []).append((group, result))
        summaries = []
        for name in names:
            status, reason = _merge(name, per_check[name])
            found = [r.violations for _, r in per_check[name] if r.violations is not None]
            merged = CheckResult(name, status, reason,
                                 sum(r.violation_count for _, r in per_check[name]),
                                 _union(found) if found else None)
            summaries.append(_summarize(merged, config.examples_per_check))
        if all(summary.status is Status.NOT_APPLICABLE for summary in summaries):
            _refuse_absent_layers({}, layers, [group.checks for group in groups])
        _write_local([(s.name, s.status.value, s.reason, s.violations) for s in summaries],
                     _CHECKS_SCHEMA, out / "checks")

        step("metrics: latency, load, convergence, redundancy, lookups")

        def per_group(fn: Callable[[DataFrame, CheckConfig], DataFrame]) -> DataFrame:
            return _union([group.apply(fn) for group in groups])

        # the publish-to-delivery join, once for latency and convergence
        delays = checkpoint(per_group(
            lambda t, c: metrics.delivery_delays(t, layers=c.layers)))
        held_checkpoints.append(delays)

        def write(build: Callable[[], DataFrame], name: str) -> Future[DataFrame]:
            return overlap.submit(lambda: _write(build(), out / name))

        # independent tables, started at once on the overlap's threads (the samples' summary
        # and CDF once the samples are written)
        samples_written = write(lambda: metrics.latency_of(delays), "latency")
        load_written = write(lambda: metrics.node_load(trace), "node_load")
        times_written = write(lambda: metrics.convergence_of(delays), "convergence")
        ops_written = write(lambda: metrics.messages_per_operation(trace),
                            "messages_per_operation")
        rmr_written = write(lambda: per_group(
            lambda t, c: metrics.redundancy(t, layers=c.layers)), "redundancy")
        flow_written = write(lambda: metrics.throughput(trace, bucket=config.throughput_bucket),
                             "throughput")
        reliability_written = write(lambda: per_group(lambda t, c: reliability_summary(
            t, layers=c.layers, exempt_crashed_origins=c.exempt_crashed_origins,
            session_layers=c.session_layers)), "reliability")
        samples = samples_written.result()
        summary_written = write(lambda: metrics.latency_summary(samples), "latency_summary")
        cdf_written = write(lambda: metrics.latency_cdf(samples, points=config.cdf_points),
                            "latency_cdf")
        load, times, ops = load_written.result(), times_written.result(), ops_written.result()
        rmr, flow = rmr_written.result(), flow_written.result()
        reliability, cdf = reliability_written.result(), cdf_written.result()
        summary_written.result()
        histogram = metrics.load_histogram(load, bins=config.load_bins)
        per_run_convergence = metrics.convergence_summary(times)
        lookup_samples = metrics.lookup_samples(trace)
        per_run_lookups: DataFrame | None = None
        lookup_overall: dict[str, Any] | None = None
        lookup_groups: list[dict[str, Any]] = []
        hop_rows: list[tuple[int | None, int, int]] = []
        if ("chord", "lookup") in present and lookup_samples.limit(1).count():
            lookups = _write(lookup_samples.join(F.broadcast(_run_nodes(trace, run_params)),
                                                 "run", "left"), out / "lookups")
            per_run_lookups = metrics.lookup_summary(lookups).select(
                "run", "lookups", "hops_mean", "hops_p99", "hops_max")
            by_nodes = _write(metrics.lookup_summary(lookups, by=("nodes",)),
                              out / "lookup_hops")
            overall = metrics.lookup_summary(lookups, by=()).first()
            lookup_overall = overall.asDict() if overall is not None else None
            lookup_groups = _as_dicts(by_nodes.orderBy("nodes"))
            hop_rows = [(r["nodes"], int(r["hops"]), int(r["lookups"])) for r in
                        metrics.lookup_hop_counts(lookups, by=("nodes",))
                        .orderBy("nodes", "hops").collect()]

        step("per-run summary")
        per_run_latency = metrics.latency_summary(samples, by=("run",)).drop(
            "deliveries", "latency_mean")
        per_run_reliability = reliability.groupBy("run").agg(
            F.sum("published").alias("published"), F.sum("expected").alias("expected"),
            F.sum("delivered").alias("delivered"),
        ).withColumn("reliability", F.col("delivered") / F.col("expected"))
        peak = flow.groupBy("run").agg(F.max("per_second").alias("peak_throughput"))
        stored_bytes = load.groupBy("run").agg(F.sum("stored").alias("stored_bytes"),
                                         F.max("stored").alias("stored_max"))
        runs_table = (metrics.run_overview(trace)
                      .join(metrics.failure_fraction(trace), "run", "left")
                      .join(per_run_reliability, "run", "left")
                      .join(per_run_latency, "run", "left")
                      .join(ops.select("run", "messages", "messages_per_operation",
                                       "bytes_per_operation"), "run", "left")
                      .join(rmr, "run", "left")
                      .join(per_run_convergence.select("run", "convergence_p95",
                                                       "convergence_max"), "run", "left")
                      .join(peak, "run", "left")
                      .join(stored_bytes, "run", "left"))
        if per_run_lookups is not None:
            runs_table = runs_table.join(per_run_lookups, "run", "left")
        balance = _write_if(("pubsub", "owner") in present,
                            lambda: metrics.topic_balance(trace), metrics.TOPIC_BALANCE_SCHEMA,
                            out / "topic_balance")
        if balance is not None and balance.limit(1).count():
            runs_table = runs_table.join(balance.drop("nodes"), "run", "left")
        rounds = _write_if(("appsync", "round") in present, lambda: round_metrics(trace),
                           ROUND_METRICS_SCHEMA, out / "appsync")  # per session
        if rounds is not None and rounds.limit(1).count():
            runs_table = runs_table.join(round_run_summary(rounds), "run", "left")
        paxos = _write_if(PAXOS_LAYER in layers, lambda: paxos_metrics(trace),
                          PAXOS_METRICS_SCHEMA, out / "paxos")  # per group
        if paxos is not None and paxos.limit(1).count():
            runs_table = runs_table.join(paxos_run_summary(paxos), "run", "left")
        atomic = _write_if(bool({ATOMIC_LAYER, SRM_LAYER} & layers),
                           lambda: atomic_metrics(trace), ATOMIC_METRICS_SCHEMA, out / "atomic")
        if atomic is not None and atomic.limit(1).count():
            runs_table = runs_table.join(atomic.select("run", *ATOMIC_RUN_COLUMNS), "run",
                                         "left")
        per_layer = _write_if(("pubsub", "publish") in present,
                              lambda: metrics.layer_messages_per_publish(trace),
                              metrics.LAYER_MESSAGES_SCHEMA, out / "layer_messages")
        if per_layer is not None and per_layer.limit(1).count():
            pivot = (per_layer.groupBy("run").pivot("sender_layer").agg(F.first("per_publish")))
            runs_table = runs_table.join(pivot.select("run", *[
                F.col(f"`{c}`").alias(f"per_publish_{_slug(c)}")
                for c in pivot.columns if c != "run"]), "run", "left")
        runs_table = runs_table.join(run_params, "run", "left").orderBy("run")
        run_rows = _as_dicts(_write(runs_table, out / "runs").orderBy("run"))

        step("collecting plot series")
        cdf_rows = [(r["run"], float(r["fraction"]), float(r["latency"]))
                    for r in cdf.orderBy("run", "fraction").collect()
                    if r["latency"] is not None]
        hist_rows = [(float(r["low"]), float(r["high"]), int(r["nodes"]))
                     for r in histogram.collect()]
        flow_rows = [(r["run"], float(r["second"]), float(r["per_second"]))
                     for r in flow.orderBy("run", "second").collect()]
        no_wall = [r["run"] for r in metrics.runs_without_wall(trace).orderBy("run").collect()]
        top_stored = _as_dicts(
            load.filter(F.col("stored").isNotNull())
            .orderBy(F.col("stored").desc(), "run", "node").limit(config.stored_nodes)
            .select("run", "node", "stored", "stored_items", "sent", "received"))
    finally:
        for frame in held:
            frame.unpersist()
        for frame in held_checkpoints:
            release(frame)
        release(trace)
    if progress is not None:
        progress("done", steps, steps)
    return Analysis(
        run_dir=run_dir, out_dir=out, rows=rows,
        unfinished_files=[path for path, _ in left_out],
        checks=summaries, runs=run_rows, latency_cdf=cdf_rows, load_histogram=hist_rows,
        throughput=flow_rows, stored_nodes=top_stored, lookups=lookup_overall,
        lookups_by_nodes=lookup_groups, lookup_hops=hop_rows, runs_without_wall=no_wall,
        recovered=recovered, left_out=left_out, settings_notes=notes,
        replay={run: settings.replay for run, settings in stored.items()
                if settings.replay is not None and run in per_run},
    )




#: the command line's flag for each layer list (``gossamer analyze``)
_FLAGS = {"layers": "--layer", "total_order_layers": "--total-order",
          "fifo_layers": "--fifo-layer", "session_layers": "--session-layer",
          "causal_layers": "--causal-layer", "own_delivery_layers": "--own-delivery-layer"}


def _overridden(checks: CheckConfig, overrides: Mapping[str, Any]) -> CheckConfig:
    """``checks`` with the command line's settings in place; a ``layers`` given there also
    narrows the other layer lists it does not set (``--layer L`` checks only L: stored
    ``fifo_layers = ["fifo"]`` went on judging fifo under ``--layer store``)."""
    layers = overrides.get("layers")
    narrowed: dict[str, Any] = {}
    if layers is not None:
        for field in LAYER_LISTS:
            value = getattr(checks, field)
            if field != "layers" and field not in overrides and value is not None:
                narrowed[field] = tuple(layer for layer in value if layer in layers)
    return dataclasses.replace(checks, **narrowed, **overrides)


def _refuse_absent_layers(overrides: Mapping[str, Any], layers: set[str],
                          configs: Sequence[CheckConfig] = ()) -> None:
    """``PipelineError`` for a layer no row of the trace is in, where that is a mistake, not a
    verdict: one named on the command line (``overrides``), or, once every check came out "not
    applicable", a ``layers`` list of ``configs`` none of whose layers occur (a misspelt
    ``--layer fiffo`` said every guarantee held). A settings list naming several services'
    layers is fine: a run has one service, and its own checks (Paxos, rounds) do not use it."""
    known = ", ".join(sorted(layers))
    for field, value in overrides.items():
        if field in LAYER_LISTS and value is not None:
            missing = [layer for layer in value if layer not in layers]
            if missing:
                flag = _FLAGS.get(field)
                given = f"{flag} {missing[0]} ({field})" if flag else f"{field} {missing[0]}"
                raise PipelineError(f"{given}: no row of the trace is in that layer (its "
                                    f"layers: {known})")
    for checks in configs:
        if checks.layers is not None and not set(checks.layers) & layers:
            raise PipelineError(f"layers {', '.join(checks.layers)}: no row of the trace is in "
                                f"any of them, so nothing was checked (its layers: {known})")


def _settings_notes(runs: Sequence[str], stored: Mapping[str, RunSettings],
                    default: CheckConfig, overrides: Mapping[str, Any]) -> list[str]:
    """Which settings judged which runs, in words."""
    with_settings = [run for run in runs if run in stored]
    without = [run for run in runs if run not in stored]
    notes = []
    if overrides:
        notes.append("the command line set " + ", ".join(
            f"{key} = {value!r}" for key, value in sorted(overrides.items())) + " for every run")
    if with_settings:
        configs = {stored[run].checks for run in with_settings}
        notes.append(f"{len(with_settings)} of {len(runs)} runs judged by the settings stored "
                     f"with them ({len(configs)} distinct)")
    if without:
        shown = ", ".join(without[:5]) + (f" and {len(without) - 5} more" if len(without) > 5
                                          else "")
        where = ("the defaults (every layer; FIFO, causal order and own delivery wherever the "
                 "trace shows them)" if default == CheckConfig() else "the given settings")
        notes.append(f"runs without stored settings ({shown}) judged by {where}")
    return notes


def _run_nodes(trace: DataFrame, run_params: DataFrame) -> DataFrame:
    """(run, nodes): the node count a run was given (its ``nodes`` option), else the members
    its trace shows."""
    given = run_params.select(
        "run", F.get_json_object(F.col("params"), "$.nodes").cast("long").alias("given"))
    members = metrics.failure_fraction(trace).select("run", F.col("nodes").alias("members"))
    return (members.join(given, "run", "left")
            .select("run", F.coalesce(F.col("given"), F.col("members")).alias("nodes")))


def _summarize(result: CheckResult, examples: int) -> CheckSummary:
    shown: list[dict[str, Any]] = []
    if result.violations is not None and result.violation_count and examples:
        first = result.violations.orderBy("run", "node", "origin", "seq", "msg").limit(examples)
        shown = [{k: v for k, v in row.asDict().items() if k != "check"}
                 for row in first.collect()]
    return CheckSummary(result.name, result.status, result.reason, result.violation_count,
                        shown)
