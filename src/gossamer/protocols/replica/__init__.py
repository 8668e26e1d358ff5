"""replica: the protocol family of seed 000 (gossip over WebSockets with total order per object).

``wire`` is the seed's exact JSON wire format. ``objects`` (``ReplicaClient``: the objects,
conflicts, rebase, offline queue) builds on causal delivery and per-object order
(``gossamer.protocols.ordering.causal`` and ``.per_object``); ``keeper`` (the hub's snapshot
keeper) builds on ``objects``, and ``hub_service`` (``HubService``: the hub as a service of the
connection contract) on the keeper and the hub relay
(``gossamer.protocols.dissemination.hub_relay``); ``node`` (``ReplicaNode``) is a client as a
process over one connection to the hub. Both run unchanged in the simulator and on sockets.

The wire format is imported at once, everything else on first use: the ordering and
dissemination layers speak this package's wire format and this face re-exports their seed-000
parts, so importing them eagerly here would make importing those layers first an import cycle.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .wire import (
    HUB_ID,
    Clear,
    Conflict,
    Data,
    JoinRefusal,
    Left,
    Nack,
    Refused,
    ReplicaCodec,
    Retry,
    Snapshot,
    StopAll,
    Subscribe,
    Welcome,
    crc_of,
)

if TYPE_CHECKING:
    from ..dissemination.hub_relay import HubRelay, Route
    from ..ordering.causal import CausalConfig, CausalDelivery
    from ..ordering.per_object import Verdict
    from .config import LinkState, ReplicaConfig
    from .hub_service import HubService
    from .identity import ClientBook
    from .keeper import HubKeeper, KeeperConfig
    from .node import ReplicaNode
    from .objects import ReplicaClient

# name -> the module it comes from, imported when the name is first asked for
_ON_FIRST_USE = {
    "CausalConfig": "..ordering.causal",
    "CausalDelivery": "..ordering.causal",
    "HubRelay": "..dissemination.hub_relay",
    "Route": "..dissemination.hub_relay",
    "HubService": ".hub_service",
    "ClientBook": ".identity",
    "HubKeeper": ".keeper",
    "KeeperConfig": ".keeper",
    "LinkState": ".config",
    "ReplicaClient": ".objects",
    "ReplicaConfig": ".config",
    "ReplicaNode": ".node",
    "Verdict": "..ordering.per_object",
}

__all__ = [
    "HUB_ID",
    "CausalConfig",
    "CausalDelivery",
    "Clear",
    "ClientBook",
    "Conflict",
    "Data",
    "HubKeeper",
    "HubRelay",
    "HubService",
    "JoinRefusal",
    "KeeperConfig",
    "Left",
    "LinkState",
    "Nack",
    "Refused",
    "ReplicaClient",
    "ReplicaCodec",
    "ReplicaConfig",
    "ReplicaNode",
    "Retry",
    "Route",
    "Snapshot",
    "StopAll",
    "Subscribe",
    "Verdict",
    "Welcome",
    "crc_of",
]


def __getattr__(name: str) -> Any:
    module = _ON_FIRST_USE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value  # once: later lookups find it without this function
    return value
