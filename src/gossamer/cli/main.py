"""The ``gossamer`` command line: one verb per subcommand, each a small function over the library.

Verbs: ``sim`` (simulate a FIFO broadcast group), ``trace show`` (summarise a trace), ``bench``,
``experiment`` (a sweep of runs as Spark tasks, then analysis), ``analyze`` (checks, metrics,
report over any trace), ``vopr`` (random fault schedules, judged by the same checks).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import re
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from pyspark.sql import SparkSession
from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from .. import __version__
from ..core.argtypes import positive_int as _positive_int
from ..core.argtypes import probability as _probability
from ..core.argtypes import seconds as _seconds
from ..core.errors import ConfigError, GossamerError
from ..core.segments import read_run
from ..core.traceio import summarize
from ..pipeline import (
    Analysis,
    AnalysisConfig,
    PipelineError,
    RunOutcome,
    RunSettings,
    RunSpec,
    analysis_jvm_options,
    analyze,
    check_experiment_out,
    default_master,
    get_spark,
    load_experiment,
    parse_conf,
    print_summary,
    read_run_settings,
    run_experiment,
    trace_dir_bytes,
    write_report,
    write_run_settings,
)
from ..pipeline.analysis import check_out_dir, check_run_dir, refuse_uri
from ..runtimes.net.looppolicy import loop_name
from ..runtimes.net.looppolicy import run as run_loop
from ..services.activity.cli import add_activity_parser
from ..services.appsync.cli import add_appsync_parser
from ..services.atomic.cli import add_atomic_parser
from ..services.broadcast import (
    FifoRunOptions,
    FifoRunResult,
    LoopbackOptions,
    run_fifo_loopback,
    run_fifo_sim,
)
from ..services.paxos.cli import add_paxos_parser
from ..services.pubsub.cli import add_pubsub_parser
from ..services.replica.cli import add_hub_parser
from .sparkargs import error_line, is_spark_failure, refused, spark_arguments, spark_failure
from .vopr import add_vopr_parser
from .workloads import resolved_options, run_workload, validate_run

__all__ = ["build_parser", "main"]

Handler = Callable[[argparse.Namespace, Console], int]


def _cmd_sim(args: argparse.Namespace, console: Console) -> int:
    options = FifoRunOptions(
        nodes=args.nodes, messages=args.messages, seed=args.seed, loss=args.loss,
        duplicate=args.duplicate, reorder=args.reorder, latency=args.latency, rate=args.rate,
        crash=args.crash, recover_after=args.recover_after, settle=args.settle,
        retransmit=not args.no_retransmit,
    )
    options = dataclasses.replace(options, run=_sim_run_name(options))
    console.print(
        f"[bold]gossamer sim[/]: FIFO broadcast, {options.nodes} nodes, {options.messages} "
        f"messages, loss={options.loss} dup={options.duplicate} reorder={options.reorder} "
        f"crash={options.crash} seed={options.seed}"
    )
    with Progress(
        TextColumn("[progress.description]{task.description}"), BarColumn(),
        TextColumn("{task.completed:.1f}/{task.total:.1f} virtual s"), TimeElapsedColumn(),
        console=console, transient=False,
    ) as bar:
        task = bar.add_task("simulating", total=1.0)

        def progress(now: float, until: float) -> None:
            bar.update(task, completed=now, total=until)

        result = run_fifo_sim(options, out_dir=args.out, progress=progress)
    ok = _print_result(result, console)
    if result.trace_file is not None:
        _print_trace_summary(Path(args.out), console)
    return 0 if ok or args.allow_violations else 1


def _loss(text: str) -> float:
    value = _probability(text)
    if value >= 1:
        raise argparse.ArgumentTypeError(f"must be in [0, 1) (at 1 nothing arrives), got {value}")
    return value


#: how ``gossamer sim`` names an option in its run id when it is not the default
_SIM_NAMES = {"loss": "loss", "duplicate": "dup", "reorder": "reorder", "latency": "lat",
              "rate": "rate", "crash": "crash", "recover_after": "recover", "settle": "settle"}


def _sim_run_name(options: FifoRunOptions) -> str:
    """``fifo-nN-mM-sS``, then each option that is not its default (``-loss0.2-dup0.1``):
    runs into one --out that differ in any option are separate runs, not one replacing the
    other's trace (they differed only in loss and had one name)."""
    defaults = FifoRunOptions()
    parts = [f"fifo-n{options.nodes}-m{options.messages}-s{options.seed}"]
    for field, short in _SIM_NAMES.items():
        value = getattr(options, field)
        if value != getattr(defaults, field):
            parts.append(short + re.sub(r"[^A-Za-z0-9.]+", "_", str(value)))
    if not options.retransmit:
        parts.append("noretransmit")
    return "-".join(parts)


