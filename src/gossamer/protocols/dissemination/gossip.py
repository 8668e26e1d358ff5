"""Gossip broadcast over HyParView's active view, with recovery of missed messages: flooding
(eager push to every neighbour) or a Plumtree-style spanning tree (Leitão et al., SRDS 2007).

Both modes keep a bounded seen-set for duplicate suppression and a bounded store of recent
messages. Recovery is anti-entropy: every ``recovery_interval`` a node sends the ids of its
recent messages to one random neighbour (and all of them to each new neighbour), which pulls the
ones it lacks. In ``tree`` mode payloads travel only on eager links; lazy links carry IHAVE
announcements, and a node that hears of a message but does not get it GRAFTs the announcer,
while duplicates PRUNE their link, so the eager links settle into a tree. ``tree_scope`` picks
the trees: ``"shared"`` (the default) is the paper's one tree for all origins, right when many
origins send a few messages each; with a few busy origins and similar link delays it keeps
pruning and grafting the same links, because a link redundant for one origin is the fastest
path for another. ``"origin"`` keeps one tree per origin (a link is eager or lazy for each
origin separately): every origin's messages follow its own shortest-delay tree, and each new
origin's first message floods once to build it.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
from collections.abc import Callable
from typing import Any, Literal

from ...core.env import DurableSequence, Env, TimerHandle
from ...core.errors import ConfigError, StateError
from ...core.ids import NodeId, check_node_id
from ...core.messages import Codec, Message, TraceIds, message
from ..membership.hyparview import HyParView

__all__ = [
    "LAYER",
    "GossipBroadcast",
    "GossipConfig",
    "GossipData",
    "GossipMessage",
    "Graft",
    "IHave",
    "Mode",
    "Prune",
    "Pull",
    "Summary",
    "message_id",
    "parse_message_id",
]

LAYER = "gossip"
MAX_HOP = 4096  # a payload that travelled further is a loop or a forgery
MAX_IDS = 1024  # most message ids one control message carries
_STATE = "gossip"

DeliverFn = Callable[[str, NodeId, Any], None]


def message_id(origin: NodeId, seq: int) -> str:
    """A message's run-unique id: origin and sequence number, as the trace writes them."""
    return f"{origin}:{seq}"


def parse_message_id(text: str) -> tuple[NodeId, int]:
    """(origin, seq) of a message id; ``ValueError`` if it is not one (node ids may hold ':')."""
    origin, sep, seq_text = text.rpartition(":")
    if not sep or not seq_text.isdigit() or len(seq_text) > 18:
        raise ValueError(f"not a message id: {text!r}")
    seq = int(seq_text)
    if seq < 1:
        raise ValueError(f"message id {text!r} has seq < 1")
    return check_node_id(origin), seq


def _check_ids(ids: tuple[str, ...]) -> None:
    if len(ids) > MAX_IDS:
        raise ValueError(f"at most {MAX_IDS} ids, got {len(ids)}")
    for text in ids:
        parse_message_id(text)


# -- messages ----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class GossipMessage(Message):
    """Base of the gossip layer's messages."""


CODEC = Codec()
"""The codec of the gossip messages (``Codec.union`` joins it with a node's other layers)."""


@message("gossip.data", codec=CODEC)
class GossipData(GossipMessage):
    """A payload. ``hop``: links travelled when it arrives; ``repair``: an answer to a PULL."""

    origin: str
    seq: int
    hop: int
    payload: Any
    repair: bool = False

    def __post_init__(self) -> None:
        check_node_id(self.origin)
        if self.seq < 1:
            raise ValueError(f"seq must be >= 1, got {self.seq}")
        if not 1 <= self.hop <= MAX_HOP:
            raise ValueError(f"hop must be in [1, {MAX_HOP}], got {self.hop}")

    @property
    def msg_id(self) -> str:
        return message_id(self.origin, self.seq)

    def trace_ids(self) -> TraceIds:
        return (message_id(self.origin, self.seq), self.origin, None, self.seq)


