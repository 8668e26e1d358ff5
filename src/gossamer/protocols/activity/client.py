"""A client of the seed-003 network as a sans-I/O process (the connection contract).

It dials a server, registers (when asked) and logs in, follows REDIRECT (logging in again
there), reconnects to the next server of its list when its server goes away (when asked), and
publishes activities stamped with its id and a sequence number (an extension the servers keep,
so deliveries can be checked per sender). It traces ``join`` (logged in), ``leave``,
``deliver`` (also of its own activities: the server sends an activity to the others only) and
registration outcomes, under layer ``activity``. The simulator's scripted clients and the
asyncio ``ActivityClient`` are this class.
"""

from __future__ import annotations

import dataclasses
import enum
from collections import deque
from collections.abc import Callable
from typing import Any

from ...core.conn import CloseCode, Conn
from ...core.env import Env, TimerHandle
from ...core.errors import ConfigError, ProtocolError
from .server_state import LAYER, ORIGIN_KEY, SEQ_KEY, activity_ids
from .wire import (
    ANONYMOUS,
    DEFAULT_MAX_LINE,
    ActivityBroadcast,
    ActivityCodec,
    ActivityMessage,
    ActivityWire,
    AuthenticationFail,
    InvalidMessageReply,
    Login,
    LoginFailed,
    LoginSuccess,
    Logout,
    Redirect,
    Register,
    RegisterFailed,
    RegisterSuccess,
)

__all__ = ["ActivityClientNode", "ClientPhase", "ClientScript"]


class ClientPhase(enum.Enum):
    CONNECTING = "connecting"
    REGISTERING = "registering"
    LOGGING_IN = "logging_in"
    JOINED = "joined"  # logged in: activities flow
    WAITING = "waiting"  # between connections (redirected, lost, backing off)
    DONE = "done"  # stopped, or gave up


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ClientScript:
    """What a client does: ``servers`` (``host:port``) to try in turn, the first at start, as
    ``username`` (registering it first with ``secret`` when ``register``). With ``reconnect``
    it dials the next server ``reconnect_delay`` seconds after losing one; it gives up after
    ``max_redirects`` redirects in a row without a login."""

    servers: tuple[str, ...]
    username: str = ANONYMOUS
    secret: str | None = None
    register: bool = False
    reconnect: bool = True
    reconnect_delay: float = 0.5
    max_redirects: int = 10
    client_id: str | None = None  # the origin of its activities (default: its node id)
    max_line: int = DEFAULT_MAX_LINE
    keep: int = 100_000  # activities kept in ``activities`` (oldest dropped first)

    def __post_init__(self) -> None:
        if not self.servers:
            raise ConfigError("a client needs at least one server")
        if self.username != ANONYMOUS and self.secret is None:
            raise ConfigError("a named client needs its secret")
        if self.reconnect_delay <= 0 or self.max_redirects < 1 or self.keep < 0:
            raise ConfigError("reconnect_delay must be > 0, max_redirects >= 1, keep >= 0")


