"""Seed-003 servers and scripted clients as simulator nodes (``gossamer.runtimes.sim``).

The simulator has nodes and datagrams (``env.send``); seed 003 has TCP connections. This module
carries connections over datagrams, TCP-like: a connection is a pair of node ids plus a
connection id inside every ``Frame``; lines on one connection arrive in order (numbered, a
reorder buffer puts them back in order, so links may reorder); a close arrives after every line
sent before it. A crashed node says nothing: its peers find out by keepalives (no frame for
``dead_after`` seconds) or, once it is back, by a ``reset`` answering a frame for a connection
it no longer knows. Lost frames are not repaired: links must not lose (as TCP), or the loss is
seen as a broken connection only when keepalives stop.

``ActivityNode`` runs the unchanged ``ActivityServer`` core; ``SimClient`` is a scripted client
(register or log in, follow REDIRECT, reconnect to the next server when its server goes away,
publish on request). Clients trace ``join`` (logged in, not redirected), ``leave``, ``deliver``
(also of their own activities) and registration outcomes, under layer ``activity``.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Sequence
from typing import Any

from ...core.env import Env, Store, TimerHandle
from ...core.errors import ConfigError, ProtocolError
from ...core.ids import NodeId
from ...core.messages import Message, message
from ...protocols.activity import (
    ANONYMOUS,
    LAYER,
    ORIGIN_KEY,
    SEQ_KEY,
    ActivityBroadcast,
    ActivityCodec,
    ActivityMessage,
    ActivityServer,
    ActivityWire,
    Close,
    Dial,
    Login,
    LoginFailed,
    LoginSuccess,
    Redirect,
    Register,
    RegisterFailed,
    RegisterSuccess,
    Send,
    ServerConfig,
    activity_ids,
)

__all__ = ["PORT", "ActivityNode", "ClientScript", "Frame", "SimClient"]

PORT = 3780  # every simulated server listens on (its node id, PORT)
KINDS = frozenset({"open", "accept", "data", "close", "reset", "ping"})


@message("activity_conn.frame")
class Frame(Message):
    """``kind``: open, accept, data (``lines`` numbered from ``n``), close (after ``n`` lines),
    reset (no such connection) or ping (keepalive)."""

    conn: str
    kind: str
    n: int = 0
    lines: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown frame kind {self.kind!r}")
        if self.n < 0:
            raise ValueError(f"n must be >= 0, got {self.n}")


@dataclasses.dataclass(eq=False)
class _Link:
    wire: str  # the id in frames
    name: str  # what the local endpoint calls it
    peer: NodeId
    established: bool
    heard: float
    sent: int = 0
    delivered: int = 0
    pending: dict[int, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    close_at: int | None = None


class Connections:
    """TCP-like connections of one node over ``env.send`` (see the module docstring)."""

    def __init__(self, env: Env, *, on_connected: Callable[[str], None],
                 on_line: Callable[[str, str], None], on_closed: Callable[[str], None],
                 on_accept: Callable[[str], None] | None = None,
                 keepalive: float = 0.5, dead_after: float = 2.0) -> None:
        if not 0 < keepalive < dead_after:
            raise ConfigError(f"need 0 < keepalive < dead_after, got {keepalive}, {dead_after}")
        self.env = env
        self.on_connected = on_connected
        self.on_line = on_line
        self.on_closed = on_closed
        self.on_accept = on_accept  # None: incoming connections are refused (a client)
        self.keepalive = keepalive
        self.dead_after = dead_after
        self._token = f"{env.rng.getrandbits(32):08x}"
        self._dials = 0
        self._by_wire: dict[str, _Link] = {}
        self._by_name: dict[str, _Link] = {}
        self._tick: TimerHandle | None = None

    def start(self) -> None:
        self._tick = self.env.set_timer(self.keepalive, self._on_tick)

    def stop(self) -> None:
        if self._tick is not None:
            self.env.cancel(self._tick)
            self._tick = None

    def is_open(self, name: str) -> bool:
        return name in self._by_name

    def dial(self, name: str, node: NodeId) -> None:
        self._dials += 1
        wire = f"{self.env.node}/{self._token}/{self._dials}"
        link = _Link(wire, name, node, established=False, heard=self.env.now())
        self._add(link)
        self.env.send(node, Frame(conn=wire, kind="open"))

    def send(self, name: str, lines: Sequence[str]) -> None:
        link = self._by_name.get(name)
        if link is None or not lines:
            return
        self.env.send(link.peer, Frame(conn=link.wire, kind="data", n=link.sent,
                                       lines=tuple(lines)))
        link.sent += len(lines)

    def close(self, name: str) -> None:
        """Close from this side: the peer hears of it after the lines sent before."""
        link = self._by_name.get(name)
        if link is not None:
            self._remove(link)
            self.env.send(link.peer, Frame(conn=link.wire, kind="close", n=link.sent))

    # -- frames ------------------------------------------------------------------------------

    def on_frame(self, src: NodeId, frame: Frame) -> None:
        link = self._by_wire.get(frame.conn)
        if link is not None and link.peer != src:
            return  # not the peer of this connection: ignore
        if link is None:
            if frame.kind == "open" and self.on_accept is not None:
                link = _Link(frame.conn, frame.conn, src, established=True, heard=self.env.now())
                self._add(link)
                self.env.send(src, Frame(conn=frame.conn, kind="accept"))
                self.on_accept(frame.conn)
            elif frame.kind not in ("reset", "close"):
                self.env.send(src, Frame(conn=frame.conn, kind="reset"))
            return
        link.heard = self.env.now()
        if frame.kind == "accept" and not link.established:
            link.established = True
            self.on_connected(link.name)
        elif frame.kind == "data":
            if frame.n >= link.delivered:
                link.pending[frame.n] = frame.lines
            self._deliver(link)
        elif frame.kind == "close":
            link.close_at = frame.n
            self._deliver(link)
        elif frame.kind == "reset":
            self._lost(link)

    def _deliver(self, link: _Link) -> None:
        while link.delivered in link.pending and link.name in self._by_name:
            lines = link.pending.pop(link.delivered)
            link.delivered += len(lines)
            for line in lines:
                if link.name not in self._by_name:
                    return  # the endpoint closed it while handling an earlier line
                self.on_line(link.name, line)
        if (link.close_at is not None and link.delivered >= link.close_at
                and link.name in self._by_name):
            self._lost(link)

    def _lost(self, link: _Link) -> None:
        self._remove(link)
        self.on_closed(link.name)

    def _on_tick(self) -> None:
        self._tick = self.env.set_timer(self.keepalive, self._on_tick)
        now = self.env.now()
        for link in list(self._by_wire.values()):
            if now - link.heard > self.dead_after:
                self._lost(link)
            elif link.established:
                self.env.send(link.peer, Frame(conn=link.wire, kind="ping"))

    def _add(self, link: _Link) -> None:
        self._by_wire[link.wire] = link
        self._by_name[link.name] = link

    def _remove(self, link: _Link) -> None:
        self._by_wire.pop(link.wire, None)
        self._by_name.pop(link.name, None)


class _FlushingEnv:
    """The node's env for the server core: after each of the core's timers, its actions go
    out (batched per connection)."""

    def __init__(self, env: Env, flush: Callable[[], None]) -> None:
        self._env = env
        self._flush = flush

    @property
    def node(self) -> NodeId:
        return self._env.node

    def now(self) -> float:
        return self._env.now()

    def send(self, dst: NodeId, msg: Message) -> None:
        self._env.send(dst, msg)

    def set_timer(self, delay: float, fn: Callable[[], None]) -> TimerHandle:
        def fire() -> None:
            fn()
            self._flush()
        return self._env.set_timer(delay, fire)

    def cancel(self, handle: TimerHandle) -> None:
        self._env.cancel(handle)

    @property
    def rng(self) -> random.Random:
        return self._env.rng

    def trace(self, event: str, *, layer: str, msg: str | None = None,
              origin: str | None = None, peer: str | None = None, key: str | None = None,
              seq: int | None = None, size: int | None = None, **info: Any) -> None:
        self._env.trace(event, layer=layer, msg=msg, origin=origin, peer=peer, key=key,
                        seq=seq, size=size, **info)

    @property
    def store(self) -> Store:
        return self._env.store

    @property
    def tracing(self) -> bool:
        return self._env.tracing


class ActivityNode:
    """One activity server as a simulator process. ``remote`` (a node id) is where it joins."""

    def __init__(self, env: Env, *, secret: str, remote: NodeId | None = None,
                 announce_interval: float = 1.0, keepalive: float = 0.5,
                 dead_after: float = 2.0, drop_broadcasts: bool = False,
                 **options: Any) -> None:
        self.env = env
        # broken on purpose (experiments): relay no ACTIVITY_BROADCAST to anyone
        self.drop_broadcasts = drop_broadcasts
        config = ServerConfig(secret=secret, hostname=env.node, port=PORT, server_id=env.node,
                              remote=None if remote is None else (remote, PORT),
                              announce_interval=announce_interval,
                              reconnect_delay=announce_interval,
                              hash_iterations=options.pop("hash_iterations", 10), **options)
        self.core = ActivityServer(_FlushingEnv(env, self.flush), config)
        self.conns = Connections(env, on_connected=self._connected, on_line=self._line,
                                 on_closed=self._closed, on_accept=self._connected,
                                 keepalive=keepalive, dead_after=dead_after)

    def start(self) -> None:
        self.conns.start()
        self.core.start()
        self.flush()

    def stop(self) -> None:
        self.core.stop()
        self.flush()
        self.conns.stop()

    def on_message(self, src: NodeId, msg: Message) -> None:
        if isinstance(msg, Frame):
            self.conns.on_frame(src, msg)
            self.flush()

    def mark(self, event: str, **info: Any) -> None:
        """Trace a membership row (``join``/``leave``, layer ``activity``) for this server:
        experiments mark the windows around a server crash in which seed 003 promises no
        delivery."""
        self.env.trace(event, layer=LAYER, **info)

    def _connected(self, conn: str) -> None:
        self.core.connected(conn)

    def _line(self, conn: str, line: str) -> None:
        self.core.line(conn, line)

    def _closed(self, conn: str) -> None:
        self.core.closed(conn)

    def flush(self) -> None:
        """Carry out the core's actions: lines for one connection in one frame, in order."""
        batch: list[str] = []
        batch_conn: str | None = None
        codec = self.core.codec
        for action in self.core.drain():
            if (self.drop_broadcasts and isinstance(action, Send)
                    and isinstance(action.msg, ActivityBroadcast)):
                continue
            if isinstance(action, Send) and action.conn == batch_conn:
                batch.append(codec.encode(action.msg).decode())
                continue
            if batch_conn is not None:
                self.conns.send(batch_conn, batch)
            batch, batch_conn = [], None
            if isinstance(action, Send):
                batch, batch_conn = [codec.encode(action.msg).decode()], action.conn
            elif isinstance(action, Close):
                self.conns.close(action.conn)
            elif isinstance(action, Dial):
                self.conns.dial(action.conn, action.host)
        if batch_conn is not None:
            self.conns.send(batch_conn, batch)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ClientScript:
    """What a ``SimClient`` does: ``servers`` to try in turn (the first at start), as
    ``username`` (registering it first with ``secret`` when ``register``)."""

    servers: tuple[NodeId, ...]
    username: str = ANONYMOUS
    secret: str | None = None
    register: bool = False
    reconnect_delay: float = 0.5

    def __post_init__(self) -> None:
        if not self.servers:
            raise ConfigError("a client needs at least one server")
        if self.username != ANONYMOUS and self.secret is None:
            raise ConfigError("a named client needs its secret")


