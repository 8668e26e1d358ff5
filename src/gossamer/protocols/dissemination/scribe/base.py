"""Scribe's configuration, per-topic tree and stream state, and what every part of the protocol
shares (``ScribeBase``: the node's topics, messages seen, publishes in flight, its orderer, drops).
"""

from __future__ import annotations

import collections
import dataclasses
import enum
from collections.abc import Callable
from typing import Any

from ....core.env import DurableSequence, Env, TimerHandle
from ....core.errors import ConfigError
from ....core.ids import NodeId
from ....core.messages import Message
from ...membership.chord import ChordHost
from ...ordering.orderer import ImmediateOrderer, Orderer, ReplicatedOrderer
from .messages import MAX_NACK_SPAN, Publish, ScribeData

__all__ = [
    "JOIN_TAG",
    "LAYER",
    "DeliverFn",
    "PendingPublish",
    "PublishDoneFn",
    "PublishResult",
    "ScribeBase",
    "ScribeConfig",
    "TopicState",
    "TreeRole",
]

LAYER = "scribe"
JOIN_TAG = "scribe.join"
STATE_TABLE = "scribe"

DeliverFn = Callable[[str, str, NodeId, Any], None]  # (topic, msg id, origin, payload)


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
    max_ordering: int = 4096  # publishes a root handed to its orderer, awaiting its decision
    # credits down the tree's first hop: a root takes no publish of a topic while the link to
    # one of its children holds max_backlog messages (``env.backlog``); it holds up to
    # max_ordering of them, looked at every backlog_poll seconds, in arrival order
    max_backlog: int = 1000
    backlog_poll: float = 0.002
    seen_limit: int = 100_000  # message ids remembered to deliver and forward once
    durable: bool = True  # the next sequence number survives a crash
    # sequence numbers committed at once (one commit per seq_lease publishes, not per
    # publish); a restart skips the unused rest (nothing here chases a publisher's gaps)
    seq_lease: int = 64
    loss_recovery: bool = True  # off: no log, no NACKs (a lost ScribeData is lost below)
    topic_log_limit: int = 256  # messages kept per topic to resend; also the largest gap repaired
    nack_delay: float = 0.05  # a gap waits this long (reordering) before its first NACK
    nack_interval: float = 0.3  # between NACK rounds for one topic while a gap lasts
    # NACK rounds without progress before the gap is given up: a gap a forwarder fetches for
    # its child from its own parent needs four lossy hops a round (0.41 at 20% loss), so 30
    # rounds leave about 1e-7 of them unrepaired (12 left 2e-3)
    nack_retries: int = 30
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
                     "sync_timeout", "backlog_poll"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be > 0")
        for name in ("max_depth", "max_topics", "max_children", "max_pending", "max_ordering",
                     "max_backlog",
                     "seen_limit", "seq_lease",
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
class TopicState:
    """One topic at this node: its place in the tree and in the root's stream."""

    role: TreeRole
    subscribed: bool = False
    parent: NodeId | None = None
    parent_heard: float = 0.0
    depth: int = 0
    nonce: int = 0  # of our JOIN in flight: retries of older ones are stale
    children: dict[NodeId, float] = dataclasses.field(default_factory=dict)  # -> last heard
    not_root_ticks: int = 0
    cycle_at: float = -1.0  # when we last broke a cycle (a second one soon after waits a tick)
    # messages we took as a root Chord no longer names, to publish in the tree we join: by id
    handover: dict[str, ScribeData] = dataclasses.field(default_factory=dict)
    handover_ticks: int = 0
    # publishes we passed up to a parent that turned out unreachable: passed on again, once,
    # when we are back in the tree (the publisher's timeout covers any loss after that)
    held_up: dict[str, Publish] = dataclasses.field(default_factory=dict)
    # the last catch-up request (ScribeSince) we passed up: its hops, and when
    since_up: tuple[int, float] = (-1, -1.0)
    beacon: int = 0  # the root's tick count, as last heard (a root: its own)
    beacon_at: float = 0.0  # when it last grew (or we took our parent)
    # loss recovery: positions in the root's stream
    epoch: int = 0  # the stream we follow (0: none yet; a root: its own)
    high: int = 0  # the highest position known to exist (the root: the last one stamped)
    done: int = 0  # every position up to here is had, or not owed, or given up
    got: set[int] = dataclasses.field(default_factory=set)  # positions above ``done`` we have
    # pos -> message, in position order (``_log`` keeps it so)
    log: dict[int, ScribeData] = dataclasses.field(default_factory=dict)
    log_at: dict[int, float] = dataclasses.field(default_factory=dict)  # pos -> when it came
    subscribed_at: float | None = None  # a new subscriber, until it caught up
    synced_at: float = 0.0  # when we started following our stream
    catch_up: int = 0  # ScribeSince requests still to send (one per tick: loss)
    parent_high: int = 0  # the highest position our current parent announced
    parent_low: int = 0  # the lowest our current parent said it can get (0: not said)
    asked_up: dict[int, float] = dataclasses.field(default_factory=dict)  # for children: when
    nack_rounds: int = 0  # NACK rounds since the last progress
    nack_timer: TimerHandle | None = None
    # a root: the orderer's position just before this stream's first message (None: no message
    # numbered in it yet); stream position = decided position - order_base
    order_base: int | None = None
    # with a replicated orderer (positions are the decided ones, the same in every stream):
    # the last position delivered here, and what waits for the positions before it
    delivered_pos: int = 0
    ready: dict[int, ScribeData] = dataclasses.field(default_factory=dict)
    # a new subscriber delivers nothing before this (its catch-up comes first, in order)
    hold_until: float = 0.0

    @property
    def synced(self) -> bool:
        """We know our stream and where it starts for us (we are root, or a parent told us)."""
        return self.epoch != 0

    def view(self) -> tuple[Any, ...]:
        """Every field but the timer handle, for snapshots."""
        return (self.role, self.subscribed, self.parent, self.parent_heard, self.depth,
                self.nonce, tuple(self.children.items()), self.not_root_ticks,
                tuple(self.handover), self.handover_ticks, tuple(self.held_up), self.beacon,
                self.beacon_at,
                tuple(self.log_at.items()), self.subscribed_at, self.synced_at, self.catch_up,
                self.epoch,
                self.high, self.done, tuple(sorted(self.got)), tuple(self.log.items()),
                self.parent_high, self.parent_low, tuple(self.asked_up.items()),
                self.nack_rounds, self.nack_timer is not None, self.order_base,
                self.delivered_pos, tuple(self.ready), self.hold_until)

    def resend_low(self) -> int:
        """The lowest position we can resend, will have, or can ask our parent for (0: we
        have no stream)."""
        if not self.synced:
            return 0
        low = self.high + 1
        if self.log:
            low = min(low, next(iter(self.log)))  # the log is in position order
        if self.done < self.high:
            low = min(low, self.done + 1)
        if self.role is TreeRole.MEMBER:
            # what our parent can get, once it said so; until then, anything might be above
            low = min(low, self.parent_low or 1)
        return low


@dataclasses.dataclass(frozen=True, slots=True)
class PublishResult:
    """How a publish ended for its publisher: ``accepted`` by the topic's root (its orderer
    took it, so it goes down the tree), or not, and why. ``definite``: surely not taken (a
    refusal, or never sent); False: it may still have been (no answer came: the root may
    have taken it and its acknowledgement was lost)."""

    msg: str
    topic: str
    accepted: bool
    reason: str = ""
    definite: bool = True


PublishDoneFn = Callable[[PublishResult], None]


@dataclasses.dataclass(slots=True)
class PendingPublish:
    """A publish of ours awaiting the root's acknowledgement."""

    topic: str
    seq: int
    payload: Any
    tries: int = 0
    redirects: int = 0  # answers naming another node (not lost tries: counted apart)
    timer: TimerHandle | None = None
    sent_to: NodeId | None = None  # the root we sent it to last (None: a lookup is out)
    on_done: PublishDoneFn | None = None  # told once how it ended


class ScribeBase:
    """The state of Scribe on one node; the protocol is in the subclasses (``stream``, ``tree``,
    ``node.Scribe``)."""

    def __init__(
        self,
        env: Env,
        chord: ChordHost,
        *,
        config: ScribeConfig | None = None,
        orderer: Orderer | None = None,
        on_deliver: DeliverFn | None = None,
    ) -> None:
        if orderer is not None and not isinstance(orderer, Orderer):
            raise TypeError(f"orderer must be an Orderer, got {orderer!r}")
        self.env = env
        self.chord = chord
        self.config = config if config is not None else ScribeConfig()
        # a root hands each publish to it and takes it only once accepted (None: a fresh
        # ImmediateOrderer, which accepts at once; its counters are this node's own)
        self.orderer: Orderer = orderer if orderer is not None else ImmediateOrderer()
        # a replicated orderer's positions are the same at every root the topic may have:
        # streams number messages at them, subscribers deliver in their order
        self._shared = isinstance(self.orderer, ReplicatedOrderer)
        self.on_deliver = on_deliver
        self.delivered = 0
        self._topics: dict[str, TopicState] = {}
        self._seen: dict[str, None] = {}
        self._pending: dict[int, PendingPublish] = {}  # seq -> publish awaiting its ack
        self._ordering: dict[str, None] = {}  # ids of publishes our orderer has not decided
        # publishes we take as a root once our children's links drain, oldest first
        self._held: collections.deque[tuple[NodeId, Publish]] = collections.deque()
        self._held_timer: TimerHandle | None = None
        self._roots: dict[str, tuple[NodeId, float]] = {}  # topic -> (root, when learnt)
        # nodes the runtime could not reach, until we hear from them again (bounded)
        self._unreachable: dict[NodeId, None] = {}
        # the last publishes we passed up a tree: id -> (the parent, the publish as sent, when)
        self._passed_up: dict[str, tuple[NodeId, Publish, float]] = {}
        self._nonce = env.rng.getrandbits(32)
        self._heartbeat_timer: TimerHandle | None = None
        self._stopped = False
        self._sequence = DurableSequence(env.store if self.config.durable else None, STATE_TABLE,
                                         incarnation=env.incarnation,
                                         lease=self.config.seq_lease)

    def may_root(self, topic: str) -> bool:
        """Whether a tree of ``topic`` may be rooted here: always, unless the topic's order is
        replicated and this node is no member of its group (its stream would have none of the
        decided log, and subscribers would give up what it lacks)."""
        orderer = self.orderer
        return not isinstance(orderer, ReplicatedOrderer) or orderer.takes(topic)

    def _drop(self, src: NodeId, msg: Message, reason: str) -> None:
        mid, origin, key, seq = msg.trace_ids()
        self.env.trace("drop", layer=LAYER, peer=src, msg=mid, origin=origin, key=key, seq=seq,
                       reason=reason, type=msg.TYPE)
