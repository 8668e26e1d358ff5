"""Replicated key/value objects with total order per object (seed 000), over causal delivery.

``ReplicaClient`` is the client process: ``set``/``delete``/``get``/``items`` on objects whose
writes carry revisions, conflicts decided the same way on every replica without negotiation.

Which write wins is decided by ``gossamer.protocols.ordering.per_object`` (the winning path of
each key, lowest writer id at every fork); this module is what the client does around it.

Each losing write's writer is told with a ``Conflict``, except that a client never sends one to
itself: it sees its own write reverted when it delivers the winner (the seed's footnote 10) and
rebases then, once (resolved writes are recorded durably). A ``Conflict`` from a peer makes the
loser fetch the winner (a NACK) if it is not delivered yet (footnote 11) and is then checked
against that local resolution. A rebase re-sends the intent on the current state through the
application's ``rebase(key, intended, current)``; ``None`` gives the write up. Lost intents wait
in a durable queue for a random delay whose window doubles with each loss of the same intent,
and while messages are known to be missing here (up to ``catch_up_wait``): the losers of one
winner would otherwise rebase in lockstep on stale states and collide again.

Limits: histories keep ``history_limit`` writes per key; a verdict on a write whose base may
have left them is marked ``beyond_history`` in the ``conflict`` trace row (see per_object).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from ...core.env import Env, Store, TimerHandle, put_json
from ...core.errors import ConfigError, InvalidMessage, StateError
from ...core.ids import NodeId
from ...core.messages import DEFAULT_MAX_FRAME, Message
from ..ordering.causal import LAYER, CausalDelivery, msg_id
from ..ordering.per_object import Verdict, WinningPaths, Write
from .config import ChangeFn, LinkState, PeerFn, RebaseFn, ReplicaConfig, reapply
from .wire import (
    HUB_ID,
    Clear,
    Conflict,
    Data,
    Left,
    Nack,
    Retry,
    Snapshot,
    StopAll,
    Subscribe,
    crc_of,
    max_write_bytes,
    write_bytes,
)

__all__ = ["ReplicaClient"]

_RESOLVED, _REBASE = "replica.resolved", "replica.rebase"
_OFFLINE = "replica.offline"
_SLACK = 1e-9  # seconds: timers are floats

_OfflineWrite = tuple[str, Any, bool, "str | None"]  # key, content, deleted, base revision


class ReplicaClient:
    """One client of the hub: the replicated objects, their conflicts and rebases. It runs
    inside a process that owns its link: ``ReplicaNode`` (a client over its connection to the
    hub) or ``HubKeeper`` (the hub's observer)."""

    def __init__(
        self,
        env: Env,
        *,
        config: ReplicaConfig | None = None,
        rebase: RebaseFn | None = None,
        on_change: ChangeFn | None = None,
        on_clear: PeerFn | None = None,
        on_stop: PeerFn | None = None,
        on_link: Callable[[LinkState], None] | None = None,
        on_delivered: Callable[[Data], None] | None = None,
        observer: bool = False,
        send: Callable[[Message], None] | None = None,
        store: Store | None = None,
    ) -> None:
        """``observer``: a member that never writes and never sends ``Conflict`` and announces
        its vector after deliveries (the hub's snapshot keeper); ``on_delivered`` sees every
        data message as it is delivered. ``send``: how a message reaches the hub (a client's
        connection, ``ReplicaNode``; the keeper's route inside the hub; default ``env.send`` to
        the hub's node id, for unit tests only); ``store``: default ``env.store``."""
        self.env = env
        self.config = config if config is not None else ReplicaConfig()
        self.me: NodeId = env.node
        self.rebase: RebaseFn = rebase if rebase is not None else reapply
        self.on_change = on_change
        # the revision each key's last on_change named: a write told once, not again when
        # its own copy comes back or a step re-examines the key (bounded by the keys held)
        self._told: dict[str, str | None] = {}
        self.on_clear = on_clear
        self.on_stop = on_stop
        self.on_link = on_link
        self.on_delivered = on_delivered
        self.observer = observer
        # the largest write ``set`` takes (key and JSON content); the node that owns the link
        # lowers it to half of its frame limit (``max_write_bytes``)
        self.max_write = max_write_bytes(DEFAULT_MAX_FRAME)
        self.link = LinkState.OFFLINE
        self.causal = CausalDelivery(env, config=self.config.causal, on_deliver=self._apply,
                                     announce_deliveries=observer, group_commit=observer,
                                     send=send, store=store)
        self.send = self.causal.send
        self._sync_timer: TimerHandle | None = None
        self._sync_started = 0.0
        # writes made while not online: number -> (key, content, deleted, base revision)
        self._offline: dict[int, _OfflineWrite] = {}
        self._offline_latest: dict[str, int] = {}  # key -> its latest queued write
        self._offline_next = 1
        self._snapshot_vector: dict[str, int] | None = None  # a snapshot being received
        self._snapshot_parts: dict[str, tuple[Any, ...]] = {}
        self.stale_conflicts = 0  # Conflicts whose loser is still applied here (should be 0)
        self.hub_vector: dict[str, int] = {}  # the hub's vector as it last told it
        self.hub_vectors = 0  # how many times it told it
        self._store = store if store is not None else env.store
        self._resolved: dict[int, int | None] = {}  # own lost seq -> rebased seq (None: gave up)
        self._rebased_from: dict[int, int] = {}  # rebased seq -> the lost seq it carries on
        self._pending: dict[int, Conflict] = {}  # loser seq -> Conflict awaiting its winner
        # own lost writes (seq -> key, write) waiting for their rebase; durable, like a send
        # queue, so an intent survives a crash between its loss and its rebase
        self._rebase_queue: dict[int, tuple[str, Write]] = {}
        self._rebase_at: dict[int, float] = {}  # seq -> when to rebase it (not durable)
        self._rebase_timer: TimerHandle | None = None
        self._rebase_timer_at = 0.0
        self._awaiting_catch_up = False  # due rebases wait for the missing messages
        self._outbox: list[Conflict] = []  # sent once the deliveries are committed
        # an observer commits in groups: its paths reach the store at ``write_pending``
        self._paths = WinningPaths(self._store, history_limit=self.config.history_limit,
                                   on_applied=self._trace_applied,
                                   on_reverted=self._trace_reverted, defer_writes=observer)
        for key, raw in self._store.scan(_RESOLVED):
            value = int(raw) if raw != b"-" else None
            self._resolved[int(key)] = value
            if value is not None:
                self._rebased_from[value] = int(key)
        for key, raw in self._store.scan(_REBASE):
            object_key, row = orjson.loads(raw)
            self._rebase_queue[int(key)] = (str(object_key), Write.from_json(row))
            self._rebase_at[int(key)] = self._rebase_time(int(key))
        for key, raw in self._store.scan(_OFFLINE):
            object_key, content, deleted, base = orjson.loads(raw)
            number = int(key)
            self._offline[number] = (str(object_key), content, bool(deleted), base)
            self._offline_latest[str(object_key)] = number
            self._offline_next = max(self._offline_next, number + 1)
        # key -> the seq of this client's latest intent for it (a write the application made,
        # not a rebase of an older one): a lost write is rebased only while it carries that
        # intent (docs/replica-wire.md, "intent order"); rebuilt from the durable send log
        self._latest_intent: dict[str, int] = {}
        for sent in self.causal.sent_messages():
            if sent.seq not in self._rebased_from:
                self._latest_intent[sent.key] = sent.seq

    # -- Process ----------------------------------------------------------------------------

    def start(self) -> None:
        """Start as connected (the hub's keeper, unit tests); ``ReplicaNode`` calls
        ``connected()`` when its connection opens instead."""
        self.connected()

    def stop(self) -> None:
        self._go_offline("stopped")

    def connected(self) -> None:
        """The runtime's link to the hub is up: resubscribe and sync before sending."""
        if self.link is not LinkState.OFFLINE:
            return
        self._sync_started = self.env.now()
        self.env.trace("connect", layer=LAYER, node_state="syncing", queued=len(self._offline))
        self.causal.start()
        if self.observer:
            self._set_link(LinkState.ONLINE)
            return
        self._set_link(LinkState.SYNCING)
        self._sync_timer = self.env.set_timer(self.config.sync_timeout,
                                              lambda: self._sync_done(timed_out=True))

    def disconnected(self) -> None:
        """The link to the hub is down (or going offline on purpose): writes queue up."""
        self._go_offline("disconnected")

    def _go_offline(self, why: str) -> None:
        if self._rebase_timer is not None:
            self.env.cancel(self._rebase_timer)
            self._rebase_timer = None
        if self._sync_timer is not None:
            self.env.cancel(self._sync_timer)
            self._sync_timer = None
        self.causal.stop()
        if self.link is not LinkState.OFFLINE:
            self.env.trace("offline", layer=LAYER, reason=why, queued=len(self._offline))
            self._set_link(LinkState.OFFLINE)

    def _set_link(self, state: LinkState) -> None:
        self.link = state
        if self.on_link is not None:
            self.on_link(state)

    def on_message(self, src: NodeId, msg: Message) -> None:
        if self.link is LinkState.OFFLINE:
            self.env.trace("drop", layer=LAYER, peer=getattr(msg, "id", src), reason="offline",
                           type=msg.TYPE)
            return
        if isinstance(msg, Data | Retry | Nack | Subscribe):
            if isinstance(msg, Subscribe) and msg.id == HUB_ID:
                self.hub_vector = dict(msg.vector)  # what the hub had accepted (its keeper)
                self.hub_vectors += 1
            self.causal.on_message(msg)  # deliveries land in _apply, then are committed
        else:
            self.causal.note_heard()
            if isinstance(msg, Conflict):
                self._on_conflict(msg)
            elif isinstance(msg, Snapshot):
                self._on_snapshot(msg)
            elif isinstance(msg, Clear):
                self._cleared(msg.id)
            elif isinstance(msg, StopAll):
                self.env.trace("stop", layer=LAYER, peer=msg.id)
                if self.on_stop is not None:
                    self.on_stop(msg.id)
            elif isinstance(msg, Left):
                pass  # informational: the seed's protocols need no membership
            else:
                raise InvalidMessage(f"replica client got {msg.TYPE}")
        self._after_delivery()
        if (self.link is LinkState.SYNCING and self.causal.heard
                and self.causal.caught_up and self._snapshot_vector is None):
            self._sync_done(timed_out=False)

    @property
    def store(self) -> Store:
        """Where this client's state is kept (``env.store`` unless given one)."""
        return self._store

    def resume_after(self, seq: int) -> None:
        """A new incarnation of this id (``CausalDelivery.resume_after``): number writes after
        ``seq``; the earlier runs' lost writes waiting to be rebased are theirs, given up."""
        before = self.causal.sent
        if not self.causal.resume_after(seq):
            return
        for lost in [n for n in self._rebase_queue if n <= seq]:
            del self._rebase_queue[lost], self._rebase_at[lost]
            self._store.delete(_REBASE, f"{lost:012d}")
        self._pending = {n: c for n, c in self._pending.items() if n > seq}
        self._store.commit()
        self.env.trace("resume", layer=LAYER, origin=self.me, seq=seq, held=before)

    def ask_hub(self) -> None:
        """Send our vector to the hub (a ``subscribe``): its keeper answers with what we lack
        and then with its own vector (``hub_vectors`` counts up). Online only."""
        if self.link is LinkState.OFFLINE:
            raise StateError("asking the hub needs a connection: this client is offline")
        self.send(Subscribe(id=self.me, vector=self.causal.vector))

    def has_all_the_hub_told(self) -> bool:
        """Everything the hub's last vector counts (but our own writes) is applied here."""
        vector = self.causal.vector
        return all(vector.get(origin, 0) >= count for origin, count in self.hub_vector.items()
                   if origin != self.me)

    # -- the application's face -------------------------------------------------------------

    def get(self, key: str) -> Any:
        """The content of ``key`` here, or None if it does not exist (or was deleted): the
        latest write waiting in the offline queue, else the replicated state."""
        number = self._offline_latest.get(key)
        if number is not None:
            _key, content, deleted, _base = self._offline[number]
            return None if deleted else content
        return self.replicated(key)

    def replicated(self, key: str) -> Any:
        """The content of ``key`` as replicated (offline writes not included)."""
        history = self._paths.get(key)
        if not history or history[-1].deleted:
            return None
        return history[-1].content

    def revision(self, key: str) -> str | None:
        history = self._paths.get(key)
        return history[-1].revision if history else None

    def items(self) -> dict[str, Any]:
        """Every existing object here: key -> content (offline writes included)."""
        keys = set(self._paths.keys()) | set(self._offline_latest)
        found = {key: self.get(key) for key in sorted(keys)}
        return {key: content for key, content in found.items() if content is not None}

    @property
    def offline_queue(self) -> list[tuple[str, Any, bool]]:
        """Writes waiting for a connection, oldest first: (key, content, deleted)."""
        return [(key, content, deleted)
                for key, content, deleted, _base in (self._offline[n]
                                                     for n in sorted(self._offline))]

    @property
    def rebase_queue(self) -> list[tuple[str, Any, bool]]:
        """Own lost writes waiting to be rebased, oldest first: (key, content, deleted)."""
        return [(key, write.content, write.deleted)
                for key, write in (self._rebase_queue[s] for s in sorted(self._rebase_queue))]

    def revisions(self) -> dict[str, str]:
        """Every key ever written -> its current revision (deleted objects included)."""
        return {key: history[-1].revision for key, history in sorted(self._paths.items())
                if history}

    def paths(self) -> dict[str, list[list[Any]]]:
        """Every object's kept winning path, oldest first, as snapshot rows
        ``[revision, old, writer, seq, content, deleted]``."""
        return {key: [w.to_json() for w in history]
                for key, history in sorted(self._paths.items()) if history}

    def history(self, key: str) -> list[tuple[str, str, int]]:
        """The kept winning path of ``key``: (revision, writer, seq), oldest first."""
        return [(w.revision, w.writer, w.seq) for w in self._paths.get(key) or []]

    @property
    def vector(self) -> dict[str, int]:
        return self.causal.vector

    @property
    def holdback_size(self) -> int:
        return self.causal.holdback_size

    @property
    def resolved(self) -> dict[int, int | None]:
        """Own lost writes (seq) -> the seq of their rebased write, None if given up."""
        return dict(self._resolved)

    def set(self, key: str, content: Any) -> str | None:
        """Write ``content`` (JSON, not None) to ``key``; returns the new revision, or None
        when the write waits in the offline queue."""
        if not isinstance(key, str) or not key:
            raise ConfigError(f"key must be a non-empty string, got {key!r}")
        if content is None:
            raise ConfigError("content None is not a value: use delete(key)")
        try:
            size = write_bytes(key, content)
        except (TypeError, orjson.JSONEncodeError) as exc:
            raise ConfigError(f"content of {key!r} is not JSON: {exc}") from None
        if size > self.max_write:
            raise ConfigError(
                f"a write of {size} bytes (key and JSON content) to {key!r}: at most "
                f"{self.max_write} (half the frame limit, so that its catch-up still fits "
                f"a frame); nothing was written")
        return self._write(key, content, deleted=False)

    def delete(self, key: str) -> str | None:
        """Delete ``key``; returns the deleting revision, None if there was nothing to delete
        or the delete waits in the offline queue."""
        if self.get(key) is None:
            return None
        return self._write(key, None, deleted=True)

    # -- writing ----------------------------------------------------------------------------

    def _new_revision(self) -> str:
        return f"{self.env.rng.getrandbits(48):012x}"

    def _write(self, key: str, content: Any, *, deleted: bool) -> str | None:
        if self.observer:
            raise StateError("an observer replica does not write")
        if self.link is not LinkState.ONLINE:
            self._queue_offline(key, content, deleted=deleted)
            return None
        return self._write_now(key, content, deleted=deleted)

    def _write_now(self, key: str, content: Any, *, deleted: bool) -> str:
        history = self._paths.path(key)
        old = history[-1].revision if history else None
        revision = self._new_revision()
        msg = self.causal.make_data(key=key, old_value=old, value=revision, data=content,
                                    deleted=deleted)
        self._paths.push(key, history, Write.of(msg))
        self._latest_intent[key] = msg.seq
        self.causal.send_data(msg)  # commits the write with its sequence number
        self._changed(key)
        return revision

    def write_pending(self) -> None:
        """An observer's deliveries since the last call, to the store (before its group
        commit; a writer's are written as they happen): the histories' new writes and the
        delivered counts."""
        self.causal.write_pending()
        self._paths.write_pending()

    def _trace_applied(self, key: str, write: Write) -> None:
        """``apply``: ``write`` is now the object's current revision here (the pipeline's
        convergence check reads these, minus the later ``revert`` rows)."""
        if self.env.tracing:
            self.env.trace("apply", layer=LAYER, msg=msg_id(write.writer, write.seq),
                           origin=write.writer, key=key, seq=write.seq, rev=write.revision,
                           old=write.old)

    def _trace_reverted(self, key: str, write: Write) -> None:
        self.env.trace("revert", layer=LAYER, msg=msg_id(write.writer, write.seq),
                       origin=write.writer, key=key, seq=write.seq, rev=write.revision)

    def _changed(self, key: str) -> None:
        if self.on_change is not None:
            revision = self.revision(key)
            if revision is not None and self._told.get(key) == revision:
                return  # told already
            self._told[key] = revision
            self.on_change(key, self.get(key), revision)

    # -- applying delivered writes ----------------------------------------------------------

    def _apply(self, msg: Data) -> None:
        """A write delivered in causal order: extend, cut the path for it, or discard it."""
        if self.on_delivered is not None:
            self.on_delivered(msg)
        key = msg.key
        write = Write.of(msg)
        outcome = self._paths.add(key, write)
        if outcome.verdict is Verdict.EXTENDS:
            self._changed(key)
        elif outcome.verdict is Verdict.WINS:
            for loser in reversed(outcome.reverted):
                self._lost(key, loser, winner=write)
            self._changed(key)
        elif outcome.winner is None:
            # unreachable while causal order holds: a base revision is delivered before use
            self.env.trace("drop", layer=LAYER, msg=msg_id(msg.id, msg.seq), origin=msg.id,
                           key=key, seq=msg.seq, reason="unknown_base")
        else:
            self._lost(key, write, winner=outcome.winner,
                       beyond_history=outcome.beyond_history)

    def _lost(self, key: str, loser: Write, *, winner: Write,
              beyond_history: bool = False) -> None:
        extra: dict[str, Any] = {"beyond_history": True} if beyond_history else {}
        self.env.trace("conflict", layer=LAYER, msg=msg_id(loser.writer, loser.seq),
                       origin=loser.writer, key=key, seq=loser.seq,
                       winner=msg_id(winner.writer, winner.seq),
                       loser=msg_id(loser.writer, loser.seq), **extra)
        if self.observer:
            return  # the writers' peers tell them; the keeper only keeps the state
        if loser.writer == self.me:
            self._queue_rebase(key, loser)  # footnote 10: resolved here, no message
        else:
            self._outbox.append(Conflict(id=self.me, dest=loser.writer, loser_time=loser.seq,
                                         winner=winner.writer, winner_time=winner.seq,
                                         object=key))

    def _after_delivery(self) -> None:
        """Once deliveries are committed: tell losers, rebase own losses, settle Conflicts."""
        if self._outbox:
            outbox, self._outbox = self._outbox, []
            for conflict in outbox:
                self.send(conflict)
        if self._awaiting_catch_up and self.causal.caught_up:
            self._rebase_due()
        elif self._rebase_queue:
            self._arm_rebase()
        if self._pending:
            for seq in [s for s, c in self._pending.items()
                        if self.causal.delivered(c.winner) >= c.winner_time]:
                self._settle(self._pending.pop(seq))

    # -- offline work ---------------------------------------------------------------------------

    def _queue_offline(self, key: str, content: Any, *, deleted: bool) -> None:
        if content is not None:
            crc_of(key, "", content)  # refuse content that is not JSON before queueing it
        last = self._offline_next - 1
        # a write to the key of the write queued last, with the default rebase (which sends
        # each intent as it is): it replaces that one, which nothing could have seen. Sent
        # as a chain, hundreds of writes to one key queued by each of two clients outran the
        # other replicas' bounded histories and left them disagreeing for good (per_object,
        # Limits); writes to other keys in between keep every intent, in order (causality)
        replaces = (self.rebase is reapply and last in self._offline
                    and self._offline[last][0] == key)
        if replaces:
            number, base = last, self._offline[last][3]
        else:
            if len(self._offline) >= self.config.offline_queue_limit:
                raise StateError(f"the offline queue is full ({self.config.offline_queue_limit}"
                                 f" writes): the write to {key!r} was not made")
            number, base = self._offline_next, self.revision(key)
            self._offline_next += 1
        self._offline[number] = (key, content, deleted, base)
        self._offline_latest[key] = number
        put_json(self._store, _OFFLINE, f"{number:012d}", [key, content, deleted, base])
        self._store.commit()
        self.env.trace("queue", layer=LAYER, key=key, seq=number, deleted=deleted, base=base,
                       replaces=replaces)
        if self.on_change is not None:
            self._told[key] = None
            self.on_change(key, None if deleted else content, None)

    def _sync_done(self, *, timed_out: bool) -> None:
        """Caught up after (re)connecting: rebase the offline queue on the state now, send."""
        if self.link is not LinkState.SYNCING:
            return
        if self._sync_timer is not None:
            self.env.cancel(self._sync_timer)
            self._sync_timer = None
        self._set_link(LinkState.ONLINE)
        queued = [self._offline[n] for n in sorted(self._offline)]
        for number in sorted(self._offline):
            self._store.delete(_OFFLINE, f"{number:012d}")
        self._offline.clear()
        self._offline_latest.clear()
        sent = rebased = 0
        for key, content, deleted, base in queued:
            current = self.replicated(key)
            revision = self.revision(key)
            if deleted:
                if current is not None:
                    self._write_now(key, None, deleted=True)
                    sent += 1
                continue
            if base != revision:
                rebased += 1
                content = self.rebase(key, content, current)
                if content is None:
                    continue
            self._write_now(key, content, deleted=False)
            sent += 1
        self._store.commit()
        self.env.trace("sync", layer=LAYER, queued=len(queued), sent=sent, rebased=rebased,
                       timed_out=timed_out, waited=self.env.now() - self._sync_started)
        for key in {key for key, *_rest in queued}:
            self._changed(key)
        self._arm_rebase()

    # -- clear and stop (the demo's buttons) ------------------------------------------------

    def clear_all(self) -> None:
        """Clear on every client: delete every object (ordinary writes, so replicas converge)
        and have every client drop its offline queue and waiting rebases."""
        if self.link is not LinkState.ONLINE:
            raise StateError(f"clear needs the hub: this client is {self.link.value}")
        self.send(Clear(id=self.me))
        self._cleared(self.me)
        for key in list(self._paths.keys()):
            if self.replicated(key) is not None:
                self._write_now(key, None, deleted=True)

    def stop_all(self) -> None:
        """Tell every client (this one too) to stop its automatic writes."""
        if self.link is not LinkState.ONLINE:
            raise StateError(f"stop-all needs the hub: this client is {self.link.value}")
        self.send(StopAll(id=self.me))
        self.env.trace("stop", layer=LAYER, peer=self.me)
        if self.on_stop is not None:
            self.on_stop(self.me)

    def _cleared(self, by: str) -> None:
        for number in list(self._offline):
            self._store.delete(_OFFLINE, f"{number:012d}")
        dropped = len(self._offline) + len(self._rebase_queue)
        self._offline.clear()
        self._offline_latest.clear()
        for seq in list(self._rebase_queue):
            self._store.delete(_REBASE, f"{seq:012d}")
            self._mark_resolved(seq, None)
        self._rebase_queue.clear()
        self._rebase_at.clear()
        self._pending.clear()
        self._store.commit()
        self.env.trace("clear", layer=LAYER, peer=by, dropped=dropped)
        if self.on_clear is not None:
            self.on_clear(by)

    # -- snapshots from the hub -------------------------------------------------------------

    def _on_snapshot(self, msg: Snapshot) -> None:
        if msg.dest != self.me:
            self.env.trace("drop", layer=LAYER, peer=msg.id, reason="not_for_me")
            return
        if self._snapshot_vector != msg.vector:
            self._snapshot_vector = dict(msg.vector)  # a new snapshot: forget partial parts
            self._snapshot_parts = {}
        self._snapshot_parts.update(msg.objects)
        if len(self._snapshot_parts) > self.config.snapshot_keys_limit:
            self.env.trace("drop", layer=LAYER, peer=msg.id, reason="snapshot_too_large",
                           objects=len(self._snapshot_parts))
            self._snapshot_vector, self._snapshot_parts = None, {}
            return
        if msg.last:
            parts, self._snapshot_parts = self._snapshot_parts, {}
            self._snapshot_vector = None
            self._install(dict(msg.vector), parts)

    def _install(self, vector: dict[str, int], objects: dict[str, tuple[Any, ...]]) -> None:
        """Replace the objects by a snapshot's, if it holds everything delivered here."""
        mine = self.causal.vector
        behind = {o: c for o, c in mine.items() if c > vector.get(o, 0) and o != self.me}
        # own writes the hub had not delivered when it made the snapshot (made while it was on
        # its way, or lost with a crash): applied again on top of it, as the hub will apply
        # them once it has them; each was made on a state the snapshot covers
        own = [self.causal.sent_message(seq)
               for seq in range(vector.get(self.me, 0) + 1, mine.get(self.me, 0) + 1)]
        if not behind and any(
                msg is None or any(c > vector.get(o, 0) for o, c in msg.vector.items()
                                   if o != self.me) for msg in own):
            behind = {self.me: mine.get(self.me, 0)}  # not all of them can be applied again
        if behind:
            self.env.trace("drop", layer=LAYER, peer="hub", reason="snapshot_behind",
                           behind=behind)
            return
        touched = set(self._paths.keys()) | set(objects)
        self._paths.replace({
            key: (Write(str(r), o, str(w), int(q), c, bool(d)) for r, o, w, q, c, d in path)
            for key, path in objects.items()})
        for msg in own:
            assert msg is not None  # checked above
            touched.add(msg.key)
            self._apply(msg)
        self.causal.install(vector)
        self.causal.commit_if_dirty()  # durable before a vector that counts it is sent
        self.env.trace("snapshot", layer=LAYER, peer="hub", objects=len(objects),
                       vector=vector, own_again=len(own))
        for key in sorted(touched):
            self._changed(key)

    # -- resolving own lost writes ----------------------------------------------------------

    def _queue_rebase(self, key: str, write: Write) -> None:
        seq = write.seq
        if seq in self._resolved or seq in self._rebase_queue:
            return
        if len(self._rebase_queue) >= self.config.rebase_queue_limit:
            oldest = min(self._rebase_queue)
            self._store.delete(_REBASE, f"{oldest:012d}")
            self._mark_resolved(oldest, None)
            self.env.trace("drop", layer=LAYER, origin=self.me, seq=oldest,
                           reason="rebase_queue_full")
            del self._rebase_queue[oldest]
            del self._rebase_at[oldest]
        self._rebase_queue[seq] = (key, write)
        self._rebase_at[seq] = self._rebase_time(seq)
        # committed with the delivery that lost it
        put_json(self._store, _REBASE, f"{seq:012d}", [key, write.to_json()])

    def losses(self, seq: int) -> int:
        """How many times the intent carried by own write ``seq`` lost before it."""
        count = 0
        while seq in self._rebased_from:
            seq = self._rebased_from[seq]
            count += 1
        return count

    def _rebase_time(self, seq: int) -> float:
        window = self.config.rebase_delay * 2 ** min(self.losses(seq),
                                                     self.config.rebase_backoff_max)
        return self.env.now() + self.env.rng.uniform(0, window)

    def _arm_rebase(self) -> None:
        if not self._rebase_queue or self.link is not LinkState.ONLINE:
            return
        due = min(self._rebase_at.values())
        if self._rebase_timer is not None:
            if self._rebase_timer_at <= due:
                return
            self.env.cancel(self._rebase_timer)
        self._rebase_timer_at = due
        self._rebase_timer = self.env.set_timer(max(0.0, due - self.env.now()), self._rebase_due)

    def _rebase_due(self) -> None:
        """Rebase the queued own lost writes that are due, oldest first, on the state now."""
        if self._rebase_timer is not None:
            self.env.cancel(self._rebase_timer)
            self._rebase_timer = None
        if self.link is not LinkState.ONLINE:
            return  # re-armed once the client is back online and synced
        # a timer set for ``t - now`` may fire a rounding error before ``t``: compare with slack
        now = self.env.now() + _SLACK
        due = [seq for seq in sorted(self._rebase_queue) if self._rebase_at[seq] <= now]
        if due and not self.causal.caught_up:
            deadline = min(self._rebase_at[seq] for seq in due) + self.config.catch_up_wait
            if now < deadline:
                self._awaiting_catch_up = True  # deliveries that close the gaps call us again
                self._rebase_timer_at = deadline
                self._rebase_timer = self.env.set_timer(deadline - self.env.now(),
                                                        self._rebase_due)
                return
        self._awaiting_catch_up = False
        for seq in due:
            key, write = self._rebase_queue.pop(seq)
            del self._rebase_at[seq]
            self._store.delete(_REBASE, f"{seq:012d}")
            self._resolve(key, write)
        self._arm_rebase()

    def intent_of(self, seq: int) -> int:
        """The seq of the write the application made that own write ``seq`` carries on (itself
        unless it is a rebase)."""
        while seq in self._rebased_from:
            seq = self._rebased_from[seq]
        return seq

    def _resolve(self, key: str, write: Write) -> None:
        """Rebase one own lost write on the current state of its object, exactly once; given
        up if this client has made a newer write to the object since (its newer intent)."""
        if write.seq in self._resolved:
            return
        current = self.replicated(key)
        new_seq: int | None = None
        intent = self.intent_of(write.seq)
        newer = self._latest_intent.get(key, 0)
        if newer > intent:
            self._mark_resolved(write.seq, None)
            self._store.commit()
            self.env.trace("resolve", layer=LAYER, origin=self.me, key=key, seq=None,
                           original=write.seq, new=None, rebased=False, superseded_by=newer)
            return
        if write.deleted:
            if current is not None:  # the intent was "gone": delete what is there now
                new_seq = self._rebased_write(key, write.seq, None, deleted=True)
        else:
            content = self.rebase(key, write.content, current)
            if content is not None:
                new_seq = self._rebased_write(key, write.seq, content, deleted=False)
        if new_seq is None:
            self._mark_resolved(write.seq, None)
            self._store.commit()
        self.env.trace("resolve", layer=LAYER,
                       msg=msg_id(self.me, new_seq) if new_seq is not None else None,
                       origin=self.me, key=key, seq=new_seq, original=write.seq, new=new_seq,
                       rebased=new_seq is not None)

    def _rebased_write(self, key: str, original: int, content: Any, *, deleted: bool) -> int:
        history = self._paths.path(key)
        old = history[-1].revision if history else None
        msg = self.causal.make_data(key=key, old_value=old, value=self._new_revision(),
                                    data=content, deleted=deleted)
        self._paths.push(key, history, Write.of(msg))
        self._mark_resolved(original, msg.seq)
        self.causal.send_data(msg)  # commits the rebased write and the resolved mark together
        self._changed(key)
        return msg.seq

    def _mark_resolved(self, seq: int, new_seq: int | None) -> None:
        self._resolved[seq] = new_seq
        if new_seq is not None:
            self._rebased_from[new_seq] = seq
        raw = b"-" if new_seq is None else str(new_seq).encode()
        self._store.put(_RESOLVED, f"{seq:012d}", raw)
        while len(self._resolved) > self.config.resolved_limit:
            oldest = min(self._resolved)
            rebased = self._resolved.pop(oldest)
            if rebased is not None:
                self._rebased_from.pop(rebased, None)
            self._store.delete(_RESOLVED, f"{oldest:012d}")

    # -- Conflict messages from peers -------------------------------------------------------

    def _on_conflict(self, msg: Conflict) -> None:
        if msg.dest != self.me:
            self.env.trace("drop", layer=LAYER, peer=msg.id, reason="not_for_me")
            return
        if msg.loser_time > self.causal.sent:
            self.env.trace("drop", layer=LAYER, peer=msg.id, seq=msg.loser_time,
                           reason="unknown_write")
            return
        seq = msg.loser_time
        if seq in self._resolved or seq in self._rebase_queue or seq in self._pending:
            return
        # footnote 11: the winner must be delivered here before the loser is rebased
        self.causal.learn(msg.winner, msg.winner_time)
        if self.causal.delivered(msg.winner) >= msg.winner_time:
            self._settle(msg)
            return
        if len(self._pending) >= self.config.pending_conflict_limit:
            # harmless: delivering the winner reverts the write here and resolves it anyway
            oldest = min(self._pending)
            dropped = self._pending.pop(oldest)
            self.env.trace("drop", layer=LAYER, peer=dropped.id, seq=oldest,
                           reason="pending_full")
        self._pending[msg.loser_time] = msg

    def _settle(self, msg: Conflict) -> None:
        """The winner is delivered, so delivering it reverted our write and resolved it."""
        if msg.loser_time in self._resolved or msg.loser_time in self._rebase_queue:
            return
        self.stale_conflicts += 1
        self.env.trace("drop", layer=LAYER, peer=msg.id, key=msg.object, seq=msg.loser_time,
                       reason="stale_conflict", winner=msg_id(msg.winner, msg.winner_time))
