"""The replicated log as one replica knows it: slots, the decided prefix, the replica set of
each slot (the alpha rule) and the snapshot the log is compacted behind.

Pure bookkeeping: no messages, no timers. ``learn`` records a decision and moves the prefix;
replica set changes take effect ``window`` slots after the slot that decided them, so the set
of slot s is known once every slot up to s - window is decided.
"""

from __future__ import annotations

import orjson

from .messages import Batch, ConfigEntry
from .store import LogRow, PaxosStore, SnapshotRecord

__all__ = ["ReplicaLog", "apply_changes", "majority"]


def majority(members: frozenset[str]) -> int:
    return len(members) // 2 + 1


def apply_changes(members: tuple[str, ...], value: Batch) -> tuple[str, ...] | None:
    """The replica set after the ``add``/``remove`` commands of ``value`` (None: unchanged).
    Adding a member or removing a non-member changes nothing; the last member stays."""
    current = set(members)
    for kind, _cid, data in value:
        if kind == "add":
            current.add(data)
        elif kind == "remove" and data in current and len(current) > 1:
            current.discard(data)
    after = tuple(sorted(current))
    return None if after == members else after


class ReplicaLog:
    """Slots and decisions of one replica, mirrored in its ``PaxosStore``."""

    def __init__(self, store: PaxosStore, window: int, snapshot: SnapshotRecord | None,
                 rows: dict[int, LogRow]) -> None:
        self.store = store
        self.window = window
        self.snapshot = snapshot  # None: a joiner that has not received one yet
        self.configs: list[ConfigEntry] = list(snapshot.configs) if snapshot else []
        self.prefix = snapshot.slot if snapshot else 0  # every slot up to here is decided
        self.rows = rows
        # slots up to here hold no row any more (compacted behind the snapshot)
        self.floor = min(min(rows, default=self.prefix + 1) - 1, self.prefix)
        self._advance()

    # -- replica sets -------------------------------------------------------------------------

    @property
    def knows_configs(self) -> bool:
        return bool(self.configs)

    def config_for(self, slot: int) -> frozenset[str] | None:
        """The replica set of ``slot``; None while it is not known yet (the slots before it
        are not all decided here)."""
        if not self.configs or slot > self.prefix + self.window:
            return None
        members: tuple[str, ...] = ()
        for first, entry in self.configs:
            if first > slot:
                break
            members = entry
        return frozenset(members)

    def current_members(self) -> frozenset[str]:
        """The replica set of the next undecided slot."""
        return self.config_for(self.prefix + 1) or frozenset()

    def next_change(self) -> int | None:
        """The first slot of a replica set decided but not in force yet (None: none is)."""
        return next((first for first, _members in self.configs if first > self.prefix + 1),
                    None)

    def window_members(self) -> frozenset[str]:
        """Every member of the slots this replica may see proposed next."""
        out: set[str] = set()
        for slot in (self.prefix + 1, self.prefix + self.window):
            out |= self.config_for(slot) or frozenset()
        for first, members in self.configs:
            if self.prefix < first <= self.prefix + self.window:
                out |= set(members)
        return frozenset(out)

    def known_nodes(self) -> frozenset[str]:
        out: set[str] = set()
        for _first, members in self.configs:
            out |= set(members)
        return frozenset(out)

    # -- slots --------------------------------------------------------------------------------

    def row(self, slot: int) -> LogRow:
        row = self.rows.get(slot)
        if row is None:
            row = self.rows[slot] = LogRow()
        return row

    def decided_value(self, slot: int) -> Batch | None:
        row = self.rows.get(slot)
        return None if row is None else row.decided

    def is_decided(self, slot: int) -> bool:
        return slot <= self.prefix or self.decided_value(slot) is not None

    def accept(self, slot: int, ballot: tuple[int, str], value: Batch) -> None:
        row = self.row(slot)
        row.accepted_ballot, row.accepted_value = ballot, value
        self.store.save_row(slot, row)

    def learn(self, slot: int, value: Batch) -> bool:
        """Record that ``slot`` decided ``value`` (written, not committed); True if news.
        Needs the replica sets (a joiner learns nothing before its snapshot)."""
        if not self.configs or self.is_decided(slot):
            return False
        row = self.row(slot)
        row.decided = value
        self.store.save_row(slot, row)
        self._advance()
        return True

    def _advance(self) -> None:
        while True:
            row = self.rows.get(self.prefix + 1)
            if row is None or row.decided is None:
                return
            self.prefix += 1
            changed = apply_changes(self.configs[-1][1], row.decided)
            if changed is not None:
                self.configs.append((self.prefix + self.window, changed))

    def decided_entries(self, from_slot: int, limit: int, max_bytes: int
                        ) -> list[tuple[int, Batch]]:
        """Decided slots from ``from_slot`` (ascending, contiguous), at most ``limit`` and
        about ``max_bytes`` encoded."""
        out: list[tuple[int, Batch]] = []
        size = 0
        slot = max(from_slot, self.floor + 1)
        while len(out) < limit:
            value = self.decided_value(slot)
            if value is None:
                break
            size += len(orjson.dumps(value))
            if out and size > max_bytes:
                break
            out.append((slot, value))
            slot += 1
        return out

    def undecided_accepted(self, from_slot: int) -> list[tuple[int, tuple[int, str], Batch]]:
        return [(slot, row.accepted_ballot, row.accepted_value)
                for slot, row in sorted(self.rows.items())
                if slot >= from_slot and row.decided is None
                and row.accepted_ballot is not None and row.accepted_value is not None]

    # -- snapshots ----------------------------------------------------------------------------

    def configs_from(self, slot: int) -> tuple[ConfigEntry, ...]:
        """The replica sets needed from ``slot`` on (the one in force there, and later)."""
        kept = [entry for entry in self.configs if entry[0] > slot]
        earlier = [entry for entry in self.configs if entry[0] <= slot]
        if earlier:
            kept.insert(0, earlier[-1])
        return tuple(kept)

    def compact(self, snap: SnapshotRecord, retain: int) -> None:
        """``snap`` is the new snapshot: drop rows more than ``retain`` slots behind it."""
        self.snapshot = snap
        self.store.save_snapshot(snap)
        floor = max(self.floor, snap.slot - retain)
        for slot in [s for s in self.rows if s <= floor]:
            del self.rows[slot]
            self.store.delete_row(slot)
        self.floor = floor
        self.configs = list(self.configs_from(snap.slot + 1))

    def install(self, snap: SnapshotRecord) -> None:
        """Jump to a snapshot received from a peer (``snap.slot`` > prefix)."""
        self.snapshot = snap
        self.store.save_snapshot(snap)
        for slot in [s for s in self.rows if s <= snap.slot]:
            del self.rows[slot]
            self.store.delete_row(slot)
        self.prefix = snap.slot
        self.floor = snap.slot
        self.configs = list(snap.configs)
        self._advance()
