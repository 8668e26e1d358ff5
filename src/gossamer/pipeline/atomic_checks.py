"""The atomicity check (seed 004): all of a sender's snapshot delivers a message, or none.

Over the ``atomic`` layer's rows: ``commit`` and ``abort`` (the sender's decision, with
``info.snapshot``), ``deliver`` and ``redeliver``. A committed message is delivered exactly once
by every member of its snapshot that is up at the end of the run (a member that crashed and
recovered is owed it) and by no one else; an aborted or never decided message is delivered by
no one; no message is both committed and aborted.

A ``redeliver`` row is a member's inbox handing a delivery over again after a restart (the
application had not acknowledged it): it is not a second delivery, but it stands for the
delivery when the ``deliver`` row of the life that was killed never reached the trace (a kill
-9 between the delivery's commit and the trace's flush), and like any delivery it must be of a
committed message, by a snapshot member. It carries that delivery's position: a message a
member handed over under two positions was delivered twice (the first ``deliver`` row lost).

Where a run has an application over the inbox (``handle`` rows: its effect of a delivery, on
disk), each member handles each message it delivered exactly once (a member up at the end has
handled all it delivered), and nothing it did not deliver.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from .check_rows import info_field, violation_rows

__all__ = ["ATOMIC_LAYER", "atomicity_evidence", "atomicity_violations"]

ATOMIC_LAYER = "atomic"


def atomicity_evidence() -> Column:
    return (F.col("layer") == ATOMIC_LAYER) & F.col("event").isin("commit", "abort")


def _down_at_end(trace: DataFrame) -> DataFrame:
    """(run, node) of the nodes whose last life event is a crash or a leave."""
    life = trace.filter((F.col("layer") == "sim")
                        & F.col("event").isin("crash", "recover", "leave", "join"))
    last = Window.partitionBy("run", "node").orderBy(F.col("t").desc())
    return (life.select("run", "node", "event", F.row_number().over(last).alias("nth"))
            .filter((F.col("nth") == 1) & F.col("event").isin("crash", "leave"))
            .select("run", "node"))


def atomicity_violations(trace: DataFrame) -> DataFrame:
    atomic = trace.filter((F.col("layer") == ATOMIC_LAYER) & F.col("msg").isNotNull())
    decided = atomic.filter(F.col("event").isin("commit", "abort")).select(
        "run", "msg", "origin", "seq", F.col("event").alias("outcome"),
        F.from_json(info_field("snapshot"), "array<string>").alias("snapshot"))
    kinds = decided.groupBy("run", "msg").agg(
        F.countDistinct("outcome").alias("kinds"), F.first("origin").alias("origin"),
        F.first("seq").alias("seq"))
    both = violation_rows(kinds.filter(F.col("kinds") > 1).select(
        "run", F.lit(None).alias("node"), "msg", "origin", "seq"),
        F.lit("both committed and aborted"))
    commits = decided.filter(F.col("outcome") == "commit").dropDuplicates(["run", "msg"])
    aborts = decided.filter(F.col("outcome") == "abort").select("run", "msg").distinct()
    delivered = atomic.filter(F.col("event").isin("deliver", "redeliver")).select(
        "run", "node", "msg", "origin", "seq", "event",
        info_field("position").cast("long").alias("position"))
    counted = delivered.groupBy("run", "node", "msg").agg(
        F.sum(F.when(F.col("event") == "deliver", 1).otherwise(0)).alias("times"),
        F.countDistinct("position").alias("positions"),
        F.first("origin").alias("origin"), F.first("seq").alias("seq"))
    twice = violation_rows(
        counted.filter((F.col("times") > 1) | (F.col("positions") > 1)),
        F.when(F.col("times") > 1, F.format_string("delivered %d times", F.col("times")))
        .otherwise(F.format_string("handed over under %d positions", F.col("positions"))))
    uncommitted = counted.join(commits.select("run", "msg"), ["run", "msg"], "left_anti")
    not_committed = violation_rows(
        uncommitted.join(aborts.withColumn("aborted", F.lit(True)), ["run", "msg"], "left"),
        F.when(F.col("aborted"), F.lit("delivered an aborted message"))
        .otherwise(F.lit("delivered a message that was never committed")))
    with_snapshot = counted.join(commits.select("run", "msg", "snapshot"), ["run", "msg"])
    outside = violation_rows(
        with_snapshot.filter(~F.array_contains(F.col("snapshot"), F.col("node"))),
        F.lit("delivered by a node outside the message's snapshot"))
    owed = commits.select("run", "msg", "origin", "seq",
                          F.explode("snapshot").alias("node"))
    owed = owed.join(_down_at_end(trace), ["run", "node"], "left_anti")
    missing = violation_rows(
        owed.join(counted.select("run", "node", "msg"), ["run", "node", "msg"], "left_anti"),
        F.lit("committed, but this snapshot member never delivered it"))
    return (both.unionByName(twice).unionByName(not_committed).unionByName(outside)
            .unionByName(missing).unionByName(_handling_violations(atomic, counted, trace)))


def _handling_violations(atomic: DataFrame, delivered: DataFrame, trace: DataFrame) -> DataFrame:
    """The application's exactly once, in the runs that have one (any ``handle`` row)."""
    handled = atomic.filter(F.col("event") == "handle").groupBy("run", "node", "msg").agg(
        F.count(F.lit(1)).alias("times"), F.first("origin").alias("origin"),
        F.first("seq").alias("seq"))
    twice = violation_rows(handled.filter(F.col("times") > 1), F.format_string(
        "handled %d times by the application", F.col("times")))
    keys = ["run", "node", "msg"]
    undelivered = violation_rows(handled.join(delivered.select(*keys), keys, "left_anti"),
                                 F.lit("handled by the application, never delivered"))
    with_app = delivered.join(F.broadcast(handled.select("run").distinct()), ["run"])
    unhandled = violation_rows(
        with_app.join(handled.select(*keys), keys, "left_anti")
        .join(_down_at_end(trace), ["run", "node"], "left_anti"),
        F.lit("delivered, never handled by the application"))
    return twice.unionByName(undelivered).unionByName(unhandled)
