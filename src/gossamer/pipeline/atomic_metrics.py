"""Seed 004's figures per run: how many atomic multicasts committed or aborted and how fast,
and what SRM's loss recovery cost (requests and repairs per loss, recovery delay).

From the ``atomic`` layer's ``publish``, ``commit`` and ``abort`` rows (the sender's; commit
latency is publish to decision at the sender, on its own clock ``t``) and the ``srm`` layer's
``loss``, ``recovered`` (``info.delay``: detection to repair, seconds), ``gave_up`` and
``send`` rows (``info.type`` ``srm.request`` / ``srm.repair``: one multicast each).
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from .atomic_checks import ATOMIC_LAYER
from .check_rows import info_field
from .schema import table_schema

__all__ = ["ATOMIC_METRICS_SCHEMA", "ATOMIC_RUN_COLUMNS", "SRM_LAYER", "atomic_metrics"]

SRM_LAYER = "srm"
#: the columns of ``atomic_metrics`` that the runs table carries (plotted against a sweep)
ATOMIC_RUN_COLUMNS = ("commit_rate", "abort_rate", "delivered_fraction", "commit_latency_p50",
                      "requests_per_loss", "repairs_per_loss", "recovery_delay_p50")
_QUANTILES = (0.5, 0.99)
_ACCURACY = 10_000


def _count(condition: Column, name: str) -> Column:
    return F.sum(F.when(condition, 1).otherwise(0)).alias(name)


#: ``atomic_metrics``'s columns (a test holds them to its plan's)
ATOMIC_METRICS_SCHEMA = table_schema(
    "run string, published long, committed long, aborted long, delivered long, deliveries "
    "long, commit_rate double, abort_rate double, delivered_fraction double, "
    "commit_latency_p50 double, commit_latency_p99 double, commit_latency_max double, "
    "losses long, recovered long, gave_up long, requests long, repairs long, "
    "requests_per_loss double, repairs_per_loss double, recovery_delay_p50 double, "
    "recovery_delay_p99 double")


def atomic_metrics(trace: DataFrame) -> DataFrame:
    """Per run with atomic or SRM rows: ``published``, ``committed``, ``aborted``,
    ``commit_rate`` and ``abort_rate`` (of the decided), ``delivered`` (messages delivered by
    at least one member) and ``deliveries`` (deliveries in all), ``delivered_fraction``
    (delivered of published: the seed's "messages delivered"), ``commit_latency_p50/p99/max``
    (seconds, publish to commit at the sender), SRM ``losses``, ``recovered``, ``gave_up``,
    ``requests`` and ``repairs`` sent, ``requests_per_loss`` and ``repairs_per_loss`` (null
    without losses) and ``recovery_delay_p50/p99`` (seconds). Empty without those layers."""
    atomic = trace.filter((F.col("layer") == ATOMIC_LAYER)
                          & F.col("event").isin("publish", "commit", "abort", "deliver"))
    event = F.col("event")
    decisions = atomic.groupBy("run").agg(
        F.countDistinct(F.when(event == "publish", F.col("msg"))).alias("published"),
        F.countDistinct(F.when(event == "commit", F.col("msg"))).alias("committed"),
        F.countDistinct(F.when(event == "abort", F.col("msg"))).alias("aborted"),
        F.countDistinct(F.when(event == "deliver", F.col("msg"))).alias("delivered"),
        _count(event == "deliver", "deliveries"))
    sent = (atomic.filter(event == "publish").groupBy("run", "msg", "node")
            .agg(F.min("t").alias("t_publish")))
    committed = (atomic.filter(event == "commit").groupBy("run", "msg", "node")
                 .agg(F.min("t").alias("t_commit")))
    latency = sent.join(committed, ["run", "msg", "node"]).select(
        "run", (F.col("t_commit") - F.col("t_publish")).alias("latency"))
    quantiles = F.percentile_approx("latency", list(_QUANTILES), _ACCURACY)
    latencies = latency.groupBy("run").agg(
        quantiles[0].alias("commit_latency_p50"), quantiles[1].alias("commit_latency_p99"),
        F.max("latency").alias("commit_latency_max"))

    srm = trace.filter(F.col("layer") == SRM_LAYER)
    kind = info_field("type")
    recovery = info_field("delay").cast("double")
    delays = F.percentile_approx(F.when(event == "recovered", recovery), list(_QUANTILES),
                                 _ACCURACY)
    repair = srm.filter(event.isin("loss", "recovered", "gave_up", "send")).groupBy("run").agg(
        _count(event == "loss", "losses"), _count(event == "recovered", "recovered"),
        _count(event == "gave_up", "gave_up"),
        _count((event == "send") & (kind == "srm.request"), "requests"),
        _count((event == "send") & (kind == "srm.repair"), "repairs"),
        delays[0].alias("recovery_delay_p50"), delays[1].alias("recovery_delay_p99"))

    runs = decisions.select("run").unionByName(repair.select("run")).distinct()
    decided = F.col("committed") + F.col("aborted")
    per_loss = F.col("losses") > 0
    return (runs.join(decisions, "run", "left").join(latencies, "run", "left")
            .join(repair, "run", "left")
            .select(
                "run",
                *[F.coalesce(F.col(c), F.lit(0)).alias(c)
                  for c in ("published", "committed", "aborted", "delivered", "deliveries")],
                F.when(decided > 0, F.col("committed") / decided).alias("commit_rate"),
                F.when(decided > 0, F.col("aborted") / decided).alias("abort_rate"),
                F.when(F.col("published") > 0, F.coalesce(F.col("delivered"), F.lit(0))
                       / F.col("published")).alias("delivered_fraction"),
                "commit_latency_p50", "commit_latency_p99", "commit_latency_max",
                *[F.coalesce(F.col(c), F.lit(0)).alias(c)
                  for c in ("losses", "recovered", "gave_up", "requests", "repairs")],
                F.when(per_loss, F.col("requests") / F.col("losses")).alias("requests_per_loss"),
                F.when(per_loss, F.col("repairs") / F.col("losses")).alias("repairs_per_loss"),
                "recovery_delay_p50", "recovery_delay_p99"))
