"""Replicated topic owners (seed 001, phase 3): each node of the founding Chord ring owns a
Multi-Paxos group with its next ``backups`` nodes on the ring, which orders its topics' publishes.

``TopicOwners`` is the ``ReplicatedOrderer`` Scribe takes at construction. A topic belongs to
the group of its founding owner (the founding node that follows the topic's identifier on the
ring). The owner is that group's first leader; when it dies, Chord makes its successor the
topic's root, and the successor is a member of the same group: it goes on proposing there (the
group elects a new leader) and its stream starts from the group's decided log
(``history``), so a publish decided before the crash is not lost and every subscriber delivers
the topic in the one decided order. A retried publish already decided is answered with its
decided position and not proposed again (the last ``history_limit`` of each topic).

``OwnedProcess`` is a node's process with them: the groups plus the stack above (whose Scribe
orders through them), messages of the groups (``GroupMessage``) to them, the rest to the stack;
``ReplicatedScribe`` is one with a bare Scribe.

With backups on the ring the groups are fixed when the node is built, from the founding
ring: a node that joins later is no member of any group (its topics are redirected to their
founding owner's group), and groups do not follow ring changes. In the seed's placement
(``groups=``) a group may join while the others run (``grown=``): it takes its key range from
the group after it through both logs (``handover``), the moves being part of each group's
replicated state.
"""

from __future__ import annotations

import bisect
import collections
import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

from ....core.env import Env, MessageHandler, Process
from ....core.errors import ConfigError
from ....core.ids import NodeId, check_node_id
from ....core.messages import Message
from ...membership.chord import ChordHost
from ...membership.chord.ring import chord_id
from ...ordering.orderer import (
    Accepted,
    DecisionFn,
    Redirected,
    ReplicatedOrderer,
)
from ...ordering.paxos.config import DecidedOp, PaxosConfig
from ...ordering.paxos.groups import GroupMessage, PaxosGroups
from ...ordering.paxos.orderer import PaxosOrderer
from ...ordering.paxos.replica import PaxosReplica
from .base import DeliverFn, ScribeConfig
from .handover import (
    MAX_MEMBERS,
    MAX_MOVES,
    RangeClaim,
    RangeState,
    ident_hex,
    ident_of,
    in_range,
    node_list,
    owner_range,
    state_fits,
)
from .messages import Publish, message_id
from .node import Scribe

__all__ = ["OwnedProcess", "ReplicatedScribe", "TopicOwners", "owner_groups", "spare_groups"]

ActiveFn = Callable[[NodeId, NodeId, NodeId], None]


def owner_groups(ring: Sequence[NodeId], *, bits: int,
                 backups: int = 2) -> dict[NodeId, tuple[NodeId, ...]]:
    """Each founding node -> its group: itself, then its next ``backups`` nodes on the ring."""
    nodes = sorted({check_node_id(n) for n in ring}, key=lambda n: (chord_id(n, bits), n))
    if backups < 0:
        raise ConfigError(f"backups must be >= 0, got {backups}")
    size = min(len(nodes), backups + 1)
    return {node: tuple(nodes[(i + k) % len(nodes)] for k in range(size))
            for i, node in enumerate(nodes)}


def spare_groups(spares: Mapping[NodeId, Sequence[NodeId]]) -> dict[NodeId, tuple[NodeId, ...]]:
    """The seed's placement: each active node -> its group, itself and its spare processes
    (outside the ring). A process belongs to one group only."""
    groups: dict[NodeId, tuple[NodeId, ...]] = {}
    seen: set[NodeId] = set()
    for active, its_spares in spares.items():
        members = (check_node_id(active), *(check_node_id(s) for s in its_spares))
        if seen & set(members) or len(set(members)) != len(members):
            raise ConfigError(f"a process is in two groups, or twice in one: {active} with "
                              f"{list(its_spares)}")
        seen.update(members)
        groups[active] = members
    if not groups:
        raise ConfigError("the placement needs at least one active node")
    return groups


