"""Chord's per-node protocol: joining through a contact, stabilize/notify, fix_fingers,
successor lists, predecessor checks, self-lookups through other nodes (probes) and leaves.

It keeps each virtual node's tables (``ring.VNode``) right under churn; lookups it makes go
through ``routing``.
"""

from __future__ import annotations

from collections.abc import Callable

from ....core.env import put_json
from ....core.ids import NodeId
from .base import LAYER, STORE_TABLE, Rejected, Request, RequestKind
from .messages import (
    FindSuccessor,
    GetPredecessor,
    Leave,
    LookupPurpose,
    Notify,
    Nudge,
    Ping,
    Pong,
    PredecessorIs,
    SuccessorIs,
)
from .ring import ChordState, Peer, VNode, in_open
from .routing import HostRouting

__all__ = ["HostMaintenance"]


class HostMaintenance(HostRouting):
    """The ring maintenance of a Chord host."""

    def _request(self, ref: int, request: Request, timeout: float) -> None:
        self._requests[ref] = request
        request.timer = self.env.set_timer(timeout, lambda: self._request_timed_out(ref))

    # -- joining -------------------------------------------------------------------------

    def _create_ring(self) -> None:
        first = self._vnodes[0]
        self._activate(first, [], None)
        for vn in self._vnodes[1:]:
            self._join(vn, Peer(first.me.ident, first.me.node, 0))

    def _join(self, vn: VNode, contact: Peer | None = None) -> None:
        """Look our own identifier up through ``contact``, or through two of our contacts at
        once (the next ones in turn): the answer comes straight back, unacknowledged, so under
        loss one lost reply would cost a whole lookup timeout; the first answer joins us."""
        if contact is not None:
            contacts = [contact]
        elif not self.contacts:
            vn.state = ChordState.IDLE
            return
        else:
            count = min(2, len(self.contacts))
            contacts = [Peer(0, self.contacts[(self._contact_turn + k) % len(self.contacts)], 0)
                        for k in range(count)]
            self._contact_turn += count
        vn.state = ChordState.JOINING
        for peer in contacts:
            self._look_up_self(vn, peer, LookupPurpose.JOIN)

    def _retry_join(self, vn: VNode) -> None:
        def again() -> None:
            if vn.state is ChordState.JOINING:
                self._join(vn)

        self.env.set_timer(self.config.join_retry, again)

    def _activate(self, vn: VNode, successors: list[Peer], predecessor: Peer | None) -> None:
        vn.state = ChordState.ACTIVE
        self._set_successors(vn, successors)
        self._set_predecessor(vn, predecessor)
        # not "join": that event is the runtime's membership change, which the pipeline reads
        self.env.trace("activate", layer=LAYER, peer=vn.successor.node, vnode=vn.index,
                       id=format(vn.me.ident, "x"))
        if self.config.durable:
            put_json(self.env.store, STORE_TABLE, "member", True)
            self.env.store.commit()
        self._start_timers()
        if vn.successors:
            self._notify(vn)

    def _start_timers(self) -> None:
        if self._timers:
            return
        cfg, rng = self.config, self.env.rng
        # a random phase per node, so that a ring built at once does not tick in lockstep
        self._arm("stabilize", rng.uniform(0, cfg.stabilize_interval), cfg.stabilize_interval,
                  self._stabilize_all)
        self._arm("fix_fingers", rng.uniform(0, cfg.fix_fingers_interval),
                  cfg.fix_fingers_interval, self._fix_fingers_all)
        self._arm("check_predecessor", rng.uniform(0, cfg.check_predecessor_interval),
                  cfg.check_predecessor_interval, self._check_predecessors)
        self._arm("probe", rng.uniform(0, cfg.probe_interval), cfg.probe_interval,
                  self._probe)

    def _arm(self, name: str, first: float, every: float, tick: Callable[[], None]) -> None:
        def fire() -> None:
            self._timers[name] = self.env.set_timer(every, fire)
            tick()

        self._timers[name] = self.env.set_timer(first, fire)

    # -- periodic work ---------------------------------------------------------------------

    def _stabilize_all(self) -> None:
        for vn in self._active():
            self._stabilize(vn)

    def _stabilize(self, vn: VNode) -> None:
        if vn.stabilize_ref is not None:
            return  # the last round is still waiting for its answer
        if not vn.successors:
            if vn.predecessor is not None:  # someone joined behind me: it is also my successor
                self._set_successors(vn, [vn.predecessor])
                self._notify(vn)
            return
        succ = vn.successor
        ref = self._new_ref()
        vn.stabilize_ref = ref
        self._request(ref, Request(RequestKind.GET_PREDECESSOR, vn.index, succ.node),
                      self.config.request_timeout)
        self._send(succ.node, GetPredecessor(to=succ.vnode, ref=ref))

    def _notify(self, vn: VNode) -> None:
        succ = vn.successor
        if succ != vn.me:
            self._send(succ.node, Notify(to=succ.vnode, sender=vn.me.wire()))

    def _check_predecessors(self) -> None:
        for vn in self._active():
            pred = vn.predecessor
            if pred is None or vn.ping_ref is not None:
                continue
            ref = self._new_ref()
            vn.ping_ref = ref
            self._request(ref, Request(RequestKind.PING, vn.index, pred.node),
                          self.config.request_timeout)
            self._send(pred.node, Ping(to=pred.vnode, ref=ref))

    def _fix_fingers_all(self) -> None:
        for vn in self._active():
            if vn.finger_ref is None:
                self._fix_next_finger(vn)

    def _fix_next_finger(self, vn: VNode) -> None:
        """Look up the next finger that the successor list does not already give."""
        bits = self.config.bits
        i = vn.next_finger
        while i < bits and vn.covered_by_successors(i):
            i += 1
        if i >= bits or not vn.successors:
            vn.next_finger = 0
            return
        vn.next_finger = i
        start = (vn.me.ident + (1 << i)) % self._modulus
        ref = self._new_ref()
        request = Request(RequestKind.LOOKUP, vn.index, None)
        request.purpose = LookupPurpose.FINGER
        request.finger = i
        vn.finger_ref = ref
        self._request(ref, request, self.config.lookup_timeout)
        self._find_step(vn, FindSuccessor(to=vn.index, target=format(start, "x"),
                                          asker=vn.me.wire(), ref=ref,
                                          purpose=LookupPurpose.FINGER.value), 0)

    def _probe(self) -> None:
        """Look up my own identifier through another node and take a nearer successor if the
        answer names one. Through a peer evicted earlier, this is how two rings split by a
        partition find each other again; through a live peer, it undoes the crossed successor
        pointers that concurrent joins can leave (x -> y skipping z while z -> w skips y), which
        stabilize alone never repairs."""
        now, ttl = self.env.now(), self.config.departed_ttl
        for node in [n for n, (_, since) in self._departed.items() if now - since > ttl]:
            del self._departed[node]
        active = self._active()
        if not active or len(self._requests) >= self.config.max_pending:
            return
        rng = self.env.rng
        vn = rng.choice(active)
        _, known = vn.routing_table()
        if self._departed and (not known or rng.random() < 0.5):
            peer, _ = self._departed[rng.choice(list(self._departed))]
        elif known:
            peer = rng.choice(known)
        else:
            return
        self._look_up_self(vn, peer, LookupPurpose.PROBE)

    def _look_up_self(self, vn: VNode, peer: Peer, purpose: LookupPurpose) -> None:
        """Ask ``peer`` for the successor of ``vn``'s own id (to join, or to probe the ring)."""
        ref = self._new_ref()
        request = Request(RequestKind.LOOKUP, vn.index, None)
        request.purpose = purpose
        request.contact = peer
        self._request(ref, request, self.config.lookup_timeout)
        self._send(peer.node, FindSuccessor(
            to=peer.vnode, target=format(vn.me.ident, "x"), asker=vn.me.wire(), ref=ref,
            purpose=purpose.value))

    # -- timeouts --------------------------------------------------------------------------

    def _request_timed_out(self, ref: int) -> None:
        """A request armed by ``_request`` got no answer in time (FIND_ROOT requests time out
        in routing)."""
        request = self._requests.pop(ref, None)
        if request is None:
            return
        vn = self._vnodes[request.vnode]
        kind = request.kind
        if kind is RequestKind.GET_PREDECESSOR:
            vn.stabilize_ref = None
            assert request.peer is not None
            if not self._missed(request.peer):
                self._stabilize(vn)  # ask again at once: one lost message is no failure
        elif kind is RequestKind.PING:
            vn.ping_ref = None
            assert request.peer is not None
            self._missed(request.peer)
        elif request.purpose is LookupPurpose.JOIN:
            if vn.state is ChordState.JOINING and not any(
                    r.vnode == vn.index and r.purpose is LookupPurpose.JOIN
                    for r in self._requests.values()):
                self._retry_join(vn)  # once the last of a round's lookups timed out
        elif request.purpose is LookupPurpose.FINGER and vn.finger_ref == ref:
            vn.finger_ref = None
            vn.next_finger = request.finger + 1
        # a probe that times out changes nothing: a departed peer stays on the list

    # -- handlers --------------------------------------------------------------------------

    def _on_successor_is(self, src: NodeId, msg: SuccessorIs) -> None:
        request = self._answered(src, msg.ref, RequestKind.LOOKUP)
        responder = self._peer(msg.responder)
        if responder.node != src:
            raise Rejected("unexpected_reply", f"responder {responder.node} sent by {src}")
        successors = self._peers(msg.successors)
        hints = self._peers(msg.hints)
        vn = self._vnodes[request.vnode]
        purpose = request.purpose
        if purpose is LookupPurpose.JOIN and vn.state is not ChordState.JOINING:
            raise Rejected("unexpected_reply", "already joined")
        if purpose is not LookupPurpose.JOIN and vn.state is not ChordState.ACTIVE:
            raise Rejected("unexpected_reply", f"virtual node {vn.index} is {vn.state.value}")
        self._settle(msg.ref, request)
        if purpose is LookupPurpose.JOIN:
            self._joined(vn, responder, successors, hints)
        elif purpose is LookupPurpose.FINGER:
            self._finger_found(vn, msg.ref, request.finger, responder, successors)
        else:
            self._probe_found(vn, request, successors)

    def _joined(self, vn: VNode, responder: Peer, successors: list[Peer],
                hints: list[Peer]) -> None:
        others = [p for p in successors if p.ident != vn.me.ident]
        if not others:
            self._retry_join(vn)  # only my own former self answered: try again later
            return
        # the responder found me between itself and its successor: my predecessor, or a node
        # before it (then the first notify from a nearer one corrects it)
        self._activate(vn, others, responder if responder.ident != vn.me.ident else None)
        vn.seed_fingers([*hints, *others, responder])

    def _finger_found(self, vn: VNode, ref: int, first: int, responder: Peer,
                      successors: list[Peer]) -> None:
        """Set finger ``first`` and every later finger the answer decides too: a start in
        (responder, last successor] has the first listed successor at or after it."""
        if vn.finger_ref == ref:
            vn.finger_ref = None
        me = vn.me.ident
        head = successors[0]
        vn.fingers[first] = None if head.ident == me else head
        # the answer's peers in ring order from me, up to where the list comes round past me
        base = previous = vn.distance(responder.ident)
        listed: list[tuple[int, Peer]] = []
        for peer in successors:
            distance = vn.distance(peer.ident)
            if distance <= previous:
                break
            listed.append((distance, peer))
            previous = distance
        bits = self.config.bits
        i = first + 1
        while i < bits and listed and base < (1 << i) <= listed[-1][0]:
            start = 1 << i
            vn.fingers[i] = next(peer for distance, peer in listed if distance >= start)
            i += 1
        vn.table = None
        vn.next_finger = i if i < bits else 0
        if self.config.fix_all_fingers and vn.next_finger != 0:
            self._fix_next_finger(vn)

    def _probe_found(self, vn: VNode, request: Request, successors: list[Peer]) -> None:
        if request.contact is not None:
            self._departed.pop(request.contact.node, None)  # it answered: alive
        candidate = next((p for p in successors if p.ident != vn.me.ident), None)
        if candidate is None:
            return
        if not vn.successors or in_open(candidate.ident, vn.me.ident, vn.successor.ident):
            self._set_successors(vn, [candidate, *vn.successors])
            self._notify(vn)

    def _on_get_predecessor(self, src: NodeId, msg: GetPredecessor) -> None:
        vn = self._vnode_for(msg.to)
        pred = vn.predecessor
        self._send(src, PredecessorIs(ref=msg.ref, predecessor=pred.wire() if pred else None,
                                      successors=tuple(p.wire() for p in vn.successors)))

    def _on_predecessor_is(self, src: NodeId, msg: PredecessorIs) -> None:
        request = self._answered(src, msg.ref, RequestKind.GET_PREDECESSOR)
        pred = self._peer(msg.predecessor) if msg.predecessor is not None else None
        their_successors = self._peers(msg.successors)
        vn = self._vnodes[request.vnode]
        if vn.state is not ChordState.ACTIVE:
            raise Rejected("unexpected_reply", f"virtual node {vn.index} is {vn.state.value}")
        self._settle(msg.ref, request)
        vn.stabilize_ref = None
        self._departed.pop(src, None)
        if not vn.successors or vn.successor.node != src:
            return  # my successor changed while the question was out
        succ = vn.successor
        if pred is not None and in_open(pred.ident, vn.me.ident, succ.ident):
            self._set_successors(vn, [pred, succ, *their_successors])
            # a closer successor: ask it at once, so a run of nodes that joined into one gap
            # is walked at network speed rather than one stabilize interval per node
            self._stabilize(vn)
        else:
            self._set_successors(vn, [succ, *their_successors])
        self._notify(vn)

    def _on_notify(self, src: NodeId, msg: Notify) -> None:
        vn = self._vnode_for(msg.to)
        sender = self._peer(msg.sender)
        if sender.node != src:
            raise Rejected("spoofed", f"notify from {sender.node} sent by {src}")
        if sender.ident == vn.me.ident:
            raise Rejected("self_notify")
        if self._has_left(src):
            raise Rejected("left", f"{src} has left")
        pred = vn.predecessor
        if pred is None or in_open(sender.ident, pred.ident, vn.me.ident):
            self._set_predecessor(vn, sender)
            if pred is not None and pred != sender:
                self._nudge(vn, pred)  # the old predecessor has a nearer successor now
        elif sender != pred:
            self._nudge(vn, sender)  # it should point at my predecessor, not at me
        if not vn.successors:
            self._set_successors(vn, [sender])
            self._notify(vn)

    def _nudge(self, vn: VNode, peer: Peer) -> None:
        """Ask ``peer``, which has me as its successor, to stabilize now: a node that joined
        between us is then linked in within a round trip, not a stabilize interval."""
        self._send(peer.node, Nudge(to=peer.vnode, sender=vn.me.wire()))

    def _on_nudge(self, src: NodeId, msg: Nudge) -> None:
        vn = self._vnode_for(msg.to)
        sender = self._peer(msg.sender)
        if sender.node != src:
            raise Rejected("spoofed", f"nudge from {sender.node} sent by {src}")
        if vn.successor == sender:
            self._stabilize(vn)

    def _on_ping(self, src: NodeId, msg: Ping) -> None:
        self._vnode_for(msg.to)
        self._send(src, Pong(ref=msg.ref))

    def _on_pong(self, src: NodeId, msg: Pong) -> None:
        request = self._answered(src, msg.ref, RequestKind.PING)
        self._settle(msg.ref, request)
        self._vnodes[request.vnode].ping_ref = None

    def _on_leave(self, src: NodeId, msg: Leave) -> None:
        vn = self._vnode_for(msg.to)
        sender = self._peer(msg.sender)
        if sender.node != src:
            raise Rejected("spoofed", f"leave of {sender.node} sent by {src}")
        pred = self._peer(msg.predecessor) if msg.predecessor is not None else None
        successors = self._peers(msg.successors)
        self._left[src] = self.env.now()
        while len(self._left) > self.config.departed_limit:
            del self._left[next(iter(self._left))]
        for other in self._active():
            staying = [p for p in [*(successors if other is vn else ()), *other.successors]
                       if not self._has_left(p.node)]
            if len(staying) != len(other.successors) or other is vn:
                had = other.successor
                self._set_successors(other, staying)
                if other.successors and other.successor != had:
                    self._notify(other)
            if other.predecessor is not None and other.predecessor.node == src:
                replacement = pred if other is vn and pred is not None else None
                if replacement is not None and self._has_left(replacement.node):
                    replacement = None
                self._set_predecessor(other, replacement)
            if any(f is not None and f.node == src for f in other.fingers):
                other.fingers = [None if f is not None and f.node == src else f
                                 for f in other.fingers]
                other.table = None

    def _has_left(self, node: NodeId) -> bool:
        """Did ``node`` say goodbye lately? Its messages sent before that may still arrive."""
        since = self._left.get(node)
        return since is not None and self.env.now() - since <= self.config.left_memory
