"""The acceptor of a Paxos replica: promises and accepted values, written to the store before
the PREPARE_OK or ACCEPT_OK that depends on them is sent (the caller commits, then sends).

One promised ballot covers every slot (Multi-Paxos); a message with an older ballot gets a
NACK naming the promise and changes nothing.
"""

from __future__ import annotations

import orjson

from .log import ReplicaLog
from .messages import MAX_ENTRIES, Accept, AcceptOk, Ballot, Batch, Nack, Prepare, PrepareOk
from .store import PaxosStore

__all__ = ["Acceptor"]


class Acceptor:
    """Promises and accepts; ``log`` holds the accepted values and what is decided."""

    def __init__(self, store: PaxosStore, log: ReplicaLog, *, report_limit: int,
                 report_bytes: int) -> None:
        self.store = store
        self.log = log
        self.promised: Ballot | None = store.load_promised()
        self.report_limit = report_limit  # entries in one PREPARE_OK
        self.report_bytes = report_bytes

    def _promise(self, ballot: Ballot) -> None:
        if self.promised is None or ballot > self.promised:
            self.promised = ballot
            self.store.save_promised(ballot)

    def is_old(self, ballot: Ballot) -> bool:
        return self.promised is not None and ballot < self.promised

    def nack(self) -> Nack:
        assert self.promised is not None
        return Nack(promised=self.promised)

    def prepare(self, msg: Prepare) -> PrepareOk:
        """Promise ``msg.ballot`` (not older than the promise: the caller checked) and report
        what this replica accepted and knows decided from ``msg.from_slot`` on."""
        self._promise(msg.ballot)
        log = self.log
        start = max(msg.from_slot, log.floor + 1)
        accepted = log.undecided_accepted(start)
        decided = [(slot, row.decided) for slot, row in sorted(log.rows.items())
                   if slot >= start and row.decided is not None]
        limit = min(self.report_limit, MAX_ENTRIES)
        truncated = len(accepted) > limit or len(decided) > limit
        accepted, decided = accepted[:limit], decided[:limit]
        budget = self.report_bytes
        kept_decided: list[tuple[int, Batch]] = []
        for slot, value in decided:
            budget -= len(orjson.dumps(value))
            if budget < 0:
                truncated = True
                break
            kept_decided.append((slot, value))
        kept_accepted: list[tuple[int, Ballot, Batch]] = []
        for entry in accepted:
            budget -= len(orjson.dumps(entry[2]))
            if budget < 0 and kept_accepted:
                truncated = True
                break
            kept_accepted.append(entry)
        snapshot_slot = log.snapshot.slot if log.snapshot is not None else 0
        return PrepareOk(ballot=msg.ballot, from_slot=msg.from_slot,
                         accepted=tuple(kept_accepted), decided=tuple(kept_decided),
                         snapshot_slot=snapshot_slot, truncated=truncated)

    def accept(self, msg: Accept) -> AcceptOk | None:
        """Accept ``msg.value`` for ``msg.slot`` (the ballot is not old: the caller checked).
        None: the slot is compacted here (decided long ago), nothing to accept."""
        self._promise(msg.ballot)
        log = self.log
        if msg.slot <= log.floor:
            return None
        if not log.is_decided(msg.slot):
            log.accept(msg.slot, msg.ballot, msg.value)
        return AcceptOk(ballot=msg.ballot, slot=msg.slot)
