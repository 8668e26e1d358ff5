"""Seed 000 as a simulated workload for ``gossamer experiment``: a hub with its snapshot keeper
and N ``ReplicaClient`` clients writing shared objects under faults.

The run is built the way the replica simulator tests build theirs: one ``hub`` node
(``HubService``, keeper on by default) listening for connections, and clients ``n000``,
``n001``, ... (``ReplicaNode``) connected to it, on the seed's exact wire format. Writes are
spread over the clients round-robin at ``rate`` per virtual second on ``keys`` objects (some
deletes), so concurrent writes to one object conflict and get rebased. Faults are those of
WebSocket connections: ``cuts`` resets per client per virtual second during the workload (what
was in flight is lost; the client reconnects with backoff, resubscribes and repairs); a
fraction of the clients crashing mid-workload and recovering from their durable store; a
fraction going offline, writing into their offline queue, and reconnecting (sync, then rebase);
optionally the hub crashing and recovering, and half of the clients partitioned from the hub
for a while (their connections hold what is written until the partition heals). Everyone is
back and online well before the end, so every replica must converge: the pipeline's
convergence check judges that from the trace.

``repair = false`` switches off what makes the group recover from loss (NACKs, re-NACKs and
the vector announcements): a deliberately broken setting that the analysis must report.
"""

from __future__ import annotations

import dataclasses
import functools
import random
import time
from collections.abc import Callable
from typing import cast

from ...core.backoff import FibonacciBackoff
from ...core.conn import Framing, ListenerSpec
from ...core.env import Env, Process
from ...core.errors import ConfigError
from ...core.ids import NodeId, node_ids
from ...core.trace import TraceSink
from ...protocols.replica import (
    HUB_ID,
    CausalConfig,
    KeeperConfig,
    LinkState,
    ReplicaCodec,
    ReplicaConfig,
)
from ...protocols.replica.hub_service import HubService
from ...protocols.replica.node import ReplicaNode
from ...runtimes.sim import LinkModel, NodeStatus, Scenario, Simulation, parse_latency

__all__ = ["HUB_ADDRESS", "HUB_LISTENER", "ReplicaRunOptions", "ReplicaRunResult",
           "run_replica_sim"]

HUB_PORT = 8080
HUB_ADDRESS = f"{HUB_ID}:{HUB_PORT}"
HUB_LISTENER = ListenerSpec(name="clients", port=HUB_PORT, framing=Framing.WS,
                            max_connections=10_000, send_queue_limit=10_000,
                            handshake_timeout=None)

_NEVER = 1e9  # virtual seconds: a timer this far out never fires within a run
_START = 0.5  # the first write, once the clients' subscribes reached the hub


