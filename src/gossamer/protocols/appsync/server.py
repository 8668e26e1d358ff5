"""The APSYN sync server (CTRL) as a service of the connection contract: sessions created on
first join, rounds (wait for every peer between the min and max round time, process all
requests as simultaneous, one sync per peer), timeouts, gap repair, session keys and the
session state kept in ``env.store`` so a restarted server gives it back in an init.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Protocol

import orjson

from ...core.conn import CloseCode, Conn
from ...core.env import Env
from ...core.errors import ConfigError
from .joins import ZONE_ID, JoinId, KeyHash, hash_session_key, parse_join_id, secret_digest
from .rounds import Request, Rule, Sent, as_sent, precheck, priority_order, process_round
from .sessions import PeerState, Phase, Session, due_acks, sees
from .state import (
    LAYER,
    SharedObject,
    action_digest,
    action_id,
    object_from_json,
    object_to_json,
    state_digest,
    value_digest,
)
from .wire import (
    Action,
    AppSyncCodec,
    AppSyncProtocolError,
    BadRequest,
    Header,
    Init,
    Join,
    Mode,
    ObjectInfo,
    Scope,
    SessionConfig,
    Status,
    next_round,
)
from .zones import ZONE_INIT, ZONE_ORIGIN, MemberSession, OwedAck, Uplink, ZoneUplink

__all__ = ["LAYER", "AppSyncConfig", "AppSyncServer", "JoinId", "KeyHash", "Uplink",
           "hash_session_key", "parse_join_id", "refusal"]

TABLE = "appsync"
def refusal(status: Status, why: str) -> tuple[int, str]:
    """The close code and reason of a refused join: 4000 + status, "NN Phrase: why"."""
    return 4000 + int(status), f"{int(status)} {status.phrase}: {why}"[:120]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class AppSyncConfig:
    """``min_ms``/``max_ms`` round time, ``tout`` rounds of silence before a peer is dropped;
    ``session_key`` guards every session, ``session_keys`` the sessions they name (their own
    key instead); neither: any session is accepted; limits per session; ``schemas`` JSON
    Schemas by object name (status 42); ``rule`` an application rule (status 39); ``zone``
    this CTRL's zone id and ``uplink`` the master zone's CTRL it joins as a peer (None: this
    CTRL holds the master copy of its G objects)."""

    min_ms: int = 20
    max_ms: int = 200
    tout: int = 10
    session_key: KeyHash | None = None
    session_keys: Mapping[str, KeyHash] = dataclasses.field(default_factory=dict)
    zone: str = "0001"
    max_sessions: int = 1000
    max_peers: int = 1000
    max_objects: int = 10_000
    history: int = 16  # syncs kept per peer to resend a lost one ...
    history_bytes: int = 256 * 1024  # ... and at most this many bytes of them (else: init)
    max_requests: int = 1024  # request actions of one peer in one round (more: 53)
    schemas: Mapping[str, Mapping[str, Any]] = dataclasses.field(default_factory=dict)
    rule: Rule | None = None
    uplink: Uplink | None = None

    def __post_init__(self) -> None:
        SessionConfig(self.min_ms, self.max_ms, self.tout)  # validates the three
        if ZONE_ID.fullmatch(self.zone) is None:
            raise ConfigError(f"a zone id is 4 hex digits, got {self.zone!r}")
        for name in ("max_sessions", "max_peers", "max_objects", "history", "history_bytes",
                     "max_requests"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1")
        if self.max_peers > 0xFFFF:
            raise ConfigError("at most 65535 peers in a session (4-hex client ids)")


class RoundLog(Protocol):
    """Where a CTRL keeps its sessions' state: by default its own ``env.store``; in
    peer-to-peer mode a replicated log, so the next CTRL holds the latest state
    (``protocols/appsync/p2p.py``). ``commit`` calls ``then`` only once the round's changes
    are durable (decided); ``load`` gives (round, objects) or None for a new session."""

    def load(self, session: str) -> tuple[int, list[SharedObject]] | None: ...

    def commit(self, session: str, changed: Mapping[str, SharedObject | None],
               new_round: int, then: Callable[[], None]) -> None: ...


class AppSyncServer:
    """CTRL: ``opened``/``received``/``closed``; everything through ``env``."""

    def __init__(self, env: Env, config: AppSyncConfig | None = None, *,
                 log: Any = None, round_log: RoundLog | None = None) -> None:
        self.env = env
        self.round_log = round_log
        self.config = config or AppSyncConfig()
        self.codec = AppSyncCodec()
        self.sessions: dict[str, Session] = {}
        self.peers: dict[Conn, tuple[Session, PeerState]] = {}
        self.pending: set[Conn] = set()  # opened, no join yet
        self.uplink_conns: dict[Conn, ZoneUplink] = {}
        self.log = log
        self.sc = SessionConfig(self.config.min_ms, self.config.max_ms, self.config.tout)
        self.zone_id = self.config.zone.upper()

    def start(self) -> None:
        if self.config.session_key is None:
            self.env.trace("open_sessions", layer=LAYER, keyed=len(self.config.session_keys))
            if self.log is not None:
                self.log("no session key: every session is accepted" if not
                         self.config.session_keys else
                         f"sessions without a key of their own are accepted (keyed: "
                         f"{', '.join(sorted(self.config.session_keys))})")

    def stop(self) -> None:
        for session in self.sessions.values():
            if session.timer is not None:
                self.env.cancel(session.timer)
                session.timer = None
            if session.member is not None:
                session.member.stop()

    def shutdown(self, code: int, reason: str) -> None:
        """Stop serving (another CTRL was chosen): every connection closed with ``code``."""
        self.stop()
        for conn in [*self.peers, *self.pending]:
            self.env.close(conn, code, reason)
        self.peers.clear()
        self.pending.clear()
        self.sessions.clear()

    # -- connections -----------------------------------------------------------------------

    def opened(self, conn: Conn, peer_address: str) -> None:
        uplink = self.uplink_conns.get(conn)
        if uplink is not None:
            uplink.opened(conn, peer_address)
            return
        self.pending.add(conn)

    def closed(self, conn: Conn, reason: str) -> None:
        uplink = self.uplink_conns.pop(conn, None)
        if uplink is not None:
            uplink.closed(conn, reason)
            return
        self.pending.discard(conn)
        entry = self.peers.pop(conn, None)
        if entry is None:
            return
        session, peer = entry
        self._remove(session, peer, reason)

    def received(self, conn: Conn, frame: bytes) -> None:
        if conn in self.pending:
            self._join(conn, frame)
            return
        entry = self.peers.get(conn)
        if entry is None:
            uplink = self.uplink_conns.get(conn)
            if uplink is not None:
                uplink.received(conn, frame)
            return
        session, peer = entry
        try:
            ours = self.codec.rqst_fields(frame)  # our peers' form without the message
            if ours[0] != peer.client_id:
                raise _bad("a joined peer sends rqst with its own client id")
        except AppSyncProtocolError as exc:
            self.env.trace("drop", layer=LAYER, key=session.name, peer=peer.client_id,
                           reason=exc.reason, status=int(exc.status))
            session.requests.append(Request(peer.client_id, None, exc.status))
            peer.requests += 1
            return
        self._request(session, peer, ours[1], ours[2], ours[3])

    # -- join ------------------------------------------------------------------------------

    def _refuse(self, conn: Conn, status: Status, why: str) -> None:
        code, reason = refusal(status, why)
        self.env.trace("refuse", layer=LAYER, peer=conn.id, status=int(status), reason=why)
        self.pending.discard(conn)
        self.env.close(conn, code, reason)

    def _join(self, conn: Conn, frame: bytes) -> None:
        try:
            msg = self.codec.decode_from_peer(frame)
        except AppSyncProtocolError as exc:
            self._refuse(conn, exc.status, str(exc)[:80])
            return
        if not isinstance(msg, Join):
            self._refuse(conn, Status.BAD_REQUEST, "the first frame must be a join")
            return
        try:
            join_id = parse_join_id(msg.id)
        except ValueError as exc:
            self._refuse(conn, Status.BAD_REQUEST, str(exc))
            return
        name, key = join_id.session, join_id.key
        if join_id.zone is not None and join_id.zone.upper() == self.config.zone.upper():
            self._refuse(conn, Status.BAD_REQUEST, "a zone link from this CTRL's own zone")
            return
        expected = self.config.session_keys.get(name, self.config.session_key)
        if expected is not None and (key is None or not expected.matches(key)):
            self._refuse(conn, Status.UNAUTHORIZED,
                         "a session key is required" if key is None else "wrong session key")
            return
        session = self.sessions.get(name)
        if session is None:
            if len(self.sessions) >= self.config.max_sessions:
                self._refuse(conn, Status.SERVICE_UNAVAILABLE, "too many sessions")
                return
            session = self._load(name)
            self.sessions[name] = session
            if self.config.uplink is not None:  # a member zone: join the master's session
                session.member = MemberSession(
                    self.env, session.name, session.objects, self.config.uplink,
                    zone=self.config.zone, on_dial=self._register_uplink, log=self.log)
        wanted = msg.header.client_id
        if wanted and not session.holds_secret(wanted, join_id.peer):
            if session.owns_objects(wanted):
                self._refuse(conn, Status.UNAUTHORIZED, f"client id {wanted} joined with "
                             f"another peer secret: a reconnect must show it")
                return
            wanted = ""  # it has nothing to protect: a fresh id instead
        client_id = session.free_id(wanted)
        if client_id is None or len(session.peers) + len(session.joining) >= \
                self.config.max_peers:
            self._refuse(conn, Status.SERVICE_UNAVAILABLE, "the session is full")
            return
        if client_id != msg.header.client_id or session.secrets.get(client_id) is None:
            self._keep_secret(session, client_id, join_id.peer)  # a fresh id, or a first one
        self.pending.discard(conn)
        peer = PeerState(conn=conn, client_id=client_id, zone=join_id.zone)
        self.peers[conn] = (session, peer)
        session.joining.append(peer)
        session.joining_ids.add(client_id)
        if join_id.zone is None:
            self.env.trace("peer_join", layer=LAYER, key=name, peer=client_id)
        else:
            self.env.trace("peer_join", layer=LAYER, key=name, peer=client_id,
                           zone=join_id.zone)
        if session.phase is Phase.IDLE:
            self._end_round(session)

    # -- rounds ----------------------------------------------------------------------------

    def _request(self, session: Session, peer: PeerState, number: int, last: int,
                 actions: tuple[Action, ...]) -> None:
        """A peer's rqst of round ``number``, having received up to round ``last``."""
        limit = self.config.max_requests
        if peer.requests + len(actions) > 4 * limit:  # flooding: not a peer we can serve
            self._drop_peer(session, peer, "too many requests")
            return
        for action in actions:  # over the limit: answered 53, kept as the code only
            if peer.requests >= limit:
                session.requests.append(Request(peer.client_id, None,
                                                Status.SERVICE_UNAVAILABLE))
            elif peer.zone is not None and action.info.scope is not Scope.GLOBAL:
                session.requests.append(Request(peer.client_id, None, Status.FORBIDDEN))
            else:
                info = action.info
                if info.scope is Scope.LOCAL and info.scope_id == self.zone_id:
                    # "L" with this zone's id and without one name the same object
                    action = dataclasses.replace(action, info=ObjectInfo(Scope.LOCAL, info.name))
                request = Request(peer.client_id, action)
                # checked now, while the round waits, not at its end (the round takes the
                # verdict only where it meets the same object)
                precheck(request, session.objects, zone=self.config.zone,
                         max_objects=self.config.max_objects, schemas=self.config.schemas,
                         rule=self.config.rule)
                session.requests.append(request)
            peer.requests += 1
        peer.silent = 0
        if number == session.round:
            peer.answered = session.round
        behind = self._rounds_between(last, session.round)
        # one round behind is a rqst that crossed this round's sync (a late answer, or a
        # request sent at once after the answer): the sync is on its way. A sync really lost
        # shows as two or more at the peer's next answer, which follows the next sync
        if behind > 1 and peer.client_id in session.peers:
            self._repair(session, peer, behind)
        if session.phase is Phase.WAITING and session.min_passed and self._all_answered(session):
            self._end_round(session)

    def _rounds_between(self, older: int, newer: int) -> int:
        if older == 0 or older == newer:
            return 0
        return (newer - older) % 0xFFFF

    def _repair(self, session: Session, peer: PeerState, behind: int) -> None:
        if session.phase is Phase.COMMITTING:
            # the round's syncs (in the history) and state (an init's) are not committed yet:
            # nothing of them leaves now; the peer reports the gap again at the next sync
            return
        if peer.repaired[0] == session.round and behind <= peer.repaired[1]:
            return  # resent already: they are on their way
        peer.repaired = (session.round, behind)
        kept = [b"".join(parts) for number, parts in peer.history
                if 0 < self._rounds_between(number, session.round) < behind
                or number == session.round]
        if behind < len(peer.history) and len(kept) == behind:
            self.env.trace("repair", layer=LAYER, key=session.name, peer=peer.client_id,
                           resent=len(kept))
            for frame in kept:
                self.env.write(peer.conn, frame)
            return
        # too far behind to resend: the syncs it missed carried acks that an init cannot (an
        # init has none), so the peer would match the acks that follow to the wrong requests.
        # It rejoins instead: its requests in flight are answered unknown (they might have
        # happened), its client id comes back, and the join's init brings the state
        self.env.trace("repair", layer=LAYER, key=session.name, peer=peer.client_id,
                       rejoin=True)
        self._drop_peer(session, peer, "too far behind: rejoin", code=CloseCode.TRY_AGAIN_LATER)

    def _all_answered(self, session: Session) -> bool:
        number, peers = session.round, session.peers
        if session.waiting_for != session.rounds_done:  # the first look this round
            session.waiting = [peer for peer in peers.values() if peer.answered != number]
            session.waiting_for = session.rounds_done
        waiting = session.waiting
        while waiting:
            peer = waiting[-1]
            if peer.answered != number and peers.get(peer.client_id) is peer:
                return False
            waiting.pop()
        return True

    def _start_round(self, session: Session) -> None:
        """Wait for the answers. The min and max round times bound a whole round, from the end
        of one round's wait to the next (phases I, II and III of the seed), so the time this
        round took to decide, commit and send its syncs counts towards them: rounds at the
        min time come every ``min`` ms, not every ``min`` ms plus the processing."""
        session.phase = Phase.WAITING
        session.min_passed = False
        now = self.env.now()
        spent = 0.0 if session.waited_until is None else now - session.waited_until
        delay = max(0.0, self.config.min_ms / 1000 - spent)
        session.due = now + delay
        session.timer = self.env.set_timer(delay, lambda: self._min_passed(session))

    def _min_passed(self, session: Session) -> None:
        session.min_passed = True
        if self._all_answered(session):
            self._end_round(session, due=session.due)
        else:
            session.due += (self.config.max_ms - self.config.min_ms) / 1000
            session.timer = self.env.set_timer(max(0.0, session.due - self.env.now()),
                                               lambda: self._end_round(session, due=session.due))

    def _end_round(self, session: Session, *, due: float | None = None) -> None:
        """End the round's wait now; ``due``: when the timer that ends it was due. The next
        round's times count from then, not from when the event loop ran the timer (up to a
        millisecond later on a loop of millisecond timers): late timers do not add up, and
        rounds at the min time end every ``min`` ms on average."""
        now = self.env.now()
        session.waited_until = now if due is None else min(due, now)
        if session.timer is not None:
            self.env.cancel(session.timer)
            session.timer = None
        processed = session.round
        new_round = next_round(session.round)
        requests, session.requests = session.requests, []
        applied = session.member.apply_master() if session.member is not None else []
        owed, local_applied = self._decide(session, requests, processed)
        applied += local_applied
        session.rounds_done += 1
        # the acks decided for this round's sync (traced with it): the master's answers since
        # the last round, then this round's own
        finals = ([] if session.member is None else session.member.take_resolved()) + [
            ack for ack in owed if ack.code is not None]
        for ack in owed:
            owner = session.peers.get(ack.client_id)
            if owner is not None:
                owner.owed.append(ack)
        # the peers that stay, each with the last round it answered (its sync's ``l``): what
        # the rest of its sync says (its acks, the updates it may see) is no longer changed
        # by anything before the sync is built, so it is read then (``frames``)
        staying: list[tuple[PeerState, int]] = []
        tout, counting = self.config.tout, session.round != 0
        for client, peer in list(session.peers.items()):
            if counting and peer.answered != processed:
                peer.silent += 1
                if peer.silent >= tout:
                    self.env.trace("timeout", layer=LAYER, key=session.name, peer=client)
                    del session.peers[client]
                    self.peers.pop(peer.conn, None)
                    self.env.close(peer.conn, CloseCode.NORMAL, "timeout")
                    continue
            staying.append((peer, peer.answered))
            peer.requests = 0  # its request count starts again
        self._persist(session, applied, new_round)
        session.round = new_round
        session.phase = Phase.COMMITTING
        # a master zone's updates are relayed as it sent them; and where another zone's CTRL
        # is a peer nothing is merged: it matches the updates it relays to its own peers'
        # requests by action (a majority's accepted action may be a local peer's)
        sent_actions = as_sent(applied, _RELAYED, merge=not any(
            peer.zone is not None for peer in session.peers.values()))
        syn_for = self._syn_lists(sent_actions)
        kept, kept_bytes = self.config.history, self.config.history_bytes
        sync_of = self.codec.round_syncs(new_round)  # the round checked once, not per peer
        inits: list[tuple[Conn, bytes]] = []
        for peer in session.joining:
            session.peers[peer.client_id] = peer
            peer.answered = 0
            inits.append((peer.conn, self.codec.encode(self._init_for(session, peer))))
            self.env.trace("sync_init", layer=LAYER, key=session.name, peer=peer.client_id,
                           seq=new_round, objects=sum(
                               1 for o in session.objects.values() if sees(peer, o)))
        session.joining = []
        session.joining_ids.clear()

        sent = 0  # bytes of the frames written

        def frames() -> Iterator[tuple[Conn, bytes]]:
            """Each sync built, kept for a resend and handed to the runtime, one at a time:
            the first peers' syncs leave while the others' are made, and each frame is
            written and dropped while the shared part is still in the cache."""
            nonlocal sent
            live = self.peers
            for peer, answered in staying:
                # its acks leave the owed queue now: until the round's syncs are sent no
                # round decides more (the next one starts after them)
                parts = sync_of(peer.client_bytes, answered, due_acks(peer) if peer.owed else (),
                                syn_for(peer))
                frame = b"".join(parts)  # one copy of the shared part (a sync may be 100 KB)
                history = peer.history
                history.append((new_round, parts))
                peer.history_bytes += len(frame)
                while len(history) > kept or (
                        len(history) > 1 and peer.history_bytes > kept_bytes):
                    peer.history_bytes -= sum(map(len, history.popleft()[1]))
                if peer.conn in live:
                    sent += len(frame)
                    yield peer.conn, frame
            for conn, frame in inits:
                if conn in live:
                    sent += len(frame)
                    yield conn, frame

        def send() -> None:  # rows only for a round that was committed and sent
            self.env.write_each(frames())
            self._trace_round(session, new_round, len(requests), finals, len(applied),
                              sent_actions, sent)
            self._next_round(session)

        if self.round_log is None:
            self.env.store.commit_then(send)
        else:
            self.round_log.commit(session.name, self._final(applied), new_round, send)

    def _decide(self, session: Session, requests: list[Request], processed: int
                ) -> tuple[list[OwedAck], list[Any]]:
        """The round's requests decided: an ack owed for each (code None: sent up to the
        master zone, answered later) and what was applied here."""
        if session.member is None:
            return self._decide_here(session, requests, processed)
        upward = [n for n, r in enumerate(requests) if r.status is None
                  and r.action is not None and r.action.info.scope is Scope.GLOBAL]
        if not upward:
            return self._decide_here(session, requests, processed)
        up = set(upward)
        local = [n for n in range(len(requests)) if n not in up]
        owed: list[OwedAck | None] = [None] * len(requests)
        here, applied = self._decide_here(session, [requests[n] for n in local], processed)
        for n, ack in zip(local, here, strict=True):
            owed[n] = ack
        config = self.config
        sent = session.member.forward(
            [requests[n] for n in upward], processed, zone=config.zone,
            max_objects=config.max_objects, schemas=config.schemas, rule=config.rule)
        for n, ack in zip(upward, sent, strict=True):
            owed[n] = ack
        return [ack for ack in owed if ack is not None], applied

    def _decide_here(self, session: Session, requests: list[Request], processed: int
                     ) -> tuple[list[OwedAck], list[Any]]:
        config = self.config
        result = process_round(session.name, session.objects, requests, processed,
                               zone=config.zone, max_objects=config.max_objects,
                               schemas=config.schemas, rule=config.rule,
                               steps=self.env.tracing)  # a trace digests every update
        return ([OwedAck(r.client_id, r.action, code)
                 for r, code in zip(requests, result.codes, strict=True)], result.applied)

    def _register_uplink(self, conn: Conn, link: ZoneUplink) -> None:
        self.uplink_conns[conn] = link

    def _syn_lists(self, sent: list[Sent]) -> Callable[[PeerState], bytes]:
        """The round's updates as each peer may see them, encoded once: the updates of NA
        objects go only to their owners, those of L and C objects not to another zone's CTRL;
        everyone else shares one encoding."""
        encoded = [self.codec.encode_action(update.action) for update in sent]
        private: dict[str, list[int]] = {}
        public: list[int] = []
        zone_local: set[int] = set()
        for index, update in enumerate(sent):
            obj = update.after if update.after is not None else update.before
            if obj is not None and obj.mode is Mode.NA:
                private.setdefault(obj.owner, []).append(index)
            else:
                public.append(index)
            if obj is not None and obj.scope is not Scope.GLOBAL:
                zone_local.add(index)
        shared = b"[" + b",".join(encoded[i] for i in public) + b"]"

        def syn_for(peer: PeerState) -> bytes:
            own = private.get(peer.client_id)
            if peer.zone is None and not own:
                return shared
            indices = sorted(public + own) if own else public
            if peer.zone is not None:
                indices = [i for i in indices if i not in zone_local]
            return b"[" + b",".join(encoded[i] for i in indices) + b"]"

        return syn_for

    def _init_for(self, session: Session, peer: PeerState) -> Init:
        creates = tuple(obj.as_create() for _, obj in sorted(session.objects.items())
                        if sees(peer, obj))
        return Init(header=Header(peer.client_id, 0, session.round), config=self.sc,
                    creates=creates)

    def _next_round(self, session: Session) -> None:
        """The round's syncs are sent: the next round, or none when nobody is left."""
        if session.peers or session.joining:
            self._start_round(session)
        else:  # nobody left: its state is in the store, the next join loads it again
            session.phase = Phase.IDLE
            if self.sessions.get(session.name) is session:
                del self.sessions[session.name]
                if session.member is not None:
                    session.member.stop()
                    session.member = None

    def _drop_peer(self, session: Session, peer: PeerState, why: str, *,
                   code: int = CloseCode.POLICY) -> None:
        self.env.trace("drop", layer=LAYER, key=session.name, peer=peer.client_id, reason=why)
        self.peers.pop(peer.conn, None)
        self.env.close(peer.conn, code, why)
        self._remove(session, peer, why)

    def _remove(self, session: Session, peer: PeerState, reason: str) -> None:
        if session.peers.get(peer.client_id) is peer:
            del session.peers[peer.client_id]
        if peer in session.joining:
            session.joining.remove(peer)
            session.joining_ids.discard(peer.client_id)
        self.env.trace("peer_leave", layer=LAYER, key=session.name, peer=peer.client_id,
                       reason=reason)
        if session.phase is Phase.WAITING:
            if not session.peers and not session.joining:
                if session.timer is not None:
                    self.env.cancel(session.timer)
                    session.timer = None
                self._end_round(session)
            elif session.min_passed and self._all_answered(session):
                self._end_round(session)

    # -- trace and store -------------------------------------------------------------------

    def _trace_round(self, session: Session, sync_round: int, requests: int,
                     acks: list[OwedAck], applied: int, updates: list[Sent], sent: int
                     ) -> None:
        """The round's rows; ``acks`` those whose code was decided for this round's sync
        (a request sent up to the master zone is decided when the master answers);
        ``applied`` the actions applied, ``updates`` as the syncs carry them; ``sent``: the
        bytes of its sync frames written to the peers. A ``sync_apply`` row per update sent
        (a merged one: ``info.parts``, each request it carries as ``[origin, digest]``), and
        each request's ``sync_ack`` names the update that carries it."""
        env = self.env
        if not env.tracing:
            return
        counts: dict[int, int] = {}
        for ack in acks:
            code = int(ack.code or 0)
            counts[code] = counts.get(code, 0) + 1
        env.trace("round", layer=LAYER, key=session.name, seq=sync_round,
                  peers=len(session.peers), requests=requests, applied=applied,
                  bytes=sent, codes={str(k): v for k, v in sorted(counts.items())})
        carried: dict[str, str] = {}  # a request's digest -> the id of the update carrying it
        for index, update in enumerate(updates):
            action, after = update.action, update.after
            key = f"{session.name}/{action.info.object_key}"
            msg = action_id(session.name, sync_round, action)
            if update.merged:
                parts = [[client, action_digest(part)] for client, part in update.parts]
                carried.update((digest, msg) for _client, digest in parts)
                env.trace("sync_apply", layer=LAYER, key=key, seq=sync_round, msg=msg,
                          index=index, digest=value_digest(after), parts=parts)
                continue
            client = update.parts[0][0]
            if client in (ZONE_ORIGIN, ZONE_INIT):  # the master's: acknowledged there
                env.trace("sync_apply", layer=LAYER, key=key, seq=sync_round, origin=client,
                          msg=msg, index=index, digest=value_digest(after),
                          relayed=True if client == ZONE_ORIGIN else "init")
            else:
                env.trace("sync_apply", layer=LAYER, key=key, seq=sync_round, origin=client,
                          msg=msg, index=index, digest=value_digest(after))
        for ack in acks:
            carrier: str | None = None
            if ack.action is not None:
                carrier = carried.get(action_digest(ack.action)) if carried else None
                if carrier is None:
                    carrier = action_id(session.name, sync_round, ack.action)
            env.trace("sync_ack", layer=LAYER, key=session.name, seq=sync_round,
                      peer=ack.client_id, code=int(ack.code or 0), msg=carrier)

    @staticmethod
    def _final(applied: list[Any]) -> dict[str, SharedObject | None]:
        """Each changed object once, as the round left it (None: deleted)."""
        final: dict[str, SharedObject | None] = {}
        for _, action, _before, after in applied:
            final[action.info.object_key] = after
        return final

    def _persist(self, session: Session, applied: list[Any], new_round: int) -> None:
        if self.round_log is not None:  # kept by the round log, once decided
            return
        store = self.env.store
        # each object once, as the round left it: a round of many property updates of one
        # object (a shared board) wrote the whole object once per update
        for object_key, after in self._final(applied).items():
            key = f"{session.name}/o/{object_key}"
            if after is None:
                store.delete(TABLE, key)
            else:
                store.put(TABLE, key, object_to_json(after))
        store.put(TABLE, f"{session.name}/meta", orjson.dumps({"round": new_round}))

    def _keep_secret(self, session: Session, client_id: str, secret: str | None) -> None:
        """``client_id`` is now this joiner's: its peer secret (or none, forgetting one an
        earlier holder of the id gave) kept, in the store with the round's commit."""
        key = f"{session.name}/p/{client_id}"
        if secret is None:
            if session.secrets.pop(client_id, None) is not None and self.round_log is None:
                self.env.store.delete(TABLE, key)
            return
        salt = self.env.rng.randbytes(16)
        kept = salt + secret_digest(salt, secret)
        session.secrets[client_id] = kept
        if self.round_log is None:  # p2p: kept by this CTRL only (docs/security.md)
            self.env.store.put(TABLE, key, kept)

    def _load(self, name: str) -> Session:
        session = Session(name)
        if self.round_log is not None:
            kept = self.round_log.load(name)
            if kept is not None:
                session.round = kept[0]
                session.objects = {obj.key: obj for obj in kept[1]}
            return session
        prefix, secrets = f"{name}/o/", f"{name}/p/"
        for key, raw in self.env.store.scan(TABLE):
            if key.startswith(prefix):
                obj = object_from_json(raw)
                session.objects[obj.key] = obj
            elif key.startswith(secrets):
                session.secrets[key[len(secrets):]] = raw
        meta = self.env.store.get(TABLE, f"{name}/meta")
        if meta is not None:
            session.round = int(orjson.loads(meta)["round"])
        return session

    def trace_states(self) -> None:
        """A ``ctrl_state`` row per joined peer of every session: the digest of what this
        CTRL holds that the peer may see (the end of a run records it, the round check
        compares it with the peer's own ``sync_state``). A member zone's CTRL records its
        link to the master as a peer too."""
        for name, session in sorted(self.sessions.items()):
            for client, peer in sorted(session.peers.items()):
                state = {key: obj.value for key, obj in sorted(session.objects.items())
                         if sees(peer, obj)}
                self.env.trace("ctrl_state", layer=LAYER, key=name, peer=client,
                               seq=session.round, objects=len(state),
                               digest=state_digest(state))
            if session.member is not None:
                session.member.uplink.trace_state()

    def order_of(self, session: str) -> list[str]:
        """This round's priority order of the session's peers (for tests and tools)."""
        found = self.sessions[session]
        return priority_order(list(found.peers), found.round)


#: a master zone's updates, relayed as it sent them (``as_sent`` never merges them)
_RELAYED = frozenset((ZONE_ORIGIN, ZONE_INIT))


def _bad(why: str) -> AppSyncProtocolError:
    return BadRequest(why)
