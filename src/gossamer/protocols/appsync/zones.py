"""Zones (seed 002, "the CTRL may become itself a peer for the central synchronisation entity
within a different zone"): a CTRL's link to the master zone's CTRL, over which its peers' G
requests go up and the master copy of the G objects comes down (docs/appsync-zones.md).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

from ...core.conn import Conn, Framing
from ...core.env import Env
from ...core.errors import ConfigError, StateError
from .peer import AppSyncPeer, PeerConfig, PeerPhase
from .state import SharedObject
from .wire import Action, Create, Init, Scope, Status, Sync

__all__ = ["ZONE_INIT", "ZONE_ORIGIN", "OwedAck", "Uplink", "ZoneUplink", "final_code"]

#: the ``origin`` of a relayed update in this zone's trace rows: it came from the master zone,
#: in a sync (``ZONE_ORIGIN``) or as the difference to an init (``ZONE_INIT``)
ZONE_ORIGIN = "uplink"
ZONE_INIT = "uplink-init"


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Uplink:
    """This CTRL joins ``address``, the CTRL of the master zone, as a peer of each of its
    sessions: ``sessions`` maps a local session to the master's (absent: the same name);
    ``key`` is the master's session key, if it asks for one."""

    address: str
    key: str | None = None
    sessions: Mapping[str, str] = dataclasses.field(default_factory=dict)
    framing: Framing = Framing.LINES
    reconnect_delay: float = 0.5
    max_pending: int = 10_000  # G requests waiting for the master's answer, per session

    def __post_init__(self) -> None:
        if not self.address:
            raise ConfigError("an uplink needs the master CTRL's address")
        if self.reconnect_delay <= 0 or self.max_pending < 1:
            raise ConfigError("reconnect_delay > 0 and max_pending >= 1")

    def remote_session(self, local: str) -> str:
        return self.sessions.get(local, local)


@dataclasses.dataclass(slots=True, eq=False)
class OwedAck:
    """The acknowledgement a peer is owed for one request, in the order it asked. ``code`` is
    None while the request waits for the master zone; ``local`` is what this CTRL decided
    among its own peers for a request it sent up."""

    client_id: str
    action: Action | None
    code: Status | None
    local: Status | None = None


def final_code(local: Status | None, master: int | None) -> Status:
    """A forwarded request's code: the master's refusal stands; an acceptance keeps what the
    local round said when that was more than "accepted alone" (the local rivals it beat); no
    answer (the link broke) is 53, which might still have happened."""
    if master is None:
        return Status.SERVICE_UNAVAILABLE
    try:
        status = Status(master)
    except ValueError:
        return Status.INTERNAL_ERROR
    if not status.accepted or local is None or local is Status.ACCEPTED:
        return status
    return local


class ZoneUplink(AppSyncPeer):
    """The peer this CTRL is in the master's session ``config.session``. ``on_resolved(acks)``
    gets the owed acks the master answered; ``on_updates(snapshot, actions)`` what the master
    applied: ``snapshot`` (an init's objects, replacing the G copy) or None, then actions;
    ``on_dial(conn, self)`` each new connection it dials (the CTRL hands its events here)."""

    def __init__(self, env: Env, config: PeerConfig, *, max_pending: int,
                 on_resolved: Callable[[list[OwedAck]], None],
                 on_updates: Callable[[dict[str, SharedObject] | None, tuple[Action, ...]],
                                      None],
                 on_dial: Callable[[Conn, ZoneUplink], None]) -> None:
        if config.zone is None:
            raise ConfigError("a zone uplink names its zone")
        super().__init__(env, config)
        self.max_pending = max_pending
        self.waiting: dict[int, list[OwedAck]] = {}  # request number -> the acks it decides
        self.created: dict[str, str] = {}  # G objects this zone created -> the local creator
        self._on_resolved = on_resolved
        self._on_updates = on_updates
        self._on_dial = on_dial  # the CTRL routes this connection's events here
        self.on_result = self._answered
        self.on_closed = self._link_closed
        self.on_refused: Callable[[int, str], None] | None = None  # (close code, reason)

    @property
    def ready(self) -> bool:
        return self.phase is PeerPhase.SYNCING

    def forward(self, action: Action, acks: list[OwedAck]) -> bool:
        """Send ``action`` up for ``acks`` (codes None until answered); False: not now."""
        if not self.ready or len(self.waiting) >= self.max_pending:
            return False
        try:
            number = self.request(action)
        except StateError:
            return False
        self.waiting[number] = acks
        return True

    def _dial(self) -> None:
        super()._dial()
        if self.conn is not None:
            self._on_dial(self.conn, self)

    def _link_closed(self, reason: str) -> None:
        if self.refused is not None:  # the master refused the join: no retry (a 4xxx code)
            code, why = self.refused
            self.env.trace("uplink_refused", layer="appsync", key=self.config.session,
                           code=code, reason=why)
            if self.on_refused is not None:
                self.on_refused(code, why)

    def _answered(self, number: int, code: int | None) -> None:
        acks = self.waiting.pop(number, None)
        if not acks:
            return
        for ack in acks:
            ack.code = final_code(ack.local, code)
        first = acks[0]
        if isinstance(first.action, Create) and first.code is not None and first.code.accepted:
            self.created[first.action.info.object_key] = first.client_id
        self._on_resolved(acks)

    def _init(self, msg: Init) -> None:
        super()._init(msg)
        self._on_updates({key: obj for key, obj in self.objects.items()
                          if obj.scope is Scope.GLOBAL}, ())

    def _sync(self, msg: Sync) -> None:
        seen = self.rounds_seen
        super()._sync(msg)
        if self.rounds_seen != seen and msg.actions:
            self._on_updates(None, tuple(a for a in msg.actions
                                         if a.info.scope is Scope.GLOBAL))

    def stop(self) -> None:
        super().stop()
        for number in list(self.waiting):
            self._answered(number, None)
