"""The simulator's network model: latency distributions, loss, duplication, reordering, partitions.

Bandwidth is free: a message's delay does not depend on its size. Every random draw comes from
the network's own seeded ``random.Random`` so one seed fixes every fault.
"""

from __future__ import annotations

import abc
import dataclasses
import math
import random
from collections.abc import Iterable

from ...core.errors import ConfigError
from ...core.ids import NodeId

__all__ = [
    "Constant",
    "Exponential",
    "Latency",
    "LinkModel",
    "LogNormal",
    "Network",
    "Uniform",
    "parse_latency",
]


class Latency(abc.ABC):
    """A one-way delay distribution in seconds."""

    __slots__ = ()

    @abc.abstractmethod
    def sample(self, rng: random.Random) -> float:
        """One delay, drawn from ``rng``."""

    @property
    @abc.abstractmethod
    def mean(self) -> float:
        """The distribution's mean, for reports."""


@dataclasses.dataclass(frozen=True, slots=True)
class Constant(Latency):
    delay: float = 0.01

    def __post_init__(self) -> None:
        if self.delay < 0:
            raise ConfigError(f"latency must be >= 0, got {self.delay}")

    def sample(self, rng: random.Random) -> float:
        return self.delay

    @property
    def mean(self) -> float:
        return self.delay


@dataclasses.dataclass(frozen=True, slots=True)
class Uniform(Latency):
    low: float = 0.005
    high: float = 0.05

    def __post_init__(self) -> None:
        if not 0 <= self.low <= self.high:
            raise ConfigError(f"need 0 <= low <= high, got {self.low}, {self.high}")

    def sample(self, rng: random.Random) -> float:
        return self.low + (self.high - self.low) * rng.random()

    @property
    def mean(self) -> float:
        return (self.low + self.high) / 2


@dataclasses.dataclass(frozen=True, slots=True)
class Exponential(Latency):
    """``minimum`` plus an exponential tail of mean ``scale``."""

    scale: float = 0.02
    minimum: float = 0.0

    def __post_init__(self) -> None:
        if self.scale <= 0 or self.minimum < 0:
            raise ConfigError(f"need scale > 0 and minimum >= 0, got {self.scale}, {self.minimum}")

    def sample(self, rng: random.Random) -> float:
        return self.minimum + rng.expovariate(1.0 / self.scale)

    @property
    def mean(self) -> float:
        return self.minimum + self.scale


@dataclasses.dataclass(frozen=True, slots=True)
class LogNormal(Latency):
    """Log-normal with the given ``median`` (seconds) and shape ``sigma``."""

    median: float = 0.02
    sigma: float = 0.5

    def __post_init__(self) -> None:
        if self.median <= 0 or self.sigma < 0:
            raise ConfigError(f"need median > 0 and sigma >= 0, got {self.median}, {self.sigma}")

    def sample(self, rng: random.Random) -> float:
        return rng.lognormvariate(math.log(self.median), self.sigma)

    @property
    def mean(self) -> float:
        return self.median * math.exp(self.sigma**2 / 2)


def parse_latency(text: str) -> Latency:
    """``"const:0.01"``, ``"uniform:0.005,0.05"``, ``"exp:0.02"``, ``"lognormal:0.02,0.5"``."""
    kind, _, args = text.partition(":")
    try:
        values = [float(v) for v in args.split(",")] if args else []
        if kind in ("const", "constant"):
            return Constant(*values)
        if kind == "uniform":
            return Uniform(*values)
        if kind in ("exp", "exponential"):
            return Exponential(*values)
        if kind == "lognormal":
            return LogNormal(*values)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"bad latency {text!r}: {exc}") from exc
    raise ConfigError(f"unknown latency kind {kind!r} (const, uniform, exp, lognormal)")


def _check_probability(name: str, value: float) -> None:
    if not 0.0 <= value <= 1.0:
        raise ConfigError(f"{name} must be in [0, 1], got {value}")


@dataclasses.dataclass(frozen=True, slots=True)
class LinkModel:
    """How one directed link treats each message.

    ``reorder`` is the probability that a message is held back by an extra delay of up to
    ``reorder_delay`` seconds, so later messages overtake it.
    """

    latency: Latency = Constant(0.01)
    loss: float = 0.0
    duplicate: float = 0.0
    reorder: float = 0.0
    reorder_delay: float = 0.1
    #: the delays every message gets on a link without faults and with constant latency
    fixed_delays: tuple[float, ...] | None = dataclasses.field(
        default=None, init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        if not (self.loss or self.duplicate or self.reorder) and isinstance(
            self.latency, Constant
        ):
            object.__setattr__(self, "fixed_delays", (self.latency.delay,))
        _check_probability("loss", self.loss)
        _check_probability("duplicate", self.duplicate)
        _check_probability("reorder", self.reorder)
        if self.reorder_delay < 0:
            raise ConfigError(f"reorder_delay must be >= 0, got {self.reorder_delay}")

    def delays(self, rng: random.Random) -> tuple[float, ...]:
        """The delays of the copies that arrive: () if lost, two if duplicated."""
        if self.loss and rng.random() < self.loss:
            return ()
        copies = 2 if self.duplicate and rng.random() < self.duplicate else 1
        out = []
        for _ in range(copies):
            delay = self.latency.sample(rng)
            if self.reorder and rng.random() < self.reorder:
                delay += self.reorder_delay * rng.random()
            out.append(delay)
        return tuple(out)


class Network:
    """Links and partitions. Unlisted links use the default model."""

    def __init__(self, default: LinkModel | None = None) -> None:
        self.default = default if default is not None else LinkModel()
        self._links: dict[tuple[NodeId, NodeId], LinkModel] = {}
        self._group: dict[NodeId, int] = {}
        self._blocked: set[frozenset[NodeId]] = set()

    def set_link(self, src: NodeId, dst: NodeId, model: LinkModel, *, both: bool = True) -> None:
        self._links[(src, dst)] = model
        if both:
            self._links[(dst, src)] = model

    def link(self, src: NodeId, dst: NodeId) -> LinkModel:
        if self._links:
            return self._links.get((src, dst), self.default)
        return self.default

    @property
    def uniform(self) -> bool:
        """True when every link is the default one and nothing is partitioned."""
        return not self._links and not self._group and not self._blocked

    def partition(self, groups: Iterable[Iterable[NodeId]]) -> None:
        """Split the network: nodes talk only within their group; unlisted nodes form one more."""
        group_of: dict[NodeId, int] = {}
        for number, members in enumerate(groups, start=1):
            for node in members:
                if node in group_of:
                    raise ConfigError(f"node {node} is in two partition groups")
                group_of[node] = number
        self._group = group_of

    def block(self, a: NodeId, b: NodeId) -> None:
        """Silence the links between ``a`` and ``b`` only (a hung link; both directions)."""
        self._blocked.add(frozenset((a, b)))

    def heal(self) -> None:
        self._group = {}
        self._blocked = set()

    @property
    def partitioned(self) -> bool:
        return bool(self._group) or bool(self._blocked)

    def connected(self, src: NodeId, dst: NodeId) -> bool:
        if self._blocked and frozenset((src, dst)) in self._blocked:
            return False
        group = self._group
        return not group or group.get(src, 0) == group.get(dst, 0)
