"""Chord's messages: successor lookups, stabilize and notify, predecessor pings, routed messages
with their hop acknowledgements, graceful leaves. Each validates what it carries.
"""

from __future__ import annotations

import enum
import re
from typing import Any

from ....core.errors import ConfigError
from ....core.ids import check_node_id
from ....core.messages import Codec, Message, TraceIds, message
from .ring import MAX_VNODES, PeerWire

__all__ = [
    "MAX_KEY_LENGTH",
    "MAX_PEER_LIST",
    "Ack",
    "FindSuccessor",
    "GetPredecessor",
    "Leave",
    "LookupPurpose",
    "Notify",
    "Nudge",
    "Ping",
    "Pong",
    "PredecessorIs",
    "RootFound",
    "Route",
    "RouteKind",
    "SuccessorIs",
]

MAX_KEY_LENGTH = 1024
MAX_PEER_LIST = 512  # peers one message may carry (successor lists, finger hints)
_HEX_ID = re.compile(r"[0-9a-f]{1,64}")


# -- field checks -------------------------------------------------------------------------------


def _check_peer(field: str, peer: PeerWire) -> None:
    node, vnode, ident = peer
    try:
        check_node_id(node)
    except ConfigError as exc:
        raise ValueError(f"{field}: {exc}") from None
    if not 0 <= vnode < MAX_VNODES:
        raise ValueError(f"{field}: vnode {vnode} not in [0, {MAX_VNODES})")
    if not _HEX_ID.fullmatch(ident):
        raise ValueError(f"{field}: identifier {ident!r} is not 1-64 lowercase hex digits")


def _check_peers(field: str, peers: tuple[PeerWire, ...]) -> None:
    if len(peers) > MAX_PEER_LIST:
        raise ValueError(f"{field}: {len(peers)} peers, over {MAX_PEER_LIST}")
    for peer in peers:
        _check_peer(field, peer)


def _check_non_negative(**fields: int) -> None:
    for name, value in fields.items():
        if value < 0:
            raise ValueError(f"{name} must be >= 0, got {value}")


def _check_positive(**fields: int) -> None:
    for name, value in fields.items():
        if value < 1:
            raise ValueError(f"{name} must be >= 1, got {value}")


def _check_vnode(to: int) -> None:
    if not 0 <= to < MAX_VNODES:
        raise ValueError(f"to: vnode {to} not in [0, {MAX_VNODES})")


# -- messages -----------------------------------------------------------------------------------


class LookupPurpose(enum.Enum):
    """Why a node looks up the successor of an identifier."""

    JOIN = "join"  # its own identifier, through a contact
    FINGER = "finger"  # a finger's start
    PROBE = "probe"  # its own identifier, through another node: heals partitions and crossings


class RouteKind(enum.Enum):
    ROUTE = "route"  # an upper-layer payload, with an upcall at every hop and delivery at the root
    FIND_ROOT = "find_root"  # who is the root of a key: the root tells the asker


CODEC = Codec()
"""The codec of the chord messages (``Codec.union`` joins it with a node's other layers)."""


@message("chord.find", codec=CODEC)
class FindSuccessor(Message):
    """Who follows ``target`` on the ring? Routed to the target's predecessor, which answers the
    asker directly with ``SuccessorIs``."""

    to: int
    target: str
    asker: PeerWire
    ref: int
    purpose: str
    hops: int = 0
    hop_ref: int = 0  # 0: the sender waits for no hop acknowledgement

    def __post_init__(self) -> None:
        _check_vnode(self.to)
        if not _HEX_ID.fullmatch(self.target):
            raise ValueError(f"target {self.target!r} is not 1-64 lowercase hex digits")
        _check_peer("asker", self.asker)
        _check_positive(ref=self.ref)
        _check_non_negative(hops=self.hops, hop_ref=self.hop_ref)
        LookupPurpose(self.purpose)


@message("chord.successor_is", codec=CODEC)
class SuccessorIs(Message):
    """The answer to ``FindSuccessor``: the responder's successor list (its first entry is the
    target's successor); ``hints`` are its fingers, for a joining node's first finger table."""

    ref: int
    responder: PeerWire
    successors: tuple[PeerWire, ...]
    hops: int = 0
    hints: tuple[PeerWire, ...] = ()

    def __post_init__(self) -> None:
        _check_positive(ref=self.ref)
        _check_peer("responder", self.responder)
        if not self.successors:
            raise ValueError("successors must not be empty")
        _check_peers("successors", self.successors)
        _check_peers("hints", self.hints)
        _check_non_negative(hops=self.hops)


