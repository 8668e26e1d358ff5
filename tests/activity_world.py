"""Seed-003 servers and hand-driven clients in the simulator, for tests of every message and
rule: the servers are the unchanged ``ActivityServer`` on simulated connections, and a
``MemClient`` sends exactly the frames a test gives it and records what comes back."""

from __future__ import annotations

from typing import Any

from gossamer.core import Conn, Env, ListenerSpec, MemorySink
from gossamer.core.errors import StateError
from gossamer.protocols.activity import (
    LAYER,
    ORIGIN_KEY,
    SEQ_KEY,
    ActivityBroadcast,
    ActivityCodec,
    ActivityMessage,
    ActivityServer,
    ActivityWire,
    Login,
    LoginSuccess,
    Redirect,
    Register,
    ServerConfig,
    activity_ids,
)
from gossamer.runtimes.sim import LinkModel, MemoryStore, NodeStatus, Simulation, Uniform

PORT = 4000
RUN = "memnet"
LISTENER_OPTIONS = ("max_connections", "reserved_for_peers", "handshake_timeout",
                    "idle_timeout", "send_queue_limit")


class MemNet:
    """Servers by id, each listening at ``id:PORT``; ``run_for`` advances virtual time."""

    def __init__(self, seed: int, *, latency: tuple[float, float] = (0.001, 0.01),
                 announce_interval: float = 1.0, secret: str = "network-secret",
                 max_depth: int | None = None) -> None:
        self.seed = seed
        self.announce_interval = announce_interval
        self.secret = secret
        self.max_depth = max_depth
        self.sink = MemorySink()
        self.sim = Simulation(seed=seed, link=LinkModel(latency=Uniform(*latency)),
                              trace=self.sink, run=RUN)
        self.codec = ActivityCodec()
        self._configs: dict[str, ServerConfig] = {}

    @property
    def now(self) -> float:
        return self.sim.now

    def run_for(self, seconds: float) -> None:
        self.sim.run(until=self.sim.now + seconds)

    @property
    def servers(self) -> dict[str, ActivityServer]:
        out = {}
        for node in self.sim.alive():
            process = self.sim.process(node)
            if isinstance(process, ActivityServer):
                out[node] = process
        return out

    @property
    def stores(self) -> dict[str, MemoryStore]:
        return {sid: self.sim.store(sid) for sid in self._configs}

    def add_server(self, server_id: str, *, parent: str | None = None,
                   **options: Any) -> ActivityServer:
        listener = {k: options.pop(k) for k in LISTENER_OPTIONS if k in options}
        max_line = options.get("max_line")
        if max_line is not None:
            listener["max_frame"] = max_line
        config = ServerConfig(secret=options.pop("secret", self.secret), hostname=server_id,
                              port=PORT, server_id=server_id,
                              remote=None if parent is None else (parent, PORT),
                              announce_interval=self.announce_interval,
                              reconnect_delay=self.announce_interval,
                              max_depth=self.max_depth, hash_iterations=10, **options)
        self._configs[server_id] = config
        if server_id in self.sim.nodes():
            if self.sim.status(server_id) is not NodeStatus.CRASHED:
                raise StateError(f"server {server_id} is running already")
            self.sim.recover(server_id)
        else:
            spec = ListenerSpec(name="activity", port=PORT, handshake_timeout=None,
                                **listener)
            self.sim.add_node(server_id, self._server, listeners=[spec])
        process = self.sim.process(server_id)
        assert isinstance(process, ActivityServer)
        return process

    def _server(self, env: Env) -> ActivityServer:
        return ActivityServer(env, self._configs[env.node])

    def crash(self, server_id: str) -> None:
        """Stop ``server_id`` at once: its connections reset, uncommitted writes are lost."""
        self.sim.crash(server_id)

    def blackhole(self, a: str, b: str) -> None:
        """Links between servers ``a`` and ``b`` go silent from now on."""
        self.sim.blackhole(a, b)


