"""Group state over SRM (seed 004, section 5): who is in the group, riding on SRM's session
messages (no heartbeat of its own).

A member multicasts JOIN when it starts and LEAVE when it stops; the member closest to a joiner
(the first whose distance-scaled timer fires, the others suppressed on hearing it) multicasts
the group state to it; a member silent for ``boot_periods`` session periods (stretched by the
measured distance to it) is booted with a multicast BOOT, and a booted member that is still
there answers with a JOIN. A member that heard the booted one within the last session period
keeps it (the booter alone missed it: it was paused, or cut off from it).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import ClassVar

from ...core.env import MAX_DATAGRAM, Env, TimerHandle
from ...core.errors import ConfigError
from ...core.ids import NodeId
from ...core.messages import Codec, Message, message, speaker_of
from ..dissemination.srm import Srm, SrmSession

__all__ = ["CODEC", "GroupBoot", "GroupConfig", "GroupJoin", "GroupLeave", "GroupState",
           "SrmGroup"]

LAYER = "group"
CODEC = Codec(max_frame=MAX_DATAGRAM)

ChangeFn = Callable[[NodeId, bool, str], None]


@message("group.join", codec=CODEC)
class GroupJoin(Message):
    SPEAKER: ClassVar[str | None] = "member"

    member: str


@message("group.leave", codec=CODEC)
class GroupLeave(Message):
    SPEAKER: ClassVar[str | None] = "member"

    member: str


@message("group.boot", codec=CODEC)
class GroupBoot(Message):
    """``booter`` has not heard ``member`` for the boot period."""

    SPEAKER: ClassVar[str | None] = "booter"

    member: str
    booter: str


@message("group.state", codec=CODEC)
class GroupState(Message):
    """The group as ``sender`` knows it, for the joiner ``to``."""

    SPEAKER: ClassVar[str | None] = "sender"

    sender: str
    to: str
    members: tuple[str, ...]

    def __post_init__(self) -> None:
        if len(self.members) > 300:
            raise ValueError(f"a group state lists at most 300 members, got {len(self.members)}")


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class GroupConfig:
    boot_periods: int = 5
    max_members: int = 300  # a snapshot lists them all in one datagram

    def __post_init__(self) -> None:
        if self.boot_periods < 1 or self.max_members < 2:
            raise ConfigError(f"need boot_periods >= 1 and max_members >= 2, got {self}")


class SrmGroup:
    """One member's view of the group; ``on_change(member, joined, reason)`` hears each
    change (reason: join, state, session, leave, boot)."""

    def __init__(self, env: Env, srm: Srm, config: GroupConfig | None = None) -> None:
        self.env = env
        self.srm = srm
        self.config = config if config is not None else GroupConfig()
        self.on_change: ChangeFn = lambda member, joined, reason: None
        self.on_session: Callable[[NodeId, SrmSession], None] = lambda src, session: None
        """Each session message, once the group has taken the status it carries."""
        self._last_heard: dict[NodeId, float] = {}
        self._state_timers: dict[NodeId, TimerHandle] = {}
        self._check_timer: TimerHandle | None = None
        self._group = srm.config.group
        srm.on_session = self._session
        srm.group_size = lambda: len(self._last_heard) + 1

    # -- life ----------------------------------------------------------------------------

    def start(self) -> None:
        self.srm.joined = True
        self.env.multicast(self._group, GroupJoin(self.env.node))
        self._schedule_check()

    def stop(self) -> None:
        """Leave: LEAVE, then a last session message that says so."""
        self.srm.joined = False
        self.env.multicast(self._group, GroupLeave(self.env.node))
        self.srm.send_session()
        if self._check_timer is not None:
            self.env.cancel(self._check_timer)
        for timer in self._state_timers.values():
            self.env.cancel(timer)
        self._state_timers.clear()

    def members(self) -> tuple[NodeId, ...]:
        """The group as this member knows it, itself included, sorted."""
        return tuple(sorted([*self._last_heard, self.env.node]))

    def is_member(self, node: NodeId) -> bool:
        return node == self.env.node or node in self._last_heard

    def boot_after(self, member: NodeId) -> float:
        """Silence longer than this boots ``member``: ``boot_periods`` session periods, each
        stretched by the round trip to it (a far member is not booted for being far)."""
        period = self.srm.config.session_period + 2 * self.srm.distance(member)
        return self.config.boot_periods * period

    def _heard_lately(self, member: NodeId) -> bool:
        """Whether ``member`` was heard within one session period (stretched as in
        ``boot_after``)."""
        heard = self._last_heard.get(member)
        return heard is not None and (self.env.now() - heard
                                      < self.boot_after(member) / self.config.boot_periods)

    # -- receiving -----------------------------------------------------------------------

    def on_message(self, src: NodeId, msg: Message) -> bool:
        speaker = speaker_of(msg)
        if speaker is not None and speaker != src:
            # a member joins, leaves, boots or tells the state for itself only: another
            # holder of the group key speaking in its name changes nothing
            self.env.trace("drop", layer=LAYER, peer=src, reason="forged_member",
                           error=f"{msg.TYPE} in the name of {speaker!r}")
            return True
        if (isinstance(msg, GroupBoot) and msg.member != self.env.node
                and not self.is_member(src)):
            # only a member removes another (a group state may come from a member the joiner
            # has not heard yet, and a boot of this member only makes it say it is here)
            self.env.trace("drop", layer=LAYER, peer=src, reason="not_member",
                           error="a boot from a node that is not in the group")
            return True
        if isinstance(msg, GroupJoin):
            self._add(msg.member, "join")
            self._offer_state(msg.member)
        elif isinstance(msg, GroupLeave):
            self._remove(msg.member, "leave")
        elif isinstance(msg, GroupBoot):
            if msg.member == self.env.node:  # booted while still here: correct it
                self.env.trace("booted", layer=LAYER, peer=msg.booter)
                self.env.multicast(self._group, GroupJoin(self.env.node))
            elif self._heard_lately(msg.member):
                # the booter could not hear it, this member did, a session period ago at most
                # (a booter that was itself paused or cut off boots everyone it missed)
                self.env.trace("drop", layer=LAYER, peer=src, reason="stale_boot",
                               member=msg.member)
            else:
                self._remove(msg.member, "boot")
        elif isinstance(msg, GroupState):
            timer = self._state_timers.pop(msg.to, None)
            if timer is not None:  # someone closer answered the joiner: suppressed
                self.env.cancel(timer)
            if msg.to == self.env.node:
                for member in msg.members:
                    if member != self.env.node:
                        self._add(member, "state")
        else:
            return False
        return True

    def _session(self, src: NodeId, session: SrmSession) -> None:
        if session.joined:
            self._add(src, "session")
        else:
            self._remove(src, "leave")
        self.on_session(src, session)

    def _add(self, member: NodeId, reason: str) -> None:
        if member == self.env.node:
            return
        known = member in self._last_heard
        if not known and len(self._last_heard) >= self.config.max_members - 1:
            self.env.trace("drop", layer=LAYER, peer=member, reason="group_full")
            return
        self._last_heard[member] = self.env.now()
        if not known:
            self.env.trace("join", layer=LAYER, peer=member, reason=reason)
            self.on_change(member, True, reason)

    def _remove(self, member: NodeId, reason: str) -> None:
        if self._last_heard.pop(member, None) is None:
            return
        self.srm.forget(member)
        self.env.trace("leave", layer=LAYER, peer=member, reason=reason)
        self.on_change(member, False, reason)

    def _offer_state(self, joiner: NodeId) -> None:
        if joiner == self.env.node or joiner in self._state_timers:
            return
        d = self.srm.distance(joiner)
        timers = self.srm.timers
        delay = timers.d1 * d + timers.d2 * d * self.env.rng.random()
        self._state_timers[joiner] = self.env.set_timer(delay, lambda: self._send_state(joiner))

    def _send_state(self, joiner: NodeId) -> None:
        self._state_timers.pop(joiner, None)
        members = self.members()[:self.config.max_members]
        self.env.multicast(self._group, GroupState(self.env.node, joiner, members))

    # -- booting -------------------------------------------------------------------------

    def _schedule_check(self) -> None:
        self._check_timer = self.env.set_timer(self.srm.config.session_period, self._check)

    def _check(self) -> None:
        now = self.env.now()
        for member, heard in list(self._last_heard.items()):
            if now - heard > self.boot_after(member):
                self.env.multicast(self._group, GroupBoot(member, self.env.node))
                self._remove(member, "boot")
        self._schedule_check()