def _print_result(result: FifoRunResult, console: Console, *, virtual: bool = True) -> bool:
    table = Table(title=f"run {result.run}", show_header=False)
    table.add_row("nodes (alive at end)", f"{result.nodes} ({result.alive})")
    table.add_row("messages published", f"{result.published} of {result.requested} requested "
                                        f"({result.skipped} skipped: origin down)")
    table.add_row("deliveries (expected)", f"{result.actual_deliveries} "
                                           f"({result.expected_deliveries})")
    table.add_row("reliability", f"{result.reliability:.4%}")
    table.add_row("FIFO order violations", str(result.order_violations))
    if virtual:
        table.add_row("simulator events", f"{result.events:,}")
        table.add_row("virtual / wall seconds", f"{result.virtual_seconds:.2f} / "
                                                f"{result.wall_seconds:.2f}")
    else:
        table.add_row("wall seconds", f"{result.wall_seconds:.2f}")
    table.add_row("trace", str(result.trace_file))
    console.print(table)
    ok = result.reliability == 1.0 and result.order_violations == 0
    console.print("[green]all messages delivered in FIFO order[/]" if ok else
                  "[red]delivery guarantee violated[/]")
    return ok


def _cmd_loopback(args: argparse.Namespace, console: Console) -> int:
    options = LoopbackOptions(nodes=args.nodes, messages=args.messages, seed=args.seed,
                              loss=args.loss, transport=args.transport, rate=args.rate,
                              timeout=args.timeout)
    console.print(
        f"[bold]gossamer loopback[/]: FIFO broadcast, {options.nodes} nodes on 127.0.0.1 over "
        f"{options.transport}, {options.messages} messages, injected loss={options.loss}"
    )
    with Progress(
        TextColumn("[progress.description]{task.description}"), BarColumn(),
        TextColumn("{task.completed}/{task.total} broadcasts"), TimeElapsedColumn(),
        console=console,
    ) as bar:
        task = bar.add_task("broadcasting", total=options.messages)
        result = run_loop(run_fifo_loopback(
            options, out_dir=args.out,
            progress=lambda done, total: bar.update(task, completed=done, total=total)))
    ok = _print_result(result, console, virtual=False)
    _print_trace_summary(Path(args.out), console)
    return 0 if ok or args.allow_violations else 1


def _print_trace_summary(run_dir: Path, console: Console) -> None:
    rows, pending = read_run(run_dir)
    summary = summarize(rows)
    table = Table(title=f"trace {run_dir / 'trace'}")
    table.add_column("layer")
    table.add_column("event")
    table.add_column("rows", justify="right")
    for layer, event, count in summary["by_event"]:
        table.add_row(layer, event, f"{count:,}")
    console.print(table)
    t_min, t_max = summary["t_min"], summary["t_max"]
    span = "empty" if t_min is None else f"{t_min:.3f} .. {t_max:.3f} s"
    console.print(
        f"{summary['rows']:,} rows, {summary['nodes']} nodes, runs {', '.join(summary['runs'])}, "
        f"time span {span}"
    )
    if pending:
        console.print(f"{len(pending)} of the parts read from segment files (processes "
                      "running, or killed before they wrote Parquet)", soft_wrap=True)


def _cmd_trace_show(args: argparse.Namespace, console: Console) -> int:
    _print_trace_summary(Path(args.run_dir), console)
    return 0


