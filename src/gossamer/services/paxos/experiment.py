"""The replicated log as a simulated workload (``gossamer experiment`` / ``gossamer vopr
paxos``): a group of ``replicas`` proposes ``ops`` operations at random live replicas, under
loss, duplication, reordering, a minority cut off for a while, and crash-recover of the leader
(a crash in the simulator is a power loss: what was not committed is gone).

Each replica applies the decided operations to a small state machine that traces them
(``ordered`` rows: layer ``paxos``, ``key`` the group, ``seq`` the operation's position in the
log, ``msg`` its id); a proposer traces ``acked`` when its operation is committed. So the
pipeline's Paxos checks judge the run: one value per slot, one operation per position, and
no acknowledged operation lost.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable
from typing import Any, cast

from ...core.env import Env
from ...core.errors import ConfigError
from ...core.ids import NodeId, node_ids
from ...core.trace import TraceSink
from ...protocols.ordering.paxos import (
    Committed,
    DecidedOp,
    Outcome,
    PaxosConfig,
    PaxosReplica,
    Role,
)
from ...runtimes.sim import LinkModel, Scenario, Simulation, parse_latency

__all__ = ["GROUP", "PaxosRunOptions", "PaxosRunResult", "run_paxos_sim"]

GROUP = "log"
_WARMUP = 1.0  # the founding leader is elected well before this


@dataclasses.dataclass(frozen=True)
class PaxosRunOptions:
    """One simulated group; the fields are what an experiment's [options] set."""

    replicas: int = 3
    ops: int = 60  # proposed in all, each at a random live replica
    rate: float = 20.0  # operations per virtual second
    latency: str = "uniform:0.002,0.02"
    loss: float = 0.0
    duplicate: float = 0.0
    reorder: float = 0.0
    partition: bool = False  # cut a minority off from the others for a while
    partition_at: float = 0.0  # seconds into the proposing
    partition_for: float = 2.0
    leader_crash: bool = False  # crash the leader (power loss), back after recover_after
    crash_at: float = 0.0  # seconds into the proposing
    recover_after: float = 1.0
    added: int = 0  # replicas started and added through the log at add_at
    add_at: float = 0.0  # seconds into the proposing
    remove_leader: bool = False  # the leader removed through the log at remove_at
    remove_at: float = 0.0  # seconds into the proposing
    heartbeat: float = 0.2  # the leader's NOOP period (seconds)
    suspect: float = 0.6  # followers suspect a silent leader after this
    settle: float = 10.0  # after the last proposal or fault
    seed: int = 1
    run: str | None = None

    def __post_init__(self) -> None:
        if not 1 <= self.replicas <= 9 or self.ops < 0 or self.rate <= 0:
            raise ConfigError("need 1 <= replicas <= 9, ops >= 0 and rate > 0")
        if not (0 <= self.loss < 1 and 0 <= self.duplicate <= 1 and 0 <= self.reorder <= 1):
            raise ConfigError("loss in [0, 1), duplicate and reorder in [0, 1]")
        if (self.partition_at < 0 or self.partition_for <= 0 or self.crash_at < 0
                or self.recover_after <= 0 or self.settle < 0):
            raise ConfigError("need partition_at, crash_at, settle >= 0 and partition_for, "
                              "recover_after > 0")
        if not 0 < self.heartbeat < self.suspect:
            raise ConfigError("need 0 < heartbeat < suspect")
        if not 0 <= self.added <= 9 - self.replicas or self.add_at < 0 or self.remove_at < 0:
            raise ConfigError("need 0 <= added <= 9 - replicas, add_at >= 0, remove_at >= 0")


@dataclasses.dataclass(frozen=True)
class PaxosRunResult:
    proposed: int
    acked: int
    leader: NodeId | None  # at the end
    events: int
    wall_seconds: float


class _TracedLog:
    """The state machine of one replica: how many operations it applied; each is traced."""

    def __init__(self, env: Env) -> None:
        self.env = env
        self.count = 0

    def apply(self, op: DecidedOp) -> None:
        self.count += 1
        self.env.trace("ordered", layer=PaxosReplica.LAYER, msg=op.id, key=GROUP,
                       seq=self.count, slot=op.slot)

    def snapshot(self) -> Any:
        return {"count": self.count}

    def restore(self, state: Any) -> None:
        self.count = int(state["count"])