class ActivityClientNode:
    """One client (see the module docstring). Callbacks: ``on_activity(activity)`` for each
    broadcast, ``on_reply(msg)`` for every other message from a server, ``on_phase(phase)``."""

    def __init__(self, env: Env, script: ClientScript) -> None:
        self.env = env
        self.script = script
        self.codec = ActivityCodec(max_frame=script.max_line)
        self.client_id = script.client_id or env.node
        self.username = script.username
        self.registering = script.register
        self.register_result: bool | None = None
        self.phase = ClientPhase.WAITING
        self.server: str | None = None
        self.conn: Conn | None = None
        self.next_server = 0
        self.seq = 0
        self.connections = 0
        self.redirects = 0  # in all
        self._redirects_in_a_row = 0
        self.error: str | None = None
        self.activities: deque[dict[str, Any]] = deque(maxlen=script.keep or None)
        self.on_activity: Callable[[dict[str, Any]], None] | None = None
        self.on_reply: Callable[[ActivityWire], None] | None = None
        self.on_phase: Callable[[ClientPhase], None] | None = None
        self._retry: TimerHandle | None = None

    @property
    def joined(self) -> bool:
        return self.phase is ClientPhase.JOINED

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        self._connect(self._pick())

    def stop(self) -> None:
        """Log out and close (what was published before goes out first)."""
        if self.conn is not None:
            self._leave("stop")
            self._send(Logout())
            self.env.close(self.conn, CloseCode.NORMAL, "logout")
            self.conn = None
        if self._retry is not None:
            self.env.cancel(self._retry)
            self._retry = None
        self._set(ClientPhase.DONE)

    def _pick(self) -> str:
        servers = self.script.servers
        server = servers[self.next_server % len(servers)]
        self.next_server += 1
        return server

    def _connect(self, server: str) -> None:
        self.connections += 1
        self.server = server
        self.conn = self.env.connect(server, max_frame=self.script.max_line)
        self._set(ClientPhase.CONNECTING)

    def _set(self, phase: ClientPhase) -> None:
        if phase is not self.phase:
            self.phase = phase
            if self.on_phase is not None:
                self.on_phase(phase)

    def _send(self, msg: ActivityWire) -> None:
        if self.conn is not None:
            self.env.write(self.conn, self.codec.encode(msg))

    def _trace(self, event: str, **fields: Any) -> None:
        self.env.trace(event, layer=LAYER, peer=self.server, **fields)

    def mark(self, event: str, **info: Any) -> None:
        """Trace a membership row (``join``/``leave``) without changing the connection, if
        logged in: experiments end the client's session before a server crash and start a
        new one once the tree has healed (seed 003 promises no delivery across the crash)."""
        if self.joined:
            self._trace(event, **info)

    def _leave(self, reason: str) -> None:
        if self.phase is ClientPhase.JOINED:
            self._trace("leave", reason=reason)
            self._set(ClientPhase.WAITING)

    # -- the connection ------------------------------------------------------------------------

    def opened(self, conn: Conn, peer_address: str) -> None:
        if conn is not self.conn:
            return
        if self.registering:
            assert self.script.secret is not None
            self._set(ClientPhase.REGISTERING)
            self._send(Register(username=self.username, secret=self.script.secret))
        else:
            self._login()

    def _login(self) -> None:
        self._set(ClientPhase.LOGGING_IN)
        self._send(Login(username=self.username,
                         secret=None if self.username == ANONYMOUS else self.script.secret))

    def received(self, conn: Conn, frame: bytes) -> None:
        if conn is not self.conn:
            return
        try:
            msg = self.codec.decode(frame)
        except ProtocolError as exc:
            self._trace("drop", reason=exc.reason, error=str(exc)[:200])
            return
        if isinstance(msg, ActivityBroadcast):
            self._delivered(msg, len(frame))
            return
        if self.on_reply is not None:
            self.on_reply(msg)
        if isinstance(msg, LoginSuccess):
            self._redirects_in_a_row = 0
            self._set(ClientPhase.JOINED)
            self._trace("join")
        elif isinstance(msg, Redirect):
            self._redirected(msg)
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
            self.error = f"{msg.TYPE}: {msg.info}"
            self.registering = False
            self.username = ANONYMOUS
        elif isinstance(msg, InvalidMessageReply | AuthenticationFail):
            self.error = f"{msg.TYPE}: {msg.info}"

    def _delivered(self, msg: ActivityBroadcast, size: int) -> None:
        self.activities.append(msg.activity)
        ids = activity_ids(msg.activity)
        origin, seq = ids if ids is not None else (None, None)
        self._trace("deliver", msg=None if ids is None else f"{origin}#{seq}", origin=origin,
                    seq=seq, size=size)
        if self.on_activity is not None:
            self.on_activity(msg.activity)

    def _redirected(self, msg: Redirect) -> None:
        self.redirects += 1
        self._redirects_in_a_row += 1
        self._leave("redirect")
        old, self.conn = self.conn, None
        if old is not None:
            self.env.close(old, CloseCode.NORMAL, "redirected")
        if self._redirects_in_a_row > self.script.max_redirects:
            self.error = f"more than {self.script.max_redirects} redirects in a row"
            self._trace("gave_up", reason="redirects")
            self._set(ClientPhase.DONE)
            return
        self._connect(f"{msg.hostname}:{msg.port}")

    def closed(self, conn: Conn, reason: str) -> None:
        if conn is not self.conn:
            return  # one we left (redirect, stop)
        self._leave("closed")
        self.conn = None
        if self.phase is ClientPhase.DONE:
            return
        if not self.script.reconnect:
            if self.error is None:
                self.error = f"connection to {self.server} ended: {reason}"
            self._set(ClientPhase.DONE)
            return
        self._set(ClientPhase.WAITING)
        self._retry = self.env.set_timer(self.script.reconnect_delay, self._reconnect)

    def _reconnect(self) -> None:
        self._retry = None
        if self.phase is not ClientPhase.DONE and self.conn is None:
            self._connect(self._pick())

    # -- publishing ----------------------------------------------------------------------------

    def publish(self, activity: dict[str, Any]) -> bool:
        """Send ``activity`` (stamped with this client's id and next seq) if logged in."""
        if not self.joined or self.conn is None:
            return False
        self.seq += 1
        origin = self.client_id
        stamped = {**activity, ORIGIN_KEY: origin, SEQ_KEY: self.seq}
        self._send(ActivityMessage(username=self.username,
                                   secret=None if self.username == ANONYMOUS
                                   else self.script.secret, activity=stamped))
        # the publisher has its own activity (the server sends it to the others only)
        self._trace("deliver", msg=f"{origin}#{self.seq}", origin=origin, seq=self.seq,
                    own=True)
        return True
