"""Growing the seed's placement while it runs (seed 001, phase 3): a new active node takes part
of an owner's key range, and the state of the moved topics is handed over through both groups'
logs (``docs/pubsub.md``, "Growing the placement").

A new group ``N`` (its active node and spares, ``TopicOwners(grown=[N])``) joins a running
placement whose processes were not told of it. When ``N``'s active node is on the Chord ring it
is the root of the keys in ``(P, N]`` (``P`` the owner before it): those belonged to its
successor ``O``'s group. The hand-over:

1. ``N``'s active process sends a ``RangeClaim`` (the range, ``N``, its members) to every
   process of ``O``'s group, once a heartbeat, until its own group has taken the range;
2. a member of ``O``'s group proposes ``{"hand_over": {...}}`` in ``O``'s log if the claim
   fits what ``O`` holds (its range's lower end is the claim's, the claim's end lies inside);
   applied in log order at every member of ``O``, the moved topics' state (each topic's
   position, its last decided publishes and their ids) is taken out of ``O``'s and kept apart,
   and from then on ``O``'s group orders none of those keys (a publish for one that is decided
   in ``O``'s log after the hand-over is not applied: its proposer asks again and is sent to
   ``N``'s group);
3. a member of ``O`` that gets a claim for a range handed over already answers the claimer
   with a ``RangeState`` (that state, the same at every member of ``O``);
4. the claimer proposes ``{"take": {...}}`` with that state in ``N``'s log; applied in log
   order at every member of ``N``, the moved topics go on from ``O``'s positions.

Until its ``take`` is decided ``N``'s group orders nothing and redirects publishers to ``O``'s
group, and ``N``'s Scribe roots no tree (a JOIN waits), so every topic has one order: ``O``'s
up to the hand-over, ``N``'s after it, and an acknowledged publish is in the state handed over.
A ``take`` carries at most the group's ``max_command_bytes``: the oldest decided publishes of
the moved topics are left out if the state is bigger (their positions still move).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from ....core.errors import ConfigError
from ....core.ids import NodeId, check_node_id
from ....core.messages import Message, message
from ...membership.chord.ring import chord_id
from ...ordering.paxos.groups import GROUP_CODEC

__all__ = ["MAX_MEMBERS", "MAX_MOVES", "RangeClaim", "RangeState", "ident_hex", "ident_of",
           "in_range", "owner_range", "taker_name"]

MAX_MOVES = 64  # ranges one group hands over in its life (each kept, with its state)
MAX_MEMBERS = 16  # processes a claim may name


def in_range(ident: int, lo: int, hi: int) -> bool:
    """Whether ``ident`` lies in the ring interval ``(lo, hi]`` (the whole ring if lo == hi)."""
    if lo < hi:
        return lo < ident <= hi
    return ident > lo or ident <= hi


def owner_range(owners: list[NodeId], owner: NodeId, bits: int) -> tuple[int, int]:
    """``(lo, hi)``: the key range ``owner`` holds among ``owners`` (sorted by identifier)."""
    i = owners.index(owner)
    return chord_id(owners[i - 1], bits), chord_id(owner, bits)


MAX_IDENT_HEX = 64  # hex digits of a ring identifier (a 256-bit ring: SHA-256)


def ident_hex(ident: int) -> str:
    """A ring identifier on the wire and in a log: hex (JSON integers stop at 64 bits)."""
    return format(ident, "x")


def ident_of(text: object) -> int:
    """The identifier ``ident_hex`` wrote (``ValueError`` if ``text`` is not one)."""
    if not isinstance(text, str) or not 1 <= len(text) <= MAX_IDENT_HEX:
        raise ValueError(f"a ring identifier is 1-{MAX_IDENT_HEX} hex digits, got {text!r}")
    return int(text, 16)


def taker_name(ring: Sequence[NodeId], key: str, bits: int, *, prefix: str = "g") -> NodeId:
    """A node name (``prefix`` and a number) whose identifier lies at or after ``key``'s and
    before its owner's among ``ring``: a node of that name joining the ring takes ``key`` from
    its owner's range (for experiments and tests of the hand-over)."""
    idents = sorted(chord_id(n, bits) for n in ring)
    target = chord_id(key, bits)
    after = next((i for i in idents if i >= target), idents[0])
    before = idents[idents.index(after) - 1]
    for number in range(1_000_000):
        name = f"{prefix}{number}"
        ident = chord_id(name, bits)
        if ident != after and in_range(target, before, ident) and in_range(ident, before, after):
            return name
    raise ConfigError(f"no name takes {key!r} from its owner (a ring of {len(ring)})")


def _check_range(lo: str, hi: str) -> None:
    if ident_of(lo) == ident_of(hi):
        raise ValueError(f"a range is two different identifiers, got ({lo}, {hi}]")


@message("owners.claim", codec=GROUP_CODEC)
class RangeClaim(Message):
    """New active node's process -> each process of its successor's group: group ``to`` (with
    ``members``) holds the keys in ``(lo, hi]`` from now on (``ident_hex``); hand their state
    over."""

    lo: str
    hi: str
    to: str
    members: tuple[str, ...]

    def __post_init__(self) -> None:
        _check_range(self.lo, self.hi)
        check_node_id(self.to)
        if not 1 <= len(self.members) <= MAX_MEMBERS or self.to not in self.members:
            raise ValueError(f"a claim names 1-{MAX_MEMBERS} members, {self.to} among them")
        for member in self.members:
            check_node_id(member)


@message("owners.state", codec=GROUP_CODEC)
class RangeState(Message):
    """A process of group ``owner`` -> the claimer: the state of the keys in ``(lo, hi]`` as
    ``owner``'s log handed them over (``positions``: key -> last position; ``history``: key ->
    ``[[position, [origin, seq, payload]], ...]``, oldest first)."""

    lo: str
    hi: str
    owner: str
    state: Any

    def __post_init__(self) -> None:
        _check_range(self.lo, self.hi)
        check_node_id(self.owner)
        if not (isinstance(self.state, dict) and self.state.keys() == {"positions", "history"}
                and isinstance(self.state["positions"], dict)
                and isinstance(self.state["history"], dict)):
            raise ValueError("a range's state is {positions: {...}, history: {...}}")


def state_fits(state: dict[str, Any], limit: int) -> dict[str, Any]:
    """``state`` with its oldest history entries left out until it encodes to at most
    ``limit`` bytes of JSON (positions are always kept)."""
    history = {key: list(items) for key, items in state["history"].items()}
    out = {"positions": state["positions"], "history": history}
    while len(orjson.dumps(out)) > limit and any(history.values()):
        oldest = min((items[0][0], key) for key, items in history.items() if items)[1]
        history[oldest].pop(0)
        if not history[oldest]:
            del history[oldest]
    return out


def node_list(members: Any) -> tuple[NodeId, ...]:
    return tuple(check_node_id(m) for m in members)
