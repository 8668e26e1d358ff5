"""Metrics of round-based state sync (seed 002, APSYN) on the trace schema: how long rounds
take, how long an applied change takes to be visible at every peer that sees it, and what the
server answered, per run and session.

Reads the sync server's ``round`` rows (``key`` the session, ``seq`` the round, ``info``:
``requests``, ``applied``, ``bytes`` = the round's sync frames written to the peers,
``codes`` = status code -> count), the ``sync_apply`` rows of the
server and the peers (``msg`` the action's id, ``session:ROUND:digest``, the same everywhere;
at the server ``origin`` the requesting peer, or ``info.parts`` for an update that merges
several requests) and the peers' ``sync_request`` rows (``origin`` the peer, ``info.action``
the digest its action's id ends with when the server sends it as it was asked).
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from .check_rows import info_field, layer_filter
from .round_checks import APPLY, ROUND
from .schema import ROW, clock, table_schema, with_row_order

__all__ = ["CONFLICT_CODES", "ROUND_METRICS_SCHEMA", "ROUND_RUN_COLUMNS", "conflicts_of",
           "round_metrics", "round_run_summary"]

#: the status codes of a request that met another on the same property in its round (seed
#: 002's code table: preferred or inferior, by rule or by majority)
CONFLICT_CODES = ("22", "24", "32", "34")
#: the columns of ``round_metrics`` that the runs table carries (plotted against a sweep): the
#: largest session's value
ROUND_RUN_COLUMNS = ("round_time_p50", "round_time_p99", "visible_p50", "visible_p99",
                     "request_visible_p50", "request_visible_p99", "conflicts_per_round",
                     "bytes_per_round")
REQUEST = "sync_request"
_ROUND_INFO = T.StructType([
    T.StructField("requests", T.LongType()),
    T.StructField("applied", T.LongType()),
    T.StructField("bytes", T.LongType()),
    T.StructField("codes", T.MapType(T.StringType(), T.LongType())),
])
#: a merged update's ``info.parts``: the requests it carries, ``[origin, digest]`` each
_PARTS = T.ArrayType(T.ArrayType(T.StringType()))
_QUANTILES = [0.5, 0.99]
_ACCURACY = 10_000
#: an action id is ``session:ROUND:digest`` (``protocols.appsync.server.action_id``)
_SESSION_OF_ACTION = r"^(.*):[0-9A-F]{4}:[0-9a-f]+$"
_DIGEST_OF_ACTION = r":([0-9a-f]+)$"


def _sum_of(values: Column) -> Column:
    return F.aggregate(values, F.lit(0).cast("long"), lambda total, x: total + x)


#: ``round_metrics``'s columns (a test holds them to its plan's)
ROUND_METRICS_SCHEMA = table_schema(
    "run string, session string, rounds long, round_time_p50 double, round_time_p99 double, "
    "requests_per_round double, applied_per_round double, conflicts_per_round double, "
    "bytes_per_round double, codes string, visible_p50 double, visible_p99 double, "
    "request_visible_p50 double, request_visible_p99 double")


def round_metrics(trace: DataFrame, *, layers: Sequence[str] = ("appsync",)) -> DataFrame:
    """Per (run, session): ``rounds``; ``round_time_p50/p99`` (seconds between one round and
    the next at the server, on the shared clock); ``requests_per_round``,
    ``applied_per_round`` and ``conflicts_per_round`` (requests answered with a
    ``CONFLICT_CODES`` status); ``bytes_per_round`` (the sync frames the server wrote to its
    peers, every copy counted; null on a trace from before rounds carried it); ``codes``
    (JSON: status code -> requests answered with it);
    ``visible_p50/p99`` (seconds from the server applying an action to the last peer that
    applies it, over the actions some peer applied; null when none did) and
    ``request_visible_p50/p99`` (from the peer's request, its ``sync_request`` row, to the last
    peer applying it: the request is matched to the server's first apply of the same peer's
    action with that digest at or after it; null without request rows)."""
    rows = with_row_order(trace).filter(layer_filter(layers))
    info = F.from_json(F.col("info"), _ROUND_INFO)
    rounds = (rows.filter((F.col("event") == ROUND) & F.col("key").isNotNull())
              .select("run", "node", "key", "seq", ROW, clock().alias("at"),
                      info.alias("info")))
    in_order = Window.partitionBy("run", "node", "key").orderBy("at", ROW)
    gaps = (rounds.withColumn("gap", F.col("at") - F.lag("at").over(in_order))
            .filter(F.col("gap").isNotNull()))
    gap_quantiles = F.percentile_approx("gap", _QUANTILES, _ACCURACY)
    timing = gaps.groupBy("run", "key").agg(
        gap_quantiles[0].alias("round_time_p50"), gap_quantiles[1].alias("round_time_p99"))
    codes = rounds.select("run", "key", F.col("info.codes").alias("codes"))
    per_round = (rounds.withColumn("conflicts", conflicts_of(F.col("info.codes")))
                 .groupBy("run", "key").agg(
                     F.count(F.lit(1)).alias("rounds"),
                     F.avg(F.coalesce(F.col("info.requests"), F.lit(0))).alias(
                         "requests_per_round"),
                     F.avg(F.coalesce(F.col("info.applied"), F.lit(0))).alias(
                         "applied_per_round"),
                     F.avg("conflicts").alias("conflicts_per_round"),
                     F.avg("info.bytes").alias("bytes_per_round")))
    totals = (codes.select("run", "key", F.explode("codes").alias("code", "n"))
              .groupBy("run", "key", "code").agg(F.sum("n").alias("n"))
              .groupBy("run", "key").agg(F.to_json(F.map_from_entries(
                  F.sort_array(F.collect_list(F.struct("code", "n"))))).alias("codes")))
    servers = rounds.select("run", "node").distinct()
    applies = rows.filter((F.col("event") == APPLY) & F.col("msg").isNotNull()).select(
        "run", "node", "origin", "msg", clock().alias("at"),
        F.from_json(info_field("parts"), _PARTS).alias("parts"))
    server_applies = applies.join(F.broadcast(servers), ["run", "node"], "left_semi")
    at_server = server_applies.groupBy("run", "msg").agg(F.min("at").alias("applied_at"))
    last_peer = (applies.join(F.broadcast(servers), ["run", "node"], "left_anti")
                 .groupBy("run", "msg").agg(F.max("at").alias("visible_at")))
    visible_quantiles = F.percentile_approx("visible", _QUANTILES, _ACCURACY)
    session = F.regexp_extract("msg", _SESSION_OF_ACTION, 1).alias("key")
    visibility = (at_server.join(last_peer, ["run", "msg"])
                  .select("run", session,
                          (F.col("visible_at") - F.col("applied_at")).alias("visible"))
                  .groupBy("run", "key").agg(visible_quantiles[0].alias("visible_p50"),
                                             visible_quantiles[1].alias("visible_p99")))
    requests = (rows.filter((F.col("event") == REQUEST) & F.col("origin").isNotNull())
                .select("run", "origin", info_field("action").alias("digest"),
                        clock().alias("requested_at")))
    # a request is taken by the update that carries it: its own, or one merging several
    # (``info.parts``: [origin, digest] of each request it carries)
    carried = F.explode(F.coalesce("parts", F.array(F.array(
        F.col("origin"), F.regexp_extract("msg", _DIGEST_OF_ACTION, 1))))).alias("part")
    taken = (server_applies.select("run", "msg", "at", carried)
             .select("run", "msg", "at", F.col("part")[0].alias("origin"),
                     F.col("part")[1].alias("digest")))
    first_taken = (requests.join(taken, ["run", "origin", "digest"])
                   .filter(F.col("at") >= F.col("requested_at"))
                   .groupBy("run", "origin", "digest", "requested_at")
                   .agg(F.min_by("msg", "at").alias("msg")))
    request_quantiles = F.percentile_approx("request_visible", _QUANTILES, _ACCURACY)
    request_visibility = (first_taken.join(last_peer, ["run", "msg"])
                          .select("run", session, (F.col("visible_at") - F.col("requested_at"))
                                  .alias("request_visible"))
                          .groupBy("run", "key").agg(
                              request_quantiles[0].alias("request_visible_p50"),
                              request_quantiles[1].alias("request_visible_p99")))
    return (per_round.join(timing, ["run", "key"], "left")
            .join(visibility, ["run", "key"], "left")
            .join(request_visibility, ["run", "key"], "left")
            .join(totals, ["run", "key"], "left")
            .select("run", F.col("key").alias("session"), "rounds", "round_time_p50",
                    "round_time_p99", "requests_per_round", "applied_per_round",
                    "conflicts_per_round", "bytes_per_round", "codes", "visible_p50",
                    "visible_p99",
                    "request_visible_p50", "request_visible_p99"))


def conflicts_of(codes: Column) -> Column:
    """How many requests of a round's ``codes`` map met a conflict (``CONFLICT_CODES``)."""
    return F.coalesce(_sum_of(F.map_values(F.map_filter(
        codes, lambda code, _n: code.isin(*CONFLICT_CODES)))), F.lit(0).cast("long"))


def round_run_summary(metrics: DataFrame) -> DataFrame:
    """``round_metrics`` per run: ``ROUND_RUN_COLUMNS``, the largest session's value."""
    return metrics.groupBy("run").agg(*[F.max(c).alias(c) for c in ROUND_RUN_COLUMNS])
