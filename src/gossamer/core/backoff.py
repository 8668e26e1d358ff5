"""Reconnect delays: Fibonacci (seed 000) and capped exponential with jitter.

Pure objects: they compute delays and never sleep; a runtime or protocol arms a timer with them.
"""

from __future__ import annotations

import abc
import random

from .errors import ConfigError

__all__ = ["Backoff", "ExponentialBackoff", "FibonacciBackoff"]


class Backoff(abc.ABC):
    """Common face: ``next_delay()`` after each failure, ``reset()`` after a success."""

    @abc.abstractmethod
    def next_delay(self) -> float:
        """Seconds to wait before the next attempt."""

    @abc.abstractmethod
    def reset(self) -> None:
        """Start again from the shortest delay (after a success)."""


class FibonacciBackoff(Backoff):
    """Delays ``unit * 1, 1, 2, 3, 5, 8, ...`` capped at ``cap`` seconds."""

    def __init__(self, *, unit: float = 0.1, cap: float = 30.0) -> None:
        if unit <= 0 or cap < unit:
            raise ConfigError(f"need 0 < unit <= cap, got unit={unit} cap={cap}")
        self.unit = unit
        self.cap = cap
        self.reset()

    def reset(self) -> None:
        self._previous, self._current = 0, 1

    def next_delay(self) -> float:
        delay = min(self.cap, self.unit * self._current)
        if delay < self.cap:
            self._previous, self._current = self._current, self._previous + self._current
        return delay


class ExponentialBackoff(Backoff):
    """Delays ``base * factor**k`` capped at ``cap``; with ``rng``, full jitter in [d/2, d]."""

    def __init__(
        self,
        *,
        base: float = 0.1,
        factor: float = 2.0,
        cap: float = 30.0,
        rng: random.Random | None = None,
    ) -> None:
        if base <= 0 or factor < 1 or cap < base:
            raise ConfigError(f"need 0 < base <= cap and factor >= 1, got {base}, {factor}, {cap}")
        self.base = base
        self.factor = factor
        self.cap = cap
        self.rng = rng
        self.reset()

    def reset(self) -> None:
        self._attempt = 0

    def next_delay(self) -> float:
        delay = min(self.cap, self.base * self.factor**self._attempt)
        if delay < self.cap:
            self._attempt += 1
        if self.rng is not None:
            delay = delay / 2 + self.rng.random() * delay / 2
        return delay
