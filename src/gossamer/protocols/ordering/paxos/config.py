"""The Multi-Paxos replica's settings, its roles and what it tells the application."""

from __future__ import annotations

import dataclasses
import enum
from typing import Any

from ....core.errors import ConfigError

__all__ = ["Committed", "DecidedOp", "NotCommitted", "Outcome", "PaxosConfig", "Role"]


class Role(enum.Enum):
    FOLLOWER = "follower"  # accepts and learns; suspects the leader when its NOOPs stop
    CANDIDATE = "candidate"  # sent PREPARE, waits for a majority of PREPARE_OK
    LEADER = "leader"  # its ballot was adopted: proposes slots
    OUTSIDE = "outside"  # not in the replica set (not added yet, or removed)


@dataclasses.dataclass(frozen=True, slots=True)
class PaxosConfig:
    """Timers are in seconds. ``window`` is both the number of slots in flight and alpha: a
    replica set change decided at slot s applies from slot s + window."""

    heartbeat_interval: float = 1.0  # the leader's NOOP period
    suspect_timeout: float = 2.0  # without a word from the leader, suspect it
    election_jitter: float = 0.5  # a suspecting replica waits up to this much more (at random)
    prepare_retry: float = 0.3  # PREPARE again to those that did not answer
    accept_retry: float = 0.3  # ACCEPT again for slots not decided by then
    propose_retry: float = 1.0  # forward own undecided proposals to the leader again
    catchup_retry: float = 0.3  # at most one CATCHUP per this interval
    window: int = 8
    max_batch: int = 64  # commands per slot
    max_batch_bytes: int = 256 * 1024  # encoded bytes of one slot's commands
    max_command_bytes: int = 64 * 1024  # encoded bytes of one proposal's payload
    max_pending: int = 10_000  # own proposals awaiting their decision
    max_queue: int = 10_000  # commands queued at the leader
    snapshot_every: int = 1_000  # applied slots between snapshots (needs a snapshot_fn)
    log_retain: int = 256  # decided slots kept behind the snapshot, for catch-up by tail
    catchup_batch: int = 256  # slots per DECIDED answer
    recent_ids: int = 4_096  # command ids remembered so a re-proposed command applies once
    possible_remove_after: float = 5.0  # leader: a member silent this long may be removed

    def __post_init__(self) -> None:
        for name in ("heartbeat_interval", "suspect_timeout", "prepare_retry", "accept_retry",
                     "propose_retry", "catchup_retry", "possible_remove_after"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"{name} must be > 0, got {getattr(self, name)!r}")
        if self.election_jitter < 0:
            raise ConfigError(f"election_jitter must be >= 0, got {self.election_jitter!r}")
        if self.suspect_timeout <= self.heartbeat_interval:
            raise ConfigError("suspect_timeout must be longer than heartbeat_interval")
        for name in ("window", "max_batch", "max_batch_bytes", "max_command_bytes",
                     "max_pending", "max_queue", "catchup_batch", "recent_ids"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)!r}")
        if self.snapshot_every < 0 or self.log_retain < 0:
            raise ConfigError("snapshot_every and log_retain must be >= 0")
        if self.max_batch > 4096 or self.catchup_batch > 4096:
            raise ConfigError("max_batch and catchup_batch are at most 4096")


@dataclasses.dataclass(frozen=True, slots=True)
class DecidedOp:
    """DECIDED: the operation ``payload`` (proposal ``id``) is the ``index``-th of ``slot``."""

    slot: int
    index: int
    id: str
    payload: Any


@dataclasses.dataclass(frozen=True, slots=True)
class Committed:
    """A proposal was decided: it is the ``index``-th command of ``slot`` (definite)."""

    slot: int
    index: int


@dataclasses.dataclass(frozen=True, slots=True)
class NotCommitted:
    """A proposal was not taken. ``definite``: it never will be (else it might still be)."""

    reason: str
    definite: bool


Outcome = Committed | NotCommitted
