"""The asyncio host: runs sans-I/O protocol processes on real TCP or WebSocket connections.

A ``NetNode`` is one process with its ``NetEnv``, listening server and outbound links; a
``NetHost`` runs many nodes in one event loop. Peer input never crashes a node; protocol bugs
stop the node loudly.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import math
import random
import signal
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import orjson

from ...core.backoff import Backoff, ExponentialBackoff
from ...core.env import Process, ProcessFactory, Store, TimerHandle
from ...core.errors import ConfigError, DecodeError, LocalError, ProtocolError, StateError
from ...core.ids import NodeId, check_node_id
from ...core.messages import Message, WireCodec, default_codec
from ...core.trace import NullSink, TraceSink, encode_info
from .store import SqliteStore
from .transport import (
    Address,
    Connection,
    LinkError,
    Listener,
    TransportKind,
    connect,
    listen,
)

__all__ = [
    "BackoffFactory",
    "NetEnv",
    "NetHost",
    "NetNode",
    "NetNodeError",
    "NodeState",
    "run_until_signalled",
]

log = logging.getLogger("gossamer.net")

LAYER = "net"
BackoffFactory = Callable[[], Backoff]
Resolver = Callable[[NodeId], Address | None]


class NetNodeError(LocalError):
    """A protocol raised something other than a ``ProtocolError``: a bug; its node stopped."""


class NodeState(enum.Enum):
    NEW = "new"  # built, not listening
    LISTENING = "listening"  # bound, process not started
    RUNNING = "running"
    CLOSING = "closing"
    CLOSED = "closed"


def layer_of(msg: Message) -> str:
    return msg.TYPE.partition(".")[0]


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


def _hello(node: NodeId) -> bytes:
    return orjson.dumps({"hello": node})


def _parse_hello(frame: bytes) -> NodeId:
    try:
        obj = orjson.loads(frame)
    except orjson.JSONDecodeError as exc:
        raise DecodeError(f"hello is not JSON: {exc}") from exc
    if not isinstance(obj, dict) or set(obj) != {"hello"}:
        raise DecodeError('expected {"hello": <node id>} as the first frame')
    try:
        return check_node_id(obj["hello"])
    except ConfigError as exc:
        raise DecodeError(f"hello: {exc}") from exc


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


class NetEnv:
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
        return self._loop.time() - self._epoch

    def send(self, dst: NodeId, msg: Message) -> None:
        self._node._send(dst, msg)

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

    def trace(
        self,
        event: str,
        *,
        layer: str,
        msg: str | None = None,
        origin: str | None = None,
        peer: str | None = None,
        key: str | None = None,
        seq: int | None = None,
        size: int | None = None,
        **info: Any,
    ) -> None:
        node = self._node
        if node.tracing:
            node.trace_sink.append(
                (node.run, self.now(), node.node_id, layer, event, msg, origin, peer, key, seq,
                 size, encode_info(info))
            )

    @property
    def store(self) -> Store:
        return self._node.store

    @property
    def tracing(self) -> bool:
        return self._node.tracing


class _Outgoing:
    __slots__ = ("frame", "msg")

    def __init__(self, frame: bytes, msg: Message) -> None:
        self.frame = frame
        self.msg = msg


class _Link:
    """The outbound connection to one peer: dial, say hello, drain a bounded queue; redial."""

    def __init__(self, node: NetNode, peer: NodeId) -> None:
        self.node = node
        self.peer = peer
        self.queue: deque[_Outgoing] = deque()
        self.connected = False
        self.connect_failures = 0  # since the link was made
        self._backoff = node.backoff_factory()
        self._ready = asyncio.Event()  # queue not empty, or the connection was lost
        self._kick = asyncio.Event()  # the peer's address changed: retry without waiting
        self._lost = False
        self._down_reported = False  # on_link_down said so since the last good connection
        self.task = asyncio.get_running_loop().create_task(
            self._run(), name=f"gossamer-link-{node.node_id}-{peer}"
        )

    def enqueue(self, item: _Outgoing) -> bool:
        if len(self.queue) >= self.node.send_queue_limit:
            return False
        self.queue.append(item)
        self._ready.set()
        return True

    def kick(self) -> None:
        self._kick.set()

    def _down(self) -> None:
        # edge-triggered: once per outage, not once per failed redial
        if not self._down_reported:
            self._down_reported = True
            self.node._link_down(self.peer)

    async def _pause(self) -> None:
        self._kick.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._kick.wait(), self._backoff.next_delay())

    async def _run(self) -> None:
        try:
            await self._dial_forever()
        except Exception as exc:  # not network trouble (that is LinkError): our own bug
            self.node._fail(exc, f"in the link to {self.peer}")

    async def _dial_forever(self) -> None:
        node = self.node
        while True:
            address = node.address_of(self.peer)
            if address is None:
                log.warning("%s: no address for peer %s any more", node.node_id, self.peer)
                await self._pause()
                continue
            try:
                conn = await connect(node.transport, address, max_frame=node.max_frame,
                                     timeout=node.connect_timeout)
            except LinkError as exc:
                self.connect_failures += 1
                log.debug("%s -> %s: connect failed: %s", node.node_id, self.peer, exc)
                self._down()
                node._activity()
                await self._pause()
                continue
            try:
                await conn.send(_hello(node.node_id))
                self._backoff.reset()
                self.connected = True
                self._down_reported = False
                log.info("%s -> %s: connected (%s)", node.node_id, self.peer, conn.remote)
                node._activity()
                await self._pump(conn)
            except LinkError as exc:
                log.info("%s -> %s: link lost: %s", node.node_id, self.peer, exc)
                self._down()
            finally:
                self.connected = False
                await conn.close()
            node._activity()
            await self._pause()

    async def _watch(self, conn: Connection) -> None:
        await conn.wait_closed()
        self._lost = True
        self._ready.set()

    async def _pump(self, conn: Connection) -> None:
        self._lost = False
        watcher = asyncio.get_running_loop().create_task(self._watch(conn))
        try:
            while True:
                if self._lost:
                    raise LinkError("closed by the peer")
                if not self.queue:
                    self._ready.clear()
                    await self._ready.wait()
                    continue
                item = self.queue[0]
                await conn.send(item.frame)
                # popped only once written: a message whose write failed goes out again after
                # the reconnect (a duplicate at worst, which the runtime may produce)
                self.queue.popleft()
                self.node._trace_message("send", item.msg, self.peer, len(item.frame))
        finally:
            watcher.cancel()
            await asyncio.gather(watcher, return_exceptions=True)

    async def close(self) -> None:
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)


class NetNode:
    """One protocol process on the network: its env, listening server and outbound links.

    ``await start()`` binds (``address`` is then the bound address), builds the process with
    ``factory(env)`` and calls ``process.start()``; ``await close()`` stops it all.
    """

    def __init__(
        self,
        *,
        node_id: NodeId,
        factory: ProcessFactory,
        listen: Address = ("127.0.0.1", 0),
        transport: str | TransportKind = "tcp",
        peers: Mapping[NodeId, Address] | None = None,
        store: Store | None = None,
        trace: TraceSink | None = None,
        run: str = "net",
        codec: WireCodec = default_codec,
        max_frame: int | None = None,
        send_queue_limit: int = 10_000,
        backoff_factory: BackoffFactory | None = None,
        loss: float = 0.0,
        seed: int = 0,
        trace_messages: bool = True,
        connect_timeout: float = 5.0,
        hello_timeout: float = 10.0,
        max_inbound: int = 1024,
        on_activity: Callable[[], None] | None = None,
    ) -> None:
        self.node_id = check_node_id(node_id)
        if not callable(factory):
            raise ConfigError(f"factory must be callable, got {factory!r}")
        self.factory = factory
        self.listen_address = _check_address(listen, "listen")
        try:
            self.transport = TransportKind(transport)
        except ValueError:
            raise ConfigError(f"transport must be 'tcp' or 'ws', got {transport!r}") from None
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
        codec_ok = (callable(getattr(codec, "encode", None))
                    and callable(getattr(codec, "decode", None))
                    and isinstance(getattr(codec, "max_frame", None), int))
        if not codec_ok:
            raise ConfigError(f"codec must have encode, decode and max_frame, got {codec!r}")
        self.codec = codec
        self.max_frame = codec.max_frame if max_frame is None else max_frame
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
        for name, value in (("connect_timeout", connect_timeout),
                            ("hello_timeout", hello_timeout)):
            if not isinstance(value, int | float) or not value > 0:
                raise ConfigError(f"{name} must be > 0, got {value!r}")
        self.connect_timeout = float(connect_timeout)
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
        #: called with a peer when the outbound link to it is lost or cannot be made, once per
        #: outage (e.g. to tell a membership protocol ``peer_down``); runs like a timer: an
        #: exception in it stops the node
        self.on_link_down: Callable[[NodeId], None] | None = None
        # made last, so that a refused option leaves no open database behind
        self.store: Store = store if store is not None else SqliteStore(":memory:")
        self.state = NodeState.NEW
        self.failure: BaseException | None = None
        self.env: NetEnv | None = None
        self.process: Process | None = None
        self._listener: Listener | None = None
        self._links: dict[NodeId, _Link] = {}
        self._inbound: set[Connection] = set()
        self._timers: set[_Timer] = set()
        self._close_task: asyncio.Task[None] | None = None

    def __repr__(self) -> str:
        return f"NetNode({self.node_id!r}, {self.transport.value}, {self.state.value})"

    # -- addresses -------------------------------------------------------------------------

    @property
    def address(self) -> Address:
        """The bound (host, port); only after ``listen()``."""
        if self._listener is None:
            raise StateError(f"node {self.node_id} is {self.state.value}: not listening")
        return self._listener.address

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
        link = self._links.get(node)
        if link is not None and not link.connected:
            link.kick()

    def address_of(self, node: NodeId) -> Address | None:
        if node == self.node_id and self._listener is not None:
            return self._listener.address
        if self.resolver is not None:
            found = self.resolver(node)
            if found is not None:
                return found
        return self.peers.get(node)

    # -- lifecycle -------------------------------------------------------------------------

    async def listen(self) -> Address:
        """Bind the server; frames are accepted from now on, delivered once started."""
        if self.state is not NodeState.NEW:
            raise StateError(f"node {self.node_id}: listen() in state {self.state.value}")
        self._listener = await listen(self.transport, self.listen_address, self._serve,
                                      max_frame=self.max_frame)
        self.state = NodeState.LISTENING
        log.info("%s listening on %s %s:%d", self.node_id, self.transport.value, *self.address)
        return self.address

    def start_process(self, *, epoch: float | None = None) -> None:
        """Build the process on a fresh env and start it; ``epoch`` is loop time of t=0."""
        if self.state is not NodeState.LISTENING:
            raise StateError(f"node {self.node_id}: start_process() in state {self.state.value}")
        loop = asyncio.get_running_loop()
        self.env = NetEnv(self, loop, loop.time() if epoch is None else epoch)
        self.state = NodeState.RUNNING
        self.env.trace("join", layer=LAYER, address=f"{self.address[0]}:{self.address[1]}",
                       transport=self.transport.value)
        try:
            self.process = self.factory(self.env)
            self.process.start()
        except Exception as exc:
            self._fail(exc, "while starting")
            raise NetNodeError(f"node {self.node_id} failed to start: {exc!r}") from exc

    async def start(self, *, epoch: float | None = None) -> None:
        """``listen()`` then ``start_process()``."""
        await self.listen()
        self.start_process(epoch=epoch)

    async def close(self) -> None:
        """Stop the process, close server, connections and links, flush the trace, close the
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
        self.state = NodeState.CLOSING
        if was_running and self.failure is None and self.process is not None:
            stop = getattr(self.process, "stop", None)
            if callable(stop):
                try:
                    stop()
                except Exception as exc:
                    self._record_failure(exc, "while stopping")
        for timer in list(self._timers):
            timer.cancel()
        if self._listener is not None:
            await self._listener.close()
        inbound, self._inbound = list(self._inbound), set()
        links, self._links = list(self._links.values()), {}
        await asyncio.gather(*(conn.close() for conn in inbound),
                             *(link.close() for link in links))
        if self.env is not None:
            self.env.trace("leave", layer=LAYER, dropped_queued=sum(len(li.queue) for li in links))
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

    def _fail(self, exc: BaseException, where: str) -> None:
        """A protocol bug: log it with its traceback, record it, stop the node."""
        self._record_failure(exc, where)
        if self._close_task is None and self.state in (NodeState.LISTENING, NodeState.RUNNING):
            self._close_task = asyncio.get_running_loop().create_task(self._close())
        self._activity()

    def _activity(self) -> None:
        if self.on_activity is not None:
            self.on_activity()

    # -- sending ---------------------------------------------------------------------------

    def _drop(self, reason: str, *, msg: Message | None = None, peer: str | None = None,
              size: int | None = None, **info: Any) -> None:
        if self.env is not None and self.tracing:
            if msg is None:
                self.env.trace("drop", layer=LAYER, peer=peer, size=size, reason=reason, **info)
            else:
                mid, origin, key, seq = msg.trace_ids()
                self.env.trace("drop", layer=layer_of(msg), msg=mid, origin=origin, peer=peer,
                               key=key, seq=seq, size=size, reason=reason, type=msg.TYPE,
                               **info)
        self._activity()

    def _trace_message(self, event: str, msg: Message, peer: str, size: int) -> None:
        if self.trace_messages and self.env is not None:
            mid, origin, key, seq = msg.trace_ids()
            self.trace_sink.append(
                (self.run, self.env.now(), self.node_id, layer_of(msg), event, mid, origin, peer,
                 key, seq, size, encode_info({"type": msg.TYPE}))
            )

    def _send(self, dst: NodeId, msg: Message) -> None:
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
            self._trace_message("send", msg, dst, len(frame))
            return
        link = self._links.get(dst)
        if link is None:
            if self.address_of(dst) is None:
                log.warning("%s: %s to unknown peer %s dropped", self.node_id, msg.TYPE, dst)
                self._drop("unknown_peer", msg=msg, peer=dst, size=len(frame))
                return
            link = self._links[dst] = _Link(self, dst)
        if not link.enqueue(_Outgoing(frame, msg)):
            log.warning("%s: send queue to %s full (%d), %s dropped", self.node_id, dst,
                        self.send_queue_limit, msg.TYPE)
            self._drop("queue_full", msg=msg, peer=dst, size=len(frame))

    def link_connected(self, peer: NodeId) -> bool:
        """Whether the outbound link to ``peer`` is connected right now."""
        link = self._links.get(peer)
        return link is not None and link.connected

    def connect_failures(self, peer: NodeId) -> int:
        """Failed dial attempts of the outbound link to ``peer`` so far."""
        link = self._links.get(peer)
        return 0 if link is None else link.connect_failures

    def queued(self, peer: NodeId) -> int:
        """Messages waiting in the outbound queue to ``peer``."""
        link = self._links.get(peer)
        return 0 if link is None else len(link.queue)

    def queued_connected(self) -> int:
        """Messages waiting on the links that are connected right now (what a short flush
        before ``close()`` can still get out)."""
        return sum(len(link.queue) for link in self._links.values() if link.connected)

    # -- receiving -------------------------------------------------------------------------

    async def _serve(self, conn: Connection) -> None:
        if self.state not in (NodeState.LISTENING, NodeState.RUNNING):
            await conn.close()
            return
        if len(self._inbound) >= self.max_inbound:
            log.warning("%s: refusing %s, already %d inbound connections", self.node_id,
                        conn.remote, len(self._inbound))
            self._drop("too_many_connections", remote=conn.remote)
            await conn.close()
            return
        self._inbound.add(conn)
        peer: NodeId | None = None
        try:
            try:
                async with asyncio.timeout(self.hello_timeout):
                    first = await conn.recv()
            except TimeoutError:
                log.warning("%s: no hello from %s in %.1fs, closing", self.node_id, conn.remote,
                            self.hello_timeout)
                self._drop("hello_timeout", remote=conn.remote)
                return
            peer = _parse_hello(first)
            log.info("%s <- %s: connected (%s)", self.node_id, peer, conn.remote)
            while True:
                self._receive(peer, await conn.recv())
        except ProtocolError as exc:  # a bad hello, or a frame over the limit: close
            log.warning("%s: closing connection from %s (%s): %s: %s", self.node_id,
                        peer or "?", conn.remote, exc.reason, exc)
            self._drop(exc.reason, peer=peer, error=str(exc), remote=conn.remote)
        except LinkError as exc:
            log.info("%s <- %s: connection ended: %s", self.node_id, peer or conn.remote, exc)
        except Exception as exc:  # not the peer's fault: our own bug
            self._fail(exc, f"serving {peer or conn.remote}")
        finally:
            self._inbound.discard(conn)
            await conn.close()

    def _receive(self, peer: NodeId, frame: bytes) -> None:
        if self.state is not NodeState.RUNNING or self.process is None:
            log.debug("%s: frame from %s while %s, discarded", self.node_id, peer,
                      self.state.value)
            return
        try:
            msg = self.codec.decode(frame)
        except ProtocolError as exc:
            log.warning("%s: dropped a frame from %s: %s: %s", self.node_id, peer, exc.reason,
                        exc)
            self._drop(exc.reason, peer=peer, size=len(frame), error=str(exc))
            return
        self._trace_message("recv", msg, peer, len(frame))
        try:
            self.process.on_message(peer, msg)
        except ProtocolError as exc:
            log.warning("%s: dropped %s from %s: %s: %s", self.node_id, msg.TYPE, peer,
                        exc.reason, exc)
            self._drop(exc.reason, msg=msg, peer=peer, size=len(frame), error=str(exc))
            return
        except Exception as exc:
            self._fail(exc, f"handling {msg.TYPE} from {peer}")
            return
        self._activity()

    def _link_down(self, peer: NodeId) -> None:
        if self.on_link_down is None or self.state is not NodeState.RUNNING:
            return
        try:
            self.on_link_down(peer)
        except Exception as exc:
            self._fail(exc, f"in on_link_down({peer})")

    def _run_timer(self, fn: Callable[[], None]) -> None:
        if self.state is not NodeState.RUNNING:
            return
        try:
            fn()
        except Exception as exc:
            self._fail(exc, "in a timer")
            return
        self._activity()

    def call(self, fn: Callable[[Process], object]) -> None:
        """Run ``fn(process)`` now (from the loop's thread); a bug in it stops the node."""
        if self.state is not NodeState.RUNNING or self.process is None:
            raise StateError(f"node {self.node_id} is {self.state.value}: cannot call it")
        try:
            fn(self.process)
        except Exception as exc:
            self._fail(exc, "in a call")
            raise
        self._activity()


