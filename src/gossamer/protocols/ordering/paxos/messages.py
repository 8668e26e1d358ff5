"""Multi-Paxos messages (seed 001, section 4): ballots, commands, batches and the wire types.

A slot's value is a *batch*: a tuple of commands, each ``(kind, id, data)``; the empty batch is
the no-op that fills a hole. Every constructor validates, so a malformed message cannot exist.
"""

from __future__ import annotations

import zlib
from typing import Any

import orjson

from ....core.ids import check_node_id
from ....core.messages import Codec, Message, TraceIds, message

__all__ = [
    "CODEC",
    "KINDS",
    "Accept",
    "AcceptOk",
    "Ballot",
    "Batch",
    "Catchup",
    "Command",
    "ConfigEntry",
    "Decided",
    "Nack",
    "Noop",
    "NoopOk",
    "Prepare",
    "PrepareOk",
    "Propose",
    "RecentId",
    "Snapshot",
    "check_ballot",
    "check_batch",
    "digest",
]

Ballot = tuple[int, str]
"""(round, node): ballots compare as tuples; a node's own ballots carry its id, so two
proposers never share one."""
Command = tuple[str, str, Any]
"""(kind, id, data): kind ``op`` (data: the application's opaque JSON value), ``add`` or
``remove`` (data: the replica's node id); ``id`` is unique per proposal (``origin:seq``)."""
Batch = tuple[Command, ...]
RecentId = tuple[str, int, int]
"""(command id, slot, index) of a command applied recently."""
ConfigEntry = tuple[int, tuple[str, ...]]
"""(first slot, members): the replica set from that slot on."""

KINDS = frozenset({"op", "add", "remove"})
MAX_ID = 200  # characters of a command id
MAX_BATCH = 4096  # commands in one slot (the config's max_batch is usually far lower)
MAX_ENTRIES = 4096  # slots in one PREPARE_OK or DECIDED

CODEC = Codec()
"""The codec of the paxos messages (``Codec.union`` joins it with a node's other layers)."""


def check_ballot(ballot: Ballot, name: str = "ballot") -> None:
    round_, node = ballot
    if round_ < 1:
        raise ValueError(f"{name} round must be >= 1, got {round_}")
    check_node_id(node)


def _check_heartbeat(ballot: Ballot, decided_upto: int) -> None:
    """A NOOP's or NOOP_OK's fields: a ballot, and a decided prefix (0: nothing decided)."""
    check_ballot(ballot)
    if decided_upto < 0:
        raise ValueError(f"decided_upto must be >= 0, got {decided_upto}")


def _check_slot(slot: int, name: str = "slot") -> None:
    if slot < 1:
        raise ValueError(f"{name} must be >= 1, got {slot}")


def check_command(command: Command) -> None:
    kind, command_id, data = command
    if kind not in KINDS:
        raise ValueError(f"unknown command kind {kind!r}")
    if not 1 <= len(command_id) <= MAX_ID:
        raise ValueError(f"a command id has 1-{MAX_ID} characters, got {command_id!r}")
    if kind != "op":
        check_node_id(data)


def check_batch(batch: Batch) -> None:
    if len(batch) > MAX_BATCH:
        raise ValueError(f"a batch holds at most {MAX_BATCH} commands, got {len(batch)}")
    for command in batch:
        check_command(command)


def digest(batch: Batch) -> int:
    """A short fingerprint of a batch for trace rows (agreement is checked on it)."""
    return zlib.crc32(orjson.dumps(batch))


def _check_entries(entries: tuple[Any, ...]) -> None:
    if len(entries) > MAX_ENTRIES:
        raise ValueError(f"at most {MAX_ENTRIES} entries, got {len(entries)}")


@message("paxos.prepare", codec=CODEC)
class Prepare(Message):
    """PREPARE: ``ballot``'s node asks to lead every slot from ``from_slot`` on."""

    ballot: Ballot
    from_slot: int

    def __post_init__(self) -> None:
        check_ballot(self.ballot)
        _check_slot(self.from_slot, "from_slot")


