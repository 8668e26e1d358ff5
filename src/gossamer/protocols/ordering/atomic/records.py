"""What the atomic layer puts in SRM items, and its own two messages (outcome queries and
answers), each a frozen record that validates: a malformed one never reaches the protocol.

Items (SRM payloads, repaired like data): ``Data`` (the message and the sender's snapshot of
the group), ``Vote`` (a snapshot member's YES or NO) and ``Outcome`` (the sender's CONFIRM,
with the snapshot, or ABORT).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ....core.env import MAX_DATAGRAM
from ....core.errors import InvalidMessage
from ....core.messages import Codec, Message, TraceIds, message

__all__ = ["CODEC", "Data", "Item", "Outcome", "OutcomeAnswer", "OutcomeQuery", "Vote",
           "item_of", "origin_of", "payload_of", "seq_of"]

CODEC = Codec(max_frame=MAX_DATAGRAM)
MAX_SNAPSHOT = 300


def _check_mid(mid: str) -> None:
    origin, sep, seq = mid.rpartition(":")
    if not origin or not sep or not seq.isdigit():
        raise ValueError(f"a message id is origin:seq, got {mid!r}")


def _check_snapshot(snapshot: tuple[str, ...]) -> None:
    if not 0 < len(snapshot) <= MAX_SNAPSHOT:
        raise ValueError(f"a snapshot has 1..{MAX_SNAPSHOT} members, got {len(snapshot)}")
    if len(set(snapshot)) != len(snapshot) or not all(isinstance(m, str) for m in snapshot):
        raise ValueError("a snapshot lists distinct member ids")


def origin_of(mid: str) -> str:
    return mid.rpartition(":")[0]


def seq_of(mid: str) -> int:
    """The sender's SRM seq in a message id (``origin:seq``); 0 if it has none."""
    tail = mid.rpartition(":")[2]
    return int(tail) if tail.isdigit() else 0


@dataclasses.dataclass(frozen=True, slots=True)
class Data:
    mid: str
    snapshot: tuple[str, ...]
    body: Any

    def __post_init__(self) -> None:
        _check_mid(self.mid)
        _check_snapshot(self.snapshot)


@dataclasses.dataclass(frozen=True, slots=True)
class Vote:
    mid: str
    voter: str
    yes: bool

    def __post_init__(self) -> None:
        _check_mid(self.mid)


@dataclasses.dataclass(frozen=True, slots=True)
class Outcome:
    """CONFIRM (``commit``, with the snapshot) or ABORT of ``mid``."""

    mid: str
    commit: bool
    snapshot: tuple[str, ...]

    def __post_init__(self) -> None:
        _check_mid(self.mid)
        _check_snapshot(self.snapshot)


Item = Data | Vote | Outcome


def item_of(payload: Any) -> Item:
    """The record an SRM payload carries, or ``InvalidMessage``."""
    if not isinstance(payload, dict):
        raise InvalidMessage("an atomic item is a JSON object")
    kind = payload.get("k")
    try:
        if kind == "data" and set(payload) == {"k", "mid", "snap", "body"}:
            return Data(payload["mid"], _strings(payload["snap"]), payload["body"])
        if kind == "vote" and set(payload) == {"k", "mid", "voter", "yes"}:
            if not isinstance(payload["yes"], bool) or not isinstance(payload["voter"], str):
                raise ValueError("bad vote")
            return Vote(_string(payload["mid"]), payload["voter"], payload["yes"])
        if kind == "outcome" and set(payload) == {"k", "mid", "commit", "snap"}:
            if not isinstance(payload["commit"], bool):
                raise ValueError("bad outcome")
            return Outcome(_string(payload["mid"]), payload["commit"],
                           _strings(payload["snap"]))
    except (TypeError, ValueError, AttributeError) as exc:
        raise InvalidMessage(f"malformed atomic item: {exc}") from exc
    raise InvalidMessage(f"unknown or malformed atomic item {kind!r}")


def payload_of(item: Item) -> dict[str, Any]:
    if isinstance(item, Data):
        return {"k": "data", "mid": item.mid, "snap": list(item.snapshot), "body": item.body}
    if isinstance(item, Vote):
        return {"k": "vote", "mid": item.mid, "voter": item.voter, "yes": item.yes}
    return {"k": "outcome", "mid": item.mid, "commit": item.commit,
            "snap": list(item.snapshot)}


def _string(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError("expected a string")
    return value


def _strings(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list | tuple):
        raise ValueError("expected a list")
    return tuple(_string(v) for v in value)


@message("atomic.query", codec=CODEC)
class OutcomeQuery(Message):
    """``asker`` holds ``mid`` pending and wants its outcome (after a restart, or when the
    sender went silent)."""

    asker: str
    mid: str

    def __post_init__(self) -> None:
        _check_mid(self.mid)

    def trace_ids(self) -> TraceIds:
        return (self.mid, origin_of(self.mid), None, None)


@message("atomic.answer", codec=CODEC)
class OutcomeAnswer(Message):
    """The outcome of ``mid`` as ``answerer`` keeps it durably."""

    answerer: str
    mid: str
    commit: bool
    snapshot: tuple[str, ...]

    def __post_init__(self) -> None:
        _check_mid(self.mid)
        _check_snapshot(self.snapshot)

    def trace_ids(self) -> TraceIds:
        return (self.mid, origin_of(self.mid), None, None)
