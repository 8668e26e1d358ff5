"""The connection contract: what a service that talks over connections gets from its runtime.

A service (the seed-000 hub, the seed-003 server, a node's command port) handles
``opened(conn, peer_address)``, ``received(conn, frame)`` and ``closed(conn, reason)`` and
answers through its env: ``write``, ``write_many`` (encoded once, queued to many: fan-out),
``close``, ``connect`` (dial out) and ``promote`` (a server peer, which may use the slots kept
for peers). Framing is the runtime's, chosen per listener (``ListenerSpec``); the runtime
enforces the frame size limit, the handshake and idle timeouts, the connection limit and write
back-pressure, and tells the service with ``closed(conn, reason)`` (one of ``CloseReason``).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Iterator
from typing import Protocol, runtime_checkable

from .errors import ConfigError

__all__ = [
    "CloseCode",
    "CloseReason",
    "Conn",
    "ConnGroup",
    "ConnectionHandler",
    "Framing",
    "ListenerSpec",
    "first_frame_deadline",
    "parse_address",
]


class Framing(enum.Enum):
    """How frames are cut out of a byte stream: chosen per listener, never by a service."""

    LINES = "lines"  # one frame per line (no newline inside a frame): JSON lines
    LENGTH = "length"  # a 4-byte big-endian length, then the frame
    WS = "ws"  # one WebSocket text message per frame (HTTP upgrade at ``path``)


class CloseCode(enum.IntEnum):
    """Close codes (RFC 6455 values; on a stream framing they are traced, not sent)."""

    NORMAL = 1000
    GOING_AWAY = 1001
    PROTOCOL_ERROR = 1002
    INVALID_TEXT = 1007
    POLICY = 1008
    TOO_BIG = 1009
    INTERNAL = 1011
    TRY_AGAIN_LATER = 1013


class CloseReason:
    """The ``reason`` the runtime gives ``closed()`` when it, not the service, ended a
    connection (a service's own ``env.close(conn, code, reason)`` comes back as ``CLOSED``)."""

    CLOSED = "closed"  # this side closed it with env.close
    PEER_CLOSED = "peer_closed"  # the other end closed it cleanly
    RESET = "reset"  # the connection broke (the other process died, a cut cable)
    REFUSED = "refused"  # a dial that could not connect
    TOO_LARGE = "too_large"  # a frame over the listener's max_frame
    HANDSHAKE_TIMEOUT = "handshake_timeout"  # no first frame within handshake_timeout
    IDLE_TIMEOUT = "idle_timeout"  # nothing received for idle_timeout
    SLOW_CONSUMER = "slow_consumer"  # send_queue_limit frames waiting to be written
    FULL = "full"  # over the listener's connection limit
    SHUTDOWN = "shutdown"  # the node is stopping
    INVALID_TEXT = "invalid_text"  # a WebSocket text frame that is not UTF-8


@runtime_checkable
class Conn(Protocol):
    """One connection as a service sees it: hashable by identity, never reused.

    ``id`` is unique for the node's life (traces and logs), ``listener`` the name of the
    listener it arrived on (None: this node dialed it), ``remote`` the other end's address.
    """

    @property
    def id(self) -> str: ...

    @property
    def listener(self) -> str | None: ...

    @property
    def remote(self) -> str: ...

    def __hash__(self) -> int: ...


class ConnectionHandler(Protocol):
    """What a service over connections implements (beside ``Process.start``/``stop``).

    It may also define ``oversized(conn, size)``: called when a frame over the limit arrived,
    just before the runtime closes the connection, so the service can write its last word (seed
    003 answers INVALID_MESSAGE); what it writes there goes out before the close.
    """

    def opened(self, conn: Conn, peer_address: str) -> None: ...

    def received(self, conn: Conn, frame: bytes) -> None: ...

    def closed(self, conn: Conn, reason: str) -> None: ...


class ConnGroup:
    """A set of connections that ``env.write_many`` can fan out to in one step.

    Made by ``env.group()``: the runtime is told before the group changes, so what was written
    to the group before a connection joined never reaches it (a runtime that batches fan-out
    hands the batch out first). Iteration order is insertion order.
    """

    __slots__ = ("_before_change", "_members")

    def __init__(self, before_change: Callable[[], None] | None = None) -> None:
        self._members: dict[Conn, None] = {}
        self._before_change = before_change

    def add(self, conn: Conn) -> None:
        if conn not in self._members:
            if self._before_change is not None:
                self._before_change()
            self._members[conn] = None

    def discard(self, conn: Conn) -> None:
        if conn in self._members:
            if self._before_change is not None:
                self._before_change()
            del self._members[conn]

    def __contains__(self, conn: object) -> bool:
        return conn in self._members

    def __iter__(self) -> Iterator[Conn]:
        return iter(self._members)

    def __len__(self) -> int:
        return len(self._members)

    def members(self) -> list[Conn]:
        return list(self._members)


def _positive(name: str, value: float | None, *, optional: bool = False) -> None:
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ConfigError(f"{name} must be > 0{' or None' if optional else ''}, got {value!r}")


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ListenerSpec:
    """One listener of a node: where, which framing, and the limits the runtime enforces.

    ``max_connections`` counts every open connection of the listener; the last
    ``reserved_for_peers`` of them are kept for connections the service promotes
    (``env.promote``: an authenticated server): once the others fill the rest, a new
    connection is let in on probation and closed (``full``) unless its first frame gets it
    promoted, within ``probation_timeout`` (a peer speaks first at once: a flood of silent
    connections holds the kept slots that long, not ``handshake_timeout``; the shorter of the
    two counts). ``handshake_timeout``: the first frame must arrive within it; ``idle_timeout``:
    a connection silent that long is closed (None: never). ``send_queue_limit``: frames waiting
    to be written before the reader is disconnected as a slow consumer.
    """

    name: str
    host: str = "127.0.0.1"
    port: int = 0
    framing: Framing = Framing.LINES
    max_frame: int = 64 * 1024
    max_connections: int = 1000
    reserved_for_peers: int = 0
    handshake_timeout: float | None = 10.0
    probation_timeout: float = 1.0
    idle_timeout: float | None = None
    send_queue_limit: int = 1000
    path: str = "/"  # WebSocket only: where the upgrade is served
    static_root: str | None = None  # WebSocket only: files served over HTTP beside it
    heartbeat: float | None = None  # WebSocket only: ping this often, close if no pong
    close_timeout: float = 5.0  # a close handshake the peer does not finish is aborted then
    #: WebSocket only: a binary frame from the peer closes the connection with this code and
    #: reason (a text protocol that answers what it cannot parse); None: dropped and traced
    binary_close: tuple[int, str] | None = None

    def __post_init__(self) -> None:
        if not self.name:
            raise ConfigError("a listener needs a name")
        if not isinstance(self.framing, Framing):
            raise ConfigError(f"framing must be a Framing, got {self.framing!r}")
        if isinstance(self.port, bool) or not 0 <= self.port <= 65535:
            raise ConfigError(f"port must be in 0..65535, got {self.port!r}")
        for name in ("max_frame", "max_connections", "send_queue_limit"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name} must be an int >= 1, got {value!r}")
        if self.max_frame < 64:
            raise ConfigError(f"max_frame must be >= 64, got {self.max_frame}")
        if not 0 <= self.reserved_for_peers < self.max_connections:
            raise ConfigError(f"reserved_for_peers must be in 0..max_connections-1, got "
                              f"{self.reserved_for_peers}")
        _positive("handshake_timeout", self.handshake_timeout, optional=True)
        _positive("probation_timeout", self.probation_timeout)
        _positive("idle_timeout", self.idle_timeout, optional=True)
        _positive("heartbeat", self.heartbeat, optional=True)
        _positive("close_timeout", self.close_timeout)
        if not self.path.startswith("/"):
            raise ConfigError(f"path must start with '/', got {self.path!r}")
        ws_only = (self.static_root is not None or self.heartbeat is not None
                   or self.binary_close is not None)
        if ws_only and self.framing is not Framing.WS:
            raise ConfigError("static_root, heartbeat and binary_close need a WebSocket "
                              "listener")


def first_frame_deadline(spec: ListenerSpec, probation: bool) -> float | None:
    """Seconds an accepted connection has to send its first frame (None: no limit)."""
    if not probation:
        return spec.handshake_timeout
    if spec.handshake_timeout is None:
        return spec.probation_timeout
    return min(spec.handshake_timeout, spec.probation_timeout)


def parse_address(address: str) -> tuple[str, int, str | None]:
    """``host:port`` (a stream) or ``ws://host:port/path`` as (host, port, path or None)."""
    path: str | None = None
    rest = address
    if address.startswith("ws://"):
        rest = address[5:]
        slash = rest.find("/")
        path = "/" if slash < 0 else rest[slash:]
        rest = rest if slash < 0 else rest[:slash]
    host, sep, port_text = rest.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port_text.isdigit() or not 0 < int(port_text) <= 65535:
        raise ConfigError(f"address must be HOST:PORT or ws://HOST:PORT/PATH, got {address!r}")
    return host, int(port_text), path