def _analysis_steps(spark: SparkSession, run_dir: Path, out: Path | None, config: AnalysisConfig,
                    console: Console, *, overrides: dict[str, Any] | None = None,
                    use_stored_settings: bool = True, allow_partial: bool = False) -> Analysis:
    with Progress(
        SpinnerColumn(), TextColumn("[progress.description]{task.description}"), BarColumn(),
        TextColumn("{task.completed}/{task.total} steps"), TimeElapsedColumn(),
        console=console, transient=True,
    ) as bar:
        task = bar.add_task("analysing", total=1)

        def progress(what: str, done: int, total: int) -> None:
            bar.update(task, description=f"analysing: {what}", completed=done, total=total)

        analysis = analyze(spark, run_dir, out_dir=out, config=config, progress=progress,
                           overrides=overrides, use_stored_settings=use_stored_settings,
                           allow_partial=allow_partial)
        bar.update(task, description="writing the report")
        write_report(analysis)
    print_summary(analysis, console)
    return analysis


def _verdict_code(analysis: Analysis) -> int:
    """0 every check held, 1 a guarantee was violated, 2 some check could not be run."""
    if analysis.errored:
        return 2
    return 1 if analysis.failed else 0


#: analyze options that set a check setting, and the CheckConfig field each sets
_CHECK_FLAGS = {"layer": "layers", "total_order": "total_order_layers",
                "per_key": "total_order_per_key", "revision_field": "revision_field",
                "exempt_crashed_origins": "exempt_crashed_origins", "fifo_layer": "fifo_layers",
                "session_layer": "session_layers", "causal_layer": "causal_layers",
                "own_delivery_layer": "own_delivery_layers"}


def _check_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The check settings given on the command line (they replace the stored ones)."""
    given: dict[str, Any] = {}
    for flag, field in _CHECK_FLAGS.items():
        value = getattr(args, flag)
        if value is None or value is False:
            continue
        given[field] = tuple(v for v in value if v != "") if isinstance(value, list) else value
    if given.get("layers") == ():  # '' is "none" for the lists of what layers promise
        raise PipelineError("--layer needs a layer name (check only these layers)")
    return given


def _stored_bucket(run_dir: Path) -> float | None:
    """The throughput bucket every run's stored settings agree on, if they do."""
    try:
        buckets = {s.throughput_bucket for s in read_run_settings(run_dir).values()}
    except PipelineError:
        return None  # analyze reports the bad file
    return buckets.pop() if len(buckets) == 1 else None


def _cmd_follow(args: argparse.Namespace, console: Console) -> int:
    """``analyze --follow DIR``: check the segments a deployment writes, live, until Ctrl-C."""
    from ..pipeline.live import LIVE_CHECKS, follow

    directory = Path(args.follow)
    if args.run_dir is not None:
        error_line(console, "give either RUN_DIR or --follow DIR, not both")
        return 2
    if not directory.is_dir():
        error_line(console, f"--follow {directory}: no such directory (give the run directory the "
                        "deployment writes its trace segments to)")
        return 2
    try:
        overrides = _check_overrides(args)
        master = args.master or default_master()
        console.print(f"[bold]gossamer analyze --follow[/]: {directory} on Spark "
                      f"{master or 'from spark-submit'}: {', '.join(LIVE_CHECKS)} (a delivery "
                      f"is missing {args.grace:g} s after its publish); Ctrl-C stops",
                      soft_wrap=True)
        spark = get_spark(master, parse_conf(args.conf), quiet=not args.debug)
        live = follow(spark, directory, overrides=overrides, grace=args.grace,
                      use_stored_settings=not args.ignore_stored_settings,
                      on_violation=lambda v: console.print(v.line(), soft_wrap=True,
                                                           markup=False, highlight=False))
    except PipelineError as exc:
        return refused(console, args, str(exc))
    # Ctrl-C sets a flag the loop below looks at each second: pyspark's own handler would
    # cancel the jobs from inside the signal, in the middle of a py4j call (a reentrant read
    # of its socket), and print three tracebacks before the closing line
    interrupted = threading.Event()
    previous = signal.signal(signal.SIGINT, lambda _sig, _frame: interrupted.set())
    try:
        started = False
        while not live.query.awaitTermination(1):  # wakes every second to look at the flag
            if interrupted.is_set():
                raise KeyboardInterrupt
            if not started and live.query.lastProgress is not None:
                started = True  # its first trigger ended: what was on disk is checked
                console.print("checked the segments on disk; following new ones",
                              soft_wrap=True)
    except KeyboardInterrupt:
        live.stop()
        count = len(live.violations)
        console.print(f"stopped: {count:,} violations found in {live.batches:,} batches",
                      soft_wrap=True)
        return 1 if count else 0
    except Exception as exc:  # the query failed (Spark, an unreadable segment, ...)
        if not is_spark_failure(exc):
            raise
        live.stop()
        return refused(console, args, spark_failure(exc, "the live check"))
    finally:
        signal.signal(signal.SIGINT, previous)
    live.stop()
    return 1 if live.violations else 0


