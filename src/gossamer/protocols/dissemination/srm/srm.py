"""Scalable Reliable Multicast (Floyd et al. 1997), sans-I/O: any number of sources, each
item named (source, seq), losses detected from gaps and session messages and repaired by
whoever holds the item, with randomized, suppressed, backed-off request and repair timers.

Session messages are the one heartbeat: besides each source's highest sequence number and the
timestamps for distances they carry the member's group status, and ``on_session`` hands each
one up (the group state of ``protocols.membership.srm_group`` lives on them).
"""

from __future__ import annotations

import dataclasses
import math
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from ....core.env import DatagramTooLarge, DurableSequence, Env, TimerHandle, encode_datagram
from ....core.errors import ConfigError
from ....core.ids import NodeId
from ....core.messages import Message, speaker_of
from .timers import AdaptiveTimers, Role, SrmTimerConfig
from .wire import Echo, SrmData, SrmRepair, SrmRequest, SrmSession

__all__ = ["LAYER", "Srm", "SrmConfig"]

LAYER = "srm"
Item = tuple[str, int]
DeliverFn = Callable[[str, int, Any], None]
HolderFn = Callable[[str, int], Any]
SessionFn = Callable[[NodeId, SrmSession], None]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class SrmConfig:
    """``group``: the multicast group. Distances below ``min_distance`` count as it (the timer
    floor: on loopback a distance is microseconds, under the event loop's jitter); before a
    first estimate a distance is ``default_distance``. Every table is bounded."""

    group: str
    session_period: float = 1.0
    timers: SrmTimerConfig = dataclasses.field(default_factory=SrmTimerConfig)
    min_distance: float = 0.002
    default_distance: float = 0.05
    max_cache: int = 10_000
    max_losses: int = 10_000
    max_sources: int = 1_000
    max_gap: int = 1_000  # a gap wider than this is skipped whole, not chased
    seq_lease: int = 1_024  # sequence numbers per durable commit of the sequence
    max_request_rounds: int = 10
    max_backoff: int = 64
    max_session_entries: int = 120
    max_resolved_entries: int = 60  # marks per session message (all fitted to one datagram)

    def __post_init__(self) -> None:
        if not self.group:
            raise ConfigError("group must not be empty")
        for name in ("session_period", "min_distance", "default_distance"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                raise ConfigError(f"{name} must be a finite number > 0, got {value!r}")
        for name in ("max_cache", "max_losses", "max_sources", "max_gap", "max_request_rounds",
                     "max_backoff", "max_session_entries", "seq_lease",
                     "max_resolved_entries"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)}")


_FIT_TRIES = 12  # a quarter fewer entries each: down to 3% of them

JOIN_WINDOW = 64
"""Items this far before the first one heard of a source are still taken if they come (a
session message may overtake the data it announces) but never requested (history from before
this member heard of the source is not its loss)."""


class _Source:
    """What arrived of one source: everything up to ``base``, and ``above`` it (at most
    ``limit`` entries: past that the oldest holes are given up). Losses are only ever
    counted above ``highest`` as it was when the source was first heard of."""

    __slots__ = ("above", "base", "before", "highest", "limit")

    def __init__(self, first: int, limit: int) -> None:
        self.base = max(first - 1 - JOIN_WINDOW, 0)
        self.above: set[int] = set()
        self.highest = first - 1
        self.before = first - 1  # history from before this member heard of the source
        self.limit = limit

    def settled(self) -> int:
        """Everything up to this seq arrived, was given up, or is history from before this
        member heard of the source (taken if it comes, never waited for)."""
        seq = max(self.base, self.before)
        while seq + 1 in self.above:
            seq += 1
        return seq

    def has(self, seq: int) -> bool:
        return seq <= self.base or seq in self.above

    def skip_to(self, seq: int) -> None:
        """Nothing up to ``seq`` is waited for any more."""
        if seq > self.base:
            self.base = seq
            self.above = {s for s in self.above if s > seq}
            while self.base + 1 in self.above:
                self.base += 1
                self.above.discard(self.base)

    def add(self, seq: int) -> None:
        if seq <= self.base:
            return
        self.above.add(seq)
        if len(self.above) > self.limit:  # holes nobody filled: stop remembering around them
            self.base = min(self.above)
            self.above.discard(self.base)
        while self.base + 1 in self.above:
            self.base += 1
            self.above.discard(self.base)


