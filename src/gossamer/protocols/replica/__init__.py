"""replica: the protocol family of seed 000 (gossip over WebSockets with total order per object).

``wire`` is the seed's exact JSON wire format; ``causal`` (causal delivery with NACK repair),
``objects`` (``ReplicaClient``: per-object total order, conflicts, rebase), ``hub`` (the relay's
routing core) and ``hubnode`` (that relay as a simulator process) build on it.
"""

from .causal import CausalConfig, CausalDelivery
from .hub import HubRelay, Route
from .hubnode import HubNode
from .keeper import HubKeeper, KeeperConfig
from .objects import LinkState, ReplicaClient, ReplicaConfig, Verdict
from .wire import (
    HUB_ID,
    Clear,
    Conflict,
    Data,
    Left,
    Nack,
    ReplicaCodec,
    Retry,
    Snapshot,
    StopAll,
    Subscribe,
    crc_of,
)

__all__ = [
    "HUB_ID",
    "CausalConfig",
    "CausalDelivery",
    "Clear",
    "Conflict",
    "Data",
    "HubKeeper",
    "HubNode",
    "HubRelay",
    "KeeperConfig",
    "Left",
    "LinkState",
    "Nack",
    "ReplicaClient",
    "ReplicaCodec",
    "ReplicaConfig",
    "Retry",
    "Route",
    "Snapshot",
    "StopAll",
    "Subscribe",
    "Verdict",
    "crc_of",
]
