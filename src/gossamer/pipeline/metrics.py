"""Metrics over a trace: pure ``DataFrame -> DataFrame`` transforms, per message, node or run.

Per-event work happens here, in Spark; the per-run tables these produce are small enough for
the driver to collect (a few rows per run), the per-message ones are written, not collected.

Clocks: a node lives in one process, so two rows of one node share run time ``t``; two nodes
may live in two processes whose ``t`` started at different moments, so a delay from a publish
at one node to a delivery at another is measured on ``wall``, the clock every process shares
(in a simulation ``wall`` is the run's epoch + ``t``: the same delays). A row without ``wall``
(a trace file older than the column) gives no cross-node delay: null, left out of latency
(``runs_without_wall`` names those runs).
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from .schema import (
    MEMBERSHIP_EVENTS,
    ROW,
    membership_changes,
    node_events,
    table_schema,
    with_row_order,
)

__all__ = [
    "LAYER_MESSAGES_SCHEMA",
    "LOOKUP_PERCENTILES",
    "PERCENTILES",
    "TOPIC_BALANCE_SCHEMA",
    "convergence_of",
    "convergence_summary",
    "convergence_times",
    "delivery_delays",
    "failure_fraction",
    "latency_cdf",
    "latency_of",
    "latency_samples",
    "latency_summary",
    "layer_messages_per_publish",
    "load_histogram",
    "lookup_hop_counts",
    "lookup_samples",
    "lookup_summary",
    "messages_per_operation",
    "node_load",
    "redundancy",
    "run_overview",
    "runs_without_wall",
    "throughput",
    "topic_balance",
]

PERCENTILES = (0.5, 0.95, 0.99)
_ACCURACY = 10_000  # percentile_approx: relative error about 1/10,000 of the rank


def _in_layers(layers: Sequence[str] | None) -> Column:
    return F.lit(True) if layers is None else F.col("layer").isin(list(layers))


def _publishes(trace: DataFrame, layers: Sequence[str] | None) -> DataFrame:
    """(run, layer, msg, t_publish, wall_publish, publisher): the first publish row of each
    message (both clocks from that one row)."""
    first = F.min(F.struct("t", "wall", "node"))
    return trace.filter((F.col("event") == "publish") & _in_layers(layers)).groupBy(
        "run", "layer", "msg").agg(first.alias("first")).select(
        "run", "layer", "msg", F.col("first.t").alias("t_publish"),
        F.col("first.wall").alias("wall_publish"), F.col("first.node").alias("publisher"))


def _first_deliveries(trace: DataFrame, layers: Sequence[str] | None) -> DataFrame:
    """(run, layer, msg, node, t_deliver, wall_deliver): each node's first delivery."""
    first = F.min(F.struct("t", "wall"))
    return trace.filter((F.col("event") == "deliver") & _in_layers(layers)).groupBy(
        "run", "layer", "msg", "node").agg(first.alias("first")).select(
        "run", "layer", "msg", "node", F.col("first.t").alias("t_deliver"),
        F.col("first.wall").alias("wall_deliver"))


def _delivery_delay() -> Column:
    """Publish to delivery of a joined (publish, delivery) row: on ``t`` at the publisher
    itself (one process), on ``wall`` at any other node; null without ``wall``."""
    return F.when(F.col("node") == F.col("publisher"),
                  F.col("t_deliver") - F.col("t_publish")).otherwise(
        F.col("wall_deliver") - F.col("wall_publish"))


def _percentiles(column: str, prefix: str) -> list[Column]:
    quantiles = F.percentile_approx(column, list(PERCENTILES), _ACCURACY)
    return [quantiles[i].alias(f"{prefix}_p{round(q * 100)}") for i, q in enumerate(PERCENTILES)]


# -- latency ------------------------------------------------------------------------------------


def delivery_delays(trace: DataFrame, *, layers: Sequence[str] | None = None) -> DataFrame:
    """(run, layer, msg, node, publisher, t_publish, delay): each node's first delivery of a
    published message, joined to the message's first publish, and the delay from one to the
    other (see the module's note on clocks; null without ``wall``). Latency and convergence
    are both made of it (``latency_of``, ``convergence_of``), so a caller that wants both
    joins once."""
    joined = _first_deliveries(trace, layers).join(_publishes(trace, layers),
                                                   ["run", "layer", "msg"])
    return joined.select("run", "layer", "msg", "node", "publisher", "t_publish",
                         _delivery_delay().alias("delay"))


