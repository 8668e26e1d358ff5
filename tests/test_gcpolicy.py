"""The network runtime's garbage-collector policy: server thresholds once per process, an
environment variable to keep the interpreter's or choose the young threshold, a clear error
for a bad value."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from gossamer.core.errors import ConfigError
from gossamer.runtimes.net import gcpolicy


@pytest.fixture()
def fresh(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    before = gc.get_threshold()
    monkeypatch.setattr(gcpolicy, "_applied", set())
    yield
    gc.set_threshold(*before)


def test_a_server_process_collects_its_young_generation_less_often(
        fresh: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(gcpolicy.ENV, raising=False)
    gc.set_threshold(700, 10, 10)
    assert gcpolicy.tune_gc() == (gcpolicy.YOUNG, *gcpolicy.OLDER)
    assert gc.get_threshold() == (gcpolicy.YOUNG, *gcpolicy.OLDER)
    gc.set_threshold(700, 10, 10)
    assert gcpolicy.tune_gc() is None  # once per process: a second node changes nothing
    assert gc.get_threshold() == (700, 10, 10)


def test_the_environment_keeps_the_interpreters_policy_or_sets_the_threshold(
        fresh: None, monkeypatch: pytest.MonkeyPatch) -> None:
    gc.set_threshold(700, 10, 10)
    monkeypatch.setenv(gcpolicy.ENV, "default")
    assert gcpolicy.tune_gc() is None and gc.get_threshold() == (700, 10, 10)
    monkeypatch.setattr(gcpolicy, "_applied", set())
    monkeypatch.setenv(gcpolicy.ENV, "10000")
    assert gcpolicy.tune_gc() == (10_000, *gcpolicy.OLDER)


@pytest.mark.parametrize("bad", ["many", "100", "-1"])
def test_a_bad_setting_is_a_clear_error(fresh: None, monkeypatch: pytest.MonkeyPatch,
                                        bad: str) -> None:
    monkeypatch.setenv(gcpolicy.ENV, bad)
    with pytest.raises(ConfigError, match="GOSSAMER_GC must be"):
        gcpolicy.tune_gc()
