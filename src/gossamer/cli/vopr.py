"""``gossamer vopr SERVICE --seeds N | --seed S``: random fault schedules in the simulator,
judged by the pipeline's checks; a failing seed is printed with the command that replays it.

The schedules and the campaign are ``gossamer.pipeline.vopr``; this module runs them with the
workloads of ``gossamer experiment`` and prints the summary.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from pyspark.sql import SparkSession
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from ..core.argtypes import positive_int
from ..pipeline import PipelineError, default_master, get_spark, parse_conf
from ..pipeline.vopr import (
    PLANS,
    SERVICES,
    Campaign,
    Schedule,
    SeedVerdict,
    check_out_dir,
    draw_schedule,
    parse_overrides,
    run_campaign,
)
from .sparkargs import is_spark_failure, refused, spark_arguments, spark_failure
from .workloads import run_workload, validate_run

__all__ = ["add_vopr_parser"]

EXAMPLES = 20  # violations shown per check when one seed is replayed


def add_vopr_parser(
    verbs: argparse._SubParsersAction[argparse.ArgumentParser],
) -> argparse.ArgumentParser:
    vopr = verbs.add_parser(
        "vopr", help="random fault schedules in the simulator, judged by the pipeline's checks",
        description="Draw a fault schedule from each seed (loss, duplication, reordering, "
                    "partitions, crash-recover with power loss of uncommitted writes; "
                    "connection cuts for replica) within the ranges where SERVICE's guarantee "
                    "must hold, run each seed as one Spark task, analyse every run with the "
                    "checks of `gossamer analyze`, and print one row per seed. A failing seed "
                    "is printed with the command that replays it. Exits 1 if any seed "
                    "violated a guarantee (or its run failed) or a check the guarantee rests "
                    "on found nothing to check or could not run (not proven), 2 on bad "
                    "input.")
    vopr.add_argument("service", choices=SERVICES)
    which = vopr.add_mutually_exclusive_group(required=True)
    which.add_argument("--seeds", type=_seed_count, metavar="N",
                       help=f"run seeds 1..N (N at most {MAX_SEEDS:,})")
    which.add_argument("--seed", type=_seed, metavar="S",
                       help="replay seed S alone and show its violations in detail")
    vopr.add_argument("--out", default=None,
                      help="campaign directory (default runs/vopr/SERVICE, or for --seed S "
                           "runs/vopr/replay/RUN, the campaign's left as it was); rewritten "
                           "by each campaign, so it must be new, empty or an earlier "
                           "campaign's")
    vopr.add_argument("--dry-run", action="store_true",
                      help="print the schedules the seeds draw and the ranges; run nothing")
    spark_arguments(vopr)
    # a workload option set on top of every draw: for tests that plant a bug (e.g.
    # retransmit=false); replay commands repeat it
    vopr.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                      help=argparse.SUPPRESS)
    vopr.set_defaults(handler=_cmd_vopr)
    return vopr


#: seeds one campaign runs at most (each is a Spark task and a row of the summary)
MAX_SEEDS = 100_000


def _seed_count(text: str) -> int:
    count = positive_int(text)
    if count > MAX_SEEDS:
        raise argparse.ArgumentTypeError(f"at most {MAX_SEEDS:,} seeds a campaign, got {count:,}"
                                         " (run several campaigns into other --out)")
    return count


def _seed(text: str) -> int:
    """A seed a campaign runs: 1 .. 2**63 - 1 (the trace stores it in 64 bits)."""
    seed = positive_int(text)
    if seed >= 1 << 63:
        raise argparse.ArgumentTypeError(f"must be below 2**63, got {seed}")
    return seed


def _cmd_vopr(args: argparse.Namespace, console: Console) -> int:
    service: str = args.service
    seeds = [args.seed] if args.seed is not None else list(range(1, args.seeds + 1))
    try:
        overrides = parse_overrides(args.override)
        schedules = [draw_schedule(service, seed, overrides=overrides) for seed in seeds]
        # one seed replayed goes where its replay command puts it: the campaign stays
        out = (Path(args.out) if args.out else Path("runs") / "vopr" / service
               if args.seed is None else schedules[0].replay_dir)
        for schedule in schedules:
            validate_run(schedule.spec())
        if args.dry_run:
            _print_ranges(service, console)
            console.print(_schedule_table(schedules))
            return 0
        check_out_dir(out)
        master = args.master or default_master()
        console.print(f"[bold]gossamer vopr {service}[/]: {len(seeds)} seed"
                      f"{'s' if len(seeds) > 1 else ''} ({_seed_span(seeds)}), Spark "
                      f"{master or 'from spark-submit'}, out {out}")
        spark = get_spark(master, parse_conf(args.conf), quiet=not args.debug)
        campaign = _run(spark, schedules, out, console, detail=args.seed is not None)
    except PipelineError as exc:
        return refused(console, args, str(exc))
    except Exception as exc:  # the JVM failed (memory, a file Spark could not read, ...)
        if not is_spark_failure(exc):
            raise
        return refused(console, args, spark_failure(exc, "the campaign"))
    if args.seed is not None:
        _print_detail(campaign, console)
    _print_summary(campaign, console)
    return 1 if campaign.failed or campaign.unproven else 0


def _seed_span(seeds: Sequence[int]) -> str:
    return f"seed {seeds[0]}" if len(seeds) == 1 else f"seeds {seeds[0]}..{seeds[-1]}"


def _run(spark: SparkSession, schedules: Sequence[Schedule], out: Path, console: Console, *,
         detail: bool) -> Campaign:
    with Progress(
        SpinnerColumn(), TextColumn("[progress.description]{task.description}"), BarColumn(),
        TextColumn("{task.completed}/{task.total}"), TimeElapsedColumn(),
        console=console,
    ) as bar:
        runs = bar.add_task("seeds", total=len(schedules))
        checks = bar.add_task("analysis", total=1, start=False)

        def ran(done: int, total: int) -> None:
            bar.update(runs, completed=done, total=total)

        def analysed(what: str, done: int, total: int) -> None:
            bar.start_task(checks)
            bar.update(checks, description=f"analysis: {what}", completed=done, total=total)

        return run_campaign(spark, schedules, out, run_workload,
                            progress=ran, analysis_progress=analysed,
                            examples=EXAMPLES if detail else 1)


# -- printing ----------------------------------------------------------------------------------


def _print_ranges(service: str, console: Console) -> None:
    plan = PLANS[service]
    table = Table(title=f"vopr {service}: what a seed may draw")
    table.add_column("option")
    table.add_column("range")
    table.add_column("why the guarantee must hold there")
    for knob in plan.knobs:
        table.add_row(knob.option, knob.describe(), knob.note)
    console.print(plan.guarantee)
    console.print(table)


def _schedule_table(schedules: Sequence[Schedule]) -> Table:
    table = Table(title="schedules")
    table.add_column("seed", justify="right")
    table.add_column("faults drawn")
    table.add_column("options")
    for schedule in schedules:
        options = " ".join(f"{k}={v}" for k, v in schedule.options.items())
        table.add_row(str(schedule.seed), ", ".join(schedule.faults) or "none", options)
    return table


def _checks_cell(verdict: SeedVerdict, campaign: Campaign) -> str:
    if verdict.error:
        return "[bold red]run failed[/]"
    cells = []
    for name in campaign.applied:
        count = verdict.violations.get(name, 0)
        cells.append(f"[bold red]{name}:{count:,}[/]" if count else f"[green]{name}[/]")
    return " ".join(cells) or "[dim]none applied[/]"


def _print_summary(campaign: Campaign, console: Console) -> None:
    table = Table(title=f"vopr {campaign.service}: {len(campaign.verdicts)} seeds")
    table.add_column("seed", justify="right")
    table.add_column("faults drawn")
    table.add_column("checks")
    table.add_column("violations", justify="right")
    for verdict in campaign.verdicts:
        table.add_row(str(verdict.schedule.seed), escape(", ".join(verdict.schedule.faults))
                      or "[dim]none[/]", _checks_cell(verdict, campaign),
                      "-" if verdict.error else f"{verdict.violation_count:,}")
    console.print(table)
    others = [name for name in campaign.not_applicable if name not in campaign.unproven]
    if others:  # other services' guarantees, or one these seeds did not exercise
        console.print(f"[dim]not applicable to these seeds' traces: {', '.join(others)} (why: "
                      f"gossamer analyze {escape(str(campaign.out_dir))})[/]", soft_wrap=True)
    for name, why in campaign.unproven.items():
        console.print(f"[bold red]not proven:[/] the {campaign.service} guarantee rests on the "
                      f"{name} check, which did not apply: {escape(why)}")
    failed = campaign.failed
    passed = len(campaign.verdicts) - len(failed)
    if not failed and campaign.unproven:
        console.print(f"[bold red]the guarantee is not proven[/]: {passed} of "
                      f"{len(campaign.verdicts)} seeds held the checks that applied; trace and "
                      f"analysis under {campaign.out_dir}")
        return
    if not failed:
        console.print(f"[green]{passed} of {len(campaign.verdicts)} seeds held every "
                      f"guarantee[/]; trace and analysis under {campaign.out_dir}")
        return
    console.print(f"[bold red]{len(failed)} of {len(campaign.verdicts)} seeds failed[/] "
                  f"({passed} passed); trace and analysis under {campaign.out_dir}. "
                  "Replay each with:")
    for verdict in failed:
        console.print(f"  {escape(verdict.schedule.replay_command())}    "
                      f"[dim]# {escape(_first_problem(verdict))}[/]", soft_wrap=True)


def _first_problem(verdict: SeedVerdict) -> str:
    if verdict.error:
        return f"run failed: {verdict.error.splitlines()[-1] if verdict.error else ''}"
    for check, rows in sorted(verdict.examples.items()):
        if rows:
            row = rows[0]
            return (f"{check}: node {row.get('node')} msg {row.get('msg')}: "
                    f"{row.get('detail')}")
    return ", ".join(f"{check} {count}" for check, count in sorted(verdict.violations.items()))


def _print_detail(campaign: Campaign, console: Console) -> None:
    """One seed replayed: its whole schedule, then each failing check's violations."""
    [verdict] = campaign.verdicts
    schedule = verdict.schedule
    table = Table(title=f"seed {schedule.seed}: schedule (run {schedule.run})",
                  show_header=False)
    table.add_row("faults", escape(", ".join(schedule.faults)) or "none")
    for key, value in schedule.options.items():
        table.add_row(key, escape(str(value)))
    console.print(table)
    if verdict.error:
        console.print(f"[bold red]the run failed:[/] {escape(verdict.error)}")
    for check, rows in sorted(verdict.examples.items()):
        found = Table(title=f"{check}: {verdict.violations.get(check, 0):,} violations"
                            f" (first {len(rows)})")
        for column in ("node", "msg", "origin", "seq", "detail"):
            found.add_column(column)
        for row in rows:
            found.add_row(*(escape(str(row.get(c, ""))) for c in
                            ("node", "msg", "origin", "seq", "detail")))
        console.print(found)
    if campaign.analysis is not None:
        console.print(f"tables: {campaign.analysis.out_dir}; for the report and metrics: "
                      f"gossamer analyze {campaign.out_dir}")
