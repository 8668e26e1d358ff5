"""Chord's ring: identifiers and interval arithmetic, and one virtual node's tables (successor
list, predecessor, finger table) with the lookups routing makes in them.

Pure state and arithmetic: no messages, no timers, no trace rows (the node protocol in
``maintenance`` and ``routing`` changes these tables and says so).
"""

from __future__ import annotations

import bisect
import enum
import functools
import hashlib
import itertools
from collections.abc import Iterable
from typing import NamedTuple

from ....core.ids import NodeId

__all__ = [
    "MAX_BITS",
    "MAX_VNODES",
    "ChordState",
    "Peer",
    "PeerWire",
    "VNode",
    "VNodeView",
    "chord_id",
    "in_half_open",
    "in_open",
    "vnode_name",
]

MAX_BITS = 256
MAX_VNODES = 1024

PeerWire = tuple[str, int, str]
"""A peer on the wire: (node id, virtual node index, identifier in lowercase hex)."""


# -- identifiers and the ring -----------------------------------------------------------------


@functools.lru_cache(maxsize=1 << 16)
def chord_id(name: str, bits: int) -> int:
    """The ring identifier of a node name or a key: SHA-256, truncated to its top ``bits``."""
    digest = hashlib.sha256(name.encode()).digest()
    return int.from_bytes(digest, "big") >> (MAX_BITS - bits)


def vnode_name(node: NodeId, index: int, vnodes: int) -> str:
    """What a virtual node's identifier hashes: the node id itself when it runs only one."""
    return node if vnodes == 1 else f"{node}#{index}"


def in_half_open(x: int, a: int, b: int) -> bool:
    """``x`` in the ring interval (a, b]; (a, a] is the whole ring."""
    if a < b:
        return a < x <= b
    return x > a or x <= b


def in_open(x: int, a: int, b: int) -> bool:
    """``x`` in the ring interval (a, b); (a, a) is the whole ring but ``a``."""
    if a < b:
        return a < x < b
    return x != a if a == b else (x > a or x < b)


class Peer(NamedTuple):
    """One Chord node as another knows it: ring identifier, host node id, virtual node index."""

    ident: int
    node: NodeId
    vnode: int

    def wire(self) -> PeerWire:
        return (self.node, self.vnode, format(self.ident, "x"))


# -- one virtual node's tables ----------------------------------------------------------------


class ChordState(enum.Enum):
    IDLE = "idle"  # built, waiting for join() or bootstrap()
    JOINING = "joining"  # looking up its own successor through a contact
    ACTIVE = "active"  # on the ring
    STOPPED = "stopped"  # left


class VNodeView(NamedTuple):
    """A read-only picture of one virtual node's tables (tests, benchmarks, snapshots)."""

    me: Peer
    state: ChordState
    successors: tuple[Peer, ...]
    predecessor: Peer | None
    fingers: tuple[Peer | None, ...]


class VNode:
    """One virtual node's ring state."""

    __slots__ = ("finger_ref", "fingers", "index", "me", "modulus", "next_finger", "ping_ref",
                 "predecessor", "stabilize_ref", "state", "successors", "table")

    def __init__(self, me: Peer, index: int, bits: int) -> None:
        self.me = me
        self.index = index
        self.modulus = 1 << bits
        self.state = ChordState.IDLE
        self.successors: list[Peer] = []  # empty: alone on the ring (successor is itself)
        self.predecessor: Peer | None = None
        self.fingers: list[Peer | None] = [None] * bits  # finger i: successor(me + 2**i)
        self.next_finger = 0
        self.stabilize_ref: int | None = None
        self.ping_ref: int | None = None
        self.finger_ref: int | None = None
        # (distances, peers): fingers and successors sorted by distance from me, made lazily
        self.table: tuple[list[int], list[Peer]] | None = None

    @property
    def successor(self) -> Peer:
        return self.successors[0] if self.successors else self.me

    def view(self) -> VNodeView:
        return VNodeView(self.me, self.state, tuple(self.successors), self.predecessor,
                         tuple(self.fingers))

    def distance(self, ident: int) -> int:
        return (ident - self.me.ident) % self.modulus

    def set_successors(self, peers: Iterable[Peer], limit: int) -> None:
        """Keep the ``limit`` nearest distinct peers after me, in ring order, never me."""
        by_ident = {p.ident: p for p in peers}
        by_ident.pop(self.me.ident, None)
        ordered = sorted(by_ident.values(), key=lambda p: self.distance(p.ident))
        self.successors = ordered[:limit]
        self.table = None
        self.fill_fingers_from_successors()

    def fill_fingers_from_successors(self) -> None:
        """Fingers whose start falls before the last successor follow from the list."""
        if not self.successors:
            return
        dists = [self.distance(p.ident) for p in self.successors]
        fingers = self.fingers
        position = 0
        for i in range(len(fingers)):
            start = 1 << i
            if start > dists[-1]:
                break
            while dists[position] < start:
                position += 1
            fingers[i] = self.successors[position]

    def covered_by_successors(self, i: int) -> bool:
        return bool(self.successors) and (1 << i) <= self.distance(self.successors[-1].ident)

    def fallback_successors(self) -> list[Peer]:
        """The successor list ran out: the nearest finger left, else the predecessor."""
        nearest = min((p for p in self.fingers if p is not None),
                      key=lambda p: self.distance(p.ident), default=None)
        if nearest is not None:
            return [nearest]
        return [self.predecessor] if self.predecessor is not None else []

    def seed_fingers(self, known: Iterable[Peer]) -> None:
        """A first finger table from peers we heard of: for each start, the first known peer at
        or after it (fix_fingers corrects it later)."""
        ordered = sorted({p.ident: p for p in known if p.ident != self.me.ident}.values(),
                         key=lambda p: self.distance(p.ident))
        if not ordered:
            return
        dists = [self.distance(p.ident) for p in ordered]
        for i in range(len(self.fingers)):
            if self.fingers[i] is None:
                position = bisect.bisect_left(dists, 1 << i)
                if position < len(ordered):
                    self.fingers[i] = ordered[position]
        self.table = None

    def routing_table(self) -> tuple[list[int], list[Peer]]:
        table = self.table
        if table is None:
            by_ident: dict[int, Peer] = {}
            for peer in self.fingers:
                if peer is not None:
                    by_ident[peer.ident] = peer
            for peer in self.successors:
                by_ident[peer.ident] = peer
            by_ident.pop(self.me.ident, None)
            ordered = sorted(by_ident.values(), key=lambda p: self.distance(p.ident))
            table = self.table = ([self.distance(p.ident) for p in ordered], ordered)
        return table

    def closest_preceding(self, target: int) -> Peer | None:
        dists, peers = self.routing_table()
        position = bisect.bisect_left(dists, self.distance(target)) - 1
        return peers[position] if position >= 0 else None

    def successor_list_root(self, k: int) -> Peer | None:
        """The successor-list entry that is the root of ``k``, when ``k`` falls inside the list:
        one hop straight to it instead of one through its predecessor."""
        successors = self.successors
        for before, after in itertools.pairwise(successors):
            if in_half_open(k, before.ident, after.ident):
                return after
        return None

    def owns(self, k: int) -> bool:
        """Am I the root of ``k`` in my own view?"""
        if not self.successors:
            return True  # alone on the ring
        pred = self.predecessor
        return pred is not None and in_half_open(k, pred.ident, self.me.ident)
