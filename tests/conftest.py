"""Shared test setup: Hypothesis profiles, chosen by GOSSAMER_HYPOTHESIS_PROFILE (default "ci"),
the one SparkSession, and the check that Spark tests are marked as such."""

from __future__ import annotations

import os
from typing import Any

import pytest
from hypothesis import settings

settings.register_profile("ci", max_examples=50, deadline=None)
settings.register_profile("thorough", max_examples=1000, deadline=None)
settings.load_profile(os.environ.get("GOSSAMER_HYPOTHESIS_PROFILE", "ci"))


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


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Keep the two lanes honest: a test that asks for the ``spark`` fixture must be marked
    ``spark`` (so ``scripts/test.sh --fast`` never starts a JVM); and every Spark test joins one
    xdist group, so under ``--dist loadgroup`` one worker, with one JVM, runs them all (tryfirst:
    before xdist reads the groups)."""
    for item in items:
        marked = item.get_closest_marker("spark") is not None
        if "spark" in getattr(item, "fixturenames", ()) and not marked:
            raise pytest.UsageError(f"{item.nodeid} uses the spark fixture: mark it "
                                    "@pytest.mark.spark")
        if marked:
            item.add_marker(pytest.mark.xdist_group("spark"))