def _cmd_analyze(args: argparse.Namespace, console: Console) -> int:
    if args.follow is not None:
        return _cmd_follow(args, console)
    if args.run_dir is None:
        error_line(console, "analyze needs RUN_DIR (or --follow DIR)")
        return 2
    try:
        refuse_uri(args.run_dir)
        run_dir = Path(args.run_dir)
        check_run_dir(run_dir)  # before a JVM starts for nothing
        out = Path(args.out) if args.out else None
        check_out_dir(out or run_dir / "analysis", run_dir)
        overrides = _check_overrides(args)
        bucket = args.bucket if args.bucket is not None else _stored_bucket(run_dir) or 1.0
        config = AnalysisConfig(throughput_bucket=bucket)
        master = args.master or default_master()
        console.print(f"[bold]gossamer analyze[/]: {run_dir / 'trace'} on Spark "
                      f"{master or 'from spark-submit'}", soft_wrap=True)
        # a JVM for the trace's size: a small one's analysis is planning, a large one's work
        spark = get_spark(master, parse_conf(args.conf), quiet=not args.debug,
                          java_options=analysis_jvm_options(trace_dir_bytes(run_dir)))
        analysis = _analysis_steps(spark, run_dir, out, config,
                                   console, overrides=overrides,
                                   use_stored_settings=not args.ignore_stored_settings,
                                   allow_partial=args.allow_partial)
    except PipelineError as exc:
        return refused(console, args, str(exc))
    except Exception as exc:  # the JVM failed (a file Spark could not read, memory, ...)
        if not is_spark_failure(exc):
            raise
        return refused(console, args, spark_failure(exc))
    return _verdict_code(analysis)


def _print_planned_runs(runs: Sequence[RunSpec], console: Console) -> None:
    """One line per run, its id first and whole (what --only takes), then what it runs."""
    console.print(f"{len(runs)} runs (nothing run: --dry-run)")
    for spec in runs:
        options = ", ".join(f"{k}={v}" for k, v in sorted(spec.params.items())) or "defaults"
        console.print(f"{spec.run}  {spec.workload}/{spec.mode} seed {spec.seed}: {options}",
                      soft_wrap=True, markup=False, highlight=False)


def _print_runs(outcomes: Sequence[RunOutcome], console: Console) -> None:
    counts = {status: sum(1 for o in outcomes if o.status == status)
              for status in ("done", "skipped", "failed")}
    console.print(f"runs: {counts['done']} done, {counts['skipped']} skipped (already "
                  f"complete), {counts['failed']} failed")
    for outcome in outcomes:
        if outcome.status == "failed":
            console.print(f"[red]run {outcome.run} failed:[/] {outcome.detail}")


