"""Backoff delays: Fibonacci and capped exponential with seeded jitter."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gossamer.core import Backoff, ConfigError, ExponentialBackoff, FibonacciBackoff


def take(backoff: Backoff, count: int) -> list[float]:
    return [backoff.next_delay() for _ in range(count)]


def test_fibonacci_sequence() -> None:
    assert take(FibonacciBackoff(unit=1.0, cap=1000.0), 8) == [1, 1, 2, 3, 5, 8, 13, 21]


def test_fibonacci_scales_by_unit() -> None:
    delays = take(FibonacciBackoff(unit=0.1, cap=30.0), 6)
    assert delays == pytest.approx([0.1, 0.1, 0.2, 0.3, 0.5, 0.8])


def test_fibonacci_caps() -> None:
    assert take(FibonacciBackoff(unit=1.0, cap=6.0), 8) == [1, 1, 2, 3, 5, 6, 6, 6]


def test_fibonacci_reset() -> None:
    backoff = FibonacciBackoff(unit=1.0, cap=100.0)
    take(backoff, 5)
    backoff.reset()
    assert take(backoff, 4) == [1, 1, 2, 3]


def test_fibonacci_unit_equal_cap_is_constant() -> None:
    assert take(FibonacciBackoff(unit=2.0, cap=2.0), 4) == [2, 2, 2, 2]


def test_exponential_doubles_and_caps() -> None:
    assert take(ExponentialBackoff(base=1.0, cap=10.0), 7) == [1, 2, 4, 8, 10, 10, 10]


def test_exponential_factor() -> None:
    assert take(ExponentialBackoff(base=0.5, factor=3.0, cap=100.0), 4) == [0.5, 1.5, 4.5, 13.5]


def test_exponential_reset() -> None:
    backoff = ExponentialBackoff(base=1.0, cap=100.0)
    take(backoff, 5)
    backoff.reset()
    assert take(backoff, 3) == [1, 2, 4]


@given(st.integers(min_value=0, max_value=2**32))
def test_exponential_jitter_stays_in_half_to_full(seed: int) -> None:
    plain = take(ExponentialBackoff(base=1.0, cap=16.0), 8)
    jittered = take(ExponentialBackoff(base=1.0, cap=16.0, rng=random.Random(seed)), 8)
    for full, got in zip(plain, jittered, strict=True):
        assert full / 2 <= got <= full


def test_exponential_jitter_is_seeded_and_varies() -> None:
    first = take(ExponentialBackoff(base=1.0, cap=16.0, rng=random.Random(7)), 20)
    second = take(ExponentialBackoff(base=1.0, cap=16.0, rng=random.Random(7)), 20)
    assert first == second
    capped = first[5:]  # the undithered delay is 16 from here on, the jitter is not
    assert len(set(capped)) > 1


@pytest.mark.parametrize(
    "kwargs",
    [{"unit": 0.0}, {"unit": -1.0}, {"unit": 2.0, "cap": 1.0}, {"cap": 0.0}],
)
def test_fibonacci_bad_args(kwargs: dict[str, float]) -> None:
    with pytest.raises(ConfigError):
        FibonacciBackoff(**kwargs)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"base": 0.0},
        {"base": -0.1},
        {"factor": 0.5},
        {"factor": 0.0},
        {"base": 2.0, "cap": 1.0},
    ],
)
def test_exponential_bad_args(kwargs: dict[str, float]) -> None:
    with pytest.raises(ConfigError):
        ExponentialBackoff(**kwargs)


def test_bad_args_must_be_keywords() -> None:
    with pytest.raises(TypeError):
        FibonacciBackoff(1.0)  # type: ignore[misc]
