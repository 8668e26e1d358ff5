"""net: the asyncio runtime, driving the same sans-I/O processes over TCP (JSON lines) or WebSocket.

One ``NetNode`` per protocol process, many per ``NetHost`` (one event loop); sqlite for storage.
"""

from .host import (
    BackoffFactory,
    NetEnv,
    NetHost,
    NetNode,
    NetNodeError,
    NodeState,
    run_until_signalled,
)
from .loopenv import LoopEnv
from .store import SqliteStore, WriteBehindStore
from .transport import Address, Connection, LinkError, Listener, TransportKind, connect, listen

__all__ = [
    "Address",
    "BackoffFactory",
    "Connection",
    "LinkError",
    "Listener",
    "LoopEnv",
    "NetEnv",
    "NetHost",
    "NetNode",
    "NetNodeError",
    "NodeState",
    "SqliteStore",
    "TransportKind",
    "WriteBehindStore",
    "connect",
    "listen",
    "run_until_signalled",
]