def run_paxos_sim(options: PaxosRunOptions, trace_sink: TraceSink | None = None
                  ) -> PaxosRunResult:
    """Simulate the group and write its trace to ``trace_sink`` (flushed, not closed)."""
    started = time.perf_counter()
    everyone = node_ids(options.replicas + options.added)
    members, spares = everyone[:options.replicas], everyone[options.replicas:]
    config = PaxosConfig(heartbeat_interval=options.heartbeat, suspect_timeout=options.suspect,
                         election_jitter=options.heartbeat, snapshot_every=50, log_retain=20)
    link = LinkModel(latency=parse_latency(options.latency), loss=options.loss,
                     duplicate=options.duplicate, reorder=options.reorder)
    run_id = options.run or f"paxos-r{options.replicas}-s{options.seed}"
    scenario = Scenario(seed=options.seed, nodes=members, link=link)

    def factory(env: Env) -> PaxosReplica:
        app = _TracedLog(env)
        joining = env.node in spares
        return PaxosReplica(env, () if joining else members, joining=joining,
                            contacts=members, config=config, group=GROUP,
                            on_decided=app.apply, snapshot_fn=app.snapshot,
                            restore_fn=app.restore)

    counts = {"proposed": 0, "acked": 0}

    def propose(sim: Simulation) -> None:
        alive = _in_group(sim)
        if not alive:
            return
        node = sim.rng.choice(alive)

        def go(process: Any) -> None:
            replica: PaxosReplica = process
            env = replica.env
            holder: dict[str, str] = {}

            def done(outcome: Outcome) -> None:
                if isinstance(outcome, Committed):
                    counts["acked"] += 1
                    env.trace("acked", layer=PaxosReplica.LAYER, msg=holder.get("id"),
                              key=GROUP, seq=outcome.slot)

            counts["proposed"] += 1
            holder["id"] = replica.propose({"n": counts["proposed"]}, done)

        sim.call(node, go)

    span = options.ops / options.rate
    for i in range(options.ops):
        scenario.at(_WARMUP + i / options.rate, propose)
    last = _WARMUP + span
    if options.partition:
        minority = members[:(options.replicas - 1) // 2] or members[:1]
        rest = [m for m in members if m not in minority]
        start = _WARMUP + options.partition_at
        scenario.partition(start, [minority, rest])
        scenario.heal(start + options.partition_for)
        last = max(last, start + options.partition_for)
    if options.added:
        def add_spares(sim: Simulation) -> None:
            for spare in spares:
                sim.add_node(spare, factory)
                asker = sim.rng.choice(_in_group(sim))
                sim.call(asker, functools.partial(_ask, PaxosReplica.add_replica, spare))

        scenario.at(_WARMUP + options.add_at, add_spares)
    if options.remove_leader:
        def remove_leader(sim: Simulation) -> None:
            leader = _leader(sim)
            if leader is not None:
                sim.call(leader, functools.partial(_ask, PaxosReplica.remove_replica, leader))

        scenario.at(_WARMUP + options.remove_at, remove_leader)
        last = max(last, _WARMUP + options.remove_at)
    if options.leader_crash:
        def crash_leader(sim: Simulation) -> None:
            leader = _leader(sim)
            if leader is not None:
                sim.crash(leader, recover_after=options.recover_after)

        at = _WARMUP + options.crash_at
        scenario.at(at, crash_leader)
        last = max(last, at + options.recover_after)
    sim = scenario.build(factory, trace=trace_sink, run=run_id)
    sim.run(until=last + options.settle)
    leader = _leader(sim)
    if trace_sink is not None:
        trace_sink.flush()
    return PaxosRunResult(counts["proposed"], counts["acked"], leader, sim.events,
                          time.perf_counter() - started)


def _in_group(sim: Simulation) -> list[NodeId]:
    """The live replicas in the replica set (not a spare not yet added, nor one removed)."""
    return [node for node in sorted(sim.alive())
            if isinstance(replica := sim.process(node), PaxosReplica)
            and replica.role is not Role.OUTSIDE]


def _leader(sim: Simulation) -> NodeId | None:
    for node in _in_group(sim):
        if cast(PaxosReplica, sim.process(node)).role is Role.LEADER:
            return node
    return None


def _ask(change: Callable[[PaxosReplica, NodeId], object], node: NodeId,
         process: Any) -> None:
    """``change`` (ADDREPLICA or REMOVEREPLICA) of ``node``, asked of the replica
    ``process``."""
    change(process, node)