def latency_samples(trace: DataFrame, *, layers: Sequence[str] | None = None) -> DataFrame:
    """(run, layer, msg, node, latency): publish to first delivery at every other node, on
    ``wall`` (see the module's note on clocks); deliveries whose rows lack ``wall`` are left
    out."""
    return latency_of(delivery_delays(trace, layers=layers))


def latency_of(delays: DataFrame) -> DataFrame:
    """``latency_samples`` from ``delivery_delays``."""
    return delays.filter((F.col("node") != F.col("publisher")) & F.col("delay").isNotNull()
                         ).select("run", "layer", "msg", "node", F.col("delay").alias("latency"))


def runs_without_wall(trace: DataFrame) -> DataFrame:
    """(run, rows): runs with rows that have no ``wall`` (trace files written before the
    column), for which cross-node latency and convergence are not available."""
    return (node_events(trace).groupBy("run").agg(F.sum("no_wall").alias("rows"))
            .filter(F.col("rows") > 0))


def latency_summary(samples: DataFrame, *, by: Sequence[str] = ("run", "layer")) -> DataFrame:
    """Per ``by`` (run and layer): deliveries, mean, p50/p95/p99 and max latency (seconds)."""
    return samples.groupBy(*by).agg(
        F.count(F.lit(1)).alias("deliveries"),
        F.avg("latency").alias("latency_mean"),
        *_percentiles("latency", "latency"),
        F.max("latency").alias("latency_max"),
    )


def latency_cdf(samples: DataFrame, *, points: int = 50) -> DataFrame:
    """(run, fraction, latency): ``points`` quantiles per run, for plotting a CDF."""
    if points < 2:
        raise ValueError(f"points must be >= 2, got {points}")
    fractions = [i / (points - 1) for i in range(points)]
    per_run = samples.groupBy("run").agg(
        F.percentile_approx("latency", fractions, _ACCURACY).alias("quantiles"))
    return per_run.select("run", F.posexplode("quantiles").alias("i", "latency")).select(
        "run", (F.col("i") / F.lit(points - 1)).alias("fraction"), "latency")


# -- messages and load ---------------------------------------------------------------------------


def _rows_of(event: str) -> Column:
    """Over ``node_events`` rows: how many trace rows of ``event``."""
    return F.sum(F.when(F.col("event") == event, F.col("rows")).otherwise(0))


def _bytes_of(event: str) -> Column:
    """Over ``node_events`` rows: the ``size`` of the trace rows of ``event``, summed."""
    return F.sum(F.when(F.col("event") == event, F.col("size_sum")).otherwise(0))


def messages_per_operation(trace: DataFrame) -> DataFrame:
    """Per run: publishes, sends, bytes sent, and sends and bytes per publish."""
    return node_events(trace).groupBy("run").agg(
        _rows_of("publish").alias("operations"),
        _rows_of("send").alias("messages"),
        _bytes_of("send").alias("bytes"),
    ).withColumn(
        "messages_per_operation",
        F.when(F.col("operations") > 0, F.col("messages") / F.col("operations")),
    ).withColumn(
        "bytes_per_operation",
        F.when(F.col("operations") > 0, F.col("bytes") / F.col("operations")),
    )


def node_load(trace: DataFrame) -> DataFrame:
    """Per (run, node): messages sent and received, bytes, deliveries, and what its durable
    store holds: ``stored`` bytes and ``stored_items`` from its latest ``stored`` row (null
    when the node traced none)."""
    events = node_events(trace).filter(F.col("event").isin("send", "recv", "deliver", "stored"))
    counts = events.groupBy("run", "node").agg(
        _rows_of("send").alias("sent"), _rows_of("recv").alias("received"),
        _rows_of("deliver").alias("delivered"),
        _bytes_of("send").alias("bytes_sent"), _bytes_of("recv").alias("bytes_received"))
    latest = (with_row_order(trace).filter(F.col("event") == "stored").groupBy("run", "node")
              .agg(F.max_by(F.struct(F.col("size").cast("long").alias("size"), "info"),
                            F.struct("t", ROW)).alias("latest")))
    return counts.join(latest, ["run", "node"], "left").select(
        "run", "node", "sent", "received", "delivered", "bytes_sent", "bytes_received",
        F.col("latest.size").alias("stored"),
        F.get_json_object(F.col("latest.info"), "$.items").cast("long").alias("stored_items"),
    ).withColumn("load", F.col("sent") + F.col("received"))


