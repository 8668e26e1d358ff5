"""Chord as a node's process: ``ChordHost`` with ``config.vnodes`` virtual nodes, ``Chord`` with
one, and whole-ring helpers (ideal tables for scale runs, key load).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from typing import Any

from ....core.env import Env, get_json
from ....core.errors import ConfigError
from ....core.ids import NodeId, check_node_id
from .base import STORE_TABLE, ChordConfig
from .maintenance import HostMaintenance
from .messages import (
    Ack,
    FindSuccessor,
    GetPredecessor,
    Leave,
    Notify,
    Nudge,
    Ping,
    Pong,
    PredecessorIs,
    RootFound,
    Route,
    SuccessorIs,
)
from .ring import ChordState, Peer, VNodeView, chord_id, vnode_name

__all__ = ["Chord", "ChordHost", "bootstrap", "key_load"]


class ChordHost(HostMaintenance):
    """Chord on one env: ``config.vnodes`` virtual nodes, messages addressed to (node, index).

    Upper layers call ``route(key, payload)`` and ``find_root(key, ref)`` and hear back through
    ``on_forward(key, payload, next_hop) -> bool`` at every hop a ROUTE leaves (False stops it),
    ``on_deliver(key, payload)`` at the root, ``on_find_root(key, asker)`` at the root of a
    FIND_ROOT and ``on_root_found(key, root, hops, ref)`` back at the asker (or
    ``on_root_failed(key, ref)`` when no answer came). During ``on_forward`` and ``on_deliver``,
    ``last_hop`` is the node the message came from (None where it started).
    """

    def __init__(
        self,
        env: Env,
        *,
        contacts: Iterable[NodeId] = (),
        create: bool = False,
        config: ChordConfig | None = None,
    ) -> None:
        super().__init__(env, contacts=contacts, create=create, config=config)
        self._handlers = {
            FindSuccessor: self._on_find,
            SuccessorIs: self._on_successor_is,
            GetPredecessor: self._on_get_predecessor,
            PredecessorIs: self._on_predecessor_is,
            Notify: self._on_notify,
            Nudge: self._on_nudge,
            Ping: self._on_ping,
            Pong: self._on_pong,
            Route: self._on_route,
            Ack: self._on_ack,
            RootFound: self._on_root_found,
            Leave: self._on_leave,
        }

    # -- Process ---------------------------------------------------------------------------

    def start(self) -> None:
        if self.create and not (self.contacts and self._was_member()):
            self._create_ring()
        elif self.contacts:
            for vn in self._vnodes:
                self._join(vn)
        # else: idle until join() or bootstrap()

    def _was_member(self) -> bool:
        """This node's store says it was in a ring before (``durable``): a creator with
        contacts then joins through them instead of creating a second ring. Read only when
        it decides something: a simulated node's store is made on its first use."""
        return self.config.durable and get_json(
            self.env.store, STORE_TABLE, "member") is not None

    def stop(self) -> None:
        """Leave gracefully: tell each neighbour who is on the other side, then go quiet."""
        for vn in self._vnodes:
            if vn.state is ChordState.ACTIVE and vn.successors:
                succ, pred = vn.successor, vn.predecessor
                self._send(succ.node, Leave(to=succ.vnode, sender=vn.me.wire(),
                                            predecessor=pred.wire() if pred else None))
                if pred is not None:
                    self._send(pred.node, Leave(
                        to=pred.vnode, sender=vn.me.wire(),
                        successors=tuple(p.wire() for p in vn.successors)))
            vn.state = ChordState.STOPPED
        for handle in self._timers.values():
            self.env.cancel(handle)
        self._timers.clear()
        for request in self._requests.values():
            if request.timer is not None:
                self.env.cancel(request.timer)
        self._requests.clear()
        for hop in self._hops.values():
            if hop.timer is not None:
                self.env.cancel(hop.timer)
        self._hops.clear()

    # -- public face ---------------------------------------------------------------------

    def views(self) -> tuple[VNodeView, ...]:
        return tuple(vn.view() for vn in self._vnodes)

    def join(self, contact: NodeId) -> None:
        """Join the ring that ``contact`` is on (for a node built without contacts)."""
        if contact != self.env.node and contact not in self.contacts:
            self.contacts.append(check_node_id(contact))
        for vn in self._vnodes:
            if vn.state is ChordState.IDLE:
                self._join(vn)

    def snapshot(self) -> tuple[Any, ...]:
        """Everything a message may change, for tests that check a drop changed nothing."""
        return (self.views(), sorted(self._requests), sorted(self._hops),
                tuple(self._delivered), tuple(self._departed), tuple(self._left),
                tuple(self._misses.items()), self._next_ref, self._route_seq)


