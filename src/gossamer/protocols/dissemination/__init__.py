"""dissemination: getting a message to every node (gossip flood or Plumtree-style tree, with
anti-entropy recovery) over a membership layer.

``gossip`` (over HyParView), ``scribe`` (a multicast tree per topic over Chord) and
``hub_relay`` (seed 000's hub: one relay that multicasts to every connection).
"""

from .gossip import (
    GossipBroadcast,
    GossipConfig,
    GossipData,
    GossipMessage,
    Graft,
    IHave,
    Mode,
    Prune,
    Pull,
    Summary,
    message_id,
    parse_message_id,
)
from .hub_relay import HubRelay
from .scribe import (
    Heartbeat,
    Publish,
    PublishAck,
    PublishRedirect,
    PublishRefused,
    Scribe,
    ScribeConfig,
    ScribeData,
    ScribeLeave,
    ScribeMessage,
    ScribeNack,
    ScribeSince,
    TreeRole,
)

__all__ = [
    "GossipBroadcast",
    "GossipConfig",
    "GossipData",
    "GossipMessage",
    "Graft",
    "Heartbeat",
    "HubRelay",
    "IHave",
    "Mode",
    "Prune",
    "Publish",
    "PublishAck",
    "PublishRedirect",
    "PublishRefused",
    "Pull",
    "Scribe",
    "ScribeConfig",
    "ScribeData",
    "ScribeLeave",
    "ScribeMessage",
    "ScribeNack",
    "ScribeSince",
    "Summary",
    "TreeRole",
    "message_id",
    "parse_message_id",
]
