"""Scribe's loss recovery: the root numbers a topic's messages in a stream of its own; every tree
node keeps a bounded log by position, NACKs gaps to its parent and catches up when it is new.

The root stamps each message with its stream (``epoch``) and position; a node delivers what is
new, logs it and sends it to its children; heartbeats carry the parent's stream position
(``_down_entry``), so tail loss shows; gaps are NACKed after ``nack_delay`` and again every
``nack_interval``; a parent resends from its log, or asks its own parent for what it never
had; a new subscriber asks for what reached its parent since it subscribed (``ScribeSince``).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

from ....core.ids import NodeId
from ...ordering.orderer import ReplicatedOrderer
from .base import LAYER, ScribeBase, TopicState, TreeRole
from .messages import (
    MAX_CATCH_UP_AGE,
    MAX_DEPTH_WIRE,
    MAX_EPOCH,
    MAX_POSITION,
    Heartbeat,
    ScribeData,
    ScribeLeave,
    ScribeNack,
    ScribeSince,
    message_id,
)

__all__ = ["StreamRepair"]


class StreamRepair(ScribeBase):
    """The numbered streams, the per-topic logs and their repair."""

    # -- streams -----------------------------------------------------------------------------------

    def _new_stream(self, topic: str, state: TopicState) -> None:
        """We are the root now: number the topic's messages in a stream of our own."""
        epoch = self.env.rng.randint(1, MAX_EPOCH)
        if epoch == state.epoch:
            epoch = epoch % MAX_EPOCH + 1
        self._switch_stream(topic, state, epoch)  # a root has everything of its own stream
        if self._shared:
            self._start_from_history(topic, state)

    def _start_from_history(self, topic: str, state: TopicState) -> None:
        """A new root with a replicated orderer: its stream holds what the group decided
        before (the last ``topic_log_limit``), so the tree fetches what an old root took and
        did not pass down; what comes next is numbered from there."""
        assert isinstance(self.orderer, ReplicatedOrderer)
        state.order_base = 0
        for pos, item in self.orderer.history(topic):
            data = ScribeData(topic=topic, origin=item.origin, seq=item.seq,
                              payload=item.payload, epoch=state.epoch, pos=pos)
            self._log(state, data)
            self._hold(topic, state, data)
            state.high = state.done = max(state.high, pos)
        self._deliver_ready(topic, state)

    def _switch_stream(self, topic: str, state: TopicState, epoch: int) -> None:
        """Follow (or number, as root) stream ``epoch`` from its start, forgetting the old."""
        self.env.trace("stream", layer=LAYER, key=topic, seq=epoch, old=state.epoch)
        self._cancel_nack(state)
        state.epoch = epoch
        # with a replicated orderer positions go on across streams: fetch what follows our
        # last delivery (a forwarder, which delivers nothing, fetches the whole stream)
        state.high = state.done = state.delivered_pos if self._shared else 0
        state.order_base = None  # a root's next decided message is this stream's first
        state.got.clear()
        state.log.clear()
        state.log_at.clear()
        state.parent_high = state.parent_low = 0
        state.asked_up.clear()
        state.beacon = 0
        state.synced_at = self.env.now()
        state.subscribed_at = None  # the whole stream is fetched: no catch-up by age
        state.catch_up = 0

    def _down_entry(self, topic: str, state: TopicState) -> tuple[str, int, int, int, int, int]:
        """What a heartbeat tells our children about ``topic`` (see ``Heartbeat.down``)."""
        depth = min(state.depth, MAX_DEPTH_WIRE)
        if not state.synced:
            return (topic, depth, 0, 0, 0, 0)
        return (topic, depth, state.epoch, min(state.high, MAX_POSITION), state.resend_low(),
                min(state.beacon, MAX_POSITION))

    # -- catch-up for new subscribers --------------------------------------------------------------

    def _ask_since(self, topic: str, state: TopicState) -> None:
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

    def _child_request(self, src: NodeId, msg: ScribeNack | ScribeSince) -> TopicState | None:
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
            # we joined after that: our parent may have more, which passes through us; not a
            # request that came round a cycle of the tree (more hops than the one we passed up
            # just now): with duplicated datagrams every copy would go round until max_depth,
            # multiplying at every hop (as publishes did: ``_on_publish``)
            now = self.env.now()
            last_hops, last_at = state.since_up
            if msg.hops > last_hops and now - last_at < self.config.heartbeat_interval / 2:
                self._drop(src, msg, "came_round")
                return
            state.since_up = (msg.hops, now)
            self.env.send(state.parent, dataclasses.replace(msg, hops=msg.hops + 1))

    # -- dissemination -----------------------------------------------------------------------------

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
        mid = message_id(msg.origin, msg.seq)
        state.handover.pop(mid, None)  # the tree has it now
        if mid in self._seen:
            if self._shared and state.ready:
                self._hold_at_first(state, msg)
            self._note_position(msg.topic, state, msg.pos)
            # a repair we fetched for a child, or (replicated order) a publish decided at two
            # positions, both of which are positions of the stream: pass it on
            fresh = msg.repair or (self._shared and msg.pos > state.delivered_pos)
            if fresh and msg.pos not in state.log and self.config.loss_recovery:
                self._log(state, msg)  # we fetched it for a child that lacks it: pass it on
                for child in state.children:
                    self.env.send(child, msg)
                return
            self._drop(src, msg, "duplicate")
            return
        self._take(msg.topic, state, msg)

    def _take(self, topic: str, state: TopicState, data: ScribeData) -> None:
        """A message new here: deliver it (if subscribed), log it, send it to our children."""
        if self._shared:
            self._hold(topic, state, data)  # delivered once every position before it is
        else:
            self._accept(topic, message_id(data.origin, data.seq), data.origin, data.seq,
                         data.payload)
        self._note_position(topic, state, data.pos)
        if self.config.loss_recovery and data.pos not in state.log:
            self._log(state, data)
        for child in state.children:
            self.env.send(child, data)

    def _log(self, state: TopicState, data: ScribeData) -> None:
        """Keep ``data`` in the topic's bounded log, which stays in position order (the oldest
        first), so the position to forget is the first one, not a search per message."""
        log = state.log
        pos = data.pos
        in_order = not log or pos > next(reversed(log))
        log[pos] = data
        state.log_at[pos] = self.env.now()
        if not in_order:  # a repair of an older position (rare): sort the log again
            state.log = log = dict(sorted(log.items()))
            state.log_at = {p: state.log_at[p] for p in log if p in state.log_at}
        if len(log) > self.config.topic_log_limit:
            oldest = next(iter(log))
            del log[oldest]
            state.log_at.pop(oldest, None)

    def _hold(self, topic: str, state: TopicState, data: ScribeData) -> None:
        """Replicated order: keep ``data`` until the positions before it are had or given up."""
        mid = message_id(data.origin, data.seq)
        if mid in self._seen:
            return
        self._accept(topic, mid, data.origin, data.seq, data.payload)  # seen, not delivered yet
        if not state.subscribed or data.pos <= state.delivered_pos:
            return
        state.ready[data.pos] = data
        if len(state.ready) > 2 * self.config.topic_log_limit:
            state.hold_until = 0.0  # the catch-up ends here: what waits must not grow more
            # a gap that outlived its repair: give it up rather than hold without bound
            self._give_up(topic, state, min(state.ready) - 1, "ordered_gap_too_large")

    def _hold_at_first(self, state: TopicState, data: ScribeData) -> None:
        """Replicated order: a publish decided twice (a retry proposed again) is delivered at
        its first position, wherever its copies arrive first."""
        for pos, held in state.ready.items():
            if held.origin == data.origin and held.seq == data.seq:
                if data.pos < pos and data.pos > state.delivered_pos:
                    del state.ready[pos]
                    state.ready[data.pos] = data
                return

    def _deliver_ready(self, topic: str, state: TopicState) -> None:
        """Deliver what waits, in position order, up to the last position had or given up
        (a new subscriber: once its catch-up is over)."""
        if state.hold_until and self.env.now() < state.hold_until:
            return  # ``_tick`` comes back
        state.hold_until = 0.0
        ready = state.ready
        while ready:
            pos = min(ready)
            if pos > state.done:
                return
            data = ready.pop(pos)
            if pos > state.delivered_pos:
                state.delivered_pos = pos
                self._accept(topic, message_id(data.origin, data.seq), data.origin, data.seq,
                             data.payload, position=pos)

    def _accept(self, topic: str, mid: str, origin: NodeId, seq: int, payload: Any, *,
                position: int | None = None) -> None:
        seen = self._seen
        seen[mid] = None
        if len(seen) > self.config.seen_limit:
            del seen[next(iter(seen))]
        state = self._topics.get(topic)
        if state is None or not state.subscribed:
            return
        if self._shared and position is None:
            return  # seen; delivered by ``_deliver_ready`` in the decided order, or not owed
        self.delivered += 1
        if position is not None:
            # replicated order: ``seq`` is the decided position, ``pseq`` the publisher's
            self.env.trace("deliver", layer=LAYER, msg=mid, origin=origin, seq=position,
                           key=topic, pseq=seq)
        else:
            self.env.trace("deliver", layer=LAYER, msg=mid, origin=origin, seq=seq, key=topic)
        if self.on_deliver is not None:
            self.on_deliver(topic, mid, origin, payload)

    # -- loss recovery -----------------------------------------------------------------------------

    def _follow_stream(self, topic: str, state: TopicState, epoch: int, start: int) -> None:
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
                if self._shared:
                    # replicated order: what its catch-up fetches lies before what arrives
                    # live; hold deliveries until the last catch-up request was answered
                    state.hold_until = self.env.now() + self.config.heartbeat_interval * (
                        self.config.catch_up_requests + 1)
                self._ask_since(topic, state)
        else:
            self._switch_stream(topic, state, epoch)  # the tree moved under a new root
        state.beacon = 0  # the new stream's root counts on its own
        self._tell_children(topic, state)  # they follow without waiting for a tick

    def _note_position(self, topic: str, state: TopicState, pos: int) -> None:
        """We have the message at ``pos``."""
        if pos > state.high:
            state.high = pos
        if pos > state.done:
            state.got.add(pos)
            self._advance(state)
        if state.ready:
            self._deliver_ready(topic, state)
        self._gap_changed(topic, state)

    def _parent_position(self, topic: str, state: TopicState, epoch: int, high: int,
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

    def _tell_children(self, topic: str, state: TopicState) -> None:
        entry = self._down_entry(topic, state)
        for child in state.children:
            self.env.send(child, Heartbeat(down=(entry,)))

    def _advance(self, state: TopicState) -> None:
        got = state.got
        start = state.done
        while state.done + 1 in got:
            state.done += 1
            got.discard(state.done)
        if state.done > start:
            state.nack_rounds = 0

    def _give_up(self, topic: str, state: TopicState, upto: int, reason: str) -> None:
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
        if state.ready:
            self._deliver_ready(topic, state)

    def _gap_changed(self, topic: str, state: TopicState) -> None:
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

    def _cancel_nack(self, state: TopicState) -> None:
        if state.nack_timer is not None:
            self.env.cancel(state.nack_timer)
            state.nack_timer = None
        state.nack_rounds = 0

    def _missing_ranges(self, state: TopicState, upto: int) -> list[tuple[int, int]]:
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

    def _nack_due(self, topic: str, state: TopicState) -> None:
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
            self.env.trace("resend", layer=LAYER, peer=src, msg=message_id(data.origin, data.seq),
                           origin=data.origin, seq=data.seq, key=msg.topic, pos=pos)
        if upward and state.role is TreeRole.MEMBER and state.parent is not None:
            self._ask_up(msg.topic, state, upward, now)

    def _ask_up(self, topic: str, state: TopicState, positions: list[int], now: float) -> None:
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
