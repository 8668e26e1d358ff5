"""One simulated APSYN session as an experiment or VOPR run: peers changing shared objects
every round while connections are cut, peers leave and rejoin and the server restarts; the
trace goes to a sink, the result says whether every peer ended holding what it may see."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from ...core.errors import ConfigError
from ...core.trace import TraceSink
from .sim import AppSyncWorld, P2PWorld, WorldConfig

__all__ = ["AppSyncRunOptions", "AppSyncRunResult", "run_appsync_sim"]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class AppSyncRunOptions:
    """The fields are what an experiment's [options] (or the VOPR) set."""

    peers: int = 8
    latency: str = "uniform:0.001,0.02"
    min_ms: int = 20
    max_ms: int = 100
    request_chance: float = 0.5
    # each try of a frame on a connection is lost with this chance and sent again after rto
    # seconds, doubling per try (TCP's repair: loss costs time, not data)
    loss: float = 0.0
    rto: float = 0.2
    workload: float = 3.0  # virtual seconds of requests (faults fall within them)
    cuts: int = 0  # connection resets between a random peer and the server
    leaves: int = 0  # peers that crash and rejoin
    server_restart: bool = False  # the server crashes once and recovers on its store
    settle: float = 4.0  # seconds without requests at the end
    drop_updates: bool = False  # peers skip one property's updates (broken on purpose)
    # peers with PeerConfig.eager (and gather 0.5) making their requests at a random moment
    # of the round: some ride in the answer, some in rqsts of their own after it
    eager: bool = False
    # quiet peers (PeerConfig.quiet, eager): a rqst only when they have requests, or every
    # tout / 2 rounds; the rounds are then of a fixed max_ms (the min raised to it)
    quiet: bool = False
    zones: int = 1  # 2: a member zone's CTRL joins the master's (docs/appsync-zones.md)
    zone_faults: int = 0  # link cuts and member CTRL restarts (with two zones)
    p2p: bool = False  # peer-to-peer mode: ``peers`` participants choose the CTRL (Paxos)
    # only the first N peers write their apply rows (None: all): every peer applies every
    # change it sees, so a full trace grows with the square of the peers
    traced_peers: int | None = None
    ctrl_crashes: int = 0  # p2p: crashes of whoever is CTRL (each recovers)
    partitions: int = 0  # p2p: whoever is CTRL cut off from the others for 0.5-2.5 s
    seed: int = 1
    run: str | None = None

    def __post_init__(self) -> None:
        if self.peers < 1 or self.workload <= 0 or self.settle < 0:
            raise ConfigError("need peers >= 1, workload > 0 and settle >= 0")
        if self.cuts < 0 or self.leaves < 0 or not 0 <= self.request_chance <= 1:
            raise ConfigError("need cuts, leaves >= 0 and request_chance in [0, 1]")
        if not 0 <= self.loss < 1 or self.rto <= 0:
            raise ConfigError("need loss in [0, 1) and rto > 0")
        if self.zones not in (1, 2, 3) or self.zone_faults < 0:
            raise ConfigError("need zones 1, 2 or 3 and zone_faults >= 0")
        if self.p2p and (self.peers < 3 or self.zones != 1 or self.loss):
            raise ConfigError("p2p needs 3 or more participants, one zone and no loss knob")
        if self.ctrl_crashes < 0 or self.partitions < 0:
            raise ConfigError("need ctrl_crashes >= 0 and partitions >= 0")


@dataclasses.dataclass(frozen=True, slots=True)
class AppSyncRunResult:
    rounds: int
    converged: bool
    events: int
    wall_seconds: float


def run_appsync_sim(options: AppSyncRunOptions, trace_sink: TraceSink | None = None
                    ) -> AppSyncRunResult:
    if options.p2p:
        return _run_p2p(options, trace_sink)
    started = time.perf_counter()
    world = AppSyncWorld(_world_config(options), trace=trace_sink,
                         run=options.run or f"appsync-s{options.seed}")
    world.run_for(0.2)
    world.faults(options.workload, cuts=options.cuts, leaves=options.leaves,
                 server_restarts=1 if options.server_restart else 0,
                 zone_faults=options.zone_faults)
    world.quiesce(options.settle)
    world.record_states()  # the round check compares every peer's end with its CTRL's
    states = world.visible_states()
    peers = [name for name in states if not name.startswith("=")]
    shared = {str(sorted((k, v) for k, v in states[name].items() if k.startswith("G/")))
              for name in peers}  # the G objects: one master copy, the same in every zone
    converged = len(shared) <= 1 and _as_ctrl_says(states, options.peers)
    server = world.server()
    rounds = 0 if server is None else sum(s.rounds_done for s in server.sessions.values())
    if trace_sink is not None:
        trace_sink.flush()
    return AppSyncRunResult(rounds=rounds, converged=converged,
                            events=world.sim.events,
                            wall_seconds=time.perf_counter() - started)


def _run_p2p(options: AppSyncRunOptions, trace_sink: TraceSink | None) -> AppSyncRunResult:
    """Peer-to-peer mode: the participants' CTRL crashes (``ctrl_crashes``), connections to it
    are cut, other participants crash; converged: every participant holds what the agreed
    CTRL says it may see, and every copy of the log's state is the same."""
    started = time.perf_counter()
    world = P2PWorld(_world_config(options), participants=options.peers, trace=trace_sink,
                     run=options.run or f"appsync-s{options.seed}")
    world.run_for(1.5)  # the first CTRL is chosen
    world.faults(options.workload, ctrl_crashes=options.ctrl_crashes, cuts=options.cuts,
                 leaves=options.leaves, partitions=options.partitions)
    world.quiesce(options.settle + 2.0)  # a CTRL that crashed last is replaced first
    world.record_states()
    states = world.visible_states()
    converged = len(world.replicated_states()) == 1 and _as_ctrl_says(states, options.peers)
    rounds = 0
    ctrl = world.ctrl()
    if ctrl is not None and ctrl in world.participants():
        server = world.participants()[ctrl].server
        rounds = 0 if server is None else sum(s.rounds_done for s in server.sessions.values())
    if trace_sink is not None:
        trace_sink.flush()
    return AppSyncRunResult(rounds=rounds, converged=converged, events=world.sim.events,
                            wall_seconds=time.perf_counter() - started)


def _world_config(options: AppSyncRunOptions) -> WorldConfig:
    return WorldConfig(peers=options.peers, seed=options.seed, latency=options.latency,
                       min_ms=options.min_ms, max_ms=options.max_ms,
                       request_chance=options.request_chance, loss=options.loss,
                       rto=options.rto, drop_updates=options.drop_updates,
                       eager=options.eager, quiet=options.quiet, zones=options.zones,
                       traced_peers=options.traced_peers)


def _as_ctrl_says(states: dict[str, dict[str, Any]], peers: int) -> bool:
    """Every one of the ``peers`` joined and holds what its CTRL says it may see."""
    joined = [name for name in states if not name.startswith("=")]
    return len(joined) == peers and all(states[name] == states.get(f"={name}")
                                        for name in joined)
