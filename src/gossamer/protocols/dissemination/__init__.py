"""dissemination: getting a message to every node (gossip flood or Plumtree-style tree, with
anti-entropy recovery) over a membership layer."""

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
from .scribe import (
    Heartbeat,
    Publish,
    PublishAck,
    Scribe,
    ScribeConfig,
    ScribeData,
    ScribeLeave,
    ScribeMessage,
    ScribeNack,
    TreeRole,
)

__all__ = [
    "GossipBroadcast",
    "GossipConfig",
    "GossipData",
    "GossipMessage",
    "Graft",
    "Heartbeat",
    "IHave",
    "Mode",
    "Prune",
    "Publish",
    "PublishAck",
    "Pull",
    "Scribe",
    "ScribeConfig",
    "ScribeData",
    "ScribeLeave",
    "ScribeMessage",
    "ScribeNack",
    "Summary",
    "TreeRole",
    "message_id",
    "parse_message_id",
]
