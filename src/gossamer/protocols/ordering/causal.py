"""Causal delivery of seed-000 data messages: vector timestamps, holdback queue, NACK repair.

The client half of the seed's "The Gossip Protocol", on the seed's wire messages only (``Data``,
``Nack``, ``Retry``, ``Subscribe``), talking to the hub relay and never to peers directly.

A client keeps a vector: per client id, how many of its data messages were delivered here (its
own entry: how many it sent). A data message carries the sender's vector with the sender's entry
counting the message, so ``vector[id]`` is its sequence number. It is delivered when it is the
sender's next one and everything else it had seen is delivered here; duplicates are discarded;
anything else waits in a bounded holdback queue while the gaps its vector reveals are NACKed to
their origins (only the part beyond what was already requested, the seed's ``high_ends``
suppression; then re-NACKed with backoff while the gap persists, since NACKs and retries can be
lost). Origins answer from a bounded durable send log. A ``Subscribe`` (sent on start) makes
every peer resend, as a ``Retry``, its own messages the subscriber's vector lacks, and tells the
peers what the subscriber has seen, so they NACK what they lack of it.

Tail loss: a lost *last* message leaves no later message to reveal the gap. Only origins know
they sent something, so an origin that has published re-multicasts its ``Subscribe`` (its vector,
with its own count) after its last publish, with jittered exponential backoff capped at
``announce_cap``, and then at that cap for as long as it runs. A receiver that sees
``vector[origin]`` beyond its own NACKs the origin; one that sees other entries beyond its own
NACKs those origins (the announcer delivered them, so they exist); one whose own messages the
vector lacks sends them (the seed's rule). An origin skips its announcement when, since its last
one, a peer multicast a vector (a ``Subscribe`` or a ``Data``) that already counts all of its
messages: that told everyone the same thing (suppression, as in SRM). So everything stays on the
seed's wire format, repair is driven by the receivers' NACK loops once they know, the steady
state costs about one multicast per ``announce_cap`` seconds for the whole group (readers never
announce), and a gap is found however long a partition lasted. ACKs in the manner of fifo.py's
STATUS/ACK would need a membership list, which the seed deliberately does without. A client
also repeats its first ``Subscribe`` until it hears anything, since the hub learns a
connection's id from its first message.

Limits: a message that left its origin's send log cannot be repaired (the seed has no way to
say so; a hub snapshot, the seed's future work, would be the fix), so ``send_log_limit`` should
exceed what a client can fall behind by.
"""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import orjson

from ...core.env import Env, Store, TimerHandle, get_json, put_json
from ...core.errors import ConfigError, InvalidMessage
from ...core.ids import NodeId, check_node_id
from ...core.messages import Message
from ..replica.wire import (
    HUB_ID,
    MAX_RETRY_BATCH,
    Data,
    Nack,
    ReplicaCodec,
    Retry,
    Subscribe,
    crc_of,
)

__all__ = ["LAYER", "CausalConfig", "CausalDelivery"]

LAYER = "replica"
_VECTOR, _LOG, _META = "replica.vector", "replica.log", "replica.meta"
_RETRY_OVERHEAD = 256  # bytes of a Retry frame besides its data messages
_KNOWN_IDS_LIMIT = 100_000  # vector ids already checked (a cache: beyond it, check each time)


