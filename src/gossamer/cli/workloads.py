"""The workloads ``gossamer experiment`` can run, by name: one ``RunSpec`` in, one trace out.

The pipeline never imports services, so this (command line) layer hands it ``run_workload``,
a module-level function Spark pickles by reference and calls inside each task.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ..core.errors import ConfigError
from ..core.traceio import ParquetSink, trace_path
from ..pipeline.experiment import RunSpec
from ..runtimes.net.looppolicy import run as run_loop
from ..services.activity.experiment import (
    ActivityRunOptions,
    ActivityRunResult,
    run_activity_sim,
)
from ..services.appsync.experiment import (
    AppSyncRunOptions,
    AppSyncRunResult,
    run_appsync_sim,
)
from ..services.atomic.experiment import (
    AtomicRunOptions,
    AtomicRunResult,
    run_atomic_experiment,
)
from ..services.atomic.loopback import AtomicLoopbackOptions, run_atomic_loopback
from ..services.broadcast import (
    FifoRunOptions,
    FifoRunResult,
    LoopbackOptions,
    run_fifo_loopback,
    run_fifo_sim,
)
from ..services.paxos.experiment import PaxosRunOptions, PaxosRunResult, run_paxos_sim
from ..services.pubsub.chordrun import ChordRunOptions, ChordRunResult, run_chord_sim
from ..services.pubsub.experiment import PubSubRunOptions, PubSubRunResult, run_pubsub_sim
from ..services.replica.experiment import ReplicaRunOptions, ReplicaRunResult, run_replica_sim

__all__ = ["WORKLOADS", "resolved_options", "run_workload", "validate_run"]

#: workload -> mode -> options dataclass (its fields are what [options] and [sweep] may set)
WORKLOADS: Mapping[str, Mapping[str, type[Any]]] = {
    "fifo": {"sim": FifoRunOptions, "loopback": LoopbackOptions},
    "replica": {"sim": ReplicaRunOptions},
    "pubsub": {"sim": PubSubRunOptions},
    "activity": {"sim": ActivityRunOptions},
    "chord": {"sim": ChordRunOptions},
    "paxos": {"sim": PaxosRunOptions},
    "atomic": {"sim": AtomicRunOptions, "loopback": AtomicLoopbackOptions},
    "appsync": {"sim": AppSyncRunOptions},
}

Options = (FifoRunOptions | LoopbackOptions | ReplicaRunOptions | PubSubRunOptions
           | ActivityRunOptions | ChordRunOptions | PaxosRunOptions | AtomicRunOptions
           | AtomicLoopbackOptions | AppSyncRunOptions)


def _options(spec: RunSpec) -> Options:
    modes = WORKLOADS.get(spec.workload)
    if modes is None:
        raise ConfigError(f"unknown workload {spec.workload!r}; known: {', '.join(WORKLOADS)}")
    kind = modes.get(spec.mode)
    if kind is None:
        raise ConfigError(f"workload {spec.workload!r} has no mode {spec.mode!r}; "
                          f"it has {', '.join(modes)}")
    fields = {f.name: f for f in dataclasses.fields(kind)}
    settable = sorted(set(fields) - {"seed", "run"})
    for key, value in spec.params.items():
        if key not in settable:
            raise ConfigError(f"{spec.workload}/{spec.mode} has no option {key!r}; "
                              f"options: {', '.join(settable)}")
        if not _fits(fields[key].default, value):
            raise ConfigError(f"option {key} = {value!r} does not fit its default "
                              f"{fields[key].default!r}")
    options: Options = kind(**spec.params, seed=spec.seed, run=spec.run)
    return options


def _fits(default: Any, value: Any) -> bool:
    """Whether a TOML value can stand where the option's default stands (None: a number)."""
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if isinstance(default, bool):
        return isinstance(value, bool)
    if isinstance(default, int):
        return number and isinstance(value, int)
    if isinstance(default, float) or default is None:
        return number
    return isinstance(value, type(default))


def validate_run(spec: RunSpec) -> None:
    """Raise ``ConfigError`` now, on the driver, for a run whose options cannot work."""
    _options(spec)


