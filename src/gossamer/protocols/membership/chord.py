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
"""

from __future__ import annotations

import bisect
import dataclasses
import enum
import functools
import hashlib
import itertools
import re
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple

from ...core.env import Env, TimerHandle, get_json, put_json
from ...core.errors import ConfigError
from ...core.ids import NodeId, check_node_id
from ...core.messages import Message, TraceIds, message

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

LAYER = "chord"
MAX_BITS = 256
MAX_VNODES = 1024
MAX_KEY_LENGTH = 1024
MAX_PEER_LIST = 512  # peers one message may carry (successor lists, finger hints)
_STORE_TABLE = "chord"
_HEX_ID = re.compile(r"[0-9a-f]{1,64}")

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


@message("chord.find")
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


@message("chord.successor_is")
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


@message("chord.get_predecessor")
class GetPredecessor(Message):
    """Stabilize: who is your predecessor, and what is your successor list?"""

    to: int
    ref: int

    def __post_init__(self) -> None:
        _check_vnode(self.to)
        _check_positive(ref=self.ref)


@message("chord.predecessor_is")
class PredecessorIs(Message):
    ref: int
    predecessor: PeerWire | None
    successors: tuple[PeerWire, ...] = ()

    def __post_init__(self) -> None:
        _check_positive(ref=self.ref)
        if self.predecessor is not None:
            _check_peer("predecessor", self.predecessor)
        _check_peers("successors", self.successors)


@message("chord.notify")
class Notify(Message):
    """I think I am your predecessor."""

    to: int
    sender: PeerWire

    def __post_init__(self) -> None:
        _check_vnode(self.to)
        _check_peer("sender", self.sender)


@message("chord.nudge")
class Nudge(Message):
    """My predecessor changed: stabilize with me now."""

    to: int
    sender: PeerWire

    def __post_init__(self) -> None:
        _check_vnode(self.to)
        _check_peer("sender", self.sender)


@message("chord.ping")
class Ping(Message):
    """Predecessor check: are you alive?"""

    to: int
    ref: int

    def __post_init__(self) -> None:
        _check_vnode(self.to)
        _check_positive(ref=self.ref)


@message("chord.pong")
class Pong(Message):
    ref: int

    def __post_init__(self) -> None:
        _check_positive(ref=self.ref)


@message("chord.route")
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


@message("chord.ack")
class Ack(Message):
    """Hop acknowledgement: I took the routed message ``hop_ref`` you sent me."""

    hop_ref: int

    def __post_init__(self) -> None:
        _check_positive(hop_ref=self.hop_ref)


@message("chord.root_found")
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


@message("chord.leave")
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


# -- configuration and state ----------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class ChordConfig:
    bits: int = 32  # identifier bits: 32 reads well in tests; 64 or more for large rings
    successors: int = 8  # r: the successor list's length
    vnodes: int = 1  # virtual nodes per host
    stabilize_interval: float = 0.5
    fix_fingers_interval: float = 0.5
    fix_all_fingers: bool = False  # False: one finger lookup per tick; True: a whole round
    check_predecessor_interval: float = 1.0
    request_timeout: float = 0.3  # stabilize and ping replies, hop acknowledgements
    suspect_after: int = 2  # deadlines a peer misses in a row before it is evicted
    lookup_timeout: float = 2.0  # successor lookups and find_root answers, end to end
    lookup_retries: int = 2  # find_root attempts after the first one
    hop_retries: int = 3  # next hops tried for one routed message after a hop timeout
    join_retry: float = 1.0  # wait before trying the next contact
    max_hops: int = 64  # routed messages that went further are dropped (loops under churn)
    max_pending: int = 4096  # routed messages awaiting a hop ack, plus lookups in flight
    dedupe_window: int = 4096  # (origin, seq) of recent deliveries, to drop duplicates
    probe_interval: float = 1.0  # how often a node looks itself up through another (_probe)
    departed_limit: int = 64  # evicted peers remembered for probing
    departed_ttl: float = 120.0  # and for how long
    left_memory: float = 2.0  # seconds a goodbye is remembered, to ignore stragglers after it
    durable: bool = True  # remember in env.store that this node was a member (no re-create)

    def __post_init__(self) -> None:
        if not 1 <= self.bits <= MAX_BITS:
            raise ConfigError(f"bits must be in [1, {MAX_BITS}], got {self.bits}")
        if not 1 <= self.vnodes <= MAX_VNODES:
            raise ConfigError(f"vnodes must be in [1, {MAX_VNODES}], got {self.vnodes}")
        if not 1 <= self.successors <= MAX_PEER_LIST:
            raise ConfigError(f"successors must be in [1, {MAX_PEER_LIST}]")
        for name in ("stabilize_interval", "fix_fingers_interval", "check_predecessor_interval",
                     "request_timeout", "lookup_timeout", "join_retry", "probe_interval",
                     "departed_ttl", "left_memory"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be > 0")
        for name in ("max_hops", "max_pending", "dedupe_window", "departed_limit",
                     "suspect_after"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1")
        for name in ("lookup_retries", "hop_retries"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name} must be >= 0")


class ChordState(enum.Enum):
    IDLE = "idle"  # built, waiting for join() or bootstrap()
    JOINING = "joining"  # looking up its own successor through a contact
    ACTIVE = "active"  # on the ring
    STOPPED = "stopped"  # left


class _RequestKind(enum.Enum):
    GET_PREDECESSOR = "get_predecessor"
    PING = "ping"
    LOOKUP = "lookup"
    FIND_ROOT = "find_root"


class _Request:
    """A request of ours awaiting its answer (or its timeout)."""

    __slots__ = ("contact", "finger", "key", "kind", "peer", "purpose", "timer", "tries",
                 "user_ref", "vnode")

    def __init__(self, kind: _RequestKind, vnode: int, peer: NodeId | None) -> None:
        self.kind = kind
        self.vnode = vnode
        self.peer = peer  # who must answer; None when any node may (lookups)
        self.timer: TimerHandle | None = None
        self.purpose = LookupPurpose.JOIN
        self.finger = 0
        self.contact: Peer | None = None
        self.key = ""
        self.user_ref = 0
        self.tries = 0


class _Hop:
    """A routed message we forwarded, awaiting the next hop's acknowledgement."""

    __slots__ = ("arrived", "came_from", "next_hop", "timer", "tries", "vnode")

    def __init__(self, arrived: Route | FindSuccessor, came_from: NodeId | None, vnode: int,
                 next_hop: Peer, tries: int) -> None:
        self.arrived = arrived  # as it reached us, to route it again if the next hop is dead
        self.came_from = came_from
        self.vnode = vnode
        self.next_hop = next_hop
        self.tries = tries
        self.timer: TimerHandle | None = None


