"""A FIFO broadcast group as an application, and the simulated workload ``gossamer sim`` runs.

``BroadcastApp`` wraps the FIFO layer and checks, independently of it, that deliveries from
each origin arrive with consecutive sequence numbers.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import random
import secrets
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, cast

from ..core.env import Env, Process
from ..core.errors import ConfigError, check_fractions
from ..core.ids import NodeId, node_ids
from ..core.messages import Message
from ..core.segments import SegmentSink
from ..core.trace import TraceSink
from ..core.traceio import ParquetSink, trace_path, write_settings
from ..protocols.ordering.fifo import CODEC as FIFO_CODEC
from ..protocols.ordering.fifo import FifoBroadcast, FifoConfig
from ..runtimes.net import NetHost, NetNode, SqliteStore
from ..runtimes.sim import LinkModel, NodeStatus, Scenario, Simulation, parse_latency

__all__ = [
    "BroadcastApp",
    "FifoRunOptions",
    "FifoRunResult",
    "LoopbackOptions",
    "run_fifo_loopback",
    "run_fifo_sim",
]


class BroadcastApp:
    """One group member: the FIFO layer plus an independent per-origin order check."""

    def __init__(self, env: Env, peers: Sequence[NodeId], config: FifoConfig | None = None):
        self.env = env
        self.fifo = FifoBroadcast(env, peers, config=config, on_deliver=self._delivered)
        self.last_seq: dict[NodeId, int] = {}
        self.deliveries = 0
        self.order_violations: list[tuple[NodeId, int, int]] = []

    def start(self) -> None:
        self.fifo.start()

    def stop(self) -> None:
        self.fifo.stop()

    def on_message(self, src: NodeId, msg: Message) -> None:
        self.fifo.on_message(src, msg)

    def broadcast(self, body: Any) -> int:
        return self.fifo.broadcast(body)

    def _delivered(self, origin: NodeId, seq: int, body: Any) -> None:
        self.deliveries += 1
        last = self.last_seq.get(origin)
        if last is not None and seq != last + 1:
            self.order_violations.append((origin, last, seq))
        self.last_seq[origin] = seq


@dataclasses.dataclass(frozen=True, slots=True)
class FifoRunOptions:
    nodes: int = 20
    messages: int = 200
    seed: int = 1
    loss: float = 0.0
    duplicate: float = 0.0
    reorder: float = 0.0
    latency: str = "uniform:0.005,0.05"
    rate: float = 100.0  # broadcasts per virtual second, from round-robin origins
    crash: float = 0.0  # fraction of nodes crashed at once (at crash_at)
    crash_at: float | None = None  # virtual seconds from the start (default: mid-workload)
    recover_after: float | None = None
    # split the group into two random halves at partition_at for partition_for seconds
    partition: bool = False
    partition_at: float = 0.0
    partition_for: float = 2.0
    settle: float = 30.0  # virtual seconds after the last broadcast for repairs to finish
    retransmit: bool = True  # false: NACKs go unanswered (broken on purpose)
    run: str | None = None

    def __post_init__(self) -> None:
        if self.nodes < 1 or self.messages < 0:
            raise ConfigError("need nodes >= 1 and messages >= 0")
        if self.rate <= 0 or self.settle < 0:
            raise ConfigError("need rate > 0 and settle >= 0")
        if self.crash_at is not None and self.crash_at < 0:
            raise ConfigError(f"crash_at must be >= 0, got {self.crash_at}")
        if self.recover_after is not None and not self.recover_after >= 0:
            raise ConfigError(f"recover_after must be >= 0, got {self.recover_after}")
        check_fractions(self, "loss", "duplicate", "reorder", "crash")
        if self.partition_at < 0 or self.partition_for <= 0:
            raise ConfigError("need partition_at >= 0 and partition_for > 0")
        parse_latency(self.latency)

    @property
    def workload_end(self) -> float:
        return self.messages / self.rate


@dataclasses.dataclass
class FifoRunResult:
    run: str
    nodes: int
    alive: int
    requested: int  # broadcasts the workload asked for
    skipped: int  # of those, asked of an origin that was down at the time
    published: int
    expected_deliveries: int
    actual_deliveries: int
    order_violations: int
    events: int
    virtual_seconds: float
    wall_seconds: float
    trace_file: Path | None

    @property
    def reliability(self) -> float:
        if self.expected_deliveries == 0:
            return 1.0
        return self.actual_deliveries / self.expected_deliveries


def run_fifo_sim(
    options: FifoRunOptions,
    *,
    out_dir: str | Path | None = None,
    trace: TraceSink | None = None,
    progress: Callable[[float, float], None] | None = None,
) -> FifoRunResult:
    """Simulate a FIFO broadcast group and count what reached the nodes alive at the end.

    Expected deliveries: every message published, at every node up at the end that was not
    down while it could have been repaired (crash-stop nodes are not expected to deliver).
    """
    link = LinkModel(latency=parse_latency(options.latency), loss=options.loss,
                     duplicate=options.duplicate, reorder=options.reorder)
    scenario = Scenario.of(options.nodes, seed=options.seed, link=link)
    nodes = scenario.nodes
    config = FifoConfig(retransmit=options.retransmit)
    run_id = options.run or f"fifo-n{options.nodes}-m{options.messages}-s{options.seed}"

    interval = 1.0 / options.rate
    skipped = 0
    for i in range(options.messages):
        origin = nodes[i % len(nodes)]

        def publish(sim: Simulation, origin: NodeId = origin, i: int = i) -> None:
            nonlocal skipped
            if sim.status(origin) is NodeStatus.UP:
                sim.call(origin, lambda app: cast(BroadcastApp, app).broadcast({"n": i}))
            else:
                skipped += 1

        scenario.at(i * interval, publish)
    workload_end = options.workload_end
    if options.crash:
        crash_at = workload_end / 2 if options.crash_at is None else options.crash_at
        scenario.crash_fraction(crash_at, options.crash, recover_after=options.recover_after)
    if options.partition:
        shuffled = list(nodes)
        random.Random(f"{options.seed}/fifo-partition").shuffle(shuffled)
        half = len(shuffled) // 2
        scenario.partition(options.partition_at,
                           [sorted(shuffled[:half]), sorted(shuffled[half:])],
                           heal_at=options.partition_at + options.partition_for)

    sink = trace
    file: Path | None = None
    if sink is None and out_dir is not None:
        file = trace_path(out_dir, run_id, "sim")
        sink = ParquetSink(file)
        write_settings(out_dir, run_id, ANALYSIS_SETTINGS)

    def factory(env: Env) -> BroadcastApp:
        return BroadcastApp(env, nodes, config)

    sim = scenario.build(factory, trace=sink, run=run_id)
    until = workload_end + options.settle
    started = time.perf_counter()
    report = (lambda now, _events: progress(now, until)) if progress is not None else None
    sim.run(until=until, progress=report, progress_every=20_000)
    wall = time.perf_counter() - started
    sim.trace_storage()  # each node's stored bytes at the end, for the per-node load
    if sink is not None:
        sink.close()

    apps = {n: cast(BroadcastApp, sim.process(n)) for n in sim.alive()}
    # how far each origin's stream got: its own count if alive, else the most any survivor has
    sent = {
        origin: max((app.fifo.delivered_upto(origin) for app in apps.values()), default=0)
        for origin in nodes
    }
    expected = actual = violations = 0
    for app in apps.values():
        violations += len(app.order_violations)
        for origin, count in sent.items():
            expected += count
            actual += min(count, app.fifo.delivered_upto(origin))
    return FifoRunResult(
        run=run_id,
        nodes=options.nodes,
        alive=len(apps),
        requested=options.messages,
        skipped=skipped,
        published=sum(sent.values()),
        expected_deliveries=expected,
        actual_deliveries=actual,
        order_violations=violations,
        events=sim.events,
        virtual_seconds=sim.now,
        wall_seconds=wall,
        trace_file=file,
    )


@dataclasses.dataclass(frozen=True, slots=True)
class LoopbackOptions:
    """A FIFO group of real nodes on 127.0.0.1 in one process, over TCP or WebSocket."""

    nodes: int = 5
    messages: int = 100
    seed: int = 1
    loss: float = 0.0  # injected by the runtime on each send, seeded
    transport: str = "tcp"
    rate: float = 200.0  # broadcasts per wall second
    timeout: float = 60.0  # wall seconds to wait for every delivery
    run: str | None = None

    def __post_init__(self) -> None:
        if self.nodes < 1 or self.messages < 0:
            raise ConfigError("need nodes >= 1 and messages >= 0")
        if self.transport not in ("tcp", "ws"):
            raise ConfigError(f"transport must be tcp or ws, got {self.transport!r}")
        if self.rate <= 0 or self.timeout <= 0 or not 0 <= self.loss < 1:
            raise ConfigError("need rate > 0, timeout > 0 and 0 <= loss < 1")


#: what a FIFO broadcast run promises, stored beside its trace for ``gossamer analyze``:
#: every member delivers every message (the origin too), in each origin's order
ANALYSIS_SETTINGS: dict[str, Any] = {
    "services": ["fifo"], "replay": None,
    "checks": {"layers": ["fifo"], "fifo_layers": ["fifo"], "own_delivery_layers": ["fifo"]}}


async def run_fifo_loopback(
    options: LoopbackOptions,
    *,
    out_dir: str | Path,
    progress: Callable[[int, int], None] | None = None,
) -> FifoRunResult:
    """Run the group over real sockets until every node delivered everything (or timeout).

    Each node writes its own trace file, ``OUT/trace/<run>/<node>.parquet``, and keeps its
    state in ``OUT/store/<node>.sqlite``.
    """
    ids = node_ids(options.nodes)
    run_id = options.run or (f"fifo-{options.transport}-n{options.nodes}-m{options.messages}"
                             f"-s{options.seed}")
    write_settings(out_dir, run_id, ANALYSIS_SETTINGS)
    stores = Path(out_dir) / "store"
    stores.mkdir(parents=True, exist_ok=True)
    apps: dict[NodeId, BroadcastApp] = {}

    def factory(env: Env) -> BroadcastApp:
        app = apps[env.node] = BroadcastApp(env, ids)
        return app

    expected = {origin: 0 for origin in ids}
    everything = asyncio.Event()

    def check() -> None:
        if all(app.fifo.delivered_upto(origin) >= sent for app in apps.values()
               for origin, sent in expected.items()):
            everything.set()

    # the nodes are this process's own: a key drawn for the run, none to configure (the
    # built-in one would be announced with advice about --cluster-key, which this has not)
    key = secrets.token_urlsafe(24)
    host = NetHost(
        (NetNode(node_id=node, factory=factory, transport=options.transport, run=run_id,
                 codec=FIFO_CODEC, cluster_key=key,
                 trace=SegmentSink(trace_path(out_dir, run_id, node)),
                 store=SqliteStore(stores / f"{node}-{run_id}.sqlite"),
                 loss=options.loss, seed=options.seed)
         for node in ids),
        on_activity=check,
    )
    started = time.perf_counter()
    await host.start()
    try:
        for i in range(options.messages):
            origin = ids[i % len(ids)]
            host.nodes[origin].call(functools.partial(_broadcast, body={"n": i}))
            expected[origin] += 1
            if progress is not None:
                progress(i + 1, options.messages)
            await asyncio.sleep(1.0 / options.rate)  # pacing the workload, not waiting on it
        everything.clear()
        check()
        with contextlib.suppress(TimeoutError):  # what is missing then is reported below
            await asyncio.wait_for(everything.wait(), options.timeout)
    finally:
        await host.stop()
    wall = time.perf_counter() - started
    delivered = sum(min(sent, app.fifo.delivered_upto(origin))
                    for app in apps.values() for origin, sent in expected.items())
    return FifoRunResult(
        run=run_id, nodes=options.nodes, alive=len(apps), requested=options.messages,
        skipped=0, published=sum(expected.values()),
        expected_deliveries=sum(expected.values()) * len(apps), actual_deliveries=delivered,
        order_violations=sum(len(app.order_violations) for app in apps.values()),
        events=0, virtual_seconds=wall, wall_seconds=wall,
        trace_file=Path(out_dir) / "trace" / run_id,
    )


def _broadcast(process: Process, *, body: Any) -> None:
    cast(BroadcastApp, process).broadcast(body)
