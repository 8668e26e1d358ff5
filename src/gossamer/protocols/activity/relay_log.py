"""The relay log of a seed-003 server: per origin server, the highest activity number received
(its high-water mark, exchanged in the server handshake) and a bounded buffer of the latest
activities as sent, so a gap that a failure cut into the tree is resent from a copy."""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Iterator, Mapping

__all__ = ["RelayLog"]


class RelayLog:
    """High-water marks of at most ``max_marks`` origin servers, and the last ``max_buffer``
    frames of each of the latest ``max_origins`` of them (least recently heard forgotten
    first)."""

    def __init__(self, *, max_buffer: int, max_origins: int, max_marks: int) -> None:
        self.max_buffer = max_buffer
        self.max_origins = max_origins
        self.max_marks = max_marks
        self.high_water: OrderedDict[str, int] = OrderedDict()
        self.frames: OrderedDict[str, deque[tuple[int, bytes]]] = OrderedDict()

    def last(self, via: str) -> int:
        """The highest number received from ``via`` (0: none)."""
        return self.high_water.get(via, 0)

    def knows(self, via: str) -> bool:
        return via in self.high_water

    def mark(self, via: str, number: int) -> None:
        """``number`` is the highest received from ``via`` (without a copy of it)."""
        marks = self.high_water
        marks[via] = number
        marks.move_to_end(via)
        while len(marks) > self.max_marks:
            marks.popitem(last=False)

    def keep(self, via: str, number: int, frame: bytes) -> None:
        """Activity ``number`` of ``via`` was received (or made here) as ``frame``."""
        self.mark(via, number)
        log = self.frames.get(via)
        if log is None:
            log = self.frames[via] = deque(maxlen=self.max_buffer)
            while len(self.frames) > self.max_origins:
                self.frames.popitem(last=False)
        else:
            self.frames.move_to_end(via)
        log.append((number, frame))

    def gaps(self, theirs: Mapping[str, int]) -> Iterator[tuple[str, int]]:
        """(origin server, count) of what a side that received ``theirs`` misses and no copy
        here holds any more."""
        for via, log in self.frames.items():
            after = theirs.get(via, 0)
            if log and log[0][0] > after + 1 and via in theirs:
                yield via, log[0][0] - after - 1

    def newer_than(self, theirs: Mapping[str, int]) -> Iterator[bytes]:
        """The frames a side that received ``theirs`` has not, oldest first per origin."""
        for via, log in self.frames.items():
            after = theirs.get(via, 0)
            for number, frame in log:
                if number > after:
                    yield frame
