"""Scribe over Chord: one multicast tree per topic, rooted at the topic's Chord root (seed 001,
sections 3.3-3.4; Rowstron et al., NGC 2001).

Subscribing routes a JOIN towards the topic's root through Chord. Every node the JOIN passes
becomes a forwarder: it adopts the previous hop as a child and, if it was not in the tree yet,
joins it itself with a JOIN of its own (the one it received stops there). A node whose JOIN
leaves it takes the next hop as its parent. Unsubscribing prunes: a node with no children that
is not subscribed LEAVEs its parent.

Publishing finds the topic's root (Chord ``find_root``, then cached), sends it the message and
waits for an acknowledgement, retrying through a fresh lookup. The root runs ``order`` (the step
a replicated owner, e.g. Multi-Paxos, replaces) which by default disseminates at once down the
tree; only subscribed nodes deliver, each message once. While the ring settles Chord's view and
the tree can disagree: a tree member named root passes a publish up to its parent (``hops``
bounds a cycle); a node named root with no tree yet takes it into a stream of its own, which
the tree fetches when it moves there; and a root Chord stops naming (it took messages while
the tree was elsewhere) publishes them again in the tree it joins, until they come down to it.

Tree repair: tree neighbours exchange heartbeats. A child that does not hear its parent within
``parent_timeout`` joins again through Chord, which routes around the failed node; a parent
forgets silent children. Heartbeats carry the parent's depth, so a cycle (possible while the ring
is inconsistent) grows without bound and is broken by a fresh join past ``max_depth``; a root
that Chord no longer names root joins the new one.

Loss recovery: each root numbers the topic's messages in a stream of its own, named by a random
``epoch`` drawn when it becomes root, at positions 1, 2, ... (the message id, origin:seq, stays
the delivery identity). Every tree node keeps the last ``topic_log_limit`` messages by position
and the highest position it knows of; heartbeats carry the parent's epoch, highest position and
the lowest position it can get (from its log, or from its own parent). A gap (a position jump,
or a heartbeat above what we have) is NACKed to the parent after ``nack_delay``, again every
``nack_interval`` while it lasts; the parent resends from its log, or asks its own parent for
what it never had (it joined the tree later than the child), and a node forwards a repair it
did not have to its children like any data, so the whole subtree is repaired. A node new to a
tree starts at its parent's position; if it subscribed a while ago (its JOIN was lost, or the
ring was settling) it asks its parent (``ScribeSince``, a few times: loss) for what reached the
parent since then, passed up by forwarders that joined later still; a node that changes
parent in the same stream keeps its position and fetches what it missed; a node that sees a new
epoch (the tree moved under a new root: the old one failed, or Chord now names another node)
fetches the new stream from its start, so what the new root took before the old tree joined it
is delivered too. Positions nobody up the tree can resend, or still missing after
``nack_retries`` rounds without progress, are given up with a traced ``drop``.

What loss recovery cannot repair: messages an old root accepted and that reached no node of the
new tree. Closing that window is the replicated topic owner's job (Multi-Paxos).
"""

from __future__ import annotations

import dataclasses
import enum
import functools
from collections.abc import Callable
from typing import Any

from ...core.env import DurableSequence, Env, TimerHandle
from ...core.errors import ConfigError, StateError
from ...core.ids import NodeId, check_node_id
from ...core.messages import Message, TraceIds, message
from ..membership.chord import ChordHost

__all__ = [
    "LAYER",
    "MAX_TOPIC",
    "Heartbeat",
    "Publish",
    "PublishAck",
    "Scribe",
    "ScribeConfig",
    "ScribeData",
    "ScribeLeave",
    "ScribeMessage",
    "ScribeNack",
    "ScribeSince",
    "TreeRole",
    "check_topic",
]

LAYER = "scribe"
MAX_TOPIC = 256
MAX_TOPICS_PER_HEARTBEAT = 1024
MAX_DEPTH_WIRE = 1 << 16
MAX_POSITION = 1 << 53  # positions in a topic's stream (JSON carries them exactly)
MAX_EPOCH = (1 << 32) - 1  # stream names (0 on the wire: "no stream yet")
MAX_CATCH_UP_AGE = 86_400.0  # seconds a ScribeSince may look back
MAX_NACK_SPAN = 4096  # positions one NACK may name on the wire (ScribeConfig.nack_max_range: less)
JOIN_TAG = "scribe.join"
_STATE = "scribe"

DeliverFn = Callable[[str, str, NodeId, Any], None]  # (topic, msg id, origin, payload)


def check_topic(topic: str) -> str:
    if not isinstance(topic, str) or not 1 <= len(topic) <= MAX_TOPIC:
        raise ValueError(f"a topic has 1-{MAX_TOPIC} characters")
    return topic


def _message_id(origin: NodeId, seq: int) -> str:
    return f"{origin}:{seq}"


def _check_position(name: str, value: int, low: int = 1) -> None:
    if not low <= value <= MAX_POSITION:
        raise ValueError(f"{name} must be in [{low}, {MAX_POSITION}], got {value}")


def _check_epoch(value: int, low: int = 1) -> None:
    if not low <= value <= MAX_EPOCH:
        raise ValueError(f"epoch must be in [{low}, {MAX_EPOCH}], got {value}")


# -- messages ----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class ScribeMessage(Message):
    """Base of Scribe's direct messages (JOINs travel inside Chord routes)."""


@dataclasses.dataclass(frozen=True, slots=True)
class _Published(ScribeMessage):
    """A published message: its topic, its origin's id and sequence number, its payload."""

    topic: str
    origin: str
    seq: int
    payload: Any = None

    def __post_init__(self) -> None:
        check_topic(self.topic)
        check_node_id(self.origin)
        if self.seq < 1:
            raise ValueError(f"seq must be >= 1, got {self.seq}")

    def trace_ids(self) -> TraceIds:
        return (_message_id(self.origin, self.seq), self.origin, self.topic, self.seq)


@message("scribe.publish")
class Publish(_Published):
    """Publisher -> the topic's root: please order and disseminate this message. A tree member
    that gets it (Chord named it root before the tree moved to it) passes it up to its parent;
    ``hops`` counts those steps."""

    hops: int = dataclasses.field(default=0, kw_only=True)

    def __post_init__(self) -> None:
        _Published.__post_init__(self)
        if not 0 <= self.hops <= MAX_DEPTH_WIRE:
            raise ValueError(f"hops must be in [0, {MAX_DEPTH_WIRE}], got {self.hops}")


