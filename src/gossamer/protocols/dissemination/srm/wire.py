"""The messages of SRM (Floyd et al. 1997) and of the group state that rides with it.

Data, requests and repairs name one item by (source, seq); session messages carry each
source's highest sequence number and the timestamps every member turns into distances.
"""

from __future__ import annotations

from typing import Any, ClassVar

from ....core.env import MAX_DATAGRAM
from ....core.messages import Codec, Message, TraceIds, message

__all__ = ["CODEC", "Echo", "SrmData", "SrmRepair", "SrmRequest", "SrmSession"]

CODEC = Codec(max_frame=MAX_DATAGRAM)
"""The SRM codec; a frame over one datagram is refused on decode too."""


def _check_item(source: str, seq: int) -> None:
    if not source:
        raise ValueError("source must not be empty")
    if seq < 1:
        raise ValueError(f"seq must be >= 1, got {seq}")


@message("srm.data", codec=CODEC)
class SrmData(Message):
    """Item ``seq`` of ``source``: an application payload (any JSON value)."""

    SPEAKER: ClassVar[str | None] = "source"

    source: str
    seq: int
    payload: Any

    def __post_init__(self) -> None:
        _check_item(self.source, self.seq)

    def trace_ids(self) -> TraceIds:
        return (f"{self.source}:{self.seq}", self.source, None, self.seq)


@message("srm.request", codec=CODEC)
class SrmRequest(Message):
    """``requester`` misses item ``seq`` of ``source``; ``distance``: the requester's
    one-way distance to the source (its timer's d), so that whoever hears a duplicate knows
    which of the two was nearer."""

    SPEAKER: ClassVar[str | None] = "requester"

    requester: str
    source: str
    seq: int
    distance: float | None = None

    def __post_init__(self) -> None:
        _check_item(self.source, self.seq)

    def trace_ids(self) -> TraceIds:
        return (f"{self.source}:{self.seq}", self.source, None, self.seq)


@message("srm.repair", codec=CODEC)
class SrmRepair(Message):
    """A copy of item ``seq`` of ``source`` sent by ``repairer`` after a request;
    ``distance``: the repairer's one-way distance to the requester it answered."""

    SPEAKER: ClassVar[str | None] = "repairer"

    repairer: str
    source: str
    seq: int
    payload: Any
    distance: float | None = None

    def __post_init__(self) -> None:
        _check_item(self.source, self.seq)

    def trace_ids(self) -> TraceIds:
        return (f"{self.source}:{self.seq}", self.source, None, self.seq)


Echo = tuple[str, float, float]
"""(member, the ``sent_at`` of its last session message I heard, seconds I held it since)."""


@message("srm.session", codec=CODEC)
class SrmSession(Message):
    """The one periodic message of a member: its clock (``sent_at``), the highest sequence
    number it knows of each source, echoes of other members' timestamps (for distances), its
    group status: ``joined`` (a member) or not (leaving), and ``resolved``: for some sources,
    the sequence number up to which this member needs nothing more of that source (the layer
    above says what that means: for the atomic layer, nothing of it undecided here), so that
    what the others keep for it can go."""

    sent_at: float
    highest: tuple[tuple[str, int], ...]
    echoes: tuple[Echo, ...]
    joined: bool = True
    resolved: tuple[tuple[str, int], ...] = ()

    def __post_init__(self) -> None:
        for source, seq in self.highest:
            _check_item(source, seq + 1)  # 0: a source that has sent nothing yet
        for source, seq in self.resolved:
            _check_item(source, seq + 1)
        for _, _, held in self.echoes:
            if held < 0:
                raise ValueError(f"an echo's held time must be >= 0, got {held}")