def _cmd_experiment(args: argparse.Namespace, console: Console) -> int:
    if args.out is None and not args.dry_run:
        error_line(console, "experiment needs --out DIR (the run directory), or --dry-run")
        return 2
    out = Path(args.out) if args.out is not None else None
    try:
        experiment = load_experiment(args.file)
        runs = experiment.runs()
        if args.only:
            known = {spec.run for spec in runs}
            unknown = [run for run in args.only if run not in known]
            if unknown:
                raise PipelineError(f"{args.file} has no run {', '.join(unknown)}; its runs: "
                                    f"{', '.join(sorted(known))}")
            runs = [spec for spec in runs if spec.run in args.only]
        for spec in runs:
            try:
                validate_run(spec)
            except ConfigError as exc:
                raise PipelineError(f"{args.file}: run {spec.run}: {exc}") from exc
        if args.dry_run:
            _print_planned_runs(runs, console)
            return 0
        assert out is not None  # checked above
        # before a JVM starts for nothing
        check_experiment_out(out, runs, resolved=resolved_options)
        check_out_dir(out / "analysis", out, what="the experiment's analysis directory")
        master = args.master or default_master()
        console.print(
            f"[bold]gossamer experiment[/] {experiment.name}: workload "
            f"{', '.join(f'{w} ({m})' for w, m in experiment.workloads())}, {len(runs)} runs, "
            f"Spark {master or 'from spark-submit'}, out {out}")
        spark = get_spark(master, parse_conf(args.conf), quiet=not args.debug)
        with Progress(
            TextColumn("[progress.description]{task.description}"), BarColumn(),
            TextColumn("{task.completed}/{task.total} runs"), TimeElapsedColumn(),
            console=console,
        ) as bar:
            task = bar.add_task("running", total=len(runs))
            outcomes = run_experiment(
                spark, runs, out, run_workload, resolved=resolved_options,
                progress=lambda done, total: bar.update(task, completed=done, total=total))
        _print_runs(outcomes, console)
        if all(o.status == "failed" for o in outcomes):
            error_line(console, "every run failed; nothing to analyse")
            return 1
        # each run keeps the settings it is judged by, so `gossamer analyze OUT` agrees
        by_run = {spec.run: spec for spec in runs}
        for outcome in outcomes:
            if outcome.status != "failed":
                spec = by_run[outcome.run]
                write_run_settings(out, spec.run, RunSettings(
                    checks=experiment.checks, services=(spec.workload,),
                    replay=f"gossamer experiment {args.file} --only {spec.run} "
                           f"--out runs/replay/{spec.run}"))
        analysis = _analysis_steps(spark, out, None, AnalysisConfig(checks=experiment.checks),
                                   console)
    except PipelineError as exc:
        return refused(console, args, str(exc))
    except Exception as exc:
        if not is_spark_failure(exc):
            raise
        return refused(console, args, spark_failure(exc))
    failed_runs = any(o.status == "failed" for o in outcomes)
    code = _verdict_code(analysis)
    return max(code, 1) if failed_runs and code == 0 else code


BENCHMARKS = {"sim": "sim_kernel.py"}


def _load_benchmark(name: str) -> ModuleType:
    if name not in BENCHMARKS:
        raise GossamerError(f"unknown benchmark {name!r}; known: {', '.join(sorted(BENCHMARKS))}")
    root = Path(__file__).resolve().parents[3] / "benchmarks"
    path = root / BENCHMARKS[name]
    if not path.is_file():
        raise GossamerError(f"benchmark file {path} not found (run from a source checkout)")
    spec = importlib.util.spec_from_file_location(f"gossamer_bench_{name}", path)
    if spec is None or spec.loader is None:
        raise GossamerError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses in the benchmark look their module up here
    spec.loader.exec_module(module)
    return module


def _cmd_bench(args: argparse.Namespace, console: Console) -> int:
    module = _load_benchmark(args.name)
    code: int = module.main(args.bench_args)
    return code