class _Loss:
    """One missing item: its request timer, backoff round and statistics."""

    __slots__ = ("detected", "duplicates", "first_request", "ignore_until", "nearest", "others",
                 "round", "sent_first", "timer")

    def __init__(self, detected: float) -> None:
        self.detected = detected
        self.round = 0
        self.sent_first = False  # this member's own request opened the first round
        self.timer: TimerHandle | None = None
        self.ignore_until = -math.inf
        self.duplicates = 0  # requests of the first round heard or sent, beyond the first
        self.first_request: float | None = None
        self.others = False  # another member's request of the first round was heard
        self.nearest = True  # and every such request came from farther from the source


class _Repair:
    """A repair this member will send unless it hears one first, and the repairs it then
    counts for the item (its duplicates statistic) until the round closes."""

    __slots__ = ("first", "heard", "nearest", "others", "requested", "requester", "sent",
                 "timer")

    def __init__(self, requested: float, requester: NodeId, timer: TimerHandle | None) -> None:
        self.requested = requested
        self.requester = requester
        self.timer = timer  # None once sent or suppressed: the round is only being counted
        self.heard = 0
        self.first: float | None = None  # when the first repair was sent or heard
        self.sent = False
        self.others = False  # another holder's repair of this round was heard
        self.nearest = True  # and every such repair came from farther from the requester


