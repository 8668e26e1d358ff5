"""Seed 003 as a simulated workload for ``gossamer experiment``: a tree of activity servers,
scripted clients publishing activities, servers crashing and coming back.

Servers ``s0``, ``s1``, ... form a binary tree (``s<i>`` joins ``s<(i-1)//2>``, ``s0`` is the
root); clients ``c000``, ``c001``, ... log in from ``start`` on, each trying the servers in a
rotated order (so they spread over the tree and move to the next one when theirs goes away).
A fraction ``registered`` of them registers its own username first and logs in with it.
Activities are spread over the clients round-robin at ``rate`` per virtual second.
``crash`` is the fraction of the servers (never the root) that crash, one after the other,
each coming back after ``recover_after``.

What seed 003 promises, and how the trace says so (layer ``activity``): a client gets what was
published while it was logged in, as long as it stays on that connection (a client traces
``join`` on LOGIN_SUCCESS and ``leave`` on REDIRECT or a lost connection). Across a server
crash nothing is promised: a subtree cut off from the rest misses what the rest publishes
meanwhile, and what was in flight through the crashed server is gone. So every logged-in
client and every server traces ``leave`` (reason ``fault``) ``fault_margin`` before each
crash, and ``join`` (reason ``healed``) ``heal`` seconds after the server came back. The
analysis then runs with ``session_layers = ["activity"]`` (see ``CheckConfig``): a node must
deliver what was published in its last session only (up from publish to the end), and a FIFO
gap is allowed only across a membership change.

``drop_broadcasts = true`` makes the root relay no activity at all: a deliberately broken
setting the analysis must report.
"""

from __future__ import annotations

import dataclasses
import functools
import random
import time
from collections.abc import Callable
from typing import cast

from ...core.conn import ListenerSpec
from ...core.env import Env, Process
from ...core.errors import ConfigError
from ...core.ids import NodeId
from ...core.trace import TraceSink
from ...protocols.activity import (
    ActivityClientNode,
    ActivityServer,
    ClientScript,
    ServerConfig,
    TreeState,
)
from ...runtimes.sim import LinkModel, NodeStatus, Scenario, Simulation, parse_latency

__all__ = ["ActivityRunOptions", "ActivityRunResult", "run_activity_sim"]

_SECRET = "gossamer-activity-network"
PORT = 3780  # every simulated server listens on (its node id, PORT)
LISTENER = ListenerSpec(name="activity", port=PORT, reserved_for_peers=16)


@dataclasses.dataclass(frozen=True, slots=True)
class ActivityRunOptions:
    """One simulated seed-003 network; the fields are what an experiment's [options] set."""

    servers: int = 5
    clients: int = 15
    activities_per_client: int = 10
    rate: float = 10.0  # activities per virtual second over all clients
    latency: str = "uniform:0.002,0.03"  # links reorder; connections put the order back
    crash: float = 0.0  # fraction of the servers (never the root) crashing, one after another
    recover_after: float = 2.0  # a crashed server comes back after this long
    heal: float = 5.0  # after a server came back, the tree has healed (new sessions start)
    fault_margin: float = 0.5  # sessions end this long before a crash (in-flight activities)
    registered: float = 0.0  # fraction of the clients that register a username first
    start: float = 2.0  # clients log in once the tree has formed
    drop_broadcasts: bool = False  # the root relays no activity (broken on purpose)
    settle: float = 5.0  # virtual seconds after the last activity or fault
    until: float | None = None  # the end of the run (default: workload, faults, settle)
    seed: int = 1
    run: str | None = None

    def __post_init__(self) -> None:
        if self.servers < 1 or self.clients < 1 or self.activities_per_client < 0:
            raise ConfigError("need servers >= 1, clients >= 1, activities_per_client >= 0")
        if self.rate <= 0 or self.settle < 0 or self.start <= 0:
            raise ConfigError("need rate > 0, start > 0 and settle >= 0")
        if self.recover_after <= 0 or self.heal < 0 or self.fault_margin < 0:
            raise ConfigError("need recover_after > 0, heal >= 0 and fault_margin >= 0")
        for name in ("crash", "registered"):
            if not 0 <= getattr(self, name) <= 1:
                raise ConfigError(f"{name} must be in [0, 1], got {getattr(self, name)}")
        if self.until is not None and self.until <= 0:
            raise ConfigError("until must be > 0")
        parse_latency(self.latency)

    @property
    def activities(self) -> int:
        return self.clients * self.activities_per_client

    @property
    def workload_start(self) -> float:
        return self.start + 0.01 * self.clients + 1.0

    @property
    def workload_end(self) -> float:
        return self.workload_start + self.activities / self.rate

    @property
    def window(self) -> float:
        """How long one crash takes, from sessions ending to the healed tree."""
        return self.fault_margin + self.recover_after + self.heal

    def crash_times(self, count: int) -> list[float]:
        """When the crashing servers crash: from 30% into the workload, one window apart."""
        first = self.workload_start + 0.3 * (self.workload_end - self.workload_start)
        return [first + self.fault_margin + index * (self.window + 1.0)
                for index in range(count)]

    def end(self, crashes: int) -> float:
        if self.until is not None:
            return self.until
        last = max([self.workload_end, *(t + self.recover_after + self.heal
                                          for t in self.crash_times(crashes))])
        return last + self.settle