@dataclasses.dataclass(frozen=True, slots=True)
class ReplicaRunOptions:
    """One simulated seed-000 group; the fields are what an experiment's [options] set."""

    clients: int = 10
    keys: int = 4  # objects k0, k1, ... written by everyone
    writes_per_client: int = 10
    rate: float = 20.0  # writes per virtual second over the whole group
    delete_rate: float = 0.1  # fraction of the writes that delete their object
    seed: int = 1
    cuts: float = 0.0  # connection resets per client per virtual second, during the workload
    latency: str = "uniform:0.005,0.05"
    crash: float = 0.0  # fraction of the clients crashed (staggered) mid-workload
    recover_after: float = 1.0  # crashed clients (and the hub) recover after this long
    offline: float = 0.0  # fraction of the other clients going offline mid-workload
    offline_for: float = 2.0  # they reconnect after this long
    # the hub crashes mid-workload too: its keeper recovers, and delivers again what its last
    # group commit lost (the FIFO check reports those re-deliveries at "hub" as duplicates)
    hub_crash: bool = False
    # half of the clients (seeded) cut off from the hub partition_at seconds after the first
    # write, for partition_for seconds: their connections hold frames until the heal
    partition: bool = False
    partition_at: float = 0.0
    partition_for: float = 2.0
    keeper: bool = True  # the hub keeps snapshots; false: the seed's bare relay
    log_per_origin: int = 1000  # the keeper's log per writer (beyond it: snapshots)
    repair: bool = True  # false: no NACKs, no re-NACKs, no announcements (broken on purpose)
    settle: float = 30.0  # virtual seconds after the last fault or write for repair
    until: float | None = None  # the end of the run (default: workload, faults, settle)
    run: str | None = None

    def __post_init__(self) -> None:
        if self.clients < 1 or self.keys < 1 or self.writes_per_client < 0:
            raise ConfigError("need clients >= 1, keys >= 1 and writes_per_client >= 0")
        if self.rate <= 0 or self.settle < 0:
            raise ConfigError("need rate > 0 and settle >= 0")
        if self.recover_after <= 0 or self.offline_for <= 0:
            raise ConfigError("need recover_after > 0 and offline_for > 0")
        for name in ("crash", "offline", "delete_rate"):
            if not 0 <= getattr(self, name) <= 1:
                raise ConfigError(f"{name} must be in [0, 1], got {getattr(self, name)}")
        if self.cuts < 0:
            raise ConfigError(f"cuts must be >= 0, got {self.cuts}")
        if self.log_per_origin < 1:
            raise ConfigError("log_per_origin must be >= 1")
        if self.until is not None and self.until <= 0:
            raise ConfigError("until must be > 0")
        if self.partition_at < 0 or self.partition_for <= 0:
            raise ConfigError("need partition_at >= 0 and partition_for > 0")
        parse_latency(self.latency)

    @property
    def writes(self) -> int:
        return self.clients * self.writes_per_client

    @property
    def workload_end(self) -> float:
        return _START + self.writes / self.rate

    @property
    def end(self) -> float:
        """The run's end: ``until``, or the workload, the longest fault, then ``settle``."""
        if self.until is not None:
            return self.until
        away = max(self.recover_after, self.offline_for)
        last = self.workload_end + away
        if self.partition:
            last = max(last, _START + self.partition_at + self.partition_for)
        return last + self.settle


@dataclasses.dataclass
class ReplicaRunResult:
    run: str
    clients: int
    requested: int  # writes the workload asked for
    made: int  # of those, made by a client that was up (sent, or queued while offline)
    skipped: int  # asked of a client that was down, or deletes of nothing
    published: int  # data messages the clients sent (rebased writes included)
    crashed: list[NodeId]
    offline: list[NodeId]
    converged: bool  # every client and the keeper hold the same revisions
    events: int
    virtual_seconds: float
    wall_seconds: float


def _causal(repair: bool) -> CausalConfig:
    if repair:
        return CausalConfig()
    return CausalConfig(nack_delay=_NEVER, nack_retry=_NEVER, nack_retry_cap=_NEVER,
                        announce_interval=_NEVER, announce_cap=_NEVER)


