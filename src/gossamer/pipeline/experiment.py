"""Experiments: a TOML file expands into runs, and each run is one Spark task.

The pipeline does not know how to simulate anything (it never imports services): the caller
passes ``run_fn(run, out_dir)``, a module-level function Spark can ship to its workers, that
runs one ``RunSpec`` and writes its trace under ``OUT/trace/<run>/``.

File format::

    name = "quickstart"        # run ids start with it
    workload = "fifo"          # which workload runs (the caller knows the names)
    mode = "sim"               # sim | loopback
    seeds = [1, 2]             # every sweep point runs once per seed

    [options]                  # fixed options of the workload
    nodes = 12

    [sweep]                    # each list is one axis; runs = product of axes x seeds
    loss = [0.0, 0.2]

    [analysis]                 # optional: CheckConfig fields for the analysis afterwards
    total_order_layers = []

    [parts.replica]            # optional: more workloads in the same experiment, each with
    workload = "replica"       # its own mode, seeds (default: the file's), [options] and
    [parts.replica.options]    # [sweep]; their run ids start with NAME-LABEL; one analysis
    clients = 8                # covers every run
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import json
import re
import shutil
import threading
import time
import tomllib
import traceback
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pyspark import InheritableThread
from pyspark.sql import SparkSession

from .checks import CheckConfig
from .errors import PipelineError
from .schema import is_closed_parquet

__all__ = [
    "MODES",
    "Experiment",
    "ExperimentPart",
    "RunOutcome",
    "RunSpec",
    "check_experiment_out",
    "load_experiment",
    "run_done",
    "run_experiment",
    "write_run_records",
]

MODES = ("sim", "loopback")
_SAFE_ID = re.compile(r"^[A-Za-z0-9_.\-]+$")
_UNSAFE = re.compile(r"[^A-Za-z0-9_.\-]")
_RESERVED = ("seed", "run")
_TOP_KEYS = {"name", "workload", "mode", "seeds", "options", "sweep", "analysis", "parts"}
_PART_KEYS = {"workload", "mode", "seeds", "options", "sweep"}
Scalar = str | int | float | bool


@dataclasses.dataclass(frozen=True)
class RunSpec:
    """One run: the workload's options for it (fixed and swept), its seed and its id."""

    run: str
    workload: str
    mode: str
    seed: int
    params: Mapping[str, Scalar]
    series: str = ""  # the experiment's name, or NAME-LABEL for a part's runs
    swept: tuple[str, ...] = ()  # the options its series sweeps, in the file's order

    def record(self) -> dict[str, Any]:
        return {"run": self.run, "workload": self.workload, "mode": self.mode,
                "seed": self.seed, "params": dict(self.params), "series": self.series,
                "swept": list(self.swept)}


@dataclasses.dataclass(frozen=True)
class ExperimentPart:
    """One more workload of an experiment (``[parts.LABEL]``): runs named NAME-LABEL-..."""

    label: str
    workload: str
    mode: str
    seeds: tuple[int, ...]
    options: Mapping[str, Scalar]
    sweep: Mapping[str, tuple[Scalar, ...]]


@dataclasses.dataclass(frozen=True)
class Experiment:
    name: str
    workload: str
    mode: str
    seeds: tuple[int, ...]
    options: Mapping[str, Scalar]
    sweep: Mapping[str, tuple[Scalar, ...]]
    checks: CheckConfig
    parts: tuple[ExperimentPart, ...] = ()

    def workloads(self) -> list[tuple[str, str]]:
        """(workload, mode) of the file's runs, then of each part's."""
        return [(self.workload, self.mode), *((p.workload, p.mode) for p in self.parts)]

    def runs(self) -> list[RunSpec]:
        """The cartesian product of the sweep axes, once per seed, with unique ids; then the
        same for each part."""
        runs: list[RunSpec] = []
        seen: set[str] = set()
        groups = [(self.name, self.workload, self.mode, self.seeds, self.options, self.sweep),
                  *((f"{self.name}-{p.label}", p.workload, p.mode, p.seeds, p.options, p.sweep)
                    for p in self.parts)]
        for prefix, workload, mode, seeds, options, sweep in groups:
            axes = list(sweep.items())
            for values in itertools.product(*(points for _, points in axes)):
                point = dict(zip((axis for axis, _ in axes), values, strict=True))
                for seed in seeds:
                    label = "-".join(f"{axis}{_UNSAFE.sub('_', str(value))}"
                                     for axis, value in point.items())
                    run = "-".join(part for part in (prefix, label, f"s{seed}") if part)
                    if run in seen:
                        run = f"{run}-{len(runs)}"
                    seen.add(run)
                    runs.append(RunSpec(run, workload, mode, seed, {**options, **point},
                                        series=prefix, swept=tuple(sweep)))
        return runs


