"""The proposer side of a Paxos replica: campaign with a higher ballot, recover every slot a
majority member accepted (holes become no-ops), then keep up to ``window`` slots in flight,
each a batch of queued commands, with NOOP heartbeats while it leads.

A ballot is adopted slot by slot: slot s needs PREPARE_OKs from a majority of the replica set
of s, so when a set change brings in members that never promised, they are asked first.
"""

from __future__ import annotations

import collections
from collections.abc import Mapping
from typing import Any, Protocol

import orjson

from ....core.env import Env, TimerHandle
from ....core.ids import NodeId
from ....core.messages import Message
from .config import PaxosConfig, Role
from .log import ReplicaLog, majority
from .messages import Accept, Ballot, Batch, Command, Noop, NoopOk, Prepare, PrepareOk, digest
from .store import PaxosStore

__all__ = ["Leader", "LeaderHost"]


class LeaderHost(Protocol):
    """What a ``Leader`` uses of the replica it serves (``PaxosReplica`` is the one host):
    its role and highest round, which the leader changes, what it reads, and the calls it
    makes back. Typing against this keeps the leader from importing the replica."""

    role: Role
    max_round: int

    @property
    def LAYER(self) -> str: ...
    @property
    def env(self) -> Env: ...
    @property
    def config(self) -> PaxosConfig: ...
    @property
    def group(self) -> str: ...
    @property
    def log(self) -> ReplicaLog: ...
    @property
    def pstore(self) -> PaxosStore: ...
    @property
    def recent(self) -> Mapping[str, tuple[int, int]]: ...
    @property
    def running(self) -> bool: ...

    def send(self, dst: NodeId, msg: Message) -> None: ...
    def drop(self, src: NodeId | None, reason: str, **info: Any) -> None: ...
    def learn(self, slot: int, value: Batch) -> None: ...
    def request_catchup(self, peer: NodeId) -> None: ...
    def set_leader(self, node: NodeId, ballot: Ballot) -> None: ...
    def voters(self, slot: int, ballot: Ballot) -> set[str]: ...
    def possible_remove(self, node: NodeId) -> None: ...


