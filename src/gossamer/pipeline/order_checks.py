"""Checks of the order of deliveries at each node: FIFO per origin and causal order. Pure
``DataFrame -> DataFrame`` transforms (see ``checks``)."""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from .check_rows import (
    CAUSAL_PREFIX,
    FIFO_AGAIN,
    FIFO_GAP,
    FIFO_REORDERED,
    deliver_rows,
    precedes,
    violation_rows,
)
from .schema import (
    ROW,
    UP_EVENTS,
    clock,
    membership_changes,
    with_row_order,
)

__all__ = [
    "causal_violations",
    "fifo_violations",
    "vector_column",
]

_VECTOR = T.StructType([T.StructField("vector", T.MapType(T.StringType(), T.LongType()))])

# -- FIFO per origin ---------------------------------------------------------------------------


def fifo_violations(trace: DataFrame, *, layers: Sequence[str] | None = None,
                    session_layers: Sequence[str] = ()) -> DataFrame:
    """Each node delivers each origin's seqs as 1, 2, 3, ..., by t then row order.

    A second delivery of a message the node delivered before is left to
    ``duplicate_violations``: here it neither counts as a violation nor moves the expected
    next seq. Another message with a seq delivered before (an origin whose numbering started
    over) is a violation. In ``session_layers`` a gap
    (a higher seq than the next) is no violation when the node's membership changed (join,
    leave, crash, recover) since its previous delivery from that origin: what it missed while
    away is not sent again. Reordering still is.
    """
    trace = with_row_order(trace)
    rows = deliver_rows(trace, layers).filter(
        F.col("origin").isNotNull() & F.col("seq").isNotNull()).withColumn("at", clock())
    in_order = Window.partitionBy("run", "layer", "node", "origin").orderBy("t", ROW)
    earlier = in_order.rowsBetween(Window.unboundedPreceding, -1)
    same_seq = Window.partitionBy("run", "layer", "node", "origin", "seq").orderBy("t", ROW)
    repeat = Window.partitionBy("run", "layer", "node", "origin", "seq", "msg").orderBy(
        "t", ROW)
    rows = (rows.withColumn("nth", F.row_number().over(repeat)).filter(F.col("nth") == 1)
            .withColumn("nth_of_seq", F.row_number().over(same_seq))
            .withColumn("highest_before",
                        F.coalesce(F.max("seq").over(earlier), F.lit(0))))
    expected = F.col("highest_before") + 1
    if session_layers:
        rows = rows.withColumn("previous", F.max(F.struct(
            F.col("at").alias("at"), F.col(ROW).alias(ROW))).over(earlier))
    bad = rows.filter(F.col("seq") != expected)
    if session_layers:
        bad = _without_session_gaps(trace, bad, session_layers)
    detail = (F.when(F.col("nth_of_seq") > 1, F.format_string(FIFO_AGAIN, F.col("seq")))
              .when(F.col("seq") <= F.col("highest_before"),
                    F.format_string(FIFO_REORDERED, F.col("seq"), F.col("highest_before")))
              .otherwise(F.format_string(FIFO_GAP, F.col("seq"), expected)))
    return violation_rows(bad, detail)


def _without_session_gaps(trace: DataFrame, bad: DataFrame,
                          session_layers: Sequence[str]) -> DataFrame:
    """FIFO findings ``bad`` minus the gaps in ``session_layers`` that being away explains:
    the node's membership changed between its ``previous`` delivery from the origin (if any)
    and this one, or the node is away at this one (its last change before it took it down:
    ``leave``, ``crash``), so what it missed may have been sent while it was away."""
    changes = membership_changes(trace, session_layers=session_layers).select(
        "run", "node", F.col("at").alias("change_at"), F.col(ROW).alias("change_row"),
        F.col("event").alias("change_event"))
    gaps = bad.filter(F.col("layer").isin(list(session_layers))
                      & (F.col("seq") > F.col("highest_before")))
    keys = ["run", "layer", "node", "origin", "seq", "t", ROW]
    earlier = gaps.join(changes, ["run", "node"]).filter(
        precedes(F.col("change_at"), F.col("change_row"), F.col("at"), F.col(ROW)))
    latest = earlier.groupBy(*keys, "previous").agg(F.max(F.struct(
        "change_at", "change_row", "change_event")).alias("last"))
    previous, last = F.col("previous"), F.col("last")
    since_previous = previous.isNull() | precedes(
        previous.getField("at"), previous.getField(ROW), last.getField("change_at"),
        last.getField("change_row"))
    away = ~last.getField("change_event").isin(*UP_EVENTS)
    excused = latest.filter(since_previous | away).select(*keys).distinct()
    return bad.join(excused, keys, "left_anti")


# -- causal order ------------------------------------------------------------------------------


def vector_column() -> Column:
    return F.from_json(F.col("info"), _VECTOR).getField("vector")


def causal_violations(trace: DataFrame, *, layers: Sequence[str] | None = None) -> DataFrame:
    """Deliveries that came before their causal past, from ``info.vector`` of deliver rows.

    ``vector[k]`` counts k's messages the sender had delivered (``vector[origin]`` is the
    message's own seq). So delivering it at node n needs k's message ``vector[k]`` (origin:
    ``seq - 1``) delivered earlier at n, after at least that many of k's messages. A node's own
    messages are its own past and are not looked up.
    """
    rows = deliver_rows(trace, layers)
    counted = Window.partitionBy("run", "layer", "node", "origin").orderBy("t", ROW)
    rows = rows.withColumn("from_origin", F.count(F.lit(1)).over(counted))
    firsts = rows.groupBy("run", "layer", "node", "origin", "seq").agg(
        F.min(F.struct("t", ROW, "from_origin")).alias("first"))
    needs = (rows.filter(vector_column().isNotNull())
             .select("run", "layer", "node", "msg", "origin", "seq", "t", ROW,
                     F.explode(vector_column()).alias("past_origin", "count"))
             .withColumn("needed", F.when(F.col("past_origin") == F.col("origin"),
                                          F.col("count") - 1).otherwise(F.col("count")))
             .filter((F.col("needed") >= 1) & (F.col("past_origin") != F.col("node"))))
    lookup = firsts.select(
        "run", "layer", "node", F.col("origin").alias("past_origin"),
        F.col("seq").alias("needed"), "first")
    joined = needs.join(lookup, ["run", "layer", "node", "past_origin", "needed"], "left")
    problem = (F.when(F.col("first").isNull(), F.lit("never delivered"))
               .when(~precedes(F.col("first.t"), F.col(f"first.{ROW}"), F.col("t"),
                              F.col(ROW)), F.lit("delivered after it"))
               .when(F.col("first.from_origin") < F.col("needed"),
                     F.lit("delivered with earlier messages of its origin missing")))
    bad = joined.withColumn("problem", problem).filter(F.col("problem").isNotNull())
    per_delivery = bad.groupBy("run", "layer", "node", "msg", "origin", "seq", "t", ROW).agg(
        F.array_join(F.sort_array(F.collect_list(F.format_string(
            "%s:%d %s", F.col("past_origin"), F.col("needed"), F.col("problem")))), "; ")
        .alias("what"))
    return violation_rows(per_delivery, F.concat(F.lit(CAUSAL_PREFIX), F.col("what")))
