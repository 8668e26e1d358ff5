"""Shared test setup: Hypothesis profiles, chosen by GOSSAMER_HYPOTHESIS_PROFILE (default "ci");
the one SparkSession; the lanes of scripts/test.sh (``--lane``)."""

from __future__ import annotations

import os
from typing import Any

import pytest
from hypothesis import settings

settings.register_profile("ci", max_examples=50, deadline=None)
settings.register_profile("thorough", max_examples=1000, deadline=None)
settings.load_profile(os.environ.get("GOSSAMER_HYPOTHESIS_PROFILE", "ci"))

if os.environ.get("GOSSAMER_TEST_LOOP") == "uvloop":  # every test's event loop uvloop's
    import asyncio

    import uvloop

    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


@pytest.fixture(scope="session")
def spark() -> Any:
    """The one local SparkSession of the pipeline tests: JVM startup is most of their cost."""
    from gossamer.pipeline import get_spark  # only the pipeline tests pay for importing Spark

    # tiny inputs: one shuffle partition, no adaptive re-planning between stages, and no
    # whole-stage code generation (compiling each new plan costs more than running it here)
    session = get_spark("local[2]", {"spark.sql.shuffle.partitions": "1",
                                     "spark.sql.adaptive.enabled": "false",
                                     "spark.sql.codegen.wholeStage": "false"})
    # not stopped: the JVM ends with this process (stopping it here would leave its gateway
    # process to the garbage collector mid-session, a ResourceWarning)
    return session


# what the fast lane leaves out (markers declared in pyproject.toml)
NOT_FAST = ("slow", "spark", "browser", "processes", "bench")
LANES = ("all", "fast", "spark", "rest")
# pyproject's timeout (120 s) guards against hangs; a Spark, slow, process or benchmark test may
# take longer on a busy machine (a timeout inside a py4j call even breaks the session for every
# later Spark test)
LONG = ("slow", "spark", "processes", "bench")
LONG_TIMEOUT = 600


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--lane", choices=LANES, default="all",
        help="which tests run (with -k and -m on top): all; fast: none marked "
             f"{', '.join(NOT_FAST)}; spark: only the Spark tests (scripts/test.sh runs them in "
             "one process, so one JVM); rest: all but the Spark tests")


def in_lane(item: pytest.Item, lane: str) -> bool:
    if lane == "fast":
        return not any(item.get_closest_marker(name) for name in NOT_FAST)
    if lane in ("spark", "rest"):
        return (item.get_closest_marker("spark") is not None) == (lane == "spark")
    return True


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Keep the lanes honest (a test that asks for the ``spark`` fixture must be marked
    ``spark``, so the fast lane never starts a JVM), give the tests marked ``LONG``
    ``LONG_TIMEOUT``, and deselect what ``--lane`` leaves out."""
    lane = config.getoption("lane")
    kept: list[pytest.Item] = []
    left_out: list[pytest.Item] = []
    for item in items:
        spark = item.get_closest_marker("spark") is not None
        if "spark" in getattr(item, "fixturenames", ()) and not spark:
            raise pytest.UsageError(f"{item.nodeid} uses the spark fixture: mark it "
                                    "@pytest.mark.spark")
        long = any(item.get_closest_marker(name) for name in LONG)
        if long and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(LONG_TIMEOUT))
        (kept if in_lane(item, lane) else left_out).append(item)
    if left_out:
        config.hook.pytest_deselected(items=left_out)
        items[:] = kept
