"""Atomic delivery over SRM (seed 004, section 6): a two-phase commit whose every step is an
SRM item, so a lost vote or outcome is repaired like data, from whoever holds it.

The sender snapshots the group and multicasts the data; each snapshot member writes it durably
(committed through ``env.store`` before anything depends on it) and votes YES, or NO when it
cannot keep it. All YES within the atomic period: the sender writes CONFIRM durably and
multicasts it with the snapshot; a NO, the deadline, or a snapshot member booted first: ABORT.
A member delivers on CONFIRM only if it is in the snapshot and holds the data; delivery is
marked durably before the application hears it, so a restart never delivers twice.

Termination (the seed leaves the sender's crash open). Only the sender decides, and it writes
its decision before it sends it, so two outcomes of one message never exist. A NO from any
snapshot member makes ABORT certain (its voter writes the ABORT before the NO leaves, so it
never votes YES for that message, even after a restart that brings the data again), so
whoever sees a NO vote may abort at once; a snapshot
member that gets the data only after the sender was booted votes NO (the sender cannot have
committed without its YES). A member holding a pending message with no outcome asks the group
(``OutcomeQuery``) every few session periods; whoever keeps the outcome durably answers, the
nearest first (the others suppressed). A sender that restarts aborts what it had not decided,
and answers queries about messages of its own it has no record of with ABORT. The one blocking
case: every snapshot member voted YES and the sender crashed before anyone learned its
decision; then the members wait (their data kept durably) until the sender recovers.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import orjson

from ....core.env import Env, TimerHandle, encode_datagram, get_json, put_json
from ....core.errors import ConfigError, InvalidMessage, StateError
from ....core.ids import NodeId
from ....core.messages import Message
from ...dissemination.srm import Srm, SrmData, SrmSession
from ...membership.srm_group import SrmGroup
from .records import (
    Data,
    Item,
    Outcome,
    OutcomeAnswer,
    OutcomeQuery,
    Vote,
    item_of,
    origin_of,
    payload_of,
    seq_of,
)

__all__ = ["LAYER", "AtomicConfig", "AtomicMember"]

LAYER = "atomic"
_SENT, _PENDING, _OUTCOME, _DELIVERED, _ITEMS, _COLLECTED, _LEFT = (
    "atomic.sent", "atomic.pending", "atomic.outcome", "atomic.delivered", "atomic.items",
    "atomic.collected", "atomic.left")
_INBOX, _INBOX_ACKED = "atomic.inbox", "atomic.inbox_acked"
MAX_LEFT = 4096  # members remembered as gone for good (a LEAVE heard), the oldest forgotten

#: ``(mid, origin, body, position)``: ``position`` is the delivery's place in the inbox (from
#: 1, never reused), or None when the member keeps no inbox
DeliverFn = Callable[[str, str, Any, "int | None"], None]
OutcomeFn = Callable[[str, bool], None]


def _position_key(position: int) -> str:
    return f"{position:020d}"  # keys sort as the positions do


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class AtomicConfig:
    """``atomic_periods``: session periods the sender waits for every vote; ``query_periods``:
    session periods a pending message waits for its outcome before asking; ``max_pending``:
    messages a member holds undecided (more: it votes NO); ``max_outcomes``: outcomes kept
    durably (the oldest go first; most go well before, once no member needs them);
    ``collect_scan``: outcomes looked at per session period for letting go.

    ``inbox``: the application acknowledges what it handled (``AtomicMember.acknowledge``).
    Each delivery is then written to a durable inbox in the same commit as its delivery mark,
    numbered by its position, and kept until acknowledged; a restart hands over again, in
    order and with the same positions, every delivery not acknowledged. An application that
    records the position it handled in its own transaction handles each message exactly once
    even when killed between the mark and its own commit. ``max_inbox``: deliveries held
    unacknowledged (with the messages pending; more: the member votes NO). Without an inbox a
    delivery counts as handled once ``on_deliver`` returns (a kill -9 between the mark's
    commit and the application's own loses it to the application)."""

    atomic_periods: float = 5.0
    query_periods: float = 3.0
    max_pending: int = 10_000
    max_sending: int = 1_000
    max_outcomes: int = 100_000
    collect_scan: int = 1_000
    inbox: bool = False
    max_inbox: int = 10_000

    def __post_init__(self) -> None:
        if not (self.atomic_periods > 0 and self.query_periods > 0):
            raise ConfigError(f"periods must be > 0, got {self}")
        if min(self.max_pending, self.max_sending, self.max_outcomes, self.collect_scan,
               self.max_inbox) < 1:
            raise ConfigError(f"bounds must be >= 1, got {self}")


class _Ballot:
    """A message this member sent and has not decided: its snapshot and the votes so far."""

    __slots__ = ("deadline", "snapshot", "yes")

    def __init__(self, snapshot: tuple[NodeId, ...], deadline: TimerHandle | None) -> None:
        self.snapshot = snapshot
        self.yes: set[NodeId] = set()
        self.deadline = deadline


class AtomicMember:
    """One member's atomic layer over ``srm`` and ``group``. ``send(body)`` returns the
    message id; ``on_outcome(mid, committed)`` tells the sender; ``on_deliver(mid, origin,
    body, position)`` delivers confirmed messages, once (with ``AtomicConfig.inbox``: again
    after a restart until ``acknowledge(position)``); ``on_vote(mid, yes)`` hears each vote of this
    member once it has left (a YES: after its write of the message is on disk)."""

    def __init__(self, env: Env, srm: Srm, group: SrmGroup,
                 config: AtomicConfig | None = None) -> None:
        self.env = env
        self.srm = srm
        self.group = group
        self.config = config if config is not None else AtomicConfig()
        self.on_deliver: DeliverFn = lambda mid, origin, body, position: None
        self.on_outcome: OutcomeFn = lambda mid, committed: None
        self.on_vote: OutcomeFn = lambda mid, yes: None  # this member's vote has left
        self.refuse: Callable[[str], bool] = lambda mid: False  # a test's "disk full"
        self._ballots: dict[str, _Ballot] = {}
        self._marked: list[tuple[str, Any]] = []  # marked delivered, the commit to come
        self._deciding: dict[str, Outcome] = {}  # decided, its record not yet on disk
        self._pending: dict[str, Data] = {}
        self._outcomes: OrderedDict[str, tuple[bool, tuple[str, ...]]] = OrderedDict()
        self._item_keys: OrderedDict[str, str] = OrderedDict()  # durable outcome item -> mid
        self._item_of: dict[str, str] = {}  # mid -> its durable outcome item
        self._marks: dict[NodeId, dict[str, int]] = {}  # each member's resolved marks
        self._collected: dict[str, int] = {}  # per source: outcomes up to it let go (durable)
        self._left: OrderedDict[NodeId, None] = OrderedDict()  # left for good (durable)
        self._mark_rotation = 0
        self._collect_timer: TimerHandle | None = None
        self._query_timers: dict[str, TimerHandle] = {}
        self._answer_timers: dict[str, TimerHandle] = {}
        self._booted: set[NodeId] = set()
        self._acked = 0  # inbox: positions up to it acknowledged (durable)
        self._next_position = 1  # inbox: the next delivery's position
        self._handed = 0  # inbox: the highest position handed to the application
        self._unacked = 0  # inbox: deliveries not acknowledged
        srm.on_deliver = self._item_arrived
        srm.holder = self._durable_item
        srm.resolved = self._resolved_marks
        group.on_change = self._member_changed
        group.on_session = self._session_heard

    # -- life ----------------------------------------------------------------------------

    def start(self) -> None:
        """Reload what the store kept: outcomes, pending messages (their outcome is asked
        for) and this sender's undecided messages (aborted: it cannot know what it missed)."""
        store = self.env.store
        for mid, raw in store.scan(_OUTCOME):
            record = orjson.loads(raw)
            self._outcomes[mid] = (bool(record["commit"]), tuple(record["snap"]))
        for key, raw in store.scan(_ITEMS):
            mid = orjson.loads(raw)["mid"]
            self._item_keys[key] = mid
            self._item_of[mid] = key
        for source, raw in store.scan(_COLLECTED):
            self._collected[source] = int(orjson.loads(raw))
        for member, _ in store.scan(_LEFT):
            self._left[member] = None
        for mid, raw in store.scan(_PENDING):
            record = orjson.loads(raw)
            self._pending[mid] = Data(mid, tuple(record["snap"]), record["body"])
            self.env.trace("reload", layer=LAYER, msg=mid, origin=origin_of(mid))
            self._ask_later(mid, first=True)
        for mid, raw in store.scan(_SENT):
            if mid not in self._outcomes:
                self._decide(mid, False, tuple(orjson.loads(raw)["snap"]), "restarted")
        for mid in [mid for mid in self._pending if mid in self._outcomes]:
            # decided here and on disk, not yet applied when the process died (a sender's own
            # message: its decision and its delivery are two commits): nobody will tell us
            commit, snapshot = self._outcomes[mid]
            self._apply(Outcome(mid, commit, snapshot))
        self._collect_timer = self.env.set_timer(self.period, self._collect)
        self._hand_over_inbox()

    def stop(self) -> None:
        if self._marked:  # a clean stop delivers what it marked (the env drops its timers)
            self._deliver_marked()
        for timer in [*self._query_timers.values(), *self._answer_timers.values()]:
            self.env.cancel(timer)
        if self._collect_timer is not None:
            self.env.cancel(self._collect_timer)
            self._collect_timer = None
        for ballot in self._ballots.values():
            if ballot.deadline is not None:
                self.env.cancel(ballot.deadline)

    # -- sending -------------------------------------------------------------------------

    @property
    def period(self) -> float:
        return self.srm.config.session_period

    def send(self, body: Any) -> str:
        """Multicast ``body`` atomically to the group as it is now; returns its id. Raises
        ``DatagramTooLarge`` (nothing sent) when it does not fit one datagram, ``ConfigError``
        when it is not JSON (a set, bytes, an int over 64 bits, nested too deep), and
        ``StateError`` when ``max_sending`` messages are still undecided or the inbox is
        full."""
        undecided = len(self._ballots) + len(self._deciding)
        if undecided >= self.config.max_sending:
            raise StateError(f"{undecided} messages still undecided: wait")
        if not self._inbox_has_room():  # the sender delivers its own message too
            raise StateError(f"{self._unacked} deliveries not acknowledged (max_inbox "
                             f"{self.config.max_inbox}): acknowledge first")
        snapshot = self.group.members()
        mid = f"{self.env.node}:{self.srm.highest_sent + 1}"
        item = Data(mid, snapshot, body)
        try:
            encode_datagram(SrmData(self.env.node, self.srm.highest_sent + 1, payload_of(item)))
        except (TypeError, RecursionError) as exc:  # orjson's JSONEncodeError is a TypeError
            raise ConfigError(f"the body is not a JSON value that can be sent: {exc}") from None
        put_json(self.env.store, _SENT, mid, {"snap": list(snapshot)})
        put_json(self.env.store, _PENDING, mid, {"snap": list(snapshot), "body": body})
        # no commit waits here: these records ride with the next group commit. A sender that
        # restarts without them aborts the message all the same (a vote or a query for a
        # message of its own it has no record of), and its CONFIRM, committed after them,
        # can only leave once they are on disk too.
        self._pending[mid] = item
        seq = self.srm.multicast(payload_of(item))
        if f"{self.env.node}:{seq}" != mid:
            raise StateError(f"srm numbered {mid} as {seq}")
        self.env.trace("publish", layer=LAYER, msg=mid, origin=self.env.node,
                       key=self.srm.config.group, seq=seq, snapshot=list(snapshot))
        deadline = self.env.set_timer(self.config.atomic_periods * self.period,
                                      lambda: self._deadline(mid))
        ballot = self._ballots[mid] = _Ballot(snapshot, deadline)
        ballot.yes.add(self.env.node)  # the sender holds its own message
        self._count(mid)
        return mid

    def _count(self, mid: str) -> None:
        ballot = self._ballots.get(mid)
        if ballot is not None and ballot.yes.issuperset(ballot.snapshot):
            self._decide(mid, True, ballot.snapshot, "all_yes")

    def _deadline(self, mid: str) -> None:
        ballot = self._ballots.get(mid)
        if ballot is not None:
            ballot.deadline = None
            missing = sorted(set(ballot.snapshot) - ballot.yes)
            self._decide(mid, False, ballot.snapshot, "deadline", missing=missing)

    def _decide(self, mid: str, commit: bool, snapshot: tuple[str, ...], why: str,
                **info: Any) -> None:
        """The sender's decision: durable first (a group commit), then multicast as an SRM
        item, told to the sender's application and applied here. Until it is on disk the
        decision is ``_deciding``: no query is answered from it and nothing decides again."""
        if mid in self._deciding or mid in self._outcomes:
            return
        ballot = self._ballots.pop(mid, None)
        if ballot is not None and ballot.deadline is not None:
            self.env.cancel(ballot.deadline)
        self.env.store.delete(_SENT, mid)
        outcome = self._deciding[mid] = Outcome(mid, commit, snapshot)
        self._write_outcome(outcome)
        self.env.store.commit_then(lambda: self._decided(outcome, why, info))

    def _decided(self, outcome: Outcome, why: str, info: dict[str, Any]) -> None:
        mid = outcome.mid
        del self._deciding[mid]
        self._remember_outcome(outcome)
        seq = self.srm.multicast(payload_of(outcome))
        self._keep_item(seq, outcome)
        self.env.trace("commit" if outcome.commit else "abort", layer=LAYER, msg=mid,
                       origin=origin_of(mid), key=self.srm.config.group,
                       snapshot=list(outcome.snapshot), why=why, **info)
        self.on_outcome(mid, outcome.commit)
        self._apply(outcome)

    # -- receiving -----------------------------------------------------------------------

    def on_message(self, src: NodeId, msg: Message) -> bool:
        if isinstance(msg, OutcomeQuery):
            self._query_heard(msg)
        elif isinstance(msg, OutcomeAnswer):
            timer = self._answer_timers.pop(msg.mid, None)
            if timer is not None:  # answered by someone nearer
                self.env.cancel(timer)
            if not self.group.is_member(msg.answerer):
                self._drop(msg.mid, msg.answerer, "not_member")
                return True
            self._learn(Outcome(msg.mid, msg.commit, msg.snapshot), msg.answerer)
        else:
            return False
        return True

    def _drop(self, mid: str | None, peer: str, reason: str) -> None:
        self.env.trace("drop", layer=LAYER, msg=mid, peer=peer, reason=reason)

    def _item_arrived(self, source: str, seq: int, payload: Any) -> None:
        try:
            item = item_of(payload)
        except InvalidMessage as exc:
            self.env.trace("drop", layer=LAYER, peer=source, reason=exc.reason, error=str(exc))
            return
        if not (self.group.is_member(source)
                or (isinstance(item, Outcome) and source == origin_of(item.mid))):
            # (an outcome from its own sender counts even before the sender's rejoin is heard)
            self._drop(item.mid, source, "not_member")
            return
        if isinstance(item, Data):
            self._data(source, seq, item)
        elif isinstance(item, Vote):
            self._vote(source, item)
        else:
            self._keep_item(seq, item, source)
            self._learn(item, source)

    def _data(self, source: str, seq: int, data: Data) -> None:
        if data.mid != f"{source}:{seq}":
            self._drop(data.mid, source, "forged_id")
            return
        mid = data.mid
        if (mid in self._pending or mid in self._outcomes
                or self.env.store.get(_DELIVERED, mid) is not None):
            self._drop(mid, source, "replay")
            return
        if seq_of(mid) <= self._collected.get(source, 0):
            self._drop(mid, source, "collected")  # decided, and let go by everyone
            return
        if self.env.node not in data.snapshot:
            self._drop(mid, source, "not_in_snapshot")
            return
        yes = (len(self._pending) < self.config.max_pending and not self.refuse(mid)
               and source not in self._booted and self._inbox_has_room())
        if yes:
            self._pending[mid] = data
            put_json(self.env.store, _PENDING, mid, {"snap": list(data.snapshot),
                                                     "body": data.body})
        vote = Vote(mid, self.env.node, yes)
        if yes:
            # the data is on disk before the YES leaves (group commit: the vote waits for it)
            self.env.store.commit_then(lambda: self._cast(vote))
            self._ask_later(mid, first=False)
            return
        # a NO is this member's ABORT for good: written before the NO leaves, so a restart
        # that is sent the data again never votes YES (whoever saw the NO has aborted), and
        # answered to queries only once it is on disk
        outcome = Outcome(mid, False, data.snapshot)
        self._write_outcome(outcome)

        def refused() -> None:
            self._remember_outcome(outcome)
            self._cast(vote)

        self.env.store.commit_then(refused)

    def _cast(self, vote: Vote) -> None:
        self.srm.multicast(payload_of(vote))
        self.env.trace("vote", layer=LAYER, msg=vote.mid, origin=origin_of(vote.mid),
                       yes=vote.yes)
        self.on_vote(vote.mid, vote.yes)

    def _vote(self, source: str, vote: Vote) -> None:
        if vote.voter != source:
            self._drop(vote.mid, source, "forged_voter")
            return
        ballot = self._ballots.get(vote.mid)
        if ballot is not None and source not in ballot.snapshot:
            self._drop(vote.mid, source, "not_in_snapshot")
            return
        if not vote.yes:  # a NO makes ABORT certain: anyone may apply it
            if ballot is not None:
                self._decide(vote.mid, False, ballot.snapshot, "no", voter=source)
            elif vote.mid in self._pending and vote.mid not in self._outcomes:
                data = self._pending[vote.mid]
                self._learn(Outcome(vote.mid, False, data.snapshot), source)
            return
        if ballot is not None:
            ballot.yes.add(source)
            self._count(vote.mid)
        elif (origin_of(vote.mid) == self.env.node and vote.mid not in self._outcomes
              and vote.mid not in self._deciding and not self._let_go(vote.mid, source)):
            # a vote for a message of ours we have no record of: sent before a crash
            self._decide(vote.mid, False, (self.env.node, source), "restarted")

    def _learn(self, outcome: Outcome, source: str) -> None:
        if outcome.mid in self._outcomes or outcome.mid in self._deciding:
            return
        self._keep_outcome(outcome)
        self._apply(outcome)

    def _apply(self, outcome: Outcome) -> None:
        """Act on a decision: deliver (once, durably marked first) or drop the data."""
        mid = outcome.mid
        timer = self._query_timers.pop(mid, None)
        if timer is not None:
            self.env.cancel(timer)
        data = self._pending.pop(mid, None)
        store = self.env.store
        if data is None or not outcome.commit or self.env.node not in outcome.snapshot:
            store.delete(_PENDING, mid)
            held = data is not None
            store.commit_then(lambda: self._discarded(mid, outcome.commit, held))
            return
        # the store is not touched until the delivery's own turn: another group commit landing
        # in between (a YES of another message) would carry a mark, and a crash after it would
        # leave a message marked delivered, not pending, that the application never heard
        self._marked.append((mid, data.body))
        if len(self._marked) == 1:
            self.env.set_timer(0.0, self._deliver_marked)

    def _deliver_marked(self) -> None:
        """Commit the delivery marks of this turn, waiting for it, then deliver each at once.

        Not ``commit_then``: its callback runs a loop turn after the group is on disk, and a
        crash in between (a kill -9 a few milliseconds after a YES, in a real run) left a
        message marked delivered that the application never heard, lost for good. Here nothing
        runs between the commit returning and the deliveries; the marks of one turn still
        share one commit."""
        marked, self._marked = self._marked, []
        store = self.env.store
        positions: list[int | None] = []
        for mid, body in marked:
            store.delete(_PENDING, mid)
            store.put(_DELIVERED, mid, b"1")
            positions.append(self._into_inbox(mid, body) if self.config.inbox else None)
        store.commit()
        for (mid, body), position in zip(marked, positions, strict=True):
            if position is not None:
                self._handed = position
            self._delivered(mid, origin_of(mid), body, position)

    def _discarded(self, mid: str, commit: bool, held: bool) -> None:
        """The outcome and the removal of the pending data are on disk."""
        if held:
            self.env.trace("discard", layer=LAYER, msg=mid, origin=origin_of(mid),
                           commit=commit)

    def _delivered(self, mid: str, origin: str, body: Any, position: int | None) -> None:
        if position is None:
            self.env.trace("deliver", layer=LAYER, msg=mid, origin=origin,
                           key=self.srm.config.group)
        else:
            self.env.trace("deliver", layer=LAYER, msg=mid, origin=origin,
                           key=self.srm.config.group, position=position)
        self.on_deliver(mid, origin, body, position)

    # -- the inbox (``AtomicConfig.inbox``) ----------------------------------------------

    def _inbox_has_room(self) -> bool:
        """Whether a YES now keeps the inbox within ``max_inbox`` (every pending message may
        end in it)."""
        return (not self.config.inbox or self._unacked + len(self._pending) + len(self._marked)
                < self.config.max_inbox)

    def _into_inbox(self, mid: str, body: Any) -> int:
        position = self._next_position
        self._next_position += 1
        self._unacked += 1
        put_json(self.env.store, _INBOX, _position_key(position), {"mid": mid, "body": body})
        return position

    def _hand_over_inbox(self) -> None:
        """After a restart: hand over again, in order, every delivery not acknowledged (traced
        ``redeliver``: the protocol's delivery happened once, in the earlier life)."""
        if not self.config.inbox:
            return
        store = self.env.store
        raw = store.get(_INBOX_ACKED, "acked")
        self._acked = 0 if raw is None else int(orjson.loads(raw))
        self._next_position = self._acked + 1
        entries = [(int(key), orjson.loads(value)) for key, value in store.scan(_INBOX)]
        for position, entry in entries:
            if position <= self._acked:  # acknowledged, its removal lost with the crash
                store.delete(_INBOX, _position_key(position))
                continue
            self._next_position = position + 1
            self._unacked += 1
            mid = entry["mid"]
            self.env.trace("redeliver", layer=LAYER, msg=mid, origin=origin_of(mid),
                           key=self.srm.config.group, position=position)
            self._handed = position
            self.on_deliver(mid, origin_of(mid), entry["body"], position)

    def acknowledge(self, position: int) -> None:
        """The application has handled every delivery up to ``position``: they leave the
        inbox (durably with the next group commit; a crash before it hands them over again,
        with the same positions). Acknowledging a position again, or an older one, does
        nothing. Raises ``StateError`` without an inbox, and ``ValueError`` for a position
        not handed over yet."""
        if not self.config.inbox:
            raise StateError("this member keeps no inbox (AtomicConfig.inbox is off)")
        if position > self._handed:
            raise ValueError(f"position {position} not delivered yet (the last handed over "
                             f"is {self._handed})")
        if position <= self._acked:
            return
        store = self.env.store
        for old in range(self._acked + 1, position + 1):
            store.delete(_INBOX, _position_key(old))
        self._unacked -= position - self._acked
        self._acked = position
        put_json(store, _INBOX_ACKED, "acked", position)
        store.commit_then(lambda: None)

    @property
    def unacknowledged(self) -> int:
        """Deliveries in the inbox the application has not acknowledged."""
        return self._unacked

    # -- durable outcomes and their repair -----------------------------------------------

    def _keep_outcome(self, outcome: Outcome) -> None:
        self._write_outcome(outcome)
        self._remember_outcome(outcome)

    def _write_outcome(self, outcome: Outcome) -> None:
        put_json(self.env.store, _OUTCOME, outcome.mid,
                 {"commit": outcome.commit, "snap": list(outcome.snapshot)})

    def _remember_outcome(self, outcome: Outcome) -> None:
        self._outcomes[outcome.mid] = (outcome.commit, outcome.snapshot)
        while len(self._outcomes) > self.config.max_outcomes:
            old, _ = self._outcomes.popitem(last=False)
            self.env.store.delete(_OUTCOME, old)
            if origin_of(old) == self.env.node:
                # one of ours, decided: a vote or query for it later must not be taken for
                # one we never decided (an ABORT now could contradict its CONFIRM)
                self._let_go_of(old)

    def _let_go(self, mid: str, peer: str) -> bool:
        """Whether ``mid``, ours with no record here, may have been decided and let go (its
        seq is at most the highest of ours let go, as the oldest or as collected): then
        nobody here decides it again."""
        if seq_of(mid) > self._collected.get(self.env.node, 0):
            return False
        self._drop(mid, peer, "forgotten")
        return True

    def _keep_item(self, seq: int, outcome: Item, source: str | None = None) -> None:
        """Keep an outcome item durably under its SRM name, so a request for it is answered
        when SRM's bounded cache has dropped it (as many as outcomes, the oldest go first)."""
        key = f"{source or self.env.node}:{seq}"
        put_json(self.env.store, _ITEMS, key, payload_of(outcome))
        self._item_keys[key] = outcome.mid
        self._item_keys.move_to_end(key)
        self._item_of[outcome.mid] = key
        while len(self._item_keys) > self.config.max_outcomes:
            old, mid = self._item_keys.popitem(last=False)
            self._item_of.pop(mid, None)
            self.env.store.delete(_ITEMS, old)

    def _durable_item(self, source: str, seq: int) -> Any:
        return get_json(self.env.store, _ITEMS, f"{source}:{seq}")

    def _ask_later(self, mid: str, *, first: bool) -> None:
        delay = (0.5 if first else self.config.query_periods) * self.period
        delay *= 1 + self.env.rng.random()
        old = self._query_timers.pop(mid, None)
        if old is not None:
            self.env.cancel(old)
        self._query_timers[mid] = self.env.set_timer(delay, lambda: self._ask(mid))

    def _ask(self, mid: str) -> None:
        self._query_timers.pop(mid, None)
        if mid not in self._pending:
            return
        self.env.multicast(self.srm.config.group, OutcomeQuery(self.env.node, mid))
        self._ask_later(mid, first=False)

    def _query_heard(self, query: OutcomeQuery) -> None:
        mid = query.mid
        if mid in self._answer_timers:
            return
        known = self._outcomes.get(mid)
        if known is None:
            if (origin_of(mid) == self.env.node and mid not in self._ballots
                    and mid not in self._deciding and not self._let_go(mid, query.asker)):
                # ours, and we kept no record: we never decided it, so it is aborted
                self._decide(mid, False, (self.env.node, query.asker), "restarted")
            return
        d = self.srm.distance(query.asker)
        delay = d * (1 + self.env.rng.random())
        self._answer_timers[mid] = self.env.set_timer(delay, lambda: self._answer(mid))

    def _answer(self, mid: str) -> None:
        self._answer_timers.pop(mid, None)
        known = self._outcomes.get(mid)
        if known is not None:
            self.env.multicast(self.srm.config.group,
                               OutcomeAnswer(self.env.node, mid, known[0], known[1]))

    # -- letting outcomes go --------------------------------------------------------------

    def _own_marks(self) -> dict[str, int]:
        """Per source heard of, the seq up to which this member needs nothing more: every
        item up to it arrived (or was given up) and none of its messages is undecided here."""
        lowest: dict[str, int] = {}
        for mid in [*self._pending, *(mid for mid, _ in self._marked)]:
            source, seq = origin_of(mid), seq_of(mid)
            if seq < lowest.get(source, seq + 1):
                lowest[source] = seq
        marks = {}
        for source in self.srm.sources():
            mark = self.srm.settled(source)
            if source in lowest:
                mark = min(mark, lowest[source] - 1)
            marks[source] = max(mark, 0)
        return marks

    def _resolved_marks(self) -> list[tuple[str, int]]:
        """This member's marks for its next session message, a different slice each time
        when they do not all fit."""
        marks = sorted(self._own_marks().items())
        start = self._mark_rotation % max(len(marks), 1)
        self._mark_rotation += self.srm.config.max_resolved_entries
        return marks[start:] + marks[:start]

    def _session_heard(self, src: NodeId, session: SrmSession) -> None:
        if not session.resolved or not self.group.is_member(src):
            return
        if src not in self._marks:
            while len(self._marks) >= 2 * self.group.config.max_members:
                gone = next((m for m in self._marks
                             if not self.group.is_member(m) and m not in self._booted), None)
                if gone is None:
                    return
                del self._marks[gone]
        marks = self._marks.setdefault(src, {})
        for source, seq in session.resolved:
            if source in marks or len(marks) < self.srm.config.max_sources:
                marks[source] = max(marks.get(source, 0), seq)

    def _collect(self) -> None:
        """Let go of the oldest outcomes that no member may still need: every member of the
        group, and every booted one (it may recover), says it needs nothing of that source
        up to the outcome's data and its SRM item, and so do the outcome's snapshot members
        (unless a LEAVE of theirs was heard: after a restart the view is empty for a while,
        and the members that voted are the ones that may need it) and this member. A member
        that has said nothing yet holds everything back."""
        self._collect_timer = self.env.set_timer(self.period, self._collect)
        waiting = set(self.group.members()) | self._booted
        waiting.discard(self.env.node)
        own = self._own_marks()
        floors: dict[str, int] = {}

        def mark(member: NodeId, source: str) -> int:
            return self._marks.get(member, {}).get(source, 0)

        def floor(source: str) -> int:
            if source not in floors:
                floors[source] = min([own.get(source, 0)] + [mark(m, source) for m in waiting])
            return floors[source]

        let_go = []
        for mid, (_, snapshot) in itertools.islice(self._outcomes.items(),
                                                   self.config.collect_scan):
            source = origin_of(mid)
            key = self._item_of.get(mid)
            needed = max(seq_of(mid),
                         seq_of(key) if key is not None and origin_of(key) == source else 0)
            if needed <= floor(source) and all(
                    mark(m, source) >= needed for m in snapshot
                    if m != self.env.node and m not in waiting and m not in self._left):
                let_go.append(mid)
        store = self.env.store
        for mid in let_go:
            del self._outcomes[mid]
            store.delete(_OUTCOME, mid)
            # its delivery mark too: the per-source record below refuses the data from now on
            # (the two ride one group commit), so the marks do not grow with every message
            store.delete(_DELIVERED, mid)
            key = self._item_of.pop(mid, None)
            if key is not None:
                self._item_keys.pop(key, None)
                store.delete(_ITEMS, key)
        for mid in let_go:
            self._let_go_of(mid)

    def _let_go_of(self, mid: str) -> None:
        """Record that ``mid``'s outcome was let go: the highest seq let go per source, not a
        floor (after a restart the view is empty for a while and a floor says little); a
        message under it that is still here is a replay, and one never decided here was
        never this member's to keep."""
        source, seq = origin_of(mid), seq_of(mid)
        if seq > self._collected.get(source, 0):
            self._collected[source] = seq
            put_json(self.env.store, _COLLECTED, source, seq)

    # -- the group -----------------------------------------------------------------------

    def _member_changed(self, member: NodeId, joined: bool, reason: str) -> None:
        if joined:
            self._booted.discard(member)
            if self._left.pop(member, None) is not None:
                self.env.store.delete(_LEFT, member)
            return
        if reason == "leave":  # gone for good: it needs nothing any more
            self._marks.pop(member, None)
            self._left[member] = None
            put_json(self.env.store, _LEFT, member, True)
            while len(self._left) > MAX_LEFT:
                old, _ = self._left.popitem(last=False)
                self.env.store.delete(_LEFT, old)
        if reason == "boot":
            self._booted.add(member)
            if len(self._booted) > self.config.max_pending:
                self._booted.pop()
        for mid, ballot in list(self._ballots.items()):
            if member in ballot.snapshot and member not in ballot.yes:
                self._decide(mid, False, ballot.snapshot, "member_gone", member=member)
