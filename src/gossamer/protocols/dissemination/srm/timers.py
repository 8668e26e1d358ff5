"""SRM's timer parameters and their adaptive adjustment (Floyd et al. 1997, section VII).

A request timer is drawn from [C1·d, (C1+C2)·d], a repair timer from [D1·d, (D1+D2)·d], with
d the one-way distance to the source (requests) or to the requester (repairs). Adaptive mode
moves C1, C2, D1, D2 after each closed round from the moving averages of duplicate requests
and repairs and of the request and repair delays (in units of d), within the paper's bounds,
counting each duplicate against the farther of the members that sent it.
"""

from __future__ import annotations

import dataclasses
import math

from ....core.errors import ConfigError

__all__ = ["AdaptiveTimers", "Role", "SrmTimerConfig"]

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
    ave_dups: float = 1.0
    """The paper's AveDups: the duplicates (requests or repairs) per loss the adaptive timers
    aim at, as each member counts them."""
    ave_delay: float = 1.0
    """The paper's AveDelay: the delay they aim at, in distances."""
    backoff: float | None = None
    """The factor a repeated request's interval grows by: None is 2 with fixed timers (the
    paper) and 3 with adaptive ones (its reference simulator: a repair window that widened
    to D1 = D2 = log10(G) must fit before the request is repeated)."""

    def __post_init__(self) -> None:
        for name in ("c1", "c2", "d1", "d2"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and value >= 0):
                raise ConfigError(f"{name} must be a finite number >= 0, got {value!r}")
        for name in ("ave_dups", "ave_delay"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                raise ConfigError(f"{name} must be a finite number > 0, got {value!r}")
        if self.backoff is not None and not (math.isfinite(self.backoff)
                                             and self.backoff >= 1):
            raise ConfigError(f"backoff must be a finite number >= 1, got {self.backoff!r}")


@dataclasses.dataclass(frozen=True, slots=True)
class Role:
    """What one member did in one closed round (a loss's requests, or an item's repairs):
    whether it ``sent`` one itself, whether it heard ``others`` of the same round, and
    whether all of those came from members farther than it from whom they answer (the
    source for requests, the requester for repairs: each message carries its sender's
    distance)."""

    sent: bool = False
    others: bool = False
    nearest: bool = True

    @property
    def suppressed_by_nearer(self) -> bool:
        """Its own timer was cancelled by a nearer member's: it did what it should, and the
        round says nothing about its timers."""
        return self.others and not self.nearest and not self.sent

    @property
    def nearest_of_several(self) -> bool:
        """Others answered too and all were farther: their duplicates were theirs to
        suppress, none of them this member's."""
        return self.others and self.nearest


class AdaptiveTimers:
    """The current C1, C2, D1, D2 of one member and the averages that move them.

    The paper's rules move them before a new timer is set; here they move once per new
    sample (a closed round), not again before every timer: a holder sets a repair timer on
    every request it hears, far more often than it closes rounds, and one average applied
    at each would widen D2 by 0.5 per request heard. What a round counts is ``_sample``'s:
    a duplicate is the farther sender's to suppress (each request and repair carries its
    sender's distance). Two refinements of the paper's reference simulator stay: a member's
    first repair starts from D1 = D2 = log10(G) (the group size is only known once sessions
    are heard), and a member that sent a first request or a repair moves a little earlier
    (C1 or D1 down by 0.05)."""

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
        self._repair_armed = False
        self._new_request_sample = False
        self._new_repair_sample = False
        if config.backoff is not None:
            self.backoff = config.backoff
        else:
            self.backoff = 3.0 if config.adaptive else 2.0

    @staticmethod
    def _average(old: float, sample: float) -> float:
        return (1 - WEIGHT) * old + WEIGHT * sample

    def request_done(self, duplicates: int, delay_in_d: float, role: Role = Role()) -> None:
        """One loss recovered: ``duplicates`` requests beyond the first were heard for it,
        and the first request came ``delay_in_d`` distances after the loss was detected;
        ``role``: this member's part in it (see ``_sample``)."""
        sample = self._sample(duplicates, role)
        if sample is None:
            return
        duplicates = sample
        if self.requests_done == 0:
            self.ave_dup_req, self.ave_req_delay = float(duplicates), delay_in_d
        else:
            self.ave_dup_req = self._average(self.ave_dup_req, duplicates)
            self.ave_req_delay = self._average(self.ave_req_delay, delay_in_d)
        self.requests_done += 1
        self._new_request_sample = True

    def repair_done(self, duplicates: int, delay_in_d: float, role: Role = Role()) -> None:
        """One repair round closed: ``duplicates`` repairs beyond the first were heard, and
        the first came ``delay_in_d`` distances (to the requester) after the request;
        ``role``: this member's part in it (see ``_sample``)."""
        sample = self._sample(duplicates, role)
        if sample is None:
            return
        duplicates = sample
        if self.repairs_done == 0:
            self.ave_dup_rep, self.ave_rep_delay = float(duplicates), delay_in_d
        else:
            self.ave_dup_rep = self._average(self.ave_dup_rep, duplicates)
            self.ave_rep_delay = self._average(self.ave_rep_delay, delay_in_d)
        self.repairs_done += 1
        self._new_repair_sample = True

    @staticmethod
    def _sample(duplicates: int, role: Role) -> int | None:
        """The duplicates a closed round counts for this member, or None when it counts
        nothing. The paper counts every duplicate heard against every member that heard it;
        here a duplicate is the farther sender's failure to be suppressed: a member
        suppressed by a nearer one learns nothing (its timer worked), and the nearest of
        several counts none (the others' were theirs to suppress)."""
        if role.suppressed_by_nearer:
            return None
        if role.nearest_of_several:
            return 0
        return duplicates

    def before_request(self, group_size: int) -> None:
        """Adjust C1, C2 before a new request timer is set."""
        if not self.config.adaptive:
            return
        if self._new_request_sample:
            self._new_request_sample = False
            self.c1, self.c2 = self._adjust(self.c1, self.c2, self.ave_dup_req,
                                            self.ave_req_delay)
        self._bound(group_size)

    def sent_request(self, group_size: int) -> None:
        """This member's first request for a loss went out: it is among the first to notice,
        so it gets a little earlier next time."""
        if self.config.adaptive:
            self.c1 -= 0.05
            self._bound(group_size)

    def before_repair(self, group_size: int) -> None:
        if not self.config.adaptive:
            return
        if self._new_repair_sample:
            self._new_repair_sample = False
            self.d1, self.d2 = self._adjust(self.d1, self.d2, self.ave_dup_rep,
                                            self.ave_rep_delay)
        elif not self._repair_armed:
            self.d1 = self.d2 = math.log10(max(group_size, 2))
        self._repair_armed = True
        self._bound(group_size)

    def sent_repair(self, group_size: int) -> None:
        if self.config.adaptive:
            self.d1 -= 0.05
            self._bound(group_size)

    def _adjust(self, low: float, width: float, duplicates: float, delay: float
                ) -> tuple[float, float]:
        """The paper's step for one pair (C1, C2) or (D1, D2): wider and later on
        duplicates, narrower when there are none and the answers come late."""
        target = self.config.ave_dups
        if duplicates >= target:
            return low + 0.1, width + 0.5
        if duplicates < target - EPSILON * target:
            if delay > self.config.ave_delay:
                width -= 0.1
            if duplicates < target / 4:
                low -= 0.05
            return low, width
        return low + 0.05, width

    def _bound(self, group_size: int) -> None:
        size = max(group_size, 2)
        self.c1 = min(max(self.c1, 0.5), 2.0)
        self.c2 = min(max(self.c2, 1.0), float(size))
        self.d1 = min(max(self.d1, 0.5), max(math.log10(size), 0.5))
        self.d2 = min(max(self.d2, 1.0), float(size))
