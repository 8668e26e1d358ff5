"""The analysis's size-aware Spark settings (``tuned_for``): a small trace is analysed with
interpreted operators, fixed plans and one shuffle partition; what the session's builder was
given is kept; a large trace keeps the session's settings; everything comes back after."""

from __future__ import annotations

from typing import Any

import pytest

from gossamer.pipeline.spark import SMALL_TRACE_ROWS, tuned_for

pytestmark = pytest.mark.spark

FACTORY = "spark.sql.codegen.factoryMode"
PARTITIONS = "spark.sql.shuffle.partitions"  # given to the suite's session (tests/conftest.py)


def test_a_small_trace_runs_interpreted_and_the_settings_come_back(spark: Any) -> None:
    before = spark.conf.get(FACTORY, None)
    spark.conf.set(PARTITIONS, "3")
    try:
        with tuned_for(spark, SMALL_TRACE_ROWS):
            assert spark.conf.get(FACTORY) == "NO_CODEGEN"
            assert spark.conf.get("spark.sql.adaptive.enabled") == "false"
            assert spark.conf.get(PARTITIONS) == "3"  # the builder was given it: kept
            assert spark.range(10).filter("id % 2 = 0").count() == 5
        assert spark.conf.get(FACTORY, None) == before
    finally:
        spark.conf.set(PARTITIONS, "1")


def test_a_large_trace_keeps_the_sessions_settings(spark: Any) -> None:
    before = spark.conf.get(FACTORY, None)
    with tuned_for(spark, SMALL_TRACE_ROWS + 1):
        assert spark.conf.get(FACTORY, None) == before
