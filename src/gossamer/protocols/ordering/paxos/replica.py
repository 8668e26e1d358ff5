"""A sans-I/O Multi-Paxos replica (seed 001, section 4): it orders opaque operations into one
log that every replica applies in the same order, and knows nothing of what they mean.

Requests are methods: ``start`` (START), ``propose`` (PROPOSE), ``add_replica`` (ADDREPLICA),
``remove_replica`` (REMOVEREPLICA); notifications are callbacks: ``on_decided`` (DECIDED),
``on_leader_changed`` (LEADER-CHANGED), ``on_added_replica`` / ``on_removed_replica``
(ADDED-/REMOVED-REPLICA) and ``on_possible_remove_replica`` (POSSIBLE-REMOVE-REPLICA).
Design decisions the seed leaves open: ``docs/paxos.md``.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Callable, Iterable
from typing import Any

import orjson

from ....core.env import DurableSequence, Env, TimerHandle
from ....core.errors import ConfigError, InvalidMessage, StateError
from ....core.ids import NodeId, check_node_id
from ....core.messages import DEFAULT_MAX_FRAME, Message
from .acceptor import Acceptor
from .config import Committed, DecidedOp, NotCommitted, Outcome, PaxosConfig, Role
from .leader import Leader
from .log import ReplicaLog, majority
from .messages import (
    Accept,
    AcceptOk,
    Ballot,
    Batch,
    Catchup,
    Command,
    Decided,
    Nack,
    Noop,
    NoopOk,
    Prepare,
    PrepareOk,
    Propose,
    Snapshot,
    digest,
)
from .store import PaxosStore, SnapshotRecord

__all__ = ["PaxosReplica"]

OutcomeFn = Callable[[Outcome], None]


@dataclasses.dataclass(slots=True)
class _Pending:
    """A proposal of this replica, forwarded to the leader until it is decided."""

    command: Command
    on_done: OutcomeFn | None
    sent_at: float


class PaxosReplica:
    """One replica of a group. ``members``: the founding replica set, the same at each founding
    replica; a replica added later is built with ``joining=True`` and ``contacts`` (the
    members it may hear from before it learns the set), and is added by ``add_replica`` at a
    member. ``snapshot_fn`` / ``restore_fn`` give and take the state machine's state (JSON), so
    the log can be compacted behind a snapshot and a lagging or new replica can be sent one;
    without ``snapshot_fn`` the log is never compacted."""

    LAYER = "paxos"

    def __init__(
        self,
        env: Env,
        members: Iterable[NodeId] = (),
        *,
        joining: bool = False,
        contacts: Iterable[NodeId] = (),
        config: PaxosConfig | None = None,
        group: str = "paxos",
        initial_leader: NodeId | None = None,
        snapshot_fn: Callable[[], Any] | None = None,
        restore_fn: Callable[[Any], None] | None = None,
        on_decided: Callable[[DecidedOp], None] | None = None,
        on_leader_changed: Callable[[NodeId, Ballot], None] | None = None,
        on_added_replica: Callable[[int, NodeId], None] | None = None,
        on_removed_replica: Callable[[int, NodeId], None] | None = None,
        on_possible_remove_replica: Callable[[NodeId], None] | None = None,
    ) -> None:
        self.env = env
        self.config = config if config is not None else PaxosConfig()
        self.group = group
        founding = tuple(sorted({check_node_id(m) for m in members}))
        if not joining and not founding:
            raise ConfigError("a founding replica needs its members (or joining=True)")
        if not joining and env.node not in founding:
            raise ConfigError(f"{env.node} is not among the founding members {founding}")
        self.contacts = frozenset(check_node_id(c) for c in contacts) | set(founding)
        self.initial_leader = initial_leader if initial_leader is not None else (
            founding[0] if founding else None)
        self.snapshot_fn = snapshot_fn
        self.restore_fn = restore_fn
        self.on_decided = on_decided
        self.on_leader_changed = on_leader_changed
        self.on_added_replica = on_added_replica
        self.on_removed_replica = on_removed_replica
        self.on_possible_remove_replica = on_possible_remove_replica

        self.pstore = PaxosStore(env.store)
        saved = self.pstore.load_snapshot()
        rows = self.pstore.load_log()
        self._fresh = saved is None and not rows and self.pstore.load_promised() is None
        snapshot = saved
        if snapshot is None and not joining:
            snapshot = SnapshotRecord(0, None, ((1, founding),), ())
        self.log = ReplicaLog(self.pstore, self.config.window, snapshot, rows)
        frame = DEFAULT_MAX_FRAME // 2
        self.acceptor = Acceptor(self.pstore, self.log, report_limit=self.config.catchup_batch,
                                 report_bytes=frame)
        self.max_round = max(self.pstore.load_round(),
                             self.acceptor.promised[0] if self.acceptor.promised else 0)
        self.leader = Leader(self)
        self.role = Role.OUTSIDE
        self.current_leader: NodeId | None = None
        # command id -> (slot, index) where it was applied, the latest ``recent_ids``
        self.recent: collections.OrderedDict[str, tuple[int, int]] = collections.OrderedDict(
            (cid, (slot, index)) for cid, slot, index in (snapshot.recent_ids if snapshot else ()))
        self.delivered = snapshot.slot if snapshot else 0
        self.running = False
        self._seq = DurableSequence(None, "paxos", incarnation=env.incarnation)
        self._mine: dict[str, _Pending] = {}
        self._votes: dict[int, tuple[Ballot, set[str]]] = {}
        self._heard_at = 0.0  # last word from the leader (or a promise given)
        self._suspicion: TimerHandle | None = None
        self._retry: TimerHandle | None = None
        self._catchup_at = float("-inf")
        self._known_decided = 0  # the highest slot this replica has heard is decided somewhere
        self._delivery_due = False

    # -- START / stop ---------------------------------------------------------------------

    def start(self) -> None:
        """START: restore the state machine from the snapshot, replay the decided log, and
        take part (a fresh founding group elects ``initial_leader`` at once)."""
        self.running = True
        snap = self.log.snapshot
        if snap is not None and snap.slot > 0 and self.restore_fn is not None:
            self.restore_fn(snap.state)
        self._deliver_due()
        self._heard_at = self.env.now()
        self._update_role()
        if (self._fresh and self.role is Role.FOLLOWER
                and self.env.node == self.initial_leader):
            self.leader.campaign()

    def stop(self) -> None:
        self.running = False
        self.leader.stop()
        for timer in (self._suspicion, self._retry):
            if timer is not None:
                self.env.cancel(timer)
        self._suspicion = self._retry = None
        self.env.store.commit()

    # -- requests -------------------------------------------------------------------------

    def propose(self, payload: Any, on_done: OutcomeFn | None = None) -> str:
        """PROPOSE an operation (any JSON value); returns its id. ``on_done`` gets
        ``Committed(slot, index)`` once it is decided, or ``NotCommitted`` at once if there
        are too many proposals in flight here. Any replica takes proposals and forwards them
        to the leader until they are decided; a re-proposed operation is applied once. A
        replica outside the group (not added yet, or removed) refuses at once; one that is
        removed answers its undecided proposals ``NotCommitted(definite=False)``."""
        try:
            size = len(orjson.dumps(payload))
        except orjson.JSONEncodeError as exc:
            raise ConfigError(f"a payload is a JSON value the log can carry: {exc}") from None
        if size > self.config.max_command_bytes:
            raise ConfigError(f"payload of {size} bytes over max_command_bytes="
                              f"{self.config.max_command_bytes}")
        return self._submit("op", payload, on_done)

    def add_replica(self, node: NodeId, on_done: OutcomeFn | None = None) -> str:
        """ADDREPLICA, decided through the log: ``node`` joins the replica set ``window``
        slots after the slot that decides it (build it with ``joining=True``)."""
        return self._submit("add", check_node_id(node), on_done)

    def remove_replica(self, node: NodeId, on_done: OutcomeFn | None = None) -> str:
        """REMOVEREPLICA, decided through the log (the last member is never removed)."""
        return self._submit("remove", check_node_id(node), on_done)

    def _submit(self, kind: str, data: Any, on_done: OutcomeFn | None) -> str:
        if not self.running:
            raise StateError(f"replica {self.env.node} is not running: cannot {kind}")
        cid = f"{self.env.node}:{self._seq.take()}"
        refusal = ("not a member of the group" if self.role is Role.OUTSIDE
                   else "too many proposals in flight"
                   if len(self._mine) >= self.config.max_pending else None)
        if refusal is not None:
            if on_done is not None:
                on_done(NotCommitted(refusal, definite=True))
            return cid
        pending = _Pending((kind, cid, data), on_done, float("-inf"))
        self._mine[cid] = pending
        self._forward([pending])
        return cid

    def _forward(self, pendings: list[_Pending]) -> None:
        now = self.env.now()
        target = self.current_leader
        if self.role is Role.LEADER:
            for pending in pendings:
                pending.sent_at = now
            self.leader.enqueue(tuple(p.command for p in pendings))
        elif target is not None and target != self.env.node:
            step = self.config.max_batch
            for start in range(0, len(pendings), step):
                chunk = pendings[start:start + step]
                for pending in chunk:
                    pending.sent_at = now
                self.env.send(target, Propose(commands=tuple(p.command for p in chunk)))
        if self._mine and self._retry is None:
            self._retry = self.env.set_timer(self.config.propose_retry, self._retry_due)

    def _retry_due(self) -> None:
        self._retry = None
        cutoff = self.env.now() - self.config.propose_retry
        self._forward([p for p in self._mine.values() if p.sent_at <= cutoff])

    # -- inspection -----------------------------------------------------------------------

    @property
    def decided_upto(self) -> int:
        """Every slot up to this one is decided here."""
        return self.log.prefix

    @property
    def members(self) -> frozenset[NodeId]:
        """The replica set of the next undecided slot."""
        return self.log.current_members()

    @property
    def ballot(self) -> Ballot | None:
        return self.acceptor.promised

    @property
    def pending_count(self) -> int:
        return len(self._mine)

    def awaiting(self, proposal_id: str) -> bool:
        """True while this replica's proposal ``proposal_id`` waits for its decision."""
        return proposal_id in self._mine

    def log_rows(self) -> int:
        return len(self.log.rows)

    # -- messages -------------------------------------------------------------------------

    def on_message(self, src: NodeId, msg: Message) -> None:
        if not self.running:
            return
        if src != self.env.node and src not in self.contacts and \
                src not in self.log.known_nodes():
            self.drop(src, "unknown_sender", type=msg.TYPE)
            return
        if isinstance(msg, Prepare | Accept | Noop) and msg.ballot[1] != src:
            self.drop(src, "forged_ballot", type=msg.TYPE)
            return
        if isinstance(msg, Accept):
            self._on_accept(src, msg)
        elif isinstance(msg, AcceptOk):
            self._on_accept_ok(src, msg)
        elif isinstance(msg, Propose):
            if self.role is Role.LEADER:
                self.leader.enqueue(msg.commands)
            else:
                self.drop(src, "not_leader")
        elif isinstance(msg, Noop):
            self._on_noop(src, msg)
        elif isinstance(msg, NoopOk):
            self.leader.on_noop_ok(src, msg)
        elif isinstance(msg, Prepare):
            self._on_prepare(src, msg)
        elif isinstance(msg, PrepareOk):
            self.leader.on_prepare_ok(src, msg)
        elif isinstance(msg, Nack):
            self._on_nack(src, msg)
        elif isinstance(msg, Catchup):
            self._on_catchup(src, msg)
        elif isinstance(msg, Decided):
            self._on_decided(src, msg)
        elif isinstance(msg, Snapshot):
            self._on_snapshot(src, msg)
        else:
            raise InvalidMessage(f"paxos layer got {msg.TYPE}")

    def send(self, dst: NodeId, msg: Message) -> None:
        """Send; to this replica itself, as its next event (never re-entrant)."""
        if dst == self.env.node:
            me = dst
            self.env.set_timer(0.0, lambda: self.on_message(me, msg))
        else:
            self.env.send(dst, msg)

    def drop(self, src: NodeId | None, reason: str, **info: Any) -> None:
        self.env.trace("drop", layer=self.LAYER, peer=src, key=self.group, reason=reason,
                       **info)

    def _old_ballot(self, src: NodeId, ballot: Ballot, kind: str) -> bool:
        """True (and dropped, with a NACK) when ``ballot`` is older than the promise."""
        if not self.acceptor.is_old(ballot):
            return False
        self.drop(src, "old_ballot", type=kind, round=ballot[0])
        self.send(src, self.acceptor.nack())
        return True

    def _observe(self, ballot: Ballot) -> None:
        """A ballot is in use: rounds go above it, and a lower campaign or leadership ends."""
        self.max_round = max(self.max_round, ballot[0])
        own = self.leader.ballot
        if own is not None and ballot > own and self.role in (Role.CANDIDATE, Role.LEADER):
            self.env.trace("step_down", layer=self.LAYER, key=self.group, round=own[0],
                           by=ballot[1])
            self.leader.stop()
            self.role = Role.FOLLOWER
            self._arm_suspicion()

    def _on_prepare(self, src: NodeId, msg: Prepare) -> None:
        if self._old_ballot(src, msg.ballot, msg.TYPE):
            return
        self._observe(msg.ballot)
        reply = self.acceptor.prepare(msg)
        self._heard_at = self.env.now()  # give the candidate time before suspecting it
        self.env.store.commit_then(lambda: self._reply(src, reply))

    def _reply(self, dst: NodeId, msg: Message) -> None:
        if self.running:
            self.send(dst, msg)

    @property
    def horizon(self) -> int:
        """The highest slot this replica takes a value for now: far enough ahead for a lagging
        replica to keep accepting while it catches up, near enough to bound what it holds."""
        return self.log.prefix + self.config.catchup_batch + 4 * self.config.window

    def _on_accept(self, src: NodeId, msg: Accept) -> None:
        if self._old_ballot(src, msg.ballot, msg.TYPE):
            return
        # a current ballot's ACCEPT is word from its leader even when this replica is too far
        # behind to take it: a follower catching up under load must not suspect a leader
        # whose ACCEPTs (and the NOOP queued behind them) it is still reading
        self._observe(msg.ballot)
        self._heard_leader(src, msg.ballot)
        if msg.slot > self.horizon:
            self.drop(src, "too_far", seq=msg.slot)
            # the leader proposes at most `window` slots past its own decided prefix
            self._heard_decided(msg.slot - self.config.window)
            self.request_catchup(src)
            return
        reply = self.acceptor.accept(msg)
        if reply is None:
            self.drop(src, "compacted", seq=msg.slot)
            return
        self.env.trace("accept", layer=self.LAYER, key=self.group, seq=msg.slot,
                       round=msg.ballot[0])
        members = self.log.config_for(msg.slot)
        targets = (members if members is not None else self.log.window_members()
                   or self.contacts) | {src, self.env.node}
        self.env.store.commit_then(lambda: self._send_all(targets, reply))

    def _send_all(self, targets: Iterable[NodeId], msg: Message) -> None:
        if self.running:
            for node in sorted(targets):
                self.send(node, msg)

    def _on_accept_ok(self, src: NodeId, msg: AcceptOk) -> None:
        slot, ballot = msg.slot, msg.ballot
        log = self.log
        if log.is_decided(slot):
            return
        if slot > log.prefix + 4 * self.config.window:
            self.drop(src, "too_far", seq=slot)
            return
        members = log.config_for(slot)
        if members is not None and src not in members:
            self.drop(src, "not_member", seq=slot)
            return
        held = self._votes.get(slot)
        if held is None or ballot > held[0]:
            held = self._votes[slot] = (ballot, set())
        elif ballot < held[0]:
            return
        held[1].add(src)
        self._check_votes(slot)

    def voters(self, slot: int, ballot: Ballot) -> set[str]:
        held = self._votes.get(slot)
        return held[1] if held is not None and held[0] == ballot else set()

    def _check_votes(self, slot: int) -> None:
        held = self._votes.get(slot)
        members = self.log.config_for(slot)
        if held is None or members is None:
            return
        ballot, voters = held
        if len(voters & members) < majority(members):
            return
        value = self.leader.value_of(slot, ballot)
        if value is None:
            row = self.log.rows.get(slot)
            if row is not None and row.accepted_ballot == ballot:
                value = row.accepted_value
        if value is not None:
            self.learn(slot, value)

    def _on_noop(self, src: NodeId, msg: Noop) -> None:
        if self._old_ballot(src, msg.ballot, msg.TYPE):
            return
        self._observe(msg.ballot)
        self._heard_leader(src, msg.ballot)
        self.send(src, NoopOk(ballot=msg.ballot, decided_upto=self.log.prefix))
        self._heard_decided(msg.decided_upto)
        if msg.decided_upto > self.log.prefix or not self.log.knows_configs:
            self.request_catchup(src)

    def _on_nack(self, src: NodeId, msg: Nack) -> None:
        self._observe(msg.promised)

    # -- learning -------------------------------------------------------------------------

    def learn(self, slot: int, value: Batch) -> None:
        """``slot`` is decided with ``value``: record it, apply what became contiguous."""
        if not self.log.learn(slot, value):
            return
        self.env.trace("decide", layer=self.LAYER, key=self.group, seq=slot, n=len(value),
                       digest=digest(value))
        self._after_learn()

    def _after_learn(self) -> None:
        prefix = self.log.prefix
        for slot in [s for s in self._votes if s <= prefix]:
            del self._votes[slot]
        for slot in sorted(self._votes):
            self._check_votes(slot)
        self._update_role()
        self.leader.learned()
        if not self._delivery_due:
            self._delivery_due = True
            self.env.store.commit_then(self._deliver_due)

    def _deliver_due(self) -> None:
        """Hand every decided slot, in order, to the application (once its decision is on
        disk here); answer this replica's proposals; compact behind a snapshot."""
        self._delivery_due = False
        if not self.running:
            return
        log = self.log
        while self.delivered < log.prefix:
            slot = self.delivered + 1
            value = log.decided_value(slot)
            assert value is not None, f"slot {slot} is decided but holds no value"
            self.delivered = slot
            for index, (kind, cid, data) in enumerate(value):
                if cid in self.recent:
                    continue  # proposed twice, decided twice: applied once
                self.recent[cid] = (slot, index)
                if len(self.recent) > self.config.recent_ids:
                    self.recent.popitem(last=False)
                if kind == "op":
                    if self.on_decided is not None:
                        self.on_decided(DecidedOp(slot, index, cid, data))
                elif kind == "add":
                    if self.on_added_replica is not None:
                        self.on_added_replica(slot, data)
                elif self.on_removed_replica is not None:
                    self.on_removed_replica(slot, data)
                pending = self._mine.pop(cid, None)
                if pending is not None and pending.on_done is not None:
                    pending.on_done(Committed(slot, index))
        self._maybe_snapshot()

    def _maybe_snapshot(self) -> None:
        config, log = self.config, self.log
        if (log.snapshot is None or self.snapshot_fn is None or config.snapshot_every == 0
                or self.delivered - log.snapshot.slot < config.snapshot_every):
            return
        slot = self.delivered
        snap = SnapshotRecord(slot, self.snapshot_fn(), log.configs_from(slot + 1),
                              tuple((cid, s, i) for cid, (s, i) in self.recent.items()))
        log.compact(snap, config.log_retain)
        self.env.trace("snapshot", layer=self.LAYER, key=self.group, seq=slot,
                       rows=len(log.rows))

    # -- catch-up and state transfer ------------------------------------------------------

    def _on_decided(self, src: NodeId, msg: Decided) -> None:
        """A CATCHUP's answer (or any DECIDED): learn what fits; while still behind what was
        heard decided, ask ``src`` for the next batch at once. Catching up one batch per
        heartbeat was slower than a loaded leader decides: a follower once behind stayed
        behind for seconds, and its own proposals waited as long to be learnt there."""
        before = self.log.prefix
        for slot, value in msg.entries:
            if slot > self.horizon:
                self.drop(src, "too_far", seq=slot)
                break
            self.learn(slot, value)
            self._heard_decided(slot)
        if self.log.prefix > before and self._known_decided > self.log.prefix:
            self._catchup_at = float("-inf")  # an answer came: the next request is due now
            self.request_catchup(src)

    def _heard_decided(self, slot: int) -> None:
        if slot > self._known_decided:
            self._known_decided = slot

    def request_catchup(self, peer: NodeId) -> None:
        now = self.env.now()
        if now - self._catchup_at < self.config.catchup_retry or peer == self.env.node:
            return
        self._catchup_at = now
        self.send(peer, Catchup(from_slot=self.log.prefix + 1,
                                need_snapshot=not self.log.knows_configs))

    def _on_catchup(self, src: NodeId, msg: Catchup) -> None:
        log = self.log
        start = msg.from_slot
        if msg.need_snapshot or start <= log.floor:
            snap = log.snapshot
            if snap is None:
                self.drop(src, "no_snapshot")
                return
            self.send(src, Snapshot(slot=snap.slot, state=snap.state, configs=snap.configs,
                                    recent_ids=snap.recent_ids))
            start = snap.slot + 1
        entries = log.decided_entries(start, self.config.catchup_batch, DEFAULT_MAX_FRAME // 2)
        if entries:
            self.send(src, Decided(entries=tuple(entries)))
        self.env.trace("catchup", layer=self.LAYER, peer=src, key=self.group, seq=start,
                       n=len(entries))

    def _on_snapshot(self, src: NodeId, msg: Snapshot) -> None:
        log = self.log
        if log.knows_configs and msg.slot <= log.prefix:
            return
        if self.role in (Role.CANDIDATE, Role.LEADER):
            self.leader.stop()
            self.role = Role.FOLLOWER
        snap = SnapshotRecord(msg.slot, msg.state, msg.configs, msg.recent_ids)
        log.install(snap)
        self.recent = collections.OrderedDict(
            (cid, (slot, index)) for cid, slot, index in msg.recent_ids)
        self.delivered = msg.slot
        if msg.slot > 0 and self.restore_fn is not None:
            self.restore_fn(msg.state)
        for cid in [c for c in self._mine if c in self.recent]:
            # decided within the snapshot: answered from the ids it carries
            pending = self._mine.pop(cid)
            if pending.on_done is not None:
                pending.on_done(Committed(*self.recent[cid]))
        self.env.trace("install", layer=self.LAYER, peer=src, key=self.group, seq=msg.slot)
        self._votes.clear()
        self._after_learn()

    # -- leader and membership ------------------------------------------------------------

    def set_leader(self, node: NodeId, ballot: Ballot) -> None:
        """LEADER-CHANGED: ``node`` leads with ``ballot`` (told once per new leader)."""
        if node == self.current_leader:
            return
        self.current_leader = node
        self.env.trace("leader", layer=self.LAYER, key=self.group, peer=node, round=ballot[0])
        if self.on_leader_changed is not None:
            self.on_leader_changed(node, ballot)
        if self._mine:
            self._forward(list(self._mine.values()))

    def _heard_leader(self, src: NodeId, ballot: Ballot) -> None:
        self._heard_at = self.env.now()
        if src != self.env.node:
            self.set_leader(src, ballot)

    def possible_remove(self, node: NodeId) -> None:
        self.env.trace("possible_remove", layer=self.LAYER, key=self.group, peer=node)
        if self.on_possible_remove_replica is not None:
            self.on_possible_remove_replica(node)

    def _update_role(self) -> None:
        member = self.env.node in self.log.current_members()
        if not member and self.role is not Role.OUTSIDE:
            if self.role is Role.LEADER:
                self._hand_off()
            if self.role in (Role.CANDIDATE, Role.LEADER):
                self.leader.stop()
            self.role = Role.OUTSIDE
            self.env.trace("outside", layer=self.LAYER, key=self.group)
            # removed: nobody forwards these any more; decided or not, this replica cannot
            # tell (it stops learning), so the answer is not definite
            mine, self._mine = self._mine, {}
            for pending in mine.values():
                if pending.on_done is not None:
                    pending.on_done(NotCommitted("removed from the group before it was decided",
                                                 definite=False))
        elif member and self.role is Role.OUTSIDE:
            self.role = Role.FOLLOWER
            self._heard_at = self.env.now()
            self._arm_suspicion()
        members = self.log.current_members()
        if (self.role is Role.FOLLOWER and self.current_leader is not None
                and self.current_leader not in members and self.env.node == min(members)):
            # the leader was removed (it steps down now): the lowest member takes over at
            # once instead of waiting to suspect it
            self.env.trace("suspect", layer=self.LAYER, key=self.group,
                           peer=self.current_leader, reason="leader_removed")
            self.leader.campaign()

    def _hand_off(self) -> None:
        """A leader that applied its own removal tells the members its last decisions (its
        removal among them), so they see it go at once, and the lowest of them takes over."""
        log = self.log
        start = max(log.floor + 1, log.prefix - 2 * self.config.window + 1)
        entries = log.decided_entries(start, 2 * self.config.window, DEFAULT_MAX_FRAME // 2)
        if entries:
            self._send_all(log.current_members(), Decided(entries=tuple(entries)))

    def _arm_suspicion(self, wait: float | None = None) -> None:
        """Check on the leader after ``wait`` (default ``suspect_timeout``) and a random
        jitter."""
        if self._suspicion is not None:
            self.env.cancel(self._suspicion)
        config = self.config
        delay = (config.suspect_timeout if wait is None else wait) + self.env.rng.uniform(
            0.0, config.election_jitter)
        self._suspicion = self.env.set_timer(delay, self._suspect)

    def _suspect(self) -> None:
        """No word from the leader for ``suspect_timeout``: campaign (unless leading)."""
        self._suspicion = None
        if not self.running or self.role in (Role.OUTSIDE, Role.LEADER):
            if self.role is Role.LEADER:
                self._arm_suspicion()
            return
        quiet = self.env.now() - self._heard_at
        if self.role is Role.FOLLOWER and quiet < self.config.suspect_timeout:
            # heard from the leader meanwhile: suspect it ``suspect_timeout`` after that word
            self._arm_suspicion(self.config.suspect_timeout - quiet)
            return
        self.env.trace("suspect", layer=self.LAYER, key=self.group, peer=self.current_leader)
        self.leader.campaign()
        self._arm_suspicion()
