"""The APSYN peer core (PEER) as a service of the connection contract: join, take the init,
answer every sync with a rqst holding the queued requests, apply each round's updates, match
acks to requests (oldest first), detect lost syncs from the round numbers, rejoin after a
broken connection with its client id.
"""

from __future__ import annotations

import collections
import dataclasses
import enum
from collections.abc import Callable
from typing import Any

from ...core.conn import CloseCode, Conn, Framing
from ...core.env import Env, TimerHandle
from ...core.errors import ConfigError, StateError
from .state import (
    LAYER,
    ActionRefused,
    SharedObject,
    action_digest,
    action_id,
    apply_action,
    state_digest,
    value_digest,
)
from .wire import (
    MAX_ACTIONS,
    PEER_SECRET,
    Action,
    AppSyncCodec,
    AppSyncProtocolError,
    Header,
    Init,
    Join,
    Rqst,
    SessionConfig,
    Status,
    Sync,
    next_round,
)

__all__ = ["AppSyncPeer", "PeerPhase", "ResultFn"]

ResultFn = Callable[[int, "int | None"], None]
"""(request number, status code or None: unknown, the connection broke first)."""
ChangeFn = Callable[[str, "SharedObject | None"], None]


class PeerPhase(enum.Enum):
    CONNECTING = "connecting"
    JOINING = "joining"
    SYNCING = "syncing"
    CLOSED = "closed"  # refused or stopped: no reconnect


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class PeerConfig:
    address: str
    session: str
    key: str | None = None
    framing: Framing = Framing.LINES
    reconnect_delay: float = 0.5
    max_queue: int = 10_000
    # a sync carries every visible update of a round: with many peers it outgrows 64 KiB
    max_frame: int = 4 * 1024 * 1024
    # how long after a sync the peer answers it, as a fraction of the session's min round
    # time: 0 at once; more gathers the requests made meanwhile into this round's rqst, so a
    # change waits less for its round (the round still ends at its min time as long as the
    # rqst arrives by then: keep (1 - gather) x min above the round trip to the server)
    gather: float = 0.0
    # send each request when it is made (the requests of one step together) instead of with
    # the next answer: in the round's answer if that is still to come (it goes now), else in
    # a rqst of its own for the round that is open. A change then waits only for the end of
    # the round open when it reaches CTRL, not for the next answer first; it costs a frame
    # per burst of requests made after the answer (combine with ``gather`` so that most
    # requests ride in the answer: a request made before the answer is due sends it at once)
    eager: bool = False
    # answer a round only when requests are queued as it begins (or in the gathered answer),
    # and at least every tout / 2 rounds, so that CTRL does not drop the peer for silence:
    # an idle peer then costs CTRL no frame a round (with ``eager``, a change still goes when
    # it is made). Only in a session of fixed rounds (the init's max round time equal to its
    # min): where rounds wait for every peer's answer up to the max, a quiet peer would hold
    # each round that long, so there the peer answers every round as usual
    quiet: bool = False
    # this peer is the CTRL of zone ``zone`` joining another zone's CTRL (docs/appsync-zones.md)
    zone: str | None = None
    # no sync for this long: the CTRL is taken for gone (the connection is closed and dialled
    # again; in peer-to-peer mode another CTRL may be chosen); None: 10 max round times, >= 2 s
    sync_timeout: float | None = None
    # this peer's secret, sent in every join (";peer="): CTRL gives its client id back on a
    # reconnect only with it (16..128 of A-Z a-z 0-9 _ -); None: 32 hex digits from env.rng
    # (the services pass one from ``secrets``)
    secret: str | None = None

    def __post_init__(self) -> None:
        if self.reconnect_delay <= 0 or self.max_queue < 1 or self.max_frame < 1024:
            raise ConfigError("reconnect_delay > 0, max_queue >= 1 and max_frame >= 1024")
        if not 0.0 <= self.gather < 1.0:
            raise ConfigError(f"gather must be in [0, 1), got {self.gather!r}")
        if self.sync_timeout is not None and not self.sync_timeout > 0:
            raise ConfigError(f"sync_timeout must be > 0, got {self.sync_timeout!r}")
        if self.secret is not None and PEER_SECRET.fullmatch(self.secret) is None:
            raise ConfigError("a peer secret is 16..128 of A-Z a-z 0-9 _ -")