class Leader:
    """Campaign and leadership state of one replica (``host``)."""

    def __init__(self, host: LeaderHost) -> None:
        self.host = host
        self.ballot: Ballot | None = None  # of the campaign or leadership under way
        self.promises: dict[str, int] = {}  # node -> the from_slot its PREPARE_OK covers
        self.recovered: dict[int, tuple[Ballot, Batch]] = {}  # slot -> highest accepted
        self.inflight: dict[int, tuple[Batch, float]] = {}  # slot -> (value, last sent)
        self.queue: collections.deque[Command] = collections.deque()
        self.queued_ids: set[str] = set()  # ids queued or in flight
        self.next_slot = 0
        self.heard: dict[str, float] = {}  # member -> when its NOOP_OK last came
        self.suspected: set[str] = set()  # members reported as possibly to remove
        self.since = 0.0  # when this leadership began
        self._heartbeat: TimerHandle | None = None
        self._tick: TimerHandle | None = None

    # -- campaign -------------------------------------------------------------------------

    def campaign(self) -> None:
        """Start a new ballot, higher than any seen; its round is durable before PREPARE
        leaves, so a restarted replica never uses one of its ballots twice."""
        host = self.host
        self.stop()
        round_ = host.max_round + 1
        host.max_round = round_
        ballot = self.ballot = (round_, host.env.node)
        host.role = Role.CANDIDATE
        host.pstore.save_round(round_)
        host.env.trace("campaign", layer=host.LAYER, key=host.group, round=round_)
        host.env.store.commit_then(lambda: self._send_prepare(ballot))
        self._arm_tick()

    def _send_prepare(self, ballot: Ballot) -> None:
        host = self.host
        if self.ballot != ballot or not host.running:
            return
        prepare = Prepare(ballot=ballot, from_slot=host.log.prefix + 1)
        for member in sorted(host.log.window_members()):
            if member not in self.promises:
                host.send(member, prepare)

    def on_prepare_ok(self, src: str, msg: PrepareOk) -> None:
        host = self.host
        if host.role not in (Role.CANDIDATE, Role.LEADER) or msg.ballot != self.ballot:
            host.drop(src, "stale_prepare_ok")
            return
        for slot, value in msg.decided:
            host.learn(slot, value)
        if msg.truncated or msg.snapshot_slot >= msg.from_slot:
            host.request_catchup(src)  # behind: catch up, then this node is asked again
            return
        for slot, ballot, value in msg.accepted:
            if host.log.is_decided(slot):
                continue
            known = self.recovered.get(slot)
            if known is None or ballot > known[0]:
                self.recovered[slot] = (ballot, value)
        self.promises[src] = msg.from_slot
        if host.role is Role.CANDIDATE:
            members = host.log.current_members()
            if len(members & self.promises.keys()) >= majority(members) and members:
                self._elected()
        else:
            self.fill()

    def _elected(self) -> None:
        host = self.host
        assert self.ballot is not None
        host.role = Role.LEADER
        self.next_slot = host.log.prefix + 1
        self.since = host.env.now()
        self.heard = {}
        self.suspected = set()
        host.env.trace("elected", layer=host.LAYER, key=host.group, round=self.ballot[0],
                       recovered=len(self.recovered))
        host.set_leader(host.env.node, self.ballot)
        self._beat()
        self.fill()

    def stop(self) -> None:
        """Leave the campaign or the leadership: forget everything of this ballot."""
        env = self.host.env
        for timer in (self._heartbeat, self._tick):
            if timer is not None:
                env.cancel(timer)
        self._heartbeat = self._tick = None
        self.ballot = None
        self.promises = {}
        self.recovered = {}
        self.inflight = {}
        self.queue.clear()
        self.queued_ids = set()

    # -- proposing ------------------------------------------------------------------------

    def enqueue(self, commands: Batch) -> None:
        host = self.host
        for command in commands:
            cid = command[1]
            if cid in self.queued_ids or cid in host.recent:
                continue
            if len(self.queue) >= host.config.max_queue:
                host.drop(None, "queue_full", id=cid)
                continue
            self.queue.append(command)
            self.queued_ids.add(cid)
        self.fill()

    def _take_batch(self) -> Batch:
        config = self.host.config
        batch: list[Command] = []
        size = 0
        while self.queue and len(batch) < config.max_batch:
            size += len(orjson.dumps(self.queue[0]))
            if batch and size > config.max_batch_bytes:
                break
            batch.append(self.queue.popleft())
        return tuple(batch)

    def fill(self) -> None:
        """Propose into every free slot of the window that this ballot may use."""
        host = self.host
        log = host.log
        if host.role is not Role.LEADER:
            return
        for slot in [s for s in self.recovered if log.is_decided(s)]:
            del self.recovered[slot]
        self.next_slot = max(self.next_slot, log.prefix + 1)
        while self.next_slot <= log.prefix + host.config.window:
            slot = self.next_slot
            if log.is_decided(slot) or slot in self.inflight:
                self.next_slot += 1
                continue
            members = log.config_for(slot)
            if members is None:
                return
            if len(members & self.promises.keys()) < majority(members):
                self._prepare_missing(members)
                return
            recovered = self.recovered.pop(slot, None)
            if recovered is not None:
                value = recovered[1]
            elif self.queue:
                value = self._take_batch()
            elif self.recovered and slot < max(self.recovered):
                value = ()  # a hole below a recovered slot: fill it with a no-op
            elif (change := log.next_change()) is not None and slot < change:
                # a decided replica set change applies ``window`` slots later: no-ops bring
                # it in when nothing else is proposed (an idle group would keep the old set)
                value = ()
            else:
                return
            self._propose(slot, value, members)
            self.next_slot += 1

    def _propose(self, slot: int, value: Batch, members: frozenset[str]) -> None:
        host = self.host
        assert self.ballot is not None
        self.inflight[slot] = (value, host.env.now())
        self.queued_ids.update(cid for _kind, cid, _data in value)
        host.env.trace("propose", layer=host.LAYER, key=host.group, seq=slot, n=len(value),
                       digest=digest(value), round=self.ballot[0])
        accept = Accept(ballot=self.ballot, slot=slot, value=value)
        for member in sorted(members):
            host.send(member, accept)

    def _prepare_missing(self, members: frozenset[str]) -> None:
        host = self.host
        assert self.ballot is not None
        prepare = Prepare(ballot=self.ballot, from_slot=host.log.prefix + 1)
        for member in sorted(members - self.promises.keys()):
            host.send(member, prepare)

    def learned(self) -> None:
        """Slots were decided: free their window places and propose more."""
        log = self.host.log
        for slot in [s for s in self.inflight if log.is_decided(s)]:
            value, _sent = self.inflight.pop(slot)
            self.queued_ids.difference_update(cid for _kind, cid, _data in value)
        self.fill()

    def value_of(self, slot: int, ballot: Ballot) -> Batch | None:
        entry = self.inflight.get(slot)
        return entry[0] if entry is not None and ballot == self.ballot else None

    # -- timers ---------------------------------------------------------------------------

    def _arm_tick(self) -> None:
        host = self.host
        self._tick = host.env.set_timer(host.config.accept_retry, self._on_tick)

    def _on_tick(self) -> None:
        """ACCEPT again what is not decided yet; PREPARE again whoever did not answer."""
        host = self.host
        self._tick = None
        if self.ballot is None:
            return
        now = host.env.now()
        if host.role is Role.CANDIDATE:
            self._send_prepare(self.ballot)
        else:
            for slot, (value, sent) in sorted(self.inflight.items()):
                if now - sent < host.config.accept_retry:
                    continue
                members = host.log.config_for(slot) or frozenset()
                voted = host.voters(slot, self.ballot)
                accept = Accept(ballot=self.ballot, slot=slot, value=value)
                for member in sorted(members - voted):
                    host.send(member, accept)
                self.inflight[slot] = (value, now)
            self.fill()
        self._arm_tick()

    def _beat(self) -> None:
        """NOOP to every member (and spot the members that stopped answering)."""
        host = self.host
        self._heartbeat = None
        if host.role is not Role.LEADER or self.ballot is None:
            return
        noop = Noop(ballot=self.ballot, decided_upto=host.log.prefix)
        now = host.env.now()
        me = host.env.node
        for member in sorted(host.log.window_members() - {me}):
            host.send(member, noop)
            last = self.heard.get(member, self.since)
            if (now - last >= host.config.possible_remove_after
                    and member not in self.suspected):
                self.suspected.add(member)
                host.possible_remove(member)
        self._heartbeat = host.env.set_timer(host.config.heartbeat_interval, self._beat)

    def on_noop_ok(self, src: str, msg: NoopOk) -> None:
        host = self.host
        if host.role is not Role.LEADER or msg.ballot != self.ballot:
            return
        self.heard[src] = host.env.now()
        self.suspected.discard(src)
        if msg.decided_upto > host.log.prefix:
            host.request_catchup(src)
