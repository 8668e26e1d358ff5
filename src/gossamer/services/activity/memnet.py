"""A deterministic in-memory network of activity servers and clients (virtual time, one seed).

Connections are TCP-like: per direction FIFO, seeded latency, close delivered after what was
in flight. Servers crash (connections drop, uncommitted store writes are lost) and rejoin;
links can go silent (``blackhole``) to show parent loss by missing announcements. Clients
trace ``deliver`` rows under their own name so reliability and FIFO can be checked.
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
import random
from collections.abc import Callable
from typing import Any

from ...core.env import Store, TimerHandle
from ...core.errors import ConfigError, StateError
from ...core.ids import NodeId
from ...core.messages import Message
from ...core.trace import MemorySink, encode_info
from ...protocols.activity import (
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
    LoginSuccess,
    Redirect,
    Register,
    Send,
    ServerConfig,
    activity_ids,
)
from ...runtimes.sim import MemoryStore

__all__ = ["MemClient", "MemNet"]

RUN = "memnet"


class _Timer:
    __slots__ = ("cancelled",)

    def __init__(self) -> None:
        self.cancelled = False


class _Env:
    """``Env`` of one server incarnation in a ``MemNet``."""

    def __init__(self, net: MemNet, node: str, store: MemoryStore) -> None:
        self._net = net
        self._node = node
        self._store = store
        self._rng = random.Random(f"{net.seed}/{node}/{net.incarnations}")
        self.alive = True

    @property
    def node(self) -> NodeId:
        return self._node

    def now(self) -> float:
        return self._net.now

    def send(self, dst: NodeId, msg: Message) -> None:
        raise StateError("activity servers talk over connections, not env.send")

    def set_timer(self, delay: float, fn: Callable[[], None]) -> TimerHandle:
        timer = _Timer()

        def fire() -> None:
            if not timer.cancelled and self.alive:
                fn()

        self._net.schedule(delay, fire)
        return timer

    def cancel(self, handle: TimerHandle) -> None:
        if isinstance(handle, _Timer):
            handle.cancelled = True

    @property
    def rng(self) -> random.Random:
        return self._rng

    def trace(self, event: str, *, layer: str, msg: str | None = None,
              origin: str | None = None, peer: str | None = None, key: str | None = None,
              seq: int | None = None, size: int | None = None, **info: Any) -> None:
        if self.alive:
            self._net.row(self._node, layer, event, msg, origin, peer, key, seq, size, info)

    @property
    def store(self) -> Store:
        return self._store

    @property
    def tracing(self) -> bool:
        return True  # every row goes to the net's table


@dataclasses.dataclass(eq=False)
class _End:
    """One end of a connection: a server's conn, or a client."""

    server: str | None
    conn: str
    client: MemClient | None = None
    peer: _End | None = None
    open: bool = True
    last_arrival: float = 0.0  # per direction FIFO: nothing arrives before what was sent first