class AppSyncPeer:
    """One peer of one session. ``request(action)`` queues a request and returns its number;
    ``on_result(number, code)`` and ``on_change(key, object or None)`` report back."""

    def __init__(self, env: Env, config: PeerConfig) -> None:
        self.env = env
        self.config = config
        self.codec = AppSyncCodec(max_frame=config.max_frame)
        self.phase = PeerPhase.CONNECTING
        self.client_id = ""
        self.secret = (config.secret if config.secret is not None
                       else f"{env.rng.getrandbits(128):032x}")
        self.round = 0
        self.objects: dict[str, SharedObject] = {}
        self.session_config: SessionConfig | None = None
        self.conn: Conn | None = None
        self.queue: collections.deque[tuple[int, Action]] = collections.deque()
        self.in_flight: collections.deque[int] = collections.deque()
        self.results: dict[int, int | None] = {}
        self.refused: tuple[int, str] | None = None
        self.rounds_seen = 0
        self._numbers = 0
        self._timer: TimerHandle | None = None
        self._answer_timer: TimerHandle | None = None  # a gathering answer (``gather``)
        self._eager_timer: TimerHandle | None = None  # requests to send now (``eager``)
        self._watchdog: TimerHandle | None = None  # the next sync is due by then
        self._unanswered = 0  # rounds begun since this peer's last rqst (``quiet``)
        self.on_result: ResultFn | None = None
        self.on_change: ChangeFn | None = None
        self.on_round: Callable[[int], None] | None = None
        self.on_closed: Callable[[str], None] | None = None
        self.address = config.address  # the CTRL it joins (``retarget`` moves it)
        # False: no sync_apply / sync_request rows from this peer (a big simulation traces a
        # sample of its peers; the round check judges the peers that wrote rows)
        self.traced = True

    # -- application ---------------------------------------------------------------------

    def request(self, action: Action) -> int:
        if len(self.queue) >= self.config.max_queue:
            raise StateError(f"{len(self.queue)} requests queued: the peer is not keeping up")
        self._numbers += 1
        self.queue.append((self._numbers, action))
        if self.config.eager and self._eager_timer is None:
            # after this step: the requests made in it go in one rqst
            self._eager_timer = self.env.set_timer(0.0, self._send_eagerly)
        return self._numbers

    def _send_eagerly(self) -> None:
        self._eager_timer = None
        if self.phase is not PeerPhase.SYNCING or self.conn is None or not self.queue:
            return  # not joined yet: the requests go with the first answer
        if self._answer_timer is not None:  # the round's answer was still to come: now
            self.env.cancel(self._answer_timer)
            self._answer_timer = None
        self._answer()

    @property
    def synced(self) -> bool:
        return self.phase is PeerPhase.SYNCING and not self.queue and not self.in_flight

    # -- process ---------------------------------------------------------------------------

    def start(self) -> None:
        self._dial()

    def stop(self) -> None:
        self.phase = PeerPhase.CLOSED
        if self._timer is not None:
            self.env.cancel(self._timer)
        self._cancel_answer()
        if self.conn is not None:
            self.env.close(self.conn)

    def retarget(self, address: str) -> None:
        """Join the CTRL at ``address`` from now on (another participant was chosen): the
        connection to the old one is closed and the queued requests go to the new one."""
        if address == self.address and self.phase is not PeerPhase.CLOSED:
            return
        self.address = address
        if self.phase is PeerPhase.CLOSED:
            return
        if self._timer is not None:
            self.env.cancel(self._timer)
            self._timer = None
        conn, self.conn = self.conn, None
        if conn is not None:
            self._cancel_answer()
            for number in self.in_flight:  # sent to the old CTRL: might have happened
                self._result(number, None)
            self.in_flight.clear()
            self.env.close(conn)
        self._dial()

    def _dial(self) -> None:
        self._timer = None
        if self.phase is PeerPhase.CLOSED:
            return
        self.phase = PeerPhase.CONNECTING
        self.conn = self.env.connect(self.address, framing=self.config.framing,
                                     max_frame=self.config.max_frame)

    def opened(self, conn: Conn, peer_address: str) -> None:
        if conn is not self.conn:
            return
        self.phase = PeerPhase.JOINING
        join_id = (self.config.session + (f";key={self.config.key}" if self.config.key else "")
                   + (f";zone={self.config.zone}" if self.config.zone else "")
                   + f";peer={self.secret}")
        self.env.write(conn, self.codec.encode(Join(header=Header(self.client_id, 0, 0),
                                                    id=join_id)))

    def closed(self, conn: Conn, reason: str) -> None:
        if conn is not self.conn:
            return
        self.conn = None
        self._cancel_answer()
        for number in self.in_flight:  # sent, never acknowledged: might have happened
            self._result(number, None)
        self.in_flight.clear()
        self.env.trace("peer_leave", layer=LAYER, key=self.config.session, peer=self.client_id,
                       reason=reason)
        code = getattr(conn, "close_code", None)  # the runtimes keep the close code
        if isinstance(code, int) and 4000 <= code < 5000:  # a refused join: do not retry
            self.refused = (code, reason)
            self.phase = PeerPhase.CLOSED
        if self.phase is not PeerPhase.CLOSED:
            self.phase = PeerPhase.CONNECTING
            self._timer = self.env.set_timer(self.config.reconnect_delay, self._dial)
        if self.on_closed is not None:
            self.on_closed(reason)

    def received(self, conn: Conn, frame: bytes) -> None:
        if conn is not self.conn:
            return
        try:
            msg = self.codec.decode_from_server(frame)
        except AppSyncProtocolError as exc:
            self.env.trace("drop", layer=LAYER, key=self.config.session, reason=exc.reason)
            return
        if isinstance(msg, Init):
            self._init(msg)
        else:
            self._sync(msg)

    def _init(self, msg: Init) -> None:
        self.client_id = msg.header.client_id
        self.session_config = msg.config
        self.round = msg.header.last
        old, self.objects = self.objects, {}
        for create in msg.creates:
            obj = apply_action(None, create, _acting_owner(None, create))
            assert obj is not None
            self.objects[obj.key] = obj
        self.phase = PeerPhase.SYNCING
        self.env.trace("sync_init", layer=LAYER, key=self.config.session, peer=self.client_id,
                       seq=self.round, objects=len(self.objects))
        if self.on_change is not None:
            for key in sorted(set(old) | set(self.objects)):
                if old.get(key) != self.objects.get(key):
                    self.on_change(key, self.objects.get(key))
        self._answer_round()

    def _sync(self, msg: Sync) -> None:
        if self.phase is not PeerPhase.SYNCING:
            return
        number = msg.header.round
        if number != next_round(self.round):
            # ahead: a gap, ask again telling the server what we have; behind (a sync the
            # server resent after we had it anyway): nothing to do, and no answer, or each
            # late copy would ask for every round again (a storm of repairs)
            if 1 < (number - self.round) % 0xFFFF < 0x8000:
                self.env.trace("gap", layer=LAYER, key=self.config.session,
                               peer=self.client_id, seq=number, have=self.round)
                self._write_rqst(())
            return
        self.round = number
        self.rounds_seen += 1
        for code in msg.acks:
            if self.in_flight:
                self._result(self.in_flight.popleft(), code)
        for action in msg.actions:
            key = action.info.object_key
            try:
                after = apply_action(self.objects.get(key), action, _acting_owner(
                    self.objects.get(key), action))
            except ActionRefused as exc:  # the server applied it: our copy is off, resync
                self.env.trace("drop", layer=LAYER, key=key, reason=f"diverged:{exc.status}")
                continue
            if after is None:
                self.objects.pop(key, None)
            else:
                self.objects[key] = after
            if self.traced and self.env.tracing:
                self.env.trace("sync_apply", layer=LAYER, key=f"{self.config.session}/{key}",
                               seq=number, msg=action_id(self.config.session, number, action),
                               peer=self.client_id, digest=value_digest(after))
            if self.on_change is not None:
                self.on_change(key, after)
        if self.on_round is not None:
            self.on_round(number)
        self._answer_round()

    def _answer_round(self) -> None:
        """Answer the round just begun: at once, or ``gather`` x its min time later."""
        self._cancel_answer()
        self._arm_watchdog()
        self._unanswered += 1
        if self._may_skip():
            return  # nothing to ask (an eager request made later still goes at once)
        delay = (self.config.gather * self.session_config.min_ms / 1000
                 if self.session_config is not None else 0.0)
        if delay <= 0:
            self._answer()
            return
        self._answer_timer = self.env.set_timer(delay, self._answer_gathered)

    def _may_skip(self) -> bool:
        """A quiet peer with nothing queued may leave this round unanswered: the session's
        rounds are of fixed length (they wait for nobody) and CTRL heard from it less than
        tout / 2 rounds ago."""
        sc = self.session_config
        return (self.config.quiet and not self.queue and sc is not None
                and sc.max_ms == sc.min_ms and self._unanswered < max(1, sc.tout // 2))

    def _answer_gathered(self) -> None:
        self._answer_timer = None
        if not self._may_skip():
            self._answer()

    def _cancel_answer(self) -> None:
        """No answer pending and no sync awaited (a round begun, or the connection gone)."""
        if self._answer_timer is not None:
            self.env.cancel(self._answer_timer)
            self._answer_timer = None
        if self._watchdog is not None:
            self.env.cancel(self._watchdog)
            self._watchdog = None

    def _arm_watchdog(self) -> None:
        timeout = self.config.sync_timeout
        if timeout is None:
            max_ms = self.session_config.max_ms if self.session_config is not None else 200
            timeout = max(2.0, 10 * max_ms / 1000)
        self._watchdog = self.env.set_timer(timeout, self._no_sync)

    def _no_sync(self) -> None:
        """A CTRL that sends no sync (hung, or cut off from the rest) is as good as gone: a
        connection that stays open would keep this peer waiting for it for ever."""
        self._watchdog = None
        conn = self.conn
        if self.phase is not PeerPhase.SYNCING or conn is None:
            return
        self.env.trace("sync_timeout", layer=LAYER, key=self.config.session,
                       peer=self.client_id, seq=self.round)
        self.env.close(conn, CloseCode.GOING_AWAY, "no sync")

    def _answer(self) -> None:
        batch: list[Action] = []
        while self.queue and len(batch) < MAX_ACTIONS:
            number, action = self.queue.popleft()
            self.in_flight.append(number)
            batch.append(action)
        if batch and self.conn is not None and self.client_id and self.traced and \
                self.env.tracing:
            # the server's sync_apply of each (if it takes it) ends its msg with this digest:
            # the pipeline's request-to-visible latency starts here
            for action in batch:
                self.env.trace("sync_request", layer=LAYER, key=self.config.session,
                               origin=self.client_id, action=action_digest(action))
        self._write_rqst(tuple(batch))

    def _write_rqst(self, actions: tuple[Action, ...]) -> None:
        if self.conn is None or not self.client_id:
            return
        rqst = Rqst(header=Header(self.client_id, self.round or 1, self.round or 1),
                    actions=actions)
        self._unanswered = 0
        self.env.write(self.conn, self.codec.encode(rqst))

    def _result(self, number: int, code: int | None) -> None:
        self.results[number] = code
        if len(self.results) > self.config.max_queue:
            del self.results[next(iter(self.results))]
        if self.on_result is not None:
            self.on_result(number, code)

    def value(self, key: str) -> Any:
        obj = self.objects.get(key)
        return None if obj is None else obj.value

    def visible_state(self) -> dict[str, Any]:
        return {key: obj.value for key, obj in sorted(self.objects.items())}

    def trace_state(self) -> None:
        """A ``sync_state`` row: the digest of everything this peer holds, if it is joined
        (the round check compares it with its CTRL's ``ctrl_state`` row for it)."""
        if self.phase is PeerPhase.SYNCING:
            state = self.visible_state()
            self.env.trace("sync_state", layer=LAYER, key=self.config.session,
                           peer=self.client_id, seq=self.round, objects=len(state),
                           digest=state_digest(state))

    def status_of(self, number: int) -> Status | None:
        code = self.results.get(number)
        return None if code is None else Status(code)


def _acting_owner(current: SharedObject | None, action: Action) -> str:
    """Apply a server-accepted action locally whatever its author: act as the owner."""
    if current is not None:
        return current.owner
    info = action.info
    return info.scope_id if info.scope.value == "C" and info.scope_id else ""
