"""SRM's timer parameters and their adaptive adjustment (Floyd et al. 1997, section VII).

A request timer is drawn from [C1·d, (C1+C2)·d], a repair timer from [D1·d, (D1+D2)·d], with
d the one-way distance to the source (requests) or to the requester (repairs). Adaptive mode
moves C1, C2, D1, D2 after each loss recovery from the moving averages of duplicate requests
and repairs and of the request and repair delays (in units of d), within the paper's bounds.
"""

from __future__ import annotations

import dataclasses
import math

from ....core.errors import ConfigError

__all__ = ["AdaptiveTimers", "SrmTimerConfig"]

AVE_DUPS = 1.0  # the target of duplicates per loss
AVE_DELAY = 1.0  # the target delay, in units of the distance
EPSILON = 0.1
WEIGHT = 0.25  # of a new sample in the moving averages


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class SrmTimerConfig:
    """Initial C1, C2, D1, D2 (the paper's defaults) and whether they adapt."""

    c1: float = 2.0
    c2: float = 2.0
    d1: float = 1.0
    d2: float = 1.0
    adaptive: bool = True

    def __post_init__(self) -> None:
        for name in ("c1", "c2", "d1", "d2"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and value >= 0):
                raise ConfigError(f"{name} must be a finite number >= 0, got {value!r}")


class AdaptiveTimers:
    """The current C1, C2, D1, D2 of one member and the averages that move them."""

    def __init__(self, config: SrmTimerConfig) -> None:
        self.config = config
        self.c1, self.c2 = config.c1, config.c2
        self.d1, self.d2 = config.d1, config.d2
        self.ave_dup_req = 0.0
        self.ave_req_delay = 0.0
        self.ave_dup_rep = 0.0
        self.ave_rep_delay = 0.0

    @staticmethod
    def _average(old: float, sample: float) -> float:
        return (1 - WEIGHT) * old + WEIGHT * sample

    def request_done(self, duplicates: int, delay_in_d: float) -> None:
        """One loss recovered: ``duplicates`` requests beyond the first were heard for it,
        and the first request came ``delay_in_d`` distances after the loss was detected."""
        self.ave_dup_req = self._average(self.ave_dup_req, duplicates)
        self.ave_req_delay = self._average(self.ave_req_delay, delay_in_d)

    def repair_done(self, duplicates: int, delay_in_d: float) -> None:
        self.ave_dup_rep = self._average(self.ave_dup_rep, duplicates)
        self.ave_rep_delay = self._average(self.ave_rep_delay, delay_in_d)

    def before_request(self, group_size: int) -> None:
        """Adjust C1, C2 before a new request timer is set."""
        if not self.config.adaptive:
            return
        if self.ave_dup_req >= AVE_DUPS:
            self.c1 += 0.1
            self.c2 += 0.5
        elif self.ave_dup_req < AVE_DUPS - EPSILON:
            if self.ave_req_delay > AVE_DELAY:
                self.c2 -= 0.1
            if self.ave_dup_req < 0.25:
                self.c1 -= 0.05
        else:
            self.c1 += 0.05
        self._bound(group_size)

    def sent_request(self, group_size: int) -> None:
        """This member's request timer fired: it is among the first to notice, so it gets a
        little earlier next time."""
        if self.config.adaptive:
            self.c1 -= 0.05
            self._bound(group_size)

    def before_repair(self, group_size: int) -> None:
        if not self.config.adaptive:
            return
        if self.ave_dup_rep >= AVE_DUPS:
            self.d1 += 0.1
            self.d2 += 0.5
        elif self.ave_dup_rep < AVE_DUPS - EPSILON:
            if self.ave_rep_delay > AVE_DELAY:
                self.d2 -= 0.1
            if self.ave_dup_rep < 0.25:
                self.d1 -= 0.05
        else:
            self.d1 += 0.05
        self._bound(group_size)

    def sent_repair(self, group_size: int) -> None:
        if self.config.adaptive:
            self.d1 -= 0.05
            self._bound(group_size)

    def _bound(self, group_size: int) -> None:
        size = max(group_size, 2)
        self.c1 = min(max(self.c1, 0.5), 2.0)
        self.c2 = min(max(self.c2, 1.0), float(size))
        self.d1 = min(max(self.d1, 0.5), max(math.log10(size), 0.5))
        self.d2 = min(max(self.d2, 1.0), float(size))
