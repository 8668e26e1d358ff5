"""Chord's routing: a ROUTE (an upper layer's payload, with an upcall at every hop) or a
FIND_ROOT towards a key's root, and successor lookups, hop by hop with acknowledgements.

A hop that does not acknowledge in time counts as a missed deadline (``HostBase._missed``) and
the message is routed again from here, around the hop once it is suspected.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ....core.ids import NodeId
from .base import LAYER, Hop, HostBase, Rejected, Request, RequestKind
from .messages import Ack, FindSuccessor, LookupPurpose, RootFound, Route, RouteKind, SuccessorIs
from .ring import ChordState, Peer, PeerWire, VNode, chord_id, in_half_open

__all__ = ["HostRouting"]


class HostRouting(HostBase):
    """Routing by key on a Chord host (its ring tables are kept by ``maintenance``)."""

    # -- public face -------------------------------------------------------------------------

    def route(self, key: str, payload: Any = None) -> bool:
        """Send ``payload`` towards the root of ``key``; False (and a traced drop) when no
        virtual node is on the ring yet."""
        return self._originate(key, RouteKind.ROUTE, payload, 0)

    def find_root(self, key: str, ref: int) -> bool:
        """Find the root of ``key``; the answer comes to ``on_root_found(key, root, hops, ref)``.
        False (and a traced drop) when no virtual node is on the ring yet."""
        if not self.joined:
            return self._not_joined(key)
        if len(self._requests) >= self.config.max_pending:
            self.env.trace("drop", layer=LAYER, key=key, reason="pending_full")
            return False
        start = self._start_vnode(chord_id(key, self.config.bits))
        ref_ = self._new_ref()
        request = Request(RequestKind.FIND_ROOT, start.index, None)
        request.key = key
        request.user_ref = ref
        self._requests[ref_] = request
        self._send_find_root(ref_, request)
        return True

    def peer_down(self, node: NodeId) -> None:
        """The runtime could not deliver to ``node`` (refused or reset): suspect it at once
        rather than after its missed deadlines, and route what waits on its hop
        acknowledgement around it now. A node that is alive after all comes back through
        stabilization and the probes of departed peers."""
        if node == self.env.node:
            return
        self._misses.pop(node, None)
        self._suspect(node)
        for hop_ref in [ref for ref, hop in self._hops.items() if hop.next_hop.node == node]:
            hop = self._hops[hop_ref]
            if hop.timer is not None:
                self.env.cancel(hop.timer)
            self._hop_timed_out(hop_ref)

    def root_of(self, key: str) -> Peer | None:
        """The local virtual node that is the root of ``key`` in its own view, if any."""
        k = chord_id(key, self.config.bits)
        for vn in self._vnodes:
            if vn.state is ChordState.ACTIVE and vn.owns(k):
                return vn.me
        return None

    # -- routing -------------------------------------------------------------------------

    def _start_vnode(self, k: int) -> VNode:
        """The local virtual node to start from: the root if one is, else the closest
        preceding ``k``."""
        best: VNode | None = None
        best_distance = 0
        for vn in self._active():
            if vn.owns(k):
                return vn
            distance = (k - vn.me.ident) % self._modulus
            if best is None or distance < best_distance:
                best, best_distance = vn, distance
        assert best is not None, "callers check joined first"
        return best

    def _originate(self, key: str, kind: RouteKind, payload: Any, ref: int) -> bool:
        if not self.joined:
            return self._not_joined(key)
        vn = self._start_vnode(chord_id(key, self.config.bits))
        self._route_seq += 1
        msg = Route(to=vn.index, key=key, origin=vn.me.wire(), seq=self._route_seq,
                    kind=kind.value, payload=payload, ref=ref)
        self.last_hop = None
        self._step(vn, msg, 0)
        return True

    def _send_find_root(self, ref: int, request: Request) -> None:
        vn = self._vnodes[request.vnode]
        if vn.state is not ChordState.ACTIVE:
            vn = self._start_vnode(chord_id(request.key, self.config.bits))
            request.vnode = vn.index
        request.timer = self.env.set_timer(self.config.lookup_timeout,
                                           lambda: self._find_root_timed_out(ref))
        self._route_seq += 1
        msg = Route(to=vn.index, key=request.key, origin=vn.me.wire(), seq=self._route_seq,
                    kind=RouteKind.FIND_ROOT.value, ref=ref)
        self.last_hop = None
        self._step(vn, msg, 0)

    def _step(self, vn: VNode, msg: Route | FindSuccessor, tries: int) -> None:
        if isinstance(msg, Route):
            self._route_step(vn, msg, tries)
        else:
            self._find_step(vn, msg, tries)

    def _route_step(self, vn: VNode, msg: Route, tries: int) -> None:
        """One hop of a ROUTE or FIND_ROOT at ``vn``: deliver here, or pick the next hop."""
        k = chord_id(msg.key, self.config.bits)
        pred = vn.predecessor
        succ = vn.successor
        if vn.owns(k) or (msg.final and pred is None):
            self._arrive(vn, msg)
            return
        if msg.final:
            # the sender saw me as the root, but a node joined just before me: step back
            assert pred is not None
            self._forward(vn, msg, pred, True, tries)
        elif in_half_open(k, vn.me.ident, succ.ident):
            self._forward(vn, msg, succ, True, tries)
        else:
            nearer = vn.successor_list_root(k)
            if nearer is not None:
                self._forward(vn, msg, nearer, True, tries)
            else:
                self._forward(vn, msg, vn.closest_preceding(k) or succ, False, tries)

    def _find_step(self, vn: VNode, msg: FindSuccessor, tries: int) -> None:
        """One hop of a successor lookup: answer if the target falls before my successor."""
        target = int(msg.target, 16)
        succ = vn.successor
        if not vn.successors or in_half_open(target, vn.me.ident, succ.ident):
            successors = vn.successors or [vn.me]
            hints: tuple[PeerWire, ...] = ()
            if msg.purpose == LookupPurpose.JOIN.value:
                hints = tuple(p.wire() for p in vn.routing_table()[1])
            self._send(msg.asker[0], SuccessorIs(
                ref=msg.ref, responder=vn.me.wire(),
                successors=tuple(p.wire() for p in successors), hops=msg.hops, hints=hints))
            return
        self._forward(vn, msg, vn.closest_preceding(target) or succ, False, tries)

    def _forward(self, vn: VNode, msg: Route | FindSuccessor, next_hop: Peer, final: bool,
                 tries: int) -> None:
        if msg.hops >= self.config.max_hops:
            self._drop_routed(msg, "hop_limit")
            return
        if isinstance(msg, Route) and msg.kind == RouteKind.ROUTE.value:
            upcall = self.on_forward
            if upcall is not None and not upcall(msg.key, msg.payload, next_hop.node):
                return
        local = next_hop.node == self.env.node
        if not local and len(self._hops) >= self.config.max_pending:
            self._drop_routed(msg, "pending_full")
            return
        hop_ref = 0 if local else self._new_ref()
        if isinstance(msg, Route):
            out: Route | FindSuccessor = dataclasses.replace(
                msg, to=next_hop.vnode, hops=msg.hops + 1, final=final, hop_ref=hop_ref)
        else:
            out = dataclasses.replace(msg, to=next_hop.vnode, hops=msg.hops + 1,
                                      hop_ref=hop_ref)
        if not local:
            hop = Hop(msg, self.last_hop, vn.index, next_hop, tries)
            hop.timer = self.env.set_timer(self.config.request_timeout,
                                           lambda: self._hop_timed_out(hop_ref))
            self._hops[hop_ref] = hop
        self._send(next_hop.node, out)

    def _arrive(self, vn: VNode, msg: Route) -> None:
        """The message reached its root (me, in my view)."""
        origin = msg.origin[0]
        seen = (origin, msg.seq)
        if seen in self._delivered:
            self._drop_routed(msg, "duplicate")
            return
        self._delivered[seen] = None
        if len(self._delivered) > self.config.dedupe_window:
            self._delivered.popitem(last=False)
        env = self.env
        env.trace("lookup", layer=LAYER, msg=f"{origin}:{msg.seq}", origin=origin, key=msg.key,
                  seq=msg.seq, hops=msg.hops, root=env.node, kind=msg.kind)
        if msg.kind == RouteKind.ROUTE.value:
            if self.on_deliver is not None:
                self.on_deliver(msg.key, msg.payload)
            return
        if self.on_find_root is not None:
            self.on_find_root(msg.key, origin)
        self._send(origin, RootFound(ref=msg.ref, key=msg.key, root=vn.me.wire(),
                                     hops=msg.hops))

    # -- timeouts --------------------------------------------------------------------------

    def _find_root_timed_out(self, ref: int) -> None:
        request = self._requests.pop(ref, None)
        if request is None:
            return
        if request.tries < self.config.lookup_retries and self.joined:
            request.tries += 1
            self._requests[ref] = request
            self._send_find_root(ref, request)
            return
        self.env.trace("drop", layer=LAYER, key=request.key, reason="lookup_timeout",
                       ref=request.user_ref)
        if self.on_root_failed is not None:
            self.on_root_failed(request.key, request.user_ref)

    def _hop_timed_out(self, hop_ref: int) -> None:
        hop = self._hops.pop(hop_ref, None)
        if hop is None:
            return
        self._missed(hop.next_hop.node)
        vn = self._vnodes[hop.vnode]
        if vn.state is not ChordState.ACTIVE:
            return
        if hop.tries >= self.config.hop_retries:
            self._drop_routed(hop.arrived, "no_route")
            return
        # route it again from here: to the same hop (a retransmission) until it is suspected,
        # then around it; the root drops a copy that arrives twice
        self.last_hop = hop.came_from
        self._step(vn, hop.arrived, hop.tries + 1)

    def _drop_routed(self, msg: Route | FindSuccessor, reason: str) -> None:
        if isinstance(msg, Route):
            mid, origin, key, seq = msg.trace_ids()
            self.env.trace("drop", layer=LAYER, msg=mid, origin=origin, key=key, seq=seq,
                           reason=reason, hops=msg.hops)
        else:
            self.env.trace("drop", layer=LAYER, origin=msg.asker[0], reason=reason,
                           hops=msg.hops, purpose=msg.purpose)

    # -- handlers --------------------------------------------------------------------------

    def _hop_taken(self, src: NodeId, msg: Route | FindSuccessor) -> bool:
        """Acknowledge the hop; False (dropped) when it went over the hop limit."""
        if msg.hop_ref:
            self.env.send(src, Ack(hop_ref=msg.hop_ref))
        if msg.hops > self.config.max_hops:
            self._drop_routed(msg, "hop_limit")
            return False
        self.last_hop = src
        return True

    def _on_route(self, src: NodeId, msg: Route) -> None:
        vn = self._vnode_for(msg.to)
        self._peer(msg.origin)
        if self._hop_taken(src, msg):
            self._route_step(vn, msg, 0)

    def _on_find(self, src: NodeId, msg: FindSuccessor) -> None:
        vn = self._vnode_for(msg.to)
        self._peer(msg.asker)
        if int(msg.target, 16) >= self._modulus:
            raise Rejected("bad_id", f"target {msg.target} has more than {self.config.bits} bits")
        if self._hop_taken(src, msg):
            self._find_step(vn, msg, 0)

    def _on_ack(self, src: NodeId, msg: Ack) -> None:
        hop = self._hops.get(msg.hop_ref)
        if hop is None or hop.next_hop.node != src:
            raise Rejected("unexpected_ack", f"no routed message {msg.hop_ref} sent to {src}")
        del self._hops[msg.hop_ref]
        if hop.timer is not None:
            self.env.cancel(hop.timer)

    def _on_root_found(self, src: NodeId, msg: RootFound) -> None:
        request = self._answered(src, msg.ref, RequestKind.FIND_ROOT)
        root = self._peer(msg.root)
        if root.node != src or msg.key != request.key:
            raise Rejected("unexpected_reply", f"root {root.node} for {msg.key!r} from {src}")
        self._settle(msg.ref, request)
        if self.on_root_found is not None:
            self.on_root_found(msg.key, root.node, msg.hops, request.user_ref)
