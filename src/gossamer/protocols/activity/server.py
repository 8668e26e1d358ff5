"""The seed-003 server as a sans-I/O state machine over connections.

A service of the connection contract (``gossamer.core.conn``): the runtime calls ``opened``,
``received`` (one JSON line) and ``closed``; the server answers with ``env.write``,
``env.write_many`` (an activity to every client and server link at once), ``env.close`` and
``env.connect`` (to its parent). A server link that authenticates is promoted, so it may use the
listener's slots kept for servers. Time, timers, randomness, the user store and the trace come
from the ``Env``.
"""

from __future__ import annotations

import hmac
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from ...core.conn import CloseCode, Conn, ConnGroup
from ...core.env import Env, TimerHandle
from ...core.errors import ProtocolError
from .locks import UsernameLocks
from .relay_log import RelayLog
from .server_state import (
    FORGET_WINDOWS,
    LAYER,
    LOG_ORIGINS,
    ORIGIN_KEY,
    RELAY_KEY,
    RELAY_SEQ_KEY,
    SEQ_KEY,
    UNKNOWN_SECRET,
    ClientSession,
    ConnRole,
    KnownServer,
    ServerConfig,
    TreeState,
    activity_ids,
    digest_of,
    relay_ids,
)
from .users import UserTable, is_hash
from .wire import (
    ANONYMOUS,
    MAX_RECEIVED,
    PROTOCOL,
    ActivityBroadcast,
    ActivityCodec,
    ActivityMessage,
    ActivityWire,
    Authenticate,
    AuthenticationFail,
    InvalidMessageReply,
    LockAllowed,
    LockCancel,
    LockDenied,
    LockRequest,
    Login,
    LoginFailed,
    LoginSuccess,
    Logout,
    Redirect,
    Register,
    ServerAnnounce,
    ServerInfo,
)

__all__ = [
    "LAYER",
    "ORIGIN_KEY",
    "SEQ_KEY",
    "ActivityServer",
    "ConnRole",
    "ServerConfig",
    "TreeState",
    "activity_ids",
    "relay_ids",
]

SERVER_ONLY = (ServerAnnounce, ActivityBroadcast, LockRequest, LockDenied, LockAllowed,
               LockCancel, ServerInfo)


