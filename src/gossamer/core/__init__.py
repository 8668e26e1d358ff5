"""core: ids, messages and codecs, the env contract, vector clocks, trace rows, errors."""

from .backoff import Backoff, ExponentialBackoff, FibonacciBackoff
from .env import Env, Process, ProcessFactory, Store, TimerHandle, get_json, put_json
from .errors import (
    ConfigError,
    DecodeError,
    FrameTooLarge,
    GossamerError,
    InvalidMessage,
    LocalError,
    NotBuiltError,
    OperationError,
    ProtocolError,
    StateError,
    UnknownMessageType,
)
from .ids import NodeId, check_node_id, node_id, node_ids
from .messages import (
    DEFAULT_MAX_FRAME,
    Codec,
    Message,
    TraceIds,
    WireCodec,
    default_codec,
    message,
)
from .trace import COLUMN_TYPES, COLUMNS, MemorySink, NullSink, Row, TraceRow, TraceSink
from .vclock import Order, VectorClock

__all__ = [
    "COLUMNS",
    "COLUMN_TYPES",
    "DEFAULT_MAX_FRAME",
    "Backoff",
    "Codec",
    "ConfigError",
    "DecodeError",
    "Env",
    "ExponentialBackoff",
    "FibonacciBackoff",
    "FrameTooLarge",
    "GossamerError",
    "InvalidMessage",
    "LocalError",
    "MemorySink",
    "Message",
    "NodeId",
    "NotBuiltError",
    "NullSink",
    "OperationError",
    "Order",
    "Process",
    "ProcessFactory",
    "ProtocolError",
    "Row",
    "StateError",
    "Store",
    "TimerHandle",
    "TraceIds",
    "TraceRow",
    "TraceSink",
    "UnknownMessageType",
    "VectorClock",
    "WireCodec",
    "check_node_id",
    "default_codec",
    "get_json",
    "message",
    "node_id",
    "node_ids",
    "put_json",
]
