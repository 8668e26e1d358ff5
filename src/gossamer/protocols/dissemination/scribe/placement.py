"""The seed's placement of replicated topic owners (seed 001, phase 3): every active node of the
Chord ring runs with two spare processes outside the ring, and the three are one Multi-Paxos
group that orders the active node's topics (``spare_groups``, ``TopicOwners(groups=...)``).

Every process of a group is an ``OwnerProcess``: always a replica of the group, and on the
ring as the group's owner (a Chord node whose identifier is the owner's, ``ChordConfig(
identity=owner)``) only while the group's log names it active. The log decides who is active
with ``{"active": node, "instead_of": current}`` operations (a compare-and-set, applied in log
order at every member), so two members never both believe they are:

- the owner is active first; a process that its log (or, at its first start, the placement)
  names active proposes itself instead of itself when it starts, and joins the ring once that
  is decided: a member restarted after a spare took its place finds the compare-and-set
  failed and stays a spare. The group's leader watches the active member: every group message
  it gets from it counts (a live member answers the leader's NOOP with a NOOP_OK); when the
  active member is not the leader and has been silent for three times the group's suspicion
  timeout (the seed's 2 s: so 6 s, about six NOOP rounds lost in a row), the leader proposes
  itself instead of it, and joins the ring once that is decided. So a leader change alone (a
  lost NOOP or two) moves nobody off the ring; a dead active node is replaced once the
  election and then the leader have noticed it. The new active node takes the dead node's
  Chord identifier, so Chord routes the owner's topics to it, its Scribe becomes their root,
  and its stream starts from the group's decided log: no acknowledged publish is lost;
- a member the log no longer names active (an old owner that comes back, or a live one taken
  for dead: one cut off, or under heavy loss) leaves the ring and stays a replica; its
  subscriptions end with it (``on_leave``: traced unsubscribes), since a process off the ring
  receives nothing;
- a spare is a replica even while off the ring: a publisher redirected to it (any member of
  the topic's group takes a publish, the seed's PUB REQUEST to "one of the nodes in the list")
  has it ordered there and acknowledged once decided.

After a take-over the new active node, as the group's leader, adds one of the group's
reserves (processes named for it that are no member yet: ``TopicOwners(reserves=...)``)
through the log and then removes the dead member, so the group is three again.

A group that joins a running placement (``TopicOwners(grown=...)``) takes its key range from
the group after it through both logs (``handover``): its active process claims the range once
a heartbeat until its log has taken it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

from ....core.env import Env, MessageHandler, Process, TimerHandle
from ....core.ids import NodeId
from ....core.messages import Message
from ...ordering.paxos.config import Committed
from ...ordering.paxos.groups import GroupMessage
from .handover import RangeClaim, RangeState
from .owners import TopicOwners

__all__ = ["OwnerProcess"]

LAYER = "paxos"
# the active member is taken for dead after this many suspicion timeouts of silence, counted
# from when this process became leader at the earliest (as a follower it hears only the
# leader: a fresh leader's clock for the active member was stale, and it took a live node for
# dead at once, VOPR pubsub seed 814); at 9% loss three are about six NOOP rounds lost in a row
SILENT_TIMEOUTS = 3


class OwnerProcess:
    """One process of an owner's group in the seed's placement (module docstring).
    ``build()`` makes the stack the process runs on the ring (Chord with the owner's identity,
    Scribe ordering through ``owners``); one is built at once and started only while this
    process is active, and a fresh one replaces it when it leaves the ring."""

    def __init__(self, env: Env, owners: TopicOwners, build: Callable[[], Process], *,
                 on_leave: Callable[[], None] | None = None) -> None:
        """``on_leave()`` runs before the stack stops when this process leaves the ring."""
        self.env = env
        self.owner = owners.group_of(env.node)
        self.owners = owners
        replica = owners.replica(self.owner)
        assert replica is not None  # a member has its group's replica
        self.replica = replica
        self._build = build
        self._on_leave = on_leave
        self.inner = build()
        self.active = False
        self._running = False
        self._heard: dict[NodeId, float] = {}  # member -> when a group message came from it
        self._since = 0.0  # when this process started watching
        self._proposed_at: float | None = None
        self._leading_since: float | None = None  # when _check first saw us lead
        # after a take-over: (the dead member, the reserve added for it once chosen), until
        # the dead member is out of the group; retried by _check while this process leads
        self._replacing: tuple[NodeId, NodeId | None] | None = None
        self._replace_at: float | None = None
        self._watch: TimerHandle | None = None
        owners.on_active = self._on_active

    def start(self) -> None:
        self._since = self.env.now()
        self.owners.start()  # replays the stored log first: old decisions move nobody now
        self._running = True
        self._watch = self.env.set_timer(self.replica.config.heartbeat_interval, self._check)
        me = self.env.node
        if self.owners.active_of(self.owner) == me:
            # named active by what this process knows (the owner at its first start, or its
            # store): on the ring once the group confirms it, so a member restarted after a
            # spare took its place does not come back as a second node of the same identity
            self.owners.propose_active(self.owner, instead_of=me)

    def stop(self) -> None:
        self._running = False
        if self._watch is not None:
            self.env.cancel(self._watch)
            self._watch = None
        if self.active:
            self.inner.stop()
            self.active = False
        self.owners.stop()

    def on_message(self, src: NodeId, msg: Message) -> None:
        if isinstance(msg, GroupMessage):
            self._heard[src] = self.env.now()
            self.owners.on_message(src, msg)
        elif isinstance(msg, RangeClaim | RangeState):
            self.owners.on_range_message(src, msg)
        else:  # while off the ring: a publish is ordered here; the rest finds nothing to do
            cast(MessageHandler, self.inner).on_message(src, msg)

    def on_unreachable(self, node: NodeId) -> None:
        hook = getattr(self.inner, "on_unreachable", None)
        if hook is not None and self.active:
            hook(node)

    # -- who is on the ring ----------------------------------------------------------------

    def _check(self) -> None:
        """As the group's leader: propose this process active instead of the active member
        when that has been silent for ``SILENT_TIMEOUTS`` suspicion timeouts (module
        docstring)."""
        env, config = self.env, self.replica.config
        self._watch = env.set_timer(config.heartbeat_interval, self._check)
        active = self.owners.active_of(self.owner)
        now = env.now()
        if self.active and self.owners.claiming(self.owner):
            self.owners.claim(self.owner)  # a grown group's range: until its log took it
        if self.replica.current_leader != env.node:
            self._leading_since = None
            return
        if self._leading_since is None:
            self._leading_since = now
        if active == env.node:
            if self._replacing is not None and (
                    self._replace_at is None
                    or now - self._replace_at >= config.suspect_timeout):
                self._replace(self._replacing[0])  # its add or remove was not decided
            return
        heard = max(self._heard.get(active, self._since), self._leading_since)
        if now - heard < SILENT_TIMEOUTS * config.suspect_timeout:
            return
        if self._proposed_at is not None and now - self._proposed_at < config.suspect_timeout:
            return  # proposed already: wait for it to be decided
        self._proposed_at = now
        env.trace("suspect", layer=LAYER, key=f"owner:{self.owner}", peer=active,
                  reason="active_silent")
        self.owners.propose_active(self.owner, instead_of=active)

    def _on_active(self, owner: NodeId, node: NodeId, previous: NodeId) -> None:
        if not self._running:
            return
        if node == self.env.node:
            self._join_ring()
            if previous != node:  # a take-over: a reserve takes the dead member's place
                self._replacing, self._replace_at = (previous, None), None
                self.env.set_timer(0.0, lambda: self._replace(previous))
        elif self.active:
            self._leave_ring(node)

    def _replace(self, dead: NodeId) -> None:
        """As the group's leader after a take-over: add a reserve that is no member yet
        through the log (ADDREPLICA), and once that is decided remove ``dead`` (REMOVEREPLICA),
        so the group keeps three members and a majority that outlives the next failure.
        Without a reserve left the dead member stays in the group (it may come back). Each
        step may be lost (a leader change, a proposal refused): ``_check`` calls this again
        every suspicion timeout until ``dead`` is out; adding a member or removing one twice
        changes nothing."""
        replica = self.replica
        if not self._running or replica.current_leader != self.env.node:
            return
        members = replica.members
        if dead not in members:
            self._replacing = None
            return
        self._replace_at = self.env.now()
        chosen = self._replacing[1] if self._replacing and self._replacing[0] == dead else None
        if chosen is not None and chosen in members:
            replica.remove_replica(dead)  # the reserve is in: the dead member goes
            return
        spare = chosen if chosen is not None else next(
            (r for r in self.owners.reserves_of.get(self.owner, ()) if r not in members), None)
        if spare is None:
            self._replacing = None
            return
        self._replacing = (dead, spare)
        if chosen is None:
            self.env.trace("replace", layer=LAYER, key=f"owner:{self.owner}", peer=dead,
                           spare=spare)

        def added(outcome: object) -> None:
            if isinstance(outcome, Committed) and self._running:
                self.replica.remove_replica(dead)

        replica.add_replica(spare, added)

    def _join_ring(self) -> None:
        if self.active:
            return
        self.active = True
        self.env.trace("join_ring", layer=LAYER, key=f"owner:{self.owner}",
                       peer=self.owner)
        self.inner.start()

    def _leave_ring(self, successor: NodeId) -> None:
        self.active = False
        self.env.trace("leave_ring", layer=LAYER, key=f"owner:{self.owner}", peer=successor)
        if self._on_leave is not None:
            self._on_leave()
        self.inner.stop()
        self.inner = self._build()
