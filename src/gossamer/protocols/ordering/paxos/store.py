"""What a Paxos replica keeps in ``env.store``: promised ballot, campaign round, the log (per
slot: accepted ballot and value, decided value) and the latest snapshot.

Writes are made here and committed by the caller (``commit_then``) before any message that
depends on them leaves: a restarted replica never forgets a promise or an accepted value.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import orjson

from ....core.env import Store, get_json, put_json
from .messages import Ballot, Batch, ConfigEntry, RecentId

__all__ = ["LogRow", "PaxosStore", "SnapshotRecord"]

_STATE, _LOG = "paxos", "paxos.log"


def _ballot(raw: Any) -> Ballot | None:
    return None if raw is None else (int(raw[0]), str(raw[1]))


def _batch(raw: Any) -> Batch:
    return tuple((str(kind), str(cid), data) for kind, cid, data in raw)


@dataclasses.dataclass(slots=True)
class LogRow:
    """One slot: what this acceptor accepted, and the value once known decided."""

    accepted_ballot: Ballot | None = None
    accepted_value: Batch | None = None
    decided: Batch | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class SnapshotRecord:
    """The state machine after ``slot`` and what replaying from there needs."""

    slot: int
    state: Any
    configs: tuple[ConfigEntry, ...]
    recent_ids: tuple[RecentId, ...]


class PaxosStore:
    """A Paxos replica's durable state over a ``Store`` (tables ``paxos`` and ``paxos.log``)."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def load_promised(self) -> Ballot | None:
        return _ballot(get_json(self.store, _STATE, "promised"))

    def save_promised(self, ballot: Ballot) -> None:
        put_json(self.store, _STATE, "promised", list(ballot))

    def load_round(self) -> int:
        raw = get_json(self.store, _STATE, "round")
        return 0 if raw is None else int(raw)

    def save_round(self, round_: int) -> None:
        put_json(self.store, _STATE, "round", round_)

    def load_snapshot(self) -> SnapshotRecord | None:
        raw = get_json(self.store, _STATE, "snapshot")
        if raw is None:
            return None
        configs = tuple((int(first), tuple(str(n) for n in members))
                        for first, members in raw["configs"])
        return SnapshotRecord(int(raw["slot"]), raw["state"], configs,
                              tuple((str(cid), int(slot), int(index))
                                    for cid, slot, index in raw["recent_ids"]))

    def save_snapshot(self, snap: SnapshotRecord) -> None:
        put_json(self.store, _STATE, "snapshot", {
            "slot": snap.slot, "state": snap.state,
            "configs": [[first, list(members)] for first, members in snap.configs],
            "recent_ids": [list(entry) for entry in snap.recent_ids]})

    def load_log(self) -> dict[int, LogRow]:
        rows: dict[int, LogRow] = {}
        for key, data in self.store.scan(_LOG):
            raw = orjson.loads(data)
            value = raw["av"]
            decided = raw["dv"]
            rows[int(key)] = LogRow(_ballot(raw["ab"]), None if value is None else _batch(value),
                                    None if decided is None else _batch(decided))
        return rows

    def save_row(self, slot: int, row: LogRow) -> None:
        put_json(self.store, _LOG, f"{slot:012d}", {
            "ab": None if row.accepted_ballot is None else list(row.accepted_ballot),
            "av": row.accepted_value, "dv": row.decided})

    def delete_row(self, slot: int) -> None:
        self.store.delete(_LOG, f"{slot:012d}")