def _encode(item: Publish) -> Any:
    return [item.origin, item.seq, item.payload]


class TopicOwners(ReplicatedOrderer):
    """The groups this node is a member of, as Scribe's orderer (see the module docstring)."""

    __slots__ = ("_active", "_asked", "_decided", "_handed", "_histories", "_keys", "_lower",
                 "_moved", "_orderers", "_taken", "_taking", "_turns", "bits", "env", "groups",
                 "history_limit", "max_topics", "members_of", "on_active", "owners",
                 "reserves_of")

    LAYER = "paxos"

    def __init__(self, env: Env, ring: Sequence[NodeId] = (), *, bits: int, backups: int = 2,
                 groups: Mapping[NodeId, Sequence[NodeId]] | None = None,
                 reserves: Mapping[NodeId, Sequence[NodeId]] | None = None,
                 config: PaxosConfig | None = None, history_limit: int = 256,
                 max_topics: int = 4096, grown: Sequence[NodeId] = ()) -> None:
        """The groups are ``owner_groups(ring, backups=...)`` (each founding node and its
        next ring nodes), or ``groups`` (owner -> its members, the owner first: the seed's
        placement, ``spare_groups``). ``reserves``: owner -> processes that are no member of
        its group yet and may be added through its log (a new spare after a take-over); such
        a process builds the group's replica as a joining one. ``grown``: owners among
        ``groups`` that join a running placement; each takes its key range from the group of
        the owner after it, through both logs (``handover``), and orders nothing before."""
        if history_limit < 1 or max_topics < 1:
            raise ConfigError(f"history_limit and max_topics must be >= 1, got "
                              f"{history_limit} and {max_topics}")
        self.env = env
        self.max_topics = max_topics  # topics whose history a group keeps here
        self.bits = bits
        self.history_limit = history_limit
        super().__init__()
        if groups is None:
            every = owner_groups(ring, bits=bits, backups=backups)
        else:
            every = {check_node_id(o): tuple(m) for o, m in groups.items()}
            for owner, members in every.items():
                if not members or members[0] != owner or len(set(members)) != len(members):
                    raise ConfigError(f"group {owner}: its members must start with it and "
                                      f"name each process once, got {list(members)}")
        self.members_of = every
        self.reserves_of = {check_node_id(o): tuple(check_node_id(r) for r in rs)
                            for o, rs in (reserves or {}).items()}
        named = [n for o in every for n in (*every[o], *self.reserves_of.get(o, ()))]
        if self.reserves_of and (set(self.reserves_of) - set(every)
                                 or len(named) != len(set(named))):
            raise ConfigError("each reserve belongs to one group of the placement and is no "
                              "member of any")
        self._turns: dict[NodeId, int] = {}  # owner -> redirects to its group so far
        # owner -> the member on the ring as the owner (its Chord identity): the log's
        # ``{"active": node}`` operations say which (the owner itself at first)
        self._active: dict[NodeId, NodeId] = {owner: owner for owner in every}
        # (owner, node, previous) once a change is decided
        self.on_active: ActiveFn | None = None
        self.owners = sorted(every, key=lambda n: (chord_id(n, bits), n))
        self._keys = [chord_id(n, bits) for n in self.owners]
        grown = [check_node_id(g) for g in grown]
        if set(grown) - set(every) or len(set(grown)) >= len(every):
            raise ConfigError(f"a grown owner is one of the placement's, and some are not "
                              f"grown: {grown}")
        founding = [o for o in self.owners if o not in grown]
        # owner -> the lower end of the key range its group still holds (it hands the rest
        # of ``(lower, owner]`` over to grown groups); the moves it made, and their state
        self._lower = {o: owner_range(founding, o, bits)[0] for o in founding}
        self._moved: dict[NodeId, list[tuple[int, int, NodeId, tuple[NodeId, ...]]]] = {
            o: [] for o in every}
        self._handed: dict[tuple[NodeId, int], dict[str, Any]] = {}
        # grown owner -> (lo, hi, the owner whose group holds the range until it is taken)
        self._taking: dict[NodeId, tuple[int, int, NodeId]] = {}
        for owner in grown:
            others = [o for o in self.owners if o == owner or o not in grown]
            lo, hi = owner_range(others, owner, bits)
            source = others[(others.index(owner) + 1) % len(others)]
            self._taking[owner] = (lo, hi, source)
        self._taken: set[NodeId] = set()
        self._asked: dict[tuple[str, NodeId, int], float] = {}  # a proposal made, when
        self.groups = PaxosGroups(env)
        self._orderers: dict[NodeId, PaxosOrderer] = {}
        # per owner: topic -> the last items ordered (position, Publish); mid -> position
        self._histories: dict[NodeId, dict[str, collections.deque[tuple[int, Publish]]]] = {}
        self._decided: dict[NodeId, dict[str, dict[str, int]]] = {}
        for owner, members in every.items():
            reserve = env.node in self.reserves_of.get(owner, ())
            if env.node not in members and not reserve:
                continue
            name = f"owner:{owner}"
            replica = PaxosReplica(
                self.groups.view(name), () if reserve else members, joining=reserve,
                contacts=members if reserve else (), config=config, group=name,
                initial_leader=owner,
                on_decided=functools.partial(self._control, owner))
            orderer = PaxosOrderer(replica, on_ordered=functools.partial(self._ordered, owner),
                                   encode=_encode, anywhere=True,
                                   admits=functools.partial(self._admits, owner))
            replica.snapshot_fn = functools.partial(self._snapshot, owner)
            replica.restore_fn = functools.partial(self._restore, owner)
            self.groups.add(replica)
            self._orderers[owner] = orderer
            self._histories[owner] = {}
            self._decided[owner] = {}

    # -- the Orderer ---------------------------------------------------------------------------

    def owner_of(self, key: str) -> NodeId:
        """The founding owner of ``key``: the first founding node at or after its identifier."""
        i = bisect.bisect_left(self._keys, chord_id(key, self.bits))
        return self.owners[i % len(self.owners)]

    def propose(self, key: str, item: Any, on_decided: DecisionFn) -> None:
        owner = self.owner_of(key)
        orderer = self._orderers.get(owner)
        if orderer is None:
            # not a member of the key's group: any member takes it (its leader orders it);
            # which one is alive is not known here, so the members take turns: a publisher
            # sent to a dead one is redirected to the next one when it asks again
            on_decided(Redirected(self._turn(owner, self.candidates(owner))))
            return
        if not self._admits(owner, key):  # moved to a grown group, or not taken yet
            elsewhere = self._holder(owner, key)
            on_decided(Redirected(self._turn(elsewhere[0], elsewhere[1])))
            return
        if isinstance(item, Publish):
            position = self._decided[owner].get(key, {}).get(message_id(item.origin, item.seq))
            if position is not None:  # a retry of a publish decided already: not again
                on_decided(Accepted(position))
                return
        orderer.propose(key, item, on_decided)

    def _turn(self, group: NodeId, members: Sequence[NodeId]) -> NodeId:
        turn = self._turns[group] = self._turns.get(group, -1) + 1
        return members[turn % len(members)]

    def takes(self, key: str) -> bool:
        owner = self.owner_of(key)
        return owner in self._orderers and self._admits(owner, key)

    # -- growing the placement (``handover``) ----------------------------------------------------

    def _admits(self, owner: NodeId, key: str) -> bool:
        """Whether ``owner``'s group orders ``key`` now (by its log: the same at every
        member): not a grown group before its take, nor a key its group handed over."""
        if owner in self._taking and owner not in self._taken:
            return False
        moved = self._moved.get(owner)
        if not moved:
            return True
        ident = chord_id(key, self.bits)
        return not any(in_range(ident, lo, hi) for lo, hi, _, _ in moved)

    def _holder(self, owner: NodeId, key: str) -> tuple[NodeId, tuple[NodeId, ...]]:
        """The group that orders ``key`` instead of ``owner``'s, and its processes."""
        taking = self._taking.get(owner)
        if taking is not None and owner not in self._taken:
            return taking[2], self.candidates(taking[2])
        ident = chord_id(key, self.bits)
        to, members = next((to, members) for lo, hi, to, members in self._moved[owner]
                           if in_range(ident, lo, hi))
        return to, members

    def claiming(self, owner: NodeId) -> bool:
        """Whether ``owner``'s group (one of this node's) still has to take its range."""
        return owner in self._taking and owner not in self._taken

    def claim(self, owner: NodeId) -> None:
        """Send ``owner``'s claim (it is a grown group's) to every process of the group
        that holds its range (``handover``, step 1)."""
        lo, hi, source = self._taking[owner]
        msg = RangeClaim(lo=ident_hex(lo), hi=ident_hex(hi), to=owner,
                         members=self.candidates(owner)[:MAX_MEMBERS])  # the owner first
        for node in self.candidates(source):
            self.env.send(node, msg)

    def on_range_message(self, src: NodeId, msg: RangeClaim | RangeState) -> None:
        if isinstance(msg, RangeClaim):
            self._on_claim(src, msg)
        else:
            self._on_state(src, msg)

    def _on_claim(self, src: NodeId, msg: RangeClaim) -> None:
        if src not in msg.members:
            self._drop_range(src, msg, "claim_not_from_its_group")
            return
        lo, hi = ident_of(msg.lo), ident_of(msg.hi)
        for owner, orderer in self._orderers.items():
            if self.claiming(owner):
                continue
            if any(h == hi and to == msg.to for _, h, to, _ in self._moved[owner]):
                state = self._fitted(owner, self._handed[(owner, hi)])
                self.env.send(src, RangeState(lo=msg.lo, hi=msg.hi, owner=owner, state=state))
                return
            if self._fits(owner, lo, hi):
                if self._ask("hand_over", owner, hi):
                    orderer.replica.propose({"hand_over": {
                        "lo": msg.lo, "hi": msg.hi, "to": msg.to, "members": list(msg.members)}})
                return
        self._drop_range(src, msg, "claim_out_of_range")

    def _on_state(self, src: NodeId, msg: RangeState) -> None:
        claim = (ident_of(msg.lo), ident_of(msg.hi), msg.owner)
        for owner, (lo, hi, source) in self._taking.items():
            if owner in self._orderers and (lo, hi, source) == claim:
                if src not in self.candidates(source):
                    self._drop_range(src, msg, "state_not_from_its_group")
                elif self.claiming(owner) and self._ask("take", owner, hi):
                    self._orderers[owner].replica.propose({"take": {
                        "lo": msg.lo, "hi": msg.hi, "from": source,
                        "state": self._fitted(owner, msg.state)}})
                return
        self._drop_range(src, msg, "state_of_no_claim")

    def _fitted(self, owner: NodeId, state: dict[str, Any]) -> dict[str, Any]:
        """``state`` cut to what one operation of ``owner``'s log may carry (a take proposes
        it whole; 1 KiB is left for the operation around it)."""
        return state_fits(state, self._orderers[owner].replica.config.max_command_bytes - 1024)

    def _drop_range(self, src: NodeId, msg: RangeClaim | RangeState, reason: str) -> None:
        self.env.trace("drop", layer=self.LAYER, peer=src, key=msg.hi, reason=reason)

    def _ask(self, what: str, owner: NodeId, hi: int) -> bool:
        """Whether to propose ``what`` now: not if proposed within a suspicion timeout."""
        now, key = self.env.now(), (what, owner, hi)
        replica = self._orderers[owner].replica
        if now - self._asked.get(key, -1e18) < replica.config.suspect_timeout:
            return False
        self._asked[key] = now
        return True

    def _fits(self, owner: NodeId, lo: int, hi: int) -> bool:
        """Whether ``(lo, hi]`` is the start of what ``owner``'s group still holds."""
        mine = chord_id(owner, self.bits)
        return (owner in self._lower and lo == self._lower[owner] and hi != mine
                and in_range(hi, lo, mine) and len(self._moved[owner]) < MAX_MOVES)

    def _hand_over(self, owner: NodeId, spec: Any, slot: int) -> None:
        """Decided in ``owner``'s log: the keys of ``(lo, hi]`` go to group ``to``."""
        try:
            lo, hi, to = ident_of(spec["lo"]), ident_of(spec["hi"]), check_node_id(spec["to"])
            members = node_list(spec["members"])
        except (KeyError, TypeError, ValueError):
            self._drop_op(owner, slot, "unknown_operation")
            return
        if any(h == hi and t == to for _, h, t, _ in self._moved[owner]):
            self._drop_op(owner, slot, "handed_over_already")
            return
        if not self._fits(owner, lo, hi):
            self._drop_op(owner, slot, "claim_out_of_range")
            return
        positions = {key: pos for key, pos in self._orderers[owner].snapshot().items()
                     if in_range(chord_id(key, self.bits), lo, hi)}
        history: dict[str, Any] = {}
        for key in positions:
            items = self._histories[owner].pop(key, None)
            self._decided[owner].pop(key, None)
            if items:
                history[key] = [[pos, _encode(item)] for pos, item in items]
        self._moved[owner].append((lo, hi, to, members))
        self._handed[(owner, hi)] = {"positions": positions, "history": history}
        self._lower[owner] = hi
        self.env.trace("hand_over", layer=self.LAYER, key=f"owner:{owner}", peer=to, seq=slot,
                       topics=len(positions))

    def _take(self, owner: NodeId, spec: Any, slot: int) -> None:
        """Decided in ``owner``'s log (a grown group's): the moved keys' state, from which
        its group goes on ordering them."""
        if not self.claiming(owner):
            self._drop_op(owner, slot, "taken_already")
            return
        lo, hi, source = self._taking[owner]
        try:
            if (ident_of(spec["lo"]), ident_of(spec["hi"]), spec["from"]) != (lo, hi, source):
                raise ValueError("another range")
            positions = {str(k): int(v) for k, v in spec["state"]["positions"].items()}
            history = [(str(key), int(pos), Publish(topic=str(key), origin=origin, seq=seq,
                                                     payload=payload))
                       for key, items in spec["state"]["history"].items()
                       for pos, (origin, seq, payload) in items]
        except (KeyError, TypeError, ValueError, AttributeError):
            self._drop_op(owner, slot, "bad_take")
            return
        orderer = self._orderers[owner]
        for key, pos in positions.items():
            orderer.advance(key, pos)
        for key, pos, item in sorted(history, key=lambda h: (h[0], h[1])):
            self._remember(owner, key, pos, item)
        self._taken.add(owner)
        self._lower[owner] = lo  # what it holds now: it may hand a part on in turn
        self.env.trace("take", layer=self.LAYER, key=f"owner:{owner}", peer=source, seq=slot,
                       topics=len(positions))

    def _drop_op(self, owner: NodeId, slot: int, reason: str) -> None:
        self.env.trace("drop", layer=self.LAYER, key=f"owner:{owner}", seq=slot, reason=reason)

    def active_of(self, owner: NodeId) -> NodeId:
        """The member the group's log names active (on the ring as ``owner``)."""
        return self._active[owner]

    def propose_active(self, owner: NodeId, instead_of: NodeId) -> None:
        """Propose in ``owner``'s group that this node is its active member from now on, if
        ``instead_of`` still is when the proposal is decided (a compare-and-set: two spares
        that both propose themselves make one change, and a restarted member confirming that
        it is still active changes nothing if another took its place meanwhile)."""
        orderer = self._orderers.get(owner)
        if orderer is None:
            raise ConfigError(f"{self.env.node} is no member of {owner}'s group")
        orderer.replica.propose({"active": self.env.node, "instead_of": instead_of})

    def _control(self, owner: NodeId, op: DecidedOp) -> None:
        """A decided operation of ``owner``'s group that is not a publish: a new active
        member, or a member confirmed active (anything else was not proposed by this code:
        traced and ignored). Every member applies it the same way, in log order."""
        payload = op.payload
        if isinstance(payload, dict) and payload.keys() == {"hand_over"}:
            self._hand_over(owner, payload["hand_over"], op.slot)
            return
        if isinstance(payload, dict) and payload.keys() == {"take"}:
            self._take(owner, payload["take"], op.slot)
            return
        members = self.candidates(owner)
        if not (isinstance(payload, dict) and payload.keys() == {"active", "instead_of"}
                and payload["active"] in members and payload["instead_of"] in members):
            self.env.trace("drop", layer=self.LAYER, key=f"owner:{owner}",
                           reason="unknown_operation", seq=op.slot)
            return
        if self._active[owner] != payload["instead_of"]:
            self.env.trace("drop", layer=self.LAYER, key=f"owner:{owner}", seq=op.slot,
                           peer=payload["active"], reason="active_changed_meanwhile")
            return
        self._set_active(owner, payload["active"], confirmed=True)

    def _set_active(self, owner: NodeId, node: NodeId, *, confirmed: bool = False) -> None:
        """``confirmed``: decided now (the callback hears it even if nothing changed)."""
        previous = self._active[owner]
        if previous == node and not confirmed:
            return
        self._active[owner] = node
        self.env.trace("active", layer=self.LAYER, key=f"owner:{owner}", peer=node)
        if self.on_active is not None:
            self.on_active(owner, node, previous)

    def group_of(self, node: NodeId) -> NodeId:
        """The owner of the one group ``node`` is a member or a reserve of."""
        mine = [o for o in self.members_of if node in self.candidates(o)]
        if len(mine) != 1:
            raise ConfigError(f"{node} must be a member (or a reserve) of exactly one group, "
                              f"is of {len(mine)}")
        return mine[0]

    def candidates(self, owner: NodeId) -> tuple[NodeId, ...]:
        """Every process that is or may become a member of ``owner``'s group."""
        return (*self.members_of[owner], *self.reserves_of.get(owner, ()))

    def history(self, key: str) -> list[tuple[int, Any]]:
        owner = self.owner_of(key)
        return list(self._histories.get(owner, {}).get(key, ()))

    def position(self, key: str) -> int:
        """The last position ordered for ``key`` here (0: none, or not a member)."""
        orderer = self._orderers.get(self.owner_of(key))
        return 0 if orderer is None else orderer.position(key)

    def replica(self, owner: NodeId) -> PaxosReplica | None:
        orderer = self._orderers.get(owner)
        return None if orderer is None else orderer.replica

    def _ordered(self, owner: NodeId, key: str, position: int, value: Any) -> None:
        origin, seq, payload = value
        item = Publish(topic=key, origin=origin, seq=seq, payload=payload)
        self._remember(owner, key, position, item)
        self.env.trace("ordered", layer=self.LAYER, msg=message_id(origin, seq), origin=origin,
                       key=key, seq=position, group=f"owner:{owner}")
        if self.on_ordered is not None:
            self.on_ordered(key, position, item)

    def _remember(self, owner: NodeId, key: str, position: int, item: Publish) -> None:
        """Keep ``item`` in ``owner``'s history of ``key`` (bounded) and its id as decided."""
        mid = message_id(item.origin, item.seq)
        topics, decided_ids = self._histories[owner], self._decided[owner]
        if key not in topics and len(topics) >= self.max_topics:
            oldest_topic = next(iter(topics))  # bounded: the oldest topic's history goes
            del topics[oldest_topic]
            decided_ids.pop(oldest_topic, None)
        history = topics.setdefault(key, collections.deque(maxlen=self.history_limit))
        decided = decided_ids.setdefault(key, {})
        if len(history) == history.maxlen:
            _, oldest = history[0]
            decided.pop(message_id(oldest.origin, oldest.seq), None)
        history.append((position, item))
        decided.setdefault(mid, position)

    def _snapshot(self, owner: NodeId) -> Any:
        moved = self._moved[owner]
        return {"positions": self._orderers[owner].snapshot(), "active": self._active[owner],
                "history": {key: [[pos, _encode(item)] for pos, item in items]
                            for key, items in self._histories[owner].items()},
                "lower": None if owner not in self._lower else ident_hex(self._lower[owner]),
                "taken": owner in self._taken,
                "moved": [[ident_hex(lo), ident_hex(hi), to, list(members),
                           self._handed[(owner, hi)]] for lo, hi, to, members in moved]}

    def _restore(self, owner: NodeId, state: Any) -> None:
        self._orderers[owner].restore(state["positions"])
        if state.get("active") in self.candidates(owner):
            self._set_active(owner, state["active"])
        self._histories[owner] = {}
        self._decided[owner] = {}
        for key, items in state["history"].items():
            for pos, (origin, seq, payload) in items:
                self._remember(owner, key, pos, Publish(topic=key, origin=origin, seq=seq,
                                                        payload=payload))
        if state.get("lower") is not None:
            self._lower[owner] = ident_of(state["lower"])
        if state.get("taken"):
            self._taken.add(owner)
        self._moved[owner] = []
        for lo, hi, to, members, handed in state.get("moved", ()):
            self._moved[owner].append((ident_of(lo), ident_of(hi), to, tuple(members)))
            self._handed[(owner, ident_of(hi))] = handed

    def start(self) -> None:
        self.groups.start()

    def stop(self) -> None:
        self.groups.stop()

    def on_message(self, src: NodeId, msg: GroupMessage) -> None:
        self.groups.on_message(src, msg)


