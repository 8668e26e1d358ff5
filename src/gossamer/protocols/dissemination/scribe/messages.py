"""Scribe's messages: publishes and the root's answers (acknowledged once ordered, redirected,
refused), data down a topic's tree at a position of the root's stream, NACKs and catch-up
requests, leaves and heartbeats. Each validates itself.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ....core.ids import NodeId, check_node_id
from ....core.messages import Codec, Message, TraceIds, message
from ...ordering.orderer import check_reason

__all__ = [
    "MAX_CATCH_UP_AGE",
    "MAX_DEPTH_WIRE",
    "MAX_EPOCH",
    "MAX_NACK_SPAN",
    "MAX_POSITION",
    "MAX_TOPIC",
    "MAX_TOPICS_PER_HEARTBEAT",
    "Heartbeat",
    "Publish",
    "PublishAck",
    "PublishRedirect",
    "PublishRefused",
    "ScribeData",
    "ScribeLeave",
    "ScribeMessage",
    "ScribeNack",
    "ScribeSince",
    "check_topic",
    "message_id",
]

MAX_TOPIC = 256
MAX_TOPICS_PER_HEARTBEAT = 1024
MAX_DEPTH_WIRE = 1 << 16
MAX_POSITION = 1 << 53  # positions in a topic's stream (JSON carries them exactly)
MAX_EPOCH = (1 << 32) - 1  # stream names (0 on the wire: "no stream yet")
MAX_CATCH_UP_AGE = 86_400.0  # seconds a ScribeSince may look back
MAX_NACK_SPAN = 4096  # positions one NACK may name on the wire (ScribeConfig.nack_max_range: less)


def check_topic(topic: str) -> str:
    if not isinstance(topic, str) or not 1 <= len(topic) <= MAX_TOPIC:
        raise ValueError(f"a topic has 1-{MAX_TOPIC} characters")
    return topic


def message_id(origin: NodeId, seq: int) -> str:
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
        return (message_id(self.origin, self.seq), self.origin, self.topic, self.seq)


CODEC = Codec()
"""The codec of the scribe messages (``Codec.union`` joins it with a node's other layers)."""


@message("scribe.publish", codec=CODEC)
class Publish(_Published):
    """Publisher -> the topic's root: please order and disseminate this message. A tree member
    that gets it (Chord named it root before the tree moved to it) passes it up to its parent;
    ``hops`` counts those steps."""

    hops: int = dataclasses.field(default=0, kw_only=True)

    def __post_init__(self) -> None:
        _Published.__post_init__(self)
        if not 0 <= self.hops <= MAX_DEPTH_WIRE:
            raise ValueError(f"hops must be in [0, {MAX_DEPTH_WIRE}], got {self.hops}")


@dataclasses.dataclass(frozen=True, slots=True)
class _Answer(ScribeMessage):
    """The root's answer to the publisher of message ``seq`` on ``topic``."""

    topic: str
    seq: int

    def __post_init__(self) -> None:
        check_topic(self.topic)
        if self.seq < 1:
            raise ValueError(f"seq must be >= 1, got {self.seq}")


@message("scribe.publish_ack", codec=CODEC)
class PublishAck(_Answer):
    """Root -> publisher: your message is taken (the root's orderer accepted it; it is going
    down the tree)."""


@message("scribe.publish_redirect", codec=CODEC)
class PublishRedirect(_Answer):
    """Root -> publisher: my orderer says node ``to`` orders this topic (its leader); publish
    there. Nothing was taken."""

    to: str

    def __post_init__(self) -> None:
        _Answer.__post_init__(self)
        check_node_id(self.to)


@message("scribe.publish_refused", codec=CODEC)
class PublishRefused(_Answer):
    """Root -> publisher: my orderer refused your message, because ``reason``; it is not taken
    and will not be."""

    reason: str

    def __post_init__(self) -> None:
        _Answer.__post_init__(self)
        check_reason(self.reason)


@message("scribe.data", codec=CODEC)
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


@message("scribe.nack", codec=CODEC)
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


@message("scribe.since", codec=CODEC)
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


@message("scribe.leave", codec=CODEC)
class ScribeLeave(ScribeMessage):
    """Child -> parent (UNSUBSCRIBE): take me off this topic's children."""

    topic: str

    def __post_init__(self) -> None:
        check_topic(self.topic)


@message("scribe.heartbeat", codec=CODEC)
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