def _add_group_options(
    parser: argparse.ArgumentParser, *, nodes: int, messages: int, loss_help: str
) -> None:
    """The options every FIFO-group verb shares."""
    parser.add_argument("--nodes", type=_positive_int, default=nodes)
    parser.add_argument("--messages", type=int, default=messages)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--loss", type=_loss, default=0.0, help=loss_help)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gossamer",
        description="Replicate data and messages among peers with a checked delivery guarantee.",
    )
    parser.add_argument("--version", action="version", version=f"gossamer {__version__}")
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", required=True)

    sim = verbs.add_parser("sim", help="simulate a reliable FIFO broadcast group",
                           description="Simulate a FIFO broadcast group under faults, write its "
                                       "trace and print a summary.")
    _add_group_options(sim, nodes=20, messages=200, loss_help="fraction of messages lost")
    sim.add_argument("--duplicate", type=_probability, default=0.0)
    sim.add_argument("--reorder", type=_probability, default=0.0)
    sim.add_argument("--latency", default="uniform:0.005,0.05",
                     help="const:D | uniform:LO,HI | exp:MEAN | lognormal:MEDIAN,SIGMA (seconds)")
    sim.add_argument("--rate", type=float, default=100.0, help="broadcasts per virtual second")
    sim.add_argument("--crash", type=_probability, default=0.0,
                     help="fraction of nodes crashed at once mid-workload")
    sim.add_argument("--recover-after", type=_seconds, default=None,
                     help="crashed nodes recover after this many virtual seconds")
    sim.add_argument("--settle", type=float, default=30.0,
                     help="virtual seconds after the last broadcast for repair")
    sim.add_argument("--no-retransmit", action="store_true",
                     help="disable retransmission (to see the checks catch losses)")
    sim.add_argument("--allow-violations", action="store_true",
                     help="exit 0 even if the guarantee was violated")
    sim.add_argument("--out", default="runs/sim", help="run directory; trace under OUT/trace/")
    sim.set_defaults(handler=_cmd_sim)

    loop = verbs.add_parser("loopback", help="run a FIFO broadcast group over real sockets",
                            description="Run N FIFO broadcast nodes on 127.0.0.1 in this process "
                                        "over TCP or WebSocket, one trace file per node.")
    _add_group_options(loop, nodes=5, messages=100,
                       loss_help="fraction of sends the runtime drops on purpose (seeded)")
    loop.add_argument("--transport", choices=["tcp", "ws"], default="tcp")
    loop.add_argument("--rate", type=float, default=200.0, help="broadcasts per second")
    loop.add_argument("--timeout", type=float, default=60.0,
                      help="seconds to wait for every delivery")
    loop.add_argument("--allow-violations", action="store_true")
    loop.add_argument("--out", default="runs/loopback")
    loop.set_defaults(handler=_cmd_loopback)

    add_hub_parser(verbs)
    add_activity_parser(verbs)
    add_appsync_parser(verbs)
    add_pubsub_parser(verbs)
    add_paxos_parser(verbs)
    add_atomic_parser(verbs)

    trace = verbs.add_parser("trace", help="inspect traces")
    trace_verbs = trace.add_subparsers(dest="trace_verb", metavar="ACTION", required=True)
    show = trace_verbs.add_parser("show", help="rows by layer and event, time span")
    show.add_argument("run_dir")
    show.set_defaults(handler=_cmd_trace_show)

    bench = verbs.add_parser("bench", help="run a benchmark from benchmarks/")
    bench.add_argument("name", choices=sorted(BENCHMARKS))
    bench.add_argument("bench_args", nargs=argparse.REMAINDER,
                       help="arguments passed to the benchmark (e.g. --quick)")
    bench.set_defaults(handler=_cmd_bench)

    experiment = verbs.add_parser(
        "experiment", help="run a parameter sweep as Spark tasks, then analyse it",
        description="Expand FILE.toml (workload, mode, seeds, [options], [sweep]) into runs, "
                    "run each as one Spark task writing OUT/trace/<run>/ (finished runs are "
                    "skipped), then analyse OUT like `gossamer analyze`. Exits 1 when a run "
                    "failed or a check found violations.")
    experiment.add_argument("file", help="experiment file (TOML)")
    experiment.add_argument("--out", default=None,
                            help="run directory (shared by executors); required unless "
                                 "--dry-run")
    experiment.add_argument("--dry-run", action="store_true",
                            help="print the runs the file expands to and their options, after "
                                 "checking them; run nothing")
    experiment.add_argument("--only", action="append", default=None, metavar="RUN",
                            help="run only this run of the file (repeatable): how a failing "
                                 "run is replayed")
    spark_arguments(experiment)
    experiment.set_defaults(handler=_cmd_experiment)

    analyse = verbs.add_parser(
        "analyze", help="check guarantees and compute metrics over a trace with Spark",
        description="Read every trace under RUN_DIR/trace, run all checks and metrics, write "
                    "Parquet tables and report.html under OUT and print a summary. Each run is "
                    "judged by the settings stored with it (trace/<run>/analysis.json, written "
                    "by gossamer experiment and the services' processes); the check options "
                    "below replace those settings for every run. Exits 0 when every check "
                    "held, 1 when a guarantee was violated, 2 when the input could not be "
                    "analysed (a file missing, truncated or corrupt, or a column a check "
                    "needs).")
    analyse.add_argument("run_dir", nargs="?", default=None)
    analyse.add_argument("--follow", default=None, metavar="DIR",
                         help="check the trace segments a live deployment writes under DIR "
                              "as they complete (reliability, duplicates, FIFO, causal "
                              "order), printing each violation; Ctrl-C stops")
    analyse.add_argument("--grace", type=_seconds, default=10.0, metavar="SECONDS",
                         help="with --follow: a delivery not seen this long after its "
                              "publish is reported missing (default 10)")
    analyse.add_argument("--out", default=None, help="output directory (default RUN_DIR/analysis)")
    spark_arguments(analyse)
    analyse.add_argument("--layer", action="append", default=None,
                         help="check only these layers (repeatable; default: all)")
    analyse.add_argument("--total-order", action="append", default=None, metavar="LAYER",
                         help="a layer that promises total order (repeatable)")
    analyse.add_argument("--per-key", action="store_true",
                         help="total order is per key (object), not global")
    analyse.add_argument("--fifo-layer", action="append", default=None, metavar="LAYER",
                         help="a layer that promises FIFO per origin (repeatable; default: "
                              "every checked layer; --fifo-layer '' for none)")
    analyse.add_argument("--session-layer", action="append", default=None, metavar="LAYER",
                         help="a layer with sessions: a node owes what was published in its "
                              "last session only (repeatable)")
    analyse.add_argument("--causal-layer", action="append", default=None, metavar="LAYER",
                         help="a layer that promises causal order (repeatable)")
    analyse.add_argument("--own-delivery-layer", action="append", default=None,
                         metavar="LAYER", help="a layer in which an origin delivers its own "
                                               "messages (repeatable)")
    analyse.add_argument("--revision-field", default=None,
                         help="info field holding an object's revision (default rev)")
    analyse.add_argument("--exempt-crashed-origins", action="store_true",
                         help="do not expect messages of publishers that are down at the end")
    analyse.add_argument("--ignore-stored-settings", action="store_true",
                         help="judge every run by the defaults and the options given, not by "
                              "the settings stored with it")
    analyse.add_argument("--bucket", type=float, default=None,
                         help="seconds per throughput bucket (default: the stored one, or 1)")
    analyse.add_argument("--allow-partial", action="store_true",
                         help="analyse the readable trace files and list those left out "
                              "(truncated, corrupt), instead of exiting 2")
    analyse.set_defaults(handler=_cmd_analyze)

    add_vopr_parser(verbs)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    console = Console()
    try:  # a bad GOSSAMER_LOOP is refused before anything is made (the argument types make
        loop_name()  # directories) or written
    except ConfigError as exc:
        error_line(console, str(exc))
        return 2
    parser = build_parser()
    args = parser.parse_args(argv)
    handler: Handler = args.handler
    try:
        return handler(args, console)
    except GossamerError as exc:
        error_line(console, str(exc))
        return 2
    except KeyboardInterrupt:  # Ctrl-C in a verb that does not stop on it by itself (a
        return 130  # client): its cleanup ran as looppolicy.run cancelled it; no traceback


if __name__ == "__main__":
    sys.exit(main())