@message("scribe.publish_ack")
class PublishAck(ScribeMessage):
    """Root -> publisher: your message is taken (ordered, disseminated)."""

    topic: str
    seq: int

    def __post_init__(self) -> None:
        check_topic(self.topic)
        if self.seq < 1:
            raise ValueError(f"seq must be >= 1, got {self.seq}")


@message("scribe.data")
class ScribeData(_Published):
    """A published message going down a topic's tree, parent -> child, at position ``pos`` of
    the root's stream ``epoch``. ``repair``: resent after a NACK (or forwarded on from such a
    resend)."""

    epoch: int = dataclasses.field(kw_only=True)
    pos: int = dataclasses.field(kw_only=True)
    repair: bool = dataclasses.field(default=False, kw_only=True)

    def __post_init__(self) -> None:
        _Published.__post_init__(self)
        _check_epoch(self.epoch)
        _check_position("pos", self.pos)


@message("scribe.nack")
class ScribeNack(ScribeMessage):
    """Child -> parent: resend positions ``start..end`` (inclusive) of stream ``epoch``."""

    topic: str
    epoch: int
    start: int
    end: int

    def __post_init__(self) -> None:
        check_topic(self.topic)
        _check_epoch(self.epoch)
        _check_position("start", self.start)
        _check_position("end", self.end)
        if self.end < self.start:
            raise ValueError(f"end {self.end} < start {self.start}")
        if self.end - self.start >= MAX_NACK_SPAN:
            raise ValueError(f"a NACK names at most {MAX_NACK_SPAN} positions")

    def trace_ids(self) -> TraceIds:
        return (None, None, self.topic, self.start)


@message("scribe.since")
class ScribeSince(ScribeMessage):
    """Child -> parent, once a new subscriber is in the tree: send me the messages of stream
    ``epoch`` that reached you in the last ``age`` seconds (published after I subscribed,
    while my JOIN was on its way). ``hops``: passed up by forwarders that joined later."""

    topic: str
    epoch: int
    age: float
    hops: int = 0

    def __post_init__(self) -> None:
        check_topic(self.topic)
        _check_epoch(self.epoch)
        if not 0 <= self.age <= MAX_CATCH_UP_AGE:
            raise ValueError(f"age must be in [0, {MAX_CATCH_UP_AGE}], got {self.age}")
        if not 0 <= self.hops <= MAX_DEPTH_WIRE:
            raise ValueError(f"hops must be in [0, {MAX_DEPTH_WIRE}], got {self.hops}")


@message("scribe.leave")
class ScribeLeave(ScribeMessage):
    """Child -> parent (UNSUBSCRIBE): take me off this topic's children."""

    topic: str

    def __post_init__(self) -> None:
        check_topic(self.topic)


@message("scribe.heartbeat")
class Heartbeat(ScribeMessage):
    """Between tree neighbours. ``down``: the topics I am your parent in, each with my depth, my
    stream's epoch (0: I have none yet, and then high, low and beacon are 0), the highest
    position I know of, the lowest I can get for you and the root's beacon (its tick count) as
    I last heard it. ``up``: the topics I am your child in."""

    down: tuple[tuple[str, int, int, int, int, int], ...] = ()
    up: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if len(self.down) + len(self.up) > MAX_TOPICS_PER_HEARTBEAT:
            raise ValueError(f"at most {MAX_TOPICS_PER_HEARTBEAT} topics per heartbeat")
        for topic, depth, epoch, high, low, beacon in self.down:
            check_topic(topic)
            if not 0 <= depth <= MAX_DEPTH_WIRE:
                raise ValueError(f"depth must be in [0, {MAX_DEPTH_WIRE}]")
            _check_epoch(epoch, 0)
            _check_position("high", high, 0)
            _check_position("beacon", beacon, 0)
            if epoch == 0:
                if high or low or beacon:
                    raise ValueError("no stream (epoch 0) but a position or beacon")
                continue
            _check_position("low", low, 1)
            if low > high + 1:
                raise ValueError(f"low {low} > high {high} + 1")
        for topic in self.up:
            check_topic(topic)