class Chord(ChordHost):
    """A Chord node with one virtual node, whose identifier hashes the node id itself."""

    def __init__(
        self,
        env: Env,
        *,
        contacts: Iterable[NodeId] = (),
        create: bool = False,
        config: ChordConfig | None = None,
    ) -> None:
        config = config if config is not None else ChordConfig()
        if config.vnodes != 1:
            raise ConfigError(f"Chord runs one virtual node; use ChordHost for {config.vnodes}")
        super().__init__(env, contacts=contacts, create=create, config=config)

    @property
    def me(self) -> Peer:
        return self._vnodes[0].me

    @property
    def state(self) -> ChordState:
        return self._vnodes[0].state

    @property
    def successor(self) -> Peer:
        return self._vnodes[0].successor

    @property
    def successor_list(self) -> tuple[Peer, ...]:
        return tuple(self._vnodes[0].successors)

    @property
    def predecessor(self) -> Peer | None:
        return self._vnodes[0].predecessor

    @property
    def fingers(self) -> tuple[Peer | None, ...]:
        return tuple(self._vnodes[0].fingers)


# -- whole-ring helpers: ideal tables, key load -------------------------------------------------


def bootstrap(hosts: Sequence[ChordHost]) -> None:
    """Give every virtual node of ``hosts`` the ideal tables of the ring they form, and make it
    active: a shortcut for scale runs (N in the thousands), never a substitute for joins in
    correctness tests. All hosts must share one ``bits`` and be idle."""
    if not hosts:
        return
    bits = hosts[0].config.bits
    if any(h.config.bits != bits for h in hosts):
        raise ConfigError("all hosts of a ring must use the same bits")
    members = sorted((vn.me.ident, h, vn) for h in hosts for vn in h._vnodes)
    idents = [ident for ident, _, _ in members]
    if len(set(idents)) != len(idents):
        raise ConfigError(f"identifier collision among {len(idents)} nodes: use more bits")
    modulus = 1 << bits
    peers = [vn.me for _, _, vn in members]
    count = len(peers)
    for position, (ident, host, vn) in enumerate(members):
        if vn.state is not ChordState.IDLE:
            raise ConfigError(f"bootstrap needs idle nodes; {vn.me.node} is {vn.state.value}")
        r = min(host.config.successors, count - 1)
        vn.successors = [peers[(position + j) % count] for j in range(1, r + 1)]
        vn.predecessor = peers[position - 1] if count > 1 else None
        for i in range(bits):
            at = bisect.bisect_left(idents, (ident + (1 << i)) % modulus) % count
            vn.fingers[i] = peers[at] if at != position else None
        vn.table = None
        vn.state = ChordState.ACTIVE
    for host in hosts:
        host._start_timers()


def key_load(hosts: Sequence[NodeId], keys: Iterable[str], *, vnodes: int,
             bits: int = 32) -> dict[NodeId, int]:
    """How many of ``keys`` each host is the root of, on the ideal ring of ``hosts`` running
    ``vnodes`` virtual nodes each (a pure computation: no simulation)."""
    ring = sorted((chord_id(vnode_name(h, i, vnodes), bits), h)
                  for h in hosts for i in range(vnodes))
    idents = [ident for ident, _ in ring]
    load = dict.fromkeys(hosts, 0)
    for key in keys:
        position = bisect.bisect_left(idents, chord_id(key, bits)) % len(ring)
        load[ring[position][1]] += 1
    return load
