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
    backoff: float | None = None
    """The factor a repeated request's interval grows by: None is 2 with fixed timers (the
    paper) and 3 with adaptive ones (its reference simulator: a repair window that widened
    to D1 = D2 = log10(G) must fit before the request is repeated)."""

    def __post_init__(self) -> None:
        for name in ("c1", "c2", "d1", "d2"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and value >= 0):
                raise ConfigError(f"{name} must be a finite number >= 0, got {value!r}")
        if self.backoff is not None and not (math.isfinite(self.backoff)
                                             and self.backoff >= 1):
            raise ConfigError(f"backoff must be a finite number >= 1, got {self.backoff!r}")


class AdaptiveTimers:
    """The current C1, C2, D1, D2 of one member and the averages that move them.

    Besides the paper's rules it keeps the two refinements of its reference simulator: a
    member's first repair starts from D1 = D2 = log10(G) (the group size is only known once
    sessions are heard), and a member that was the closest to answer (its first request or
    repair went out, and the duplicate came from a member more than 1.5 times as far away)
    narrows its window (C2 or D2 down by 0.1) instead of widening it: the duplicate was the
    far member's to suppress, not this one's."""

    def __init__(self, config: SrmTimerConfig) -> None:
        self.config = config
        self.c1, self.c2 = config.c1, config.c2
        self.d1, self.d2 = config.d1, config.d2
        self.ave_dup_req = 0.0
        self.ave_req_delay = 0.0
        self.ave_dup_rep = 0.0
        self.ave_rep_delay = 0.0
        self.requests_done = 0
        self.repairs_done = 0
        self.closest_requester = False
        self.closest_repairer = False
        self._repair_armed = False
        if config.backoff is not None:
            self.backoff = config.backoff
        else:
            self.backoff = 3.0 if config.adaptive else 2.0

    @staticmethod
    def _average(old: float, sample: float) -> float:
        return (1 - WEIGHT) * old + WEIGHT * sample

    def request_done(self, duplicates: int, delay_in_d: float) -> None:
        """One loss recovered: ``duplicates`` requests beyond the first were heard for it,
        and the first request came ``delay_in_d`` distances after the loss was detected."""
        if self.requests_done == 0:
            self.ave_dup_req, self.ave_req_delay = float(duplicates), delay_in_d
        else:
            self.ave_dup_req = self._average(self.ave_dup_req, duplicates)
            self.ave_req_delay = self._average(self.ave_req_delay, delay_in_d)
        self.requests_done += 1

    def repair_done(self, duplicates: int, delay_in_d: float) -> None:
        """One repair round closed: ``duplicates`` repairs beyond the first were heard, and
        the first came ``delay_in_d`` distances (to the requester) after the request."""
        if self.repairs_done == 0:
            self.ave_dup_rep, self.ave_rep_delay = float(duplicates), delay_in_d
        else:
            self.ave_dup_rep = self._average(self.ave_dup_rep, duplicates)
            self.ave_rep_delay = self._average(self.ave_rep_delay, delay_in_d)
        self.repairs_done += 1

    def before_request(self, group_size: int) -> None:
        """Adjust C1, C2 before a new request timer is set."""
        if not self.config.adaptive:
            return
        if self.requests_done:
            self.c1, self.c2, self.closest_requester = self._adjust(
                self.c1, self.c2, self.ave_dup_req, self.ave_req_delay,
                self.closest_requester)
        self._bound(group_size)

    def sent_request(self, group_size: int) -> None:
        """This member's first request for a loss went out: it is among the first to notice,
        so it gets a little earlier next time."""
        if self.config.adaptive:
            self.c1 -= 0.05
            self._bound(group_size)

    def heard_request_after_own(self, *, closest: bool) -> None:
        """Another first-round request came after this member's own; ``closest``: from a
        member more than 1.5 times as far from this one as this one is from the source."""
        self.closest_requester = closest

    def before_repair(self, group_size: int) -> None:
        if not self.config.adaptive:
            return
        if self.repairs_done:
            self.d1, self.d2, self.closest_repairer = self._adjust(
                self.d1, self.d2, self.ave_dup_rep, self.ave_rep_delay, self.closest_repairer)
        elif not self._repair_armed:
            self.d1 = self.d2 = math.log10(max(group_size, 2))
        self._repair_armed = True
        self._bound(group_size)

    def sent_repair(self, group_size: int) -> None:
        if self.config.adaptive:
            self.d1 -= 0.05
            self._bound(group_size)

    def heard_repair_after_own(self, *, closest: bool) -> None:
        """Another repair came after this member's own; ``closest``: from a member more than
        1.5 times as far from the requester's side as this one is from the requester."""
        self.closest_repairer = closest

    @staticmethod
    def _adjust(low: float, width: float, duplicates: float, delay: float,
                closest: bool) -> tuple[float, float, bool]:
        """The paper's step for one pair (C1, C2) or (D1, D2): wider and later on
        duplicates, narrower when there are none and the answers come late."""
        if closest:
            return low, width - 0.1, False
        if duplicates >= AVE_DUPS:
            return low + 0.1, width + 0.5, False
        if duplicates < AVE_DUPS - EPSILON:
            if delay > AVE_DELAY:
                width -= 0.1
            if duplicates < 0.25:
                low -= 0.05
            return low, width, False
        return low + 0.05, width, False

    def _bound(self, group_size: int) -> None:
        size = max(group_size, 2)
        self.c1 = min(max(self.c1, 0.5), 2.0)
        self.c2 = min(max(self.c2, 1.0), float(size))
        self.d1 = min(max(self.d1, 0.5), max(math.log10(size), 0.5))
        self.d2 = min(max(self.d2, 1.0), float(size))