def resolved_options(spec: RunSpec) -> dict[str, Any]:
    """Every option the run has, the defaults filled in (``ConfigError`` as ``validate_run``)."""
    options = dataclasses.asdict(_options(spec))
    options.pop("seed", None)
    options.pop("run", None)
    return options


def _result(result: FifoRunResult) -> dict[str, Any]:
    return {"published": result.published, "expected": result.expected_deliveries,
            "delivered": result.actual_deliveries, "reliability": result.reliability,
            "events": result.events, "wall_seconds": result.wall_seconds}


def _replica_result(result: ReplicaRunResult) -> dict[str, Any]:
    return {"requested": result.requested, "made": result.made, "skipped": result.skipped,
            "published": result.published, "converged": result.converged,
            "events": result.events, "wall_seconds": result.wall_seconds}


def _activity_result(result: ActivityRunResult) -> dict[str, Any]:
    return {"requested": result.requested, "published": result.published,
            "skipped": result.skipped, "crashed": len(result.crashed),
            "healed": result.healed, "events": result.events,
            "wall_seconds": result.wall_seconds}


def _pubsub_result(result: PubSubRunResult) -> dict[str, Any]:
    return {"published": result.published, "skipped": result.skipped,
            "expected": result.expected, "delivered": result.delivered,
            "reliability": result.reliability,
            "messages_per_publish": result.messages_per_publish,
            "dissemination_per_publish": result.dissemination_per_publish,
            "events": result.events, "wall_seconds": result.wall_seconds}


def _appsync_result(result: AppSyncRunResult) -> dict[str, Any]:
    return {"rounds": result.rounds, "converged": result.converged, "events": result.events,
            "wall_seconds": result.wall_seconds}


def _chord_result(result: ChordRunResult) -> dict[str, Any]:
    return {"lookups": result.lookups, "completed": result.completed,
            "right_root": result.right_root, "hops_mean": result.hops_mean,
            "keys": result.keys, "events": result.events, "wall_seconds": result.wall_seconds}


def _paxos_result(result: PaxosRunResult) -> dict[str, Any]:
    return {"proposed": result.proposed, "acked": result.acked, "leader": result.leader,
            "events": result.events, "wall_seconds": result.wall_seconds}


def _atomic_result(result: AtomicRunResult) -> dict[str, Any]:
    return dataclasses.asdict(result)


#: options type -> (run it into a trace sink, its result as the run record): the simulated
#: workloads whose trace is one file per run
_SIMULATED: tuple[tuple[type[Any], Callable[[Any, Any], Any], Callable[[Any], dict[str, Any]]],
                  ...] = (
    (ReplicaRunOptions, run_replica_sim, _replica_result),
    (ActivityRunOptions, run_activity_sim, _activity_result),
    (PubSubRunOptions, run_pubsub_sim, _pubsub_result),
    (ChordRunOptions, run_chord_sim, _chord_result),
    (PaxosRunOptions, run_paxos_sim, _paxos_result),
    (AtomicRunOptions, run_atomic_experiment, _atomic_result),
    (AppSyncRunOptions, run_appsync_sim, _appsync_result),
)


def run_workload(spec: RunSpec, out_dir: str) -> dict[str, Any]:
    """Run one experiment run (inside a Spark task) and write its trace under ``out_dir``."""
    options = _options(spec)
    for kind, run, result in _SIMULATED:
        if isinstance(options, kind):
            sink = ParquetSink(trace_path(out_dir, spec.run, "sim"))
            try:
                outcome = run(options, sink)
            finally:
                sink.close()
            return result(outcome)
    if isinstance(options, LoopbackOptions):
        # durable state of an interrupted attempt would make this attempt a recovery
        for stale in (Path(out_dir) / "store").glob(f"*-{spec.run}.sqlite"):
            stale.unlink()
        return _result(run_loop(run_fifo_loopback(options, out_dir=out_dir)))
    if isinstance(options, AtomicLoopbackOptions):
        return dataclasses.asdict(run_loop(run_atomic_loopback(options, out_dir=out_dir)))
    if isinstance(options, FifoRunOptions):
        return _result(run_fifo_sim(options, out_dir=out_dir))
    raise ConfigError(f"no runner for {type(options).__name__}")  # a workload missing above
