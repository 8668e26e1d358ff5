"""The ordering part a service is given at construction (Scribe's topic root, the seed-000 hub):
it decides where each proposed item goes in its key's order, and may answer later.

A service hands an item to ``Orderer.propose(key, item, on_decided)`` and acts on the decision
only when ``on_decided`` is called: ``Accepted`` (with the position decided for the item in its
key's order), ``Redirected`` (ask ``leader`` instead) or ``Refused`` (with a reason). Nothing is
acknowledged to a client before the orderer accepted it. ``on_decided`` is called exactly once
per proposal, on the node's own thread of events: during ``propose`` (``ImmediateOrderer``) or
later, from a timer or a message handler (a Multi-Paxos orderer, once a majority decided; the
test ``DeferredOrderer``, when the test says so). Sans-I/O: callbacks, no asyncio.

The positions of one key are 1, 2, 3, ..., each decided once and answered in that order (a
per-key log); a service may rely on it (Scribe numbers its stream with them). ``DeferredOrderer``
lets a test break that on purpose.
"""

from __future__ import annotations

import abc
import dataclasses
import enum
from collections.abc import Callable
from typing import Any, ClassVar

from ...core.errors import ConfigError, StateError
from ...core.ids import NodeId, check_node_id

__all__ = [
    "MAX_REASON",
    "Accepted",
    "Decision",
    "DecisionFn",
    "DeferredOrderer",
    "ImmediateOrderer",
    "Orderer",
    "Proposal",
    "ProposalState",
    "Redirected",
    "Refused",
    "ReplicatedOrderer",
    "check_reason",
]

MAX_REASON = 200  # characters of a refusal's reason (it crosses the wire to the client)


class ProposalState(enum.Enum):
    """Where a proposal stands; a decision is final."""

    PENDING = "pending"  # handed to the orderer, no decision yet
    ACCEPTED = "accepted"  # decided at a position of its key's order
    REDIRECTED = "redirected"  # not decided here: another node (the leader) orders this key
    REFUSED = "refused"  # not decided, with a reason


def check_reason(reason: object) -> str:
    """Return ``reason`` if it is a refusal's reason (1-``MAX_REASON`` characters)."""
    if not isinstance(reason, str) or not 1 <= len(reason) <= MAX_REASON:
        raise ValueError(f"a refusal's reason has 1-{MAX_REASON} characters, got {reason!r}")
    return reason


@dataclasses.dataclass(frozen=True, slots=True)
class Accepted:
    """Decided: the item is at ``position`` (1, 2, ...) of its key's order."""

    state: ClassVar[ProposalState] = ProposalState.ACCEPTED
    position: int

    def __post_init__(self) -> None:
        if self.position.__class__ is not int or self.position < 1:
            raise ValueError(f"position must be an int >= 1, got {self.position!r}")


@dataclasses.dataclass(frozen=True, slots=True)
class Redirected:
    """Not decided here: ``leader`` orders this key (the client should ask it)."""

    state: ClassVar[ProposalState] = ProposalState.REDIRECTED
    leader: NodeId

    def __post_init__(self) -> None:
        check_node_id(self.leader)


@dataclasses.dataclass(frozen=True, slots=True)
class Refused:
    """Not decided, and this proposal will not be: ``reason`` says why."""

    state: ClassVar[ProposalState] = ProposalState.REFUSED
    reason: str

    def __post_init__(self) -> None:
        check_reason(self.reason)


Decision = Accepted | Redirected | Refused
DecisionFn = Callable[[Decision], None]


def _check_proposal(key: object, on_decided: object) -> None:
    if not isinstance(key, str) or not key:
        raise ConfigError(f"a proposal's key is a non-empty str, got {key!r}")
    if not callable(on_decided):
        raise ConfigError(f"on_decided must be callable, got {on_decided!r}")


class Orderer(abc.ABC):
    """Decides the order of the items proposed under each key (see the module docstring)."""

    __slots__ = ()

    @abc.abstractmethod
    def propose(self, key: str, item: Any, on_decided: DecisionFn) -> None:
        """Order ``item`` among the items of ``key``; ``on_decided(decision)`` is called once,
        now or later. A bad argument raises at once (``ConfigError``)."""


OrderedFn = Callable[[str, int, Any], None]


