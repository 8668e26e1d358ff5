"""replica: the protocol family of seed 000 (gossip over WebSockets with total order per object).

``wire`` is the seed's exact JSON wire format. ``objects`` (``ReplicaClient``: the objects,
conflicts, rebase, offline queue) builds on causal delivery and per-object order
(``gossamer.protocols.ordering.causal`` and ``.per_object``);
``hub`` (the relay's routing core), ``keeper`` (the hub's snapshot keeper) and ``hubnode`` (that
relay as a simulator process) build on those.

The wire format is imported at once, everything else on first use: the ordering layer speaks
this package's wire format and this face re-exports its seed-000 part, so importing it eagerly
here would make importing ``gossamer.protocols.ordering.causal`` first an import cycle.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

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

if TYPE_CHECKING:
    from ..ordering.causal import CausalConfig, CausalDelivery
    from ..ordering.per_object import Verdict
    from .hub import HubRelay, Route
    from .hubnode import HubNode
    from .keeper import HubKeeper, KeeperConfig
    from .objects import LinkState, ReplicaClient, ReplicaConfig

# name -> the module it comes from, imported when the name is first asked for
_ON_FIRST_USE = {
    "CausalConfig": "..ordering.causal",
    "CausalDelivery": "..ordering.causal",
    "HubRelay": ".hub",
    "Route": ".hub",
    "HubNode": ".hubnode",
    "HubKeeper": ".keeper",
    "KeeperConfig": ".keeper",
    "LinkState": ".objects",
    "ReplicaClient": ".objects",
    "ReplicaConfig": ".objects",
    "Verdict": "..ordering.per_object",
}

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


def __getattr__(name: str) -> Any:
    module = _ON_FIRST_USE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value  # once: later lookups find it without this function
    return value
