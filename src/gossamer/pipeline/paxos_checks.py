"""Checks and metrics of the Multi-Paxos layer (issue 19 point 4), on the trace schema only.

Checks (pure ``DataFrame -> DataFrame`` transforms yielding violation rows, and their ``Check``s):
- **paxos agreement**: no two replicas of a group decide different values for one slot
  (``decide`` rows, layer ``paxos``, ``key`` the group, ``seq`` the slot, ``info.digest``), and
  no two nodes order different publishes at one position of a topic (``ordered`` rows: ``key``
  the topic, ``seq`` the position, ``msg`` the publish);
- **decided order**: every subscriber delivers a topic that was ordered (``ordered`` rows) at
  the decided positions (a deliver row's ``seq``), each position's own publish, positions
  rising (a publish decided twice counts at its first position);
- **acknowledged kept**: every publish acknowledged to its publisher (``acked`` rows) was
  decided (some ``ordered`` row holds it).
Metrics (``paxos_metrics``): per run and group, decided slots and decisions per second,
propose-to-decide latency at the leader (``propose`` to its own ``decide`` of the slot, one
clock), paxos messages sent per decided slot, leader changes (``elected`` rows) and fail-over
time (from the crash of a leader to the first decision of the leader elected after it).
"""

from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from .check_rows import Check, info_field, violation_rows
from .schema import ROW, clock, membership_changes, table_schema, with_row_order

__all__ = [
    "PAXOS_LAYER",
    "PAXOS_METRICS_SCHEMA",
    "PAXOS_RUN_COLUMNS",
    "acknowledged_lost_violations",
    "decided_order_violations",
    "leader_failovers",
    "paxos_agreement_violations",
    "paxos_checks",
    "paxos_metrics",
    "paxos_run_summary",
]

PAXOS_LAYER = "paxos"
#: the per-run figures of ``paxos_metrics`` that the runs table carries (plotted against a
#: sweep): decisions/s summed over a run's groups, the others their largest group value
PAXOS_RUN_COLUMNS = ("decisions_per_s", "decide_latency_p50", "decide_latency_p99",
                     "messages_per_decision", "failover_max")


def _paxos_rows(trace: DataFrame, event: str) -> DataFrame:
    """The paxos layer's ``event`` rows of a group (``key``)."""
    return trace.filter((F.col("layer") == PAXOS_LAYER) & (F.col("event") == event)
                        & F.col("key").isNotNull())


def _paxos(trace: DataFrame, event: str) -> DataFrame:
    """... those of a slot or position (``seq``)."""
    return _paxos_rows(trace, event).filter(F.col("seq").isNotNull())


def _ordered(trace: DataFrame) -> DataFrame:
    return _paxos(trace, "ordered").filter(F.col("msg").isNotNull())


def paxos_agreement_violations(trace: DataFrame) -> DataFrame:
    """A row per decision that disagrees with another node's decision of the same slot (or
    the same position of a topic)."""
    decided = _paxos(trace, "decide").withColumn("value", info_field("digest")).filter(
        F.col("value").isNotNull())
    ordered = _ordered(trace).withColumn("value", F.col("msg"))
    out = []
    for rows, what in ((decided, "slot %d of group %s decided as %s here, as %s elsewhere"),
                       (ordered, "position %d of topic %s ordered as %s here, as %s elsewhere")):
        per = Window.partitionBy("run", "key", "seq")
        values = rows.withColumn("values", F.collect_set("value").over(per)).filter(
            F.size("values") > 1)
        first = values.withColumn("other", F.array_join(
            F.array_remove(F.col("values"), F.col("value")), ","))
        out.append(violation_rows(first, F.format_string(
            what, F.col("seq"), F.col("key"), F.col("value"), F.col("other"))).distinct())
    return out[0].unionByName(out[1])