def load_histogram(load: DataFrame, *, bins: int = 30) -> DataFrame:
    """(bin, low, high, nodes): how per-node load (sent + received) spreads, all runs."""
    if bins < 1:
        raise ValueError(f"bins must be >= 1, got {bins}")
    bounds = load.agg(F.min("load").alias("lo"), F.max("load").alias("hi"))
    width = F.greatest((F.col("hi") - F.col("lo")) / bins, F.lit(1.0))
    binned = load.crossJoin(bounds).withColumn(
        "bin", F.least(F.floor((F.col("load") - F.col("lo")) / width), F.lit(bins - 1)))
    return binned.groupBy("bin").agg(
        F.first(F.col("lo") + F.col("bin") * width).alias("low"),
        F.first(F.col("lo") + (F.col("bin") + 1) * width).alias("high"),
        F.count(F.lit(1)).alias("nodes"),
    ).orderBy("bin")


def throughput(trace: DataFrame, *, bucket: float = 1.0) -> DataFrame:
    """(run, second, deliveries): deliveries per ``bucket`` seconds (``second`` = bucket
    start)."""
    if bucket <= 0:
        raise ValueError(f"bucket must be > 0, got {bucket}")
    deliveries = trace.filter(F.col("event") == "deliver")
    return deliveries.groupBy(
        "run", (F.floor(F.col("t") / bucket) * bucket).alias("second")).agg(
        F.count(F.lit(1)).alias("deliveries")).withColumn(
        "per_second", F.col("deliveries") / F.lit(bucket))


# -- convergence and redundancy --------------------------------------------------------------


def convergence_times(trace: DataFrame, *, layers: Sequence[str] | None = None) -> DataFrame:
    """(run, layer, msg, t_publish, last_delivery, deliveries, convergence): per message, the
    longest publish-to-delivery delay anywhere (each measured as in ``latency_samples``; null
    when a delivery's delay is unknown for want of ``wall``) and ``last_delivery`` =
    ``t_publish`` + that, on the publisher's clock."""
    return convergence_of(delivery_delays(trace, layers=layers))


def convergence_of(delays: DataFrame) -> DataFrame:
    """``convergence_times`` from ``delivery_delays``."""
    per_message = delays.groupBy("run", "layer", "msg", "t_publish").agg(
        F.count(F.lit(1)).alias("deliveries"),
        F.max("delay").alias("longest"),
        F.count("delay").alias("measured"))
    convergence = F.when(F.col("measured") == F.col("deliveries"), F.col("longest"))
    return per_message.select(
        "run", "layer", "msg", "t_publish", (F.col("t_publish") + convergence).alias(
            "last_delivery"), "deliveries", convergence.alias("convergence"))


def convergence_summary(times: DataFrame) -> DataFrame:
    """Per run: convergence time p50/p95/p99 and max (seconds)."""
    return times.groupBy("run").agg(
        *_percentiles("convergence", "convergence"),
        F.max("convergence").alias("convergence_max"),
    )


