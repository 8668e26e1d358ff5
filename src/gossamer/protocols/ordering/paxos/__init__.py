"""paxos: a sans-I/O Multi-Paxos replica that orders opaque operations into one log (seed 001,
section 4). ``PaxosReplica`` is the part a service embeds; ``docs/paxos.md`` has the design."""

from .config import Committed, DecidedOp, NotCommitted, Outcome, PaxosConfig, Role
from .messages import (
    CODEC,
    Accept,
    AcceptOk,
    Ballot,
    Batch,
    Catchup,
    Command,
    Decided,
    Nack,
    Noop,
    NoopOk,
    Prepare,
    PrepareOk,
    Propose,
    Snapshot,
    digest,
)
from .orderer import PaxosOrderer
from .replica import PaxosReplica

__all__ = [
    "CODEC",
    "Accept",
    "AcceptOk",
    "Ballot",
    "Batch",
    "Catchup",
    "Command",
    "Committed",
    "Decided",
    "DecidedOp",
    "Nack",
    "Noop",
    "NoopOk",
    "NotCommitted",
    "Outcome",
    "PaxosConfig",
    "PaxosOrderer",
    "PaxosReplica",
    "Prepare",
    "PrepareOk",
    "Propose",
    "Role",
    "Snapshot",
    "digest",
]