def decided_order_violations(trace: DataFrame, *, layer: str = "scribe") -> DataFrame:
    """Deliveries of ordered topics in ``layer`` that are not at their decided position, or
    that come at a position not above one the node delivered before."""
    trace = with_row_order(trace)
    ordered = _ordered(trace)
    first_per_position = ordered.groupBy("run", "key", "seq").agg(
        F.min("msg").alias("decided"))
    first_of_msg = ordered.groupBy("run", "key", "msg").agg(F.min("seq").alias("first_pos"))
    topics = ordered.select("run", "key").distinct()
    delivered = (trace.filter((F.col("event") == "deliver") & (F.col("layer") == layer)
                              & F.col("key").isNotNull())
                 .join(F.broadcast(topics), ["run", "key"]))
    in_order = Window.partitionBy("run", "node", "key").orderBy("t", ROW).rowsBetween(
        Window.unboundedPreceding, -1)
    rows = (delivered.withColumn("before", F.max("seq").over(in_order))
            .join(first_per_position, ["run", "key", "seq"], "left")
            .join(first_of_msg, ["run", "key", "msg"], "left"))
    bad = rows.filter(F.col("seq").isNull() | (F.col("seq") <= F.col("before"))
                      | F.col("decided").isNull() | (F.col("decided") != F.col("msg"))
                      | (F.col("first_pos") != F.col("seq")))
    detail = (F.when(F.col("seq").isNull(), F.format_string(
                  "topic %s: delivered with no position", F.col("key")))
              .when(F.col("seq") <= F.col("before"), F.format_string(
                  "topic %s: position %d delivered after position %d", F.col("key"),
                  F.col("seq"), F.col("before")))
              .when(F.col("decided").isNull(), F.format_string(
                  "topic %s: position %d was never decided", F.col("key"), F.col("seq")))
              .otherwise(F.format_string(
                  "topic %s: delivered at position %d, where %s was decided (first decided "
                  "at %s)", F.col("key"), F.col("seq"), F.col("decided"),
                  F.coalesce(F.col("first_pos").cast("string"), F.lit("no position")))))
    return violation_rows(bad, detail)


def acknowledged_lost_violations(trace: DataFrame) -> DataFrame:
    """Publishes acknowledged to their publisher (``acked``) that no node ever ordered."""
    acked = trace.filter((F.col("event") == "acked") & F.col("msg").isNotNull())
    ordered = _ordered(trace).select("run", "msg").distinct()
    lost = acked.join(ordered, ["run", "msg"], "left_anti")
    return violation_rows(lost, F.format_string(
        "topic %s: acknowledged to %s but never decided", F.col("key"), F.col("node")))


def paxos_checks() -> list[Check]:
    """The Paxos layer's checks; each is "not applicable" on a trace without its rows."""
    decide = (F.col("layer") == PAXOS_LAYER) & F.col("event").isin("decide", "ordered")
    ordered = (F.col("layer") == PAXOS_LAYER) & (F.col("event") == "ordered")
    return [
        Check("paxos agreement", decide & F.col("seq").isNotNull(),
              "no decide or ordered rows (layer paxos): no Multi-Paxos group here",
              paxos_agreement_violations, columns=("key", "seq", "msg", "info")),
        Check("decided order", ordered & F.col("msg").isNotNull(),
              "no ordered rows (layer paxos): no topic was ordered by replicated owners",
              decided_order_violations, columns=("key", "seq", "msg")),
        Check("acknowledged kept", F.col("event") == "acked",
              "no acked rows: no publish was acknowledged by replicated owners",
              acknowledged_lost_violations, columns=("key", "msg")),
    ]


#: ``paxos_metrics``'s columns (a test holds them to its plan's)
PAXOS_METRICS_SCHEMA = table_schema(
    "run string, group string, decided long, decisions_per_s double, decide_latency_p50 "
    "double, decide_latency_p95 double, decide_latency_p99 double, messages_per_decision "
    "double, leader_changes long, failovers long, election_max double, failover_mean "
    "double, failover_max double")