class Srm:
    """One member's SRM. ``multicast(payload)`` sends a new item of its own source;
    ``on_deliver(source, seq, payload)`` hears each item once (in no particular order);
    ``holder(source, seq)`` may answer a request for an item the bounded cache lost (the atomic
    layer's durable outcomes); ``on_session(src, session)`` hears each session message."""

    def __init__(self, env: Env, config: SrmConfig) -> None:
        self.env = env
        self.config = config
        self.timers = AdaptiveTimers(config.timers)
        self.on_deliver: DeliverFn = lambda source, seq, payload: None
        self.holder: HolderFn = lambda source, seq: None
        self.on_session: SessionFn = lambda src, session: None
        self.resolved: Callable[[], list[tuple[str, int]]] = list
        """The ``resolved`` marks for the next session message (the layer above's; the first
        ``max_resolved_entries`` are sent)."""
        self.group_size: Callable[[], int] = lambda: len(self._heard) + 1
        self.joined = True
        # one commit per ``seq_lease`` items, not per item; a restart skips past the unused
        # rest by more than ``max_gap``, so its peers skip it too instead of chasing items that
        # never existed
        self._sequence = DurableSequence(env.store, "srm", incarnation=env.incarnation,
                                         lease=config.seq_lease,
                                         restart_gap=config.max_gap + 1)
        self._sources: OrderedDict[str, _Source] = OrderedDict()
        self._cache: OrderedDict[Item, Any] = OrderedDict()
        self._losses: dict[Item, _Loss] = {}
        self._repairs: dict[Item, _Repair] = {}
        self._hold_down: OrderedDict[Item, float] = OrderedDict()
        self._distance: dict[NodeId, float] = {}
        self._heard: OrderedDict[NodeId, tuple[float, float]] = OrderedDict()  # sent_at, at
        self._session_timer: TimerHandle | None = None
        self._rotation = 0
        self.stats = {"requests": 0, "repairs": 0, "losses": 0, "recovered": 0, "gave_up": 0,
                      "skipped": 0}

    # -- life ----------------------------------------------------------------------------

    def start(self) -> None:
        self._schedule_session()

    def stop(self) -> None:
        if self._session_timer is not None:
            self.env.cancel(self._session_timer)
            self._session_timer = None
        for loss in self._losses.values():
            if loss.timer is not None:
                self.env.cancel(loss.timer)
        for repair in self._repairs.values():
            if repair.timer is not None:
                self.env.cancel(repair.timer)

    # -- sending -------------------------------------------------------------------------

    @property
    def source(self) -> str:
        return self.env.node

    def multicast(self, payload: Any) -> int:
        """Send ``payload`` as this source's next item; returns its seq."""
        seq = self._sequence.take()
        data = SrmData(self.source, seq, payload)
        self.env.multicast(self.config.group, data)  # too large: refused before it is cached
        self._remember(self.source, seq, payload)
        return seq

    @property
    def highest_sent(self) -> int:
        return self._sequence.next - 1

    def distance(self, member: NodeId) -> float:
        """The one-way distance to ``member`` in seconds, never under the floor."""
        return max(self._distance.get(member, self.config.default_distance),
                   self.config.min_distance)

    def settled(self, source: str) -> int:
        """Every item of ``source`` up to this seq has arrived here, was given up, or is
        history from before this member heard of it (this member's own: the last it sent)."""
        if source == self.source:
            return self.highest_sent
        state = self._sources.get(source)
        return state.settled() if state is not None else 0

    def sources(self) -> list[str]:
        """The sources heard of (at most ``max_sources``), this member's own first."""
        return [self.source, *self._sources]

    def members_heard(self) -> list[NodeId]:
        return list(self._heard)

    # -- receiving -----------------------------------------------------------------------

    def on_message(self, src: NodeId, msg: Message) -> bool:
        """Handle an SRM message; False if ``msg`` is not one. Data, requests and repairs
        name their sender (the source, the requester, the repairer): one that names another
        than ``src`` is dropped (a holder of the group key speaking in another's name)."""
        named = speaker_of(msg)
        if named is not None and named != src:
            self.env.trace("drop", layer=LAYER, peer=src, reason="forged_sender",
                           error=f"{msg.TYPE} in the name of {named!r}")
            return True
        if isinstance(msg, SrmData):
            self._arrived(msg.source, msg.seq, msg.payload)
        elif isinstance(msg, SrmRepair):
            self._repair_heard(msg)
        elif isinstance(msg, SrmRequest):
            self._request_heard(msg)
        elif isinstance(msg, SrmSession):
            self._session_heard(src, msg)
        else:
            return False
        return True

    def _source_state(self, source: str, first_seq: int) -> _Source | None:
        state = self._sources.get(source)
        if state is None:
            if source == self.source:
                return None
            if len(self._sources) >= self.config.max_sources:
                self.env.trace("drop", layer=LAYER, origin=source, reason="too_many_sources")
                return None
            state = self._sources[source] = _Source(first_seq, self.config.max_gap)
        return state

    def _arrived(self, source: str, seq: int, payload: Any) -> None:
        if source == self.source:
            return  # our own item, come back through a repair
        state = self._source_state(source, seq)
        if state is None or state.has(seq):
            return  # a duplicate: delivered once already
        self._learn_highest(source, state, seq - 1)
        state.add(seq)
        state.highest = max(state.highest, seq)
        self._remember(source, seq, payload)
        loss = self._losses.pop((source, seq), None)
        if loss is not None:
            self._recovered(source, seq, loss)
        self.on_deliver(source, seq, payload)

    def _learn_highest(self, source: str, state: _Source, highest: int) -> None:
        """Every item of ``source`` up to ``highest`` exists: the ones missing are losses."""
        if highest <= state.highest:
            return
        start = state.highest + 1
        if highest - start + 1 > self.config.max_gap:
            # too wide to chase: a restarted source's new incarnation range, or an outage no
            # cache covers; skipped whole (traced), never a thousand requests
            state.skip_to(highest)
            state.highest = highest
            self.stats["skipped"] += 1
            self.env.trace("skipped", layer=LAYER, origin=source, seq=start,
                           count=highest - start + 1)
            return
        state.highest = highest
        for seq in range(start, highest + 1):
            if not state.has(seq):
                self._lost(source, seq)

    def _lost(self, source: str, seq: int) -> None:
        item = (source, seq)
        if item in self._losses:
            return
        if len(self._losses) >= self.config.max_losses:
            self._give_up(item)
            return
        self.stats["losses"] += 1
        loss = self._losses[item] = _Loss(self.env.now())
        self.env.trace("loss", layer=LAYER, msg=f"{source}:{seq}", origin=source, seq=seq)
        self.timers.before_request(self.group_size())
        self._arm_request(item, loss)

    def _arm_request(self, item: Item, loss: _Loss) -> None:
        d = self.distance(item[0])
        low = self.timers.c1 * d
        delay = self._backoff(loss) * (low + self.timers.c2 * d * self.env.rng.random())
        if loss.round:
            # a request is out (ours or another's): asking again before the source itself
            # could have answered it (a round trip and its whole repair window) only adds a
            # duplicate; a small C1 would otherwise repeat it within the round trip
            delay = max(delay, (2 + self.timers.d1 + self.timers.d2) * d)
        if loss.timer is not None:
            self.env.cancel(loss.timer)
        loss.timer = self.env.set_timer(delay, lambda: self._request_due(item))

    def _backoff(self, loss: _Loss) -> float:
        return min(self.timers.backoff ** loss.round, self.config.max_backoff)

    def _request_due(self, item: Item) -> None:
        loss = self._losses.get(item)
        if loss is None:
            return
        loss.timer = None
        if loss.round >= self.config.max_request_rounds:
            self._give_up(item)
            return
        source, seq = item
        self.env.multicast(self.config.group, SrmRequest(self.env.node, source, seq,
                                                         self.distance(source)))
        self.stats["requests"] += 1
        if loss.round == 0:
            loss.sent_first = True
            self.timers.sent_request(self.group_size())
        self._count_request(loss)
        self._back_off(item, loss)

    def _count_request(self, loss: _Loss) -> bool:
        """The first request of a loss, or a duplicate of it: one of the same round (heard
        before the first back-off's ignore window closed); True for those. A request of a
        later round is no failure of suppression (the repair was lost, or the loss is
        another region's)."""
        now = self.env.now()
        if loss.first_request is None:
            loss.first_request = now
            loss.duplicates = 0
        elif loss.round <= 1 and now < loss.ignore_until:
            loss.duplicates += 1
        else:
            return False
        return True

    def _back_off(self, item: Item, loss: _Loss) -> None:
        """Back the request interval off (by the timers' factor); requests heard in the first
        half of it are the same round's duplicates and do not back off again (the paper's
        ignore-backoff)."""
        loss.round += 1
        self._arm_request(item, loss)
        d = self.distance(item[0])
        interval = self._backoff(loss) * (self.timers.c1 * d)
        loss.ignore_until = self.env.now() + interval / 2

    def _give_up(self, item: Item) -> None:
        loss = self._losses.pop(item, None)
        if loss is not None and loss.timer is not None:
            self.env.cancel(loss.timer)
        state = self._sources.get(item[0])
        if state is not None:
            state.add(item[1])  # no longer waited for
        self.stats["gave_up"] += 1
        self.env.trace("gave_up", layer=LAYER, msg=f"{item[0]}:{item[1]}", origin=item[0],
                       seq=item[1])

    def _recovered(self, source: str, seq: int, loss: _Loss) -> None:
        if loss.timer is not None:
            self.env.cancel(loss.timer)
        self.stats["recovered"] += 1
        now = self.env.now()
        d = self.distance(source)
        first = loss.first_request if loss.first_request is not None else now
        self.timers.request_done(max(loss.duplicates, 0), (first - loss.detected) / d,
                                 Role(sent=loss.sent_first, others=loss.others,
                                      nearest=loss.nearest))
        self.env.trace("recovered", layer=LAYER, msg=f"{source}:{seq}", origin=source, seq=seq,
                       delay=now - loss.detected, rounds=loss.round)

    def _request_heard(self, request: SrmRequest) -> None:
        item = (request.source, request.seq)
        loss = self._losses.get(item)
        if loss is not None:  # we miss it too: suppression, our own request backs off
            if self._count_request(loss):
                loss.others = True
                loss.nearest = loss.nearest and _farther(
                    request.distance, self.distance(request.source),
                    self.distance(request.requester))
            if self.env.now() >= loss.ignore_until:
                self._back_off(item, loss)
            return
        if item in self._repairs:
            return  # a repair is already scheduled, or its round is still open
        if self._hold_down.get(item, -math.inf) > self.env.now():
            return  # a repair just went out: this request crossed it
        payload = self._payload(item)
        if payload is None:
            state = self._sources.get(request.source)
            if state is not None:
                self._learn_highest(request.source, state, request.seq)
            return
        self.timers.before_repair(self.group_size())
        d = self.distance(request.requester)
        delay = self.timers.d1 * d + self.timers.d2 * d * self.env.rng.random()
        timer = self.env.set_timer(delay, lambda: self._repair_due(item))
        self._repairs[item] = _Repair(self.env.now(), request.requester, timer)

    def _payload(self, item: Item) -> Any:
        if item in self._cache:
            return self._cache[item]
        return self.holder(*item)

    def _repair_due(self, item: Item) -> None:
        repair = self._repairs.get(item)
        if repair is None or repair.timer is None:
            return
        repair.timer = None
        payload = self._payload(item)
        if payload is None:
            self._repairs.pop(item, None)
            return
        self.env.multicast(self.config.group, SrmRepair(self.env.node, item[0], item[1],
                                                        payload,
                                                        self.distance(repair.requester)))
        self.stats["repairs"] += 1
        repair.heard += 1
        repair.sent = True
        if repair.first is None:
            repair.first = self.env.now()
        self.timers.sent_repair(self.group_size())
        self._hold(item)
        self._close_round_later(item)

    def _close_round_later(self, item: Item) -> None:
        """Count the repairs heard for ``item`` for 3 distances more, then feed the adaptive
        timers (duplicates beyond the first, and the delay of the first)."""
        self.env.set_timer(3 * self.distance(item[0]), lambda: self._close_round(item))

    def _close_round(self, item: Item) -> None:
        repair = self._repairs.get(item)
        if repair is None or repair.timer is not None:
            return
        del self._repairs[item]
        d = self.distance(repair.requester)
        first = repair.first if repair.first is not None else self.env.now()
        self.timers.repair_done(max(repair.heard - 1, 0), (first - repair.requested) / d,
                                Role(sent=repair.sent, others=repair.others,
                                     nearest=repair.nearest))

    def _hold(self, item: Item) -> None:
        """Ignore requests for ``item`` for 3 distances to its source: they crossed a repair."""
        self._hold_down[item] = self.env.now() + 3 * self.distance(item[0])
        self._hold_down.move_to_end(item)
        while len(self._hold_down) > self.config.max_cache:
            self._hold_down.popitem(last=False)

    def _repair_heard(self, repair: SrmRepair) -> None:
        item = (repair.source, repair.seq)
        scheduled = self._repairs.get(item)
        if scheduled is not None:
            now = self.env.now()
            counted = (scheduled.first is None
                       # sent before its sender could have heard the first: a duplicate; a
                       # later one answered another region's request, no failure here
                       or now <= scheduled.first + 2 * self.distance(scheduled.requester))
            if counted:
                if scheduled.first is None:
                    scheduled.first = now
                scheduled.heard += 1
                scheduled.others = True
                scheduled.nearest = scheduled.nearest and _farther(
                    repair.distance, self.distance(scheduled.requester),
                    self.distance(repair.repairer))
            if scheduled.timer is not None:  # someone nearer answered first: suppressed
                self.env.cancel(scheduled.timer)
                scheduled.timer = None
                self._close_round_later(item)
        self._hold(item)
        self._arrived(repair.source, repair.seq, repair.payload)

    def _remember(self, source: str, seq: int, payload: Any) -> None:
        cache = self._cache
        cache[(source, seq)] = payload
        while len(cache) > self.config.max_cache:
            cache.popitem(last=False)

    # -- session messages ----------------------------------------------------------------

    def _schedule_session(self) -> None:
        period = self.config.session_period
        delay = period * (0.9 + 0.2 * self.env.rng.random())  # jitter: no synchronised bursts
        self._session_timer = self.env.set_timer(delay, self._session_due)

    def _session_due(self) -> None:
        self.send_session()
        self._schedule_session()

    def send_session(self) -> None:
        """Multicast a session message now (also on join and leave)."""
        limit = self.config.max_session_entries
        # announced from the start (0: nothing yet), so nobody takes our first item for
        # history from before it heard of us
        highest = [(self.source, self.highest_sent)]
        sources = list(self._sources.items())
        start = self._rotation % max(len(sources), 1)
        for source, state in (sources[start:] + sources[:start])[:limit - len(highest)]:
            highest.append((source, state.highest))
        now = self.env.now()
        heard = list(self._heard.items())
        start = self._rotation % max(len(heard), 1)
        echoes: list[Echo] = [(member, sent_at, now - at)
                              for member, (sent_at, at) in (heard[start:] + heard[:start])[:limit]]
        resolved = self.resolved()[:self.config.max_resolved_entries]
        session = SrmSession(now, tuple(highest), tuple(echoes), self.joined, tuple(resolved))
        for _ in range(_FIT_TRIES):
            try:
                encode_datagram(session)
                break
            except DatagramTooLarge:
                # a large group's entries (long names, wall-clock stamps) do not all fit one
                # datagram: fewer this time; the rotation goes on from where these end
                highest = highest[:max(1, len(highest) * 3 // 4)]
                echoes = echoes[:len(echoes) * 3 // 4]
                resolved = resolved[:len(resolved) * 3 // 4]
                session = SrmSession(now, tuple(highest), tuple(echoes), self.joined,
                                     tuple(resolved))
        self._rotation += max(len(echoes), len(highest) - 1, 1)
        self.env.multicast(self.config.group, session)

    def _session_heard(self, src: NodeId, session: SrmSession) -> None:
        now = self.env.now()
        self._heard[src] = (session.sent_at, now)
        self._heard.move_to_end(src)
        while len(self._heard) > self.config.max_sources:
            self._heard.popitem(last=False)
        for member, sent_at, held in session.echoes:
            if member == self.env.node:
                rtt = now - sent_at - held
                if rtt >= 0:
                    old = self._distance.get(src)
                    sample = rtt / 2
                    self._distance[src] = sample if old is None else 0.75 * old + 0.25 * sample
        for source, highest in session.highest:
            if source == self.source:
                continue
            known = source in self._sources
            state = self._source_state(source, highest + 1)
            if state is not None and known:
                self._learn_highest(source, state, highest)
        self.on_session(src, session)

    def forget(self, member: NodeId) -> None:
        """``member`` left or was booted: its timestamps go (its items stay repairable)."""
        self._heard.pop(member, None)
        self._distance.pop(member, None)


def _farther(theirs: float | None, mine: float, between: float) -> bool:
    """Whether a duplicate's sender was farther than this member from what both answered
    (the source, or the requester): by the distance it carried, or, from a sender that
    carried none, by the reference simulator's guess (more than 1.5 times this member's
    distance away from this member)."""
    if theirs is None:
        return between > 1.5 * mine
    return theirs > mine
