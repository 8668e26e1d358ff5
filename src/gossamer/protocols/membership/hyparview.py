"""HyParView membership: a small symmetric active view to gossip over and a larger passive view
of backups, kept fresh by random walks and shuffles (Leitão, Pereira, Rodrigues, DSN 2007).

The env has no connections, so failures are learnt two ways: ``peer_down(node)``, which a
runtime with real connections (or any layer with its own evidence) calls, and an optional
keepalive: every ``keepalive_interval`` a node PINGs its active neighbours and declares down any
it has not heard from for ``keepalive_timeout``. The keepalive is what notices the simulator's
crashes, which are silent. A down neighbour is replaced at once from the passive view.

One addition to the paper: a node remembers the nodes it presumed dead (silent neighbours and
unanswered NEIGHBOR requests) and asks them again, with a HIGH priority NEIGHBOR, after
``suspect_retry`` seconds, doubling up to ``suspect_retry_cap``, ``suspect_attempts`` times.
A crashed node never answers and is forgotten; a node that was only cut off by a partition
answers once it heals and is linked again, which is what merges the two halves (each with full
active views, they would otherwise never link up). A run without failures never pays for it.

Joining: a node retries its JOIN every ``join_timeout`` until a JOIN_REPLY (or a PING from its
contact) shows it is in, and holds the JOINs it receives meanwhile: a node that is not in the
overlay yet must not be a contact, or its joiners form an overlay of their own. A held joiner
that JOINs again (it has waited ``join_timeout``) is passed on to our own contact as a
FORWARD_JOIN walk: it may know no other node, and were we to crash before we are in, it would
JOIN a dead node for ever, cut off from everything it publishes or should receive.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
from collections.abc import Callable, Iterable, Sequence

from ...core.env import Env, TimerHandle
from ...core.errors import ConfigError, StateError
from ...core.ids import NodeId, check_node_id
from ...core.messages import Codec, Message, message

__all__ = [
    "LAYER",
    "Disconnect",
    "ForwardJoin",
    "HyParView",
    "HyParViewConfig",
    "HyParViewMessage",
    "Join",
    "JoinReply",
    "Neighbor",
    "NeighborReply",
    "OverlayState",
    "Ping",
    "Priority",
    "Shuffle",
    "ShuffleReply",
]

LAYER = "hyparview"
MAX_TTL = 64  # longest random walk a message may ask for
MAX_SHUFFLE_NODES = 128  # most node ids one SHUFFLE or SHUFFLE_REPLY may carry

NeighborFn = Callable[[NodeId], None]


# -- messages ----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class HyParViewMessage(Message):
    """Base of the HyParView messages: the layer above dispatches on it."""


def _check_ttl(ttl: int) -> None:
    if not 0 <= ttl <= MAX_TTL:
        raise ValueError(f"ttl must be in [0, {MAX_TTL}], got {ttl}")


def _check_nodes(nodes: tuple[str, ...]) -> None:
    if len(nodes) > MAX_SHUFFLE_NODES:
        raise ValueError(f"at most {MAX_SHUFFLE_NODES} nodes, got {len(nodes)}")
    for node in nodes:
        check_node_id(node)


class Priority(enum.Enum):
    """A NEIGHBOR request's priority: HIGH (the sender has no neighbour left) must be accepted."""

    HIGH = "high"
    LOW = "low"


CODEC = Codec()
"""The codec of the hyparview messages (``Codec.union`` joins it with a node's other layers)."""


@message("hyparview.join", codec=CODEC)
class Join(HyParViewMessage):
    """The sender wants to enter the overlay through me."""


@message("hyparview.forward_join", codec=CODEC)
class ForwardJoin(HyParViewMessage):
    """A random walk announcing ``new_node``; it ends in an active view after ``ttl`` hops."""

    new_node: str
    ttl: int

    def __post_init__(self) -> None:
        check_node_id(self.new_node)
        _check_ttl(self.ttl)


@message("hyparview.join_reply", codec=CODEC)
class JoinReply(HyParViewMessage):
    """I put you (a joiner) in my active view: put me in yours."""


@message("hyparview.neighbor", codec=CODEC)
class Neighbor(HyParViewMessage):
    """Take me into your active view; ``priority`` "high" may not be refused."""

    priority: str

    def __post_init__(self) -> None:
        Priority(self.priority)  # ValueError names the bad value