@message("gossip.ihave", codec=CODEC)
class IHave(GossipMessage):
    """Tree mode, on a lazy link: I have these messages (id, hop at which you would get it)."""

    announcements: tuple[tuple[str, int], ...]

    def __post_init__(self) -> None:
        if not 1 <= len(self.announcements) <= MAX_IDS:
            raise ValueError(f"1 to {MAX_IDS} announcements, got {len(self.announcements)}")
        for text, hop in self.announcements:
            parse_message_id(text)
            if not 1 <= hop <= MAX_HOP:
                raise ValueError(f"hop must be in [1, {MAX_HOP}], got {hop}")


@message("gossip.graft", codec=CODEC)
class Graft(GossipMessage):
    """Tree mode: make our link eager again and send me these messages."""

    ids: tuple[str, ...]

    def __post_init__(self) -> None:
        _check_ids(self.ids)


@message("gossip.prune", codec=CODEC)
class Prune(GossipMessage):
    """Tree mode: I got your payload twice; make our link lazy for ``origin``'s messages (the
    empty string: for the one shared tree)."""

    origin: str = ""

    def __post_init__(self) -> None:
        if self.origin:
            check_node_id(self.origin)


@message("gossip.summary", codec=CODEC)
class Summary(GossipMessage):
    """Recovery: the ids of my recent messages."""

    ids: tuple[str, ...]

    def __post_init__(self) -> None:
        if not self.ids:
            raise ValueError("a summary names at least one message")
        _check_ids(self.ids)


@message("gossip.pull", codec=CODEC)
class Pull(GossipMessage):
    """Recovery: send me these messages of your summary."""

    ids: tuple[str, ...]

    def __post_init__(self) -> None:
        if not self.ids:
            raise ValueError("a pull names at least one message")
        _check_ids(self.ids)


# -- configuration -----------------------------------------------------------------------------


class Mode(enum.Enum):
    FLOOD = "flood"
    TREE = "tree"


_SHARED = ""  # the tree key of the one shared tree (tree_scope "shared")