class ActivityServer:
    """One server of the activity network; see the module docstring for how it is driven."""

    def __init__(self, env: Env, config: ServerConfig,
                 *, salt: Callable[[], bytes] | None = None) -> None:
        self.env = env
        self.config = config
        self.id = config.server_id or env.node
        self.codec = ActivityCodec(max_frame=config.max_line)
        self.users = UserTable(env.store, salt=salt or (lambda: env.rng.randbytes(16)),
                               iterations=config.hash_iterations)
        self.level = 0
        self.state = TreeState.ROOT
        self.failure: str | None = None  # why this server gave up (a wrong secret)
        self.on_failure: Callable[[str], None] | None = None
        # not joined yet, trying the remote again: (host, port, attempts so far)
        self.on_join_retry: Callable[[str, int, int], None] | None = None
        self._auth_failures = 0
        self.parent: Conn | None = None  # conn to the parent (dialing, joining or attached)
        self.parent_id: str | None = None
        self.known: dict[str, KnownServer] = {}
        self.roles: dict[Conn, ConnRole] = {}
        self.clients: dict[Conn, ClientSession] = {}
        # clients and children: where an activity goes (one write_many for all of them)
        self.fanout: ConnGroup = env.group()
        # what a failure may have cut off is resent from here when the tree heals: per origin
        # server, its last ``max_buffer`` activities (number, frame), and the last number
        # received from each origin server (the ``received`` map of the handshake)
        self.relay_origin = f"{self.id}/{env.incarnation}"
        self._relay_next = 0
        self.relay_log = RelayLog(max_buffer=config.max_buffer, max_origins=LOG_ORIGINS,
                                  max_marks=MAX_RECEIVED)
        self._was_attached = False
        self._candidates: list[tuple[str, int]] = []
        self._failed: set[str] = set()
        self._attached_at = 0.0
        # when each server link (parent, children) last carried a frame: a hung link is one
        # that stays silent (servers announce every interval)
        self._heard: dict[Conn, float] = {}
        self._legacy_parent = False  # attached to a server of the original course protocol
        self._legacy_timer: TimerHandle | None = None
        self._dials = 0
        self.locks = UsernameLocks(self.users, server_id=self.id, send=self._send,
                                   close=self._close, server_conns=self.server_conns,
                                   connected=self.roles.__contains__, trace=self._trace)
        self._last_seq: OrderedDict[str, int] = OrderedDict()
        self._legacy: set[Conn] = set()  # child conns that authenticated without ``protocol``
        self._tick: TimerHandle | None = None
        self._retry: TimerHandle | None = None
        self._early: TimerHandle | None = None  # an early announcement of a changed load
        self._announced_load = 0
        self.running = False

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        self.running = True
        if self.config.remote is not None:
            self.state = TreeState.JOINING
            self._dial(*self.config.remote)
        else:
            self._trace("root", level=0)
        self._tick = self.env.set_timer(self.config.announce_interval, self._on_tick)

    def stop(self) -> None:
        self.running = False
        for handle in (self._tick, self._retry, self._early, self._legacy_timer):
            if handle is not None:
                self.env.cancel(handle)
        self._tick = self._retry = self._early = self._legacy_timer = None
        for conn in list(self.roles):
            self._close(conn, "server stopping")

    def mark(self, event: str, **info: Any) -> None:
        """Trace a membership row (``join``/``leave``) for this server: experiments mark the
        windows around a server crash in which seed 003 promises no delivery."""
        self.env.trace(event, layer=LAYER, **info)

    @property
    def load(self) -> int:
        return len(self.clients)

    def server_conns(self) -> list[Conn]:
        """Authenticated server links: children and the attached parent."""
        return [c for c, r in self.roles.items() if r in (ConnRole.CHILD, ConnRole.PARENT)]

    # -- events from the runtime (the connection contract) ----------------------------------

    def opened(self, conn: Conn, peer_address: str) -> None:
        role = self.roles.get(conn)
        if role is ConnRole.DIALING:
            self.roles[conn] = ConnRole.JOINING
            # joining again: say what this side has, the parent resends what is newer
            received = dict(self.relay_log.high_water) if self._was_attached else None
            self._send(conn, Authenticate(secret=self.config.secret, protocol=PROTOCOL,
                                          received=received))
            if self.config.legacy_accept_after is not None:
                self._cancel_legacy_timer()
                self._legacy_timer = self.env.set_timer(
                    self.config.legacy_accept_after, lambda: self._legacy_silence(conn))
            return
        if role is not None:
            return
        self.roles[conn] = ConnRole.PENDING
        if not self.running:
            self._invalid(conn, "server is not running")

    def received(self, conn: Conn, frame: bytes) -> None:
        role = self.roles.get(conn)
        if role is None:
            return  # closed by us already; what was in flight is ignored
        if conn in self._heard:
            self._heard[conn] = self.env.now()
        try:
            msg = self.codec.decode(frame)
        except ProtocolError as exc:
            self._trace("drop", peer=conn, reason=exc.reason, detail=str(exc)[:200])
            self._invalid(conn, str(exc))
            return
        if role is ConnRole.PENDING:
            self._from_pending(conn, msg)
        elif role is ConnRole.CLIENT:
            self._from_client(conn, msg)
        elif role is ConnRole.CHILD:
            self._from_server(conn, msg, frame)
        else:
            self._from_parent(conn, role, msg, frame)

    def closed(self, conn: Conn, reason: str) -> None:
        if conn in self.roles:
            self._forget(conn, f"closed: {reason}")

    def oversized(self, conn: Conn, size: int) -> None:
        """A line over the limit: the seed's answer, then the runtime closes."""
        if conn in self.roles:
            self._send(conn, InvalidMessageReply(
                info=f"message over the limit of {self.config.max_line} bytes"))
            self._forget(conn, "line over the limit")

    # -- dispatch by role -------------------------------------------------------------------

    def _from_pending(self, conn: Conn, msg: ActivityWire) -> None:
        if isinstance(msg, Authenticate):
            self._authenticate(conn, msg)
        elif isinstance(msg, Login):
            self._login(conn, msg)
        elif isinstance(msg, Register):
            if self.locks.registering(conn):
                self._invalid(conn, "a registration is already in progress on this connection")
            else:
                self.locks.register(conn, msg)
        elif isinstance(msg, ActivityMessage):
            self._auth_fail(conn, "the user has not logged in")
        elif isinstance(msg, Logout):
            self._close(conn, "logout")
        elif isinstance(msg, SERVER_ONLY):
            self._invalid(conn, f"{msg.TYPE} received from an unauthenticated server")
        else:
            self._invalid(conn, f"unexpected {msg.TYPE} from a client")

    def _from_client(self, conn: Conn, msg: ActivityWire) -> None:
        if isinstance(msg, ActivityMessage):
            self._activity(conn, msg)
        elif isinstance(msg, Logout):
            self._close(conn, "logout")
        elif isinstance(msg, Register):
            self._invalid(conn, "REGISTER received from a client that has already logged in")
        elif isinstance(msg, Login):
            self._invalid(conn, "LOGIN received from a client that has already logged in")
        elif isinstance(msg, InvalidMessageReply):
            self._close(conn, f"client sent INVALID_MESSAGE: {msg.info}")
        else:
            self._invalid(conn, f"unexpected {msg.TYPE} from a client")

    def _from_server(self, conn: Conn, msg: ActivityWire, frame: bytes) -> None:
        if isinstance(msg, ServerAnnounce):
            self._announce(conn, msg)
        elif isinstance(msg, ActivityBroadcast):
            self._broadcast(conn, msg, frame)
        elif isinstance(msg, LockRequest | LockAllowed | LockDenied | LockCancel):
            self.locks.received(conn, msg)
        elif isinstance(msg, Authenticate):
            self._invalid(conn, "AUTHENTICATE received on an already authenticated connection")
        elif isinstance(msg, InvalidMessageReply | AuthenticationFail):
            self._close(conn, f"peer sent {msg.TYPE}: {msg.info}")
        else:
            self._invalid(conn, f"unexpected {msg.TYPE} from a server")

    def _from_parent(self, conn: Conn, role: ConnRole, msg: ActivityWire,
                     frame: bytes) -> None:
        if isinstance(msg, ServerInfo):
            self._server_info(conn, msg)
        elif isinstance(msg, Redirect) and role is ConnRole.JOINING:
            self._trace("redirected", peer=conn, host=msg.hostname, port=msg.port)
            self._candidates.insert(0, (msg.hostname, msg.port))
            self._close(conn, "redirected")
        elif isinstance(msg, AuthenticationFail) and role is ConnRole.JOINING:
            self._auth_refused(conn, msg.info)
        elif isinstance(msg, InvalidMessageReply | AuthenticationFail):
            self._close(conn, f"parent sent {msg.TYPE}: {msg.info}")
        elif role is ConnRole.JOINING and isinstance(msg, SERVER_ONLY) \
                and self.config.legacy_accept_after is not None:
            self._legacy_accepted(conn)  # a legacy parent's traffic: it took our secret
            self._from_server(conn, msg, frame)
        elif role is ConnRole.JOINING:
            self._invalid(conn, f"{msg.TYPE} received before SERVER_INFO")
        else:
            self._from_server(conn, msg, frame)

    # -- servers: authentication, info, announcements ------------------------------------------

    def _authenticate(self, conn: Conn, msg: Authenticate) -> None:
        if not hmac.compare_digest(msg.secret.encode(), self.config.secret.encode()):
            self._trace("drop", peer=conn, reason="auth")
            self._send(conn, AuthenticationFail(
                info=f"the supplied secret is incorrect: {msg.secret}"))
            self._close(conn, "authentication failed")
            return
        depth = self.config.max_depth
        if depth is not None and self.level + 1 > depth:
            target = self._shallower_server(depth)
            if target is not None:
                self._trace("redirect", peer=conn, to=target.id, reason="max_depth")
                self._send(conn, Redirect(hostname=target.hostname, port=target.port))
                self._close(conn, "redirected: max depth")
                return
        self.roles[conn] = ConnRole.CHILD
        self._heard[conn] = self.env.now()
        self.env.promote(conn)  # a server: it may take the slots kept for servers
        self.fanout.add(conn)
        if msg.protocol is None:  # the original course protocol: no SERVER_INFO, no levels
            self._legacy.add(conn)
            self._trace("link_up", peer=conn, role="child", legacy=True)
            return
        self._trace("link_up", peer=conn, role="child")
        self._send(conn, self._server_info_msg())
        if msg.received is not None:
            self._resend(conn, msg.received)

    def _server_info_msg(self) -> ServerInfo:
        return ServerInfo(id=self.id, level=self.level,
                          users=[f"{name}:{record}" for name, record in self.users.items()],
                          received=dict(self.relay_log.high_water))

    def _shallower_server(self, depth: int) -> KnownServer | None:
        fresh = [k for k in self._fresh() if k.level is not None and k.level + 1 <= depth]
        return min(fresh, key=lambda k: (k.level, k.load, k.id), default=None)

    def _server_info(self, conn: Conn, msg: ServerInfo) -> None:
        for entry in msg.users:
            name, secret = entry.split(":", 1)
            if name not in self.users:
                if is_hash(secret) or secret == UNKNOWN_SECRET:
                    self.users.add_record(name, secret)
                else:
                    self.users.add(name, secret)
        self.users.commit()
        old_level = self.level
        self.level = msg.level + 1
        self.parent_id = msg.id
        first = self.roles[conn] is ConnRole.JOINING or self._legacy_parent
        self._legacy_parent = False
        if first:
            self._attach(conn, msg.id)
            theirs = msg.received or {}
            if not self._was_attached:
                # a first join: owed only what is sent from now on, so what the network had
                # received before is where this server starts (no history resent later)
                for origin, number in theirs.items():
                    if not self.relay_log.knows(origin):
                        self.relay_log.mark(origin, number)
                self._joined_network()
            self._was_attached = True
            if msg.received is not None:
                self._resend(conn, theirs)
        if self.level != old_level:
            for child in self._children():
                if child not in self._legacy:  # extension: levels follow moves
                    self._send(child, self._server_info_msg())

    def _attach(self, conn: Conn, parent: str | None) -> None:
        self._cancel_legacy_timer()
        self.roles[conn] = ConnRole.PARENT
        self._attached_at = self._heard[conn] = self.env.now()
        self.state = TreeState.ATTACHED
        self._candidates = []
        self._failed.clear()
        self._trace("attach", peer=conn, parent=parent, level=self.level,
                    legacy=self._legacy_parent)

    def _joined_network(self) -> None:
        """This process's first attach to the tree: from here on it is owed what the network
        relays (what was sent before is not resent to it). A session ``join`` of the activity
        layer, so the pipeline owes it activities from now, not from its process start."""
        self._trace("join", reason="attached", parent=self.parent_id)

    def _legacy_accepted(self, conn: Conn) -> None:
        """The parent we joined speaks the original course protocol: it never sends SERVER_INFO,
        success is silence (or its first server message). Attached, level unknown (1 is
        assumed), no users or high-water marks from it."""
        if self.roles.get(conn) is not ConnRole.JOINING:
            return
        self._legacy_parent = True
        if self.level == 0:
            self.level = 1
        self._attach(conn, None)
        if not self._was_attached:
            self._resend(conn, {})  # what was accepted while joining (the log holds no more)
            self._joined_network()
        self._was_attached = True

    def _legacy_silence(self, conn: Conn) -> None:
        self._legacy_timer = None
        if self.running and conn == self.parent:
            self._legacy_accepted(conn)

    def _children(self) -> list[Conn]:
        return [c for c, r in self.roles.items() if r is ConnRole.CHILD]

    def _announce(self, conn: Conn, msg: ServerAnnounce) -> None:
        if msg.id == self.id:
            return
        self.known[msg.id] = KnownServer(msg.id, msg.load, msg.hostname, msg.port, msg.level,
                                    self.env.now())
        for other in self.server_conns():
            if other != conn:
                self._send(other, msg)

    def _fresh(self) -> list[KnownServer]:
        horizon = self.env.now() - self.config.miss_announces * self.config.announce_interval
        return [k for k in self.known.values() if k.seen >= horizon and k.id != self.id]

    def _on_tick(self) -> None:
        self._tick = self.env.set_timer(self.config.announce_interval, self._on_tick)
        self._send_announce()
        window = self.config.miss_announces * self.config.announce_interval
        horizon = self.env.now() - window
        forget = horizon - FORGET_WINDOWS * window
        for server_id in [k.id for k in self.known.values() if k.seen < forget]:
            del self.known[server_id]
        if (self.state is TreeState.ATTACHED and self.parent is not None
                and self._heard.get(self.parent, 0.0) < horizon
                and self._attached_at < horizon):
            self._trace("parent_silent", peer=self.parent, parent=self.parent_id)
            self._close(self.parent, "no announcements from the parent")
        for child in [c for c in self._children() if self._heard.get(c, 0.0) < horizon]:
            # a hung child would hold every registration waiting for its LOCK_ALLOWED
            self._trace("child_silent", peer=child)
            self._close(child, "no announcements from the child")

    def _send_announce(self) -> None:
        parent = self.parent_id if self.state is TreeState.ATTACHED else None
        announce = ServerAnnounce(id=self.id, load=self.load, hostname=self.config.hostname,
                                  port=self.config.port, level=self.level, parent=parent)
        self._announced_load = self.load
        for conn in self.server_conns():
            self._send(conn, announce)

    def _load_changed(self) -> None:
        if (self.running and self._early is None and self.config.load_announce_gap > 0
                and self.load != self._announced_load):
            self._early = self.env.set_timer(self.config.load_announce_gap, self._announce_early)

    def _announce_early(self) -> None:
        self._early = None
        if self.load != self._announced_load:
            self._send_announce()

    # -- the tree: dialing and reconnecting -----------------------------------------------------

    def _dial(self, host: str, port: int) -> None:
        self._dials += 1
        conn = self.env.connect(f"{host}:{port}", max_frame=self.config.max_line)
        self.parent = conn
        self.roles[conn] = ConnRole.DIALING
        self._trace("dial", peer=conn, host=host, port=port)

    def _cancel_legacy_timer(self) -> None:
        if self._legacy_timer is not None:
            self.env.cancel(self._legacy_timer)
            self._legacy_timer = None

    def _parent_gone(self, was_attached: bool) -> None:
        self.parent = None
        self._legacy_parent = False
        self._cancel_legacy_timer()
        if not self.running:
            return
        if was_attached:
            self.state = TreeState.RECONNECTING
            if self.parent_id is not None:
                self._failed.add(self.parent_id)
            self._candidates = self._reconnect_candidates()
            self._trace("parent_lost", parent=self.parent_id, candidates=len(self._candidates))
        self._next_candidate()

    def _reconnect_candidates(self) -> list[tuple[str, int]]:
        # stale entries count too: a silent parent also silences what it relayed to us
        # legacy servers (no level) are never parents: without levels a cycle could form
        fresh = [k for k in self.known.values() if k.id not in self._failed
                 and k.level is not None]
        lower = sorted((k for k in fresh if (k.level or 0) < self.level),
                       key=lambda k: (-(k.level or 0), k.id))
        same = sorted((k for k in fresh if k.level == self.level and k.id < self.id),
                      key=lambda k: k.id)
        return [(k.hostname, k.port) for k in (*lower, *same)]

    def _next_candidate(self) -> None:
        if self._candidates:
            self._dial(*self._candidates.pop(0))
        elif self.state is TreeState.JOINING and self.config.remote is not None:
            self._retry = self.env.set_timer(self.config.reconnect_delay, self._retry_join)
            if self.on_join_retry is not None:
                self.on_join_retry(*self.config.remote, self._dials)
        else:
            self._become_root()

    def _auth_refused(self, conn: Conn, info: str) -> None:
        """The server we joined refused our secret: retried ``join_attempts`` times (it may
        be a server of another network behind a redirect), then given up: a wrong secret is
        the operator's mistake, not a fault to wait out."""
        self._auth_failures += 1
        self._trace("auth_refused", peer=conn, info=info[:200], attempt=self._auth_failures)
        if self._auth_failures >= self.config.join_attempts and \
                self.state is TreeState.JOINING:
            self.failure = (f"the server at {conn.remote} refused this network's secret "
                            f"{self._auth_failures} times: {info}")
            self._trace("gave_up", reason="auth", attempts=self._auth_failures)
            self.roles.pop(conn, None)
            self.env.close(conn, CloseCode.NORMAL, "authentication failed")
            self.parent = None
            self.stop()
            if self.on_failure is not None:
                self.on_failure(self.failure)
            return
        self._close(conn, f"parent sent AUTHENTICATION_FAIL: {info}")

    def _retry_join(self) -> None:
        self._retry = None
        if self.running and self.state is TreeState.JOINING and self.parent is None:
            assert self.config.remote is not None
            self._dial(*self.config.remote)

    def _become_root(self) -> None:
        self.state = TreeState.ROOT
        self.parent_id = None
        old_level, self.level = self.level, 0
        self._trace("root", level=0)
        if old_level != 0:
            for child in self._children():
                if child not in self._legacy:
                    self._send(child, self._server_info_msg())

    # -- clients: login, register ---------------------------------------------------------------

    def _login(self, conn: Conn, msg: Login) -> None:
        if msg.username == ANONYMOUS:
            secret = ""
        else:
            assert msg.secret is not None  # Login validates it
            if not self.users.verify(msg.username, msg.secret):
                known = msg.username in self.users
                self._trace("login_failed", peer=conn, user=msg.username)
                self._send(conn, LoginFailed(info="attempt to login with wrong secret" if known
                                             else f"user {msg.username} is not registered"))
                self._close(conn, "login failed")
                return
            secret = msg.secret
        self.roles[conn] = ConnRole.CLIENT
        self.clients[conn] = ClientSession(msg.username, digest_of(secret), f"{self.id}.{conn.id}")
        self.fanout.add(conn)
        self._trace("login", peer=conn, user=msg.username)
        self._send(conn, LoginSuccess(info=f"logged in as user {msg.username}"))
        target = min((k for k in self._fresh() if k.load <= self.load - 2),
                     key=lambda k: (k.load, k.id), default=None)
        if target is not None:
            self._trace("redirect", peer=conn, to=target.id, load=self.load, other=target.load)
            # count the client on the target until its next announcement says how many it has:
            # otherwise every login before that announcement goes to the same stale minimum, and
            # servers acting on each other's stale loads send clients back and forth
            target.load += 1
            self._send(conn, Redirect(hostname=target.hostname, port=target.port))
            self._close(conn, "redirected")
        self._load_changed()

    # -- activities -----------------------------------------------------------------------------

    def _activity(self, conn: Conn, msg: ActivityMessage) -> None:
        client = self.clients[conn]
        if msg.username != client.username:
            self._auth_fail(conn, f"username {msg.username} does not match the logged in user")
            return
        if client.username != ANONYMOUS and (
                msg.secret is None
                or not hmac.compare_digest(digest_of(msg.secret), client.secret_digest)):
            self._auth_fail(conn, "the secret does not match the logged in user")
            return
        given = activity_ids(msg.activity)
        if given is not None:  # extension: the client names itself and numbers its activities
            origin, seq = given
            if len(origin) > 256 or seq < 1:
                self._invalid(conn, f"ACTIVITY_MESSAGE: bad {ORIGIN_KEY}/{SEQ_KEY}")
                return
        else:  # a plain client: this connection is the origin, the server numbers
            client.seq += 1
            origin, seq = client.origin, client.seq
        if not self._seen(origin, seq):
            self._trace("drop", peer=conn, reason="stale_seq", origin=origin, seq=seq)
            return
        activity = dict(msg.activity)
        activity["authenticated_user"] = client.username
        activity[ORIGIN_KEY] = origin
        activity[SEQ_KEY] = seq
        self._relay_next += 1
        activity[RELAY_KEY] = self.relay_origin
        activity[RELAY_SEQ_KEY] = self._relay_next
        self.env.trace("publish", layer=LAYER, msg=f"{origin}#{seq}", origin=origin, seq=seq,
                       peer=conn.id, user=client.username)
        frame = self.codec.encode(ActivityBroadcast(activity=activity))
        self.relay_log.keep(self.relay_origin, self._relay_next, frame)
        self._spread(frame, conn)

    def _broadcast(self, conn: Conn, msg: ActivityBroadcast, frame: bytes) -> None:
        relay = relay_ids(msg.activity)
        if relay is not None:
            via, number = relay
            last = self.relay_log.last(via)
            if number <= last:
                self._trace("drop", peer=conn, reason="duplicate", via=via, n=number)
                return
            if number > last + 1 and self.relay_log.knows(via):
                # the sender no longer had them (its log is bounded): gone for this side
                self._trace("relay_gap", peer=conn, via=via, missing=number - last - 1)
            self.relay_log.keep(via, number, frame)
        ids = activity_ids(msg.activity)
        if ids is not None:
            if not self._seen(*ids):
                self._trace("drop", peer=conn, reason="duplicate", origin=ids[0], seq=ids[1])
                return
            # a server has every activity too: it is a member the reliability check counts
            self.env.trace("deliver", layer=LAYER, msg=f"{ids[0]}#{ids[1]}", origin=ids[0],
                           seq=ids[1], peer=conn.id)
        self._spread(frame, conn)

    def _resend(self, conn: Conn, theirs: dict[str, Any]) -> None:
        """Send ``conn`` every logged activity newer than what its side received (the
        ``received`` map of its handshake), oldest first per origin server: the gap a failure
        cut into the tree, filled from this side's copies."""
        for via, missing in self.relay_log.gaps(theirs):
            self._trace("relay_gap", peer=conn, via=via, missing=missing, resend=True)
        resent = 0
        for frame in self.relay_log.newer_than(theirs):
            self.env.write(conn, frame)
            resent += 1
        self._trace("resend", peer=conn, count=resent)

    def _seen(self, origin: str, seq: int) -> bool:
        """Record (origin, seq); False when it (or a later one) was seen already."""
        last = self._last_seq.get(origin)
        if last is not None and seq <= last:
            return False
        self._last_seq[origin] = seq
        self._last_seq.move_to_end(origin)
        while len(self._last_seq) > self.config.max_origins:
            self._last_seq.popitem(last=False)
        return True

    def _spread(self, frame: bytes, source: Conn) -> None:
        """To every client and child but ``source``, and to the parent once attached (while
        there is none, the log keeps the activity for the handshake that heals the tree)."""
        if self.config.drop_broadcasts:
            return
        self.env.write_many(self.fanout, frame, exclude=source)
        if self.state is TreeState.ATTACHED and self.parent is not None \
                and self.parent != source:
            self.env.write(self.parent, frame)

    # -- output ---------------------------------------------------------------------------------

    def _send(self, conn: Conn, msg: ActivityWire) -> None:
        self.env.write(conn, self.codec.encode(msg))

    def _invalid(self, conn: Conn, info: str) -> None:
        self._send(conn, InvalidMessageReply(info=info))
        self._close(conn, f"invalid message: {info}")

    def _auth_fail(self, conn: Conn, info: str) -> None:
        self._send(conn, AuthenticationFail(info=info))
        self._close(conn, f"authentication failed: {info}")

    def _close(self, conn: Conn, reason: str) -> None:
        if conn in self.roles:
            self.env.close(conn, CloseCode.NORMAL, reason[:100])
            self._forget(conn, reason)

    def _forget(self, conn: Conn, reason: str) -> None:
        role = self.roles.pop(conn)
        self._heard.pop(conn, None)
        self.fanout.discard(conn)
        if self.clients.pop(conn, None) is not None:
            self._load_changed()
        self._legacy.discard(conn)
        if role in (ConnRole.CHILD, ConnRole.PARENT):
            self._trace("link_down", peer=conn, role=role.value, reason=reason[:200])
        self.locks.forget(conn)
        if conn == self.parent:
            self._parent_gone(was_attached=role is ConnRole.PARENT)

    def _trace(self, event: str, *, peer: Conn | None = None, **info: Any) -> None:
        self.env.trace(event, layer=LAYER, peer=None if peer is None else peer.id, **info)
