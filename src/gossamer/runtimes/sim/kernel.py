"""The deterministic simulator: virtual time, one event heap, one seed for the whole run.

Every node runs the same protocol class as on a real network, through a ``SimEnv``. A crash
ends the node's incarnation (its timers and in-flight deliveries are void) and drops the
uncommitted part of its store, a group commit not yet landed included; recovery builds a fresh
process on the committed store.

With ``connection_refused`` a message that reaches a node that is down (crashed, left, or
crashed while the message was in flight) comes back to its sender as a call of the sender
process's ``on_unreachable(node)``, one link delay later, the way a TCP connection to a dead
process is refused or reset; a partition stays silent, as a cut cable does.
"""

from __future__ import annotations

import enum
import heapq
import itertools
import math
import random
from collections.abc import Callable, Iterable
from typing import Any, cast

from ...core.conn import CloseCode, Conn, ConnGroup, Framing, ListenerSpec
from ...core.env import (
    MessageHandler,
    Process,
    ProcessFactory,
    Store,
    TimerHandle,
    TracesToSink,
    encode_datagram,
)
from ...core.errors import ConfigError, LocalError, ProtocolError, StateError
from ...core.ids import NodeId, check_node_id
from ...core.messages import Message, WireCodec, layer_of
from ...core.trace import MemorySink, TraceSink, encode_info
from .connections import SimConnections
from .multicast import MulticastGroup, RouterTree
from .network import LinkModel, Network
from .store import MemoryStore

__all__ = ["OWN_CODECS", "STORE_LAYER", "NodeStatus", "OwnCodecs", "SimEnv", "Simulation",
           "SimulationError"]

STORE_LAYER = "store"  # the layer of ``stored`` rows (Simulation.trace_storage)
#: tries a connection frame is retransmitted on a lossy link (``connection_rto``); Linux's
#: default gives up after 15, long after every workload here has timed the connection out
MAX_RETRANSMITS = 8
_INT32_MAX = 2**31 - 1  # the trace's size column is int32
_NOARG = object()
# heap entry: [time, sequence, callback or None when cancelled, argument, owner env or None]
Entry = list[Any]


class OwnCodecs(enum.Enum):
    OWN = "own"


OWN_CODECS = OwnCodecs.OWN  # Simulation(codec=...): each message through its protocol's codec


class SimulationError(LocalError):
    """A protocol raised while simulated; the message names seed, time and node to replay it."""


class NodeStatus(enum.Enum):
    PENDING = "pending"  # added, not started yet
    UP = "up"
    CRASHED = "crashed"
    LEFT = "left"


