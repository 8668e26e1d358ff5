"""A session as the APSYN sync server (CTRL) keeps it: its peers and what each is owed, its
objects, the round it is in, and the client ids it gave with the peer secrets they were
joined with."""

from __future__ import annotations

import collections
import dataclasses
import enum
import hmac

from ...core.conn import Conn
from ...core.env import TimerHandle
from .joins import secret_digest
from .rounds import Request
from .state import SharedObject, visible_to
from .wire import Scope
from .zones import MemberSession, OwedAck

__all__ = ["PeerState", "Phase", "Session", "due_acks", "sees"]


class Phase(enum.Enum):
    IDLE = "idle"  # no peer: no rounds
    WAITING = "waiting"  # a round runs: waiting for requests
    COMMITTING = "committing"  # processed, waiting for the store before the syncs go out


@dataclasses.dataclass(slots=True, eq=False)
class PeerState:
    conn: Conn
    client_id: str
    answered: int = 0  # the last round this peer answered
    silent: int = 0  # rounds in a row without an answer
    requests: int = 0  # its requests this round
    zone: str | None = None  # the CTRL of another zone, joined as a peer: sees G objects only
    owed: collections.deque[OwedAck] = dataclasses.field(default_factory=collections.deque)
    # the syncs sent, kept to resend a lost one: (round, its parts), the round's shared updates
    # held once for every peer (``AppSyncCodec.sync_parts``); bytes: their whole length
    history: collections.deque[tuple[int, tuple[bytes, ...]]] = dataclasses.field(
        default_factory=collections.deque)
    history_bytes: int = 0
    # (round, rounds behind) of the last repair: a gap is repaired once a round, unless a
    # later report goes further back
    repaired: tuple[int, int] = (-1, 0)
    # the client id as a sync's header writes it (checked once, at the join)
    client_bytes: bytes = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        self.client_bytes = self.client_id.encode()


class Session:
    def __init__(self, name: str) -> None:
        self.name = name
        self.objects: dict[str, SharedObject] = {}
        self.round = 0  # 0: no round yet
        self.rounds_done = 0
        self.phase = Phase.IDLE
        self.peers: dict[str, PeerState] = {}  # by client id
        self.joining: list[PeerState] = []
        self.requests: list[Request] = []
        self.timer: TimerHandle | None = None
        self.min_passed = False
        self.waited_until: float | None = None  # when the last round stopped waiting
        self.due = 0.0  # when the timer of the round's wait is due (its min, then its max)
        self.last_id = 0  # the last client id given (as a number)
        self.joining_ids: set[str] = set()  # the client ids of ``joining``
        # client id -> salt (16 bytes) + SHA-256 of salt and the peer secret it joined with
        self.secrets: dict[str, bytes] = {}
        self.member: MemberSession | None = None  # in a member zone: the master's part
        # the peers that had not answered the round when ``_all_answered`` first looked, and
        # the round (``rounds_done``) that was: a round's peers only leave until it ends, so
        # each later look drops those that answered or left since, without walking them all
        self.waiting: list[PeerState] = []
        self.waiting_for = -1

    def holds_secret(self, client_id: str, secret: str | None) -> bool:
        """A join naming ``client_id`` may have it back: no secret was kept for it, or
        ``secret`` is the one kept (compared in constant time)."""
        kept = self.secrets.get(client_id)
        if kept is None:
            return True
        return secret is not None and hmac.compare_digest(
            secret_digest(kept[:16], secret), kept[16:])

    def owns_objects(self, client_id: str) -> bool:
        return any(obj.owner == client_id for obj in self.objects.values())

    def free_id(self, wanted: str) -> str | None:
        """``wanted`` (a reconnect) if no live peer holds it, else a fresh id: the next one
        after the last given that no live peer holds and no object of the session belongs
        to, so a newcomer never inherits an absent peer's C and NA objects (nor its write
        rights), also after the session emptied or the server restarted."""
        joining = self.joining_ids
        if wanted and wanted not in self.peers and wanted not in joining:
            return wanted
        owners: set[str] | None = None  # made once a candidate is free of live peers
        for step in range(1, 0x10000):
            number = (self.last_id + step - 1) % 0xFFFF + 1
            candidate = f"{number:04X}"
            if candidate in self.peers or candidate in joining:
                continue
            if owners is None:
                owners = {obj.owner for obj in self.objects.values()}
            if candidate not in owners:
                self.last_id = number
                return candidate
        return None


def sees(peer: PeerState, obj: SharedObject) -> bool:
    """May ``peer`` see ``obj``: its mode says, and another zone's CTRL sees G objects only."""
    return visible_to(obj, peer.client_id) and (peer.zone is None
                                                or obj.scope is Scope.GLOBAL)


def due_acks(peer: PeerState) -> tuple[int, ...]:
    """The acks ``peer`` gets in this sync: the decided ones, oldest first, up to the first
    still waiting for the master zone (acks keep the order of the requests)."""
    owed = peer.owed
    due: list[int] = []
    while owed and owed[0].code is not None:
        due.append(int(owed.popleft().code))  # type: ignore[arg-type]
    return tuple(due)

