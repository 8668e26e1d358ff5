"""What the seed-003 server keeps and is configured with: its settings (``ServerConfig``), the
records of known servers, clients and username locks, the roles of its connections and its
state in the tree, and the extension fields it stamps on activities (``activity_ids``,
``relay_ids``)."""

from __future__ import annotations

import dataclasses
import enum
import hashlib
from typing import Any

from ...core.conn import Conn
from ...core.errors import ConfigError
from .wire import DEFAULT_MAX_LINE

__all__ = [
    "FORGET_WINDOWS",
    "LAYER",
    "LOG_ORIGINS",
    "MAX_CANCELLED",
    "ORIGIN_KEY",
    "RELAY_KEY",
    "RELAY_SEQ_KEY",
    "SEQ_KEY",
    "UNKNOWN_SECRET",
    "ClientSession",
    "ConnRole",
    "KnownServer",
    "ServerConfig",
    "TreeState",
    "UsernameLock",
    "activity_ids",
    "digest_of",
    "relay_ids",
]

LAYER = "activity"
ORIGIN_KEY = "_origin"  # extension fields of a processed activity: who published it and its
SEQ_KEY = "_seq"  # per-publisher sequence number (dedup after reconnects, FIFO checks)
# extension fields stamped by the server an activity enters: that server (and its incarnation)
# and its own number for the activity, so that after a failure the gap can be resent
RELAY_KEY = "_via"
RELAY_SEQ_KEY = "_n"
LOG_ORIGINS = 32  # origin servers whose recent activities a server keeps for resending
FORGET_WINDOWS = 10  # known servers silent this many parent-loss windows are forgotten
# the record of a user registered through a server that did not say the secret (a reference
# implementation's LOCK_REQUEST): the name is taken everywhere, and no secret logs in with it
UNKNOWN_SECRET = "!"
MAX_CANCELLED = 10_000  # LOCK_CANCEL ids remembered to stop a cancel from circling

def activity_ids(activity: dict[str, Any]) -> tuple[str, int] | None:
    """(origin, seq) a server of ours stamped on a processed activity, if it has them."""
    return _ids(activity, ORIGIN_KEY, SEQ_KEY)


def relay_ids(activity: dict[str, Any]) -> tuple[str, int] | None:
    """(origin server, its number) the server the activity entered stamped on it, if any."""
    ids = _ids(activity, RELAY_KEY, RELAY_SEQ_KEY)
    return ids if ids is not None and ids[1] >= 1 else None


def _ids(activity: dict[str, Any], name_key: str, number_key: str) -> tuple[str, int] | None:
    name, number = activity.get(name_key), activity.get(number_key)
    if isinstance(name, str) and isinstance(number, int) and not isinstance(number, bool):
        return name, number
    return None


class ConnRole(enum.Enum):
    PENDING = "pending"  # incoming, not yet logged in or authenticated
    CLIENT = "client"  # logged in
    CHILD = "child"  # incoming server that authenticated
    DIALING = "dialing"  # outgoing, not yet connected
    JOINING = "joining"  # outgoing, AUTHENTICATE sent, waiting for SERVER_INFO
    PARENT = "parent"  # outgoing, SERVER_INFO received


class TreeState(enum.Enum):
    ROOT = "root"  # no parent by design (first server) or after failures
    JOINING = "joining"  # first connection to the configured remote
    ATTACHED = "attached"
    RECONNECTING = "reconnecting"  # parent lost; activities for it are buffered


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ServerConfig:
    secret: str
    hostname: str = "127.0.0.1"
    port: int = 3780
    server_id: str | None = None  # default: the env's node id
    remote: tuple[str, int] | None = None
    announce_interval: float = 5.0
    miss_announces: int = 3  # intervals of silence before the parent is presumed lost
    join_attempts: int = 3  # refusals of our secret (AUTHENTICATION_FAIL) before giving up
    # a load change is announced early, at most once per this many seconds (0: only on the
    # interval), so REDIRECT decisions elsewhere are not made on loads an interval old
    load_announce_gap: float = 0.05
    reconnect_delay: float = 1.0
    # a parent that neither answers AUTHENTICATE nor refuses it for this long took it: a server
    # of the original course protocol (no SERVER_INFO); None: wait for SERVER_INFO only
    legacy_accept_after: float | None = 2.0
    max_depth: int | None = None
    max_buffer: int = 10_000  # activities kept per origin server, resent after a failure
    max_line: int = DEFAULT_MAX_LINE
    max_origins: int = 100_000
    hash_iterations: int = 100_000
    # broken on purpose, for experiments that plant a violation: relay no activity at all
    drop_broadcasts: bool = False

    def __post_init__(self) -> None:
        if not self.secret:
            raise ConfigError("secret must be non-empty")
        if not 0 < self.port <= 65535:
            raise ConfigError(f"port must be in 1..65535, got {self.port}")
        if self.announce_interval <= 0:
            raise ConfigError(f"announce_interval must be > 0, got {self.announce_interval}")
        if self.load_announce_gap < 0:
            raise ConfigError(f"load_announce_gap must be >= 0, got {self.load_announce_gap}")
        if self.legacy_accept_after is not None and self.legacy_accept_after <= 0:
            raise ConfigError(f"legacy_accept_after must be > 0 or None, got "
                              f"{self.legacy_accept_after}")
        if self.reconnect_delay <= 0:
            raise ConfigError(f"reconnect_delay must be > 0, got {self.reconnect_delay}")
        if self.max_depth is not None and self.max_depth < 1:
            raise ConfigError(f"max_depth must be >= 1, got {self.max_depth}")
        for name in ("miss_announces", "join_attempts", "max_buffer", "max_origins",
                     "hash_iterations"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)}")


@dataclasses.dataclass(slots=True)
class KnownServer:
    id: str
    load: int
    hostname: str
    port: int
    level: int | None  # None: a legacy server (no level in its SERVER_ANNOUNCE)
    seen: float


@dataclasses.dataclass(slots=True)
class ClientSession:
    username: str
    secret_digest: bytes
    origin: str
    seq: int = 0


@dataclasses.dataclass(slots=True)
class UsernameLock:
    username: str
    secret: str | None
    upstream: Conn | None  # the server conn that asked us; None at the registering server
    client: Conn | None  # the registering client's conn (origin server only)
    waiting: set[Conn]


def digest_of(secret: str) -> bytes:
    return hashlib.sha256(secret.encode()).digest()
