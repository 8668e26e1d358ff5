"""The hub's snapshot keeper (seed 000's future work): the hub as a silent, durable member.

The keeper is an observer ``ReplicaClient`` with id ``hub``: it delivers every data message in
causal order as a client would (it never writes and never sends ``Conflict``), so it holds the
same object states, and it keeps the latest ``log_per_origin`` data messages of every origin.
With them the hub answers what would otherwise go to every peer:

- a client's ``subscribe``: a ``retry`` from ``hub`` with what the subscriber lacks, in the
  order the keeper delivered it (always sent, possibly empty: the subscriber knows it was heard),
  then the keeper's vector to the subscriber alone (a ``subscribe`` from ``hub``: everything the
  hub had accepted when it answered, which a client's ``synced()`` waits for),
  or a ``snapshot`` when the log no longer reaches back far enough and the subscriber has seen
  nothing the keeper has not. Served, it goes no further: the keeper learns the gaps it reveals
  (and NACKs them), and the others learn everything it could tell them from the keeper's own
  announcements. Only a subscribe the keeper cannot serve is forwarded, for the peers to serve;
- a ``nack`` whose whole range is in the log: answered here, not forwarded;
- a ``conflict``: every replica that detects it tells the loser, so the keeper forwards the
  first and drops the same conflict (loser, object, loser's seq) from the others.

So a join or a writer's tail-loss announcement costs one message to the hub instead of one to
every client, and the keeper's ``subscribe`` (its vector, multicast after each burst of
deliveries with backoff) is the one announcement that finds lost last messages for everyone.
It catches up like a client (its own NACKs go out through the hub; clients answer its
``subscribe`` with what it lacks of theirs), so after a restart it asks for what it missed.
The store is committed in groups, and nothing the hub sends leaves before the group that
holds what it depends on is on disk (``HubService`` sends through ``commit_then``): a data
message is relayed once the keeper's delivery of it is durable, a retry, snapshot or vector
once what it tells is. So a power loss of the hub (its last group lost on its way to disk)
forgets only what nobody but its writer has seen, and the writer's announcements and the
keeper's NACKs bring it back; the hub never delivers or relays a message twice, and a write
it relayed survives even if its writer never comes back. Writes wait in memory until the
group, which goes to the runtime's store in one ``apply`` and one ``commit_then``: on a network
a ``WriteBehindStore`` writes and fsyncs it on its own thread, so the keeper's hot path never
waits on sqlite or on the disk. The log is append-only in the store (``RowLog``): a group
adds one row per origin it delivered from and deletes the rows that left the bound, so what it
writes is what is new.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import orjson

from ...core.env import Env, Store, TimerHandle, scan_with_pending
from ...core.errors import ConfigError, CorruptMessage, InvalidMessage, StateError
from ...core.messages import Message
from ...core.rowlog import RowLog
from ..ordering.causal import LAYER
from .config import ReplicaConfig
from .objects import ReplicaClient
from .wire import (
    HUB_ID,
    MAX_RETRY_BATCH,
    Clear,
    Conflict,
    Data,
    Nack,
    ReplicaCodec,
    Retry,
    Snapshot,
    StopAll,
    Subscribe,
)

__all__ = ["HubKeeper", "KeeperConfig"]

_LOG = "keeper.log"  # a RowLog by origin: at each seq, "index json" (index: delivery order)
_FORMER_LOG = "keeper.segments"  # the layout before the RowLog (16 rewritten entries per row)
MAX_PENDING_WRITES = 65_536  # writes held for the group commit; more commit at once
_FRAME_OVERHEAD = 256  # bytes of a retry or snapshot frame besides its parts


@dataclasses.dataclass(frozen=True, slots=True)
class KeeperConfig:
    replica: ReplicaConfig = dataclasses.field(default_factory=ReplicaConfig)
    log_per_origin: int = 1000  # latest data messages kept per origin
    part_bytes: int = 32 * 1024  # encoded bytes per retry or snapshot frame (under max_frame)
    # how long a group of the keeper's store forms before it is handed to the runtime's store
    # (0: at the end of the step); every reply of the hub waits for its group on disk, so this
    # is added to the hub's latency, and the runtime's store groups what arrives while it writes
    # (handing each write over at once was measured: more, smaller groups, 0.9x the throughput)
    commit_interval: float = 0.0
    conflict_memory: int = 4096  # conflicts recently forwarded, to drop the same one again
    # a NACK the log cannot serve is answered with a snapshot, at most once per this many
    # seconds per client (the client re-NACKs with backoff meanwhile)
    snapshot_interval: float = 1.0
    snapshot_memory: int = 100_000  # clients whose last snapshot time is kept

    def __post_init__(self) -> None:
        if self.log_per_origin < 1:
            raise ConfigError("log_per_origin must be >= 1")
        if self.part_bytes < 1024:
            raise ConfigError("part_bytes must be >= 1024")
        if self.commit_interval < 0:
            raise ConfigError("commit_interval must be >= 0")
        if self.conflict_memory < 0:
            raise ConfigError("conflict_memory must be >= 0")
        if self.snapshot_interval < 0 or self.snapshot_memory < 1:
            raise ConfigError("snapshot_interval must be >= 0 and snapshot_memory >= 1")


RouteFn = Callable[[Message], None]
"""Send a message from the hub: to its ``dest``, or to every connection."""


class _GroupCommitStore(Store):
    """The keeper's store: writes wait in memory (reads see them) and reach the inner store as
    a group, in one ``apply`` and one ``commit_then``, every ``interval`` (or at once past
    ``max_pending`` writes); ``before_flush`` adds its last writes first.

    ``commit_then(fn)`` joins the next group: ``fn`` runs once the inner store has it on disk.
    ``commit()`` is durable: it sends the group now and returns once the inner store has it on
    disk (blocking: for stops, not for the hot path).
    """

    def __init__(self, inner: Store, env: Env, interval: float, *,
                 max_pending: int = MAX_PENDING_WRITES) -> None:
        self.inner = inner
        self._env = env
        self._interval = interval
        self._max_pending = max_pending
        self._timer: TimerHandle | None = None
        self._pending: dict[tuple[str, str], bytes | None] = {}  # None: deleted
        self._callbacks: list[Callable[[], None]] = []  # of the next group
        self._flushing = False  # ``before_flush`` is adding its writes
        self.before_flush: Callable[[], None] | None = None
        self.groups = 0  # groups handed to the inner store
        self.groups_durable = 0  # of them, on disk

    def get(self, table: str, key: str) -> bytes | None:
        pending = self._pending
        if (table, key) in pending:
            return pending[(table, key)]
        return self.inner.get(table, key)

    def put(self, table: str, key: str, value: bytes) -> None:
        if not isinstance(value, bytes):
            raise TypeError(f"store values are bytes, got {type(value).__name__}")
        self._pending[(table, key)] = value
        self._grew()

    def delete(self, table: str, key: str) -> None:
        self._pending[(table, key)] = None
        self._grew()

    def _grew(self) -> None:
        if len(self._pending) >= self._max_pending and not self._flushing:
            self.flush()

    def scan(self, table: str) -> Iterator[tuple[str, bytes]]:
        return scan_with_pending(self.inner.scan(table), table, self._pending)

    def apply(self, changes: Mapping[tuple[str, str], bytes | None]) -> None:
        for (table, key), value in changes.items():
            if value is None:
                self.delete(table, key)
            else:
                self.put(table, key, value)

    def commit_then(self, fn: Callable[[], None]) -> None:
        self._callbacks.append(fn)
        if self._timer is None:
            self._timer = self._env.set_timer(self._interval, self.flush)

    @property
    def idle(self) -> bool:
        """Nothing waits to be written or is on its way to disk: what the hub sends now
        overtakes no reply that waits for a group."""
        return (not self._pending and not self._callbacks
                and self.groups_durable == self.groups)

    def commit(self) -> None:
        self.flush()
        self.inner.commit()

    def flush(self) -> None:
        """Hand the group to the inner store now (``commit_then``: durable later)."""
        if self._timer is not None:
            self._env.cancel(self._timer)
            self._timer = None
        if self.before_flush is not None:
            self._flushing = True
            try:
                self.before_flush()
            finally:
                self._flushing = False
        pending, self._pending = self._pending, {}
        callbacks, self._callbacks = self._callbacks, []
        if not pending and not callbacks:
            return
        if pending:
            self.inner.apply(pending)
        self.groups += 1
        self.inner.commit_then(lambda: self._durable(callbacks))

    def _durable(self, callbacks: list[Callable[[], None]]) -> None:
        self.groups_durable += 1
        for fn in callbacks:
            fn()


class HubKeeper:
    """Observes what the hub relays; answers subscribes and NACKs it can serve."""

    def __init__(self, env: Env, route: RouteFn, *, config: KeeperConfig | None = None,
                 connected: Callable[[str], bool] | None = None,
                 tell: Callable[[str, Message], None] | None = None) -> None:
        """``connected(client)``: whether ``client`` has a connection to the hub now (the
        hub's relay; default: every client), to NACK only an origin that can answer.
        ``tell(client, msg)``: send ``msg`` to ``client`` alone (the answer to its subscribe
        ends with the keeper's vector, a ``subscribe`` from the hub: what the hub had accepted
        then; default: not sent)."""
        if env.node != HUB_ID:
            raise ConfigError(f"the keeper speaks as {HUB_ID!r}, its env is {env.node!r}")
        self.config = config if config is not None else KeeperConfig()
        self.env = env
        self._route = route
        self._connected: Callable[[str], bool] = (connected if connected is not None
                                                  else lambda client: True)
        self._tell: Callable[[str, Message], None] = (tell if tell is not None
                                                      else lambda client, msg: None)
        self._codec = ReplicaCodec()
        self.store = _GroupCommitStore(env.store, env, self.config.commit_interval)
        # origin -> seq -> (delivery index, message, encoded size); contiguous seqs per origin
        self._log: dict[str, dict[int, tuple[int, Data, int]]] = {}
        self._first: dict[str, int] = {}  # origin -> lowest seq in its log
        self._index = 0
        self._rows = RowLog(self.store, _LOG, former_table=_FORMER_LOG)
        self._received: tuple[Data, bytes | None] | None = None  # the message being handled
        self._delivered_now: list[Data] | None = None  # delivered while handling a Data
        self.replica = ReplicaClient(env, config=self.config.replica, observer=True,
                                     on_delivered=self._delivered, send=route,
                                     store=self.store)
        self.store.before_flush = self._before_flush
        self._load_log()
        self.served_subscribes = 0
        self.served_nacks = 0
        self.duplicate_conflicts = 0
        # (loser, object, loser_time) of conflicts forwarded lately, oldest first (a dict as a
        # bounded ordered set): every replica that detects a conflict tells the loser (the seed),
        # so with N clients the loser would hear it N times; it needs to hear it once (and it
        # finds the conflict on its own when the winner's write reaches it: footnote 10)
        self._conflicts: dict[tuple[str, str, int], None] = {}
        self.snapshots = 0
        self._snapshot_at: dict[str, float] = {}  # client -> when it was last sent a snapshot

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        if self.env.tracing:
            # what the store restored, in delivery order (see ``trace_restored``)
            for _index, data, _size in sorted(
                    (entry for log in self._log.values() for entry in log.values()),
                    key=lambda entry: entry[0]):
                self.replica.causal.trace_restored(data)
        self.replica.start()

    def stop(self) -> None:
        self.replica.stop()
        self.store.commit()  # on disk before the hub is gone

    # -- the log --------------------------------------------------------------------------------

    def _load_log(self) -> None:
        for origin, entries in self._rows.load().items():
            for seq, entry in entries:
                index, _, body = entry.partition(b" ")
                try:
                    position = int(index)
                except ValueError as exc:
                    raise StateError(f"keeper log entry {origin!r}:{seq} is damaged") from exc
                self._recall(origin, seq, position, body)
        for origin in self._log:
            self._trim(origin)  # keep what the bound allows

    def _recall(self, origin: str, seq: int, index: int, body: bytes) -> None:
        data = self._codec.from_dict(orjson.loads(body))
        if isinstance(data, Data):
            self._remember(origin, seq, index, data, len(body))

    def _remember(self, origin: str, seq: int, index: int, data: Data, size: int) -> None:
        log = self._log.setdefault(origin, {})
        log[seq] = (index, data, size)
        self._first[origin] = min(self._first.get(origin, seq), seq)
        self._index = max(self._index, index)

    def _delivered(self, data: Data) -> None:
        origin, seq = data.id, data.seq
        self._index += 1
        if self._delivered_now is not None:
            self._delivered_now.append(data)
        received = self._received
        if received is not None and received[0] is data and received[1] is not None:
            body = received[1]  # as it came: decoded from it, so it decodes to ``data`` again
        else:
            body = orjson.dumps(self._codec.to_dict(data))  # its size and its entry
        log = self._log.get(origin)
        if log is None:
            log = self._log[origin] = {}
            self._first[origin] = seq
        log[seq] = (self._index, data, len(body))  # delivered in order: seq is the newest
        self._rows.append(origin, seq, b"%d %s" % (self._index, body))
        if len(log) > self.config.log_per_origin:
            self._trim(origin)

    def _trim(self, origin: str) -> None:
        """Forget the oldest messages of ``origin`` beyond ``log_per_origin``, and the rows
        they emptied."""
        log = self._log[origin]
        first = self._first[origin]
        while len(log) > self.config.log_per_origin:
            log.pop(first, None)
            first += 1
        self._first[origin] = first
        self._rows.drop_before(origin, first)

    def _before_flush(self) -> None:
        self._rows.write_pending()
        self.replica.write_pending()

    def logged(self, origin: str) -> tuple[int, int] | None:
        """The (first, last) seqs of ``origin`` in the log, None if none."""
        log = self._log.get(origin)
        if not log:
            return None
        return self._first[origin], self._first[origin] + len(log) - 1

    def known_high(self, client: str) -> int:
        """The highest seq of ``client`` the hub has delivered or knows to exist: where a new
        incarnation of the id resumes its numbering."""
        return self.replica.causal.known_high(client)

    def _has(self, origin: str, start: int, end: int) -> bool:
        span = self.logged(origin)
        return span is not None and span[0] <= start and end <= span[1]

    # -- what the hub relays ----------------------------------------------------------------------

    def handle(self, msg: Message, payload: bytes | None = None) -> Message | None:
        """Observe ``msg`` from a client (its id already checked by the relay); returns what the
        hub should forward (``msg``, a rewritten message, or None when answered here). A data
        message with a wrong checksum raises ``InvalidMessage``: the hub refuses it.
        ``payload``: the JSON ``msg`` was decoded from, logged as it is if ``msg`` is delivered
        at once (instead of encoding it again)."""
        replica = self.replica
        if isinstance(msg, Data):
            return msg if msg in self.handle_data(msg, payload) else None
        if isinstance(msg, Retry):
            for part in msg.retry:
                self._check_crc(part)
            if msg.dest == HUB_ID:
                replica.on_message(msg.id, msg)
                return None
            for part in msg.retry:
                replica.causal.offer(part)
            replica.causal.commit_if_dirty()
            return msg
        if isinstance(msg, Subscribe):
            replica.on_message(msg.id, msg)  # learn what it has; NACK what we lack
            return self._serve_subscribe(msg)
        if isinstance(msg, Nack):
            if msg.dest == HUB_ID:
                return None  # the keeper never publishes: nothing of its own to resend
            if self._has(msg.dest, msg.start, msg.end):
                self.served_nacks += 1
                self._send_retries(msg.id, [self._log[msg.dest][seq]
                                            for seq in range(msg.start, msg.end + 1)])
                return None
            delivered = replica.causal.delivered(msg.dest)
            if delivered < msg.start or (msg.end > delivered and self._connected(msg.dest)):
                return msg  # the origin has what the keeper has not had (if it is there)
            # what the log no longer holds, from an origin that is gone or not: the snapshot
            # answers (it holds every delivered write), never a NACK after a departed client
            self._snapshot_for(msg.id, reason="nack")
            return None
        if isinstance(msg, Conflict):
            return None if msg.dest == HUB_ID else self._first_conflict(msg)
        if isinstance(msg, Snapshot):
            raise InvalidMessage("only the hub sends snapshots")
        if isinstance(msg, Clear | StopAll):
            return msg
        raise InvalidMessage(f"the hub does not relay {msg.TYPE} from clients")

    def handle_data(self, msg: Data, payload: bytes | None = None) -> list[Data]:
        """Observe a data message a client multicast; returns what the hub should relay: the
        messages the keeper delivered because of it, in delivery order (``msg`` unless it was
        held back or a duplicate, and the held ones it released). A message is relayed only as
        the keeper's delivery of it, and once that is on disk (the hub sends through the
        store's ``commit_then``): the hub never relays what a power loss could make it forget,
        nor a message twice. A wrong checksum raises ``CorruptMessage``."""
        self._check_crc(msg)
        self._received = (msg, payload)
        self._delivered_now = []
        try:
            self.replica.on_message(msg.id, msg)
            return self._delivered_now
        finally:
            self._received = None
            self._delivered_now = None

    def _first_conflict(self, msg: Conflict) -> Conflict | None:
        seen = (msg.dest, msg.object, msg.loser_time)
        if seen in self._conflicts:
            self.duplicate_conflicts += 1
            return None
        if self.config.conflict_memory:
            self._conflicts[seen] = None
            if len(self._conflicts) > self.config.conflict_memory:
                del self._conflicts[next(iter(self._conflicts))]
        return msg

    @staticmethod
    def _check_crc(data: Data) -> None:
        if not data.crc_ok:
            raise CorruptMessage(f"data {data.id}:{data.seq} on {data.key!r}: wrong crc")

    def _serve_subscribe(self, msg: Subscribe) -> Message | None:
        have = self.replica.causal.vector
        theirs = msg.vector
        lacking = {origin: (theirs.get(origin, 0) + 1, high) for origin, high in have.items()
                   if high > theirs.get(origin, 0)}
        # the subscriber's own writes the keeper lacks do not stop a snapshot: the keeper NACKs
        # them (it just learned of them), and the subscriber applies them again on top of it
        covered = all(count <= have.get(origin, 0) for origin, count in theirs.items()
                      if origin != msg.id)
        # a subscriber that lacks writes of its own id is a new incarnation of it (a fresh or
        # restored store): a retry could not give it them (nobody delivers its own id's
        # messages to itself), the snapshot gives it their effects
        own_lacking = msg.id in lacking
        self.served_subscribes += 1
        if not own_lacking and all(self._has(origin, start, end)
                                   for origin, (start, end) in lacking.items()):
            parts = [self._log[origin][seq] for origin, (start, end) in lacking.items()
                     for seq in range(start, end + 1)]
            self._send_retries(msg.id, parts)
            kind = "retry"
        elif covered:
            self._send_snapshot(msg.id, have)
            self._snapshot_at[msg.id] = self.env.now()
            kind = "snapshot"
        else:
            # the subscriber has messages we lack and we lack what it misses: the peers serve
            self._send_retries(msg.id, [])
            self.env.trace("serve", layer=LAYER, peer=msg.id, kind="forward")
            self._tell(msg.id, Subscribe(id=HUB_ID, vector=have))
            return msg
        self.env.trace("serve", layer=LAYER, peer=msg.id, kind=kind,
                       messages=sum(end - start + 1 for start, end in lacking.values()))
        self._tell(msg.id, Subscribe(id=HUB_ID, vector=have))
        return None

    def _snapshot_for(self, dest: str, *, reason: str) -> None:
        """A snapshot to ``dest``, at most one per ``snapshot_interval`` (the asker repeats
        its NACKs with backoff while its gap lasts)."""
        now = self.env.now()
        last = self._snapshot_at.get(dest)
        if last is not None and now - last < self.config.snapshot_interval:
            self.env.trace("serve", layer=LAYER, peer=dest, kind="snapshot_later",
                           reason=reason)
            return
        if len(self._snapshot_at) >= self.config.snapshot_memory:
            del self._snapshot_at[next(iter(self._snapshot_at))]
        self._snapshot_at.pop(dest, None)
        self._snapshot_at[dest] = now
        self._send_snapshot(dest, self.replica.causal.vector)
        self.env.trace("serve", layer=LAYER, peer=dest, kind="snapshot", reason=reason)

    def _send_retries(self, dest: str, parts: list[tuple[int, Data, int]]) -> None:
        """Retries from the hub to ``dest``, in delivery order, each under ``part_bytes``;
        one empty retry when there is nothing to send."""
        parts.sort(key=lambda part: part[0])
        batch: list[Data] = []
        size = _FRAME_OVERHEAD
        for _index, data, length in parts:
            if batch and (size + length > self.config.part_bytes
                          or len(batch) == MAX_RETRY_BATCH):
                self._route(Retry(id=HUB_ID, dest=dest, retry=tuple(batch)))
                batch, size = [], _FRAME_OVERHEAD
            batch.append(data)
            size += length + 1
        if batch or not parts:
            self._route(Retry(id=HUB_ID, dest=dest, retry=tuple(batch)))

    def _send_snapshot(self, dest: str, vector: dict[str, int]) -> None:
        """The object states, in parts under ``part_bytes`` (a path too long for one part
        keeps its latest writes)."""
        self.snapshots += 1
        budget = self.config.part_bytes - _FRAME_OVERHEAD - len(orjson.dumps(vector))
        objects: dict[str, tuple[Any, ...]] = {}
        size = 0
        for key, path in self.replica.paths().items():
            rows: list[Any] = []
            length = len(key) + 8
            for row in reversed(path):
                row_length = len(orjson.dumps(row)) + 1
                if rows and length + row_length > budget:
                    break
                rows.append(row)
                length += row_length
            rows.reverse()
            if objects and size + length > budget:
                self._route(Snapshot(id=HUB_ID, dest=dest, vector=vector, objects=objects,
                                     last=False))
                objects, size = {}, 0
            objects[key] = tuple(tuple(row) for row in rows)
            size += length
        self._route(Snapshot(id=HUB_ID, dest=dest, vector=vector, objects=objects, last=True))