class OwnedProcess:
    """A node's process with replicated owners: ``inner`` (the stack whose Scribe takes
    ``owners`` as its orderer) and the groups; messages of the groups (``GroupMessage``) go to
    ``owners``, the rest to ``inner``. The groups start first (Scribe may propose at once)."""

    def __init__(self, owners: TopicOwners, inner: Process) -> None:
        self.owners = owners
        self.inner = inner

    def start(self) -> None:
        self.owners.start()
        self.inner.start()

    def stop(self) -> None:
        self.inner.stop()
        self.owners.stop()

    def on_message(self, src: NodeId, msg: Message) -> None:
        if isinstance(msg, GroupMessage):
            self.owners.on_message(src, msg)
        else:
            cast(MessageHandler, self.inner).on_message(src, msg)

    def on_unreachable(self, node: NodeId) -> None:
        hook = getattr(self.inner, "on_unreachable", None)
        if hook is not None:
            hook(node)


class ReplicatedScribe(OwnedProcess):
    """A node's process: ``Scribe`` over ``chord`` with ``TopicOwners`` as its orderer."""

    def __init__(self, env: Env, chord: ChordHost, ring: Sequence[NodeId], *,
                 config: ScribeConfig | None = None, paxos: PaxosConfig | None = None,
                 backups: int = 2, on_deliver: DeliverFn | None = None) -> None:
        config = config if config is not None else ScribeConfig()
        owners = TopicOwners(env, ring, bits=chord.config.bits, backups=backups,
                             config=paxos, history_limit=config.topic_log_limit,
                             max_topics=config.max_topics)
        self.scribe = Scribe(env, chord, config=config, orderer=owners,
                             on_deliver=on_deliver)
        super().__init__(owners, self.scribe)

    def subscribe(self, topic: str) -> None:
        self.scribe.subscribe(topic)

    def publish(self, topic: str, payload: Any, **kw: Any) -> str:
        return self.scribe.publish(topic, payload, **kw)
