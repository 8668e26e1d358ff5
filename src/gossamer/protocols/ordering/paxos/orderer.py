"""``PaxosOrderer``: the ``Orderer`` slot (``docs/orderer.md``) filled by a Multi-Paxos replica.

At the leader, ``propose(key, item, on_decided)`` puts ``item`` in the replicated log and
answers ``Accepted(position)`` once it is decided; elsewhere it answers ``Redirected(leader)``
(or ``Refused`` while no leader is known). Positions count each key's items in log order, so
they are the same at every replica; ``on_ordered(key, position, item)`` hears every ordered
item at every replica (a backup applies them so). The counters are part of the replicated
state: an application that snapshots includes ``snapshot()`` and gives it back to
``restore()``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ....core.errors import ConfigError
from ..orderer import Accepted, DecisionFn, Orderer, Redirected, Refused
from .config import Committed, DecidedOp, Outcome, Role
from .replica import PaxosReplica

__all__ = ["PaxosOrderer"]

OrderedFn = Callable[[str, int, Any], None]


class PaxosOrderer(Orderer):
    """Orders items per key through ``replica``'s log. It takes over ``replica.on_decided``:
    operations that are not its own go on to the callback that was there before.
    ``encode`` / ``decode`` turn an item into the JSON value the log carries and back.
    ``anywhere``: every member takes proposals (forwarded to the leader by the replica, so a
    proposal made while the group elects a leader waits for it) instead of redirecting them;
    a proposal whose outcome is not known is answered ``Redirected`` to this node (ask again
    here: the layer above applies a retried item once)."""

    __slots__ = ("_answers", "_anywhere", "_decode", "_encode", "_passed_on", "_positions",
                 "admits", "on_ordered", "replica")

    def __init__(self, replica: PaxosReplica, *, on_ordered: OrderedFn | None = None,
                 encode: Callable[[Any], Any] = lambda item: item,
                 decode: Callable[[Any], Any] = lambda value: value,
                 anywhere: bool = False,
                 admits: Callable[[str], bool] | None = None) -> None:
        """``admits(key)``: whether an item of ``key`` decided now is ordered (applied in log
        order at every replica, so the same everywhere); one that is not gets no position and
        its proposer is answered as if its outcome were unknown (it asks again)."""
        self.replica = replica
        self.admits = admits
        self._anywhere = anywhere
        self.on_ordered = on_ordered
        self._encode = encode
        self._decode = decode
        self._positions: dict[str, int] = {}  # key -> items ordered so far
        self._answers: dict[str, int] = {}  # own proposal id -> its position, until answered
        self._passed_on = replica.on_decided
        replica.on_decided = self._decided

    def propose(self, key: str, item: Any, on_decided: DecisionFn) -> None:
        if not isinstance(key, str) or not key:
            raise ConfigError(f"a proposal's key is a non-empty str, got {key!r}")
        if not callable(on_decided):
            raise ConfigError(f"on_decided must be callable, got {on_decided!r}")
        replica = self.replica
        if replica.role is not Role.LEADER and not (
                self._anywhere and replica.role is not Role.OUTSIDE):
            self._elsewhere(on_decided)
            return

        def done(outcome: Outcome) -> None:
            position = self._answers.pop(proposal_id, None)
            if isinstance(outcome, Committed) and position is not None:
                on_decided(Accepted(position))
            elif self._anywhere and (isinstance(outcome, Committed) or not outcome.definite):
                on_decided(Redirected(replica.env.node))
            elif isinstance(outcome, Committed) or not outcome.definite:
                # decided while this replica took a snapshot (its position is not known
                # here), or perhaps decided: the proposer asks the leader again, and the
                # layer above applies a retried item once
                self._elsewhere(on_decided)
            else:
                on_decided(Refused(outcome.reason[:200]))

        proposal_id = replica.propose({"key": key, "item": self._encode(item)}, done)

    def _elsewhere(self, on_decided: DecisionFn) -> None:
        leader = self.replica.current_leader
        if leader is not None and leader != self.replica.env.node:
            on_decided(Redirected(leader))
        else:
            on_decided(Refused("no leader of this group is known; try again later"))

    def _decided(self, op: DecidedOp) -> None:
        payload = op.payload
        if not (isinstance(payload, dict) and payload.keys() == {"key", "item"}
                and isinstance(payload["key"], str)):
            if self._passed_on is not None:
                self._passed_on(op)
            return
        key = payload["key"]
        if self.admits is not None and not self.admits(key):
            self.replica.env.trace("drop", layer=self.replica.LAYER, key=key, seq=op.slot,
                                   reason="key_not_ordered_here")
            return
        position = self._positions[key] = self._positions.get(key, 0) + 1
        if self.replica.awaiting(op.id):
            self._answers[op.id] = position  # answered by ``done`` right after this
        if self.on_ordered is not None:
            self.on_ordered(key, position, self._decode(payload["item"]))

    def position(self, key: str) -> int:
        """The last position ordered for ``key`` here (0: none yet)."""
        return self._positions.get(key, 0)

    def advance(self, key: str, position: int) -> None:
        """``key``'s items go on after ``position`` (the state of a key handed over)."""
        self._positions[key] = max(self._positions.get(key, 0), position)

    def snapshot(self) -> dict[str, int]:
        return dict(self._positions)

    def restore(self, state: dict[str, int]) -> None:
        self._positions = {str(k): int(v) for k, v in state.items()}