class MemClient:
    """A scripted client: records what it receives, follows REDIRECT (logging in again)."""

    def __init__(self, net: MemNet, name: str, *, follow_redirects: bool = True,
                 client_ids: bool = False) -> None:
        self.net = net
        self.name = name
        self.follow_redirects = follow_redirects
        self.client_ids = client_ids  # name itself as the origin and number its activities
        self.seq = 0
        self.joined = False
        self.received: list[ActivityWire] = []
        self.activities: list[dict[str, Any]] = []
        self.end: _End | None = None
        self.server: str | None = None
        self.login_msg: Login | None = None
        self.closed = False
        self.redirects = 0

    @property
    def connected(self) -> bool:
        return self.end is not None and self.end.open

    def connect(self, server: str) -> None:
        self.closed = False
        self.server = server
        self.end = self.net.open_client(self, server)

    def send(self, msg: ActivityWire | bytes | str) -> None:
        if self.end is None or not self.end.open:
            raise StateError(f"client {self.name} is not connected")
        data = msg if isinstance(msg, bytes | str) else self.net.codec.encode(msg)
        self.net.transmit(self.end, data)

    def login(self, username: str = "anonymous", secret: str | None = None) -> None:
        self.login_msg = Login(username=username, secret=secret)
        self.send(self.login_msg)

    def register(self, username: str, secret: str) -> None:
        self.send(Register(username=username, secret=secret))

    def publish(self, activity: dict[str, Any]) -> None:
        assert self.login_msg is not None, "log in first"
        if self.client_ids:
            self.seq += 1
            activity = {**activity, ORIGIN_KEY: self.name, SEQ_KEY: self.seq}
            # the publisher has its own activity (the server sends it to the others only)
            self.net.row(self.name, LAYER, "deliver", f"{self.name}#{self.seq}", self.name,
                         self.server, None, self.seq, None, {"own": True})
        self.send(ActivityMessage(username=self.login_msg.username,
                                  secret=self.login_msg.secret, activity=activity))

    def close(self) -> None:
        if self.end is not None and self.end.open:
            self._left("close")
            self.net.close_end(self.end)

    def _left(self, reason: str) -> None:
        if self.joined:
            self.joined = False
            self.net.row(self.name, LAYER, "leave", None, None, self.server, None, None, None,
                         {"reason": reason})

    def last(self) -> ActivityWire:
        return self.received[-1]

    def on_line(self, data: bytes) -> None:
        msg = self.net.codec.decode(data)
        self.received.append(msg)
        if isinstance(msg, ActivityBroadcast):
            self.activities.append(msg.activity)
            ids = activity_ids(msg.activity)
            origin, seq = ids if ids is not None else (None, None)
            self.net.row(self.name, LAYER, "deliver", None if ids is None else f"{origin}#{seq}",
                         origin, self.server, None, seq, len(data), {})
        elif isinstance(msg, LoginSuccess):
            self.joined = True  # connected to the network from now: expected to deliver
            self.net.row(self.name, LAYER, "join", None, None, self.server, None, None, None,
                         {})
        elif isinstance(msg, Redirect) and self.follow_redirects:
            self.redirects += 1
            target = self.net.addresses.get((msg.hostname, msg.port))
            self.close()
            if target is not None and self.login_msg is not None:
                login = self.login_msg
                self.connect(target)
                self.send(login)

    def on_closed(self) -> None:
        self._left("closed")
        self.closed = True