class SimClient:
    """A scripted client node; ``publish(activity)`` sends one if logged in (else False)."""

    def __init__(self, env: Env, script: ClientScript, *, keepalive: float = 0.5,
                 dead_after: float = 2.0) -> None:
        self.env = env
        self.script = script
        self.codec = ActivityCodec()
        self.conns = Connections(env, on_connected=self._connected, on_line=self._line,
                                 on_closed=self._closed, keepalive=keepalive,
                                 dead_after=dead_after)
        self.username = script.username
        self.registering = script.register
        self.register_result: bool | None = None
        self.joined = False
        self.stopped = False
        self.server: NodeId | None = None
        self.next_server = 0
        self.seq = 0
        self.connections = 0
        self.conn: str | None = None
        self.activities: list[dict[str, Any]] = []
        self._retry: TimerHandle | None = None

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        self.conns.start()
        self._connect(self._pick())

    def stop(self) -> None:
        self.stopped = True
        if self.conn is not None:
            self._leave("stop")
            self.conns.close(self.conn)
            self.conn = None
        self.conns.stop()
        if self._retry is not None:
            self.env.cancel(self._retry)

    def on_message(self, src: NodeId, msg: Message) -> None:
        if isinstance(msg, Frame):
            self.conns.on_frame(src, msg)

    def _pick(self) -> NodeId:
        servers = self.script.servers
        server = servers[self.next_server % len(servers)]
        self.next_server += 1
        return server

    def _connect(self, server: NodeId) -> None:
        self.connections += 1
        self.conn = f"c{self.connections}"
        self.server = server
        self.conns.dial(self.conn, server)

    def _send(self, msg: ActivityWire) -> None:
        if self.conn is not None:
            self.conns.send(self.conn, [self.codec.encode(msg).decode()])

    def _trace(self, event: str, **fields: Any) -> None:
        self.env.trace(event, layer=LAYER, peer=self.server, **fields)

    def mark(self, event: str, **info: Any) -> None:
        """Trace a membership row (``join``/``leave``) without changing the connection, if
        logged in: experiments end the client's session before a server crash and start a
        new one once the tree has healed (seed 003 promises no delivery across the crash)."""
        if self.joined:
            self._trace(event, **info)

    def _leave(self, reason: str) -> None:
        if self.joined:
            self.joined = False
            self._trace("leave", reason=reason)

    # -- connection events ---------------------------------------------------------------

    def _connected(self, conn: str) -> None:
        if self.registering:
            assert self.script.secret is not None
            self._send(Register(username=self.username, secret=self.script.secret))
        else:
            self._login()

    def _login(self) -> None:
        self._send(Login(username=self.username,
                         secret=None if self.username == ANONYMOUS else self.script.secret))

    def _line(self, conn: str, line: str) -> None:
        try:
            msg = self.codec.decode(line)
        except ProtocolError as exc:
            self._trace("drop", reason=exc.reason)
            return
        if isinstance(msg, ActivityBroadcast):
            self.activities.append(msg.activity)
            ids = activity_ids(msg.activity)
            origin, seq = ids if ids is not None else (None, None)
            self._trace("deliver", msg=None if ids is None else f"{origin}#{seq}",
                        origin=origin, seq=seq, size=len(line))
        elif isinstance(msg, LoginSuccess):
            self.joined = True
            self._trace("join")
        elif isinstance(msg, Redirect):
            self._leave("redirect")
            self.conns.close(conn)
            self._connect(msg.hostname)
        elif isinstance(msg, RegisterSuccess):
            self.registering = False
            self.register_result = True
            self._trace("registered", user=self.username)
            self._login()
        elif isinstance(msg, RegisterFailed | LoginFailed):
            # the name is someone else's: carry on anonymously (the server closes)
            if isinstance(msg, RegisterFailed) and self.registering:
                self.register_result = False
                self._trace("register_failed", user=self.username)
            self.registering = False
            self.username = ANONYMOUS

    def _closed(self, conn: str) -> None:
        if conn != self.conn:
            return
        self._leave("closed")
        self.conn = None
        if not self.stopped:
            self._retry = self.env.set_timer(self.script.reconnect_delay, self._reconnect)

    def _reconnect(self) -> None:
        self._retry = None
        if not self.stopped and self.conn is None:
            self._connect(self._pick())

    # -- workload ------------------------------------------------------------------------

    def publish(self, activity: dict[str, Any]) -> bool:
        """Send ``activity`` (stamped with this client's id and next seq) if logged in."""
        if not self.joined or self.conn is None:
            return False
        self.seq += 1
        origin = self.env.node
        stamped = {**activity, ORIGIN_KEY: origin, SEQ_KEY: self.seq}
        self._send(ActivityMessage(username=self.username,
                                   secret=None if self.username == ANONYMOUS
                                   else self.script.secret, activity=stamped))
        # the publisher has its own activity (the server sends it to the others only)
        self._trace("deliver", msg=f"{origin}#{self.seq}", origin=origin, seq=self.seq,
                    own=True)
        return True