@dataclasses.dataclass(frozen=True, slots=True)
class CausalConfig:
    hub: NodeId = HUB_ID  # where the default ``send`` (``env.send``, for unit tests) goes
    holdback_limit: int = 10_000  # early messages kept, over all origins
    send_log_limit: int = 10_000  # own messages kept (durably) to answer NACKs and Subscribes
    retry_batch: int = 256  # data messages per Retry (the wire allows up to 1,024)
    # encoded bytes of the data messages of one Retry: under the link's frame limit (64 KiB by
    # default), so a resend of many large writes never makes a frame the codec refuses
    retry_bytes: int = 32 * 1024
    max_nack_ranges: int = 8  # missing ranges NACKed per origin at once
    nack_delay: float = 0.05  # wait this long for reordered messages before NACKing a gap
    nack_retry: float = 0.25  # first re-NACK interval while a gap persists; doubles
    nack_retry_cap: float = 2.0
    announce_interval: float = 0.5  # first re-announcement after a publish; doubles
    announce_cap: float = 5.0  # then repeated this far apart

    def __post_init__(self) -> None:
        for name in ("nack_delay", "nack_retry", "announce_interval"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be > 0")
        if self.nack_retry_cap < self.nack_retry:
            raise ConfigError("nack_retry_cap must be >= nack_retry")
        if self.announce_cap < self.announce_interval:
            raise ConfigError("announce_cap must be >= announce_interval")
        for name in ("holdback_limit", "send_log_limit", "max_nack_ranges"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1")
        if self.retry_bytes < 1024:
            raise ConfigError("retry_bytes must be >= 1024")
        if not 1 <= self.retry_batch <= MAX_RETRY_BATCH:
            raise ConfigError(f"retry_batch must be in 1..{MAX_RETRY_BATCH}")


class _Gap:
    """What is missing of one origin: seqs up to ``known_high`` exist, ``requested`` asked for."""

    __slots__ = ("known_high", "prompt_timer", "requested", "retry_interval", "retry_timer")

    def __init__(self, known_high: int, requested: int, retry_interval: float) -> None:
        self.known_high = known_high
        self.requested = requested
        self.prompt_timer: TimerHandle | None = None
        self.retry_timer: TimerHandle | None = None
        self.retry_interval = retry_interval


DeliverFn = Callable[[Data], None]


def _nothing() -> None:
    """A group commit's callback when no reply waits for it."""


def msg_id(origin: str, seq: int) -> str:
    """The trace's message id of data message ``seq`` of ``origin``."""
    return f"{origin}:{seq}"


class CausalDelivery:
    """The causal layer of one client. ``make_data`` + ``send_data`` publish; deliveries go to
    ``on_deliver``; ``on_message`` takes the hub's ``Data``, ``Retry``, ``Nack``, ``Subscribe``."""

    def __init__(
        self,
        env: Env,
        *,
        config: CausalConfig | None = None,
        on_deliver: DeliverFn | None = None,
        announce_deliveries: bool = False,
        group_commit: bool = False,
        send: Callable[[Message], None] | None = None,
        store: Store | None = None,
    ) -> None:
        """``announce_deliveries``: announce our vector after every burst of deliveries, not
        only after publishing (the hub's keeper: one announcement instead of every writer's).
        ``group_commit``: the store is committed in groups (the keeper: ``commit_then``; what
        it sends waits for the group), so the delivered counts are written by
        ``write_pending()`` before each group, not at every delivery, and a ``deliver`` row is
        traced once its group is on disk.
        ``send``: how a message reaches the hub: a client's connection (``ReplicaNode``) and
        the keeper inside the hub pass their own; the default, ``env.send`` to ``config.hub``,
        is for unit tests (``FakeEnv`` records it). ``store``: default ``env.store``."""
        self.env = env
        self.send = send if send is not None else self._to_hub
        self.announce_deliveries = announce_deliveries
        self.group_commit = group_commit
        self._unwritten: set[str] = set()  # origins whose delivered count awaits the group
        self._untraced: list[Data] = []  # delivered, their ``deliver`` rows await the group
        self.config = config if config is not None else CausalConfig()
        self.on_deliver = on_deliver
        self.me: NodeId = env.node
        self.duplicates = 0
        self._codec = ReplicaCodec()
        self._store = store if store is not None else env.store
        self._vector: dict[str, int] = {}
        self._send_log: dict[int, Data] = {}
        self._log_first = 1  # lowest seq that may still be in the send log
        self._holdback: dict[str, dict[int, Data]] = {}
        self._held = 0
        self._gaps: dict[str, _Gap] = {}
        self._dirty = False
        self._heard = False  # anything received since start: the hub knows us
        self._covered = False  # a peer multicast a vector counting all our messages
        self._known_ids: set[str] = {self.me}
        self._announce_timer: TimerHandle | None = None
        self._announce_delay = self.config.announce_interval
        for origin, raw in self._store.scan(_VECTOR):
            self._vector[origin] = int(raw)
        for _key, raw in self._store.scan(_LOG):
            data = self._codec.from_dict(orjson.loads(raw))
            if isinstance(data, Data):
                self._send_log[data.seq] = data
        first = get_json(self._store, _META, "log_first")
        if first is not None:
            self._log_first = int(first)

    # -- Process-like hooks (driven by the client that holds this layer) ------------------------

    def _to_hub(self, msg: Message) -> None:
        self.env.send(self.config.hub, msg)

    def start(self) -> None:
        """(Re)connect: multicast our vector; keep announcing while we have anything to say."""
        self._heard = False  # repeat the Subscribe until the hub (or anyone) answers
        self._send_subscribe()
        self._arm_announce(reset=True)

    def stop(self) -> None:
        for gap in self._gaps.values():
            self._cancel_gap_timers(gap)
        self._gaps.clear()
        if self._announce_timer is not None:
            self.env.cancel(self._announce_timer)
            self._announce_timer = None
        self._store.commit()

    def on_message(self, msg: Message) -> None:
        """Handle one message from the hub; commits what it delivered before returning.

        A message whose vectors name an impossible client id is refused (``InvalidMessage``)
        before anything changes: the wire checks the counts of a vector but not its keys."""
        if isinstance(msg, Data | Subscribe):
            self._check_ids(msg.vector)
        elif isinstance(msg, Retry):
            for part in msg.retry:
                self._check_ids(part.vector)
        self._heard = True
        if isinstance(msg, Data):
            self._receive(msg, multicast=True)
        elif isinstance(msg, Retry):
            self._on_retry(msg)
        elif isinstance(msg, Nack):
            self._on_nack(msg)
        elif isinstance(msg, Subscribe):
            self._on_subscribe(msg)
        else:
            raise InvalidMessage(f"causal layer got {msg.TYPE}")
        self.commit_if_dirty()

    def _check_ids(self, vector: dict[str, int]) -> None:
        known = self._known_ids
        for client in vector:
            if client in known:
                continue
            try:
                check_node_id(client)
            except ConfigError as exc:
                raise InvalidMessage(f"vector names an invalid client id: {exc}") from None
            if len(known) < _KNOWN_IDS_LIMIT:
                known.add(client)

    def write_pending(self) -> None:
        """With ``group_commit``: the delivered counts not yet written, to the store."""
        vector = self._vector
        for origin in self._unwritten:
            self._store.put(_VECTOR, origin, str(vector[origin]).encode())
        self._unwritten.clear()

    def commit_if_dirty(self) -> None:
        """Commit what was delivered, durably, before anything that depends on it is sent.
        With ``group_commit`` the deliveries join the store's next group, whose callbacks run
        once it is on disk: their ``deliver`` rows first (a power loss before it forgets them,
        and they are delivered again), then what the caller sends after this returns (the hub
        relays through ``commit_then`` too)."""
        if self._dirty:
            if self.group_commit:
                delivered, self._untraced = self._untraced, []
                self._store.commit_then(
                    (lambda: self._trace_all(delivered)) if delivered else _nothing)
            else:
                self._store.commit()
            self._dirty = False

    def _trace_delivered(self, msg: Data) -> None:
        self.env.trace("deliver", layer=LAYER, msg=msg_id(msg.id, msg.seq), origin=msg.id,
                       key=msg.key, seq=msg.seq, vector=msg.vector)

    def trace_restored(self, msg: Data) -> None:
        """A ``restored`` row for a delivery this node's store held at its start: the
        ``deliver`` row of its last group may have died with the process (it is traced once
        the group is on disk, and a kill can come between); the pipeline reads a restored row
        as the delivery when the trace has no ``deliver`` row for it, and drops it otherwise."""
        self.env.trace("restored", layer=LAYER, msg=msg_id(msg.id, msg.seq), origin=msg.id,
                       key=msg.key, seq=msg.seq, vector=msg.vector)

    def _trace_all(self, delivered: list[Data]) -> None:
        for msg in delivered:
            self._trace_delivered(msg)

    # -- inspection -------------------------------------------------------------------------

    @property
    def vector(self) -> dict[str, int]:
        """Delivered counts per client id (own entry: messages sent), a copy."""
        return dict(self._vector)

    @property
    def holdback_size(self) -> int:
        return self._held

    @property
    def sent(self) -> int:
        """How many data messages this client has published."""
        return self._vector.get(self.me, 0)

    @property
    def heard(self) -> bool:
        """Whether anything arrived since the last ``start``."""
        return self._heard

    def note_heard(self) -> None:
        """Something other than this layer's messages arrived: the hub knows us."""
        self._heard = True

    @property
    def caught_up(self) -> bool:
        """No message is known to be missing here (nothing held, no gap being repaired)."""
        return not self._gaps and not self._held

    def delivered(self, origin: str) -> int:
        return self._vector.get(origin, 0)

    def known_high(self, origin: str) -> int:
        """The highest seq of ``origin`` known to exist: delivered, held or revealed."""
        gap = self._gaps.get(origin)
        held = self._holdback.get(origin)
        return max(self._vector.get(origin, 0), 0 if gap is None else gap.known_high,
                   max(held, default=0) if held else 0)

    def resume_after(self, seq: int) -> bool:
        """Number own messages after ``seq`` from now on (committed before this returns): the
        hub knows of ``seq`` messages of this id, more than this store sent, so this is a new
        incarnation of the id (a fresh or restored store) and the earlier runs' messages must
        not be numbered again. False when the store already counts that many."""
        if seq <= self.sent:
            return False
        self._vector[self.me] = seq
        self._store.put(_VECTOR, self.me, str(seq).encode())
        self._store.commit()
        return True

    def gaps(self) -> dict[str, int]:
        """Origins with known missing messages -> highest seq known to exist (for tests)."""
        return {origin: gap.known_high for origin, gap in self._gaps.items()}

    # -- publishing -------------------------------------------------------------------------

    def make_data(
        self, *, key: str, old_value: str | None, value: str, data: Any, deleted: bool
    ) -> Data:
        """Take the next sequence number and log the message (not yet committed or sent).

        The caller records what the write does, then calls ``send_data``, which commits both.
        """
        crc = crc_of(key, value, data)  # raises on content that is not JSON before any change
        seq = self.sent + 1
        vector = dict(self._vector)
        vector[self.me] = seq
        msg = Data(id=self.me, key=key, old_value=old_value, value=value, crc=crc,
                   vector=vector, data=data, deleted=deleted)
        self._vector[self.me] = seq
        self._store.put(_VECTOR, self.me, str(seq).encode())
        self._send_log[seq] = msg
        self._store.put(_LOG, f"{seq:012d}", orjson.dumps(self._codec.to_dict(msg)))
        limit = self.config.send_log_limit
        while len(self._send_log) > limit:
            evicted = self._log_first
            self._log_first += 1
            if self._send_log.pop(evicted, None) is not None:
                self._store.delete(_LOG, f"{evicted:012d}")
        put_json(self._store, _META, "log_first", self._log_first)
        return msg

    def send_data(self, msg: Data) -> None:
        """Commit (the seq must be durable before anyone can see it), trace, multicast."""
        self._store.commit()
        self._dirty = False
        env = self.env
        env.trace("publish", layer=LAYER, msg=msg_id(self.me, msg.seq), origin=self.me,
                  key=msg.key, seq=msg.seq, vector=msg.vector, rev=msg.value, old=msg.old_value,
                  deleted=msg.deleted)
        self.send(msg)
        self._arm_announce(reset=True)

    def sent_messages(self) -> list[Data]:
        """Own data messages still in the send log, oldest first."""
        return [self._send_log[seq] for seq in sorted(self._send_log)]

    def sent_message(self, seq: int) -> Data | None:
        """Own data message ``seq`` if it is still in the send log."""
        return self._send_log.get(seq)

    def offer(self, msg: Data) -> None:
        """A data message seen on its way to someone else (the hub sees every retry): deliver
        it here too if it is new. The caller commits (``commit_if_dirty``)."""
        self._check_ids(msg.vector)
        self._receive(msg, multicast=False)

    def install(self, vector: dict[str, int]) -> None:
        """Take ``vector`` (entry-wise at least ours) as delivered: a snapshot made at it was
        installed. Held messages it covers are discarded; gaps it closes are forgotten."""
        self._check_ids(vector)
        mine = self._vector
        for origin, count in vector.items():
            if count > mine.get(origin, 0):
                mine[origin] = count
                self._store.put(_VECTOR, origin, str(count).encode())
        self._dirty = True
        for origin in list(self._holdback):
            held = self._holdback[origin]
            for seq in [s for s in held if s <= mine.get(origin, 0)]:
                del held[seq]
                self._held -= 1
            if not held:
                del self._holdback[origin]
        self._drain()
        for origin, gap in list(self._gaps.items()):
            self._update_gap(origin, gap)

    # -- announcing (Subscribe) -------------------------------------------------------------

    def _send_subscribe(self) -> None:
        self.send(Subscribe(id=self.me, vector=dict(self._vector)))

    def _wants_announce(self) -> bool:
        return self.sent > 0 or not self._heard or self.announce_deliveries

    def _arm_announce(self, *, reset: bool) -> None:
        if reset:
            self._announce_delay = self.config.announce_interval
            if self._announce_timer is not None:
                self.env.cancel(self._announce_timer)
                self._announce_timer = None
        if self._announce_timer is not None or not self._wants_announce():
            return
        # jitter in [d/2, d]: publishers that went quiet together do not announce in lockstep
        delay = self._announce_delay * (0.5 + 0.5 * self.env.rng.random())
        self._announce_timer = self.env.set_timer(delay, self._announce_due)

    def _announce_due(self) -> None:
        self._announce_timer = None
        if not self._wants_announce():
            return
        if not self._covered or not self._heard or self.announce_deliveries:
            self._send_subscribe()
        self._covered = False
        self._announce_delay = min(self._announce_delay * 2, self.config.announce_cap)
        self._arm_announce(reset=False)

    def _on_subscribe(self, msg: Subscribe) -> None:
        if msg.id == self.me:
            return
        self._learn_vector(msg.vector)
        # the seed's rule: resend my own messages the subscriber's vector lacks
        theirs = msg.vector.get(self.me, 0)
        if theirs < self.sent:
            self._resend(msg.id, theirs + 1, self.sent)
        else:
            self._covered = True

    def _learn_vector(self, vector: dict[str, int]) -> None:
        mine = self._vector
        for origin, high in vector.items():
            if high > mine.get(origin, 0):
                self.learn(origin, high)

    # -- answering NACKs --------------------------------------------------------------------

    def _on_nack(self, msg: Nack) -> None:
        if msg.dest != self.me:
            self.env.trace("drop", layer=LAYER, peer=msg.id, reason="not_for_me")
            return
        # one NACK gets at most one full retry's worth; the asker re-NACKs the rest
        end = min(msg.end, self.sent, msg.start + MAX_RETRY_BATCH - 1)
        if end >= msg.start:
            self._resend(msg.id, msg.start, end)

    def _resend(self, dest: str, start: int, end: int) -> None:
        if start < self._log_first:
            self.env.trace("drop", layer=LAYER, peer=dest, origin=self.me, seq=start,
                           reason="evicted", first_kept=self._log_first)
            start = self._log_first
        batch: list[Data] = []
        size = _RETRY_OVERHEAD
        for seq in range(start, end + 1):
            data = self._send_log.get(seq)
            if data is None:
                continue
            length = len(orjson.dumps(self._codec.to_dict(data))) + 1
            if batch and size + length > self.config.retry_bytes:
                self.send(Retry(id=self.me, dest=dest, retry=tuple(batch)))
                batch, size = [], _RETRY_OVERHEAD
            batch.append(data)
            size += length
            if len(batch) == self.config.retry_batch:
                self.send(Retry(id=self.me, dest=dest, retry=tuple(batch)))
                batch, size = [], _RETRY_OVERHEAD
        if batch:
            self.send(Retry(id=self.me, dest=dest, retry=tuple(batch)))

    # -- receiving --------------------------------------------------------------------------

    def _on_retry(self, msg: Retry) -> None:
        if msg.dest != self.me:
            self.env.trace("drop", layer=LAYER, peer=msg.id, reason="not_for_me")
            return
        for part in msg.retry:
            self._receive(part, multicast=False)

    def _receive(self, msg: Data, *, multicast: bool) -> None:
        origin, seq = msg.id, msg.seq
        if not msg.crc_ok:
            # id and vector are outside the checksum: use them only as a hint of what to NACK
            self.env.trace("drop", layer=LAYER, msg=msg_id(origin, seq), origin=origin,
                           key=msg.key, seq=seq, reason="crc")
            self.learn(origin, seq)
            return
        if multicast and msg.vector.get(self.me, 0) >= self.sent:
            self._covered = True  # everyone got a vector that counts all of ours
        if origin == self.me or msg.vector.get(self.me, 0) > self.sent:
            if seq > self.sent or origin != self.me:
                # claims messages of ours that we never sent: it could never be delivered
                self.env.trace("drop", layer=LAYER, msg=msg_id(origin, seq), origin=origin,
                               seq=seq, reason="own_future")
            else:
                self.duplicates += 1
            return
        have = self._vector.get(origin, 0)
        held = self._holdback.get(origin)
        if seq <= have or (held is not None and seq in held):
            self.duplicates += 1
            return
        if seq == have + 1 and self._deps_met(msg):
            self._deliver(msg)
            self._drain()
            return
        if self._held >= self.config.holdback_limit:
            # safe to drop: it stays missing, so the re-NACK loop asks for it again
            self.env.trace("drop", layer=LAYER, msg=msg_id(origin, seq), origin=origin,
                           key=msg.key, seq=seq, reason="holdback_full")
        else:
            if held is None:
                held = self._holdback[origin] = {}
            held[seq] = msg
            self._held += 1
        # the seed's missing_id_for: the sender's earlier messages, and what it had seen
        self._learn_vector(msg.vector)

    def _deps_met(self, msg: Data) -> bool:
        vector = self._vector
        origin = msg.id
        for other, count in msg.vector.items():
            if other != origin and count > vector.get(other, 0):
                return False
        return True

    def _deliver(self, msg: Data) -> None:
        origin, seq = msg.id, msg.seq
        self._vector[origin] = seq
        if self.group_commit:
            self._unwritten.add(origin)
        else:
            self._store.put(_VECTOR, origin, str(seq).encode())
        self._dirty = True
        if self.env.tracing:
            if self.group_commit:  # a delivery is one once it is on disk (commit_if_dirty)
                self._untraced.append(msg)
            else:
                self._trace_delivered(msg)
        if self.on_deliver is not None:
            self.on_deliver(msg)
        if self.announce_deliveries and (self._announce_timer is None
                                         or self._announce_delay > self.config.announce_interval):
            self._arm_announce(reset=True)
        gap = self._gaps.get(origin)
        if gap is not None:
            self._update_gap(origin, gap)

    def _drain(self) -> None:
        """Deliver every held message that became deliverable, until none does."""
        progressed = True
        while progressed and self._held:
            progressed = False
            for origin in list(self._holdback):
                held = self._holdback[origin]
                while True:
                    msg = held.get(self._vector.get(origin, 0) + 1)
                    if msg is None or not self._deps_met(msg):
                        break
                    del held[msg.seq]
                    self._held -= 1
                    self._deliver(msg)
                    progressed = True
                if not held:
                    del self._holdback[origin]

    # -- gaps and NACKs ---------------------------------------------------------------------

    def learn(self, origin: str, high: int) -> None:
        """Messages ``1..high`` of ``origin`` exist; NACK those missing here."""
        if origin == self.me or high <= self._vector.get(origin, 0):
            return
        gap = self._gaps.get(origin)
        if gap is None:
            gap = self._gaps[origin] = _Gap(high, self._vector.get(origin, 0),
                                            self.config.nack_retry)
        elif high > gap.known_high:
            gap.known_high = high
        self._update_gap(origin, gap)

    def _update_gap(self, origin: str, gap: _Gap) -> None:
        if self._vector.get(origin, 0) >= gap.known_high:
            self._cancel_gap_timers(gap)
            del self._gaps[origin]
            return
        env = self.env
        if gap.known_high > gap.requested and gap.prompt_timer is None:
            gap.prompt_timer = env.set_timer(self.config.nack_delay,
                                             lambda: self._nack_prompt(origin))
        elif gap.prompt_timer is None and gap.retry_timer is None:
            gap.retry_timer = env.set_timer(gap.retry_interval, lambda: self._nack_retry(origin))

    def _cancel_gap_timers(self, gap: _Gap) -> None:
        for timer in (gap.prompt_timer, gap.retry_timer):
            if timer is not None:
                self.env.cancel(timer)
        gap.prompt_timer = gap.retry_timer = None

    def _nack_prompt(self, origin: str) -> None:
        """First NACK of newly known messages: only beyond what was already requested."""
        gap = self._gaps.get(origin)
        if gap is None:
            return
        gap.prompt_timer = None
        floor = max(self._vector.get(origin, 0), gap.requested)
        self._send_nacks(origin, self.missing_ranges(origin, floor + 1, gap.known_high))
        gap.requested = max(gap.requested, gap.known_high)
        if gap.retry_timer is None:
            gap.retry_timer = self.env.set_timer(gap.retry_interval,
                                                 lambda: self._nack_retry(origin))

    def _nack_retry(self, origin: str) -> None:
        """The gap persists: ask again for all of it (a NACK or its retry may be lost)."""
        gap = self._gaps.get(origin)
        if gap is None:
            return
        gap.retry_timer = None
        ranges = self.missing_ranges(origin, self._vector.get(origin, 0) + 1, gap.known_high)
        if not ranges:
            return  # all held, waiting for other origins; new evidence re-arms us
        self._send_nacks(origin, ranges)
        gap.requested = max(gap.requested, gap.known_high)
        gap.retry_interval = min(gap.retry_interval * 2, self.config.nack_retry_cap)
        gap.retry_timer = self.env.set_timer(gap.retry_interval, lambda: self._nack_retry(origin))

    def missing_ranges(self, origin: str, start: int, end: int) -> list[tuple[int, int]]:
        """Inclusive ranges within ``start..end`` neither delivered nor held, at most
        ``max_nack_ranges`` of them, each at most one retry long."""
        held = sorted(s for s in self._holdback.get(origin, {}) if start <= s <= end)
        ranges: list[tuple[int, int]] = []
        for low, high in _complement(start, end, held):
            ranges.append((low, min(high, low + MAX_RETRY_BATCH - 1)))
            if len(ranges) == self.config.max_nack_ranges:
                break
        return ranges

    def _send_nacks(self, origin: str, ranges: list[tuple[int, int]]) -> None:
        env = self.env
        for start, end in ranges:
            self.send(Nack(id=self.me, dest=origin, start=start, end=end))
            env.trace("nack", layer=LAYER, peer=origin, origin=origin, seq=start, end=end)


def _complement(start: int, end: int, taken: list[int]) -> Iterator[tuple[int, int]]:
    """Ranges of ``start..end`` not in the sorted list ``taken``."""
    low = start
    index = bisect.bisect_left(taken, start)
    while low <= end:
        while index < len(taken) and taken[index] < low:
            index += 1
        if index < len(taken) and taken[index] <= end:
            if taken[index] > low:
                yield (low, taken[index] - 1)
            low = taken[index] + 1
            index += 1
        else:
            yield (low, end)
            return