def redundancy(trace: DataFrame, *, layers: Sequence[str] | None = None) -> DataFrame:
    """Per run: mean RMR (m / (n - 1) - 1: m payload receipts of a message, n the nodes that
    delivered it) and, when deliver rows carry ``info.hop``, the mean and max last delivery
    hop."""
    published = _publishes(trace, layers).select("run", "msg")
    hop = F.get_json_object(F.col("info"), "$.hop").cast("long")
    is_recv = F.col("event") == "recv"
    is_deliver = (F.col("event") == "deliver") & _in_layers(layers)
    # receipts (in any layer) and deliveries in one pass over the trace, not a shuffle each
    per_message = (trace.filter(is_recv | is_deliver).groupBy("run", "msg").agg(
        F.sum(F.when(is_recv, 1)).alias("receipts"),  # null: no recv row
        F.size(F.collect_set(F.when(is_deliver, F.col("node")))).alias("nodes"),
        F.max(F.when(is_deliver, hop)).alias("last_hop"),
    ).filter(F.col("nodes") > 0).join(published, ["run", "msg"]))
    # a message delivered at several nodes with no recv row at all: the run does not trace
    # receipts (seed 003's clients), so RMR is not applicable (null), not -1
    rmr = F.when((F.col("nodes") > 1) & F.col("receipts").isNotNull(),
                 F.col("receipts") / (F.col("nodes") - 1) - 1)
    return per_message.groupBy("run").agg(
        F.avg(rmr).alias("rmr"),
        F.avg("last_hop").alias("last_hop_mean"),
        F.max("last_hop").alias("last_hop_max"),
    )


# -- lookups (Chord) ---------------------------------------------------------------------------

LOOKUP_PERCENTILES = (0.5, 0.99)


def lookup_samples(trace: DataFrame, *, layer: str = "chord") -> DataFrame:
    """(run, node, t, hops, root): one row per ``lookup`` row of ``layer`` with ``info.hops``
    (``info.root``: the node the lookup ended at)."""
    info = F.col("info")
    hops = F.get_json_object(info, "$.hops").cast("long")
    return (trace.filter((F.col("event") == "lookup") & (F.col("layer") == layer))
            .select("run", "node", "t", hops.alias("hops"),
                    F.get_json_object(info, "$.root").alias("root"))
            .filter(F.col("hops").isNotNull()))


def lookup_summary(samples: DataFrame, *, by: Sequence[str] = ("run",)) -> DataFrame:
    """Per ``by`` (default each run; ``()``: all samples in one row, ``("nodes",)`` with a node
    count joined in): lookups, mean, p50/p99 and max hops."""
    quantiles = F.percentile_approx("hops", list(LOOKUP_PERCENTILES), _ACCURACY)
    return samples.groupBy(*by).agg(
        F.count(F.lit(1)).alias("lookups"),
        F.avg("hops").alias("hops_mean"),
        *[quantiles[i].alias(f"hops_p{round(q * 100)}")
          for i, q in enumerate(LOOKUP_PERCENTILES)],
        F.max("hops").alias("hops_max"),
    )


def lookup_hop_counts(samples: DataFrame, *, by: Sequence[str] = ()) -> DataFrame:
    """(``by``..., hops, lookups): how many lookups took each number of hops."""
    return samples.groupBy(*by, "hops").agg(F.count(F.lit(1)).alias("lookups"))


# -- topic ownership (Chord roots) -------------------------------------------------------------


#: ``topic_balance``'s columns (a test holds them to its plan's)
TOPIC_BALANCE_SCHEMA = table_schema(
    "run string, topics long, nodes long, owned_expected double, owned_min long, owned_max "
    "long, owned_p99 long, owned_p99_over_mean double")