@message("hyparview.neighbor_reply", codec=CODEC)
class NeighborReply(HyParViewMessage):
    accepted: bool


@message("hyparview.disconnect", codec=CODEC)
class Disconnect(HyParViewMessage):
    """I dropped you from my active view; ``leaving``: and I am leaving the overlay."""

    leaving: bool = False


@message("hyparview.shuffle", codec=CODEC)
class Shuffle(HyParViewMessage):
    """A sample of ``origin``'s views on a random walk; the node where it ends answers."""

    origin: str
    ttl: int
    nodes: tuple[str, ...]
    nonce: int

    def __post_init__(self) -> None:
        check_node_id(self.origin)
        _check_ttl(self.ttl)
        _check_nodes(self.nodes)


@message("hyparview.shuffle_reply", codec=CODEC)
class ShuffleReply(HyParViewMessage):
    """A sample of my passive view, answering the SHUFFLE numbered ``nonce``."""

    nodes: tuple[str, ...]
    nonce: int

    def __post_init__(self) -> None:
        _check_nodes(self.nodes)


@message("hyparview.ping", codec=CODEC)
class Ping(HyParViewMessage):
    """Keepalive: I am alive and count you as my neighbour."""


# -- configuration and state -----------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class HyParViewConfig:
    """The paper's parameters (active 5, passive 30, ARWL 6, PRWL 3, ka 3, kp 4) and timers."""

    active_size: int = 5
    passive_size: int = 30
    arwl: int = 6  # active random walk length (FORWARD_JOIN)
    prwl: int = 3  # the FORWARD_JOIN hop at which the joiner enters passive views
    shuffle_active: int = 3  # ka: active-view nodes in a SHUFFLE
    shuffle_passive: int = 4  # kp: passive-view nodes in a SHUFFLE
    shuffle_ttl: int = 6
    shuffle_period: float = 2.0  # seconds between a node's shuffles (0: never)
    keepalive: bool = True  # PING neighbours and time out silent ones
    keepalive_interval: float = 1.0  # also the period of the active-view top-up
    keepalive_timeout: float = 3.5
    neighbor_timeout: float = 1.0  # a NEIGHBOR request unanswered this long: target is dead
    join_timeout: float = 2.0  # not in the overlay this long after a JOIN: JOIN again
    suspect_retry: float = 2.0  # ask a presumed-dead node again after this long, doubling
    suspect_retry_cap: float = 60.0
    suspect_attempts: int = 8  # then forget it (0: never ask again)

    def __post_init__(self) -> None:
        for name in ("active_size", "passive_size", "arwl"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1")
        for name in ("prwl", "shuffle_active", "shuffle_passive", "shuffle_ttl"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name} must be >= 0")
        if self.arwl > MAX_TTL or self.shuffle_ttl > MAX_TTL:
            raise ConfigError(f"arwl and shuffle_ttl must be <= {MAX_TTL}")
        if self.prwl > self.arwl:
            raise ConfigError(f"prwl ({self.prwl}) must be <= arwl ({self.arwl})")
        if 1 + self.shuffle_active + self.shuffle_passive > MAX_SHUFFLE_NODES:
            raise ConfigError(f"a shuffle carries at most {MAX_SHUFFLE_NODES} nodes")
        if self.shuffle_period < 0:
            raise ConfigError("shuffle_period must be >= 0")
        if self.suspect_attempts < 0:
            raise ConfigError("suspect_attempts must be >= 0")
        if not 0 < self.suspect_retry <= self.suspect_retry_cap:
            raise ConfigError("need 0 < suspect_retry <= suspect_retry_cap")
        for name in ("keepalive_interval", "neighbor_timeout", "join_timeout"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be > 0")
        if self.keepalive_timeout <= self.keepalive_interval:
            raise ConfigError("keepalive_timeout must be > keepalive_interval")


class OverlayState(enum.Enum):
    IDLE = "idle"  # built, not started
    JOINING = "joining"  # JOIN sent, no neighbour yet
    MEMBER = "member"  # in the overlay (or its first node)
    STOPPED = "stopped"  # left


# -- the protocol ----------------------------------------------------------------------------


class HyParView:
    """One node's HyParView. ``contacts``: nodes to JOIN through (empty: the first node).

    The layer above sets ``on_neighbor_up`` / ``on_neighbor_down`` and reads ``active_view()``.
    """

    def __init__(
        self,
        env: Env,
        *,
        contacts: Iterable[NodeId] = (),
        config: HyParViewConfig | None = None,
    ) -> None:
        self.env = env
        self.config = config if config is not None else HyParViewConfig()
        self.contacts: list[NodeId] = [check_node_id(c) for c in contacts if c != env.node]
        self.on_neighbor_up: NeighborFn | None = None
        self.on_neighbor_down: NeighborFn | None = None
        self.state = OverlayState.IDLE
        # active neighbour -> when we last heard from it; dicts, not sets: iteration order
        # must not depend on string hashing, or one seed would not give one trace
        self._active: dict[NodeId, float] = {}
        self._passive: dict[NodeId, None] = {}
        self._pending: dict[NodeId, TimerHandle] = {}  # NEIGHBOR requests awaiting a reply
        self._shuffle_nonce = 0
        self._shuffle_sent: tuple[NodeId, ...] | None = None  # sample of the open shuffle
        self._join_timer: TimerHandle | None = None
        self._join_attempts = 0
        self._held_joins: dict[NodeId, None] = {}  # JOINs that came while we were joining
        self._contact: NodeId | None = None  # whom we last sent a JOIN
        self._tick_timer: TimerHandle | None = None
        self._shuffle_timer: TimerHandle | None = None
        # presumed dead -> (attempts so far, when to ask again); at most passive_size of them
        self._suspects: dict[NodeId, tuple[int, float]] = {}

    # -- Process ---------------------------------------------------------------------------

    def start(self) -> None:
        if self.state is not OverlayState.IDLE:
            raise StateError(f"start() on a HyParView that is {self.state.value}")
        config, env = self.config, self.env
        if self.contacts:
            self._join()
        else:
            self.state = OverlayState.MEMBER
        # timers start at a random phase so that thousands of nodes do not tick together
        self._tick_timer = env.set_timer(env.rng.uniform(0, config.keepalive_interval),
                                         self._tick)
        if config.shuffle_period > 0:
            self._shuffle_timer = env.set_timer(env.rng.uniform(0, config.shuffle_period),
                                                self._shuffle_due)

    def stop(self) -> None:
        """Leave gracefully: neighbours drop us without keeping us as a backup."""
        if self.state is OverlayState.STOPPED:
            return
        goodbye = Disconnect(leaving=True)
        for node in list(self._active):
            self.env.send(node, goodbye)
        for timer in (self._tick_timer, self._shuffle_timer, self._join_timer,
                      *self._pending.values()):
            if timer is not None:
                self.env.cancel(timer)
        self._pending.clear()
        self._active.clear()
        self.state = OverlayState.STOPPED

    def on_message(self, src: NodeId, msg: Message) -> None:
        if not isinstance(msg, HyParViewMessage):
            self._drop(src, msg, "wrong_layer")
            return
        if self.state is OverlayState.STOPPED:
            self._drop(src, msg, "stopped")
            return
        if src == self.env.node:
            self._drop(src, msg, "from_self")
            return
        active = self._active
        if src in active:
            active[src] = self.env.now()
        if isinstance(msg, Ping):
            if src not in active:
                self._on_stray_ping(src)
        elif isinstance(msg, ForwardJoin):
            self._on_forward_join(src, msg)
        elif isinstance(msg, Shuffle):
            self._on_shuffle(src, msg)
        elif isinstance(msg, ShuffleReply):
            self._on_shuffle_reply(src, msg)
        elif isinstance(msg, Neighbor):
            self._on_neighbor(src, Priority(msg.priority))
        elif isinstance(msg, NeighborReply):
            self._on_neighbor_reply(src, msg)
        elif isinstance(msg, Join):
            self._on_join(src)
        elif isinstance(msg, JoinReply):
            self._add_active(src, "join_reply")
            self._joined()
        elif isinstance(msg, Disconnect):
            self._on_disconnect(src, msg.leaving)
        else:
            self._drop(src, msg, "unknown")

    # -- public face ---------------------------------------------------------------------------

    def active_view(self) -> list[NodeId]:
        return list(self._active)

    def passive_view(self) -> list[NodeId]:
        return list(self._passive)

    def is_neighbor(self, node: NodeId) -> bool:
        return node in self._active

    def peer_down(self, node: NodeId) -> None:
        """The transport (or a layer with evidence) says ``node`` is unreachable."""
        if self.state is OverlayState.STOPPED or node == self.env.node:
            return  # (never suspect, and later re-ask, ourselves)
        timer = self._pending.pop(node, None)
        if timer is not None:
            self.env.cancel(timer)
        if node in self._active:
            self._remove_active(node, "down", to_passive=False)
        self._suspect(node)
        self._fill_active()

    def heard_from(self, node: NodeId) -> None:
        """Any message from ``node`` (of any layer) proves it alive."""
        if node in self._active:
            self._active[node] = self.env.now()

    # -- joining ---------------------------------------------------------------------------

    def _join(self) -> None:
        env = self.env
        self.state = OverlayState.JOINING
        contact = self._contact = env.rng.choice(self.contacts)
        self._join_attempts += 1
        env.trace("overlay_join", layer=LAYER, peer=contact, attempt=self._join_attempts)
        env.send(contact, Join())
        # no backoff: one JOIN per join_timeout is no load, and a lossy link needs the tries
        self._join_timer = env.set_timer(self.config.join_timeout, self._join_due)

    def _join_due(self) -> None:
        self._join_timer = None
        if self.state is OverlayState.JOINING:
            self._join()  # the JOIN or its reply was lost, or the contact is dead: again

    def _joined(self) -> None:
        """A JOIN_REPLY: we are linked into the overlay we asked to join; serve held JOINs."""
        if self.state is OverlayState.JOINING:
            self.state = OverlayState.MEMBER
            self._join_attempts = 0
            if self._join_timer is not None:
                self.env.cancel(self._join_timer)
                self._join_timer = None
            held, self._held_joins = self._held_joins, {}
            for joiner in held:
                self._on_join(joiner)

    def _on_join(self, joiner: NodeId) -> None:
        if self.state is OverlayState.JOINING:
            # a node that is not in the overlay yet must not be a contact: its joiners would
            # form an overlay of their own, joined to the real one by a link or none at all
            retry = joiner in self._held_joins
            if retry or len(self._held_joins) < self.config.active_size:
                self._held_joins[joiner] = None
            else:
                self._drop(joiner, Join(), "joining")
            contact = self._contact
            if retry and contact is not None and contact != joiner:
                # it has waited a join_timeout already, and may know no node but us: should
                # we crash before we are in, it would JOIN us for ever. Walk it in through
                # our own contact (we still serve it if we get in first)
                self.env.send(contact, ForwardJoin(new_node=joiner, ttl=self.config.arwl))
            return
        added = joiner not in self._active
        if added:
            self._add_active(joiner, "join")
        self.env.send(joiner, JoinReply())
        if added:
            walk = ForwardJoin(new_node=joiner, ttl=self.config.arwl)
            for node in list(self._active):
                if node != joiner:
                    self.env.send(node, walk)

    def _on_forward_join(self, sender: NodeId, msg: ForwardJoin) -> None:
        joiner = msg.new_node
        if joiner == self.env.node:
            self._drop(sender, msg, "own_walk")
            return
        candidates = [n for n in self._active if n != sender and n != joiner]
        if msg.ttl == 0 or not candidates:
            if joiner not in self._active:
                self._add_active(joiner, "forward_join")
                self.env.send(joiner, JoinReply())
            return
        if msg.ttl == self.config.prwl:
            self._add_passive(joiner)
        target = self.env.rng.choice(candidates)
        self.env.send(target, ForwardJoin(new_node=joiner, ttl=msg.ttl - 1))

    # -- active view -------------------------------------------------------------------------

    def _add_active(self, node: NodeId, reason: str) -> None:
        if node == self.env.node or node in self._active:
            return
        timer = self._pending.pop(node, None)
        if timer is not None:
            self.env.cancel(timer)
        if len(self._active) >= self.config.active_size:
            self._drop_random_active()
        self._passive.pop(node, None)
        self._suspects.pop(node, None)
        self._active[node] = self.env.now()
        self.env.trace("neighbor_up", layer=LAYER, peer=node, reason=reason,
                       active=len(self._active))
        if self.on_neighbor_up is not None:
            self.on_neighbor_up(node)
        if node == self._contact:
            self._joined()  # it took us in (its JOIN_REPLY may be lost: its PING says so too)

    def _drop_random_active(self) -> None:
        victim = self.env.rng.choice(list(self._active))
        self.env.send(victim, Disconnect())
        self._remove_active(victim, "evicted", to_passive=True)

    def _remove_active(self, node: NodeId, reason: str, *, to_passive: bool) -> None:
        del self._active[node]
        if to_passive:
            self._add_passive(node)
        self.env.trace("neighbor_down", layer=LAYER, peer=node, reason=reason,
                       active=len(self._active))
        if self.on_neighbor_down is not None:
            self.on_neighbor_down(node)

    def _fill_active(self) -> None:
        """Ask passive nodes to fill the free active slots (one request per free slot)."""
        if self.state is not OverlayState.MEMBER:
            return
        free = self.config.active_size - len(self._active) - len(self._pending)
        if free <= 0:
            return
        candidates = [n for n in self._passive if n not in self._pending]
        rng = self.env.rng
        for target in rng.sample(candidates, min(free, len(candidates))):
            # HIGH only for the first request of an isolated node: it must get back in, but
            # a burst of forced accepts would evict many healthy links elsewhere
            urgent = not self._active and not self._pending
            self._request_neighbor(target, Priority.HIGH if urgent else Priority.LOW)

    def _request_neighbor(self, target: NodeId, priority: Priority) -> None:
        self.env.send(target, Neighbor(priority=priority.value))
        self._pending[target] = self.env.set_timer(
            self.config.neighbor_timeout, functools.partial(self._neighbor_timeout, target)
        )

    def _suspect(self, node: NodeId) -> None:
        """``node`` seems dead: forget it as a backup, but ask it again later."""
        self._passive.pop(node, None)
        config, suspects = self.config, self._suspects
        attempts = suspects.pop(node, (0, 0.0))[0]
        if attempts >= config.suspect_attempts:
            return
        if len(suspects) >= config.passive_size:
            del suspects[next(iter(suspects))]  # the oldest suspicion goes first
        delay = min(config.suspect_retry * 2**attempts, config.suspect_retry_cap)
        suspects[node] = (attempts, self.env.now() + delay)

    def _probe_suspects(self) -> None:
        """Ask the longest-due suspect again, one per tick: each answer evicts a neighbour."""
        now = self.env.now()
        for node, (attempts, when) in self._suspects.items():
            if when <= now and node not in self._pending:
                self._suspects[node] = (attempts + 1, float("inf"))  # its timeout re-arms it
                self._request_neighbor(node, Priority.HIGH)
                return

    def _neighbor_timeout(self, target: NodeId) -> None:
        if self._pending.pop(target, None) is None:
            return
        self._suspect(target)
        self._fill_active()

    def _on_neighbor(self, src: NodeId, priority: Priority) -> None:
        active = self._active
        accept = (src in active or priority is Priority.HIGH
                  or len(active) + len(self._pending) < self.config.active_size
                  or src in self._pending)  # crossed requests: both sides want the link
        if accept:
            self._add_active(src, f"neighbor_{priority.value}")
        else:
            self._add_passive(src)
        self.env.send(src, NeighborReply(accepted=accept))

    def _on_neighbor_reply(self, src: NodeId, msg: NeighborReply) -> None:
        timer = self._pending.pop(src, None)
        if timer is None:
            if src in self._active:
                return  # crossed requests: the link exists already
            if msg.accepted:
                # we gave up waiting, but it took us in: undo, so views stay symmetric
                self.env.send(src, Disconnect())
                self._drop(src, msg, "late_reply")
            else:
                self._drop(src, msg, "unsolicited")
            return
        self.env.cancel(timer)
        if msg.accepted:
            self._add_active(src, "neighbor_reply")
        elif not self._active:
            self._fill_active()  # isolated: try the next one now (its request is HIGH)

    def _on_disconnect(self, src: NodeId, leaving: bool) -> None:
        if src in self._active:
            self._remove_active(src, "left" if leaving else "disconnect", to_passive=not leaving)
            if not self._active:
                self._fill_active()
        elif leaving:
            self._passive.pop(src, None)
        if leaving:
            self._suspects.pop(src, None)

    def _on_stray_ping(self, src: NodeId) -> None:
        """A node counts us as its neighbour but we do not (a DISCONNECT was lost, we timed it
        out, or our JOIN_REPLY is still in flight): take it back if there is room, else tell it."""
        if src in self._pending:
            return  # our request to it is on its way; its reply settles the link
        if len(self._active) + len(self._pending) < self.config.active_size:
            self._add_active(src, "ping")
        else:
            self.env.send(src, Disconnect())

    # -- passive view --------------------------------------------------------------------------

    def _add_passive(self, node: NodeId, *, evict_first: Sequence[NodeId] = ()) -> None:
        passive = self._passive
        if node == self.env.node or node in self._active or node in passive:
            return
        if len(passive) >= self.config.passive_size:
            victim = next((n for n in evict_first if n in passive), None)
            if victim is None:
                victim = self.env.rng.choice(list(passive))
            del passive[victim]
        passive[node] = None

    def _integrate(self, nodes: Iterable[NodeId], sent: Sequence[NodeId]) -> None:
        for node in nodes:
            self._add_passive(node, evict_first=sent)

    # -- shuffling -----------------------------------------------------------------------------

    def _shuffle_due(self) -> None:
        config, env = self.config, self.env
        self._shuffle_timer = env.set_timer(config.shuffle_period, self._shuffle_due)
        if not self._active:
            return
        rng = env.rng
        active = list(self._active)
        target = rng.choice(active)
        others = [n for n in active if n != target]
        passive = list(self._passive)
        sample = (env.node,
                  *rng.sample(others, min(config.shuffle_active, len(others))),
                  *rng.sample(passive, min(config.shuffle_passive, len(passive))))
        self._shuffle_nonce += 1
        self._shuffle_sent = sample
        env.send(target, Shuffle(origin=env.node, ttl=config.shuffle_ttl, nodes=sample,
                                 nonce=self._shuffle_nonce))

    def _on_shuffle(self, sender: NodeId, msg: Shuffle) -> None:
        me = self.env.node
        if msg.origin == me:
            self._drop(sender, msg, "own_walk")
            return
        ttl = msg.ttl - 1
        candidates = [n for n in self._active if n != sender and n != msg.origin]
        rng = self.env.rng
        if ttl > 0 and candidates:
            self.env.send(rng.choice(candidates), Shuffle(origin=msg.origin, ttl=ttl,
                                                          nodes=msg.nodes, nonce=msg.nonce))
            return
        passive = list(self._passive)
        reply = tuple(rng.sample(passive, min(len(msg.nodes), len(passive))))
        self.env.send(msg.origin, ShuffleReply(nodes=reply, nonce=msg.nonce))
        self._integrate(msg.nodes, reply)

    def _on_shuffle_reply(self, src: NodeId, msg: ShuffleReply) -> None:
        sent = self._shuffle_sent
        if sent is None or msg.nonce != self._shuffle_nonce:
            self._drop(src, msg, "unsolicited")
            return
        self._shuffle_sent = None
        self._integrate(msg.nodes, sent)

    # -- keepalive and upkeep --------------------------------------------------------------

    def _tick(self) -> None:
        config, env = self.config, self.env
        self._tick_timer = env.set_timer(config.keepalive_interval, self._tick)
        if config.keepalive:
            deadline = env.now() - config.keepalive_timeout
            silent = [n for n, heard in self._active.items() if heard < deadline]
            for node in silent:
                self._remove_active(node, "timeout", to_passive=False)
                self._suspect(node)
            ping = Ping()
            for node in self._active:
                env.send(node, ping)
        if self.state is OverlayState.MEMBER:
            if not self._active and not self._passive and not self._pending and self.contacts:
                self._join()  # nothing left to repair from: start over through a contact
            else:
                self._fill_active()
                self._probe_suspects()

    # -- helpers -----------------------------------------------------------------------------

    def _drop(self, src: NodeId, msg: Message, reason: str) -> None:
        self.env.trace("drop", layer=LAYER, peer=src, reason=reason, type=msg.TYPE)
