"""The VOPR's vocabulary: a knob (one workload option and its documented range), how a seed
draws a schedule within the knobs (``_Draw``), and a service's plan (``Plan``). The plans
themselves are in ``vopr`` and its per-service modules, which all build on this one.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Mapping

from .experiment import Scalar

__all__ = ["Knob", "Plan", "latency_within"]


# -- what may be drawn -------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Knob:
    """One workload option the VOPR sets: the documented range of its values (``low`` ..
    ``high`` inclusive, or one of ``choices``) and why the guarantee must hold across it."""

    option: str
    low: float | None = None
    high: float | None = None
    choices: tuple[Scalar, ...] = ()
    note: str = ""

    def __post_init__(self) -> None:
        if self.choices:
            if self.low is not None or self.high is not None:
                raise ValueError(f"knob {self.option}: a range or choices, not both")
        elif self.low is None or self.high is None or self.low > self.high:
            raise ValueError(f"knob {self.option}: needs low <= high, or choices")

    def holds(self, value: Scalar) -> bool:
        if self.choices:
            return any(value == c and type(value) is type(c) for c in self.choices)
        if isinstance(value, bool) or not isinstance(value, int | float):
            return False
        assert self.low is not None and self.high is not None
        return self.low <= value <= self.high

    def describe(self) -> str:
        if self.choices:
            return " | ".join(str(c) for c in self.choices)
        return f"{_number(self.low)} .. {_number(self.high)}"


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


class _Draw:
    """Draws one schedule's options from its seed's ``rng``, each within its knob."""

    def __init__(self, rng: random.Random, knobs: Mapping[str, Knob]) -> None:
        self.rng = rng
        self.knobs = knobs
        self.options: dict[str, Scalar] = {}

    def _knob(self, option: str) -> Knob:
        return self.knobs[option]

    def _bounds(self, option: str) -> tuple[float, float]:
        knob = self._knob(option)
        assert knob.low is not None and knob.high is not None
        return knob.low, knob.high

    def uniform(self, option: str, *, low: float | None = None,
                high: float | None = None) -> float:
        """A value in the knob's range (narrowed by ``low``/``high``), rounded to 3 places so
        the options read well in a table and in a replayed run."""
        floor, ceiling = self._bounds(option)
        low = floor if low is None else max(floor, low)
        high = ceiling if high is None else min(ceiling, high)
        value = min(high, max(low, round(self.rng.uniform(low, high), 3)))
        self.options[option] = value
        return value

    def integer(self, option: str, *, high: int | None = None) -> int:
        floor, ceiling = self._bounds(option)
        top = int(ceiling) if high is None else min(int(ceiling), high)
        value = self.rng.randint(int(floor), max(int(floor), top))
        self.options[option] = value
        return value

    def maybe(self, probability: float, option: str, off: float = 0.0) -> float:
        """With ``probability`` a value in range, else ``off`` (the fault is not drawn)."""
        if self.rng.random() < probability:
            return self.uniform(option)
        self.set(option, off)
        return off

    def choice(self, option: str) -> Scalar:
        value = self.rng.choice(self._knob(option).choices)
        self.options[option] = value
        return value

    def flag(self, probability: float, option: str) -> bool:
        value = self.rng.random() < probability
        self.options[option] = value
        return value

    def set(self, option: str, value: Scalar) -> None:
        """A derived or fixed value: still checked against its knob (a test draws many)."""
        self.options[option] = value

    def latency(self, *, slowest: float) -> str:
        """A latency distribution: uniform, or a log-normal / exponential tail, no slower on
        average than ``slowest`` seconds."""
        rng = self.rng
        kind = rng.choice(("uniform", "lognormal", "exp"))
        if kind == "uniform":
            low = round(rng.uniform(0.001, 0.01), 4)
            text = f"uniform:{low:g},{round(rng.uniform(low + 0.004, slowest), 4):g}"
        elif kind == "lognormal":
            text = (f"lognormal:{round(rng.uniform(0.005, slowest / 2), 4):g},"
                    f"{round(rng.uniform(0.1, 0.8), 2):g}")
        else:
            text = (f"exp:{round(rng.uniform(0.005, slowest / 2), 4):g},"
                    f"{round(rng.uniform(0.0, 0.005), 4):g}")
        self.options["latency"] = text
        return text


_LATENCY = Knob("latency", choices=("uniform:LO,HI", "lognormal:MEDIAN,SIGMA", "exp:MEAN,MIN"),
                note="uniform 0.001 <= LO < HI <= the service's slowest; log-normal median and "
                     "exponential mean up to half of it (sigma 0.1 .. 0.8, MIN <= 5 ms)")


def latency_within(text: str, slowest: float) -> bool:
    """Whether a drawn latency (``_Draw.latency``) is within its documented range."""
    kind, _, args = text.partition(":")
    try:
        values = [float(v) for v in args.split(",")]
    except ValueError:
        return False
    if kind == "uniform" and len(values) == 2:
        return 0.001 <= values[0] < values[1] <= slowest
    if kind == "lognormal" and len(values) == 2:
        return 0.005 <= values[0] <= slowest / 2 and 0.1 <= values[1] <= 0.8
    if kind == "exp" and len(values) == 2:
        return 0.005 <= values[0] <= slowest / 2 and 0.0 <= values[1] <= 0.005
    return False


@dataclasses.dataclass(frozen=True)
class Plan:
    """A service's VOPR: what its guarantee is under the faults drawn, the knobs and their
    ranges, how one schedule is drawn, and how its faults read in a table. ``checks``: the
    pipeline's checks the guarantee rests on, which must apply to every campaign of the
    service (one that finds nothing to check has not proven it)."""

    service: str
    guarantee: str
    knobs: tuple[Knob, ...]
    slowest: float  # the latency knob's ceiling (seconds)
    draw: Callable[[_Draw], None]
    faults: Callable[[Mapping[str, Scalar]], list[str]]
    checks: tuple[str, ...] = ()

    def knob(self, option: str) -> Knob:
        for knob in self.knobs:
            if knob.option == option:
                return knob
        raise KeyError(option)

    def within(self, option: str, value: Scalar) -> bool:
        """Whether ``value`` is in the documented range of ``option``."""
        if option == "latency":
            return isinstance(value, str) and latency_within(value, self.slowest)
        try:
            return self.knob(option).holds(value)
        except KeyError:
            return False
