"""net: the asyncio runtime, driving the same sans-I/O processes over real connections.

One ``NetNode`` per process, many per ``NetHost`` (one event loop): its service listeners (JSON
lines, length prefixes or WebSocket, ``gossamer.core.conn``), peer links for ``env.send``, timers
on the loop, sqlite for storage.
"""

from .conns import Connections, NetConn
from .host import NetHost, run_until_signalled
from .multicast import (
    DEFAULT_RECV_BUFFER,
    GROUP_KEY_ENV,
    GroupKey,
    MulticastEnv,
    parse_group,
    resolve_group_key,
)
from .node import (
    PEER_LISTENER,
    Address,
    BackoffFactory,
    NetEnv,
    NetNode,
    NetNodeError,
    NodeState,
    TransportKind,
    host_port_address,
)
from .store import SqliteStore, StoreOpenError, WriteBehindStore

__all__ = [
    "DEFAULT_RECV_BUFFER",
    "GROUP_KEY_ENV",
    "PEER_LISTENER",
    "Address",
    "BackoffFactory",
    "Connections",
    "GroupKey",
    "MulticastEnv",
    "NetConn",
    "NetEnv",
    "NetHost",
    "NetNode",
    "NetNodeError",
    "NodeState",
    "SqliteStore",
    "StoreOpenError",
    "TransportKind",
    "WriteBehindStore",
    "host_port_address",
    "parse_group",
    "resolve_group_key",
    "run_until_signalled",
]