class ReplicatedOrderer(Orderer):
    """An orderer whose positions are the same at every node that may order a key (a
    replicated log): a node that starts ordering a key goes on from the positions decided
    before, whoever proposed them. ``on_ordered(key, position, item)`` (set by the service)
    hears every item ordered at this node, in order, whoever proposed it; ``history(key)`` is
    the last items ordered for ``key`` here, ``(position, item)``, oldest first (bounded)."""

    __slots__ = ("on_ordered",)

    def __init__(self) -> None:
        self.on_ordered: OrderedFn | None = None

    @abc.abstractmethod
    def history(self, key: str) -> list[tuple[int, Any]]:
        """The last items ordered for ``key`` at this node, oldest first."""

    def takes(self, key: str) -> bool:
        """Whether this node orders ``key``'s items although it may not be the key's root
        (it replicates the key's log: the seed-001 publisher may send to any replica of the
        topic's owner). Not by default."""
        return False


class ImmediateOrderer(Orderer):
    """The default: orders nothing and accepts every item at once, at the next position of its
    key (a counter per key, from 1). It keeps one counter per key it has seen: the service
    bounds its keys. A service gets a fresh one each (the counters are its own)."""

    __slots__ = ("_positions",)

    def __init__(self) -> None:
        self._positions: dict[str, int] = {}

    def propose(self, key: str, item: Any, on_decided: DecisionFn) -> None:
        _check_proposal(key, on_decided)
        position = self._positions[key] = self._positions.get(key, 0) + 1
        on_decided(Accepted(position))

    def position(self, key: str) -> int:
        """The last position decided for ``key`` (0: none yet)."""
        return self._positions.get(key, 0)


@dataclasses.dataclass(slots=True, eq=False)
class Proposal:
    """One proposal held by a ``DeferredOrderer``: ``number`` counts proposals from 1."""

    number: int
    key: str
    item: Any
    on_decided: DecisionFn = dataclasses.field(repr=False)
    state: ProposalState = ProposalState.PENDING
    decision: Decision | None = None


class DeferredOrderer(Orderer):
    """For tests: holds every proposal until the test decides it (``accept``, ``redirect``,
    ``refuse``), so each outcome, in any order and at any time, can be driven by hand.

    ``accept`` takes the key's next position unless given one; a position is decided once per
    key. Deciding a proposal twice, or one of another orderer, raises ``StateError``.
    """

    __slots__ = ("_decided", "_numbers", "_pending", "proposals")

    def __init__(self) -> None:
        self.proposals: list[Proposal] = []  # every proposal, in the order made
        self._pending: dict[int, Proposal] = {}  # number -> the undecided
        self._decided: dict[str, set[int]] = {}  # key -> positions decided
        self._numbers = 0

    def propose(self, key: str, item: Any, on_decided: DecisionFn) -> None:
        _check_proposal(key, on_decided)
        self._numbers += 1
        proposal = Proposal(self._numbers, key, item, on_decided)
        self.proposals.append(proposal)
        self._pending[proposal.number] = proposal

    def pending(self, key: str | None = None) -> list[Proposal]:
        """The undecided proposals (of ``key``; None: of every key), oldest first."""
        return [p for p in self._pending.values() if key is None or p.key == key]

    def accept(self, proposal: Proposal, position: int | None = None) -> Accepted:
        """Decide ``proposal`` at ``position`` (None: its key's highest decided + 1)."""
        self._check_pending(proposal, "accept")
        decided = self._decided.get(proposal.key, set())
        if position is None:
            position = max(decided, default=0) + 1
        if position in decided:
            raise ConfigError(f"position {position} of key {proposal.key!r} is decided already")
        decision = Accepted(position)  # validates position
        self._decided.setdefault(proposal.key, set()).add(position)
        self._decide(proposal, decision)
        return decision

    def redirect(self, proposal: Proposal, leader: NodeId) -> Redirected:
        """Answer ``proposal``: ``leader`` orders its key."""
        decision = Redirected(leader)
        self._check_pending(proposal, "redirect")
        self._decide(proposal, decision)
        return decision

    def refuse(self, proposal: Proposal, reason: str) -> Refused:
        """Answer ``proposal``: refused, because ``reason``."""
        decision = Refused(reason)
        self._check_pending(proposal, "refuse")
        self._decide(proposal, decision)
        return decision

    def accept_all(self, key: str | None = None) -> list[Accepted]:
        """Accept every pending proposal (of ``key``), oldest first, at the next positions."""
        return [self.accept(proposal) for proposal in self.pending(key)]

    def _check_pending(self, proposal: Proposal, move: str) -> None:
        if self._pending.get(proposal.number) is not proposal:
            if proposal.state is ProposalState.PENDING:
                raise StateError(f"cannot {move} proposal {proposal.number}: not this orderer's")
            raise StateError(f"cannot {move} proposal {proposal.number} of key "
                             f"{proposal.key!r}: it is {proposal.state.value} already")

    def _decide(self, proposal: Proposal, decision: Decision) -> None:
        del self._pending[proposal.number]
        proposal.state = decision.state
        proposal.decision = decision
        proposal.on_decided(decision)
