"""The analysis job: extract the trace, transform it into verdicts and metrics, load the tables.

``analyze(spark, RUN_DIR)`` writes every table as Parquet under ``OUT`` (default
``RUN_DIR/analysis``) and returns the small aggregates the report and the terminal summary
need; everything per event stays in Spark.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ..core.segments import Recovery, recover_segments
from . import metrics
from .checks import CheckConfig, CheckResult, Status, default_checks, evaluate, reliability_summary
from .errors import PipelineError
from .schema import closed_trace_files, load_trace

__all__ = ["Analysis", "AnalysisConfig", "CheckSummary", "analyze", "read_run_params"]

Progress = Callable[[str, int, int], None]
_SLUG = re.compile(r"[^a-z0-9]+")


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

    @property
    def failed(self) -> bool:
        return any(c.status is Status.FAIL for c in self.checks)

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
])


def _slug(name: str) -> str:
    return _SLUG.sub("_", name.lower()).strip("_")


def _write(frame: DataFrame, path: Path) -> DataFrame:
    frame.write.mode("overwrite").parquet(str(path))
    return frame.sparkSession.read.parquet(str(path))


def _as_dicts(frame: DataFrame) -> list[dict[str, Any]]:
    return [row.asDict() for row in frame.collect()]


def analyze(
    spark: SparkSession,
    run_dir: str | Path,
    *,
    out_dir: str | Path | None = None,
    config: AnalysisConfig | None = None,
    progress: Progress | None = None,
) -> Analysis:
    """Run every check and metric over ``RUN_DIR/trace`` and write the tables under ``OUT``."""
    config = config if config is not None else AnalysisConfig()
    run_dir = Path(run_dir)
    out = Path(out_dir) if out_dir is not None else run_dir / "analysis"
    checks = default_checks(config.checks)
    steps = 4 + len(checks)
    done = 0

    def step(what: str) -> None:
        nonlocal done
        if progress is not None:
            progress(what, done, steps)
        done += 1

    step("reading the trace")
    # segments of processes that were killed (or never closed) become their Parquet files
    recovered = [r for r in recover_segments(run_dir) if r.segments or r.live]
    _closed, unfinished = closed_trace_files(run_dir)
    trace = load_trace(spark, run_dir).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        rows = trace.count()
        if rows == 0:
            raise PipelineError(f"the trace under {run_dir / 'trace'} has no rows")
        out.mkdir(parents=True, exist_ok=True)
        recorded = read_run_params(run_dir)
        run_params = spark.createDataFrame(
            [(run, record.get("seed"), json.dumps(record.get("params", {}), sort_keys=True))
             for run, record in sorted(recorded.items())], _PARAMS_SCHEMA)

        violations_dir = out / "violations"
        shutil.rmtree(violations_dir, ignore_errors=True)

        def materialize(name: str, violations: DataFrame) -> DataFrame:
            with_seed = violations.join(run_params.select("run", "seed"), "run", "left")
            return _write(with_seed.withColumn("check", F.lit(name)),
                          violations_dir / f"check={_slug(name)}")

        results = evaluate(trace, checks, materialize=materialize,
                           on_check=lambda name: step(f"check: {name}"))
        summaries = [_summarize(result, config.examples_per_check) for result in results]
        spark.createDataFrame(
            [(s.name, s.status.value, s.reason, s.violations) for s in summaries],
            "check string, status string, reason string, violations long",
        ).write.mode("overwrite").parquet(str(out / "checks"))

        step("metrics: latency, load, convergence, redundancy, lookups")
        layers = config.checks.layers
        samples = _write(metrics.latency_samples(trace, layers=layers), out / "latency")
        _write(metrics.latency_summary(samples), out / "latency_summary")
        cdf = _write(metrics.latency_cdf(samples, points=config.cdf_points), out / "latency_cdf")
        load = _write(metrics.node_load(trace), out / "node_load")
        histogram = metrics.load_histogram(load, bins=config.load_bins)
        times = _write(metrics.convergence_times(trace, layers=layers), out / "convergence")
        per_run_convergence = metrics.convergence_summary(times)
        ops = _write(metrics.messages_per_operation(trace), out / "messages_per_operation")
        rmr = _write(metrics.redundancy(trace, layers=layers), out / "redundancy")
        flow = _write(metrics.throughput(trace, bucket=config.throughput_bucket),
                      out / "throughput")
        reliability = _write(reliability_summary(
            trace, layers=layers,
            exempt_crashed_origins=config.checks.exempt_crashed_origins,
            session_layers=config.checks.session_layers), out / "reliability")

        lookup_samples = metrics.lookup_samples(trace)
        per_run_lookups: DataFrame | None = None
        lookup_overall: dict[str, Any] | None = None
        lookup_groups: list[dict[str, Any]] = []
        hop_rows: list[tuple[int | None, int, int]] = []
        if lookup_samples.limit(1).count():
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
        stored = load.groupBy("run").agg(F.sum("stored").alias("stored_bytes"),
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
                      .join(stored, "run", "left"))
        if per_run_lookups is not None:
            runs_table = runs_table.join(per_run_lookups, "run", "left")
        balance = _write(metrics.topic_balance(trace), out / "topic_balance")
        if balance.limit(1).count():
            runs_table = runs_table.join(balance.drop("nodes"), "run", "left")
        per_layer = _write(metrics.layer_messages_per_publish(trace), out / "layer_messages")
        if per_layer.limit(1).count():
            pivot = (per_layer.groupBy("run").pivot("sender_layer").agg(F.first("per_publish")))
            runs_table = runs_table.join(pivot.select("run", *[
                F.col(f"`{c}`").alias(f"per_publish_{_slug(c)}")
                for c in pivot.columns if c != "run"]), "run", "left")
        runs_table = runs_table.join(run_params, "run", "left").orderBy("run")
        runs = _as_dicts(_write(runs_table, out / "runs").orderBy("run"))

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
        trace.unpersist()
    if progress is not None:
        progress("done", steps, steps)
    return Analysis(
        run_dir=run_dir, out_dir=out, rows=rows, unfinished_files=unfinished,
        checks=summaries, runs=runs, latency_cdf=cdf_rows, load_histogram=hist_rows,
        throughput=flow_rows, stored_nodes=top_stored, lookups=lookup_overall,
        lookups_by_nodes=lookup_groups, lookup_hops=hop_rows, runs_without_wall=no_wall,
        recovered=recovered,
    )


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
