"""Scribe as a node's process: subscribe, unsubscribe and publish through the topic's root, with
the root's ``order`` step; it builds on the tree (``tree``) and its streams (``stream``).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

from ....core.env import Env
from ....core.errors import StateError
from ....core.ids import NodeId
from ....core.messages import Message
from ...membership.chord import ChordHost
from .base import LAYER, DeliverFn, PendingPublish, ScribeConfig, TopicState, TreeRole
from .messages import (
    MAX_POSITION,
    Heartbeat,
    Publish,
    PublishAck,
    ScribeData,
    ScribeLeave,
    ScribeMessage,
    ScribeNack,
    ScribeSince,
    check_topic,
    message_id,
)
from .tree import TreeMembership

__all__ = ["Scribe"]


class Scribe(TreeMembership):
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
        super().__init__(env, chord, config=config, on_deliver=on_deliver)
        chord.on_forward = self._on_forward
        chord.on_deliver = self._on_route_delivered
        chord.on_root_found = self._on_root_found
        chord.on_root_failed = self._on_root_failed

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
        state = self._topics[topic] = TopicState(TreeRole.JOINING, subscribed=True,
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
        mid = message_id(env.node, seq)
        env.trace("publish", layer=LAYER, msg=mid, origin=env.node, seq=seq, key=topic)
        if len(self._pending) >= self.config.max_pending:
            env.trace("drop", layer=LAYER, msg=mid, origin=env.node, seq=seq, key=topic,
                      reason="pending_full")
            return mid
        pending = self._pending[seq] = PendingPublish(topic, seq, payload)
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
        mid = message_id(origin, seq)
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

    # -- publishing ----------------------------------------------------------------------------

    def _send_publish(self, pending: PendingPublish) -> None:
        env = self.env
        pending.timer = env.set_timer(self.config.publish_timeout,
                                      functools.partial(self._publish_timed_out, pending.seq))
        cached = self._roots.get(pending.topic)
        if cached is not None and env.now() - cached[1] <= self.config.root_cache_ttl:
            self._to_root(pending, cached[0])
        elif not self.chord.find_root(pending.topic, pending.seq):
            pass  # not on the ring yet: the timeout retries

    def _to_root(self, pending: PendingPublish, root: NodeId) -> None:
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
            self.env.trace("drop", layer=LAYER, msg=message_id(self.env.node, seq),
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
            state = self._topics[topic] = TopicState(TreeRole.ROOT)
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
        if message_id(msg.origin, msg.seq) in self._seen:
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