class VNodeView(NamedTuple):
    """A read-only picture of one virtual node's tables (tests, benchmarks, snapshots)."""

    me: Peer
    state: ChordState
    successors: tuple[Peer, ...]
    predecessor: Peer | None
    fingers: tuple[Peer | None, ...]


class _VNode:
    """One virtual node's ring state."""

    __slots__ = ("finger_ref", "fingers", "index", "me", "next_finger", "ping_ref",
                 "predecessor", "stabilize_ref", "state", "successors", "table")

    def __init__(self, me: Peer, index: int, bits: int) -> None:
        self.me = me
        self.index = index
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


ForwardFn = Callable[[str, Any, NodeId], bool]
DeliverFn = Callable[[str, Any], None]
RootFoundFn = Callable[[str, NodeId, int, int], None]
FindRootFn = Callable[[str, NodeId], None]
RootFailedFn = Callable[[str, int], None]


class _Rejected(Exception):
    """Inside a handler: drop this message with ``reason``; nothing has changed yet."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(detail or reason)
        self.reason = reason


# -- the protocol ---------------------------------------------------------------------------


class ChordHost:
    """Chord on one env: ``config.vnodes`` virtual nodes, messages addressed to (node, index).

    Upper layers call ``route(key, payload)`` and ``find_root(key, ref)`` and hear back through
    ``on_forward(key, payload, next_hop) -> bool`` at every hop a ROUTE leaves (False stops it),
    ``on_deliver(key, payload)`` at the root, ``on_find_root(key, asker)`` at the root of a
    FIND_ROOT and ``on_root_found(key, root, hops, ref)`` back at the asker (or
    ``on_root_failed(key, ref)`` when no answer came). During ``on_forward`` and ``on_deliver``,
    ``last_hop`` is the node the message came from (None where it started).
    """

    def __init__(
        self,
        env: Env,
        *,
        contacts: Iterable[NodeId] = (),
        create: bool = False,
        config: ChordConfig | None = None,
    ) -> None:
        self.env = env
        self.config = config if config is not None else ChordConfig()
        cfg = self.config
        self.contacts = [check_node_id(c) for c in contacts if c != env.node]
        self.create = create
        self._modulus = 1 << cfg.bits
        self._vnodes = [
            _VNode(Peer(chord_id(vnode_name(env.node, i, cfg.vnodes), cfg.bits), env.node, i),
                   i, cfg.bits)
            for i in range(cfg.vnodes)
        ]
        self.on_forward: ForwardFn | None = None
        self.on_deliver: DeliverFn | None = None
        self.on_root_found: RootFoundFn | None = None
        self.on_find_root: FindRootFn | None = None
        self.on_root_failed: RootFailedFn | None = None
        self.last_hop: NodeId | None = None
        self._requests: dict[int, _Request] = {}
        self._hops: dict[int, _Hop] = {}
        # refs start at a random point so that a recovered node never takes an answer meant
        # for its previous incarnation
        self._next_ref = env.rng.getrandbits(40) + 1
        self._route_seq = 0
        self._delivered: OrderedDict[tuple[str, int], None] = OrderedDict()
        self._departed: dict[NodeId, tuple[Peer, float]] = {}
        self._left: dict[NodeId, float] = {}  # node -> when it said goodbye
        self._misses: dict[NodeId, int] = {}  # node -> deadlines missed in a row
        self._contact_turn = 0
        self._timers: dict[str, TimerHandle] = {}
        self._handlers: dict[type[Message], Callable[[NodeId, Any], None]] = {
            FindSuccessor: self._on_find,
            SuccessorIs: self._on_successor_is,
            GetPredecessor: self._on_get_predecessor,
            PredecessorIs: self._on_predecessor_is,
            Notify: self._on_notify,
            Nudge: self._on_nudge,
            Ping: self._on_ping,
            Pong: self._on_pong,
            Route: self._on_route,
            Ack: self._on_ack,
            RootFound: self._on_root_found,
            Leave: self._on_leave,
        }

    # -- Process ---------------------------------------------------------------------------

    def start(self) -> None:
        was_member = self.config.durable and get_json(
            self.env.store, _STORE_TABLE, "member") is not None
        if self.create and not (was_member and self.contacts):
            self._create_ring()
        elif self.contacts:
            for vn in self._vnodes:
                self._join(vn)
        # else: idle until join() or bootstrap()

    def stop(self) -> None:
        """Leave gracefully: tell each neighbour who is on the other side, then go quiet."""
        for vn in self._vnodes:
            if vn.state is ChordState.ACTIVE and vn.successors:
                succ, pred = vn.successor, vn.predecessor
                self._send(succ.node, Leave(to=succ.vnode, sender=vn.me.wire(),
                                            predecessor=pred.wire() if pred else None))
                if pred is not None:
                    self._send(pred.node, Leave(
                        to=pred.vnode, sender=vn.me.wire(),
                        successors=tuple(p.wire() for p in vn.successors)))
            vn.state = ChordState.STOPPED
        for handle in self._timers.values():
            self.env.cancel(handle)
        self._timers.clear()
        for request in self._requests.values():
            if request.timer is not None:
                self.env.cancel(request.timer)
        self._requests.clear()
        for hop in self._hops.values():
            if hop.timer is not None:
                self.env.cancel(hop.timer)
        self._hops.clear()

    def on_message(self, src: NodeId, msg: Message) -> None:
        handler = self._handlers.get(type(msg))
        if handler is None:
            self._drop(src, msg, "unexpected_type")
            return
        try:
            handler(src, msg)
            if self._misses:
                self._misses.pop(src, None)  # it is alive after all
        except _Rejected as exc:
            self._drop(src, msg, exc.reason, str(exc) if str(exc) != exc.reason else None)

    # -- public face ---------------------------------------------------------------------

    @property
    def joined(self) -> bool:
        """True once at least one virtual node is on the ring."""
        return any(vn.state is ChordState.ACTIVE for vn in self._vnodes)

    def views(self) -> tuple[VNodeView, ...]:
        return tuple(vn.view() for vn in self._vnodes)

    def join(self, contact: NodeId) -> None:
        """Join the ring that ``contact`` is on (for a node built without contacts)."""
        if contact != self.env.node and contact not in self.contacts:
            self.contacts.append(check_node_id(contact))
        for vn in self._vnodes:
            if vn.state is ChordState.IDLE:
                self._join(vn)

    def route(self, key: str, payload: Any = None) -> bool:
        """Send ``payload`` towards the root of ``key``; False (and a traced drop) when no
        virtual node is on the ring yet."""
        return self._originate(key, RouteKind.ROUTE, payload, 0)

    def find_root(self, key: str, ref: int) -> bool:
        """Find the root of ``key``; the answer comes to ``on_root_found(key, root, hops, ref)``.
        False (and a traced drop) when no virtual node is on the ring yet."""
        if not self.joined:
            return self._not_joined(key)
        if len(self._requests) >= self.config.max_pending:
            self.env.trace("drop", layer=LAYER, key=key, reason="pending_full")
            return False
        start = self._start_vnode(chord_id(key, self.config.bits))
        ref_ = self._new_ref()
        request = _Request(_RequestKind.FIND_ROOT, start.index, None)
        request.key = key
        request.user_ref = ref
        self._requests[ref_] = request
        self._send_find_root(ref_, request)
        return True

    def root_of(self, key: str) -> Peer | None:
        """The local virtual node that is the root of ``key`` in its own view, if any."""
        k = chord_id(key, self.config.bits)
        for vn in self._vnodes:
            if vn.state is ChordState.ACTIVE and self._owns(vn, k):
                return vn.me
        return None

    def snapshot(self) -> tuple[Any, ...]:
        """Everything a message may change, for tests that check a drop changed nothing."""
        return (self.views(), sorted(self._requests), sorted(self._hops),
                tuple(self._delivered), tuple(self._departed), tuple(self._left),
                tuple(self._misses.items()), self._next_ref, self._route_seq)

    # -- sending -------------------------------------------------------------------------

    def _send(self, node: NodeId, msg: Message) -> None:
        if node == self.env.node:
            # between two virtual nodes of this host: through a timer, never by recursion
            self.env.set_timer(0.0, lambda: self.on_message(node, msg))
        else:
            self.env.send(node, msg)

    def _new_ref(self) -> int:
        ref = self._next_ref
        self._next_ref += 1
        return ref

    def _request(self, ref: int, request: _Request, timeout: float) -> None:
        self._requests[ref] = request
        request.timer = self.env.set_timer(timeout, lambda: self._request_timed_out(ref))

    def _drop(self, src: NodeId, msg: Message, reason: str, detail: str | None = None) -> None:
        fields: dict[str, Any] = {"reason": reason, "type": msg.TYPE}
        if detail is not None:
            fields["error"] = detail
        self.env.trace("drop", layer=LAYER, peer=src, **fields)

    def _not_joined(self, key: str) -> bool:
        self.env.trace("drop", layer=LAYER, key=key, reason="not_joined")
        return False

    # -- peers from the wire ---------------------------------------------------------------

    def _peer(self, wire: PeerWire) -> Peer:
        node, vnode, ident = wire
        value = int(ident, 16)
        if value >= self._modulus:
            raise _Rejected("bad_id", f"identifier {ident} has more than {self.config.bits} bits")
        return Peer(value, node, vnode)

    def _peers(self, wires: Iterable[PeerWire]) -> list[Peer]:
        return [self._peer(w) for w in wires]

    def _vnode_for(self, to: int) -> _VNode:
        """The active virtual node a message is addressed to."""
        if to >= len(self._vnodes):
            raise _Rejected("unknown_vnode", f"no virtual node {to}")
        vn = self._vnodes[to]
        if vn.state is not ChordState.ACTIVE:
            raise _Rejected("not_active", f"virtual node {to} is {vn.state.value}")
        return vn

    # -- joining -------------------------------------------------------------------------

    def _create_ring(self) -> None:
        first = self._vnodes[0]
        self._activate(first, [], None)
        for vn in self._vnodes[1:]:
            self._join(vn, Peer(first.me.ident, first.me.node, 0))

    def _join(self, vn: _VNode, contact: Peer | None = None) -> None:
        if contact is None:
            if not self.contacts:
                vn.state = ChordState.IDLE
                return
            node = self.contacts[self._contact_turn % len(self.contacts)]
            self._contact_turn += 1
            contact = Peer(0, node, 0)
        vn.state = ChordState.JOINING
        ref = self._new_ref()
        request = _Request(_RequestKind.LOOKUP, vn.index, None)
        request.purpose = LookupPurpose.JOIN
        request.contact = contact
        self._request(ref, request, self.config.lookup_timeout)
        self._send(contact.node, FindSuccessor(
            to=contact.vnode, target=format(vn.me.ident, "x"), asker=vn.me.wire(), ref=ref,
            purpose=LookupPurpose.JOIN.value))

    def _retry_join(self, vn: _VNode) -> None:
        def again() -> None:
            if vn.state is ChordState.JOINING:
                self._join(vn)

        self.env.set_timer(self.config.join_retry, again)

    def _activate(self, vn: _VNode, successors: list[Peer], predecessor: Peer | None) -> None:
        vn.state = ChordState.ACTIVE
        self._set_successors(vn, successors)
        self._set_predecessor(vn, predecessor)
        # not "join": that event is the runtime's membership change, which the pipeline reads
        self.env.trace("activate", layer=LAYER, peer=vn.successor.node, vnode=vn.index,
                       id=format(vn.me.ident, "x"))
        if self.config.durable:
            put_json(self.env.store, _STORE_TABLE, "member", True)
            self.env.store.commit()
        self._start_timers()
        if vn.successors:
            self._notify(vn)

    def _start_timers(self) -> None:
        if self._timers:
            return
        cfg, rng = self.config, self.env.rng
        # a random phase per node, so that a ring built at once does not tick in lockstep
        self._arm("stabilize", rng.uniform(0, cfg.stabilize_interval), cfg.stabilize_interval,
                  self._stabilize_all)
        self._arm("fix_fingers", rng.uniform(0, cfg.fix_fingers_interval),
                  cfg.fix_fingers_interval, self._fix_fingers_all)
        self._arm("check_predecessor", rng.uniform(0, cfg.check_predecessor_interval),
                  cfg.check_predecessor_interval, self._check_predecessors)
        self._arm("probe", rng.uniform(0, cfg.probe_interval), cfg.probe_interval,
                  self._probe)

    def _arm(self, name: str, first: float, every: float, tick: Callable[[], None]) -> None:
        def fire() -> None:
            self._timers[name] = self.env.set_timer(every, fire)
            tick()

        self._timers[name] = self.env.set_timer(first, fire)

    # -- ring state changes ---------------------------------------------------------------

    def _set_successors(self, vn: _VNode, peers: Iterable[Peer]) -> None:
        """Keep the r nearest distinct peers after me, in ring order, never me."""
        by_ident = {p.ident: p for p in peers}
        by_ident.pop(vn.me.ident, None)
        ordered = sorted(by_ident.values(), key=lambda p: self._distance(vn, p.ident))
        old = vn.successor
        vn.successors = ordered[:self.config.successors]
        vn.table = None
        self._fill_fingers_from_successors(vn)
        if vn.successor != old:
            self.env.trace("successor", layer=LAYER, peer=vn.successor.node, vnode=vn.index,
                           id=format(vn.successor.ident, "x"))

    def _set_predecessor(self, vn: _VNode, peer: Peer | None) -> None:
        if peer is not None and peer.ident == vn.me.ident:
            peer = None
        if peer != vn.predecessor:
            vn.predecessor = peer
            self.env.trace("predecessor", layer=LAYER, peer=peer.node if peer else None,
                           vnode=vn.index)

    def _distance(self, vn: _VNode, ident: int) -> int:
        return (ident - vn.me.ident) % self._modulus

    def _fill_fingers_from_successors(self, vn: _VNode) -> None:
        """Fingers whose start falls before the last successor follow from the list."""
        if not vn.successors:
            return
        dists = [self._distance(vn, p.ident) for p in vn.successors]
        fingers = vn.fingers
        position = 0
        for i in range(len(fingers)):
            start = 1 << i
            if start > dists[-1]:
                break
            while dists[position] < start:
                position += 1
            fingers[i] = vn.successors[position]

    def _covered_by_successors(self, vn: _VNode, i: int) -> bool:
        return bool(vn.successors) and (1 << i) <= self._distance(vn, vn.successors[-1].ident)

    def _routing_table(self, vn: _VNode) -> tuple[list[int], list[Peer]]:
        table = vn.table
        if table is None:
            by_ident: dict[int, Peer] = {}
            for peer in vn.fingers:
                if peer is not None:
                    by_ident[peer.ident] = peer
            for peer in vn.successors:
                by_ident[peer.ident] = peer
            by_ident.pop(vn.me.ident, None)
            ordered = sorted(by_ident.values(), key=lambda p: self._distance(vn, p.ident))
            table = vn.table = ([self._distance(vn, p.ident) for p in ordered], ordered)
        return table

    def _closest_preceding(self, vn: _VNode, target: int) -> Peer | None:
        dists, peers = self._routing_table(vn)
        position = bisect.bisect_left(dists, self._distance(vn, target)) - 1
        return peers[position] if position >= 0 else None

    def _owns(self, vn: _VNode, k: int) -> bool:
        """Am I the root of ``k`` in my own view?"""
        if not vn.successors:
            return True  # alone on the ring
        pred = vn.predecessor
        return pred is not None and in_half_open(k, pred.ident, vn.me.ident)

    def _suspect(self, node: NodeId) -> None:
        """``node`` missed its deadlines: out of every table, remembered for probing."""
        if node == self.env.node:
            return
        sample: Peer | None = None
        for vn in self._vnodes:
            if vn.state is not ChordState.ACTIVE:
                continue
            if vn.predecessor is not None and vn.predecessor.node == node:
                sample = vn.predecessor
                self._set_predecessor(vn, None)
            for i, peer in enumerate(vn.fingers):
                if peer is not None and peer.node == node:
                    sample = peer
                    vn.fingers[i] = None
                    vn.table = None
            gone = [p for p in vn.successors if p.node == node]
            if gone:
                sample = gone[0]
                remaining = [p for p in vn.successors if p.node != node]
                self._set_successors(vn, remaining or self._fallback_successors(vn))
        if sample is not None:
            self.env.trace("suspect", layer=LAYER, peer=node)
            self._remember_departed(sample)

    def _fallback_successors(self, vn: _VNode) -> list[Peer]:
        """The successor list ran out: the nearest finger left, else the predecessor."""
        nearest = min((p for p in vn.fingers if p is not None),
                      key=lambda p: self._distance(vn, p.ident), default=None)
        if nearest is not None:
            return [nearest]
        return [vn.predecessor] if vn.predecessor is not None else []

    def _remember_departed(self, peer: Peer) -> None:
        self._departed.pop(peer.node, None)
        self._departed[peer.node] = (peer, self.env.now())
        while len(self._departed) > self.config.departed_limit:
            del self._departed[next(iter(self._departed))]

    # -- periodic work ---------------------------------------------------------------------

    def _active(self) -> list[_VNode]:
        return [vn for vn in self._vnodes if vn.state is ChordState.ACTIVE]

    def _stabilize_all(self) -> None:
        for vn in self._active():
            self._stabilize(vn)

    def _stabilize(self, vn: _VNode) -> None:
        if vn.stabilize_ref is not None:
            return  # the last round is still waiting for its answer
        if not vn.successors:
            if vn.predecessor is not None:  # someone joined behind me: it is also my successor
                self._set_successors(vn, [vn.predecessor])
                self._notify(vn)
            return
        succ = vn.successor
        ref = self._new_ref()
        vn.stabilize_ref = ref
        self._request(ref, _Request(_RequestKind.GET_PREDECESSOR, vn.index, succ.node),
                      self.config.request_timeout)
        self._send(succ.node, GetPredecessor(to=succ.vnode, ref=ref))

    def _notify(self, vn: _VNode) -> None:
        succ = vn.successor
        if succ != vn.me:
            self._send(succ.node, Notify(to=succ.vnode, sender=vn.me.wire()))

    def _check_predecessors(self) -> None:
        for vn in self._active():
            pred = vn.predecessor
            if pred is None or vn.ping_ref is not None:
                continue
            ref = self._new_ref()
            vn.ping_ref = ref
            self._request(ref, _Request(_RequestKind.PING, vn.index, pred.node),
                          self.config.request_timeout)
            self._send(pred.node, Ping(to=pred.vnode, ref=ref))

    def _fix_fingers_all(self) -> None:
        for vn in self._active():
            if vn.finger_ref is None:
                self._fix_next_finger(vn)

    def _fix_next_finger(self, vn: _VNode) -> None:
        """Look up the next finger that the successor list does not already give."""
        bits = self.config.bits
        i = vn.next_finger
        while i < bits and self._covered_by_successors(vn, i):
            i += 1
        if i >= bits or not vn.successors:
            vn.next_finger = 0
            return
        vn.next_finger = i
        start = (vn.me.ident + (1 << i)) % self._modulus
        ref = self._new_ref()
        request = _Request(_RequestKind.LOOKUP, vn.index, None)
        request.purpose = LookupPurpose.FINGER
        request.finger = i
        vn.finger_ref = ref
        self._request(ref, request, self.config.lookup_timeout)
        self._find_step(vn, FindSuccessor(to=vn.index, target=format(start, "x"),
                                          asker=vn.me.wire(), ref=ref,
                                          purpose=LookupPurpose.FINGER.value), 0)

    def _probe(self) -> None:
        """Look up my own identifier through another node and take a nearer successor if the
        answer names one. Through a peer evicted earlier, this is how two rings split by a
        partition find each other again; through a live peer, it undoes the crossed successor
        pointers that concurrent joins can leave (x -> y skipping z while z -> w skips y), which
        stabilize alone never repairs."""
        now, ttl = self.env.now(), self.config.departed_ttl
        for node in [n for n, (_, since) in self._departed.items() if now - since > ttl]:
            del self._departed[node]
        active = self._active()
        if not active or len(self._requests) >= self.config.max_pending:
            return
        rng = self.env.rng
        vn = rng.choice(active)
        _, known = self._routing_table(vn)
        if self._departed and (not known or rng.random() < 0.5):
            peer, _ = self._departed[rng.choice(list(self._departed))]
        elif known:
            peer = rng.choice(known)
        else:
            return
        ref = self._new_ref()
        request = _Request(_RequestKind.LOOKUP, vn.index, None)
        request.purpose = LookupPurpose.PROBE
        request.contact = peer
        self._request(ref, request, self.config.lookup_timeout)
        self._send(peer.node, FindSuccessor(
            to=peer.vnode, target=format(vn.me.ident, "x"), asker=vn.me.wire(), ref=ref,
            purpose=LookupPurpose.PROBE.value))

    # -- timeouts --------------------------------------------------------------------------

    def _request_timed_out(self, ref: int) -> None:
        request = self._requests.pop(ref, None)
        if request is None:
            return
        vn = self._vnodes[request.vnode]
        kind = request.kind
        if kind is _RequestKind.GET_PREDECESSOR:
            vn.stabilize_ref = None
            assert request.peer is not None
            if not self._missed(request.peer):
                self._stabilize(vn)  # ask again at once: one lost message is no failure
        elif kind is _RequestKind.PING:
            vn.ping_ref = None
            assert request.peer is not None
            self._missed(request.peer)
        elif kind is _RequestKind.FIND_ROOT:
            self._find_root_timed_out(ref, request)
        elif request.purpose is LookupPurpose.JOIN:
            if vn.state is ChordState.JOINING:
                self._retry_join(vn)
        elif request.purpose is LookupPurpose.FINGER and vn.finger_ref == ref:
            vn.finger_ref = None
            vn.next_finger = request.finger + 1
        # a probe that times out changes nothing: a departed peer stays on the list

    def _find_root_timed_out(self, ref: int, request: _Request) -> None:
        if request.tries < self.config.lookup_retries and self.joined:
            request.tries += 1
            self._requests[ref] = request
            self._send_find_root(ref, request)
            return
        self.env.trace("drop", layer=LAYER, key=request.key, reason="lookup_timeout",
                       ref=request.user_ref)
        if self.on_root_failed is not None:
            self.on_root_failed(request.key, request.user_ref)

    def _hop_timed_out(self, hop_ref: int) -> None:
        hop = self._hops.pop(hop_ref, None)
        if hop is None:
            return
        self._missed(hop.next_hop.node)
        vn = self._vnodes[hop.vnode]
        if vn.state is not ChordState.ACTIVE:
            return
        if hop.tries >= self.config.hop_retries:
            self._drop_routed(hop.arrived, "no_route")
            return
        # route it again from here: to the same hop (a retransmission) until it is suspected,
        # then around it; the root drops a copy that arrives twice
        self.last_hop = hop.came_from
        self._step(vn, hop.arrived, hop.tries + 1)

    def _missed(self, node: NodeId) -> bool:
        """``node`` missed a deadline; True when that makes it suspected (and evicted)."""
        misses = self._misses.pop(node, 0) + 1
        if misses >= self.config.suspect_after:
            self._suspect(node)
            return True
        self._misses[node] = misses
        if len(self._misses) > self.config.max_pending:
            del self._misses[next(iter(self._misses))]
        return False

    def _drop_routed(self, msg: Route | FindSuccessor, reason: str) -> None:
        if isinstance(msg, Route):
            mid, origin, key, seq = msg.trace_ids()
            self.env.trace("drop", layer=LAYER, msg=mid, origin=origin, key=key, seq=seq,
                           reason=reason, hops=msg.hops)
        else:
            self.env.trace("drop", layer=LAYER, origin=msg.asker[0], reason=reason,
                           hops=msg.hops, purpose=msg.purpose)

    # -- routing -------------------------------------------------------------------------

    def _start_vnode(self, k: int) -> _VNode:
        """The local virtual node to start from: the root if one is, else the closest
        preceding ``k``."""
        best: _VNode | None = None
        best_distance = 0
        for vn in self._active():
            if self._owns(vn, k):
                return vn
            distance = (k - vn.me.ident) % self._modulus
            if best is None or distance < best_distance:
                best, best_distance = vn, distance
        assert best is not None, "callers check joined first"
        return best

    def _originate(self, key: str, kind: RouteKind, payload: Any, ref: int) -> bool:
        if not self.joined:
            return self._not_joined(key)
        vn = self._start_vnode(chord_id(key, self.config.bits))
        self._route_seq += 1
        msg = Route(to=vn.index, key=key, origin=vn.me.wire(), seq=self._route_seq,
                    kind=kind.value, payload=payload, ref=ref)
        self.last_hop = None
        self._step(vn, msg, 0)
        return True

    def _send_find_root(self, ref: int, request: _Request) -> None:
        vn = self._vnodes[request.vnode]
        if vn.state is not ChordState.ACTIVE:
            vn = self._start_vnode(chord_id(request.key, self.config.bits))
            request.vnode = vn.index
        request.timer = self.env.set_timer(self.config.lookup_timeout,
                                           lambda: self._request_timed_out(ref))
        self._route_seq += 1
        msg = Route(to=vn.index, key=request.key, origin=vn.me.wire(), seq=self._route_seq,
                    kind=RouteKind.FIND_ROOT.value, ref=ref)
        self.last_hop = None
        self._step(vn, msg, 0)

    def _step(self, vn: _VNode, msg: Route | FindSuccessor, tries: int) -> None:
        if isinstance(msg, Route):
            self._route_step(vn, msg, tries)
        else:
            self._find_step(vn, msg, tries)

    def _route_step(self, vn: _VNode, msg: Route, tries: int) -> None:
        """One hop of a ROUTE or FIND_ROOT at ``vn``: deliver here, or pick the next hop."""
        k = chord_id(msg.key, self.config.bits)
        pred = vn.predecessor
        succ = vn.successor
        if self._owns(vn, k) or (msg.final and pred is None):
            self._arrive(vn, msg)
            return
        if msg.final:
            # the sender saw me as the root, but a node joined just before me: step back
            assert pred is not None
            self._forward(vn, msg, pred, True, tries)
        elif in_half_open(k, vn.me.ident, succ.ident):
            self._forward(vn, msg, succ, True, tries)
        else:
            nearer = self._successor_list_root(vn, k)
            if nearer is not None:
                self._forward(vn, msg, nearer, True, tries)
            else:
                self._forward(vn, msg, self._closest_preceding(vn, k) or succ, False, tries)

    def _successor_list_root(self, vn: _VNode, k: int) -> Peer | None:
        """The successor-list entry that is the root of ``k``, when ``k`` falls inside the list:
        one hop straight to it instead of one through its predecessor."""
        successors = vn.successors
        for before, after in itertools.pairwise(successors):
            if in_half_open(k, before.ident, after.ident):
                return after
        return None

    def _find_step(self, vn: _VNode, msg: FindSuccessor, tries: int) -> None:
        """One hop of a successor lookup: answer if the target falls before my successor."""
        target = int(msg.target, 16)
        succ = vn.successor
        if not vn.successors or in_half_open(target, vn.me.ident, succ.ident):
            successors = vn.successors or [vn.me]
            hints: tuple[PeerWire, ...] = ()
            if msg.purpose == LookupPurpose.JOIN.value:
                hints = tuple(p.wire() for p in self._routing_table(vn)[1])
            self._send(msg.asker[0], SuccessorIs(
                ref=msg.ref, responder=vn.me.wire(),
                successors=tuple(p.wire() for p in successors), hops=msg.hops, hints=hints))
            return
        self._forward(vn, msg, self._closest_preceding(vn, target) or succ, False, tries)

    def _forward(self, vn: _VNode, msg: Route | FindSuccessor, next_hop: Peer, final: bool,
                 tries: int) -> None:
        if msg.hops >= self.config.max_hops:
            self._drop_routed(msg, "hop_limit")
            return
        if isinstance(msg, Route) and msg.kind == RouteKind.ROUTE.value:
            upcall = self.on_forward
            if upcall is not None and not upcall(msg.key, msg.payload, next_hop.node):
                return
        local = next_hop.node == self.env.node
        if not local and len(self._hops) >= self.config.max_pending:
            self._drop_routed(msg, "pending_full")
            return
        hop_ref = 0 if local else self._new_ref()
        if isinstance(msg, Route):
            out: Route | FindSuccessor = dataclasses.replace(
                msg, to=next_hop.vnode, hops=msg.hops + 1, final=final, hop_ref=hop_ref)
        else:
            out = dataclasses.replace(msg, to=next_hop.vnode, hops=msg.hops + 1,
                                      hop_ref=hop_ref)
        if not local:
            hop = _Hop(msg, self.last_hop, vn.index, next_hop, tries)
            hop.timer = self.env.set_timer(self.config.request_timeout,
                                           lambda: self._hop_timed_out(hop_ref))
            self._hops[hop_ref] = hop
        self._send(next_hop.node, out)

    def _arrive(self, vn: _VNode, msg: Route) -> None:
        """The message reached its root (me, in my view)."""
        origin = msg.origin[0]
        seen = (origin, msg.seq)
        if seen in self._delivered:
            self._drop_routed(msg, "duplicate")
            return
        self._delivered[seen] = None
        if len(self._delivered) > self.config.dedupe_window:
            self._delivered.popitem(last=False)
        env = self.env
        env.trace("lookup", layer=LAYER, msg=f"{origin}:{msg.seq}", origin=origin, key=msg.key,
                  seq=msg.seq, hops=msg.hops, root=env.node, kind=msg.kind)
        if msg.kind == RouteKind.ROUTE.value:
            if self.on_deliver is not None:
                self.on_deliver(msg.key, msg.payload)
            return
        if self.on_find_root is not None:
            self.on_find_root(msg.key, origin)
        self._send(origin, RootFound(ref=msg.ref, key=msg.key, root=vn.me.wire(),
                                     hops=msg.hops))

    # -- handlers --------------------------------------------------------------------------

    def _on_route(self, src: NodeId, msg: Route) -> None:
        vn = self._vnode_for(msg.to)
        self._peer(msg.origin)
        if msg.hop_ref:
            self.env.send(src, Ack(hop_ref=msg.hop_ref))
        if msg.hops > self.config.max_hops:
            self._drop_routed(msg, "hop_limit")
            return
        self.last_hop = src
        self._route_step(vn, msg, 0)

    def _on_find(self, src: NodeId, msg: FindSuccessor) -> None:
        vn = self._vnode_for(msg.to)
        self._peer(msg.asker)
        if int(msg.target, 16) >= self._modulus:
            raise _Rejected("bad_id", f"target {msg.target} has more than {self.config.bits} bits")
        if msg.hop_ref:
            self.env.send(src, Ack(hop_ref=msg.hop_ref))
        if msg.hops > self.config.max_hops:
            self._drop_routed(msg, "hop_limit")
            return
        self.last_hop = src
        self._find_step(vn, msg, 0)

    def _on_ack(self, src: NodeId, msg: Ack) -> None:
        hop = self._hops.get(msg.hop_ref)
        if hop is None or hop.next_hop.node != src:
            raise _Rejected("unexpected_ack", f"no routed message {msg.hop_ref} sent to {src}")
        del self._hops[msg.hop_ref]
        if hop.timer is not None:
            self.env.cancel(hop.timer)

    def _answered(self, src: NodeId, ref: int, *kinds: _RequestKind) -> _Request:
        """The request ``ref`` answered by ``src``, taken off the table; or a rejection."""
        request = self._requests.get(ref)
        if request is None or request.kind not in kinds or (
                request.peer is not None and request.peer != src):
            raise _Rejected("unexpected_reply", f"no request {ref} waits for {src}")
        return request

    def _settle(self, ref: int, request: _Request) -> None:
        del self._requests[ref]
        if request.timer is not None:
            self.env.cancel(request.timer)

    def _on_successor_is(self, src: NodeId, msg: SuccessorIs) -> None:
        request = self._answered(src, msg.ref, _RequestKind.LOOKUP)
        responder = self._peer(msg.responder)
        if responder.node != src:
            raise _Rejected("unexpected_reply", f"responder {responder.node} sent by {src}")
        successors = self._peers(msg.successors)
        hints = self._peers(msg.hints)
        vn = self._vnodes[request.vnode]
        purpose = request.purpose
        if purpose is LookupPurpose.JOIN and vn.state is not ChordState.JOINING:
            raise _Rejected("unexpected_reply", "already joined")
        if purpose is not LookupPurpose.JOIN and vn.state is not ChordState.ACTIVE:
            raise _Rejected("unexpected_reply", f"virtual node {vn.index} is {vn.state.value}")
        self._settle(msg.ref, request)
        if purpose is LookupPurpose.JOIN:
            self._joined(vn, responder, successors, hints)
        elif purpose is LookupPurpose.FINGER:
            self._finger_found(vn, msg.ref, request.finger, responder, successors)
        else:
            self._probe_found(vn, request, successors)

    def _joined(self, vn: _VNode, responder: Peer, successors: list[Peer],
                hints: list[Peer]) -> None:
        others = [p for p in successors if p.ident != vn.me.ident]
        if not others:
            self._retry_join(vn)  # only my own former self answered: try again later
            return
        # the responder found me between itself and its successor: my predecessor, or a node
        # before it (then the first notify from a nearer one corrects it)
        self._activate(vn, others, responder if responder.ident != vn.me.ident else None)
        self._seed_fingers(vn, [*hints, *others, responder])

    def _seed_fingers(self, vn: _VNode, known: Iterable[Peer]) -> None:
        """A first finger table from peers we heard of: for each start, the first known peer at
        or after it (fix_fingers corrects it later)."""
        ordered = sorted({p.ident: p for p in known if p.ident != vn.me.ident}.values(),
                         key=lambda p: self._distance(vn, p.ident))
        if not ordered:
            return
        dists = [self._distance(vn, p.ident) for p in ordered]
        for i in range(self.config.bits):
            if vn.fingers[i] is None:
                position = bisect.bisect_left(dists, 1 << i)
                if position < len(ordered):
                    vn.fingers[i] = ordered[position]
        vn.table = None

    def _finger_found(self, vn: _VNode, ref: int, first: int, responder: Peer,
                      successors: list[Peer]) -> None:
        """Set finger ``first`` and every later finger the answer decides too: a start in
        (responder, last successor] has the first listed successor at or after it."""
        if vn.finger_ref == ref:
            vn.finger_ref = None
        me = vn.me.ident
        head = successors[0]
        vn.fingers[first] = None if head.ident == me else head
        # the answer's peers in ring order from me, up to where the list comes round past me
        base = previous = self._distance(vn, responder.ident)
        listed: list[tuple[int, Peer]] = []
        for peer in successors:
            distance = self._distance(vn, peer.ident)
            if distance <= previous:
                break
            listed.append((distance, peer))
            previous = distance
        bits = self.config.bits
        i = first + 1
        while i < bits and listed and base < (1 << i) <= listed[-1][0]:
            start = 1 << i
            vn.fingers[i] = next(peer for distance, peer in listed if distance >= start)
            i += 1
        vn.table = None
        vn.next_finger = i if i < bits else 0
        if self.config.fix_all_fingers and vn.next_finger != 0:
            self._fix_next_finger(vn)

    def _probe_found(self, vn: _VNode, request: _Request, successors: list[Peer]) -> None:
        if request.contact is not None:
            self._departed.pop(request.contact.node, None)  # it answered: alive
        candidate = next((p for p in successors if p.ident != vn.me.ident), None)
        if candidate is None:
            return
        if not vn.successors or in_open(candidate.ident, vn.me.ident, vn.successor.ident):
            self._set_successors(vn, [candidate, *vn.successors])
            self._notify(vn)

    def _on_get_predecessor(self, src: NodeId, msg: GetPredecessor) -> None:
        vn = self._vnode_for(msg.to)
        pred = vn.predecessor
        self._send(src, PredecessorIs(ref=msg.ref, predecessor=pred.wire() if pred else None,
                                      successors=tuple(p.wire() for p in vn.successors)))

    def _on_predecessor_is(self, src: NodeId, msg: PredecessorIs) -> None:
        request = self._answered(src, msg.ref, _RequestKind.GET_PREDECESSOR)
        pred = self._peer(msg.predecessor) if msg.predecessor is not None else None
        their_successors = self._peers(msg.successors)
        vn = self._vnodes[request.vnode]
        if vn.state is not ChordState.ACTIVE:
            raise _Rejected("unexpected_reply", f"virtual node {vn.index} is {vn.state.value}")
        self._settle(msg.ref, request)
        vn.stabilize_ref = None
        self._departed.pop(src, None)
        if not vn.successors or vn.successor.node != src:
            return  # my successor changed while the question was out
        succ = vn.successor
        if pred is not None and in_open(pred.ident, vn.me.ident, succ.ident):
            self._set_successors(vn, [pred, succ, *their_successors])
            # a closer successor: ask it at once, so a run of nodes that joined into one gap
            # is walked at network speed rather than one stabilize interval per node
            self._stabilize(vn)
        else:
            self._set_successors(vn, [succ, *their_successors])
        self._notify(vn)

    def _on_notify(self, src: NodeId, msg: Notify) -> None:
        vn = self._vnode_for(msg.to)
        sender = self._peer(msg.sender)
        if sender.node != src:
            raise _Rejected("spoofed", f"notify from {sender.node} sent by {src}")
        if sender.ident == vn.me.ident:
            raise _Rejected("self_notify")
        if self._has_left(src):
            raise _Rejected("left", f"{src} has left")
        pred = vn.predecessor
        if pred is None or in_open(sender.ident, pred.ident, vn.me.ident):
            self._set_predecessor(vn, sender)
            if pred is not None and pred != sender:
                self._nudge(vn, pred)  # the old predecessor has a nearer successor now
        elif sender != pred:
            self._nudge(vn, sender)  # it should point at my predecessor, not at me
        if not vn.successors:
            self._set_successors(vn, [sender])
            self._notify(vn)

    def _nudge(self, vn: _VNode, peer: Peer) -> None:
        """Ask ``peer``, which has me as its successor, to stabilize now: a node that joined
        between us is then linked in within a round trip, not a stabilize interval."""
        self._send(peer.node, Nudge(to=peer.vnode, sender=vn.me.wire()))

    def _on_nudge(self, src: NodeId, msg: Nudge) -> None:
        vn = self._vnode_for(msg.to)
        sender = self._peer(msg.sender)
        if sender.node != src:
            raise _Rejected("spoofed", f"nudge from {sender.node} sent by {src}")
        if vn.successor == sender:
            self._stabilize(vn)

    def _on_ping(self, src: NodeId, msg: Ping) -> None:
        self._vnode_for(msg.to)
        self._send(src, Pong(ref=msg.ref))

    def _on_pong(self, src: NodeId, msg: Pong) -> None:
        request = self._answered(src, msg.ref, _RequestKind.PING)
        self._settle(msg.ref, request)
        self._vnodes[request.vnode].ping_ref = None

    def _on_root_found(self, src: NodeId, msg: RootFound) -> None:
        request = self._answered(src, msg.ref, _RequestKind.FIND_ROOT)
        root = self._peer(msg.root)
        if root.node != src or msg.key != request.key:
            raise _Rejected("unexpected_reply", f"root {root.node} for {msg.key!r} from {src}")
        self._settle(msg.ref, request)
        if self.on_root_found is not None:
            self.on_root_found(msg.key, root.node, msg.hops, request.user_ref)

    def _on_leave(self, src: NodeId, msg: Leave) -> None:
        vn = self._vnode_for(msg.to)
        sender = self._peer(msg.sender)
        if sender.node != src:
            raise _Rejected("spoofed", f"leave of {sender.node} sent by {src}")
        pred = self._peer(msg.predecessor) if msg.predecessor is not None else None
        successors = self._peers(msg.successors)
        self._left[src] = self.env.now()
        while len(self._left) > self.config.departed_limit:
            del self._left[next(iter(self._left))]
        for other in self._active():
            staying = [p for p in [*(successors if other is vn else ()), *other.successors]
                       if not self._has_left(p.node)]
            if len(staying) != len(other.successors) or other is vn:
                had = other.successor
                self._set_successors(other, staying)
                if other.successors and other.successor != had:
                    self._notify(other)
            if other.predecessor is not None and other.predecessor.node == src:
                replacement = pred if other is vn and pred is not None else None
                if replacement is not None and self._has_left(replacement.node):
                    replacement = None
                self._set_predecessor(other, replacement)
            if any(f is not None and f.node == src for f in other.fingers):
                other.fingers = [None if f is not None and f.node == src else f
                                 for f in other.fingers]
                other.table = None

    def _has_left(self, node: NodeId) -> bool:
        """Did ``node`` say goodbye lately? Its messages sent before that may still arrive."""
        since = self._left.get(node)
        return since is not None and self.env.now() - since <= self.config.left_memory


class Chord(ChordHost):
    """A Chord node with one virtual node, whose identifier hashes the node id itself."""

    def __init__(
        self,
        env: Env,
        *,
        contacts: Iterable[NodeId] = (),
        create: bool = False,
        config: ChordConfig | None = None,
    ) -> None:
        config = config if config is not None else ChordConfig()
        if config.vnodes != 1:
            raise ConfigError(f"Chord runs one virtual node; use ChordHost for {config.vnodes}")
        super().__init__(env, contacts=contacts, create=create, config=config)

    @property
    def me(self) -> Peer:
        return self._vnodes[0].me

    @property
    def state(self) -> ChordState:
        return self._vnodes[0].state

    @property
    def successor(self) -> Peer:
        return self._vnodes[0].successor

    @property
    def successor_list(self) -> tuple[Peer, ...]:
        return tuple(self._vnodes[0].successors)

    @property
    def predecessor(self) -> Peer | None:
        return self._vnodes[0].predecessor

    @property
    def fingers(self) -> tuple[Peer | None, ...]:
        return tuple(self._vnodes[0].fingers)


# -- whole-ring helpers: ideal tables, key load -------------------------------------------------


def bootstrap(hosts: Sequence[ChordHost]) -> None:
    """Give every virtual node of ``hosts`` the ideal tables of the ring they form, and make it
    active: a shortcut for scale runs (N in the thousands), never a substitute for joins in
    correctness tests. All hosts must share one ``bits`` and be idle."""
    if not hosts:
        return
    bits = hosts[0].config.bits
    if any(h.config.bits != bits for h in hosts):
        raise ConfigError("all hosts of a ring must use the same bits")
    members = sorted((vn.me.ident, h, vn) for h in hosts for vn in h._vnodes)
    idents = [ident for ident, _, _ in members]
    if len(set(idents)) != len(idents):
        raise ConfigError(f"identifier collision among {len(idents)} nodes: use more bits")
    modulus = 1 << bits
    peers = [vn.me for _, _, vn in members]
    count = len(peers)
    for position, (ident, host, vn) in enumerate(members):
        if vn.state is not ChordState.IDLE:
            raise ConfigError(f"bootstrap needs idle nodes; {vn.me.node} is {vn.state.value}")
        r = min(host.config.successors, count - 1)
        vn.successors = [peers[(position + j) % count] for j in range(1, r + 1)]
        vn.predecessor = peers[position - 1] if count > 1 else None
        for i in range(bits):
            at = bisect.bisect_left(idents, (ident + (1 << i)) % modulus) % count
            vn.fingers[i] = peers[at] if at != position else None
        vn.table = None
        vn.state = ChordState.ACTIVE
    for host in hosts:
        host._start_timers()


def key_load(hosts: Sequence[NodeId], keys: Iterable[str], *, vnodes: int,
             bits: int = 32) -> dict[NodeId, int]:
    """How many of ``keys`` each host is the root of, on the ideal ring of ``hosts`` running
    ``vnodes`` virtual nodes each (a pure computation: no simulation)."""
    ring = sorted((chord_id(vnode_name(h, i, vnodes), bits), h)
                  for h in hosts for i in range(vnodes))
    idents = [ident for ident, _ in ring]
    load = dict.fromkeys(hosts, 0)
    for key in keys:
        position = bisect.bisect_left(idents, chord_id(key, bits)) % len(ring)
        load[ring[position][1]] += 1
    return load

