"""Chord on one host, the part every other part uses: configuration, the host's state, sending,
requests awaiting answers, peers from the wire, and failure detection.

``routing`` and ``maintenance`` build on ``HostBase``; ``host.ChordHost`` is the whole node.
"""

from __future__ import annotations

import dataclasses
import enum
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any

from ....core.env import Env, TimerHandle
from ....core.errors import ConfigError
from ....core.ids import NodeId, check_node_id
from ....core.messages import Message
from .messages import MAX_PEER_LIST, FindSuccessor, LookupPurpose, Route
from .ring import MAX_BITS, MAX_VNODES, ChordState, Peer, PeerWire, VNode, chord_id, vnode_name

__all__ = ["LAYER", "ChordConfig", "Hop", "HostBase", "Rejected", "Request", "RequestKind"]

LAYER = "chord"
STORE_TABLE = "chord"


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
    # the name this node's identifiers hash (None: its node id). A spare that takes a dead
    # node's place joins with the dead node's name, so the keys it owned stay where Chord
    # routes them (seed 001, phase 3)
    identity: str | None = None

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
        if self.identity is not None and (not isinstance(self.identity, str)
                                          or not self.identity):
            raise ConfigError(f"identity must be a non-empty str or None, got "
                              f"{self.identity!r}")


class RequestKind(enum.Enum):
    GET_PREDECESSOR = "get_predecessor"
    PING = "ping"
    LOOKUP = "lookup"
    FIND_ROOT = "find_root"


class Request:
    """A request of ours awaiting its answer (or its timeout)."""

    __slots__ = ("contact", "finger", "key", "kind", "peer", "purpose", "timer", "tries",
                 "user_ref", "vnode")

    def __init__(self, kind: RequestKind, vnode: int, peer: NodeId | None) -> None:
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


class Hop:
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


ForwardFn = Callable[[str, Any, NodeId], bool]
DeliverFn = Callable[[str, Any], None]
RootFoundFn = Callable[[str, NodeId, int, int], None]
FindRootFn = Callable[[str, NodeId], None]
RootFailedFn = Callable[[str, int], None]


class Rejected(Exception):
    """Inside a handler: drop this message with ``reason``; nothing has changed yet."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(detail or reason)
        self.reason = reason


class HostBase:
    """What every part of a Chord host shares: its state (``config.vnodes`` virtual nodes,
    messages addressed to (node, index)), sending, requests, failure detection."""

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
        self.identity = cfg.identity if cfg.identity is not None else env.node
        self._vnodes = [
            VNode(Peer(chord_id(vnode_name(self.identity, i, cfg.vnodes), cfg.bits), env.node, i),
                  i, cfg.bits)
            for i in range(cfg.vnodes)
        ]
        self.on_forward: ForwardFn | None = None
        self.on_deliver: DeliverFn | None = None
        self.on_root_found: RootFoundFn | None = None
        self.on_find_root: FindRootFn | None = None
        self.on_root_failed: RootFailedFn | None = None
        self.last_hop: NodeId | None = None
        self._requests: dict[int, Request] = {}
        self._hops: dict[int, Hop] = {}
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
        # message type -> its handler (filled by ChordHost)
        self._handlers: dict[type[Message], Callable[[NodeId, Any], None]] = {}

    def on_message(self, src: NodeId, msg: Message) -> None:
        handler = self._handlers.get(type(msg))
        if handler is None:
            self._drop(src, msg, "unexpected_type")
            return
        try:
            handler(src, msg)
            if self._misses:
                self._misses.pop(src, None)  # it is alive after all
        except Rejected as exc:
            self._drop(src, msg, exc.reason, str(exc) if str(exc) != exc.reason else None)

    def heard_from(self, node: NodeId) -> None:
        """A message of a layer above came from ``node``: it is alive, whatever deadlines it
        missed so far (under load our request or its reply waits behind data on the same
        link, and two such waits in a row evicted a live node: a false suspicion)."""
        if self._misses:
            self._misses.pop(node, None)

    def suspects(self, node: NodeId) -> bool:
        """Whether ``node`` missed its deadlines (or was unreachable) and was evicted from our
        tables, and has not answered since."""
        return node in self._departed

    @property
    def joined(self) -> bool:
        """True once at least one virtual node is on the ring."""
        return any(vn.state is ChordState.ACTIVE for vn in self._vnodes)

    def _active(self) -> list[VNode]:
        return [vn for vn in self._vnodes if vn.state is ChordState.ACTIVE]

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

    def _drop(self, src: NodeId, msg: Message, reason: str, detail: str | None = None) -> None:
        fields: dict[str, Any] = {"reason": reason, "type": msg.TYPE}
        if detail is not None:
            fields["error"] = detail
        self.env.trace("drop", layer=LAYER, peer=src, **fields)

    def _not_joined(self, key: str) -> bool:
        self.env.trace("drop", layer=LAYER, key=key, reason="not_joined")
        return False

    # -- answers to our requests -----------------------------------------------------------

    def _answered(self, src: NodeId, ref: int, *kinds: RequestKind) -> Request:
        """The request ``ref`` answered by ``src``, taken off the table; or a rejection."""
        request = self._requests.get(ref)
        if request is None or request.kind not in kinds or (
                request.peer is not None and request.peer != src):
            raise Rejected("unexpected_reply", f"no request {ref} waits for {src}")
        return request

    def _settle(self, ref: int, request: Request) -> None:
        del self._requests[ref]
        if request.timer is not None:
            self.env.cancel(request.timer)

    # -- peers from the wire ---------------------------------------------------------------

    def _peer(self, wire: PeerWire) -> Peer:
        node, vnode, ident = wire
        value = int(ident, 16)
        if value >= self._modulus:
            raise Rejected("bad_id", f"identifier {ident} has more than {self.config.bits} bits")
        return Peer(value, node, vnode)

    def _peers(self, wires: Iterable[PeerWire]) -> list[Peer]:
        return [self._peer(w) for w in wires]

    def _vnode_for(self, to: int) -> VNode:
        """The active virtual node a message is addressed to."""
        if to >= len(self._vnodes):
            raise Rejected("unknown_vnode", f"no virtual node {to}")
        vn = self._vnodes[to]
        if vn.state is not ChordState.ACTIVE:
            raise Rejected("not_active", f"virtual node {to} is {vn.state.value}")
        return vn

    # -- ring state changes ---------------------------------------------------------------

    def _set_successors(self, vn: VNode, peers: Iterable[Peer]) -> None:
        """Keep the r nearest distinct peers after me, in ring order, never me."""
        old = vn.successor
        vn.set_successors(peers, self.config.successors)
        if vn.successor != old:
            self.env.trace("successor", layer=LAYER, peer=vn.successor.node, vnode=vn.index,
                           id=format(vn.successor.ident, "x"))

    def _set_predecessor(self, vn: VNode, peer: Peer | None) -> None:
        if peer is not None and peer.ident == vn.me.ident:
            peer = None
        if peer != vn.predecessor:
            vn.predecessor = peer
            self.env.trace("predecessor", layer=LAYER, peer=peer.node if peer else None,
                           vnode=vn.index)

    # -- failure detection -----------------------------------------------------------------

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
                self._set_successors(vn, remaining or vn.fallback_successors())
        if sample is not None:
            self.env.trace("suspect", layer=LAYER, peer=node)
            self._remember_departed(sample)

    def _remember_departed(self, peer: Peer) -> None:
        self._departed.pop(peer.node, None)
        self._departed[peer.node] = (peer, self.env.now())
        while len(self._departed) > self.config.departed_limit:
            del self._departed[next(iter(self._departed))]
