"""Scribe's tree membership: JOINs routed through Chord make forwarders and parents, LEAVEs prune,
heartbeats between tree neighbours repair the tree when a parent fails or a cycle forms.
"""

from __future__ import annotations

from typing import Any

from ....core.ids import NodeId
from .base import JOIN_TAG, LAYER, TopicState, TreeRole
from .messages import (
    MAX_TOPICS_PER_HEARTBEAT,
    Heartbeat,
    Publish,
    ScribeLeave,
    message_id,
)
from .stream import StreamRepair

__all__ = ["TreeMembership"]


class TreeMembership(StreamRepair):
    """Building, pruning and repairing one tree per topic (its streams: ``StreamRepair``)."""

    # -- tree building -----------------------------------------------------------------------------

    def _join(self, topic: str, state: TopicState) -> None:
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

    def _rejoin(self, topic: str, state: TopicState, reason: str, *, at_once: bool = True) -> None:
        """Leave our parent and join again: at once, or (``at_once`` False) at the next tick,
        when Chord may have settled the routes that made a cycle."""
        old = state.parent
        self.env.trace("repair", layer=LAYER, key=topic, peer=old, reason=reason)
        if state.role is TreeRole.ROOT and state.log:
            # we were a root Chord no longer names: what we took may never have reached the
            # real tree (Chord named us root while it held another); hand it to that tree's
            # root once we are in it, until it comes back down to us
            handover = state.handover
            for data in state.log.values():
                handover[message_id(data.origin, data.seq)] = data
            while len(handover) > self.config.topic_log_limit:
                del handover[next(iter(handover))]
            state.handover_ticks = 0
        if old is not None:
            self.env.send(old, ScribeLeave(topic=topic))
        if at_once:
            self._join(topic, state)
        else:  # ``_tick`` joins what is JOINING
            state.role = TreeRole.JOINING
            state.parent = None

    def _hand_over(self, topic: str, state: TopicState) -> None:
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
        if not self.may_root(key):
            # no member of the topic's replica group (a spare is about to take the dead
            # owner's place): no tree here; the joiner's parent timeout makes it join again
            self.env.trace("drop", layer=LAYER, key=key, peer=prev, reason="not_a_replica")
            return
        if state is None:
            if len(self._topics) >= self.config.max_topics:
                self.env.trace("drop", layer=LAYER, key=key, reason="too_many_topics")
                return
            state = self._topics[key] = TopicState(TreeRole.JOINING)
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

    def _adopt(self, topic: str, child: NodeId) -> None:
        """``child`` joins through us: take it, and join the tree ourselves if we are not in."""
        state = self._topics.get(topic)
        if state is None:
            if len(self._topics) >= self.config.max_topics:
                self.env.trace("drop", layer=LAYER, key=topic, peer=child,
                               reason="too_many_topics")
                return
            state = self._topics[topic] = TopicState(TreeRole.JOINING)
            self._add_child(topic, state, child)
            self._join(topic, state)
            return
        if child == state.parent:
            # our parent joins through us: the ring was inconsistent; break the loop. Join
            # again at once, unless we broke one within a heartbeat: then at the next tick,
            # since two nodes whose routes point at each other would make the cycle again at
            # network speed until Chord settles
            now = self.env.now()
            again = state.cycle_at >= 0 and now - state.cycle_at < self.config.heartbeat_interval
            state.cycle_at = now
            self._add_child(topic, state, child)
            self._rejoin(topic, state, "cycle", at_once=not again)
            return
        self._add_child(topic, state, child)

    def _add_child(self, topic: str, state: TopicState, child: NodeId) -> None:
        if child not in state.children and len(state.children) >= self.config.max_children:
            self.env.trace("drop", layer=LAYER, key=topic, peer=child, reason="too_many_children")
            return
        state.children[child] = self.env.now()

    def _maybe_prune(self, topic: str, state: TopicState) -> None:
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

    # -- heartbeats and repair ---------------------------------------------------------------------

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
                    if state.hold_until and state.ready:
                        self._deliver_ready(topic, state)  # once its catch-up is over
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
