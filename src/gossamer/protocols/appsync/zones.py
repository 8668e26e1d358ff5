"""Zones (seed 002, "the CTRL may become itself a peer for the central synchronisation entity
within a different zone"): a CTRL's link to the master zone's CTRL, over which its peers' G
requests go up and the master copy of the G objects comes down (docs/appsync-zones.md).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from ...core.conn import CloseCode, Conn, Framing
from ...core.env import Env
from ...core.errors import ConfigError, StateError
from .peer import AppSyncPeer, PeerConfig, PeerPhase
from .rounds import Request, Rule, process_round, signature_of
from .state import LAYER, ActionRefused, SharedObject, apply_action
from .wire import Action, Create, Delete, Init, Scope, Status, Sync

__all__ = ["MAX_RELAYED", "ZONE_INIT", "ZONE_ORIGIN", "MemberSession", "OwedAck", "Uplink",
           "ZoneUplink", "final_code"]

#: the ``origin`` of a relayed update in this zone's trace rows: it came from the master zone,
#: in a sync (``ZONE_ORIGIN``) or as the difference to an init (``ZONE_INIT``)
ZONE_ORIGIN = "uplink"
ZONE_INIT = "uplink-init"
MAX_RELAYED = 100_000  # the master's updates a member zone holds for its next round


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
            self.env.trace("uplink_refused", layer=LAYER, key=self.config.session,
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


class MemberSession:
    """The master zone's part of one session of a member zone's CTRL: the link (``uplink``)
    to the master's session, the master's updates waiting for this zone's next round, the
    acks the master answered since, and the deciding of the zone's G requests.
    ``objects`` is the session's objects (the same dict the CTRL's rounds change)."""

    def __init__(self, env: Env, session: str, objects: dict[str, SharedObject],
                 uplink: Uplink, *, zone: str, on_dial: Callable[[Conn, ZoneUplink], None],
                 log: Callable[[str], None] | None = None) -> None:
        self.env = env
        self.session = session
        self.objects = objects
        self.master_copy: dict[str, SharedObject] | None = None  # an init from the master
        self.relayed: list[Action] = []  # the master's updates since the last round
        self.resolved: list[OwedAck] = []  # acks the master answered since the last round
        config = PeerConfig(address=uplink.address, session=uplink.remote_session(session),
                            key=uplink.key, framing=uplink.framing,
                            reconnect_delay=uplink.reconnect_delay, zone=zone)
        self.uplink = ZoneUplink(env, config, max_pending=uplink.max_pending,
                                 on_resolved=self._answered, on_updates=self._updates,
                                 on_dial=on_dial)
        if log is not None:
            self.uplink.on_refused = lambda code, why: log(
                f"the master zone at {uplink.address} refused session {session}'s link "
                f"({code} {why}): this zone's G requests are answered 53")
        self.uplink.start()

    def stop(self) -> None:
        self.uplink.stop()

    def take_resolved(self) -> list[OwedAck]:
        """The acks the master answered since the last round (they go in this round's sync)."""
        resolved, self.resolved = self.resolved, []
        return resolved

    def _answered(self, acks: list[OwedAck]) -> None:
        self.resolved.extend(acks)

    def forward(self, requests: list[Request], processed: int, *, zone: str,
                max_objects: int, schemas: Mapping[str, Mapping[str, Any]],
                rule: Rule | None) -> list[OwedAck]:
        """The zone's G requests of a round: decided among this zone's peers on a scratch
        copy (so two local rivals get 22/32 here, fairly), the winners sent up; their final
        codes come with the master's sync (docs/appsync-zones.md)."""
        uplink = self.uplink
        if not uplink.ready:  # no master to ask: retry later
            return [OwedAck(r.client_id, r.action, Status.SERVICE_UNAVAILABLE)
                    for r in requests]
        scratch = {k: o for k, o in self.objects.items() if o.scope is Scope.GLOBAL}
        room = max(0, max_objects - (len(self.objects) - len(scratch)))
        result = process_round(self.session, scratch, requests, processed, zone=zone,
                               max_objects=room, schemas=schemas, rule=rule)
        owed = [OwedAck(r.client_id, r.action, code)
                for r, code in zip(requests, result.codes, strict=True)]
        positions: dict[int, list[int]] = {}
        for n, request in enumerate(requests):
            positions.setdefault(id(request.action), []).append(n)
        groups: dict[tuple[str, bytes], list[OwedAck]] = {}
        for _client, action, _before, _after in result.applied:
            ack = owed[positions[id(action)].pop(0)]
            ack.local, ack.code = ack.code, None
            group = [ack]
            if uplink.forward(action, group):
                groups[(action.info.object_key, signature_of(action))] = group
            else:
                ack.code = Status.SERVICE_UNAVAILABLE
        for ack in owed:  # a majority's other members share the forwarded one's fate
            if ack.code is Status.MAJORITY_ACCEPTED and ack.local is None and \
                    ack.action is not None:
                shared = groups.get((ack.action.info.object_key, signature_of(ack.action)))
                if shared is not None:
                    ack.local, ack.code = ack.code, None
                    shared.append(ack)
        return owed

    def apply_master(self) -> list[tuple[str, Action, SharedObject | None,
                                         SharedObject | None]]:
        """The master's updates since the last round, applied to this zone's copy of the G
        objects (an init first, as the actions that turn the copy into it): (origin, action,
        before, after) each, as a round's applied list."""
        created = self.uplink.created
        actions: list[tuple[str, Action]] = []
        if self.master_copy is not None:
            actions += [(ZONE_INIT, a) for a in self._diff_to(self.master_copy)]
            self.master_copy = None
        actions += [(ZONE_ORIGIN, a) for a in self.relayed]
        self.relayed = []
        applied: list[tuple[str, Action, SharedObject | None, SharedObject | None]] = []
        for origin, action in actions:
            key = action.info.object_key
            before = self.objects.get(key)
            acting = before.owner if before is not None else created.get(key, "")
            try:
                after = apply_action(before, action, acting)
            except ActionRefused as exc:  # cannot happen while the copy follows the master
                self.env.trace("drop", layer=LAYER, key=self.session,
                               reason=f"diverged from the master zone: {int(exc.status)}")
                continue
            if after is None:
                self.objects.pop(key, None)
                created.pop(key, None)
            else:
                self.objects[key] = after
            applied.append((origin, action, before, after))
        return applied

    def _diff_to(self, master: dict[str, SharedObject]) -> list[Action]:
        mine = {k: o for k, o in self.objects.items() if o.scope is Scope.GLOBAL}
        actions: list[Action] = [Delete(mine[key].info()) for key in sorted(mine.keys()
                                                                         - master.keys())]
        for key, obj in sorted(master.items()):
            old = mine.get(key)
            if old is not None and old.value == obj.value and old.mode is obj.mode:
                continue
            if old is not None:
                if old.owner:  # the local creator stays the owner
                    self.uplink.created.setdefault(key, old.owner)
                actions.append(Delete(old.info()))
            actions.append(obj.as_create())
        return actions

    def _updates(self, snapshot: dict[str, SharedObject] | None,
                 actions: tuple[Action, ...]) -> None:
        if snapshot is not None:
            self.master_copy, self.relayed = snapshot, []
        self.relayed.extend(actions)
        if len(self.relayed) > MAX_RELAYED:
            # this zone's rounds are not keeping up with the master's updates: drop them and
            # take the master's state afresh (the link's next join brings it in an init)
            self.env.trace("drop", layer=LAYER, key=self.session, reason="relay_backlog",
                           actions=len(self.relayed))
            self.relayed = []
            if self.uplink.conn is not None:
                self.env.close(self.uplink.conn, CloseCode.TRY_AGAIN_LATER, "relay backlog")