@message("chord.get_predecessor", codec=CODEC)
class GetPredecessor(Message):
    """Stabilize: who is your predecessor, and what is your successor list?"""

    to: int
    ref: int

    def __post_init__(self) -> None:
        _check_vnode(self.to)
        _check_positive(ref=self.ref)


@message("chord.predecessor_is", codec=CODEC)
class PredecessorIs(Message):
    ref: int
    predecessor: PeerWire | None
    successors: tuple[PeerWire, ...] = ()

    def __post_init__(self) -> None:
        _check_positive(ref=self.ref)
        if self.predecessor is not None:
            _check_peer("predecessor", self.predecessor)
        _check_peers("successors", self.successors)


@message("chord.notify", codec=CODEC)
class Notify(Message):
    """I think I am your predecessor."""

    to: int
    sender: PeerWire

    def __post_init__(self) -> None:
        _check_vnode(self.to)
        _check_peer("sender", self.sender)


@message("chord.nudge", codec=CODEC)
class Nudge(Message):
    """My predecessor changed: stabilize with me now."""

    to: int
    sender: PeerWire

    def __post_init__(self) -> None:
        _check_vnode(self.to)
        _check_peer("sender", self.sender)


@message("chord.ping", codec=CODEC)
class Ping(Message):
    """Predecessor check: are you alive?"""

    to: int
    ref: int

    def __post_init__(self) -> None:
        _check_vnode(self.to)
        _check_positive(ref=self.ref)


@message("chord.pong", codec=CODEC)
class Pong(Message):
    ref: int

    def __post_init__(self) -> None:
        _check_positive(ref=self.ref)


@message("chord.route", codec=CODEC)
class Route(Message):
    """A ROUTE (upper-layer payload) or ROOT (find the root) message on its way to the key's
    root. ``final``: the sender believes the receiver is the root."""

    to: int
    key: str
    origin: PeerWire
    seq: int
    kind: str
    payload: Any = None
    ref: int = 0  # the asker's request, for FIND_ROOT
    hops: int = 0
    final: bool = False
    hop_ref: int = 0

    def __post_init__(self) -> None:
        _check_vnode(self.to)
        if not 1 <= len(self.key) <= MAX_KEY_LENGTH:
            raise ValueError(f"key must have 1-{MAX_KEY_LENGTH} characters")
        _check_peer("origin", self.origin)
        _check_positive(seq=self.seq)
        kind = RouteKind(self.kind)
        _check_non_negative(ref=self.ref, hops=self.hops, hop_ref=self.hop_ref)
        if kind is RouteKind.FIND_ROOT and self.ref < 1:
            raise ValueError("a find_root message needs ref >= 1")

    def trace_ids(self) -> TraceIds:
        origin = self.origin[0]
        return (f"{origin}:{self.seq}", origin, self.key, self.seq)


@message("chord.ack", codec=CODEC)
class Ack(Message):
    """Hop acknowledgement: I took the routed message ``hop_ref`` you sent me."""

    hop_ref: int

    def __post_init__(self) -> None:
        _check_positive(hop_ref=self.hop_ref)


@message("chord.root_found", codec=CODEC)
class RootFound(Message):
    """The answer to a FIND_ROOT: I am the root of ``key``."""

    ref: int
    key: str
    root: PeerWire
    hops: int

    def __post_init__(self) -> None:
        _check_positive(ref=self.ref)
        if not 1 <= len(self.key) <= MAX_KEY_LENGTH:
            raise ValueError(f"key must have 1-{MAX_KEY_LENGTH} characters")
        _check_peer("root", self.root)
        _check_non_negative(hops=self.hops)


@message("chord.leave", codec=CODEC)
class Leave(Message):
    """A graceful leave: to my successor with my predecessor, to my predecessor with my
    successor list, so both close the gap at once."""

    to: int
    sender: PeerWire
    predecessor: PeerWire | None = None
    successors: tuple[PeerWire, ...] = ()

    def __post_init__(self) -> None:
        _check_vnode(self.to)
        _check_peer("sender", self.sender)
        if self.predecessor is not None:
            _check_peer("predecessor", self.predecessor)
        _check_peers("successors", self.successors)

