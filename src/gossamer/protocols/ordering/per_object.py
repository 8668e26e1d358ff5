"""Total order per object (seed 000): which of the concurrent writes to one object wins, decided
the same way on every replica without negotiation, and the bounded, durable winning paths.

Every write goes from revision ``old_value`` to a new unique revision ``value``. So the writes of
one key form a tree rooted at "no object" (``None``). The state of a key is the end of its
*winning path*: from the root, at every revision, take the child write of the lowest writer id
(then lowest sequence number) until a revision has no child. That is a function of the set of
writes alone, so every replica that delivered the same writes agrees, whatever the delivery
order; causal delivery guarantees a write's base was delivered before it. A replica keeps the
current path as a bounded per-key history and updates it as writes arrive (``judge``):

- the write's base is the current revision: it extends the path;
- its base is on the path: it competes with the write that follows its base there (the fork
  sibling); if it ranks lower (lowest id wins) that sibling and everything after it is reverted
  and the new write applied; otherwise the new write loses;
- its base is not on the path (it descends from a write that lost): it loses.

(Comparing only with the fork sibling, not with every write after the base, matters: a lower id
may build on a higher id's write; whether that chain survives is decided where it forked.)

What a replica does about a lost write (tell its writer, rebase its own) is the client's
business (``gossamer.protocols.replica.objects``).

Limits: histories keep ``history_limit`` writes per key. A write based on a revision that has
left the history loses (its writer rebases it); a replica that still has that revision may judge
it a winner instead, so replicas can disagree when a writer was cut off while more than
``history_limit`` writes were made to the same key. Such verdicts come out marked
``beyond_history``, so the pipeline can flag them.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, ItemsView, Iterable, KeysView, Mapping
from typing import Any, NamedTuple

import orjson

from ...core.env import Store
from ...core.rowlog import RowLog
from ..replica.wire import Data

__all__ = ["Outcome", "Verdict", "WinningPaths", "Write", "judge"]

# every object's history as a RowLog by object key, at each position its write's JSON: a push
# adds a row (or joins the row of the next ``write_pending``), never rewrites one
_HISTORIES = "replica.paths"
_FORMER_HISTORIES = "replica.histories"  # the layout before: 16 positions per rewritten row


class Verdict(enum.Enum):
    """What a delivered write does to its object."""

    EXTENDS = "extends"  # based on the current revision
    WINS = "wins"  # beats the fork sibling: the path is cut there
    LOSES = "loses"  # ranks above the fork sibling, or descends from a loser


class Write(NamedTuple):
    """One applied write in an object's history (a tuple: made for every delivered write, and
    a tuple is made several times faster than a frozen dataclass)."""

    revision: str
    old: str | None
    writer: str
    seq: int
    content: Any
    deleted: bool

    @property
    def rank(self) -> tuple[str, int]:
        return (self.writer, self.seq)

    def to_json(self) -> list[Any]:
        return [self.revision, self.old, self.writer, self.seq, self.content, self.deleted]

    @classmethod
    def from_json(cls, row: list[Any]) -> Write:
        revision, old, writer, seq, content, deleted = row
        return cls(str(revision), old, str(writer), int(seq), content, bool(deleted))

    @classmethod
    def of(cls, msg: Data) -> Write:
        return cls(msg.value, msg.old_value, msg.id, msg.seq, msg.data, msg.deleted)


def judge(history: list[Write], write: Write) -> tuple[Verdict, int | None]:
    """The verdict on ``write`` against a key's winning path, and the fork index (the position
    of the fork sibling in ``history``) when it has one."""
    current = history[-1].revision if history else None
    if write.old == current:
        return Verdict.EXTENDS, None
    fork: int | None = None
    if write.old is None:
        if history and history[0].old is None:  # else the creation left the bounded history
            fork = 0
    else:
        for index in range(len(history) - 2, -1, -1):
            if history[index].revision == write.old:
                fork = index + 1
                break
    if fork is None:
        return Verdict.LOSES, None
    if write.rank < history[fork].rank:
        return Verdict.WINS, fork
    return Verdict.LOSES, fork


class Outcome(NamedTuple):
    """What adding a delivered write did: its verdict; for a winner the writes it reverted
    (oldest first); for a loser the write it lost to (None: its base is unknown here) and
    whether its base may just have left the bounded history."""

    verdict: Verdict
    reverted: list[Write]
    winner: Write | None = None
    beyond_history: bool = False


WriteFn = Callable[[str, Write], None]
"""``(key, write)``: a write applied to (or reverted from) the winning path of ``key``."""


class WinningPaths:
    """Every object's kept winning path, oldest write first, bounded to ``history_limit`` writes
    and stored in ``store`` as it changes (committing is the caller's).

    ``on_applied`` hears each write that becomes an object's current revision, ``on_reverted``
    each write a winner cuts off, in the order they happen. ``defer_writes``: the open chunks
    reach the store only at ``write_pending()`` (a caller that commits in groups)."""

    def __init__(self, store: Store, *, history_limit: int, on_applied: WriteFn,
                 on_reverted: WriteFn, defer_writes: bool = False) -> None:
        self._rows = RowLog(store, _HISTORIES, former_table=_FORMER_HISTORIES)
        self.history_limit = history_limit
        self.on_applied = on_applied
        self.on_reverted = on_reverted
        self.defer_writes = defer_writes
        self._objects: dict[str, list[Write]] = {}
        self._first: dict[str, int] = {}  # key -> stored position of its history's first write
        self._load()

    # -- reading --------------------------------------------------------------------------------

    def get(self, key: str) -> list[Write] | None:
        """The kept winning path of ``key`` (do not change it), None if never written here."""
        return self._objects.get(key)

    def path(self, key: str) -> list[Write]:
        """The kept winning path of ``key``, made (empty) if it is new here."""
        return self._objects.setdefault(key, [])

    def keys(self) -> KeysView[str]:
        return self._objects.keys()

    def items(self) -> ItemsView[str, list[Write]]:
        return self._objects.items()

    # -- changing -------------------------------------------------------------------------------

    def add(self, key: str, write: Write) -> Outcome:
        """A write delivered in causal order: it extends the path of ``key``, cuts it and is
        applied, or is discarded (``judge``)."""
        history = self.path(key)
        verdict, fork = judge(history, write)
        if verdict is Verdict.EXTENDS:
            self.push(key, history, write)
            return Outcome(verdict, [])
        if verdict is Verdict.WINS:
            assert fork is not None
            reverted = self.cut(key, history, fork)
            for undone in reversed(reverted):
                self.on_reverted(key, undone)
            self.push(key, history, write)
            return Outcome(verdict, reverted)
        winner = history[fork] if fork is not None else (history[-1] if history else None)
        # no fork found in a full history: the base may just have left it (see Limits)
        beyond = fork is None and len(history) >= self.history_limit
        return Outcome(verdict, [], winner, beyond)

    def push(self, key: str, history: list[Write], write: Write) -> None:
        """Apply ``write`` at the end of ``history`` (``path(key)``)."""
        first = self._first.setdefault(key, 0)
        history.append(write)
        self.on_applied(key, write)
        self._rows.append(key, first + len(history) - 1, orjson.dumps(write.to_json()))
        if not self.defer_writes:
            self._rows.write_pending()
        excess = len(history) - self.history_limit
        if excess > 0:
            del history[:excess]
            self._first[key] = first + excess
            self._rows.drop_before(key, first + excess)

    def cut(self, key: str, history: list[Write], fork: int) -> list[Write]:
        """Remove (and return) ``history[fork:]``, from the store too."""
        first = self._first.get(key, 0)
        self._rows.cut_from(key, first + fork, lambda position: orjson.dumps(
            history[position - first].to_json()) if position >= first else None)
        cut = history[fork:]
        del history[fork:]
        return cut

    def replace(self, paths: Mapping[str, Iterable[Write]]) -> None:
        """Every path replaced by ``paths`` (a snapshot's), each cut to ``history_limit``."""
        for key, history in self._objects.items():
            self.cut(key, history, 0)
        self._objects = {}
        self._first = {}
        for key, path in paths.items():
            writes = list(path)
            history = self._objects[key] = []
            for write in writes[-self.history_limit:]:
                self.push(key, history, write)

    def write_pending(self) -> None:
        """With ``defer_writes``: the writes pushed since the last call, to the store."""
        self._rows.write_pending()

    # -- storage --------------------------------------------------------------------------------

    def _load(self) -> None:
        """The histories from the store: each the last ``history_limit`` positions stored."""
        for key, entries in self._rows.load().items():
            kept = entries[-self.history_limit:]
            self._first[key] = kept[0][0]
            self._objects[key] = [Write.from_json(orjson.loads(body)) for _, body in kept]
