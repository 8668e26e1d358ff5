"""Warnings that repeat per message (a full send queue, frames dropped from a peer) logged once
per interval with counts, so an overload is visible without writing a line per message.

The first occurrence of a kind is logged at once; later ones within ``interval`` seconds are
counted and reported in one line when the next one after the interval comes, or at ``flush``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

__all__ = ["RateLimitedLog"]


class RateLimitedLog:
    """``warn(key, fmt, *args)``: one line per ``key`` per ``interval`` seconds, with how many
    were suppressed since the last line. Keys are bounded (``max_keys``, oldest forgotten)."""

    def __init__(self, logger: logging.Logger, *, interval: float = 5.0,
                 clock: Callable[[], float] = time.monotonic, max_keys: int = 1024) -> None:
        if interval <= 0 or max_keys < 1:
            raise ValueError("interval must be > 0 and max_keys >= 1")
        self.logger = logger
        self.interval = interval
        self.clock = clock
        self.max_keys = max_keys
        self._last: dict[str, float] = {}
        self._suppressed: dict[str, int] = {}

    def warn(self, key: str, fmt: str, *args: object) -> None:
        now = self.clock()
        last = self._last.get(key)
        if last is not None and now - last < self.interval:
            self._suppressed[key] = self._suppressed.get(key, 0) + 1
            return
        suppressed = self._suppressed.pop(key, 0)
        if last is None and len(self._last) >= self.max_keys:
            oldest = next(iter(self._last))
            del self._last[oldest]
            self._suppressed.pop(oldest, None)
        self._last.pop(key, None)
        self._last[key] = now
        if suppressed and last is not None:
            self.logger.warning(fmt + " (and %d more like it in the last %.0f s)", *args,
                                suppressed, now - last)
        else:
            self.logger.warning(fmt, *args)

    def flush(self) -> None:
        """Report what was suppressed and not reported yet (at shutdown)."""
        for key, count in self._suppressed.items():
            self.logger.warning("%d more warnings of %s were suppressed", count, key)
        self._suppressed.clear()