def _scalar(where: str, value: Any) -> Scalar:
    if isinstance(value, str | int | float | bool):
        return value
    raise PipelineError(f"{where}: expected a string, number or boolean, got {value!r}")


def load_experiment(path: str | Path) -> Experiment:
    """Read and validate an experiment file (the workload validates its own options later)."""
    file = Path(path)
    try:
        data = tomllib.loads(file.read_text(encoding="utf-8"))
    except OSError as exc:
        raise PipelineError(f"cannot read experiment file {file}: {exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise PipelineError(f"{file} is not valid TOML: {exc}") from exc
    unknown = set(data) - _TOP_KEYS
    if unknown:
        raise PipelineError(f"{file}: unknown keys {sorted(unknown)}; known: {sorted(_TOP_KEYS)}")
    name = data.get("name", file.stem)
    if not isinstance(name, str) or not _SAFE_ID.match(name):
        raise PipelineError(f"{file}: name must be letters, digits, '_', '.', '-', got {name!r}")
    seeds = _seeds(file, "seeds", data.get("seeds", [1]))
    workload, mode, options, sweep = _group(file, "", data)
    parts_raw = data.get("parts", {})
    if not isinstance(parts_raw, dict):
        raise PipelineError(f"{file}: [parts] must be a table of [parts.LABEL] tables")
    parts = []
    for label, part in parts_raw.items():
        where = f"parts.{label}."
        if not isinstance(part, dict):
            raise PipelineError(f"{file}: [parts.{label}] must be a table")
        if not _SAFE_ID.match(label):
            raise PipelineError(f"{file}: part labels must be letters, digits, '_', '.', '-', "
                                f"got {label!r}")
        unknown = set(part) - _PART_KEYS
        if unknown:
            raise PipelineError(f"{file}: unknown keys {sorted(unknown)} in [parts.{label}]; "
                                f"known: {sorted(_PART_KEYS)}")
        part_seeds = _seeds(file, f"{where}seeds", part["seeds"]) if "seeds" in part else seeds
        part_workload, part_mode, part_options, part_sweep = _group(file, where, part)
        parts.append(ExperimentPart(label, part_workload, part_mode, part_seeds, part_options,
                                    part_sweep))
    return Experiment(name, workload, mode, seeds, options, sweep,
                      _check_config(file, data.get("analysis", {})), tuple(parts))


def _seeds(file: Path, where: str, seeds: Any) -> tuple[int, ...]:
    if (not isinstance(seeds, list) or not seeds
            or not all(isinstance(s, int) and not isinstance(s, bool) for s in seeds)):
        raise PipelineError(f"{file}: {where} must be a non-empty list of integers")
    if len(set(seeds)) != len(seeds):
        raise PipelineError(f"{file}: {where} repeat: {seeds}")
    huge = [s for s in seeds if not -(1 << 63) <= s < 1 << 63]
    if huge:
        raise PipelineError(f"{file}: {where}: {huge[0]} does not fit the trace's 64-bit seed "
                            "column")
    return tuple(seeds)


def _group(
    file: Path, where: str, data: dict[str, Any]
) -> tuple[str, str, dict[str, Scalar], dict[str, tuple[Scalar, ...]]]:
    """workload, mode, [options] and [sweep] of the file (``where`` "") or of a part."""
    workload = data.get("workload")
    if not isinstance(workload, str) or not workload:
        raise PipelineError(f"{file}: {where}workload = \"...\" is required (e.g. \"fifo\")")
    mode = data.get("mode", "sim")
    if mode not in MODES:
        raise PipelineError(f"{file}: {where}mode must be one of {', '.join(MODES)}, "
                            f"got {mode!r}")
    options_raw = data.get("options", {})
    sweep_raw = data.get("sweep", {})
    if not isinstance(options_raw, dict) or not isinstance(sweep_raw, dict):
        raise PipelineError(f"{file}: [{where}options] and [{where}sweep] must be tables")
    options = {key: _scalar(f"{file}: {where}options.{key}", value)
               for key, value in options_raw.items()}
    sweep: dict[str, tuple[Scalar, ...]] = {}
    for axis, points in sweep_raw.items():
        if not isinstance(points, list) or not points:
            raise PipelineError(f"{file}: {where}sweep.{axis} must be a non-empty list")
        sweep[axis] = tuple(_scalar(f"{file}: {where}sweep.{axis}", p) for p in points)
        if len({(type(p), p) for p in sweep[axis]}) != len(points):
            raise PipelineError(f"{file}: {where}sweep.{axis} repeats a value: {points}")
    for key in (*options, *sweep):
        if key in _RESERVED:
            raise PipelineError(f"{file}: {where}{key!r} is set by the experiment itself "
                                "(use seeds = [...]; run ids are generated)")
    both = set(options) & set(sweep)
    if both:
        raise PipelineError(f"{file}: {sorted(both)} both fixed in [{where}options] and swept")
    return workload, mode, options, sweep


def _check_config(file: Path, raw: Any) -> CheckConfig:
    if not isinstance(raw, dict):
        raise PipelineError(f"{file}: [analysis] must be a table")
    try:
        return CheckConfig.from_mapping(raw)
    except PipelineError as exc:
        raise PipelineError(f"{file}: {exc}") from exc


# -- running -----------------------------------------------------------------------------------


def run_done(out_dir: str | Path, run: str) -> bool:
    """A run is done when its trace directory holds Parquet files and all of them are closed."""
    files = list((Path(out_dir) / "trace" / run).glob("*.parquet"))
    return bool(files) and all(is_closed_parquet(f) for f in files)


def write_run_records(out_dir: str | Path, runs: Sequence[RunSpec]) -> None:
    """``OUT/runs/<run>.json``: what each run was asked to do (seed, options), for analysis."""
    folder = Path(out_dir) / "runs"
    folder.mkdir(parents=True, exist_ok=True)
    for spec in runs:
        (folder / f"{spec.run}.json").write_text(json.dumps(spec.record(), sort_keys=True))


@dataclasses.dataclass(frozen=True)
class RunOutcome:
    run: str
    status: str  # done | skipped | failed
    seconds: float
    detail: str
    result: Mapping[str, Any]


RunFunction = Callable[[RunSpec, str], Mapping[str, Any]]


def _run_task(spec: RunSpec, *, run_fn: RunFunction, out_dir: str) -> RunOutcome:
    """Inside a Spark task: clear what an interrupted attempt left, run, report."""
    shutil.rmtree(Path(out_dir) / "trace" / spec.run, ignore_errors=True)
    started = time.perf_counter()
    try:
        result = dict(run_fn(spec, out_dir))
    except Exception as exc:  # one failed run must not take the others down with it
        lines = traceback.format_exception_only(type(exc), exc)
        # a partial trace must neither be analysed nor mistaken for a finished one
        shutil.rmtree(Path(out_dir) / "trace" / spec.run, ignore_errors=True)
        return RunOutcome(spec.run, "failed", time.perf_counter() - started,
                          "".join(lines).strip(), {})
    return RunOutcome(spec.run, "done", time.perf_counter() - started, "", result)


def run_experiment(
    spark: SparkSession,
    runs: Sequence[RunSpec],
    out_dir: str | Path,
    run_fn: RunFunction,
    *,
    progress: Callable[[int, int], None] | None = None,
    poll_seconds: float = 0.5,
    resolved: Callable[[RunSpec], Mapping[str, Any]] | None = None,
) -> list[RunOutcome]:
    """Run every run that is not done yet, one Spark task each; done runs are skipped (one
    done with other options is refused: ``check_experiment_out``, given ``resolved``).

    ``progress(done, total)`` is called from this thread as tasks finish (Spark's status
    tracker counts them). ``out_dir`` must be visible to every executor (shared storage on a
    cluster), since each task writes its trace there.
    """
    if not runs:
        raise PipelineError("the experiment has no runs")
    names = [spec.run for spec in runs]
    if len(set(names)) != len(names):
        raise PipelineError("run ids must be unique")
    check_experiment_out(out_dir, runs, resolved=resolved)
    out = str(Path(out_dir).resolve())
    write_run_records(out, runs)
    skipped = [RunOutcome(s.run, "skipped", 0.0, "trace already complete", {})
               for s in runs if run_done(out, s.run)]
    pending = [s for s in runs if not run_done(out, s.run)]
    total = len(runs)
    if progress is not None:
        progress(len(skipped), total)
    if not pending:
        return skipped
    sc = spark.sparkContext
    group = f"gossamer-experiment-{time.time_ns()}"
    task = functools.partial(_run_task, run_fn=run_fn, out_dir=out)
    collected: list[RunOutcome] = []
    failure: list[BaseException] = []

    def job() -> None:
        sc.setJobGroup(group, f"{len(pending)} runs")
        try:
            collected.extend(sc.parallelize(pending, len(pending)).map(task).collect())
        except BaseException as exc:  # re-raised in the caller's thread below
            failure.append(exc)

    worker: threading.Thread = InheritableThread(target=job, daemon=True)
    worker.start()
    tracker = sc.statusTracker()
    while worker.is_alive():
        worker.join(poll_seconds)
        if progress is not None:
            finished = 0
            for job_id in tracker.getJobIdsForGroup(group):
                info = tracker.getJobInfo(job_id)
                for stage_id in (info.stageIds if info is not None else []):
                    stage = tracker.getStageInfo(stage_id)
                    if stage is not None:
                        finished += stage.numCompletedTasks
            progress(len(skipped) + min(finished, len(pending)), total)
    if failure:
        raise PipelineError(f"the experiment's Spark job failed: {failure[0]}") from failure[0]
    if progress is not None:
        progress(total, total)
    for outcome in collected:
        if outcome.status == "done":
            _record_result(out, outcome)
    by_run = {outcome.run: outcome for outcome in [*skipped, *collected]}
    return [by_run[name] for name in names]


def check_experiment_out(out: str | Path, runs: Sequence[RunSpec], *,
                         resolved: Callable[[RunSpec], Mapping[str, Any]] | None = None
                         ) -> None:
    """``PipelineError`` if ``out`` is a file, or holds a run already done with other options
    than it is asked for now (a changed file run into the same --out): that run would be
    skipped, and its record rewritten to options its trace was not made with. ``resolved``
    (the workload's, when the caller knows it): a run's every option, defaults filled in, so
    an option written out at its default value is no change."""
    if Path(out).exists() and not Path(out).is_dir():
        raise PipelineError(f"--out {out}: a file, not a directory")
    for spec in runs:
        if not run_done(out, spec.run):
            continue
        try:
            stored = json.loads((Path(out) / "runs" / f"{spec.run}.json").read_text())
        except (OSError, ValueError):
            continue  # no record to compare with: the trace stands as it is
        asked = spec.record()
        was, now = stored.get("params", {}), asked["params"]
        if resolved is not None and isinstance(was, dict):
            stored_full = _resolved_or_none(resolved, dataclasses.replace(spec, params=was))
            if stored_full is not None:  # else they no longer make a run: compared as given
                was, now = stored_full, dict(resolved(spec))
        changed = [f"{key} {was.get(key, '(default)')!r} there, {now.get(key, '(default)')!r} "
                   f"here" for key in sorted(set(was) | set(now)) if was.get(key) != now.get(key)]
        changed += [f"{key} {stored.get(key)!r} there, {asked[key]!r} here"
                    for key in ("workload", "mode", "seed") if stored.get(key) != asked[key]]
        if changed:
            raise PipelineError(
                f"{Path(out) / 'trace' / spec.run}: run {spec.run} was done with other options "
                f"({'; '.join(changed)}); a done run is skipped, not run again: give a new "
                "--out, or remove that run's trace to run it anew")


def _resolved_or_none(resolved: Callable[[RunSpec], Mapping[str, Any]],
                      spec: RunSpec) -> dict[str, Any] | None:
    """``spec``'s every option, or None when its options are refused (``ValueError``)."""
    try:
        return dict(resolved(spec))
    except ValueError:
        return None


def _record_result(out_dir: str, outcome: RunOutcome) -> None:
    """Keep what a finished run reported (its workload's own figures: counts, commits/s,
    wall seconds) in its record, ``runs/<run>.json``, beside the options it ran with."""
    path = Path(out_dir) / "runs" / f"{outcome.run}.json"
    record = json.loads(path.read_text())
    record["result"] = dict(outcome.result)
    record["seconds"] = round(outcome.seconds, 3)
    path.write_text(json.dumps(record, sort_keys=True, default=str))
