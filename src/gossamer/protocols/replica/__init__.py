"""replica: the protocol family of seed 000 (gossip over WebSockets with total order per object).

``wire`` is the seed's exact JSON wire format; the causal delivery layer, per-object order and
the hub relay build on it.
"""

from .hub import HubRelay, Route
from .wire import (
    HUB_ID,
    Clear,
    Conflict,
    Data,
    Left,
    Nack,
    ReplicaCodec,
    Retry,
    StopAll,
    Subscribe,
    crc_of,
)

__all__ = [
    "HUB_ID",
    "Clear",
    "Conflict",
    "Data",
    "HubRelay",
    "Left",
    "Nack",
    "ReplicaCodec",
    "Retry",
    "Route",
    "StopAll",
    "Subscribe",
    "crc_of",
]
