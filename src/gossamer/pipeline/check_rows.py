"""What every guarantee check shares: ``Check`` (a named check), the violation rows' shape and
texts, and small column helpers (a layer filter, the deliveries, "precedes" in t-then-row
order, a field of info)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from .schema import (
    with_row_order,
)

__all__ = [
    "BASE_COLUMNS",
    "CAUSAL_PREFIX",
    "FIFO_AGAIN",
    "FIFO_GAP",
    "FIFO_REORDERED",
    "OWED_DETAIL",
    "VIOLATION_COLUMNS",
    "Check",
    "as_flag",
    "deliver_rows",
    "info_field",
    "layer_filter",
    "precedes",
    "violation_rows",
]

#: the columns every check reads (which node recorded what, when, in which layer)
BASE_COLUMNS = ("run", "t", "node", "layer", "event")


@dataclasses.dataclass(frozen=True)
class Check:
    """A named check: the rows that make it applicable, and its violations transform.

    ``evidence`` None means the check can never apply (``missing`` says why); otherwise a
    trace without any evidence row makes it "not applicable" with ``missing`` as the reason.
    ``columns`` are the trace columns it reads beside ``BASE_COLUMNS``: a trace whose files
    lack one cannot be checked (an error naming it). ``incomplete`` are rows the check should
    judge that lack what it needs (say, deliver rows of a declared FIFO layer without seq):
    when there are such rows and no evidence, the check is an error (``lacking`` says what is
    missing), never "not applicable".
    """

    name: str
    evidence: Column | None
    missing: str
    violations: Callable[[DataFrame], DataFrame] | None
    columns: tuple[str, ...] = ()
    incomplete: Column | None = None
    lacking: str = ""


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