def run_replica_sim(
    options: ReplicaRunOptions,
    trace_sink: TraceSink | None = None,
    *,
    progress: Callable[[float, float], None] | None = None,
) -> ReplicaRunResult:
    """Simulate the group and write its trace to ``trace_sink`` (flushed, not closed: the
    caller owns it), ending with each node's ``stored`` row."""
    link = LinkModel(latency=parse_latency(options.latency))
    clients = node_ids(options.clients)
    scenario = Scenario(seed=options.seed, nodes=[HUB_ID, *clients], link=link)
    scenario.listen(HUB_ID, HUB_LISTENER)
    run_id = options.run or f"replica-c{options.clients}-s{options.seed}"
    counts = {"made": 0, "skipped": 0}

    def write(sim: Simulation, *, node: NodeId, key: str, number: int, delete: bool) -> None:
        if sim.status(node) is not NodeStatus.UP:
            counts["skipped"] += 1
            return
        client = cast(ReplicaNode, sim.process(node)).client
        if delete and client.get(key) is None:
            counts["skipped"] += 1  # nothing to delete here
            return
        if delete:
            sim.call(node, lambda _p: client.delete(key))
        else:
            sim.call(node, lambda _p: client.set(key, {"n": number, "by": node}))
        counts["made"] += 1

    choices = random.Random(f"{options.seed}/replica-writes")
    interval = 1.0 / options.rate
    for number in range(options.writes):
        node = clients[number % len(clients)]
        key = f"k{choices.randrange(options.keys)}"
        delete = choices.random() < options.delete_rate
        scenario.at(_START + number * interval,
                    functools.partial(write, node=node, key=key, number=number, delete=delete))

    faults = random.Random(f"{options.seed}/replica-faults")
    span = options.workload_end - _START
    crashed = sorted(faults.sample(clients, round(len(clients) * options.crash)))
    for index, node in enumerate(crashed):
        at = _START + span * (0.3 + 0.4 * index / max(1, len(crashed)))
        scenario.crash(at, node, recover_after=options.recover_after)
    others = [n for n in clients if n not in set(crashed)]
    offline = sorted(faults.sample(others, min(len(others),
                                               round(len(clients) * options.offline))))
    for index, node in enumerate(offline):
        at = _START + span * (0.2 + 0.4 * index / max(1, len(offline)))
        scenario.at(at, functools.partial(_link, node=node, up=False))
        scenario.at(at + options.offline_for, functools.partial(_link, node=node, up=True))
    if options.hub_crash:
        scenario.crash(_START + span * 0.5, HUB_ID, recover_after=options.recover_after)
    if options.cuts > 0:
        for node in clients:
            at = _START + faults.expovariate(options.cuts)
            while at < options.workload_end:
                scenario.cut(at, node, HUB_ID)
                at += faults.expovariate(options.cuts)
    if options.partition:
        cut_off = sorted(faults.sample(clients, max(1, len(clients) // 2)))
        rest = [HUB_ID, *(n for n in clients if n not in set(cut_off))]
        start = _START + options.partition_at
        scenario.partition(start, [cut_off, rest], heal_at=start + options.partition_for)

    replica = ReplicaConfig(causal=_causal(options.repair))
    keeper = (KeeperConfig(replica=replica, log_per_origin=options.log_per_origin)
              if options.keeper else None)

    def factory(env: Env) -> Process:
        if env.node == HUB_ID:
            return HubService(env, keeper=keeper)
        return ReplicaNode(env, hub=HUB_ADDRESS, config=replica,
                           backoff=FibonacciBackoff(unit=0.05, cap=1.0))

    sim = scenario.build(factory, trace=trace_sink, run=run_id, codec=ReplicaCodec())
    until = options.end
    report = (lambda now, _events: progress(now, until)) if progress is not None else None
    started = time.perf_counter()
    sim.run(until=until, progress=report, progress_every=20_000)
    wall = time.perf_counter() - started
    sim.trace_storage()
    if trace_sink is not None:
        trace_sink.flush()

    up = [n for n in clients if sim.status(n) is NodeStatus.UP]
    replicas = [cast(ReplicaNode, sim.process(n)).client for n in up]
    states = [r.revisions() for r in replicas]
    if options.keeper and sim.status(HUB_ID) is NodeStatus.UP:
        hub = cast(HubService, sim.process(HUB_ID))
        if hub.keeper is not None:
            states.append(hub.keeper.replica.revisions())
    converged = (len(up) == len(clients) and all(s == states[0] for s in states)
                 and all(r.link is LinkState.ONLINE and not r.offline_queue for r in replicas))
    return ReplicaRunResult(
        run=run_id, clients=options.clients, requested=options.writes, made=counts["made"],
        skipped=counts["skipped"], published=sum(r.causal.sent for r in replicas),
        crashed=crashed, offline=offline, converged=converged, events=sim.events,
        virtual_seconds=sim.now, wall_seconds=wall)


def _link(sim: Simulation, *, node: NodeId, up: bool) -> None:
    """Take a client offline or back online (it stays a running node meanwhile)."""
    if sim.status(node) is not NodeStatus.UP:
        return
    sim.call(node, lambda p: cast(ReplicaNode, p).reconnect() if up
             else cast(ReplicaNode, p).go_offline())