class NetHost:
    """Many ``NetNode`` s in one event loop, sharing one start time and an address book.

    With ``link_local`` (default) every node resolves the other nodes of this host through
    ``directory``, which also keeps the address of a stopped node for its restart.
    """

    def __init__(
        self,
        nodes: Iterable[NetNode] = (),
        *,
        on_activity: Callable[[], None] | None = None,
        link_local: bool = True,
    ) -> None:
        self.nodes: dict[NodeId, NetNode] = {}
        self.directory: dict[NodeId, Address] = {}
        #: called after every delivered message, fired timer, drop and link change
        self.on_activity = on_activity
        self.link_local = link_local
        self.failures: dict[NodeId, BaseException] = {}
        self.epoch: float | None = None
        self._failed: asyncio.Event | None = None
        self._sinks: dict[int, TraceSink] = {}
        for node in nodes:
            self.add(node)

    def add(self, node: NetNode) -> NetNode:
        """Add a node; ``start()`` starts it (again after the host started)."""
        if not isinstance(node, NetNode):
            raise ConfigError(f"expected a NetNode, got {node!r}")
        if node.node_id in self.nodes:
            raise ConfigError(f"node {node.node_id} is already on this host")
        if node.state is not NodeState.NEW:
            raise StateError(f"node {node.node_id} is {node.state.value}: add it before starting")
        self.nodes[node.node_id] = node
        self._sinks.setdefault(id(node.trace_sink), node.trace_sink)
        if node.on_activity is None:
            node.on_activity = self._activity
        node.on_failure = self._node_failed
        if self.link_local:
            node.resolver = self.directory.get
        return node

    def _activity(self) -> None:
        if self.on_activity is not None:
            self.on_activity()

    def _node_failed(self, node: NetNode, exc: BaseException) -> None:
        self.failures.setdefault(node.node_id, exc)
        if self._failed is not None:
            self._failed.set()

    async def wait_failure(self) -> None:
        """Return once any node of this host has failed."""
        if self._failed is None:
            self._failed = asyncio.Event()
        if self.failures:
            return
        await self._failed.wait()

    async def start(self) -> None:
        """Start every added node that is not running yet: bind all, then start processes,
        so that each process can reach every other node of the host from its first step."""
        loop = asyncio.get_running_loop()
        if self.epoch is None:
            self.epoch = loop.time()
        if self._failed is None:
            self._failed = asyncio.Event()
        pending = [node for node in self.nodes.values() if node.state is NodeState.NEW]
        for node in pending:
            await node.listen()
            self.directory[node.node_id] = node.address
        for node in pending:
            node.start_process(epoch=self.epoch)

    async def stop_node(self, node_id: NodeId) -> NetNode:
        """Close one node and take it off the host (its directory entry stays)."""
        node = self.nodes.pop(node_id, None)
        if node is None:
            raise ConfigError(f"no node {node_id} on this host")
        await node.close()
        return node

    async def stop(self) -> None:
        """Close every node, then flush and close every trace sink once."""
        nodes = list(self.nodes.values())
        await asyncio.gather(*(node.close() for node in nodes))
        sinks, self._sinks = list(self._sinks.values()), {}
        for sink in sinks:
            sink.close()


async def run_until_signalled(
    host: NetHost,
    *,
    ready: Callable[[NetHost], None] | None = None,
    signals: Iterable[signal.Signals] = (signal.SIGINT, signal.SIGTERM),
) -> int:
    """Start ``host``, call ``ready(host)``, run until a signal or a node failure, stop cleanly.

    Returns a process exit code: 0 after a signal, 1 if a node failed.
    """
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    installed = list(signals)
    for sig in installed:
        loop.add_signal_handler(sig, stop.set)
    try:
        await host.start()
        if ready is not None:
            ready(host)
        waiters = [loop.create_task(stop.wait()), loop.create_task(host.wait_failure())]
        try:
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()
            await asyncio.gather(*waiters, return_exceptions=True)
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)
        await host.stop()
    for node_id, exc in host.failures.items():
        log.error("node %s failed: %r", node_id, exc)
    return 1 if host.failures else 0
