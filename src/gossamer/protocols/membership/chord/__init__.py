"""Chord: a structured overlay ring that routes every key (a topic) to its root, the live node
whose identifier follows the key's, for Scribe trees and topic owners (seed 001).

Identifiers are SHA-256 of a node's name (``host:port``; ``host:port#i`` for virtual node ``i``)
truncated to ``bits``. Joins go through a contact; stabilize/notify, fix_fingers, a successor list
of ``r`` entries and predecessor pings keep the ring correct under churn. There are no
connections, so failures are timeouts on requests: a successor that does not answer its
stabilize request, a predecessor that misses a ping, a next hop that does not acknowledge a
routed message. Each node also looks itself up now and then through another node (a peer
evicted earlier, or a live one): rings split by a partition merge again when it heals, and
successor pointers crossed by concurrent joins straighten out.

``ring`` (identifiers, one virtual node's tables), ``messages``, ``base`` (configuration, the
host's state, requests, failure detection), ``routing`` (routes and lookups with hops),
``maintenance`` (the per-node protocol) and ``host`` (``ChordHost``, ``Chord``, whole-ring
helpers).
"""

from .base import ChordConfig
from .host import Chord, ChordHost, bootstrap, key_load
from .messages import (
    Ack,
    FindSuccessor,
    GetPredecessor,
    Leave,
    LookupPurpose,
    Notify,
    Nudge,
    Ping,
    Pong,
    PredecessorIs,
    RootFound,
    Route,
    RouteKind,
    SuccessorIs,
)
from .ring import ChordState, Peer, VNodeView, chord_id, in_half_open, in_open, vnode_name

__all__ = [
    "Ack",
    "Chord",
    "ChordConfig",
    "ChordHost",
    "ChordState",
    "FindSuccessor",
    "GetPredecessor",
    "Leave",
    "LookupPurpose",
    "Notify",
    "Nudge",
    "Peer",
    "Ping",
    "Pong",
    "PredecessorIs",
    "RootFound",
    "Route",
    "RouteKind",
    "SuccessorIs",
    "VNodeView",
    "bootstrap",
    "chord_id",
    "in_half_open",
    "in_open",
    "key_load",
    "vnode_name",
]