class MemNet:
    """Servers by id, reachable at ("mem", port) addresses; ``run_for`` advances time."""

    def __init__(self, seed: int, *, latency: tuple[float, float] = (0.001, 0.01),
                 announce_interval: float = 1.0, secret: str = "network-secret",
                 max_depth: int | None = None) -> None:
        if not 0 <= latency[0] <= latency[1]:
            raise ConfigError(f"latency must be 0 <= lo <= hi, got {latency}")
        self.seed = seed
        self.latency = latency
        self.announce_interval = announce_interval
        self.secret = secret
        self.max_depth = max_depth
        self.rng = random.Random(seed)
        self.now = 0.0
        self.codec = ActivityCodec()
        self.sink = MemorySink()
        self.servers: dict[str, ActivityServer] = {}
        self.stores: dict[str, MemoryStore] = {}
        self.envs: dict[str, _Env] = {}
        self.addresses: dict[tuple[str, int], str] = {}
        self.ports: dict[str, int] = {}
        self.blackholed: set[frozenset[str]] = set()
        self.incarnations = 0
        self._ends: dict[tuple[str, str], _End] = {}
        self._events: list[tuple[float, int, Callable[[], None]]] = []
        self._order = itertools.count()
        self._conns = itertools.count(1)

    # -- time ------------------------------------------------------------------------------

    def schedule(self, delay: float, fn: Callable[[], None]) -> None:
        heapq.heappush(self._events, (self.now + delay, next(self._order), fn))

    def run_for(self, seconds: float) -> None:
        until = self.now + seconds
        while self._events and self._events[0][0] <= until:
            t, _, fn = heapq.heappop(self._events)
            self.now = t
            fn()
        self.now = until

    def row(self, node: str, layer: str, event: str, msg: str | None, origin: str | None,
            peer: str | None, key: str | None, seq: int | None, size: int | None,
            info: dict[str, Any]) -> None:
        self.sink.append((RUN, self.now, node, layer, event, msg, origin, peer, key, seq, size,
                          encode_info(info)))

    # -- servers ---------------------------------------------------------------------------

    def add_server(self, server_id: str, *, parent: str | None = None,
                   **options: Any) -> ActivityServer:
        if server_id in self.servers:
            raise ConfigError(f"server {server_id} is running already")
        port = self.ports.setdefault(server_id, 4000 + len(self.ports))
        remote = None if parent is None else ("mem", self.ports[parent])
        config = ServerConfig(secret=options.pop("secret", self.secret), hostname="mem",
                              port=port, server_id=server_id, remote=remote,
                              announce_interval=self.announce_interval,
                              reconnect_delay=self.announce_interval,
                              max_depth=self.max_depth, hash_iterations=10, **options)
        store = self.stores.setdefault(server_id, MemoryStore())
        self.incarnations += 1
        env = _Env(self, server_id, store)
        server = ActivityServer(env, config)
        server.on_action = lambda action: self._act(server_id, action)
        self.servers[server_id] = server
        self.envs[server_id] = env
        self.addresses[("mem", port)] = server_id
        self.row(server_id, LAYER, "recover" if self.incarnations > 1 else "join",
                 None, None, None, None, None, None, {})
        server.start()
        return server

    def crash(self, server_id: str) -> None:
        """Stop ``server_id`` at once: its connections close, uncommitted writes are lost."""
        server = self.servers.pop(server_id)
        env = self.envs.pop(server_id)
        self.row(server_id, LAYER, "crash", None, None, None, None, None, None, {})
        env.alive = False
        self.stores[server_id].crash()
        del self.addresses[("mem", server.config.port)]
        for (owner, _conn), end in list(self._ends.items()):
            if owner == server_id and end.open:
                self.close_end(end, notify_self=False)

    def blackhole(self, a: str, b: str) -> None:
        """Links between servers ``a`` and ``b`` silently drop everything from now on."""
        self.blackholed.add(frozenset((a, b)))

    # -- connections -----------------------------------------------------------------------

    def _latency(self) -> float:
        lo, hi = self.latency
        return self.rng.uniform(lo, hi)

    def _deliver_at(self, end: _End) -> float:
        t = max(self.now + self._latency(), end.last_arrival)
        end.last_arrival = t
        return t - self.now

    def open_client(self, client: MemClient, server_id: str) -> _End:
        if server_id not in self.servers:
            raise StateError(f"server {server_id} is not running")
        conn = f"in-{next(self._conns)}"
        server_end = _End(server_id, conn)
        client_end = _End(None, client.name, client=client, peer=server_end)
        server_end.peer = client_end
        self._ends[(server_id, conn)] = server_end
        self._accept(server_end)
        return client_end

    def _accept(self, server_end: _End) -> None:
        server = self.servers.get(server_end.server or "")
        if server is not None and server_end.open:
            server.connected(server_end.conn)

    def _act(self, server_id: str, action: Send | Close | Dial) -> None:
        if server_id not in self.servers:
            return
        if isinstance(action, Send):
            end = self._ends.get((server_id, action.conn))
            if end is not None and end.open:
                self.transmit(end, self.codec.encode(action.msg))
        elif isinstance(action, Close):
            end = self._ends.get((server_id, action.conn))
            if end is not None and end.open:
                self.close_end(end, notify_self=False)
        else:
            self._dial(server_id, action)

    def _dial(self, server_id: str, dial: Dial) -> None:
        mine = _End(server_id, dial.conn)
        self._ends[(server_id, dial.conn)] = mine
        target = self.addresses.get((dial.host, dial.port))
        if target is None:
            def refused() -> None:
                mine.open = False
                server = self.servers.get(server_id)
                if server is not None:
                    server.closed(dial.conn)
            self.schedule(self._latency(), refused)
            return
        theirs = _End(target, f"in-{next(self._conns)}", peer=mine)
        mine.peer = theirs
        self._ends[(target, theirs.conn)] = theirs
        self._accept(theirs)

        def established() -> None:
            server = self.servers.get(server_id)
            if server is not None and mine.open:
                server.connected(dial.conn)
        self.schedule(self._latency(), established)

    def _silenced(self, end: _End) -> bool:
        peer = end.peer
        return (peer is not None and end.server is not None and peer.server is not None
                and frozenset((end.server, peer.server)) in self.blackholed)

    def transmit(self, end: _End, data: bytes | str) -> None:
        """Send ``data`` from ``end`` to its peer, after what it sent before."""
        peer = end.peer
        if peer is None or self._silenced(end):
            return
        raw = data.encode() if isinstance(data, str) else data

        def arrive() -> None:
            if not peer.open:
                return
            if peer.client is not None:
                peer.client.on_line(raw)
            elif peer.server in self.servers:
                self.servers[peer.server].line(peer.conn, raw)
        self.schedule(self._deliver_at(end), arrive)

    def close_end(self, end: _End, *, notify_self: bool = True) -> None:
        """Close ``end``; its peer hears of it after everything ``end`` sent before."""
        end.open = False
        if notify_self:
            self._closed(end)
        peer = end.peer
        if peer is None or self._silenced(end):
            return

        def arrive() -> None:
            if peer.open:
                peer.open = False
                self._closed(peer)
        self.schedule(self._deliver_at(end), arrive)

    def _closed(self, end: _End) -> None:
        if end.client is not None:
            end.client.on_closed()
        elif end.server in self.servers:
            self.servers[end.server].closed(end.conn)