def topic_balance(trace: DataFrame, *, layer: str = "pubsub") -> DataFrame:
    """Per run with ``owner`` rows (``layer``, key = topic, node = its owner): topics, nodes
    (the members up at the end: nodes with rows outside layer ``sim`` and no crash or leave as
    their last membership change), and topics owned per node: expected (topics / nodes),
    min (0 when some node owns none), max, the 99th percentile and that percentile over the
    mean owned per node (the load spread; the mean is topics / nodes when each topic has one
    owner). A topic with several owners counts for each."""
    owners = (trace.filter((F.col("event") == "owner") & (F.col("layer") == layer)
                           & F.col("key").isNotNull())
              .select("run", "node", "key").distinct())
    per_node = owners.groupBy("run", "node").agg(F.count(F.lit(1)).alias("owned"))
    last_change = membership_changes(trace).groupBy("run", "node").agg(
        F.max_by("event", F.struct("at", ROW)).alias("last"))
    down = last_change.filter(F.col("last").isin("crash", "leave")).select("run", "node")
    members = (node_events(trace).filter((F.col("layer") != "sim") & F.col("node").isNotNull())
               .select("run", "node").distinct()
               .join(down, ["run", "node"], "left_anti")
               .join(owners.select("run").distinct(), "run", "left_semi"))
    counted = members.join(per_node, ["run", "node"], "left").select(
        "run", "node", F.coalesce(F.col("owned"), F.lit(0)).alias("owned"))
    topics = owners.groupBy("run").agg(F.countDistinct("key").alias("topics"))
    return counted.groupBy("run").agg(
        F.count(F.lit(1)).alias("nodes"),
        F.min("owned").alias("owned_min"), F.max("owned").alias("owned_max"),
        F.percentile_approx("owned", 0.99, _ACCURACY).alias("owned_p99"),
        F.avg("owned").alias("owned_mean"),
    ).join(topics, "run").withColumn(
        "owned_expected", F.col("topics") / F.col("nodes")
    ).withColumn(
        "owned_p99_over_mean",
        F.when(F.col("owned_mean") > 0, F.col("owned_p99") / F.col("owned_mean")),
    ).select("run", "topics", "nodes", "owned_expected", "owned_min", "owned_max", "owned_p99",
             "owned_p99_over_mean")


#: ``layer_messages_per_publish``'s columns (a test holds them to its plan's)
LAYER_MESSAGES_SCHEMA = table_schema(
    "run string, sender_layer string, sent long, publishes long, per_publish double")


def layer_messages_per_publish(trace: DataFrame, *, layer: str = "pubsub") -> DataFrame:
    """Per run with ``publish`` rows in ``layer``: those publishes and, per layer that sent
    messages, its sends per publish (columns ``sent_<layer>`` and ``per_publish_<layer>`` are
    not fixed, so this is long: run, publishes, sender_layer, sent, per_publish)."""
    events = node_events(trace)
    publishes = (events.filter((F.col("event") == "publish") & (F.col("layer") == layer))
                 .groupBy("run").agg(F.sum("rows").alias("publishes")))
    sends = (events.filter(F.col("event") == "send")
             .groupBy("run", F.col("layer").alias("sender_layer"))
             .agg(F.sum("rows").alias("sent")))
    return sends.join(publishes, "run").withColumn(
        "per_publish", F.col("sent") / F.col("publishes"))


# -- runs --------------------------------------------------------------------------------------


def failure_fraction(trace: DataFrame) -> DataFrame:
    """Per run: members, nodes that crashed at least once before the run's end (a killed
    process counts: see ``membership_changes``; a node that left cleanly did not fail), and
    their fraction."""
    members = node_events(trace).filter((F.col("layer") != "sim") | F.col("event").isin(
        list(MEMBERSHIP_EVENTS))).filter(F.col("node").isNotNull())
    failed = (membership_changes(trace).filter(F.col("event") == "crash")
              .groupBy("run").agg(F.countDistinct("node").alias("failed_nodes")))
    return (members.groupBy("run").agg(F.countDistinct("node").alias("nodes"))
            .join(failed, "run", "left")
            .select("run", "nodes", F.coalesce("failed_nodes", F.lit(0)).alias("failed_nodes"))
            .withColumn("failure_fraction", F.col("failed_nodes") / F.col("nodes")))


def run_overview(trace: DataFrame) -> DataFrame:
    """Per run: rows, time span, and the offered load (publishes per second while
    publishing)."""
    publish = F.col("event") == "publish"
    overview = node_events(trace).groupBy("run").agg(
        F.sum("rows").alias("rows"),
        F.min("t_min").alias("t_start"), F.max("t_max").alias("t_end"),
        _rows_of("publish").alias("publishes"),
        F.min(F.when(publish, F.col("t_min"))).alias("first_publish"),
        F.max(F.when(publish, F.col("t_max"))).alias("last_publish"),
    )
    span = F.col("last_publish") - F.col("first_publish")
    return overview.withColumn(
        "offered_load",
        F.when(span > 0, (F.col("publishes") - 1) / span),
    ).drop("first_publish", "last_publish")

