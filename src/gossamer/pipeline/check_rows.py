"""What every guarantee check shares: the violation rows' shape and texts, and small column
helpers (a layer filter, the deliveries, "precedes" in t-then-row order, a field of info)."""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from .schema import (
    with_row_order,
)

__all__ = [
    "CAUSAL_PREFIX",
    "FIFO_AGAIN",
    "FIFO_GAP",
    "FIFO_REORDERED",
    "OWED_DETAIL",
    "VIOLATION_COLUMNS",
    "as_flag",
    "deliver_rows",
    "info_field",
    "layer_filter",
    "precedes",
    "violation_rows",
]

VIOLATION_COLUMNS = ("run", "node", "msg", "origin", "seq", "detail")
# what a violation says, shared by the batch checks here and the live ones (``live``)
FIFO_REORDERED = "reordered: seq %d after seq %d"
FIFO_GAP = "gap: seq %d delivered, expected %d"
FIFO_AGAIN = "seq %d delivered again, as another message"
CAUSAL_PREFIX = "causal past not respected: "
OWED_DETAIL = "%s: it was up when %s published it at t=%.6f and %s"


def layer_filter(layers: Sequence[str] | None) -> Column:
    return F.lit(True) if layers is None else F.col("layer").isin(list(layers))


def deliver_rows(trace: DataFrame, layers: Sequence[str] | None) -> DataFrame:
    return with_row_order(trace).filter((F.col("event") == "deliver") & layer_filter(layers))


def precedes(t1: Column, row1: Column, t2: Column, row2: Column) -> Column:
    """(t1, row1) comes strictly before (t2, row2) in "t, then row order"."""
    return (t1 < t2) | ((t1 == t2) & (row1 < row2))


def violation_rows(frame: DataFrame, detail: Column) -> DataFrame:
    """Violation rows in the one shape every check returns."""
    return frame.select(
        F.col("run").cast("string").alias("run"),
        F.col("node").cast("string").alias("node"),
        F.col("msg").cast("string").alias("msg"),
        F.col("origin").cast("string").alias("origin"),
        F.col("seq").cast("long").alias("seq"),
        detail.cast("string").alias("detail"),
    )


def info_field(field: str) -> Column:
    return F.get_json_object(F.col("info"), f"$.{field}")


def as_flag(condition: Column) -> Column:
    return F.when(condition, 1).otherwise(0)