@dataclasses.dataclass(frozen=True, slots=True)
class GossipConfig:
    mode: Literal["flood", "tree"] = "flood"
    tree_scope: Literal["shared", "origin"] = "shared"  # tree: one tree, or one per origin
    max_tree_origins: int = 4096  # tree: origins whose lazy links are remembered (then: eager)
    seen_limit: int = 100_000  # message ids remembered for duplicate suppression
    store_limit: int = 1024  # recent messages kept to answer PULL and GRAFT
    store_ttl: float = 30.0  # ... for at most this many seconds (the recovery window)
    recovery_interval: float = 1.0  # seconds between summaries (0: no anti-entropy)
    summary_min_age: float = 1.0  # younger messages may still be in flight: not announced yet
    neighbor_summary_delay: float = 0.25  # a new neighbour's summary waits for copies in flight
    max_summary_ids: int = 256
    max_pull_ids: int = 64
    pull_retry: float = 1.0  # do not ask for the same message again sooner
    graft_timeout: float = 1.0  # tree: after an IHAVE, wait this long for the eager copy
    graft_retry: float = 0.5  # tree: then graft the next announcer this often
    ihave_interval: float = 0.05  # tree: IHAVEs to a lazy peer are batched this long (0: not)
    max_missing: int = 4096  # messages announced or pulled but not yet here, tracked at once
    durable: bool = True  # the next sequence number survives a crash (ids stay unique)
    # sequence numbers committed at once (one commit per seq_lease broadcasts, not per
    # broadcast); a restart skips the unused rest (nothing here chases an origin's gaps)
    seq_lease: int = 64
    # credits: while a neighbour's link holds max_backlog messages (``env.backlog``), this
    # node takes no new broadcast (``has_room``) until every link is under backlog_resume;
    # a full link is looked at every backlog_poll seconds
    max_backlog: int = 1000
    backlog_resume: int = 500
    backlog_poll: float = 0.002

    def __post_init__(self) -> None:
        if self.mode not in ("flood", "tree"):
            raise ConfigError(f"mode must be 'flood' or 'tree', got {self.mode!r}")
        if self.tree_scope not in ("origin", "shared"):
            raise ConfigError(f"tree_scope must be 'origin' or 'shared', got {self.tree_scope!r}")
        for name in ("seen_limit", "store_limit", "max_missing", "max_tree_origins",
                     "max_backlog", "seq_lease"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1")
        for name in ("max_summary_ids", "max_pull_ids"):
            if not 1 <= getattr(self, name) <= MAX_IDS:
                raise ConfigError(f"{name} must be in [1, {MAX_IDS}]")
        for name in ("store_ttl", "pull_retry", "graft_timeout", "graft_retry",
                     "backlog_poll"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be > 0")
        for name in ("recovery_interval", "summary_min_age", "ihave_interval",
                     "neighbor_summary_delay"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name} must be >= 0")
        if self.summary_min_age >= self.store_ttl:
            raise ConfigError("summary_min_age must be < store_ttl")
        if not 0 <= self.backlog_resume < self.max_backlog:
            raise ConfigError("backlog_resume must be in [0, max_backlog)")


@dataclasses.dataclass(slots=True)
class _Stored:
    origin: NodeId
    seq: int
    hop: int  # hops it had travelled when it reached us
    payload: Any
    received: float


# -- the protocol ----------------------------------------------------------------------------


class GossipBroadcast:
    """Broadcast to every node of a HyParView overlay. It is the node's process: it starts the
    membership layer and passes it the messages that are not gossip."""

    def __init__(
        self,
        env: Env,
        membership: HyParView,
        *,
        config: GossipConfig | None = None,
        on_deliver: DeliverFn | None = None,
    ) -> None:
        self.env = env
        self.membership = membership
        self.config = config if config is not None else GossipConfig()
        self.mode = Mode(self.config.mode)
        self.on_deliver = on_deliver
        self.on_room: Callable[[], None] | None = None  # ``has_room()`` is true again
        self._full = False  # a neighbour's link holds max_backlog: no new broadcast
        self._room_timer: TimerHandle | None = None
        membership.on_neighbor_up = self._neighbor_up
        membership.on_neighbor_down = self._neighbor_down
        self.delivered = 0
        self.duplicates = 0
        self._seen: dict[str, None] = {}
        self._store: dict[str, _Stored] = {}  # in arrival order: the oldest is first
        self._pulled: dict[str, float] = {}  # id -> when we last asked a neighbour for it
        # tree mode: per tree (an origin, or _SHARED) the neighbours whose link is lazy (every
        # other neighbour's is eager), least recently used tree first; and the messages
        # announced to us that we still lack
        self._per_origin = self.config.tree_scope == "origin"
        self._lazy: dict[str, dict[NodeId, None]] = {}
        self._missing: dict[str, list[NodeId]] = {}
        self._missing_timers: dict[str, TimerHandle] = {}
        self._ihave_queue: dict[NodeId, list[tuple[str, int]]] = {}
        self._ihave_timer: TimerHandle | None = None
        self._recovery_timer: TimerHandle | None = None
        self._neighbor_timers: dict[NodeId, TimerHandle] = {}  # new neighbours' summaries
        self._stopped = False
        self._sequence = DurableSequence(env.store if self.config.durable else None, _STATE,
                                         incarnation=env.incarnation,
                                         lease=self.config.seq_lease)

    # -- Process ---------------------------------------------------------------------------

    def start(self) -> None:
        self.membership.start()
        interval = self.config.recovery_interval
        if interval > 0:
            self._recovery_timer = self.env.set_timer(self.env.rng.uniform(0, interval),
                                                      self._recovery_due)

    def stop(self) -> None:
        for timer in (self._recovery_timer, self._ihave_timer, self._room_timer,
                      *self._missing_timers.values(),
                      *self._neighbor_timers.values()):
            if timer is not None:
                self.env.cancel(timer)
        self._missing_timers.clear()
        self._neighbor_timers.clear()
        self._missing.clear()
        self._stopped = True
        self.membership.stop()

    def on_unreachable(self, node: NodeId) -> None:
        """The runtime could not deliver to ``node`` (refused or reset): HyParView repairs at
        once instead of waiting for its keepalive timeout."""
        if not self._stopped:
            self.membership.peer_down(node)

    def on_message(self, src: NodeId, msg: Message) -> None:
        if not isinstance(msg, GossipMessage):
            self.membership.on_message(src, msg)
            return
        if self._stopped:
            self._drop(src, msg, "stopped")
            return
        if src == self.env.node:
            self._drop(src, msg, "from_self")
            return
        self.membership.heard_from(src)
        if isinstance(msg, GossipData):
            self._on_data(src, msg)
        elif isinstance(msg, IHave):
            self._on_ihave(src, msg)
        elif isinstance(msg, Prune):
            self._on_prune(src, msg)
        elif isinstance(msg, Graft):
            self._on_graft(src, msg)
        elif isinstance(msg, Summary):
            self._on_summary(src, msg)
        elif isinstance(msg, Pull):
            self._send_stored(src, msg.ids, repair=True)
        else:
            self._drop(src, msg, "unknown")

    # -- broadcasting ------------------------------------------------------------------------

    def has_room(self) -> bool:
        """Whether this node takes a new broadcast now: no neighbour's link holds
        ``max_backlog`` messages (after one did: until all hold fewer than
        ``backlog_resume``). While not, ``on_room`` is called once it is so again."""
        if self._stopped:
            return False
        backlog = self.env.backlog
        if self._full:
            resume = self.config.backlog_resume
            if any(backlog(node) >= resume for node in self.membership.active_view()):
                return False
            self._full = False
            return True
        limit = self.config.max_backlog
        if all(backlog(node) < limit for node in self.membership.active_view()):
            return True
        self._full = True
        self.env.trace("overload", layer=LAYER, reason="backlog",
                       backlog=max(backlog(n) for n in self.membership.active_view()))
        if self._room_timer is None:
            self._room_timer = self.env.set_timer(self.config.backlog_poll, self._look_for_room)
        return False

    def _look_for_room(self) -> None:
        self._room_timer = None
        if self._stopped:
            return
        if not self.has_room():
            if self._room_timer is None:
                self._room_timer = self.env.set_timer(self.config.backlog_poll,
                                                      self._look_for_room)
            return
        if self.on_room is not None:
            self.on_room()

    def broadcast(self, payload: Any) -> str:
        """Send ``payload`` to every node (delivered here at once); returns its message id.
        It does not wait for ``has_room()``: a publisher that must not outrun its links asks
        that first (``PubSubNode.publish`` does)."""
        if self._stopped:
            raise StateError("broadcast() on a stopped gossip layer")
        env = self.env
        seq = self._sequence.take()  # durable before anyone sees the id
        mid = message_id(env.node, seq)
        env.trace("publish", layer=LAYER, msg=mid, origin=env.node, seq=seq)
        self._accept(mid, env.node, seq, 0, payload)
        self._forward(mid, env.node, seq, 0, payload, exclude=None)
        return mid

    def _accept(self, mid: str, origin: NodeId, seq: int, hop: int, payload: Any) -> None:
        """Remember and deliver a message seen for the first time."""
        seen = self._seen
        seen[mid] = None
        if len(seen) > self.config.seen_limit:
            del seen[next(iter(seen))]
        store = self._store
        store[mid] = _Stored(origin, seq, hop, payload, self.env.now())
        if len(store) > self.config.store_limit:
            del store[next(iter(store))]
        self._pulled.pop(mid, None)
        self.delivered += 1
        self.env.trace("deliver", layer=LAYER, msg=mid, origin=origin, seq=seq, hop=hop)
        if self.on_deliver is not None:
            self.on_deliver(mid, origin, payload)

    def _forward(self, mid: str, origin: NodeId, seq: int, hop: int, payload: Any,
                 exclude: NodeId | None) -> None:
        send = self.env.send
        data = GossipData(origin=origin, seq=seq, hop=hop + 1, payload=payload)
        if self.mode is Mode.FLOOD:
            for node in self.membership.active_view():
                if node != exclude and node != origin:
                    send(node, data)
            return
        lazy = self._lazy_links(origin)
        if hop == 0 and lazy is not None and all(
                node in lazy for node in self.membership.active_view()):
            # our own message, and every link of its tree is lazy (duplicates pruned them
            # all): IHAVEs alone would leave it only here until a GRAFT comes back
            # (``graft_timeout``), lost if we crash meanwhile. Push it on every link and make
            # them eager again; the duplicates it causes prune the redundant ones
            key = self._tree_key(origin)
            for node in self.membership.active_view():
                self._set_eager(node, key)
            lazy = self._lazy_links(origin)
        for node in self.membership.active_view():
            if node in (exclude, origin):
                continue
            if lazy is not None and node in lazy:
                self._announce(node, mid, hop + 1)
            else:
                send(node, data)

    def _on_data(self, src: NodeId, msg: GossipData) -> None:
        mid = msg.msg_id
        tree = self.mode is Mode.TREE
        if mid in self._seen:
            self.duplicates += 1
            if tree and not msg.repair and self.membership.is_neighbor(src):
                # prune even if the link is lazy on our side: a PRUNE and a GRAFT that crossed
                # leave it eager on the sender's, and it would push to us for ever
                key = self._tree_key(msg.origin)
                self._set_lazy(src, key)
                self.env.send(src, Prune(origin=key))
            return
        if tree:
            timer = self._missing_timers.pop(mid, None)
            if timer is not None:
                self.env.cancel(timer)
            self._missing.pop(mid, None)
            if not msg.repair and self.membership.is_neighbor(src):
                self._set_eager(src, self._tree_key(msg.origin))
        self._accept(mid, msg.origin, msg.seq, msg.hop, msg.payload)
        self._forward(mid, msg.origin, msg.seq, msg.hop, msg.payload, exclude=src)

    def _send_stored(self, dst: NodeId, ids: tuple[str, ...], *, repair: bool) -> None:
        store = self._store
        for mid in ids:
            item = store.get(mid)
            if item is not None and item.hop < MAX_HOP:
                self.env.send(dst, GossipData(origin=item.origin, seq=item.seq, hop=item.hop + 1,
                                              payload=item.payload, repair=repair))

    # -- tree mode -----------------------------------------------------------------------------

    def _tree_key(self, origin: NodeId) -> str:
        return origin if self._per_origin else _SHARED

    def _lazy_links(self, origin: NodeId) -> dict[NodeId, None] | None:
        """The lazy links of ``origin``'s tree (None: all eager), marked recently used."""
        key = self._tree_key(origin)
        lazy = self._lazy.pop(key, None)
        if lazy is not None:
            self._lazy[key] = lazy
        return lazy

    def _set_eager(self, node: NodeId, key: str) -> None:
        lazy = self._lazy.get(key)
        if lazy is not None:
            lazy.pop(node, None)
            if not lazy:
                del self._lazy[key]

    def _set_lazy(self, node: NodeId, key: str) -> None:
        lazy = self._lazy.pop(key, None)
        if lazy is None:
            lazy = {}
            if len(self._lazy) >= self.config.max_tree_origins:
                # forget the least recently used tree: its links are eager again, and its
                # next message floods and prunes them once more
                del self._lazy[next(iter(self._lazy))]
        lazy[node] = None
        self._lazy[key] = lazy

    def _on_prune(self, src: NodeId, msg: Prune) -> None:
        if self.mode is not Mode.TREE:
            self._drop(src, msg, "not_tree_mode")
        elif (msg.origin == _SHARED) == self._per_origin:
            self._drop(src, msg, "wrong_tree_scope")
        elif self.membership.is_neighbor(src):
            self._set_lazy(src, msg.origin)

    def _on_graft(self, src: NodeId, msg: Graft) -> None:
        if self.mode is not Mode.TREE:
            self._drop(src, msg, "not_tree_mode")
            return
        if self.membership.is_neighbor(src):
            for mid in msg.ids:
                self._set_eager(src, self._tree_key(parse_message_id(mid)[0]))
        self._send_stored(src, msg.ids, repair=False)

    def _on_ihave(self, src: NodeId, msg: IHave) -> None:
        if self.mode is not Mode.TREE:
            self._drop(src, msg, "not_tree_mode")
            return
        seen, missing = self._seen, self._missing
        for mid, _hop in msg.announcements:
            if mid in seen:
                continue
            announcers = missing.get(mid)
            if announcers is None:
                if len(missing) >= self.config.max_missing:
                    continue  # anti-entropy will still bring it
                announcers = missing[mid] = []
                self._missing_timers[mid] = self.env.set_timer(
                    self.config.graft_timeout, functools.partial(self._graft_due, mid))
            if src not in announcers:
                announcers.append(src)

    def _graft_due(self, mid: str) -> None:
        """The eager copy of an announced message is late: graft its next announcer."""
        self._missing_timers.pop(mid, None)
        announcers = self._missing.get(mid)
        if mid in self._seen or not announcers:
            self._missing.pop(mid, None)
            return
        src = announcers.pop(0)
        if self.membership.is_neighbor(src):
            self._set_eager(src, self._tree_key(parse_message_id(mid)[0]))
        self.env.send(src, Graft(ids=(mid,)))
        self._missing_timers[mid] = self.env.set_timer(
            self.config.graft_retry, functools.partial(self._graft_due, mid))

    def _announce(self, node: NodeId, mid: str, hop: int) -> None:
        if self.config.ihave_interval == 0:
            self.env.send(node, IHave(announcements=((mid, hop),)))
            return
        queue = self._ihave_queue.setdefault(node, [])
        queue.append((mid, hop))
        if len(queue) >= MAX_IDS:
            del self._ihave_queue[node]
            self.env.send(node, IHave(announcements=tuple(queue)))
        if self._ihave_timer is None and self._ihave_queue:
            self._ihave_timer = self.env.set_timer(self.config.ihave_interval, self._flush_ihave)

    def _flush_ihave(self) -> None:
        self._ihave_timer = None
        queued, self._ihave_queue = self._ihave_queue, {}
        for node, announcements in queued.items():
            self.env.send(node, IHave(announcements=tuple(announcements)))

    # -- neighbours ------------------------------------------------------------------------

    def _neighbor_up(self, node: NodeId) -> None:
        if self.mode is Mode.TREE:
            for key in list(self._lazy):  # a link starts eager in every tree
                self._set_eager(node, key)
        # a new neighbour may have missed what we have: let it pull. Young messages count too
        # (it is often the replacement of a neighbour that failed while forwarding one), so
        # the summary waits ``neighbor_summary_delay`` for copies still in flight to land;
        # what we got after the link came up was pushed to it already.
        if len(self._neighbor_timers) >= self.config.max_missing:
            return  # bounded; anti-entropy covers it
        up_at = self.env.now()
        old = self._neighbor_timers.pop(node, None)
        if old is not None:
            self.env.cancel(old)
        self._neighbor_timers[node] = self.env.set_timer(
            self.config.neighbor_summary_delay,
            functools.partial(self._summarise_to_new_neighbor, node, up_at))

    def _summarise_to_new_neighbor(self, node: NodeId, up_at: float) -> None:
        self._neighbor_timers.pop(node, None)
        if not self.membership.is_neighbor(node):
            return
        ids = self._recent_ids(before=up_at)
        if ids:
            self.env.send(node, Summary(ids=ids))

    def _neighbor_down(self, node: NodeId) -> None:
        timer = self._neighbor_timers.pop(node, None)
        if timer is not None:
            self.env.cancel(timer)
        for key in list(self._lazy):
            self._set_eager(node, key)  # forgotten: not a link of any tree any more
        self._ihave_queue.pop(node, None)
        for announcers in self._missing.values():
            if node in announcers:
                announcers.remove(node)

    # -- recovery (anti-entropy) -------------------------------------------------------------

    def _recent_ids(self, *, min_age: float = 0.0,
                    before: float | None = None) -> tuple[str, ...]:
        """Newest first, at most ``max_summary_ids``, no older than the recovery window: the
        ones received at least ``min_age`` ago, or strictly ``before`` a time."""
        newest = self.env.now() - min_age
        ids: list[str] = []
        limit = self.config.max_summary_ids
        for mid in reversed(self._store):
            received = self._store[mid].received
            if received > newest or (before is not None and received >= before):
                continue
            ids.append(mid)
            if len(ids) >= limit:
                break
        return tuple(ids)

    def _recovery_due(self) -> None:
        config, env = self.config, self.env
        self._recovery_timer = env.set_timer(config.recovery_interval, self._recovery_due)
        now = env.now()
        store = self._store
        oldest = now - config.store_ttl
        while store:
            first = next(iter(store))
            if store[first].received >= oldest:
                break
            del store[first]
        expired = [mid for mid, asked in self._pulled.items() if asked < now - config.pull_retry]
        for mid in expired:
            del self._pulled[mid]
        neighbors = self.membership.active_view()
        if not neighbors:
            return
        ids = self._recent_ids(min_age=config.summary_min_age)
        if ids:
            env.send(env.rng.choice(neighbors), Summary(ids=ids))

    def _on_summary(self, src: NodeId, msg: Summary) -> None:
        seen, pulled = self._seen, self._pulled
        now = self.env.now()
        retry_before = now - self.config.pull_retry
        wanted: list[str] = []
        room = self.config.max_missing - len(pulled)
        for mid in msg.ids:
            if mid in seen:
                continue
            asked = pulled.get(mid)
            if asked is not None and asked > retry_before:
                continue  # asked recently: the answer may be on its way
            if len(wanted) >= room:
                break  # bounded: the rest waits for a later summary
            wanted.append(mid)
            pulled[mid] = now
            if len(wanted) >= self.config.max_pull_ids:
                break
        if wanted:
            self.env.send(src, Pull(ids=tuple(wanted)))

    # -- inspection --------------------------------------------------------------------------

    @property
    def next_seq(self) -> int:
        return self._sequence.next

    def has_seen(self, mid: str) -> bool:
        return mid in self._seen

    def stored_ids(self) -> list[str]:
        return list(self._store)

    def eager_peers(self, origin: NodeId | None = None) -> list[NodeId]:
        """Tree mode: the neighbours on eager links of ``origin``'s tree (of the shared tree
        when ``tree_scope`` is "shared"; ``origin`` may then be None)."""
        lazy = self._lazy.get(self._tree_key_of(origin), {})
        return [node for node in self.membership.active_view() if node not in lazy]

    def lazy_peers(self, origin: NodeId | None = None) -> list[NodeId]:
        lazy = self._lazy.get(self._tree_key_of(origin), {})
        return [node for node in self.membership.active_view() if node in lazy]

    def _tree_key_of(self, origin: NodeId | None) -> str:
        if origin is None:
            if self._per_origin:
                raise ValueError("tree_scope is 'origin': name the origin whose tree you mean")
            return _SHARED
        return self._tree_key(origin)

    # -- helpers -----------------------------------------------------------------------------

    def _drop(self, src: NodeId, msg: Message, reason: str) -> None:
        self.env.trace("drop", layer=LAYER, peer=src, reason=reason, type=msg.TYPE)
