"""One protocol process on a real network: ``NetNode`` and the ``NetEnv`` its process gets.

A node runs one process on the event loop: timers on ``loop.call_at``, storage in sqlite, a
trace sink, its listeners (``ListenerSpec``: the service's connections) and, unless turned off,
a peer listener whose links carry ``env.send`` between nodes (``peerlink.py``). Peer input never
crashes a node; a bug in the process stops the node loudly.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import math
import random
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, cast

from ...core.backoff import Backoff, ExponentialBackoff
from ...core.conn import CloseCode, Conn, ConnGroup, Framing, ListenerSpec
from ...core.env import (
    MessageHandler,
    Process,
    ProcessFactory,
    Store,
    TimerHandle,
    TracesToSink,
    get_json,
    put_json,
)
from ...core.errors import ConfigError, LocalError, ProtocolError, StateError
from ...core.ids import NodeId, check_node_id
from ...core.messages import Message, WireCodec, layer_of
from ...core.trace import NullSink, TraceSink, encode_info
from .conns import Connections, NetConn
from .gcpolicy import tune_gc
from .linkauth import ClusterKey, resolve_cluster_key
from .mallocpolicy import tune_malloc
from .peerlink import PeerLinks
from .ratelog import RateLimitedLog
from .store import SqliteStore, WriteBehindStore

__all__ = [
    "PEER_LISTENER",
    "Address",
    "BackoffFactory",
    "NetEnv",
    "NetNode",
    "NetNodeError",
    "NodeState",
    "TransportKind",
]

log = logging.getLogger("gossamer.net")

LAYER = "net"
PEER_LISTENER = "peers"
INCARNATION_TABLE = "net.node"
INCARNATION_EPOCH = 1_767_225_600  # 2026-01-01T00:00:00Z
#: clock ticks per second of an incarnation taken from the clock: a process killed and started
#: again within one second had the same incarnation (whole seconds), so its new messages had
#: its old messages' ids and were dropped as duplicates everywhere; no process starts, joins and
#: is restarted within a tenth of a second. Ten ticks a second from 2026 are above every
#: incarnation the whole seconds from 2024 gave, and keep sequence numbers (incarnation x
#: ``INCARNATION_SPAN``) within 64 bits until 2039
INCARNATION_TICKS = 10
Address = tuple[str, int]
BackoffFactory = Callable[[], Backoff]
Resolver = Callable[[NodeId], Address | None]


def host_port_address(node: NodeId) -> Address | None:
    """A ``Resolver`` for nodes named after where they listen: ``host:port`` (None for an id of
    another shape)."""
    host, sep, port = node.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) <= 65535:
        return None
    return (host, int(port))


class NetNodeError(LocalError):
    """A protocol raised something other than a ``ProtocolError``: a bug; its node stopped."""


class NodeState(enum.Enum):
    NEW = "new"  # built, not listening
    LISTENING = "listening"  # bound, process not started
    RUNNING = "running"
    CLOSING = "closing"
    CLOSED = "closed"


class TransportKind(enum.Enum):
    """The framing of the peer links between nodes: JSON lines on TCP, or WebSocket."""

    TCP = "tcp"
    WS = "ws"


def _check_address(value: object, what: str) -> Address:
    if (
        not isinstance(value, tuple)
        or len(value) != 2
        or not isinstance(value[0], str)
        or not value[0]
        or not isinstance(value[1], int)
        or isinstance(value[1], bool)
        or not 0 <= value[1] <= 65535
    ):
        raise ConfigError(f"{what} must be a (host, port) tuple with 0 <= port <= 65535, "
                          f"got {value!r}")
    return (value[0], value[1])


class _Timer:
    """The handle ``NetEnv.set_timer`` returns; cancelling it twice is harmless."""

    __slots__ = ("fn", "handle", "node")

    def __init__(self, node: NetNode, fn: Callable[[], None]) -> None:
        self.node = node
        self.fn = fn
        self.handle: asyncio.TimerHandle | None = None

    def fire(self) -> None:
        self.node._timers.discard(self)
        self.node._run_timer(self.fn)

    def cancel(self) -> None:
        self.node._timers.discard(self)
        if self.handle is not None:
            self.handle.cancel()


class NetEnv(TracesToSink):
    """The ``Env`` a protocol gets on a network node (see ``gossamer.core.env.Env``)."""

    __slots__ = ("_epoch", "_loop", "_node", "_rng")

    def __init__(self, node: NetNode, loop: asyncio.AbstractEventLoop, epoch: float) -> None:
        self._node = node
        self._loop = loop
        self._epoch = epoch
        self._rng = random.Random(f"{node.seed}/{node.node_id}")

    @property
    def node(self) -> NodeId:
        return self._node.node_id

    def now(self) -> float:
        # time.monotonic, as asyncio's loop.time is; not loop.time itself: uvloop's counts
        # whole milliseconds, once per loop iteration, and the trace's times and latencies
        # would come out in steps of 1 ms
        return time.monotonic() - self._epoch

    def trace_wall(self) -> float:
        return time.time()

    def send(self, dst: NodeId, msg: Message) -> None:
        self._node._send(dst, msg)

    def backlog(self, dst: NodeId) -> int:
        return self._node.peer_links.backlog(dst)

    def multicast(self, group: str, msg: Message) -> None:
        raise StateError(f"node {self._node.node_id} has peer links, not multicast: run the "
                         f"process on a gossamer.runtimes.net.MulticastEnv")

    def set_timer(self, delay: float, fn: Callable[[], None]) -> TimerHandle:
        if not (isinstance(delay, int | float) and math.isfinite(delay) and delay >= 0):
            raise ConfigError(f"timer delay must be a finite number >= 0, got {delay!r}")
        node = self._node
        timer = _Timer(node, fn)
        if node.state is NodeState.RUNNING:
            timer.handle = self._loop.call_at(self._loop.time() + delay, timer.fire)
            node._timers.add(timer)
        return timer

    def cancel(self, handle: TimerHandle) -> None:
        if not isinstance(handle, _Timer):
            raise ConfigError(f"not a timer handle of this runtime: {handle!r}")
        handle.cancel()

    @property
    def rng(self) -> random.Random:
        return self._rng

    @property
    def store(self) -> Store:
        return self._node.store

    @property
    def tracing(self) -> bool:
        return self._node.tracing

    @property
    def incarnation(self) -> int:
        return self._node.incarnation

    @property
    def trace_sink(self) -> TraceSink:
        return self._node.trace_sink

    @property
    def run_id(self) -> str:
        return self._node.run

    # -- connections -----------------------------------------------------------------------

    def connect(self, address: str, *, framing: Framing = Framing.LINES,
                max_frame: int = 64 * 1024) -> Conn:
        node = self._node
        if node.state is not NodeState.RUNNING:
            raise StateError(f"node {node.node_id} is {node.state.value}: it cannot dial")
        return node.connections.dial(address, framing=framing, max_frame=max_frame,
                                     handler=node.process)

    def write(self, conn: Conn, frame: bytes) -> None:
        self._node.connections.write(_net(conn), frame)

    def write_many(self, conns: ConnGroup | Iterable[Conn], frame: bytes, *,
                   exclude: Conn | None = None) -> None:
        self._node.connections.write_many(conns, frame, exclude)

    def write_each(self, frames: Iterable[tuple[Conn, bytes]]) -> None:
        self._node.connections.write_each((_net(conn), frame) for conn, frame in frames)

    def close(self, conn: Conn, code: int = CloseCode.NORMAL, reason: str = "") -> None:
        self._node.connections.close(_net(conn), code, reason)

    def promote(self, conn: Conn) -> None:
        self._node.connections.promote(_net(conn))

    def group(self) -> ConnGroup:
        return self._node.connections.group()


def _net(conn: Conn) -> NetConn:
    if not isinstance(conn, NetConn):
        raise ConfigError(f"not a connection of this runtime: {conn!r}")
    return conn


class NetNode:
    """One protocol process on the network: its env, listeners and peer links.

    ``listen`` is where the peer links are accepted (None: this node takes no ``env.send``
    messages, e.g. a hub that only serves clients); ``listeners`` are the service's own. ``await
    start()`` binds every listener, builds the process with ``factory(env)`` and calls
    ``process.start()``; ``await close()`` stops it all.
    """

    def __init__(
        self,
        *,
        node_id: NodeId,
        factory: ProcessFactory,
        listen: Address | None = ("127.0.0.1", 0),
        listeners: Sequence[ListenerSpec] = (),
        transport: str | TransportKind = "tcp",
        peers: Mapping[NodeId, Address] | None = None,
        store: Store | None = None,
        trace: TraceSink | None = None,
        run: str = "net",
        codec: WireCodec | None = None,
        max_frame: int | None = None,
        send_queue_limit: int = 10_000,
        backoff_factory: BackoffFactory | None = None,
        loss: float = 0.0,
        seed: int = 0,
        trace_messages: bool = True,
        hello_timeout: float = 10.0,
        max_inbound: int = 1024,
        on_activity: Callable[[], None] | None = None,
        cluster_key: ClusterKey | str | None = None,
        verify_ids: bool = True,
    ) -> None:
        """``cluster_key``: what authenticates the peer links (a ``ClusterKey`` or its text;
        None: ``$GOSSAMER_CLUSTER_KEY``, or on 127.0.0.1 a built-in key, see ``linkauth``);
        ``verify_ids``: check each peer's claimed id with the node it names."""
        self.node_id = check_node_id(node_id)
        if not callable(factory):
            raise ConfigError(f"factory must be callable, got {factory!r}")
        self.factory = factory
        self.listen_address = None if listen is None else _check_address(listen, "listen")
        try:
            self.transport = TransportKind(transport)
        except ValueError:
            raise ConfigError(f"transport must be 'tcp' or 'ws', got {transport!r}") from None
        if isinstance(cluster_key, ClusterKey):
            key = cluster_key
        elif self.listen_address is not None:
            key = resolve_cluster_key(cluster_key, self.listen_address[0])
        else:  # no peer listener: it only dials (the key still proves it, if it does)
            key = resolve_cluster_key(cluster_key, "127.0.0.1", announce=False)
        self.listener_specs = list(listeners)
        names = [spec.name for spec in self.listener_specs]
        for spec in self.listener_specs:
            if not isinstance(spec, ListenerSpec):
                raise ConfigError(f"listeners must be ListenerSpecs, got {spec!r}")
        if len(set(names)) != len(names) or PEER_LISTENER in names:
            raise ConfigError(f"listener names must be distinct and not {PEER_LISTENER!r}: "
                              f"{names}")
        self.peers: dict[NodeId, Address] = {}
        for peer, address in (peers or {}).items():
            self.add_peer(peer, address)
        if store is not None and not isinstance(store, Store):
            raise ConfigError(f"store must be a gossamer Store, got {store!r}")
        if trace is not None and not isinstance(trace, TraceSink):
            raise ConfigError(f"trace must be a TraceSink, got {trace!r}")
        self.trace_sink: TraceSink = trace if trace is not None else NullSink()
        if not isinstance(run, str) or not run:
            raise ConfigError(f"run must be a non-empty string, got {run!r}")
        self.run = run
        if codec is not None:
            codec_ok = (callable(getattr(codec, "encode", None))
                        and callable(getattr(codec, "decode", None))
                        and isinstance(getattr(codec, "max_frame", None), int))
            if not codec_ok:
                raise ConfigError(f"codec must have encode, decode and max_frame, got {codec!r}")
        elif self.listen_address is not None:
            raise ConfigError("a node with a peer listener needs the codec of its messages")
        self.codec = codec
        default_frame = codec.max_frame if codec is not None else 64 * 1024
        self.max_frame = default_frame if max_frame is None else max_frame
        if not isinstance(self.max_frame, int) or self.max_frame < 64:
            raise ConfigError(f"max_frame must be an int >= 64, got {self.max_frame!r}")
        if not isinstance(send_queue_limit, int) or send_queue_limit < 1:
            raise ConfigError(f"send_queue_limit must be an int >= 1, got {send_queue_limit!r}")
        self.send_queue_limit = send_queue_limit
        if backoff_factory is not None and not callable(backoff_factory):
            raise ConfigError(f"backoff_factory must be callable, got {backoff_factory!r}")
        if not isinstance(loss, int | float) or not 0.0 <= loss <= 1.0:
            raise ConfigError(f"loss must be a probability in [0, 1], got {loss!r}")
        self.loss = float(loss)
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise ConfigError(f"seed must be an int, got {seed!r}")
        self.seed = seed
        self._loss_rng = random.Random(f"{seed}/{self.node_id}/loss")
        backoff_rng = random.Random(f"{seed}/{self.node_id}/backoff")
        self.backoff_factory: BackoffFactory = backoff_factory or (
            lambda: ExponentialBackoff(base=0.05, cap=2.0, rng=backoff_rng)
        )
        if not isinstance(hello_timeout, int | float) or not hello_timeout > 0:
            raise ConfigError(f"hello_timeout must be > 0, got {hello_timeout!r}")
        self.hello_timeout = float(hello_timeout)
        if not isinstance(max_inbound, int) or max_inbound < 1:
            raise ConfigError(f"max_inbound must be an int >= 1, got {max_inbound!r}")
        self.max_inbound = max_inbound
        self.tracing = self.trace_sink.enabled
        self.trace_messages = bool(trace_messages) and self.tracing
        self.on_activity = on_activity
        #: called once if a protocol bug stops this node (``NetHost`` listens here)
        self.on_failure: Callable[[NetNode, BaseException], None] | None = None
        #: looks up peers this node was not told about (``NetHost`` points it at its directory)
        self.resolver: Resolver | None = None
        # made last, so that a refused option leaves no open database behind
        self.store: Store = store if store is not None else SqliteStore(":memory:")
        self.state = NodeState.NEW
        self.running = False  # state is RUNNING (read on the hot path)
        self.incarnation = 0  # set when the process starts
        self.overload = RateLimitedLog(log)  # per-message warnings: once per 5 s, with counts
        self.failure: BaseException | None = None
        self.env: NetEnv | None = None
        self.process: Process | None = None
        self.connections = Connections(self)
        framing = Framing.WS if self.transport is TransportKind.WS else Framing.LINES
        self.peer_links = PeerLinks(self, framing, key, verify_ids=verify_ids)
        self._timers: set[_Timer] = set()
        self._close_task: asyncio.Task[None] | None = None

    def __repr__(self) -> str:
        return f"NetNode({self.node_id!r}, {self.transport.value}, {self.state.value})"

    # -- addresses -------------------------------------------------------------------------

    @property
    def address(self) -> Address:
        """The bound (host, port) of the peer listener; only after ``listen()``."""
        return self.listener_address(PEER_LISTENER)

    def listener_address(self, name: str) -> Address:
        """The bound (host, port) of listener ``name``; only after ``listen()``."""
        if name not in self.connections.listener_names():
            raise StateError(f"node {self.node_id} is {self.state.value}: no listener {name!r}")
        return self.connections.address(name)

    def rename(self, node_id: NodeId) -> None:
        """Change this node's id before its process starts: a node named after the address it
        bound (``host:port`` with port 0 asked for) listens first, then takes its name."""
        if self.state not in (NodeState.NEW, NodeState.LISTENING):
            raise StateError(f"node {self.node_id}: rename() in state {self.state.value}")
        self.node_id = check_node_id(node_id)

    def add_peer(self, node: NodeId, address: Address) -> None:
        """Learn (or update) where ``node`` listens; a waiting link retries at once."""
        check_node_id(node)
        self.peers[node] = _check_address(address, f"address of peer {node}")
        if hasattr(self, "peer_links"):
            self.peer_links.kick(node)

    def address_of(self, node: NodeId) -> Address | None:
        if node == self.node_id and PEER_LISTENER in self.connections.listener_names():
            return self.address
        if self.resolver is not None:
            found = self.resolver(node)
            if found is not None:
                return found
        return self.peers.get(node)

    # -- lifecycle -------------------------------------------------------------------------

    async def listen(self) -> Address | None:
        """Bind every listener; returns the peer listener's address (None without one)."""
        if self.state is not NodeState.NEW:
            raise StateError(f"node {self.node_id}: listen() in state {self.state.value}")
        try:
            if self.listen_address is not None:
                host, port = self.listen_address
                framing = Framing.WS if self.transport is TransportKind.WS else Framing.LINES
                spec = ListenerSpec(name=PEER_LISTENER, host=host, port=port, framing=framing,
                                    max_frame=self.max_frame, max_connections=self.max_inbound,
                                    handshake_timeout=self.hello_timeout,
                                    send_queue_limit=self.send_queue_limit)
                await self.connections.listen(spec, self.peer_links)
            for spec in self.listener_specs:
                await self.connections.listen(spec, None)  # None: the node's process
        except BaseException:
            await self.connections.shutdown()
            raise
        self.state = NodeState.LISTENING
        for name in self.connections.listener_names():
            log.info("%s listening (%s) on %s:%d", self.node_id, name,
                     *self.connections.address(name))
        return self.address if self.listen_address is not None else None

    def start_process(self, *, epoch: float | None = None) -> None:
        """Build the process on a fresh env and start it; ``epoch``: ``time.monotonic()`` at
        t=0 (default: now)."""
        if self.state is not NodeState.LISTENING:
            raise StateError(f"node {self.node_id}: start_process() in state {self.state.value}")
        loop = asyncio.get_running_loop()
        tune_gc()  # a server process's collector policy (gcpolicy.py), once per process
        tune_malloc()  # and its allocator's (mallocpolicy.py)
        if isinstance(self.store, WriteBehindStore):  # its commit_then callbacks: guarded
            self.store.bind(loop, guard=self._run_committed, on_failure=self._store_failed)
        if isinstance(self.store, SqliteStore | WriteBehindStore):
            # the rows traced before a write reach their file before the write is durable: a
            # kill -9 that keeps the write keeps the rows (a delivery is never stored untraced)
            self.store.before_durable = self.trace_sink.flush
        self.incarnation = self._next_incarnation()
        self.env = NetEnv(self, loop, time.monotonic() if epoch is None else epoch)
        self.state = NodeState.RUNNING
        self.running = True
        addresses = {name: "{}:{}".format(*self.connections.address(name))
                     for name in self.connections.listener_names()}
        self.env.trace("join", layer=LAYER, transport=self.transport.value,
                       listeners=addresses, incarnation=self.incarnation)
        try:
            self.process = self.factory(self.env)
            self.process.start()
        except Exception as exc:
            self.fail(exc, "while starting")
            raise NetNodeError(f"node {self.node_id} failed to start: {exc!r}") from exc

    def _next_incarnation(self) -> int:
        """One more than the last start's, kept in the store (committed before the process
        runs); with nothing saved (a first start, or no data kept), the tenths of a second
        since ``INCARNATION_EPOCH``: later than any incarnation a run without its data had."""
        saved = get_json(self.store, INCARNATION_TABLE, "incarnation")
        ticks = int((time.time() - INCARNATION_EPOCH) * INCARNATION_TICKS)
        incarnation = int(saved) + 1 if saved is not None else max(2, ticks)
        put_json(self.store, INCARNATION_TABLE, "incarnation", incarnation)
        self.store.commit()
        return incarnation

    async def start(self, *, epoch: float | None = None) -> None:
        """``listen()`` then ``start_process()``."""
        await self.listen()
        self.start_process(epoch=epoch)

    async def close(self) -> None:
        """Stop the process, close listeners, connections and links, flush the trace, close the
        store (uncommitted writes are lost). Idempotent; concurrent callers wait together."""
        if self.state is NodeState.NEW:
            self.state = NodeState.CLOSED
            self.store.close()
            return
        if self._close_task is None:
            self._close_task = asyncio.get_running_loop().create_task(self._close())
        await asyncio.shield(self._close_task)

    async def _close(self) -> None:
        was_running = self.state is NodeState.RUNNING
        if was_running and self.failure is None and self.process is not None:
            stop = getattr(self.process, "stop", None)
            if callable(stop):
                try:
                    stop()
                except Exception as exc:
                    self._record_failure(exc, "while stopping")
        self.state = NodeState.CLOSING
        self.running = False
        for timer in list(self._timers):
            timer.cancel()
        dropped = self.peer_links.close()
        await self.connections.shutdown()
        if self.env is not None:
            self.env.trace("leave", layer=LAYER, dropped_queued=dropped)
        self.trace_sink.flush()
        self.store.close()
        self.state = NodeState.CLOSED
        log.info("%s closed", self.node_id)

    # -- failures --------------------------------------------------------------------------

    def _record_failure(self, exc: BaseException, where: str) -> None:
        log.error("%s: protocol bug %s; stopping the node", self.node_id, where, exc_info=exc)
        if self.env is not None:
            self.env.trace("crash", layer=LAYER, error=repr(exc), where=where)
        if self.failure is None:
            self.failure = exc
            if self.on_failure is not None:
                self.on_failure(self, exc)

    def fail(self, exc: BaseException, where: str) -> None:
        """A protocol bug: log it with its traceback, record it, stop the node."""
        self._record_failure(exc, where)
        self.running = False
        if self._close_task is None and self.state in (NodeState.LISTENING, NodeState.RUNNING):
            self._close_task = asyncio.get_running_loop().create_task(self._close())
        self.activity()

    def activity(self) -> None:
        if self.on_activity is not None:
            self.on_activity()

    # -- trace -----------------------------------------------------------------------------

    def drop(self, reason: str, *, msg: Message | None = None, peer: str | None = None,
             size: int | None = None, **info: Any) -> None:
        """Trace a refused message or frame (layer ``net``, or the message's layer)."""
        if self.env is not None and self.tracing:
            if msg is None:
                self.env.trace("drop", layer=LAYER, peer=peer, size=size, reason=reason, **info)
            else:
                mid, origin, key, seq = msg.trace_ids()
                self.env.trace("drop", layer=layer_of(msg), msg=mid, origin=origin, peer=peer,
                               key=key, seq=seq, size=size, reason=reason, type=msg.TYPE,
                               **info)
        self.activity()

    def conn_row(self, event: str, *, peer: str | None = None, **info: Any) -> None:
        """A row of the connection layer (layer ``conn``)."""
        if self.env is not None and self.tracing:
            self.env.trace(event, layer="conn", peer=peer, **info)

    def trace_message(self, event: str, msg: Message, peer: str, size: int) -> None:
        if self.trace_messages and self.env is not None:
            mid, origin, key, seq = msg.trace_ids()
            self.trace_sink.append(
                (self.run, self.env.now(), self.node_id, layer_of(msg), event, mid, origin,
                 peer, key, seq, size, encode_info({"type": msg.TYPE}), time.time())
            )

    # -- peer messages ---------------------------------------------------------------------

    def _send(self, dst: NodeId, msg: Message) -> None:
        if self.codec is None:
            raise StateError(f"node {self.node_id} has no peer links (listen=None): it cannot "
                             f"send {msg.TYPE}")
        # encoding errors are local bugs (an unregistered type, an oversized message): raised
        frame = self.codec.encode(msg)
        if len(frame) > self.max_frame:
            raise ConfigError(f"{msg.TYPE} encodes to {len(frame)} bytes, over "
                              f"max_frame={self.max_frame} of node {self.node_id}")
        if self.state is not NodeState.RUNNING:
            log.debug("%s: send to %s while %s, discarded", self.node_id, dst, self.state.value)
            return
        if self.loss and self._loss_rng.random() < self.loss:
            # injected loss: the protocol sent it, the "network" lost it (as in the simulator)
            self.trace_message("send", msg, dst, len(frame))
            return
        self.peer_links.send(dst, frame, msg)

    def deliver(self, peer: NodeId, frame: bytes) -> None:
        """A frame from ``peer``'s link: decode it and hand it to the process."""
        if not self.running or self.process is None or self.codec is None:
            return
        try:
            msg = self.codec.decode(frame)
        except ProtocolError as exc:
            self.overload.warn(f"bad_frame {self.node_id} {peer} {exc.reason}",
                          "%s: dropped a frame from %s: %s: %s", self.node_id, peer,
                          exc.reason, exc)
            self.drop(exc.reason, peer=peer, size=len(frame), error=str(exc))
            return
        self.trace_message("recv", msg, peer, len(frame))
        try:
            cast(MessageHandler, self.process).on_message(peer, msg)
        except ProtocolError as exc:
            self.overload.warn(f"refused {self.node_id} {peer} {exc.reason}",
                          "%s: dropped %s from %s: %s: %s", self.node_id, msg.TYPE, peer,
                          exc.reason, exc)
            self.drop(exc.reason, msg=msg, peer=peer, size=len(frame), error=str(exc))
            return
        except Exception as exc:
            self.fail(exc, f"handling {msg.TYPE} from {peer}")
            return
        self.activity()

    def unreachable(self, peer: NodeId) -> None:
        """The link to ``peer`` failed (once per outage): ``process.on_unreachable(peer)``."""
        if not self.running or self.process is None:
            return
        hook = getattr(self.process, "on_unreachable", None)
        if hook is None:
            return
        try:
            hook(peer)
        except Exception as exc:
            self.fail(exc, f"in on_unreachable({peer})")

    def link_connected(self, peer: NodeId) -> bool:
        """Whether the outbound link to ``peer`` is connected right now."""
        return self.peer_links.connected(peer)

    def connect_failures(self, peer: NodeId) -> int:
        """Failed dial attempts of the outbound link to ``peer`` so far."""
        link = self.peer_links.links.get(peer)
        return 0 if link is None else link.connect_failures

    def queued(self, peer: NodeId) -> int:
        """Messages waiting for the outbound link to ``peer`` to connect."""
        link = self.peer_links.links.get(peer)
        return 0 if link is None else len(link.queue)

    # -- timers and calls ------------------------------------------------------------------

    def _run_timer(self, fn: Callable[[], None]) -> None:
        if not self.running:
            return
        try:
            fn()
        except Exception as exc:
            self.fail(exc, "in a timer")
            return
        self.activity()

    def _run_committed(self, fn: Callable[[], None]) -> None:
        """A ``commit_then`` callback: its writes are on disk."""
        if not self.running:
            return
        try:
            fn()
        except Exception as exc:
            self.fail(exc, "after a commit")
            return
        self.activity()

    def _store_failed(self, exc: BaseException) -> None:
        self.fail(exc, "committing the store")

    def call(self, fn: Callable[[Process], object]) -> None:
        """Run ``fn(process)`` now (from the loop's thread); a bug in it stops the node."""
        if self.state is not NodeState.RUNNING or self.process is None:
            raise StateError(f"node {self.node_id} is {self.state.value}: cannot call it")
        try:
            fn(self.process)
        except Exception as exc:
            self.fail(exc, "in a call")
            raise
        self.activity()