class SimEnv(TracesToSink):
    """The env of one incarnation of one node. Dead once its node crashes or leaves."""

    __slots__ = ("_rng", "_sim", "_slot", "alive", "incarnation", "node", "process")

    def __init__(self, sim: Simulation, slot: _NodeSlot, incarnation: int) -> None:
        self._sim = sim
        self._slot = slot
        self.node: NodeId = slot.node
        self.incarnation = incarnation
        self.alive = True
        self._rng: random.Random | None = None
        self.process: Process | None = None

    def now(self) -> float:
        return self._sim.now

    def trace_wall(self) -> float:
        return self._sim.wall_epoch + self._sim.now

    def send(self, dst: NodeId, msg: Message) -> None:
        self._sim._send(self, dst, msg)

    def backlog(self, dst: NodeId) -> int:
        return 0  # the simulated links carry any rate: nothing waits to be sent

    def multicast(self, group: str, msg: Message) -> None:
        self._sim._multicast(self, group, msg)

    def set_timer(self, delay: float, fn: Callable[[], None]) -> Entry:
        if delay < 0:
            raise ConfigError(f"timer delay must be >= 0, got {delay}")
        sim = self._sim
        entry: Entry = [sim.now + delay, next(sim._sequence), fn, _NOARG, self]
        heapq.heappush(sim._heap, entry)
        return entry

    def cancel(self, handle: TimerHandle) -> None:
        cast(Entry, handle)[2] = None

    @property
    def rng(self) -> random.Random:
        # made on first use: an idle node never pays for a Mersenne Twister state
        if self._rng is None:
            self._rng = random.Random(f"{self._sim.seed}/{self.node}/{self.incarnation}")
        return self._rng

    @property
    def store(self) -> Store:
        return self._slot.get_store()

    @property
    def tracing(self) -> bool:
        return self._sim.tracing

    @property
    def trace_sink(self) -> TraceSink:
        return self._sim.trace_sink

    @property
    def run_id(self) -> str:
        return self._sim.run_id

    # -- connections (see ``connections.py``) ------------------------------------------------

    def connect(self, address: str, *, framing: Framing = Framing.LINES,
                max_frame: int = 64 * 1024) -> Conn:
        if not self.alive:
            raise StateError(f"node {self.node} is down: it cannot dial")
        return self._sim.connections.connect(self, address, framing, max_frame)

    def write(self, conn: Conn, frame: bytes) -> None:
        if self.alive:
            self._sim.connections.write(self, conn, frame)

    def write_many(self, conns: ConnGroup | Iterable[Conn], frame: bytes, *,
                   exclude: Conn | None = None) -> None:
        if self.alive:
            self._sim.connections.write_many(self, conns, frame, exclude)

    def write_each(self, frames: Iterable[tuple[Conn, bytes]]) -> None:
        """One ``write`` per pair, in order: a simulated connection carries each frame with
        its latency whenever in the step it was written."""
        for conn, frame in frames:
            self.write(conn, frame)

    def close(self, conn: Conn, code: int = CloseCode.NORMAL, reason: str = "") -> None:
        if self.alive:
            self._sim.connections.close(self, conn, code, reason)

    def promote(self, conn: Conn) -> None:
        if self.alive:
            self._sim.connections.promote(self, conn)

    def group(self) -> ConnGroup:
        return ConnGroup()

class _NodeSlot:
    """Everything the simulator keeps about one node id across its incarnations."""

    __slots__ = ("crashes", "env", "factory", "incarnation", "node", "status", "store")

    def __init__(self, node: NodeId, factory: ProcessFactory) -> None:
        self.node = node
        self.factory = factory
        self.status = NodeStatus.PENDING
        self.env: SimEnv | None = None
        self.store: MemoryStore | None = None
        self.incarnation = 0
        self.crashes = 0

    def get_store(self) -> MemoryStore:
        if self.store is None:
            self.store = MemoryStore()
            self.store.attach(self.defer)
        return self.store

    def new_incarnation(self, env: SimEnv) -> None:
        """``env`` is the node's env from now on; its store's group commits are its events."""
        self.env = env
        if self.store is not None:
            self.store.attach(self.defer)

    def defer(self, fn: Callable[[], None]) -> None:
        """The store's group commit lands as the node's next event (void if it crashes)."""
        env = self.env
        if env is None:
            fn()  # no incarnation (a scenario wrote to a down node's store): at once
        else:
            env.set_timer(0.0, fn)