def paxos_metrics(trace: DataFrame) -> DataFrame:
    """Per (run, group): ``decided`` slots, ``decisions_per_s`` (over the span from the
    group's first decision to its last; null with fewer than two), ``decide_latency_p50/p95/
    p99`` (seconds from the leader's ``propose`` of a slot to its own ``decide``),
    ``messages_per_decision`` (paxos sends, traced with message rows, per decided slot; null
    without them), ``leader_changes`` (``elected`` rows) and ``failovers`` (crashes of the
    leader) with ``election_max``, ``failover_mean`` and ``failover_max`` (seconds, see
    ``leader_failovers``; 0 and nulls when no leader crashed)."""
    decides = _paxos(trace, "decide")
    proposes = _paxos(trace, "propose").groupBy("run", "key", "seq", "node").agg(
        F.min("t").alias("t_propose"))
    own = decides.groupBy("run", "key", "seq", "node").agg(F.min("t").alias("t_decide"))
    latency = proposes.join(own, ["run", "key", "seq", "node"]).select(
        "run", "key", (F.col("t_decide") - F.col("t_propose")).alias("latency"))
    quantiles = F.percentile_approx("latency", [0.5, 0.95, 0.99], 10_000)
    latencies = latency.groupBy("run", "key").agg(
        *[quantiles[i].alias(f"decide_latency_p{p}") for i, p in enumerate((50, 95, 99))])
    decided = decides.groupBy("run", "key").agg(
        F.countDistinct("seq").alias("decided"),
        F.try_divide(F.countDistinct("seq") - 1,
                     F.max(clock()) - F.min(clock())).alias("rate"))
    failovers = leader_failovers(trace).groupBy("run", "key").agg(
        F.count(F.lit(1)).alias("failovers"), F.max("election").alias("election_max"),
        F.avg("failover").alias("failover_mean"), F.max("failover").alias("failover_max"))
    paxos = trace.filter(F.col("layer") == PAXOS_LAYER)
    sends = paxos.filter(F.col("event") == "send").groupBy("run").agg(
        F.count(F.lit(1)).alias("paxos_sends"))
    elected = _paxos_rows(trace, "elected").groupBy("run", "key").agg(
        F.count(F.lit(1)).alias("leader_changes"))
    groups_per_run = decided.groupBy("run").agg(F.sum("decided").alias("run_decided"))
    groups = decided.select("run", "key").unionByName(elected.select("run", "key")).distinct()
    return (groups.join(decided, ["run", "key"], "left")
            .join(latencies, ["run", "key"], "left")
            .join(elected, ["run", "key"], "left")
            .join(failovers, ["run", "key"], "left")
            .join(groups_per_run, "run", "left")
            .join(sends, "run", "left")
            .select(F.col("run"), F.col("key").alias("group"),
                    F.coalesce(F.col("decided"), F.lit(0)).alias("decided"),
                    F.when(F.col("decided") > 1, F.col("rate")).alias("decisions_per_s"),
                    "decide_latency_p50", "decide_latency_p95", "decide_latency_p99",
                    (F.col("paxos_sends") / F.col("run_decided")).alias("messages_per_decision"),
                    F.coalesce(F.col("leader_changes"), F.lit(0)).alias("leader_changes"),
                    F.coalesce(F.col("failovers"), F.lit(0)).alias("failovers"),
                    "election_max", "failover_mean", "failover_max"))


def paxos_run_summary(metrics: DataFrame) -> DataFrame:
    """``paxos_metrics`` per run: ``PAXOS_RUN_COLUMNS`` (decisions/s summed over the run's
    groups, the largest group's value of the others)."""
    return metrics.groupBy("run").agg(
        F.sum("decisions_per_s").alias("decisions_per_s"),
        *[F.max(column).alias(column) for column in PAXOS_RUN_COLUMNS[1:]])


def leader_failovers(trace: DataFrame) -> DataFrame:
    """(run, key, leader, crashed_at, election, failover): each crash of a group's leader (the
    node of the group's latest ``elected`` row at or before its crash, on the shared clock; a
    killed process's inferred crash counts), the seconds from it to the next ``elected`` row of
    the group (``election``) and to the first ``decide`` row of that new leader, at that leader
    (``failover``: it waits for something to decide, as a client's first acknowledged write
    after a crash does); null where none came."""
    at = clock()
    elected = _paxos_rows(trace, "elected").select(
        "run", "key", F.col("node").alias("leader"), at.alias("elected_at"))
    crashes = membership_changes(trace).filter(F.col("event") == "crash").select(
        "run", F.col("node").alias("crashed"), F.col("at").alias("crashed_at"))
    latest = Window.partitionBy("run", "key", "crashed", "crashed_at").orderBy(
        F.col("elected_at").desc())
    led = (elected.join(crashes, "run")
           .filter(F.col("elected_at") <= F.col("crashed_at"))
           .withColumn("nth", F.row_number().over(latest)).filter(F.col("nth") == 1)
           .filter(F.col("leader") == F.col("crashed"))
           .select("run", "key", "leader", "crashed_at"))
    following = Window.partitionBy("run", "key", "leader", "crashed_at").orderBy("elected_at")
    successor = (led.join(elected.withColumnRenamed("leader", "successor"), ["run", "key"])
                 .filter(F.col("elected_at") > F.col("crashed_at"))
                 .withColumn("nth", F.row_number().over(following)).filter(F.col("nth") == 1)
                 .select("run", "key", "leader", "crashed_at", "successor", "elected_at"))
    decides = _paxos(trace, "decide").select(
        "run", "key", F.col("node").alias("successor"), at.alias("decided_at"))
    first_decision = (successor.join(decides, ["run", "key", "successor"])
                      .filter(F.col("decided_at") >= F.col("elected_at"))
                      .groupBy("run", "key", "leader", "crashed_at")
                      .agg(F.min("decided_at").alias("decided_at")))
    return (led.join(successor, ["run", "key", "leader", "crashed_at"], "left")
            .join(first_decision, ["run", "key", "leader", "crashed_at"], "left")
            .select("run", "key", "leader", "crashed_at",
                    (F.col("elected_at") - F.col("crashed_at")).alias("election"),
                    (F.col("decided_at") - F.col("crashed_at")).alias("failover")))