@dataclasses.dataclass
class ActivityRunResult:
    run: str
    servers: int
    clients: int
    requested: int  # activities the workload asked for
    published: int  # of those, sent by a logged-in client
    skipped: int  # asked of a client that was not logged in
    crashed: list[NodeId]
    healed: bool  # every server attached (or the root) and every client logged in at the end
    events: int
    virtual_seconds: float
    wall_seconds: float


def server_ids(count: int) -> list[NodeId]:
    return [f"s{i}" for i in range(count)]


def client_ids(count: int) -> list[NodeId]:
    return [f"c{i:03d}" for i in range(count)]


def run_activity_sim(
    options: ActivityRunOptions,
    trace_sink: TraceSink | None = None,
    *,
    progress: Callable[[float, float], None] | None = None,
) -> ActivityRunResult:
    """Simulate the network and write its trace to ``trace_sink`` (flushed, not closed: the
    caller owns it)."""
    servers, clients = server_ids(options.servers), client_ids(options.clients)
    parent = {s: (None if i == 0 else servers[(i - 1) // 2]) for i, s in enumerate(servers)}
    registering = set(clients[:round(len(clients) * options.registered)])
    scripts = {}
    for index, name in enumerate(clients):
        turn = index % len(servers)
        order = tuple(f"{s}:{PORT}" for s in servers[turn:] + servers[:turn])
        if name in registering:
            scripts[name] = ClientScript(servers=order, username=f"user-{name}",
                                         secret=f"pw-{name}", register=True)
        else:
            scripts[name] = ClientScript(servers=order)

    link = LinkModel(latency=parse_latency(options.latency))
    scenario = Scenario(seed=options.seed, nodes=list(servers), link=link)
    for server in servers:
        scenario.listen(server, LISTENER)
    run_id = options.run or f"activity-s{options.servers}-c{options.clients}-s{options.seed}"
    for index, name in enumerate(clients):
        scenario.join(options.start + 0.01 * index, name)

    counts = {"published": 0, "skipped": 0}

    def publish(sim: Simulation, *, node: NodeId, number: int) -> None:
        if sim.status(node) is not NodeStatus.UP:
            counts["skipped"] += 1
            return
        client = cast(ActivityClientNode, sim.process(node))
        sent: list[bool] = []
        sim.call(node, lambda _p: sent.append(client.publish({"n": number, "by": node})))
        counts["published" if sent and sent[0] else "skipped"] += 1

    interval = 1.0 / options.rate
    for number in range(options.activities):
        scenario.at(options.workload_start + number * interval,
                    functools.partial(publish, node=clients[number % len(clients)],
                                      number=number))

    faults = random.Random(f"{options.seed}/activity-faults")
    candidates = servers[1:]
    crashed = faults.sample(candidates, min(len(candidates),
                                            round(len(servers) * options.crash)))
    for at, server in zip(options.crash_times(len(crashed)), crashed, strict=True):
        scenario.at(at - options.fault_margin,
                    functools.partial(_mark, event="leave", reason="fault", server=server))
        scenario.crash(at, server, recover_after=options.recover_after)
        scenario.at(at + options.recover_after + options.heal,
                    functools.partial(_mark, event="join", reason="healed", server=server))

    root = servers[0]

    def factory(env: Env) -> Process:
        if env.node in parent:
            up = parent[env.node]
            return ActivityServer(env, ServerConfig(
                secret=_SECRET, hostname=env.node, port=PORT,
                remote=None if up is None else (up, PORT), announce_interval=1.0,
                reconnect_delay=1.0, hash_iterations=10,
                drop_broadcasts=options.drop_broadcasts and env.node == root))
        return ActivityClientNode(env, scripts[env.node])

    sim = scenario.build(factory, trace=trace_sink, run=run_id)
    until = options.end(len(crashed))
    report = (lambda now, _events: progress(now, until)) if progress is not None else None
    started = time.perf_counter()
    sim.run(until=until, progress=report, progress_every=20_000)
    wall = time.perf_counter() - started
    if trace_sink is not None:
        trace_sink.flush()

    healed = all(sim.status(n) is NodeStatus.UP for n in [*servers, *clients])
    if healed:
        healed = all(cast(ActivityServer, sim.process(s)).state
                     in (TreeState.ATTACHED, TreeState.ROOT) for s in servers)
        healed = healed and all(cast(ActivityClientNode, sim.process(c)).joined
                                for c in clients)
    return ActivityRunResult(
        run=run_id, servers=options.servers, clients=options.clients,
        requested=options.activities, published=counts["published"],
        skipped=counts["skipped"], crashed=sorted(crashed), healed=healed, events=sim.events,
        virtual_seconds=sim.now, wall_seconds=wall)


def _mark(sim: Simulation, *, event: str, reason: str, server: NodeId) -> None:
    """Every node that is up traces ``event`` (a session boundary around ``server``'s crash)."""
    for node in sim.alive():
        process = sim.process(node)
        if isinstance(process, ActivityServer | ActivityClientNode):
            sim.call(node, lambda p: cast(ActivityServer | ActivityClientNode, p).mark(
                event, reason=reason, server=server))
