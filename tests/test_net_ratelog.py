"""Per-message warnings of the network runtime are logged once per interval with counts."""

from __future__ import annotations

import logging

import pytest

from gossamer.runtimes.net.ratelog import RateLimitedLog


def test_one_line_per_key_and_interval_with_the_count_of_the_rest(
        caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    limited = RateLimitedLog(logging.getLogger("test.ratelog"), interval=5.0,
                             clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, logger="test.ratelog"):
        for _ in range(1000):
            limited.warn("queue_full a b", "queue to %s full", "b")
        limited.warn("queue_full a c", "queue to %s full", "c")  # another key: its own line
        now[0] = 6.0
        limited.warn("queue_full a b", "queue to %s full", "b")
        limited.warn("queue_full a b", "queue to %s full", "b")
        limited.flush()
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "queue to b full",
        "queue to c full",
        "queue to b full (and 999 more like it in the last 6 s)",
        "1 more warnings of queue_full a b were suppressed",
    ]


def test_keys_are_bounded() -> None:
    limited = RateLimitedLog(logging.getLogger("test.ratelog"), max_keys=3, clock=lambda: 0.0)
    for i in range(10):
        limited.warn(f"k{i}", "w")
    assert len(limited._last) == 3  # the bound is the point of the test
    with pytest.raises(ValueError, match="interval"):
        RateLimitedLog(logging.getLogger("x"), interval=0)
