"""The metric tables whose columns are declared (``table_schema``) so that an analysis writes
them empty without building their plans: each declaration is held to its plan's columns."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame
from pyspark.sql import types as T

from gossamer.pipeline import metrics
from gossamer.pipeline.atomic_metrics import ATOMIC_METRICS_SCHEMA, atomic_metrics
from gossamer.pipeline.paxos_checks import PAXOS_METRICS_SCHEMA, paxos_metrics
from gossamer.pipeline.round_metrics import ROUND_METRICS_SCHEMA, round_metrics
from gossamer.pipeline.schema import load_trace, table_schema

pytestmark = pytest.mark.spark

FIXTURE = Path(__file__).parent / "fixtures" / "traces" / "fifo"

DECLARED: list[tuple[str, Callable[[DataFrame], DataFrame], T.StructType]] = [
    ("topic_balance", metrics.topic_balance, metrics.TOPIC_BALANCE_SCHEMA),
    ("layer_messages", metrics.layer_messages_per_publish, metrics.LAYER_MESSAGES_SCHEMA),
    ("appsync", round_metrics, ROUND_METRICS_SCHEMA),
    ("paxos", paxos_metrics, PAXOS_METRICS_SCHEMA),
    ("atomic", atomic_metrics, ATOMIC_METRICS_SCHEMA),
]


def _columns(schema: T.StructType) -> list[tuple[str, str]]:
    return [(field.name, field.dataType.simpleString()) for field in schema.fields]


@pytest.mark.parametrize(("name", "build", "declared"), DECLARED, ids=[d[0] for d in DECLARED])
def test_the_declared_columns_are_the_plans(spark: Any, name: str,
                                            build: Callable[[DataFrame], DataFrame],
                                            declared: T.StructType) -> None:
    assert _columns(build(load_trace(spark, FIXTURE)).schema) == _columns(declared), name


def test_table_schema_reads_names_and_types() -> None:
    assert _columns(table_schema("run string, n long, p50 double")) == [
        ("run", "string"), ("n", "bigint"), ("p50", "double")]
    with pytest.raises(KeyError):
        table_schema("run text")