# -- configuration and state -------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class ScribeConfig:
    heartbeat_interval: float = 0.5
    parent_timeout: float = 1.6  # no heartbeat from the parent this long: join again
    child_timeout: float = 2.5  # a child silent this long is forgotten
    max_depth: int = 64  # a deeper tree position means a cycle: join again
    publish_timeout: float = 1.5  # no PublishAck this long: look the root up again and resend
    publish_retries: int = 6
    root_cache_ttl: float = 30.0
    max_topics: int = 4096
    max_children: int = 4096  # per topic
    max_pending: int = 4096  # publishes awaiting their ack
    seen_limit: int = 100_000  # message ids remembered to deliver and forward once
    durable: bool = True  # the next sequence number survives a crash
    loss_recovery: bool = True  # off: no log, no NACKs (a lost ScribeData is lost below)
    topic_log_limit: int = 256  # messages kept per topic to resend; also the largest gap repaired
    nack_delay: float = 0.05  # a gap waits this long (reordering) before its first NACK
    nack_interval: float = 0.3  # between NACK rounds for one topic while a gap lasts
    nack_retries: int = 12  # NACK rounds without progress before the gap is given up
    nack_max_range: int = 64  # positions per NACK, sent or accepted
    nack_ranges: int = 4  # NACKs per topic and round
    catch_up_requests: int = 6  # ScribeSince sent by a new subscriber, one per tick (loss)
    # a member that hears no newer root beacon (the root counts its heartbeat ticks; the count
    # travels down the tree in heartbeats) this long is not connected to the root (a cycle,
    # built while the ring was inconsistent): join again
    sync_timeout: float = 5.0

    def __post_init__(self) -> None:
        for name in ("heartbeat_interval", "parent_timeout", "child_timeout",
                     "publish_timeout", "root_cache_ttl", "nack_delay", "nack_interval",
                     "sync_timeout"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be > 0")
        for name in ("max_depth", "max_topics", "max_children", "max_pending", "seen_limit",
                     "topic_log_limit", "nack_retries", "nack_max_range", "nack_ranges",
                     "catch_up_requests"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1")
        if self.nack_max_range > MAX_NACK_SPAN:
            raise ConfigError(f"nack_max_range must be <= {MAX_NACK_SPAN}")
        if self.publish_retries < 0:
            raise ConfigError("publish_retries must be >= 0")
        if self.parent_timeout <= self.heartbeat_interval:
            raise ConfigError("parent_timeout must be > heartbeat_interval")


class TreeRole(enum.Enum):
    JOINING = "joining"  # our JOIN has not left this node yet (no parent)
    MEMBER = "member"  # we have a parent
    ROOT = "root"  # Chord delivered a JOIN to us: we are the topic's root


@dataclasses.dataclass(slots=True)
class _Topic:
    role: TreeRole
    subscribed: bool = False
    parent: NodeId | None = None
    parent_heard: float = 0.0
    depth: int = 0
    nonce: int = 0  # of our JOIN in flight: retries of older ones are stale
    children: dict[NodeId, float] = dataclasses.field(default_factory=dict)  # -> last heard
    not_root_ticks: int = 0
    # messages we took as a root Chord no longer names, to publish in the tree we join: by id
    handover: dict[str, ScribeData] = dataclasses.field(default_factory=dict)
    handover_ticks: int = 0
    beacon: int = 0  # the root's tick count, as last heard (a root: its own)
    beacon_at: float = 0.0  # when it last grew (or we took our parent)
    # loss recovery: positions in the root's stream
    epoch: int = 0  # the stream we follow (0: none yet; a root: its own)
    high: int = 0  # the highest position known to exist (the root: the last one stamped)
    done: int = 0  # every position up to here is had, or not owed, or given up
    got: set[int] = dataclasses.field(default_factory=set)  # positions above ``done`` we have
    log: dict[int, ScribeData] = dataclasses.field(default_factory=dict)  # pos -> message
    log_at: dict[int, float] = dataclasses.field(default_factory=dict)  # pos -> when it came
    subscribed_at: float | None = None  # a new subscriber, until it caught up
    synced_at: float = 0.0  # when we started following our stream
    catch_up: int = 0  # ScribeSince requests still to send (one per tick: loss)
    parent_high: int = 0  # the highest position our current parent announced
    parent_low: int = 0  # the lowest our current parent said it can get (0: not said)
    asked_up: dict[int, float] = dataclasses.field(default_factory=dict)  # for children: when
    nack_rounds: int = 0  # NACK rounds since the last progress
    nack_timer: TimerHandle | None = None

    @property
    def synced(self) -> bool:
        """We know our stream and where it starts for us (we are root, or a parent told us)."""
        return self.epoch != 0

    def view(self) -> tuple[Any, ...]:
        """Every field but the timer handle, for snapshots."""
        return (self.role, self.subscribed, self.parent, self.parent_heard, self.depth,
                self.nonce, tuple(self.children.items()), self.not_root_ticks,
                tuple(self.handover), self.handover_ticks, self.beacon, self.beacon_at,
                tuple(self.log_at.items()), self.subscribed_at, self.synced_at, self.catch_up,
                self.epoch,
                self.high, self.done, tuple(sorted(self.got)), tuple(self.log.items()),
                self.parent_high, self.parent_low, tuple(self.asked_up.items()),
                self.nack_rounds, self.nack_timer is not None)

    def resend_low(self) -> int:
        """The lowest position we can resend, will have, or can ask our parent for (0: we
        have no stream)."""
        if not self.synced:
            return 0
        low = self.high + 1
        if self.log:
            low = min(low, min(self.log))
        if self.done < self.high:
            low = min(low, self.done + 1)
        if self.role is TreeRole.MEMBER:
            # what our parent can get, once it said so; until then, anything might be above
            low = min(low, self.parent_low or 1)
        return low


@dataclasses.dataclass(slots=True)
class _Pending:
    topic: str
    seq: int
    payload: Any
    tries: int = 0
    timer: TimerHandle | None = None


# -- the protocol ------------------------------------------------------------------------------


class Scribe:
    """Scribe trees over a Chord host. It is the node's process: it starts Chord and passes it
    the messages that are not Scribe's.

    ``on_deliver(topic, msg_id, origin, payload)`` is called at subscribed nodes only.
    """

    def __init__(
        self,
        env: Env,
        chord: ChordHost,
        *,
        config: ScribeConfig | None = None,
        on_deliver: DeliverFn | None = None,
    ) -> None:
        self.env = env
        self.chord = chord
        self.config = config if config is not None else ScribeConfig()
        self.on_deliver = on_deliver
        chord.on_forward = self._on_forward
        chord.on_deliver = self._on_route_delivered
        chord.on_root_found = self._on_root_found
        chord.on_root_failed = self._on_root_failed
        self.delivered = 0
        self._topics: dict[str, _Topic] = {}
        self._seen: dict[str, None] = {}
        self._pending: dict[int, _Pending] = {}  # seq -> publish awaiting its ack
        self._roots: dict[str, tuple[NodeId, float]] = {}  # topic -> (root, when learnt)
        self._nonce = env.rng.getrandbits(32)
        self._heartbeat_timer: TimerHandle | None = None
        self._stopped = False
        self._sequence = DurableSequence(env.store if self.config.durable else None, _STATE)

    # -- Process -------------------------------------------------------------------------------

    def start(self) -> None:
        self.chord.start()
        interval = self.config.heartbeat_interval
        self._heartbeat_timer = self.env.set_timer(self.env.rng.uniform(0, interval), self._tick)

    def stop(self) -> None:
        self._stopped = True
        if self._heartbeat_timer is not None:
            self.env.cancel(self._heartbeat_timer)
        for pending in self._pending.values():
            if pending.timer is not None:
                self.env.cancel(pending.timer)
        self._pending.clear()
        for topic, state in self._topics.items():
            self._cancel_nack(state)
            if state.parent is not None:
                self.env.send(state.parent, ScribeLeave(topic=topic))
        self._topics.clear()
        self.chord.stop()

    def on_message(self, src: NodeId, msg: Message) -> None:
        if not isinstance(msg, ScribeMessage):
            self.chord.on_message(src, msg)
            return
        if self._stopped:
            self._drop(src, msg, "stopped")
            return
        if src == self.env.node:
            self._drop(src, msg, "from_self")
            return
        if isinstance(msg, ScribeData):
            self._on_data(src, msg)
        elif isinstance(msg, Publish):
            self._on_publish(src, msg)
        elif isinstance(msg, PublishAck):
            self._on_publish_ack(src, msg)
        elif isinstance(msg, ScribeLeave):
            self._on_leave(src, msg)
        elif isinstance(msg, Heartbeat):
            self._on_heartbeat(src, msg)
        elif isinstance(msg, ScribeNack):
            self._on_nack(src, msg)
        elif isinstance(msg, ScribeSince):
            self._on_since(src, msg)
        else:
            self._drop(src, msg, "unknown")

    # -- public face ---------------------------------------------------------------------------

    def subscribe(self, topic: str) -> None:
        check_topic(topic)
        if self._stopped:
            raise StateError("subscribe() on a stopped scribe layer")
        state = self._topics.get(topic)
        if state is not None:
            state.subscribed = True
            return
        if len(self._topics) >= self.config.max_topics:
            self.env.trace("drop", layer=LAYER, key=topic, reason="too_many_topics")
            return
        state = self._topics[topic] = _Topic(TreeRole.JOINING, subscribed=True,
                                             subscribed_at=self.env.now())
        self._join(topic, state)

    def unsubscribe(self, topic: str) -> None:
        check_topic(topic)
        state = self._topics.get(topic)
        if state is None:
            return
        state.subscribed = False
        self._maybe_prune(topic, state)

    def publish(self, topic: str, payload: Any) -> str:
        """Send ``payload`` to every subscriber of ``topic``; returns its message id."""
        check_topic(topic)
        if self._stopped:
            raise StateError("publish() on a stopped scribe layer")
        env = self.env
        seq = self._sequence.take()  # durable before anyone sees the id
        mid = _message_id(env.node, seq)
        env.trace("publish", layer=LAYER, msg=mid, origin=env.node, seq=seq, key=topic)
        if len(self._pending) >= self.config.max_pending:
            env.trace("drop", layer=LAYER, msg=mid, origin=env.node, seq=seq, key=topic,
                      reason="pending_full")
            return mid
        pending = self._pending[seq] = _Pending(topic, seq, payload)
        self._send_publish(pending)
        return mid

    def order(self, topic: str, origin: NodeId, seq: int, payload: Any) -> None:
        """The root's ordering step for a publish it accepted. By default: disseminate at once.
        A replicated topic owner (Multi-Paxos) replaces this and calls ``disseminate`` once the
        message is decided."""
        self.disseminate(topic, origin, seq, payload)

    def disseminate(self, topic: str, origin: NodeId, seq: int, payload: Any) -> None:
        """Deliver here (if subscribed) and send down this node's tree for ``topic``, stamped with
        the topic's next stream position."""
        mid = _message_id(origin, seq)
        if mid in self._seen:
            return
        state = self._topics.get(topic)
        if state is None or state.role is not TreeRole.ROOT:  # no tree of ours to number it in
            self._accept(topic, mid, origin, seq, payload)
            return
        if not state.synced or state.high >= MAX_POSITION:
            self._new_stream(topic, state)
        data = ScribeData(topic=topic, origin=origin, seq=seq, payload=payload,
                          epoch=state.epoch, pos=state.high + 1)
        self._take(topic, state, data)

    # -- inspection ----------------------------------------------------------------------------

    def topics(self) -> list[str]:
        return list(self._topics)

    def is_subscribed(self, topic: str) -> bool:
        state = self._topics.get(topic)
        return state is not None and state.subscribed

    def role(self, topic: str) -> TreeRole | None:
        state = self._topics.get(topic)
        return None if state is None else state.role

    def parent(self, topic: str) -> NodeId | None:
        state = self._topics.get(topic)
        return None if state is None else state.parent

    def children(self, topic: str) -> list[NodeId]:
        state = self._topics.get(topic)
        return [] if state is None else list(state.children)

    def stream(self, topic: str) -> int | None:
        """The epoch of the stream we follow (or number, as root) for ``topic``; None if none."""
        state = self._topics.get(topic)
        return state.epoch if state is not None and state.synced else None

    def position(self, topic: str) -> int | None:
        """The highest stream position of ``topic`` known here; None before we know where our
        stream starts (not in the tree, or not yet connected to its root)."""
        state = self._topics.get(topic)
        return state.high if state is not None and state.synced else None

    @property
    def next_seq(self) -> int:
        return self._sequence.next

    @property
    def pending_publishes(self) -> int:
        """Publishes not yet acknowledged by the topic's root (still being retried)."""
        return len(self._pending)

    def snapshot(self) -> tuple[Any, ...]:
        """Everything a message may change, for tests that check a drop changed nothing."""
        return (tuple((t, s.view()) for t, s in self._topics.items()),
                tuple(self._seen), tuple(self._pending), tuple(self._roots.items()),
                self.delivered)

    # -- tree building -------------------------------------------------------------------------

    def _join(self, topic: str, state: _Topic) -> None:
        """Route a fresh JOIN for ``topic``: its next hop becomes our parent."""
        self._nonce += 1
        state.nonce = self._nonce
        state.role = TreeRole.JOINING
        state.parent = None
        state.parent_high = 0
        state.not_root_ticks = 0
        self.env.trace("tree_join", layer=LAYER, key=topic)  # not "join": a membership event
        self.chord.route(topic, {"t": JOIN_TAG, "n": state.nonce})
        # if the route could not start (not on the ring yet) the next tick tries again

    def _rejoin(self, topic: str, state: _Topic, reason: str) -> None:
        old = state.parent
        self.env.trace("repair", layer=LAYER, key=topic, peer=old, reason=reason)
        if state.role is TreeRole.ROOT and state.log:
            # we were a root Chord no longer names: what we took may never have reached the
            # real tree (Chord named us root while it held another); hand it to that tree's
            # root once we are in it, until it comes back down to us
            handover = state.handover
            for data in state.log.values():
                handover[_message_id(data.origin, data.seq)] = data
            while len(handover) > self.config.topic_log_limit:
                del handover[next(iter(handover))]
            state.handover_ticks = 0
        if old is not None:
            self.env.send(old, ScribeLeave(topic=topic))
        self._join(topic, state)

    def _ask_since(self, topic: str, state: _Topic) -> None:
        """Ask our parent for what reached it since we subscribed (a few times: loss)."""
        subscribed = state.subscribed_at if state.subscribed_at is not None else state.synced_at
        state.catch_up -= 1
        if state.catch_up <= 0:
            state.subscribed_at = None
        if state.parent is None or state.role is not TreeRole.MEMBER or not state.synced:
            return
        age = min(max(self.env.now() - subscribed, 0.0), MAX_CATCH_UP_AGE)
        self.env.send(state.parent, ScribeSince(topic=topic, epoch=state.epoch, age=age))
        self.env.trace("catch_up", layer=LAYER, key=topic, peer=state.parent, age=age)

    def _child_request(self, src: NodeId, msg: ScribeNack | ScribeSince) -> _Topic | None:
        """The topic state a child's request about our stream is for; None (dropped, with a
        traced reason) if ``src`` is no child of ours there or speaks of another stream."""
        state = self._topics.get(msg.topic)
        if state is None:
            self._drop(src, msg, "unknown_topic")
            return None
        if src not in state.children:
            self._drop(src, msg, "not_a_child")
            return None
        if msg.epoch != state.epoch:
            self._drop(src, msg, "other_stream")  # it follows us into ours at our next word
            return None
        return state

    def _on_since(self, src: NodeId, msg: ScribeSince) -> None:
        state = self._child_request(src, msg)
        if state is None:
            return
        since = self.env.now() - msg.age
        for pos, at in state.log_at.items():
            if at >= since:
                self.env.send(src, dataclasses.replace(state.log[pos], repair=True))
        if (state.role is TreeRole.MEMBER and state.parent is not None and since < state.synced_at
                and msg.hops < self.config.max_depth):
            # we joined after that: our parent may have more, which passes through us
            self.env.send(state.parent, dataclasses.replace(msg, hops=msg.hops + 1))

    def _hand_over(self, topic: str, state: _Topic) -> None:
        """Publish again, through our parent, what we took as a false root (each tick, until it
        comes down the tree to us, at most ``nack_retries`` ticks)."""
        state.handover_ticks += 1
        if state.handover_ticks > self.config.nack_retries:
            self.env.trace("drop", layer=LAYER, key=topic, missing=len(state.handover),
                           reason="handover_gave_up")
            state.handover.clear()
            return
        assert state.parent is not None
        for data in state.handover.values():
            self.env.send(state.parent, Publish(topic=topic, origin=data.origin, seq=data.seq,
                                                payload=data.payload, hops=1))

    def _join_nonce(self, payload: Any) -> int | None:
        if (isinstance(payload, dict) and payload.get("t") == JOIN_TAG
                and isinstance(payload.get("n"), int)):
            return int(payload["n"])
        return None

    def _previous_hop(self) -> NodeId | None:
        prev = self.chord.last_hop
        return None if prev == self.env.node else prev

    def _on_forward(self, key: str, payload: Any, next_hop: NodeId) -> bool:
        """Chord is about to send a JOIN on: at its origin that fixes our parent; at a forwarder
        the previous hop becomes a child and the JOIN stops (we join with our own)."""
        nonce = self._join_nonce(payload)
        if nonce is None or self._stopped:
            self.env.trace("drop", layer=LAYER, key=key, reason="bad_route_payload")
            return False
        if next_hop == self.env.node:
            return True  # between virtual nodes of this host
        prev = self._previous_hop()
        if prev is None:
            state = self._topics.get(key)
            if state is None or state.nonce != nonce or state.role is TreeRole.ROOT:
                self.env.trace("drop", layer=LAYER, key=key, reason="stale_join")
                return False
            if state.parent is not None and state.parent != next_hop:
                self.env.send(state.parent, ScribeLeave(topic=key))
            if state.parent != next_hop:
                state.parent_high = 0
                state.nack_rounds = 0  # a new parent gets the full number of NACK rounds
                state.beacon_at = self.env.now()  # and time to pass the root's beacon on
            state.role = TreeRole.MEMBER
            state.parent = next_hop
            state.parent_heard = self.env.now()
            state.children.pop(next_hop, None)
            return True
        self._adopt(key, prev)
        return False

    def _on_route_delivered(self, key: str, payload: Any) -> None:
        """A JOIN reached us as the topic's root."""
        nonce = self._join_nonce(payload)
        if nonce is None or self._stopped:
            self.env.trace("drop", layer=LAYER, key=key, reason="bad_route_payload")
            return
        prev = self._previous_hop()
        state = self._topics.get(key)
        if prev is None and (state is None or state.nonce != nonce):
            self.env.trace("drop", layer=LAYER, key=key, reason="stale_join")
            return
        if state is None:
            if len(self._topics) >= self.config.max_topics:
                self.env.trace("drop", layer=LAYER, key=key, reason="too_many_topics")
                return
            state = self._topics[key] = _Topic(TreeRole.JOINING)
        if state.role is not TreeRole.ROOT:
            if state.parent is not None:
                self.env.send(state.parent, ScribeLeave(topic=key))
            self.env.trace("root", layer=LAYER, key=key)
            state.role = TreeRole.ROOT
            self._new_stream(key, state)
        state.parent = None
        state.depth = 0
        state.not_root_ticks = 0
        if prev is not None:
            self._add_child(key, state, prev)

    def _new_stream(self, topic: str, state: _Topic) -> None:
        """We are the root now: number the topic's messages in a stream of our own."""
        epoch = self.env.rng.randint(1, MAX_EPOCH)
        if epoch == state.epoch:
            epoch = epoch % MAX_EPOCH + 1
        self._switch_stream(topic, state, epoch)  # a root has everything of its own stream

    def _switch_stream(self, topic: str, state: _Topic, epoch: int) -> None:
        """Follow (or number, as root) stream ``epoch`` from its start, forgetting the old."""
        self.env.trace("stream", layer=LAYER, key=topic, seq=epoch, old=state.epoch)
        self._cancel_nack(state)
        state.epoch = epoch
        state.high = state.done = 0
        state.got.clear()
        state.log.clear()
        state.log_at.clear()
        state.parent_high = state.parent_low = 0
        state.asked_up.clear()
        state.beacon = 0
        state.synced_at = self.env.now()
        state.subscribed_at = None  # the whole stream is fetched: no catch-up by age
        state.catch_up = 0

    def _adopt(self, topic: str, child: NodeId) -> None:
        """``child`` joins through us: take it, and join the tree ourselves if we are not in."""
        state = self._topics.get(topic)
        if state is None:
            if len(self._topics) >= self.config.max_topics:
                self.env.trace("drop", layer=LAYER, key=topic, peer=child,
                               reason="too_many_topics")
                return
            state = self._topics[topic] = _Topic(TreeRole.JOINING)
            self._add_child(topic, state, child)
            self._join(topic, state)
            return
        if child == state.parent:
            # our parent joins through us: the ring was inconsistent; break the loop
            self._add_child(topic, state, child)
            self._rejoin(topic, state, "cycle")
            return
        self._add_child(topic, state, child)

    def _add_child(self, topic: str, state: _Topic, child: NodeId) -> None:
        if child not in state.children and len(state.children) >= self.config.max_children:
            self.env.trace("drop", layer=LAYER, key=topic, peer=child, reason="too_many_children")
            return
        state.children[child] = self.env.now()

    def _maybe_prune(self, topic: str, state: _Topic) -> None:
        """Leave the tree when nobody needs us in it."""
        if state.subscribed or state.children:
            return
        del self._topics[topic]
        self._cancel_nack(state)
        if state.parent is not None:
            self.env.send(state.parent, ScribeLeave(topic=topic))
        self.env.trace("leave", layer=LAYER, key=topic, peer=state.parent)

    def _on_leave(self, src: NodeId, msg: ScribeLeave) -> None:
        state = self._topics.get(msg.topic)
        if state is None or src not in state.children:
            self._drop(src, msg, "not_a_child")
            return
        del state.children[src]
        self._maybe_prune(msg.topic, state)

    # -- heartbeats and repair -----------------------------------------------------------------

    def _tick(self) -> None:
        config, env = self.config, self.env
        self._heartbeat_timer = env.set_timer(config.heartbeat_interval, self._tick)
        now = env.now()
        down: dict[NodeId, list[tuple[str, int, int, int, int, int]]] = {}
        up: dict[NodeId, list[str]] = {}
        for topic, state in list(self._topics.items()):
            stale = [c for c, heard in state.children.items()
                     if now - heard > config.child_timeout]
            for child in stale:
                del state.children[child]
                env.trace("drop_child", layer=LAYER, key=topic, peer=child)
            if stale and not state.subscribed and not state.children:
                self._maybe_prune(topic, state)
                continue
            if state.role is TreeRole.JOINING:
                if self.chord.joined:
                    self._join(topic, state)
            elif state.role is TreeRole.MEMBER:
                if now - state.parent_heard > config.parent_timeout:
                    self._rejoin(topic, state, "parent_timeout")
                elif now - state.beacon_at > config.sync_timeout:
                    self._rejoin(topic, state, "no_root_beacon")
                else:
                    if state.handover:
                        self._hand_over(topic, state)
                    if state.catch_up:
                        self._ask_since(topic, state)
            elif self.chord.joined and self.chord.root_of(topic) is None:
                state.not_root_ticks += 1
                if state.not_root_ticks >= 2:
                    self._rejoin(topic, state, "not_root")
            else:
                state.not_root_ticks = 0
            if state.role is TreeRole.ROOT:
                state.beacon += 1
            if state.role is TreeRole.MEMBER and state.parent is not None:
                up.setdefault(state.parent, []).append(topic)
            entry = self._down_entry(topic, state)
            for child in state.children:
                down.setdefault(child, []).append(entry)
        for node in sorted(set(down) | set(up)):
            pairs = down.get(node, [])
            names = up.get(node, [])
            while pairs or names:
                room = MAX_TOPICS_PER_HEARTBEAT
                chunk_down, pairs = pairs[:room], pairs[room:]
                room -= len(chunk_down)
                chunk_up, names = names[:room], names[room:]
                env.send(node, Heartbeat(down=tuple(chunk_down), up=tuple(chunk_up)))

    def _down_entry(self, topic: str, state: _Topic) -> tuple[str, int, int, int, int, int]:
        depth = min(state.depth, MAX_DEPTH_WIRE)
        if not state.synced:
            return (topic, depth, 0, 0, 0, 0)
        return (topic, depth, state.epoch, min(state.high, MAX_POSITION), state.resend_low(),
                min(state.beacon, MAX_POSITION))

    def _on_heartbeat(self, src: NodeId, msg: Heartbeat) -> None:
        now = self.env.now()
        for topic, depth, epoch, high, low, beacon in msg.down:
            state = self._topics.get(topic)
            if state is None or state.parent != src:
                self.env.send(src, ScribeLeave(topic=topic))  # not (or no longer) our parent
                continue
            state.parent_heard = now
            state.depth = depth + 1
            if state.depth > self.config.max_depth:
                self._rejoin(topic, state, "too_deep")
            elif epoch:
                self._parent_position(topic, state, epoch, high, low)
                if beacon > state.beacon:
                    state.beacon = beacon
                    state.beacon_at = now
        for topic in msg.up:
            state = self._topics.get(topic)
            if state is not None and src in state.children:
                state.children[src] = now
            else:
                self._adopt(topic, src)  # it counts on us (a lost JOIN, or we lost our state)

    # -- publishing ----------------------------------------------------------------------------

    def _send_publish(self, pending: _Pending) -> None:
        env = self.env
        pending.timer = env.set_timer(self.config.publish_timeout,
                                      functools.partial(self._publish_timed_out, pending.seq))
        cached = self._roots.get(pending.topic)
        if cached is not None and env.now() - cached[1] <= self.config.root_cache_ttl:
            self._to_root(pending, cached[0])
        elif not self.chord.find_root(pending.topic, pending.seq):
            pass  # not on the ring yet: the timeout retries

    def _to_root(self, pending: _Pending, root: NodeId) -> None:
        msg = Publish(topic=pending.topic, origin=self.env.node, seq=pending.seq,
                      payload=pending.payload)
        if root == self.env.node:
            self._on_publish(root, msg)
        else:
            self.env.send(root, msg)

    def _on_root_found(self, key: str, root: NodeId, hops: int, ref: int) -> None:
        self._roots[key] = (root, self.env.now())
        if len(self._roots) > self.config.max_topics:
            del self._roots[next(iter(self._roots))]
        pending = self._pending.get(ref)
        if pending is not None and pending.topic == key:
            self._to_root(pending, root)

    def _on_root_failed(self, key: str, ref: int) -> None:
        self.env.trace("drop", layer=LAYER, key=key, reason="root_lookup_failed", ref=ref)

    def _publish_timed_out(self, seq: int) -> None:
        pending = self._pending.get(seq)
        if pending is None:
            return
        self._roots.pop(pending.topic, None)
        if pending.tries >= self.config.publish_retries:
            del self._pending[seq]
            self.env.trace("drop", layer=LAYER, msg=_message_id(self.env.node, seq),
                           origin=self.env.node, seq=seq, key=pending.topic,
                           reason="publish_failed")
            return
        pending.tries += 1
        self._send_publish(pending)

    def _on_publish(self, src: NodeId, msg: Publish) -> None:
        topic = msg.topic
        state = self._topics.get(topic)
        if state is None and self.chord.root_of(topic) is not None:
            # Chord names us root but no tree is here yet (it is still under the old root, which
            # joins us within a few heartbeats): take the message into a stream of ours, so the
            # tree fetches it when it moves here
            if len(self._topics) >= self.config.max_topics:
                self._drop(src, msg, "too_many_topics")
                return
            state = self._topics[topic] = _Topic(TreeRole.ROOT)
            self.env.trace("root", layer=LAYER, key=topic)
            self._new_stream(topic, state)
        if state is not None and state.role is TreeRole.MEMBER and state.parent is not None:
            # the tree's root is above us (Chord's view and the tree disagree while the ring
            # settles): pass it up; the root acknowledges to the publisher
            if msg.hops >= self.config.max_depth:
                self._drop(src, msg, "publish_loop")  # a cycle: the publisher retries later
                return
            self.env.send(state.parent, dataclasses.replace(msg, hops=msg.hops + 1))
            return
        if state is None or state.role is not TreeRole.ROOT:
            self._drop(src, msg, "not_root")  # the publisher's timeout looks the root up again
            return
        ack = PublishAck(topic=msg.topic, seq=msg.seq)
        if msg.origin == self.env.node:
            self._on_publish_ack(self.env.node, ack)
        else:
            self.env.send(msg.origin, ack)
        if _message_id(msg.origin, msg.seq) in self._seen:
            return  # a retry of one we took
        self.order(msg.topic, msg.origin, msg.seq, msg.payload)

    def _on_publish_ack(self, src: NodeId, msg: PublishAck) -> None:
        pending = self._pending.get(msg.seq)
        if pending is None or pending.topic != msg.topic:
            self._drop(src, msg, "unexpected_ack")
            return
        del self._pending[msg.seq]
        if pending.timer is not None:
            self.env.cancel(pending.timer)
        if src != self.env.node:
            self._roots[msg.topic] = (src, self.env.now())

    # -- dissemination -------------------------------------------------------------------------

    def _on_data(self, src: NodeId, msg: ScribeData) -> None:
        state = self._topics.get(msg.topic)
        if state is None or state.parent != src:
            self._drop(src, msg, "not_parent")
            self.env.send(src, ScribeLeave(topic=msg.topic))
            return
        state.parent_heard = self.env.now()
        self._follow_stream(msg.topic, state, msg.epoch, msg.pos - 1)
        if msg.pos > state.parent_high:
            state.parent_high = msg.pos
        mid = _message_id(msg.origin, msg.seq)
        state.handover.pop(mid, None)  # the tree has it now
        if mid in self._seen:
            self._note_position(msg.topic, state, msg.pos)
            if msg.repair and msg.pos not in state.log and self.config.loss_recovery:
                self._log(state, msg)  # we fetched it for a child that lacks it: pass it on
                for child in state.children:
                    self.env.send(child, msg)
                return
            self._drop(src, msg, "duplicate")
            return
        self._take(msg.topic, state, msg)

    def _take(self, topic: str, state: _Topic, data: ScribeData) -> None:
        """A message new here: deliver it (if subscribed), log it, send it to our children."""
        self._accept(topic, _message_id(data.origin, data.seq), data.origin, data.seq,
                     data.payload)
        self._note_position(topic, state, data.pos)
        if self.config.loss_recovery and data.pos not in state.log:
            self._log(state, data)
        for child in state.children:
            self.env.send(child, data)

    def _log(self, state: _Topic, data: ScribeData) -> None:
        log = state.log
        log[data.pos] = data
        state.log_at[data.pos] = self.env.now()
        if len(log) > self.config.topic_log_limit:
            oldest = min(log)
            del log[oldest]
            state.log_at.pop(oldest, None)

    def _accept(self, topic: str, mid: str, origin: NodeId, seq: int, payload: Any) -> None:
        seen = self._seen
        seen[mid] = None
        if len(seen) > self.config.seen_limit:
            del seen[next(iter(seen))]
        state = self._topics.get(topic)
        if state is None or not state.subscribed:
            return
        self.delivered += 1
        self.env.trace("deliver", layer=LAYER, msg=mid, origin=origin, seq=seq, key=topic)
        if self.on_deliver is not None:
            self.on_deliver(topic, mid, origin, payload)

    # -- loss recovery -------------------------------------------------------------------------

    def _follow_stream(self, topic: str, state: _Topic, epoch: int, start: int) -> None:
        """Our parent speaks of stream ``epoch``, now at ``start`` or later."""
        if epoch == state.epoch:
            return
        if not state.synced:
            # new in this tree: what came before is not owed to us, except what was published
            # after we subscribed (while our JOIN was on its way): asked for by age
            state.epoch = epoch
            state.done = state.high = start
            state.got.clear()
            state.synced_at = self.env.now()
            if state.subscribed_at is not None:
                state.catch_up = self.config.catch_up_requests
                self._ask_since(topic, state)
        else:
            self._switch_stream(topic, state, epoch)  # the tree moved under a new root
        state.beacon = 0  # the new stream's root counts on its own
        self._tell_children(topic, state)  # they follow without waiting for a tick

    def _note_position(self, topic: str, state: _Topic, pos: int) -> None:
        """We have the message at ``pos``."""
        if pos > state.high:
            state.high = pos
        if pos > state.done:
            state.got.add(pos)
            self._advance(state)
        self._gap_changed(topic, state)

    def _parent_position(self, topic: str, state: _Topic, epoch: int, high: int,
                         low: int) -> None:
        """Our parent's heartbeat: in stream ``epoch`` it knows of positions up to ``high`` and
        can get them from ``low`` on."""
        self._follow_stream(topic, state, epoch, high)
        if high > state.parent_high:
            state.parent_high = high
        state.parent_low = low
        if high > state.high:
            state.high = high  # tail loss shows here
        if low - 1 > state.done:
            self._give_up(topic, state, min(low - 1, state.high), "not_in_parent_log")
        self._gap_changed(topic, state)

    def _tell_children(self, topic: str, state: _Topic) -> None:
        entry = self._down_entry(topic, state)
        for child in state.children:
            self.env.send(child, Heartbeat(down=(entry,)))

    def _advance(self, state: _Topic) -> None:
        got = state.got
        start = state.done
        while state.done + 1 in got:
            state.done += 1
            got.discard(state.done)
        if state.done > start:
            state.nack_rounds = 0

    def _give_up(self, topic: str, state: _Topic, upto: int, reason: str) -> None:
        """Stop waiting for the positions up to ``upto`` that we still miss."""
        if upto <= state.done:
            return
        missing = upto - state.done - sum(1 for pos in state.got if pos <= upto)
        if missing:
            self.env.trace("drop", layer=LAYER, key=topic, seq=state.done + 1, end=upto,
                           missing=missing, reason=reason)
        state.done = upto
        state.got = {pos for pos in state.got if pos > upto}
        self._advance(state)
        state.nack_rounds = 0

    def _gap_changed(self, topic: str, state: _Topic) -> None:
        limit = self.config.topic_log_limit
        if state.high - state.done > limit:
            self._give_up(topic, state, state.high - limit, "gap_too_large")
        if state.role is TreeRole.ROOT or not self.config.loss_recovery:
            return
        if state.high > state.done and state.nack_timer is None:
            state.nack_timer = self.env.set_timer(
                self.config.nack_delay, functools.partial(self._nack_due, topic, state))
        elif state.high <= state.done:
            self._cancel_nack(state)

    def _cancel_nack(self, state: _Topic) -> None:
        if state.nack_timer is not None:
            self.env.cancel(state.nack_timer)
            state.nack_timer = None
        state.nack_rounds = 0

    def _missing_ranges(self, state: _Topic, upto: int) -> list[tuple[int, int]]:
        """Runs of positions in (done, upto] we do not have, at most ``nack_ranges`` of at most
        ``nack_max_range`` positions each."""
        config = self.config
        ranges: list[tuple[int, int]] = []
        pos = state.done + 1
        while pos <= upto and len(ranges) < config.nack_ranges:
            if pos in state.got:
                pos += 1
                continue
            start = pos
            while (pos <= upto and pos not in state.got
                   and pos - start < config.nack_max_range):
                pos += 1
            ranges.append((start, pos - 1))
        return ranges

    def _nack_due(self, topic: str, state: _Topic) -> None:
        state.nack_timer = None
        if self._stopped or self._topics.get(topic) is not state or state.high <= state.done:
            return
        if state.role is TreeRole.ROOT:
            self._give_up(topic, state, state.high, "root_has_no_parent")
            return
        if state.nack_rounds >= self.config.nack_retries:
            self._give_up(topic, state, state.high, "repair_gave_up")
            return
        state.nack_rounds += 1
        parent = state.parent
        if parent is not None and state.role is TreeRole.MEMBER:
            # ask only for what the parent has announced: what lies above it may still come
            for start, end in self._missing_ranges(state, min(state.high, state.parent_high)):
                self.env.send(parent, ScribeNack(topic=topic, epoch=state.epoch, start=start,
                                                 end=end))
                self.env.trace("nack", layer=LAYER, peer=parent, key=topic, seq=start, end=end)
        state.nack_timer = self.env.set_timer(
            self.config.nack_interval, functools.partial(self._nack_due, topic, state))

    def _on_nack(self, src: NodeId, msg: ScribeNack) -> None:
        if not self.config.loss_recovery:
            self._drop(src, msg, "recovery_disabled")
            return
        state = self._child_request(src, msg)
        if state is None:
            return
        if msg.end - msg.start >= self.config.nack_max_range:
            self._drop(src, msg, "nack_too_large")
            return
        if msg.end > state.high:
            self._drop(src, msg, "nack_beyond_high")
            return
        now = self.env.now()
        state.children[src] = now
        upward: list[int] = []  # what we never had (we joined later) or no longer keep
        for pos in range(msg.start, msg.end + 1):
            data = state.log.get(pos)
            if data is None:
                if pos <= state.done and pos not in state.got:
                    upward.append(pos)
                continue  # else we miss it too: our own NACK fetches it for everyone
            self.env.send(src, dataclasses.replace(data, repair=True))
            self.env.trace("resend", layer=LAYER, peer=src, msg=_message_id(data.origin, data.seq),
                           origin=data.origin, seq=data.seq, key=msg.topic, pos=pos)
        if upward and state.role is TreeRole.MEMBER and state.parent is not None:
            self._ask_up(msg.topic, state, upward, now)

    def _ask_up(self, topic: str, state: _Topic, positions: list[int], now: float) -> None:
        """Ask our parent, for a child, for positions we do not keep (at most once per
        ``nack_interval`` each); the answer passes through us down to the child."""
        asked = state.asked_up
        again = now - self.config.nack_interval
        if len(asked) > self.config.topic_log_limit:
            for pos in [p for p, when in asked.items() if when <= again]:
                del asked[pos]
        wanted = [pos for pos in positions if asked.get(pos, again) <= again]
        if not wanted or len(asked) + len(wanted) > 2 * self.config.topic_log_limit:
            return
        assert state.parent is not None
        runs: list[list[int]] = []  # consecutive positions: [start, end]
        for pos in wanted:
            if runs and pos == runs[-1][1] + 1:
                runs[-1][1] = pos
            else:
                runs.append([pos, pos])
        for start, end in runs:
            self.env.send(state.parent, ScribeNack(topic=topic, epoch=state.epoch, start=start,
                                                   end=end))
            self.env.trace("nack", layer=LAYER, peer=state.parent, key=topic, seq=start,
                           end=end, on_behalf=True)
        for pos in wanted:
            asked[pos] = now

    # -- helpers -------------------------------------------------------------------------------

    def _drop(self, src: NodeId, msg: Message, reason: str) -> None:
        mid, origin, key, seq = msg.trace_ids()
        self.env.trace("drop", layer=LAYER, peer=src, msg=mid, origin=origin, key=key, seq=seq,
                       reason=reason, type=msg.TYPE)
