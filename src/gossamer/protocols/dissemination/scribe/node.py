"""Scribe as a node's process: subscribe, unsubscribe and publish through the topic's root, which
takes a publish once its orderer accepted it; it builds on the tree (``tree``) and its streams
(``stream``).
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
from ...ordering.orderer import Decision, Orderer, Redirected, Refused, ReplicatedOrderer
from .base import (
    LAYER,
    DeliverFn,
    PendingPublish,
    PublishDoneFn,
    PublishResult,
    ScribeConfig,
    TopicState,
    TreeRole,
)
from .messages import (
    MAX_POSITION,
    Heartbeat,
    Publish,
    PublishAck,
    PublishRedirect,
    PublishRefused,
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

REDIRECTS_PER_TRY = 4  # a publish follows at most this many redirects per try it may make


class Scribe(TreeMembership):
    """Scribe trees over a Chord host. It is the node's process: it starts Chord and passes it
    the messages that are not Scribe's.

    ``on_deliver(topic, msg_id, origin, payload)`` is called at subscribed nodes only.
    ``orderer``: where this node, as a topic's root, orders the publishes it gets (default: a
    fresh ``ImmediateOrderer``, which accepts each at once); a publish is numbered at the
    position it decided, acknowledged and sent down the tree only once it accepted it.
    """

    def __init__(
        self,
        env: Env,
        chord: ChordHost,
        *,
        config: ScribeConfig | None = None,
        orderer: Orderer | None = None,
        on_deliver: DeliverFn | None = None,
    ) -> None:
        super().__init__(env, chord, config=config, orderer=orderer, on_deliver=on_deliver)
        chord.on_forward = self._on_forward
        chord.on_deliver = self._on_route_delivered
        chord.on_root_found = self._on_root_found
        chord.on_root_failed = self._on_root_failed
        if isinstance(self.orderer, ReplicatedOrderer):
            self.orderer.on_ordered = self._on_ordered

    # -- Process -------------------------------------------------------------------------------

    def start(self) -> None:
        self.chord.start()
        interval = self.config.heartbeat_interval
        self._heartbeat_timer = self.env.set_timer(self.env.rng.uniform(0, interval), self._tick)

    def stop(self) -> None:
        self._stopped = True
        if self._heartbeat_timer is not None:
            self.env.cancel(self._heartbeat_timer)
        stopped, self._pending = self._pending, {}
        for pending in stopped.values():
            if pending.timer is not None:
                self.env.cancel(pending.timer)
            self._done(pending, False, "the node stopped before the topic's root answered",
                       definite=False)
        self._ordering.clear()  # what the orderer decides from now on is ignored
        self._held.clear()  # not acknowledged: their publishers retry elsewhere
        if self._held_timer is not None:
            self.env.cancel(self._held_timer)
            self._held_timer = None
        for topic, state in self._topics.items():
            self._cancel_nack(state)
            if state.parent is not None:
                self.env.send(state.parent, ScribeLeave(topic=topic))
        self._topics.clear()
        self.chord.stop()

    def on_unreachable(self, node: NodeId) -> None:
        """The runtime could not deliver to ``node`` (refused or reset: it is down). Chord
        routes around it at once; a publish sent to it as a root is looked up afresh now,
        and no publish goes to it until we hear from it again; a tree whose parent it was is
        joined again now, without waiting for the parent timeout."""
        if self._stopped or node == self.env.node:
            return
        self.chord.peer_down(node)
        unreachable = self._unreachable
        unreachable.pop(node, None)
        unreachable[node] = None
        if len(unreachable) > self.config.max_topics:
            del unreachable[next(iter(unreachable))]
        for topic in [t for t, (root, _) in self._roots.items() if root == node]:
            del self._roots[topic]
        for pending in list(self._pending.values()):
            if pending.sent_to == node:
                # not a try: it never reached a root, and it is sent to this node no more
                if pending.timer is not None:
                    self.env.cancel(pending.timer)
                self._send_publish(pending)
        lost = [mid for mid, (parent, _, _) in self._passed_up.items() if parent == node]
        for mid in lost:
            _, publish, _ = self._passed_up.pop(mid)
            state = self._topics.get(publish.topic)
            if state is not None:
                state.held_up[mid] = publish
                while len(state.held_up) > self.config.topic_log_limit:
                    del state.held_up[next(iter(state.held_up))]
        for topic, state in list(self._topics.items()):
            if state.role is TreeRole.MEMBER and state.parent == node:
                state.parent = None  # no LEAVE to the dead
                self._rejoin(topic, state, "parent_unreachable")
            elif node in state.children:
                del state.children[node]
                self.env.trace("drop_child", layer=LAYER, key=topic, peer=node)
                self._maybe_prune(topic, state)

    def _tick(self) -> None:
        super()._tick()
        for state in list(self._topics.values()):
            if state.held_up and (state.role is TreeRole.ROOT or state.parent is not None):
                self._pass_held_up(state)

    def _pass_held_up(self, state: TopicState) -> None:
        """Back in the tree: what our unreachable parent never got goes up (or is taken, if
        we are the root now), once."""
        held, state.held_up = state.held_up, {}
        for publish in held.values():
            self._on_publish(self.env.node, publish)

    def _known_down(self, node: NodeId) -> bool:
        """Whether a link or Chord already told us that ``node`` is down."""
        return node in self._unreachable or self.chord.suspects(node)

    def on_message(self, src: NodeId, msg: Message) -> None:
        if self._unreachable:
            self._unreachable.pop(src, None)  # it is up again
        if not isinstance(msg, ScribeMessage):
            self.chord.on_message(src, msg)
            return
        self.chord.heard_from(src)
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
        elif isinstance(msg, PublishRedirect):
            self._on_publish_redirect(src, msg)
        elif isinstance(msg, PublishRefused):
            self._on_publish_refused(src, msg)
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

    def publish(self, topic: str, payload: Any, *, on_done: PublishDoneFn | None = None) -> str:
        """Send ``payload`` to every subscriber of ``topic``; returns its message id.
        ``on_done`` hears once how it ended (``PublishResult``): accepted when the topic's
        root acknowledged it (its orderer took it), else refused or failed, with the reason;
        it may be called before this returns (this node is the root, or nothing was sent)."""
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
            if on_done is not None:
                on_done(PublishResult(mid, topic, False, "too many publishes in flight"))
            return mid
        pending = self._pending[seq] = PendingPublish(topic, seq, payload, on_done=on_done)
        self._send_publish(pending)
        return mid

    def _done(self, pending: PendingPublish, accepted: bool, reason: str = "", *,
              definite: bool = True) -> None:
        """``pending`` ended (it is out of ``_pending``): tell its publisher."""
        if pending.on_done is not None:
            pending.on_done(PublishResult(message_id(self.env.node, pending.seq),
                                          pending.topic, accepted, reason, definite))

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

    @property
    def undecided_publishes(self) -> int:
        """Publishes this node, as a topic's root, handed to its orderer and has no decision
        for yet."""
        return len(self._ordering)

    def snapshot(self) -> tuple[Any, ...]:
        """Everything a message may change, for tests that check a drop changed nothing."""
        return (tuple((t, s.view()) for t, s in self._topics.items()),
                tuple(self._seen), tuple(self._pending), tuple(self._roots.items()),
                tuple(self._ordering), self.delivered)

    # -- publishing ----------------------------------------------------------------------------

    def _send_publish(self, pending: PendingPublish) -> None:
        env = self.env
        pending.timer = env.set_timer(self.config.publish_timeout,
                                      functools.partial(self._publish_timed_out, pending.seq))
        pending.sent_to = None
        cached = self._roots.get(pending.topic)
        if cached is not None and self._known_down(cached[0]):
            del self._roots[pending.topic]  # a dead root: look the live one up at once
            cached = None
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
            pending.sent_to = root
            self.env.send(root, msg)

    def _remember_root(self, topic: str, root: NodeId) -> None:
        self._roots[topic] = (root, self.env.now())
        if len(self._roots) > self.config.max_topics:
            del self._roots[next(iter(self._roots))]

    def _on_root_found(self, key: str, root: NodeId, hops: int, ref: int) -> None:
        self._remember_root(key, root)
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
        self._try_again(pending)

    def _try_again(self, pending: PendingPublish) -> None:
        """Send a publish again (its timer is not running), unless it used up its tries."""
        seq = pending.seq
        if pending.tries >= self.config.publish_retries:
            del self._pending[seq]
            self.env.trace("drop", layer=LAYER, msg=message_id(self.env.node, seq),
                           origin=self.env.node, seq=seq, key=pending.topic,
                           reason="publish_failed")
            self._done(pending, False, f"no root acknowledged it after {pending.tries + 1} "
                                       "tries", definite=False)
            return
        pending.tries += 1
        self._send_publish(pending)

    def _on_publish(self, src: NodeId, msg: Publish, *, held: bool = False) -> None:
        """A publish for a topic we may be the root of (``held``: one we held, taken now)."""
        topic = msg.topic
        state = self._topics.get(topic)
        # Chord names us root of a topic whose replica group we are no member of (its owner
        # died and no spare is on the ring in its place yet): its group orders it (the answer
        # sends the publisher to a member), and no tree is rooted here (``may_root``)
        chord_root = self.chord.root_of(topic) is not None
        outsider = chord_root and not self.may_root(topic)
        if state is None and chord_root and not outsider:
            # Chord names us root but no tree is here yet (it is still under the old root, which
            # joins us within a few heartbeats): take the message into a stream of ours, so the
            # tree fetches it when it moves here
            if len(self._topics) >= self.config.max_topics:
                self._drop(src, msg, "too_many_topics")
                return
            state = self._topics[topic] = TopicState(TreeRole.ROOT)
            self.env.trace("root", layer=LAYER, key=topic)
            self._new_stream(topic, state)
        # a replica of the topic's owner that is not its root (a spare, seed 001 phase 3):
        # orders it here; the root sends it down the tree once decided
        orderer = self.orderer
        replica = outsider or ((state is None or state.role is not TreeRole.ROOT)
                               and isinstance(orderer, ReplicatedOrderer)
                               and orderer.takes(topic))
        if (not replica and state is not None and state.role is TreeRole.MEMBER
                and state.parent is not None):
            # the tree's root is above us (Chord's view and the tree disagree while the ring
            # settles): pass it up; the root acknowledges to the publisher
            if msg.hops >= self.config.max_depth:
                self._drop(src, msg, "publish_loop")  # a cycle: the publisher retries later
                return
            mid, now = message_id(msg.origin, msg.seq), self.env.now()
            passed = self._passed_up
            earlier = passed.get(mid)
            if (earlier is not None and msg.hops >= earlier[1].hops
                    and now - earlier[2] < self.config.publish_timeout):
                # it came round a cycle of the tree (more hops than when we passed it up):
                # once round is enough, or with duplicated datagrams every copy would go round
                # again until max_depth, the copies multiplying at every hop (VOPR pubsub seed
                # 46: millions of messages of 120 publishes). A retry (the publisher's, or a
                # false root's hand-over) comes by the same path with as many hops as before
                self._drop(src, msg, "came_round")
                return
            up = dataclasses.replace(msg, hops=msg.hops + 1)
            passed.pop(mid, None)
            passed[mid] = (state.parent, up, now)
            if len(passed) > self.config.max_pending:
                del passed[next(iter(passed))]
            self.env.send(state.parent, up)
            return
        if not replica and (state is None or state.role is not TreeRole.ROOT):
            self._drop(src, msg, "not_root")  # the publisher's timeout looks the root up again
            return
        mid = message_id(msg.origin, msg.seq)
        if mid in self._seen:  # a retry of one we took: its ack was lost
            self._answer(msg.origin, PublishAck(topic=topic, seq=msg.seq))
            return
        if mid in self._ordering:
            self._drop(src, msg, "being_ordered")  # a retry: the orderer's decision answers it
            return
        if state is not None and not replica and (
                (self._held and not held) or self._children_full(state)):
            # back-pressure down the tree: taken (and acknowledged) once our children's links
            # drain, in arrival order; meanwhile the publisher's pending counts it in flight
            if len(self._held) >= self.config.max_ordering:
                self._drop(src, msg, "held_full")  # the publisher's timeout tries again
                return
            if not self._held:
                env = self.env
                env.trace("overload", layer=LAYER, key=topic, reason="children_backlog")
            self._held.append((src, msg))
            if self._held_timer is None:
                self._held_timer = self.env.set_timer(self.config.backlog_poll,
                                                      self._release_held)
            return
        if len(self._ordering) >= self.config.max_ordering:
            self._drop(src, msg, "ordering_full")  # the publisher's timeout tries again
            return
        self._ordering[mid] = None
        self.orderer.propose(topic, msg, functools.partial(self._ordered, msg))

    def _children_full(self, state: TopicState) -> bool:
        """Whether the link to one of ``state``'s children holds ``max_backlog`` messages."""
        backlog, limit = self.env.backlog, self.config.max_backlog
        return any(backlog(child) >= limit for child in state.children)

    def _release_held(self) -> None:
        """Take the held publishes whose trees drained, oldest first, until one's has not."""
        self._held_timer = None
        held = self._held
        while held and not self._stopped:
            src, msg = held[0]
            state = self._topics.get(msg.topic)
            if state is not None and state.role is TreeRole.ROOT and self._children_full(state):
                self._held_timer = self.env.set_timer(self.config.backlog_poll,
                                                      self._release_held)
                return
            held.popleft()
            self._on_publish(src, msg, held=True)  # checked again: the tree may have moved
            if self._held_timer is not None:
                return  # it was held again (a full tree): the timer is armed once more

    def _ordered(self, msg: Publish, decision: Decision) -> None:
        """Our orderer decided a publish we proposed as the topic's root (now or later): only
        if it accepted it is it numbered, acknowledged and sent down the tree."""
        mid = message_id(msg.origin, msg.seq)
        if mid not in self._ordering:
            return  # we stopped since
        del self._ordering[mid]
        topic, origin, seq = msg.topic, msg.origin, msg.seq
        if isinstance(decision, Redirected):
            self._answer(origin, PublishRedirect(topic=topic, seq=seq, to=decision.leader))
            return
        if isinstance(decision, Refused):
            self._answer(origin, PublishRefused(topic=topic, seq=seq, reason=decision.reason))
            return
        if self._shared:
            # decided, so held by a majority of the topic's group: acknowledged; it goes down
            # the tree from whichever node is root (``_on_ordered``, ``_start_from_history``)
            self._answer(origin, PublishAck(topic=topic, seq=seq))
            return
        state = self._topics.get(topic)
        if state is None or state.role is not TreeRole.ROOT:
            # the tree moved away while it was being ordered: not taken, so not acknowledged;
            # the publisher's timeout finds the new root
            self._drop(origin, msg, "not_root_when_decided")
            return
        if mid in self._seen:
            self._answer(origin, PublishAck(topic=topic, seq=seq))
            return
        if not state.synced or state.high >= MAX_POSITION:
            self._new_stream(topic, state)
        if state.order_base is None:  # the stream's first message: it starts at position 1
            state.order_base = decision.position - 1
        pos = decision.position - state.order_base
        if not 1 <= pos <= MAX_POSITION:
            # decided before this stream started, answered after it (an orderer that broke
            # its order): not taken; the publisher's retry is ordered again
            self._drop(origin, msg, "decided_before_stream")
            return
        self._answer(origin, PublishAck(topic=topic, seq=seq))
        self._take(topic, state, ScribeData(topic=topic, origin=origin, seq=seq,
                                            payload=msg.payload, epoch=state.epoch, pos=pos))

    def _on_ordered(self, topic: str, position: int, item: Any) -> None:
        """A replicated orderer ordered ``item`` at ``position`` (whoever proposed it): as the
        topic's root, we number it there in our stream and send it down the tree."""
        state = self._topics.get(topic)
        if self._stopped or state is None or state.role is not TreeRole.ROOT or not state.synced:
            return  # kept in the orderer's history: a new root's stream starts with it
        if position <= state.high or position > MAX_POSITION:
            return
        self._take(topic, state, ScribeData(topic=topic, origin=item.origin, seq=item.seq,
                                            payload=item.payload, epoch=state.epoch,
                                            pos=position))

    def _answer(self, publisher: NodeId,
                answer: PublishAck | PublishRedirect | PublishRefused) -> None:
        """The root's answer to a publisher (handled here if that is us)."""
        if publisher != self.env.node:
            self.env.send(publisher, answer)
        elif isinstance(answer, PublishAck):
            self._on_publish_ack(publisher, answer)
        elif isinstance(answer, PublishRedirect):
            self._on_publish_redirect(publisher, answer)
        else:
            self._on_publish_refused(publisher, answer)

    def _answered(self, src: NodeId, msg: PublishAck | PublishRedirect | PublishRefused,
                  unexpected: str) -> PendingPublish | None:
        """The publish of ours that ``msg`` answers, its timer stopped (None: we have no such
        publish; ``msg`` is dropped as ``unexpected``)."""
        pending = self._pending.get(msg.seq)
        if pending is None or pending.topic != msg.topic:
            self._drop(src, msg, unexpected)
            return None
        if pending.timer is not None:
            self.env.cancel(pending.timer)
        return pending

    def _on_publish_ack(self, src: NodeId, msg: PublishAck) -> None:
        pending = self._answered(src, msg, "unexpected_ack")
        if pending is None:
            return
        del self._pending[msg.seq]
        if src != self.env.node:
            self._remember_root(msg.topic, src)
        if self._shared:  # the pipeline checks that no acknowledged publish is lost
            env = self.env
            env.trace("acked", layer=LAYER, msg=message_id(env.node, msg.seq), origin=env.node,
                      seq=msg.seq, key=msg.topic, peer=src)
        self._done(pending, True)

    def _on_publish_redirect(self, src: NodeId, msg: PublishRedirect) -> None:
        """The root's orderer names another node (its leader): publish there, as a retry."""
        pending = self._answered(src, msg, "unexpected_redirect")
        if pending is None:
            return
        env = self.env
        env.trace("publish_redirect", layer=LAYER, msg=message_id(env.node, msg.seq),
                  origin=env.node, seq=msg.seq, key=msg.topic, peer=msg.to, by=src)
        self._remember_root(msg.topic, msg.to)
        pending.redirects += 1
        if pending.redirects <= REDIRECTS_PER_TRY * (self.config.publish_retries + 1):
            # an answer, not a lost try: while a group replaces its dead owner a publisher
            # goes round its members, and those turns must not use up the tries that the
            # fail-over needs (bounded all the same: a redirect loop ends)
            self._send_publish(pending)
        else:
            self._try_again(pending)

    def _on_publish_refused(self, src: NodeId, msg: PublishRefused) -> None:
        """The root's orderer refused it: the publish ends here (it was not taken)."""
        pending = self._answered(src, msg, "unexpected_refusal")
        if pending is None:
            return
        del self._pending[msg.seq]
        env = self.env
        env.trace("publish_refused", layer=LAYER, msg=message_id(env.node, msg.seq),
                  origin=env.node, seq=msg.seq, key=msg.topic, peer=src, reason=msg.reason)
        self._done(pending, False, f"refused by the topic's root: {msg.reason}")