class MemClient:
    """A hand-driven client node: sends what it is given, records what it receives, follows
    REDIRECT (logging in again) unless told not to."""

    def __init__(self, net: MemNet, name: str, *, follow_redirects: bool = True,
                 client_ids: bool = False) -> None:
        self.net = net
        self.name = name
        self.follow_redirects = follow_redirects
        self.client_ids = client_ids
        self.seq = 0
        self.joined = False
        self.received: list[ActivityWire] = []
        self.activities: list[dict[str, Any]] = []
        self.server: str | None = None
        self.login_msg: Login | None = None
        self.is_closed = False
        self.redirects = 0
        self.conn: Conn | None = None
        self._open = False
        self._pending: list[bytes] = []
        self.env: Env | None = None
        net.sim.add_node(name, self._bind)

    def _bind(self, env: Env) -> _ClientProcess:
        self.env = env
        return _ClientProcess(self)

    @property
    def connected(self) -> bool:
        return self.conn is not None and not self.is_closed

    def connect(self, server: str) -> None:
        assert self.env is not None
        self.is_closed = False
        self._open = False
        self.server = server
        self.conn = self.env.connect(f"{server}:{PORT}")

    def send(self, msg: ActivityWire | bytes | str) -> None:
        if self.conn is None or self.is_closed:
            raise StateError(f"client {self.name} is not connected")
        data = msg if isinstance(msg, bytes) else (
            msg.encode() if isinstance(msg, str) else self.net.codec.encode(msg))
        if self._open:
            assert self.env is not None
            self.env.write(self.conn, data)
        else:
            self._pending.append(data)

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
            self._trace("deliver", msg=f"{self.name}#{self.seq}", origin=self.name,
                        seq=self.seq, own=True)
        self.send(ActivityMessage(username=self.login_msg.username,
                                  secret=self.login_msg.secret, activity=activity))

    def close(self) -> None:
        if self.conn is not None and not self.is_closed:
            assert self.env is not None
            self._left("close")
            self.env.close(self.conn)
            self.is_closed = True

    def last(self) -> ActivityWire:
        return self.received[-1]

    def server_conn_id(self) -> str:
        """The id the server gave this client's connection (its default origin is
        ``server.<that id>``)."""
        server = self.net.servers[self.server or ""]
        for conn in server.roles:
            if conn.remote.startswith(f"{self.name}:"):
                return conn.id
        raise StateError(f"{self.name} has no connection at {self.server}")

    def _trace(self, event: str, **fields: Any) -> None:
        assert self.env is not None
        self.env.trace(event, layer=LAYER, peer=self.server, **fields)

    def _left(self, reason: str) -> None:
        if self.joined:
            self.joined = False
            self._trace("leave", reason=reason)

    # -- the connection contract ---------------------------------------------------------

    def on_opened(self, conn: Conn) -> None:
        if conn is not self.conn:
            return
        self._open = True
        pending, self._pending = self._pending, []
        assert self.env is not None
        for data in pending:
            self.env.write(conn, data)

    def on_frame(self, conn: Conn, frame: bytes) -> None:
        if conn is not self.conn:
            return
        msg = self.net.codec.decode(frame)
        self.received.append(msg)
        if isinstance(msg, ActivityBroadcast):
            self.activities.append(msg.activity)
            ids = activity_ids(msg.activity)
            origin, seq = ids if ids is not None else (None, None)
            self._trace("deliver", msg=None if ids is None else f"{origin}#{seq}",
                        origin=origin, seq=seq, size=len(frame))
        elif isinstance(msg, LoginSuccess):
            self.joined = True
            self._trace("join")
        elif isinstance(msg, Redirect) and self.follow_redirects:
            self.redirects += 1
            self.close()
            if self.login_msg is not None:
                login = self.login_msg
                self.connect(msg.hostname)
                self.send(login)

    def on_closed(self, conn: Conn) -> None:
        if conn is self.conn:
            self._left("closed")
            self.is_closed = True


class _ClientProcess:
    """The simulator's process of a ``MemClient`` (whose own attributes are test records)."""

    def __init__(self, client: MemClient) -> None:
        self.client = client

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def opened(self, conn: Conn, peer_address: str) -> None:
        self.client.on_opened(conn)

    def received(self, conn: Conn, frame: bytes) -> None:
        self.client.on_frame(conn, frame)

    def closed(self, conn: Conn, reason: str) -> None:
        self.client.on_closed(conn)