@message("paxos.prepare_ok", codec=CODEC)
class PrepareOk(Message):
    """PREPARE_OK: promised ``ballot``; what I accepted from ``from_slot`` on (slot, ballot,
    value), what I know decided there, my snapshot's slot, and whether I left some out."""

    ballot: Ballot
    from_slot: int
    accepted: tuple[tuple[int, Ballot, Batch], ...]
    decided: tuple[tuple[int, Batch], ...]
    snapshot_slot: int
    truncated: bool = False

    def __post_init__(self) -> None:
        check_ballot(self.ballot)
        _check_slot(self.from_slot, "from_slot")
        _check_entries(self.accepted)
        _check_entries(self.decided)
        for slot, ballot, batch in self.accepted:
            _check_slot(slot)
            check_ballot(ballot, "accepted ballot")
            check_batch(batch)
        for slot, batch in self.decided:
            _check_slot(slot)
            check_batch(batch)
        if self.snapshot_slot < 0:
            raise ValueError(f"snapshot_slot must be >= 0, got {self.snapshot_slot}")


@message("paxos.accept", codec=CODEC)
class Accept(Message):
    """ACCEPT: the leader of ``ballot`` proposes ``value`` for ``slot``."""

    ballot: Ballot
    slot: int
    value: Batch

    def __post_init__(self) -> None:
        check_ballot(self.ballot)
        _check_slot(self.slot)
        check_batch(self.value)

    def trace_ids(self) -> TraceIds:
        round_, node = self.ballot
        return (f"accept:{self.slot}:{round_}:{node}", node, None, self.slot)


@message("paxos.accept_ok", codec=CODEC)
class AcceptOk(Message):
    """ACCEPT_OK, sent to every replica: I accepted ``slot`` at ``ballot``."""

    ballot: Ballot
    slot: int

    def __post_init__(self) -> None:
        check_ballot(self.ballot)
        _check_slot(self.slot)

    def trace_ids(self) -> TraceIds:
        round_, node = self.ballot
        return (f"accept_ok:{self.slot}:{round_}:{node}", node, None, self.slot)


@message("paxos.nack", codec=CODEC)
class Nack(Message):
    """Your ballot is old: I promised ``promised``."""

    promised: Ballot

    def __post_init__(self) -> None:
        check_ballot(self.promised, "promised")


@message("paxos.noop", codec=CODEC)
class Noop(Message):
    """NOOP heartbeat of the leader of ``ballot``, which has decided every slot up to
    ``decided_upto``."""

    ballot: Ballot
    decided_upto: int

    def __post_init__(self) -> None:
        _check_heartbeat(self.ballot, self.decided_upto)


@message("paxos.noop_ok", codec=CODEC)
class NoopOk(Message):
    """NOOP_OK: I am alive and have decided every slot up to ``decided_upto``."""

    ballot: Ballot
    decided_upto: int

    def __post_init__(self) -> None:
        _check_heartbeat(self.ballot, self.decided_upto)


@message("paxos.propose", codec=CODEC)
class Propose(Message):
    """PROPOSE forwarded to the leader: order these commands."""

    commands: Batch

    def __post_init__(self) -> None:
        if not self.commands:
            raise ValueError("a PROPOSE carries at least one command")
        check_batch(self.commands)


@message("paxos.catchup", codec=CODEC)
class Catchup(Message):
    """Send me the decided slots from ``from_slot`` on (with a snapshot first if
    ``need_snapshot`` or if you no longer hold them)."""

    from_slot: int
    need_snapshot: bool = False

    def __post_init__(self) -> None:
        _check_slot(self.from_slot, "from_slot")


@message("paxos.decided", codec=CODEC)
class Decided(Message):
    """Decided slots (slot, value), ascending: the answer to a CATCHUP."""

    entries: tuple[tuple[int, Batch], ...]

    def __post_init__(self) -> None:
        _check_entries(self.entries)
        previous = 0
        for slot, batch in self.entries:
            if slot <= previous:
                raise ValueError("decided entries must ascend")
            previous = slot
            check_batch(batch)


@message("paxos.snapshot", codec=CODEC)
class Snapshot(Message):
    """State transfer: the state machine after ``slot``, the replica sets from there on, and
    the commands recently applied (id, slot, index), so none is applied twice."""

    slot: int
    state: Any
    configs: tuple[ConfigEntry, ...]
    recent_ids: tuple[RecentId, ...]

    def __post_init__(self) -> None:
        if self.slot < 0:
            raise ValueError(f"slot must be >= 0, got {self.slot}")
        if not self.configs:
            raise ValueError("a snapshot carries at least one replica set")
        for first, members in self.configs:
            _check_slot(first, "config slot")
            if not members:
                raise ValueError("a replica set has at least one member")
            for node in members:
                check_node_id(node)
        for command_id, slot, index in self.recent_ids:
            if not 1 <= len(command_id) <= MAX_ID or slot < 1 or index < 0:
                raise ValueError(f"bad recent id {(command_id, slot, index)!r}")