class Simulation:
    """One simulated run. Same seed and same calls give the identical trace, row for row."""

    def __init__(
        self,
        *,
        seed: int,
        link: LinkModel | None = None,
        run: str | None = None,
        trace: TraceSink | None = None,
        codec: WireCodec | OwnCodecs | None = OWN_CODECS,
        trace_messages: bool = True,
        untraced: Iterable[str] = (),
        connection_refused: bool = False,
        wall_epoch: float = 0.0,
        connection_rto: float = 0.0,
    ) -> None:
        """``codec``: every message ``env.send`` carries crosses it, encoded and decoded, as
        on a network; ``OWN_CODECS`` (default): each message through its own protocol's codec
        (``Message.CODEC``); None: messages travel as objects.

        ``untraced``: message types (``Message.TYPE``) whose sends and receipts are not
        traced even with ``trace_messages`` (a big group's periodic session messages, whose
        rows grow with the square of the group and that no check reads).

        ``wall_epoch``: the simulated wall clock at virtual time 0. Every row's ``wall`` is
        ``wall_epoch + t``: fixed per run, so the same seed gives the same trace; with the
        default 0.0 ``wall`` is ``t`` to the bit, so latency on either clock is the same.

        ``connection_rto``: what a link's ``loss`` costs a connection (TCP repairs a loss by
        retransmitting it): 0 (default) nothing; else a frame is lost with the link's loss
        probability on each try and sent again after this many seconds, the wait doubling
        per try (TCP's back-off), at most ``MAX_RETRANSMITS`` times; what was written after
        it waits behind it (head-of-line blocking)."""
        if not isinstance(wall_epoch, int | float) or not math.isfinite(wall_epoch):
            raise ConfigError(f"wall_epoch must be a finite number, got {wall_epoch!r}")
        if not isinstance(connection_rto, int | float) or not 0 <= connection_rto < math.inf:
            raise ConfigError(f"connection_rto must be a number >= 0, got {connection_rto!r}")
        self.connection_rto = float(connection_rto)
        self.wall_epoch = float(wall_epoch)
        self.seed = seed
        self.connection_refused = connection_refused
        self.run_id = run if run is not None else f"sim-{seed}"
        self.now = 0.0
        self.network = Network(link)
        self.trace_sink: TraceSink = trace if trace is not None else MemorySink()
        self.tracing = self.trace_sink.enabled
        self.trace_messages = trace_messages and self.tracing
        self.untraced = frozenset(untraced)
        # with a codec every message crosses the wire format, as on a real network
        self.codec = codec
        self._own_codecs = codec is OWN_CODECS
        self.events = 0
        self._heap: list[Entry] = []
        self._sequence = itertools.count()
        self._slots: dict[NodeId, _NodeSlot] = {}
        self._net_rng = random.Random(f"{seed}/network")
        self._sim_rng = random.Random(f"{seed}/scenario")
        self.connections = SimConnections(self)
        self._groups: dict[str, MulticastGroup] = {}

    @property
    def wall(self) -> float:
        """The simulated wall clock now: ``wall_epoch`` + virtual time (the ``wall`` column)."""
        return self.wall_epoch + self.now

    # -- nodes -----------------------------------------------------------------------------

    @property
    def rng(self) -> random.Random:
        """Randomness for scenario decisions (workloads, churn), separate from nodes' and links'."""
        return self._sim_rng

    def add_node(
        self, node: NodeId, factory: ProcessFactory, *, at: float | None = None,
        listeners: Iterable[ListenerSpec] = (),
    ) -> None:
        """Add a node that starts now, or joins at time ``at``; ``listeners`` (each with a
        port of its own) accept connections at ``node:port`` for the node's process."""
        if node in self._slots:
            raise ConfigError(f"node {node} already exists")
        slot = _NodeSlot(check_node_id(node), factory)
        self.connections.add_listeners(node, listeners)
        self._slots[node] = slot
        if at is None or at <= self.now:
            self._start(slot, joined=at is not None)
        else:
            self.schedule(at - self.now, self._start, slot, True)

    def add_nodes(self, nodes: Iterable[NodeId], factory: ProcessFactory) -> None:
        for node in nodes:
            self.add_node(node, factory)

    def _start(self, slot: _NodeSlot, joined: bool = False) -> None:
        slot.incarnation += 1
        env = SimEnv(self, slot, slot.incarnation)
        slot.new_incarnation(env)
        slot.status = NodeStatus.UP
        if joined:
            env.trace("join", layer="sim")
        process = slot.factory(env)
        env.process = process
        self._guard(env, process.start)

    def nodes(self) -> list[NodeId]:
        return list(self._slots)

    def status(self, node: NodeId) -> NodeStatus:
        return self._slot(node).status

    def alive(self) -> list[NodeId]:
        return [n for n, s in self._slots.items() if s.status is NodeStatus.UP]

    def process(self, node: NodeId) -> Process:
        """The current process of a node that is up."""
        slot = self._slot(node)
        if slot.env is None or slot.env.process is None:
            raise StateError(f"node {node} is {slot.status.value}: it has no process")
        return slot.env.process

    def env(self, node: NodeId) -> SimEnv:
        slot = self._slot(node)
        if slot.env is None:
            raise StateError(f"node {node} is {slot.status.value}: it has no env")
        return slot.env

    def store(self, node: NodeId) -> MemoryStore:
        return self._slot(node).get_store()

    def _slot(self, node: NodeId) -> _NodeSlot:
        try:
            return self._slots[node]
        except KeyError:
            raise ConfigError(f"unknown node {node}") from None

    # -- faults ----------------------------------------------------------------------------

    def crash(self, node: NodeId, *, recover_after: float | None = None) -> None:
        """Crash a node now: timers and in-flight messages die, uncommitted writes are lost."""
        slot = self._slot(node)
        if slot.status is not NodeStatus.UP or slot.env is None:
            raise StateError(f"cannot crash node {node}: it is {slot.status.value}")
        slot.env.trace("crash", layer="sim")
        slot.env.alive = False
        slot.env = None
        self.connections.crashed(node)
        slot.crashes += 1
        slot.status = NodeStatus.CRASHED
        if slot.store is not None:
            slot.store.crash()
        self.trace_sink.flush()
        if recover_after is not None:
            self.schedule(recover_after, self.recover, node)

    def recover(self, node: NodeId) -> None:
        """Restart a crashed node: a fresh process on its committed store."""
        slot = self._slot(node)
        if slot.status is not NodeStatus.CRASHED:
            raise StateError(f"cannot recover node {node}: it is {slot.status.value}")
        slot.incarnation += 1
        env = SimEnv(self, slot, slot.incarnation)
        slot.new_incarnation(env)
        slot.status = NodeStatus.UP
        env.trace("recover", layer="sim")
        process = slot.factory(env)
        env.process = process
        self._guard(env, process.start)

    def leave(self, node: NodeId) -> None:
        """A graceful leave: the process's ``stop()`` runs (it may say goodbye), then it is gone."""
        slot = self._slot(node)
        env = slot.env
        if slot.status is not NodeStatus.UP or env is None:
            raise StateError(f"cannot leave node {node}: it is {slot.status.value}")
        if env.process is not None:
            self._guard(env, env.process.stop)
        env.trace("leave", layer="sim")
        self.connections.left(node)
        env.alive = False
        slot.env = None
        slot.status = NodeStatus.LEFT

    def rejoin(self, node: NodeId) -> None:
        """A node that left comes back: a fresh process on the store it left with."""
        slot = self._slot(node)
        if slot.status is not NodeStatus.LEFT:
            raise StateError(f"cannot rejoin node {node}: it is {slot.status.value}")
        self._start(slot, joined=True)

    def partition(self, groups: Iterable[Iterable[NodeId]]) -> None:
        groups = [list(g) for g in groups]
        self.network.partition(groups)
        self._trace_sim("partition", groups=groups)

    def blackhole(self, a: NodeId, b: NodeId) -> None:
        """The links between ``a`` and ``b`` go silent (until ``heal``): nothing is lost or
        closed, it just stops arriving, as with a hung link; ``heal`` ends every partition."""
        self.network.block(a, b)
        self._trace_sim("blackhole", a=a, b=b)

    def heal(self) -> None:
        self.network.heal()
        self._trace_sim("heal")
        self.connections.healed()

    def cut(self, a: NodeId, b: NodeId | None = None) -> int:
        """Reset the connections between ``a`` and ``b`` (every one of ``a``'s if ``b`` is
        None), as a cut cable or a middlebox's RST: both ends hear ``reset`` and what was in
        flight is lost. Returns how many were cut."""
        self._slot(a)
        cut = self.connections.cut(a, b)
        self._trace_sim("cut", a=a, b=b, connections=cut)
        return cut

    def address(self, node: NodeId, listener: str) -> str:
        """Where ``node``'s listener ``listener`` accepts connections (``node:port``)."""
        return self.connections.address(node, listener)

    def trace_storage(self) -> int:
        """Write one ``stored`` row (layer ``store``) per node that has started: ``size`` the
        bytes its durable store holds, ``info.items`` its rows (a node that never wrote: 0).
        Crashed and departed nodes count too (their store outlives them). Returns the rows."""
        if not self.tracing:
            return 0
        written = 0
        for node, slot in self._slots.items():
            if slot.status is NodeStatus.PENDING:
                continue  # not joined yet: a row now would make it a member from the start
            store = slot.store
            items, size = (0, 0) if store is None else (store.items, store.size)
            self.trace_sink.append(
                (self.run_id, self.now, node, STORE_LAYER, "stored", None, None, None, None,
                 None, min(size, _INT32_MAX), encode_info({"items": items}), self.wall)
            )
            written += 1
        return written

    def current_env(self, node: NodeId) -> SimEnv | None:
        """The env of ``node``'s running incarnation (None: unknown, down or not started)."""
        slot = self._slots.get(node)
        return None if slot is None else slot.env

    def link_delay(self, src: NodeId, dst: NodeId) -> float:
        """One delay of the link from ``src`` to ``dst``, drawn from the network's rng."""
        return self.network.link(src, dst).latency.sample(self._net_rng)

    def connection_delay(self, src: NodeId, dst: NodeId) -> float:
        """One frame's delay on a connection from ``src`` to ``dst``: a link delay, plus the
        retransmission timeouts of the tries the link lost (``connection_rto``)."""
        link = self.network.link(src, dst)
        rng = self._net_rng
        delay = link.latency.sample(rng)
        if link.loss and self.connection_rto:
            rto = self.connection_rto
            for _ in range(MAX_RETRANSMITS):
                if rng.random() >= link.loss:
                    break
                delay += rto
                rto *= 2
        return delay

    def failure(self, node: str, exc: BaseException) -> SimulationError:
        """The error that stops a run when a protocol raised (it names seed, time, node)."""
        return self._failure(node, exc)

    def _trace_sim(self, event: str, **info: Any) -> None:
        if self.tracing:
            self.trace_sink.append(
                (self.run_id, self.now, "sim", "sim", event, None, None, None, None, None, None,
                 encode_info(info), self.wall)
            )

    # -- events ----------------------------------------------------------------------------

    def schedule(self, delay: float, fn: Callable[..., object], *args: Any) -> Entry:
        """Run ``fn(*args)`` after ``delay`` virtual seconds (scenario events, not per node)."""
        if delay < 0:
            raise ConfigError(f"delay must be >= 0, got {delay}")
        return self.schedule_at(self.now + delay, fn, *args)

    def schedule_at(self, at: float, fn: Callable[..., object], *args: Any) -> Entry:
        """Run ``fn(*args)`` at virtual time ``at`` (not before now). Events due at the same
        time run in the order they were scheduled: give two events one ``at``, not ``at - now``
        as a delay from two different nows, which may round to two times."""
        if at < self.now:
            raise ConfigError(f"at must be >= now ({self.now}), got {at}")
        arg: Any = args if args else _NOARG
        entry: Entry = [at, next(self._sequence), _Call(fn) if args else fn, arg, None]
        heapq.heappush(self._heap, entry)
        return entry

    def add_multicast_group(self, group: str, members: Iterable[NodeId], *,
                            tree: RouterTree | None = None, member_loss: float = 0.0) -> None:
        """Make ``group`` a multicast group of ``members`` (see ``MulticastGroup``): flat
        through the link model, or along ``tree``; setting it again replaces it."""
        self._groups[group] = MulticastGroup(frozenset(members), tree, member_loss)

    def _multicast(self, env: SimEnv, group_name: str, msg: Message) -> None:
        data = encode_datagram(msg)  # raises DatagramTooLarge before anything leaves
        if not env.alive:
            return
        group = self._groups.get(group_name)
        if group is None:
            raise ConfigError(f"no multicast group {group_name!r} in this simulation")
        msg = type(msg).CODEC.decode(data)  # type: ignore[union-attr]
        src = env.node
        size = len(data)
        if self.trace_messages and msg.TYPE not in self.untraced:
            mid, origin, key, seq = msg.trace_ids()
            self.trace_sink.append(
                (self.run_id, self.now, src, layer_of(msg), "send", mid, origin, group_name,
                 key, seq, size, encode_info({"type": msg.TYPE, "multicast": True}),
                 self.wall_epoch + self.now))
        rng = self._net_rng
        heap = self._heap
        now = self.now
        arrivals: list[tuple[NodeId, tuple[float, ...]]]
        if group.tree is not None:
            reached = group.tree.spread(src, rng)
            arrivals = [(dst, (reached[dst],)) for dst in sorted(group.members)
                        if dst != src and dst in reached]
        else:
            network = self.network
            arrivals = [(dst, network.link(src, dst).delays(rng))
                        for dst in sorted(group.members) if dst != src]
        for dst, delays in arrivals:
            if group.member_loss and rng.random() < group.member_loss:
                continue
            slot = self._slots.get(dst)
            if slot is None or not self.network.connected(src, dst):
                continue
            packet = (src, dst, msg, size, slot.crashes)
            for delay in delays:
                heapq.heappush(heap, [now + delay, next(self._sequence), self._deliver,
                                      packet, None])

    def call(self, node: NodeId, fn: Callable[[Process], object]) -> None:
        """Run ``fn(process)`` on a node now, with the node's protocol errors guarded."""
        env = self.env(node)
        process = env.process
        if process is None:
            raise StateError(f"node {node} has no process")
        self._guard(env, lambda: fn(process))

    def _send(self, env: SimEnv, dst: NodeId, msg: Message) -> None:
        if not env.alive:
            return
        size = None
        codec = self.codec
        if self._own_codecs:
            codec = type(msg).CODEC
        if codec is not None:
            data = codec.encode(msg)  # type: ignore[union-attr]
            size = len(data)
            msg = codec.decode(data)  # type: ignore[union-attr]
        src = env.node
        if self.trace_messages and msg.TYPE not in self.untraced:
            mid, origin, key, seq = msg.trace_ids()
            self.trace_sink.append(
                (self.run_id, self.now, src, layer_of(msg), "send", mid, origin, dst, key, seq,
                 size, encode_info({"type": msg.TYPE}), self.wall_epoch + self.now)
            )
        network = self.network
        if network.uniform:
            link = network.default
        elif network.connected(src, dst):
            link = network.link(src, dst)
        else:
            return
        slot = self._slots.get(dst)
        # the target's crash count goes along: a crash while in flight voids the message
        # (a node added later in this same instant has no slot yet: it counts as no crash)
        packet = (src, dst, msg, size, slot.crashes if slot is not None else 0)
        delays = link.fixed_delays
        if delays is None:
            delays = link.delays(self._net_rng)
        heap = self._heap
        now = self.now
        for delay in delays:
            heapq.heappush(heap, [now + delay, next(self._sequence), self._deliver, packet, None])

    def _deliver(self, packet: tuple[NodeId, NodeId, Message, int | None, int]) -> None:
        src, dst, msg, size, crashes = packet
        slot = self._slots.get(dst)
        if slot is None or slot.crashes != crashes:
            if self.connection_refused and self.network.connected(src, dst):
                self._refuse(src, dst)
            return
        env = slot.env
        if env is None or not self.network.connected(src, dst):
            if env is None and self.connection_refused and self.network.connected(src, dst):
                self._refuse(src, dst)
            return
        if self.trace_messages and msg.TYPE not in self.untraced:
            mid, origin, key, seq = msg.trace_ids()
            self.trace_sink.append(
                (self.run_id, self.now, dst, layer_of(msg), "recv", mid, origin, src, key, seq,
                 size, encode_info({"type": msg.TYPE}), self.wall_epoch + self.now)
            )
        process = env.process
        if process is not None:
            try:
                cast(MessageHandler, process).on_message(src, msg)
            except ProtocolError as exc:
                env.trace("drop", layer=layer_of(msg), peer=src, reason=exc.reason,
                          error=str(exc))
            except Exception as exc:
                raise self._failure(dst, exc) from exc

    def _refuse(self, src: NodeId, dst: NodeId) -> None:
        """Tell ``src``'s current incarnation, one link delay from now, that ``dst`` is down."""
        sender = self._slots.get(src)
        if sender is None or sender.env is None:
            return
        delay = self.network.link(dst, src).latency.sample(self._net_rng)
        self.schedule(delay, self._refused, sender.env, dst)

    def _refused(self, env: SimEnv, dst: NodeId) -> None:
        if not env.alive:
            return  # the sender crashed meanwhile: its new incarnation never sent it
        hook = getattr(env.process, "on_unreachable", None)
        if hook is not None:
            self._guard(env, lambda: hook(dst))

    def _guard(self, env: SimEnv, fn: Callable[[], object]) -> None:
        try:
            fn()
        except Exception as exc:
            raise self._failure(env.node, exc) from exc

    def _failure(self, node: str, exc: BaseException) -> SimulationError:
        return SimulationError(
            f"{type(exc).__name__} at t={self.now:.6f} on node {node} "
            f"(replay with seed={self.seed}): {exc}"
        )

    def run(
        self,
        until: float | None = None,
        *,
        max_events: int | None = None,
        stop_when: Callable[[], bool] | None = None,
        progress: Callable[[float, int], None] | None = None,
        progress_every: int = 100_000,
    ) -> int:
        """Process events in time order; returns how many ran.

        Stops when the heap is empty, the next event is after ``until`` (time then advances to
        ``until``), ``max_events`` ran, or ``stop_when()`` turns true after an event.
        """
        heap = self._heap
        pop = heapq.heappop
        ran = 0
        next_progress = progress_every if progress is not None else -1
        reached_until = True  # false when max_events or stop_when ended the run early
        entry: Entry | None = None
        try:
            while heap:
                entry = heap[0]
                if until is not None and entry[0] > until:
                    break
                pop(heap)
                fn = entry[2]
                if fn is None:
                    continue
                owner = entry[4]
                if owner is not None and not owner.alive:
                    continue
                self.now = entry[0]
                arg = entry[3]
                if arg is _NOARG:
                    fn()
                else:
                    fn(arg)
                ran += 1
                if ran == next_progress:
                    progress(self.now, ran)  # type: ignore[misc]
                    next_progress += progress_every
                if (stop_when is not None and stop_when()) or (
                    max_events is not None and ran >= max_events
                ):
                    reached_until = False
                    break
        except SimulationError:
            raise
        except Exception as exc:
            owner = entry[4] if entry is not None else None
            raise self._failure(owner.node if owner is not None else "sim", exc) from exc
        finally:
            self.events += ran
        if reached_until and until is not None and self.now < until:
            self.now = until
        if progress is not None:
            progress(self.now, ran)
        return ran

    @property
    def pending_events(self) -> int:
        return len(self._heap)


class _Call:
    """Adapts ``fn(*args)`` to the heap's one-argument call."""

    __slots__ = ("fn",)

    def __init__(self, fn: Callable[..., object]) -> None:
        self.fn = fn

    def __call__(self, args: tuple[Any, ...]) -> None:
        self.fn(*args)
