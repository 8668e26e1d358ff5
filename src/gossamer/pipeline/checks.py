"""Guarantee checks over a trace: pure ``DataFrame -> DataFrame`` transforms yielding violations.

Each ``*_violations`` function takes the trace (with or without ``row``) and its config as
keyword arguments and returns rows ``(run, node, msg, origin, seq, detail)``. A ``Check`` pairs
one of them with the evidence that makes it applicable; ``evaluate`` turns checks into verdicts
(pass, fail, or not applicable with the reason) without collecting any per-event data.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from .errors import PipelineError
from .schema import (
    MEMBERSHIP_EVENTS,
    ROW,
    RUNTIME_LAYERS,
    UP_EVENTS,
    clock,
    membership_changes,
    with_row_order,
)

__all__ = [
    "BASE_COLUMNS",
    "VIOLATION_COLUMNS",
    "Check",
    "CheckConfig",
    "CheckResult",
    "Status",
    "atomicity_check",
    "causal_check",
    "causal_violations",
    "convergence_check",
    "convergence_violations",
    "default_checks",
    "duplicate_violations",
    "duplicates_check",
    "evaluate",
    "expected_deliveries",
    "fifo_check",
    "fifo_violations",
    "member_status",
    "object_states",
    "own_delivery_check",
    "own_delivery_violations",
    "reliability_check",
    "reliability_summary",
    "reliability_violations",
    "subscription_intervals",
    "total_order_check",
    "total_order_violations",
    "validity_check",
    "validity_violations",
]

VIOLATION_COLUMNS = ("run", "node", "msg", "origin", "seq", "detail")
# what a violation says, shared by the batch checks here and the live ones (``live``)
FIFO_REORDERED = "reordered: seq %d after seq %d"
FIFO_GAP = "gap: seq %d delivered, expected %d"
FIFO_AGAIN = "seq %d delivered again, as another message"
CAUSAL_PREFIX = "causal past not respected: "
OWED_DETAIL = "%s: it was up when %s published it at t=%.6f and %s"
_UP_AT_END, _LEFT_CLEANLY, _CRASHED = "up at the end", "left cleanly", "crashed"
_VECTOR = T.StructType([T.StructField("vector", T.MapType(T.StringType(), T.LongType()))])


class Status(enum.Enum):
    PASS = "pass"
    FAIL = "fail"
    NOT_APPLICABLE = "not applicable"
    #: the check could not be run on this trace (a column it needs is missing)
    ERROR = "error"


# -- helpers ---------------------------------------------------------------------------------


def _in_layers(layers: Sequence[str] | None) -> Column:
    return F.lit(True) if layers is None else F.col("layer").isin(list(layers))


def _deliveries(trace: DataFrame, layers: Sequence[str] | None) -> DataFrame:
    return with_row_order(trace).filter((F.col("event") == "deliver") & _in_layers(layers))


def _before(t1: Column, row1: Column, t2: Column, row2: Column) -> Column:
    """(t1, row1) comes strictly before (t2, row2) in "t, then row order"."""
    return (t1 < t2) | ((t1 == t2) & (row1 < row2))


def _shape(frame: DataFrame, detail: Column) -> DataFrame:
    """Violation rows in the one shape every check returns."""
    return frame.select(
        F.col("run").cast("string").alias("run"),
        F.col("node").cast("string").alias("node"),
        F.col("msg").cast("string").alias("msg"),
        F.col("origin").cast("string").alias("origin"),
        F.col("seq").cast("long").alias("seq"),
        detail.cast("string").alias("detail"),
    )


def _revision(field: str) -> Column:
    return F.get_json_object(F.col("info"), f"$.{field}")


# -- who is up: the membership timeline --------------------------------------------------------


def member_status(trace: DataFrame, *, session_layers: Sequence[str] = ()) -> DataFrame:
    """Per (run, node): whether the node is judged, and the intervals in which it was up.

    Every node of the trace is a member: each node with a row outside layer ``sim`` (the
    simulator's own rows name node ``sim``) or a membership row. A node is up from the start
    unless its first membership change (see ``membership_changes``) is ``join``; ``join`` and
    ``recover`` bring it up, ``crash`` and ``leave`` take it down.

    ``judged``: the node is held to what it was owed, because it is up at the end, or it left
    cleanly (its last change is a ``leave`` of its runtime: its process stopped on purpose, it
    did not crash). A node down at the end after a crash owes nothing.

    Returns (run, node, judged, ending, last_interval, start_at, start_row, end_at, end_row),
    one row per interval in which the node was up, on the shared clock (null start: from the
    beginning; null end: to the end); ``last_interval`` marks the node's latest one, ``ending``
    says how the node ended ("up at the end", "left cleanly" or "crashed").
    """
    trace = with_row_order(trace)
    membership = (F.col("event").isin(list(MEMBERSHIP_EVENTS))
                  & F.col("layer").isin(*RUNTIME_LAYERS, *session_layers))
    members = (trace.filter(F.col("node").isNotNull() & (membership | (F.col("layer") != "sim")))
               .select("run", "node").distinct())
    in_order = Window.partitionBy("run", "node").orderBy("at", ROW)
    whole = in_order.rowsBetween(Window.unboundedPreceding, Window.unboundedFollowing)
    up_after = F.col("event").isin(*UP_EVENTS)
    final = F.last(F.struct("event", "layer")).over(whole)
    # one window pass over the membership rows gives every interval and the final state
    changes = membership_changes(trace, session_layers=session_layers).select(
        "run", "node", "at", ROW, "event", up_after.alias("up_after"),
        F.lead("at").over(in_order).alias("next_at"),
        F.lead(ROW).over(in_order).alias("next_row"),
        F.row_number().over(in_order).alias("nth"),
        final.alias("final"),
        F.max(F.when(up_after, F.struct("at", ROW))).over(whole).alias("last_up"),
    )
    ending = (F.when(F.col("final.event").isin(*UP_EVENTS), F.lit(_UP_AT_END))
              .when((F.col("final.event") == "leave")
                    & F.col("final.layer").isin(*RUNTIME_LAYERS), F.lit(_LEFT_CLEANLY))
              .otherwise(F.lit(_CRASHED)))
    changes = changes.withColumn("ending", ending)
    judged = F.col("ending") != _CRASHED
    no_time, no_row = F.lit(None).cast("double"), F.lit(None).cast("long")
    initial = changes.filter((F.col("nth") == 1) & (F.col("event") != "join")).select(
        "run", "node", judged.alias("judged"), "ending",
        F.col("last_up").isNull().alias("last_interval"),
        no_time.alias("start_at"), no_row.alias("start_row"),
        F.col("at").alias("end_at"), F.col(ROW).alias("end_row"))
    later = changes.filter("up_after").select(
        "run", "node", judged.alias("judged"), "ending",
        ((F.col("at") == F.col("last_up.at")) & (F.col(ROW) == F.col(f"last_up.{ROW}")))
        .alias("last_interval"),
        F.col("at").alias("start_at"), F.col(ROW).alias("start_row"),
        F.col("next_at").alias("end_at"), F.col("next_row").alias("end_row"))
    steady = members.join(changes.select("run", "node"), ["run", "node"], "left_anti").select(
        "run", "node", F.lit(True).alias("judged"), F.lit(_UP_AT_END).alias("ending"),
        F.lit(True).alias("last_interval"), no_time.alias("start_at"),
        no_row.alias("start_row"), no_time.alias("end_at"), no_row.alias("end_row"))
    return steady.unionByName(initial).unionByName(later)


def _up_during(start_at: Column, start_row: Column, end_at: Column, end_row: Column,
               at: Column, row: Column) -> Column:
    """(at, row) falls in the interval [start, end) (null bounds are open)."""
    return ((start_at.isNull() | _before(start_at, start_row, at, row))
            & (end_at.isNull() | _before(at, row, end_at, end_row)))


# -- who is owed what ----------------------------------------------------------------------------

_SUBSCRIPTION_EVENTS = ("subscribe", "unsubscribe")


def subscription_intervals(trace: DataFrame) -> DataFrame:
    """(run, key, node, sub_at, sub_row, unsub_at, unsub_row): when each node was subscribed
    to each topic (``key``), on the shared clock, from its ``subscribe`` row to its next
    ``subscribe`` or ``unsubscribe`` row of that key in any layer (null end: to the end of the
    run).

    A crash ends no subscription here: a node that recovers without subscribing again would
    still be expected to deliver (the pub/sub workloads do not recover crashed nodes)."""
    trace = with_row_order(trace)
    rows = trace.filter(F.col("event").isin(list(_SUBSCRIPTION_EVENTS))
                        & F.col("key").isNotNull() & F.col("node").isNotNull())
    in_order = Window.partitionBy("run", "key", "node").orderBy("at", ROW)
    return rows.select("run", "key", "node", "event", clock().alias("at"), ROW).select(
        "run", "key", "node", "event", F.col("at").alias("sub_at"),
        F.col(ROW).alias("sub_row"), F.lead("at").over(in_order).alias("unsub_at"),
        F.lead(ROW).over(in_order).alias("unsub_row"),
    ).filter(F.col("event") == "subscribe").drop("event")


def expected_deliveries(
    trace: DataFrame,
    *,
    layers: Sequence[str] | None = None,
    exempt_crashed_origins: bool = False,
    session_layers: Sequence[str] = (),
) -> DataFrame:
    """(run, layer, msg, origin, seq, key, node, t_publish, publisher, ending): who owes what.

    A node owes a message when it was up when the message was published (on the shared clock)
    and it is judged (up at the end, or it left cleanly: see ``member_status``). Who else:

    - topics: in a run that traces ``subscribe``/``unsubscribe`` rows (topic pub/sub, key =
      topic), a message with a ``key`` is owed only by the nodes subscribed to that key when it
      was published (in every layer that carries it: the pub/sub layer and the Scribe tree
      below it); a message without a key (a broadcast layer below pub/sub) by every member;
    - sessions (``session_layers``: what a node missed while away is not sent again, like seed
      003's clients): only by the nodes whose latest up interval covers the publish.

    With ``exempt_crashed_origins``, messages of a publisher that is not judged (crashed) are
    left out (a protocol without relaying cannot repair them). ``t_publish`` is the publisher's
    own run time ``t``; the node that recorded the publish row is ``publisher`` (the origin's
    server, for seed 003), the message's ``origin`` the node that created it.
    """
    trace = with_row_order(trace)
    status = member_status(trace, session_layers=session_layers)
    publishes = trace.filter((F.col("event") == "publish") & _in_layers(layers)).select(
        "run", "layer", "msg", "origin", "seq", "key", F.col("t").alias("t_publish"),
        clock().alias("at_publish"), F.col(ROW).alias("row_publish"),
        F.col("node").alias("publisher"),
    )
    if exempt_crashed_origins:
        alive = status.filter("judged").select(F.col("run"), F.col("node").alias("publisher"))
        publishes = publishes.join(F.broadcast(alive.distinct()), ["run", "publisher"],
                                   "left_semi")
    covers = _up_during(F.col("start_at"), F.col("start_row"), F.col("end_at"),
                        F.col("end_row"), F.col("at_publish"), F.col("row_publish"))
    # a few intervals per node: broadcast them, or one task would pair every message of a run
    # (the join key is the run) with every node; a node's intervals never overlap
    pairs = publishes.join(F.broadcast(status.filter("judged")), "run").filter(covers)
    if session_layers:
        pairs = pairs.filter(~F.col("layer").isin(list(session_layers))
                             | F.col("last_interval"))
    subscriptions = subscription_intervals(trace)
    topic_runs = subscriptions.select("run").distinct()
    scoped = F.col("key").isNotNull()
    everyone = (pairs.join(F.broadcast(topic_runs), "run", "left_anti")
                .unionByName(pairs.join(F.broadcast(topic_runs), "run", "left_semi")
                             .filter(~scoped)))
    subscribed = (
        _before(F.col("sub_at"), F.col("sub_row"), F.col("at_publish"), F.col("row_publish"))
        & (F.col("unsub_at").isNull()
           | _before(F.col("at_publish"), F.col("row_publish"), F.col("unsub_at"),
                     F.col("unsub_row"))))
    by_topic = (pairs.filter(scoped).join(subscriptions, ["run", "key", "node"])
                .filter(subscribed).select(*everyone.columns))
    return everyone.unionByName(by_topic).select(
        "run", "layer", "msg", "origin", "seq", "key", "node", "t_publish", "publisher",
        "ending")


def _delivered(trace: DataFrame, layers: Sequence[str] | None) -> DataFrame:
    """(run, layer, msg, node): the messages each node delivered."""
    return _deliveries(trace, layers).select("run", "layer", "msg", "node")


def _owed_detail(what: str) -> Column:
    return F.format_string(
        OWED_DETAIL, F.lit(what), F.col("publisher"), F.col("t_publish"),
        F.when(F.col("ending") == _LEFT_CLEANLY, F.lit("left cleanly later"))
        .otherwise(F.lit("is up at the end")))


def reliability_violations(
    trace: DataFrame,
    *,
    layers: Sequence[str] | None = None,
    exempt_crashed_origins: bool = False,
    session_layers: Sequence[str] = (),
) -> DataFrame:
    """Messages a node owed (``expected_deliveries``) without a ``deliver`` row there.

    The origin's own message is left to ``own_delivery_violations`` (where its service promises
    it), and the node that recorded the publish has the message."""
    expected = expected_deliveries(trace, layers=layers,
                                   exempt_crashed_origins=exempt_crashed_origins,
                                   session_layers=session_layers)
    others = expected.filter(~F.col("node").eqNullSafe(F.col("origin"))
                             & (F.col("node") != F.col("publisher")))
    missing = others.join(_delivered(trace, layers), ["run", "layer", "msg", "node"],
                          "left_anti")
    return _shape(missing, _owed_detail("not delivered"))


def own_delivery_violations(
    trace: DataFrame,
    *,
    layers: Sequence[str] | None = None,
    own_layers: Sequence[str] | None = None,
    session_layers: Sequence[str] = (),
) -> DataFrame:
    """Origins that did not deliver their own message in ``own_layers`` (None: the layers of
    ``layers`` in which some origin delivers its own messages, which shows the service does),
    where they owed it like any other node (``expected_deliveries``: up, judged, subscribed)."""
    scope = layers if own_layers is None else [
        layer for layer in own_layers if layers is None or layer in layers]
    expected = expected_deliveries(trace, layers=scope, session_layers=session_layers).filter(
        F.col("node") == F.col("origin"))
    if own_layers is None:
        promising = (_deliveries(trace, scope).filter(F.col("node") == F.col("origin"))
                     .select("layer").distinct())
        expected = expected.join(F.broadcast(promising), "layer", "left_semi")
    missing = expected.join(_delivered(trace, scope), ["run", "layer", "msg", "node"],
                            "left_anti")
    return _shape(missing, _owed_detail("its own message not delivered"))


def reliability_summary(
    trace: DataFrame,
    *,
    layers: Sequence[str] | None = None,
    exempt_crashed_origins: bool = False,
    session_layers: Sequence[str] = (),
) -> DataFrame:
    """Per (run, layer): published, expected, delivered (of expected) and reliability (the
    node that recorded a publish counts as having the message)."""
    expected = expected_deliveries(trace, layers=layers,
                                   exempt_crashed_origins=exempt_crashed_origins,
                                   session_layers=session_layers)
    published = with_row_order(trace).filter(
        (F.col("event") == "publish") & _in_layers(layers)).select("run", "layer", "msg", "node")
    delivered = (_delivered(trace, layers).unionByName(published).distinct()
                 .withColumn("hit", F.lit(1)))
    joined = expected.join(delivered, ["run", "layer", "msg", "node"], "left")
    return joined.groupBy("run", "layer").agg(
        F.countDistinct("msg").alias("published"),
        F.count(F.lit(1)).alias("expected"),
        F.count("hit").alias("delivered"),
    ).withColumn("reliability", F.col("delivered") / F.col("expected"))


# -- deliveries that must not happen -------------------------------------------------------------


def duplicate_violations(trace: DataFrame, *, layers: Sequence[str] | None = None) -> DataFrame:
    """Every delivery of a message at a node after its first one there, in each layer."""
    rows = _deliveries(trace, layers).filter(F.col("msg").isNotNull())
    in_order = Window.partitionBy("run", "layer", "node", "msg").orderBy("t", ROW)
    again = rows.select("*", F.row_number().over(in_order).alias("nth"),
                        F.first("t").over(in_order).alias("first_t")).filter(F.col("nth") > 1)
    return _shape(again, F.format_string(
        "delivered again in layer %s (delivery %d; the first at t=%.6f, this one at t=%.6f)",
        F.col("layer"), F.col("nth"), F.col("first_t"), F.col("t")))


def validity_violations(trace: DataFrame, *, layers: Sequence[str] | None = None,
                        complete: bool = True) -> DataFrame:
    """Deliveries that cannot be right whatever was lost: of a message nobody published in the
    run (in any layer), at a node that was down (crashed, or gone after it left: runtime
    membership only), or on a topic the node was not subscribed to when it delivered.
    ``complete`` False (trace files were left out: ``--allow-partial``): a publish may be in a
    file that was left out, so "never published" is not judged."""
    trace = with_row_order(trace)
    rows = _deliveries(trace, layers).filter(F.col("msg").isNotNull()).select(
        "run", "layer", "node", "msg", "origin", "seq", "key", "t", ROW, clock().alias("at"))
    published = trace.filter(F.col("event") == "publish").select("run", "msg").distinct()
    unpublished = rows.join(published, ["run", "msg"], "left_anti").select(
        "*", F.lit("delivered a message that was never published in the run").alias("what"))
    if not complete:
        unpublished = unpublished.limit(0)
    status = member_status(trace)
    up = rows.join(F.broadcast(status), ["run", "node"], "left").filter(_up_during(
        F.col("start_at"), F.col("start_row"), F.col("end_at"), F.col("end_row"),
        F.col("at"), F.col(ROW))).select("run", "layer", "node", "msg", "t", ROW).distinct()
    while_down = rows.join(up, ["run", "layer", "node", "msg", "t", ROW], "left_anti").select(
        "*", F.lit("delivered while the node was down (crashed or left)").alias("what"))
    subscriptions = subscription_intervals(trace)
    topic_runs = subscriptions.select("run").distinct()
    scoped = rows.filter(F.col("key").isNotNull()).join(F.broadcast(topic_runs), "run",
                                                        "left_semi")
    entitled = (scoped.join(subscriptions, ["run", "key", "node"]).filter(
        _before(F.col("sub_at"), F.col("sub_row"), F.col("at"), F.col(ROW))
        & (F.col("unsub_at").isNull()
           | _before(F.col("at"), F.col(ROW), F.col("unsub_at"), F.col("unsub_row"))))
        .select("run", "layer", "node", "msg", "t", ROW).distinct())
    unsubscribed = scoped.join(entitled, ["run", "layer", "node", "msg", "t", ROW],
                               "left_anti").select(
        "*", F.format_string("delivered on topic %s while not subscribed to it",
                             F.col("key")).alias("what"))
    found = unpublished.unionByName(while_down).unionByName(unsubscribed)
    return _shape(found, F.concat(F.col("what"), F.format_string(" (layer %s, t=%.6f)",
                                                                 F.col("layer"), F.col("t"))))


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
    rows = _deliveries(trace, layers).filter(
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
    return _shape(bad, detail)


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
        _before(F.col("change_at"), F.col("change_row"), F.col("at"), F.col(ROW)))
    latest = earlier.groupBy(*keys, "previous").agg(F.max(F.struct(
        "change_at", "change_row", "change_event")).alias("last"))
    previous, last = F.col("previous"), F.col("last")
    since_previous = previous.isNull() | _before(
        previous.getField("at"), previous.getField(ROW), last.getField("change_at"),
        last.getField("change_row"))
    away = ~last.getField("change_event").isin(*UP_EVENTS)
    excused = latest.filter(since_previous | away).select(*keys).distinct()
    return bad.join(excused, keys, "left_anti")


# -- causal order ------------------------------------------------------------------------------


def _vector() -> Column:
    return F.from_json(F.col("info"), _VECTOR).getField("vector")


def causal_violations(trace: DataFrame, *, layers: Sequence[str] | None = None) -> DataFrame:
    """Deliveries that came before their causal past, from ``info.vector`` of deliver rows.

    ``vector[k]`` counts k's messages the sender had delivered (``vector[origin]`` is the
    message's own seq). So delivering it at node n needs k's message ``vector[k]`` (origin:
    ``seq - 1``) delivered earlier at n, after at least that many of k's messages. A node's own
    messages are its own past and are not looked up.
    """
    rows = _deliveries(trace, layers)
    counted = Window.partitionBy("run", "layer", "node", "origin").orderBy("t", ROW)
    rows = rows.withColumn("from_origin", F.count(F.lit(1)).over(counted))
    firsts = rows.groupBy("run", "layer", "node", "origin", "seq").agg(
        F.min(F.struct("t", ROW, "from_origin")).alias("first"))
    needs = (rows.filter(_vector().isNotNull())
             .select("run", "layer", "node", "msg", "origin", "seq", "t", ROW,
                     F.explode(_vector()).alias("past_origin", "count"))
             .withColumn("needed", F.when(F.col("past_origin") == F.col("origin"),
                                          F.col("count") - 1).otherwise(F.col("count")))
             .filter((F.col("needed") >= 1) & (F.col("past_origin") != F.col("node"))))
    lookup = firsts.select(
        "run", "layer", "node", F.col("origin").alias("past_origin"),
        F.col("seq").alias("needed"), "first")
    joined = needs.join(lookup, ["run", "layer", "node", "past_origin", "needed"], "left")
    problem = (F.when(F.col("first").isNull(), F.lit("never delivered"))
               .when(~_before(F.col("first.t"), F.col(f"first.{ROW}"), F.col("t"),
                              F.col(ROW)), F.lit("delivered after it"))
               .when(F.col("first.from_origin") < F.col("needed"),
                     F.lit("delivered with earlier messages of its origin missing")))
    bad = joined.withColumn("problem", problem).filter(F.col("problem").isNotNull())
    per_delivery = bad.groupBy("run", "layer", "node", "msg", "origin", "seq", "t", ROW).agg(
        F.array_join(F.sort_array(F.collect_list(F.format_string(
            "%s:%d %s", F.col("past_origin"), F.col("needed"), F.col("problem")))), "; ")
        .alias("what"))
    return _shape(per_delivery, F.concat(F.lit(CAUSAL_PREFIX), F.col("what")))


# -- one sequence everywhere (total order, per-object revision order) --------------------------


def _sequence_divergence(rows: DataFrame, groups: Sequence[str], value: str,
                         label: str) -> DataFrame:
    """Per group, the first position at which a node's sequence of ``value`` leaves the
    sequence most nodes have there (prefix-consistent: a shorter sequence is fine)."""
    groups = list(groups)
    per_node = Window.partitionBy(*groups, "node").orderBy("t", ROW)
    positioned = rows.withColumn("position", F.row_number().over(per_node))
    votes = positioned.groupBy(*groups, "position", value).agg(F.count(F.lit(1)).alias("votes"))
    ranked = Window.partitionBy(*groups, "position").orderBy(F.col("votes").desc(),
                                                             F.col(value).asc())
    reference = (votes.withColumn("rank", F.row_number().over(ranked)).filter("rank = 1")
                 .select(*groups, "position", F.col(value).alias("reference")))
    differing = positioned.join(reference, [*groups, "position"]).filter(
        F.col(value) != F.col("reference"))
    first = differing.groupBy(*groups, "node").agg(F.min(F.struct(
        "position", "msg", "origin", "seq", F.col(value).alias("got"), "reference")).alias("d"))
    what = F.concat(F.lit(label), F.lit(" of key "), F.col("key")) if "key" in groups \
        else F.lit(label)
    return _shape(first.select(*groups, "node", "d.*"), F.format_string(
        "%s: position %d has %s where the other replicas have %s",
        what, F.col("position"), F.col("got"), F.col("reference")))


def total_order_violations(
    trace: DataFrame,
    *,
    layers: Sequence[str],
    per_key: bool = False,
    revision_field: str = "rev",
    base_field: str = "old",
) -> DataFrame:
    """Every replica delivers the same sequence of messages (per key with ``per_key``).

    Per key, in a layer whose replicas trace ``apply`` rows (seed 000: concurrent writes are
    delivered in causal order, in any order between them, and the object's order is settled
    by reverting the losers), the order is that of the writes each replica holds: each held
    write is based (``info.<base_field>``) on the one held before it, as for convergence, so
    replicas holding the same writes hold them in one order."""
    if not layers:
        raise PipelineError("total order needs the layers that promise it (layers=[...])")
    rows = _deliveries(trace, layers).filter(F.col("msg").isNotNull())
    if not per_key:
        return _sequence_divergence(rows, ["run", "layer"], "msg", "total order")
    applied = (trace.filter((F.col("event") == "apply") & _in_layers(layers))
               .select("run", "layer").distinct())
    rows = (rows.filter(F.col("key").isNotNull())
            .join(F.broadcast(applied), ["run", "layer"], "left_anti"))
    delivered = _sequence_divergence(rows, ["run", "layer", "key"], "msg", "total order")
    held = _held_chain_breaks(trace, layers, revision_field, base_field).select(
        *VIOLATION_COLUMNS[:-1], F.format_string(
            "total order of key %s: %s was written on %s but held after %s", F.col("key"),
            F.col("revision"), F.coalesce(F.col("base"), F.lit("no object")),
            F.coalesce(F.col("previous"), F.lit("no object"))).alias("detail"))
    return delivered.unionByName(_shape(held, F.col("detail")))


def _held_chain_breaks(trace: DataFrame, layers: Sequence[str] | None, revision_field: str,
                       base_field: str) -> DataFrame:
    """The applied writes a replica holds that are not based on the write it held before them
    (``previous``; the first one: on no object), unless installed by a snapshot or held after
    a restart of the replica since the previous one."""
    rows = _state_rows(trace, layers, revision_field, base_field)
    held = F.col("held")
    before = (Window.partitionBy("run", "layer", "node", "key").orderBy("t", ROW)
              .rowsBetween(Window.unboundedPreceding, -1))
    state = rows.filter(F.col("is_write") & F.col("from_apply")).select(
        "*",
        F.last(F.when(held, F.col("revision")), ignorenulls=True).over(before)
        .alias("previous"),
        F.last(F.when(held, F.col("epoch")), ignorenulls=True).over(before)
        .alias("previous_epoch"))
    unbased = F.col("previous").isNull() & F.col("base").isNotNull()
    misbased = (F.col("previous").isNotNull() & (F.col("epoch") == F.col("previous_epoch"))
                & ~F.col("base").eqNullSafe(F.col("previous")))
    return state.filter(held & ~F.col("installed") & (unbased | misbased))


# -- per-object convergence ---------------------------------------------------------------------

_NO_STATE = "none"  # the final state of an object a replica no longer holds
_RESTART_EVENTS = ("recover", "join")  # a process restarts on its durable store
_LINK_EVENTS = ("connect", "offline")  # a replica's link to the others, up or down
STOPPED_REASON = "stopped"  # ``info.reason`` of the ``offline`` row of a replica that stopped
_STATE_COLUMNS = ("run", "layer", "node", "key", "revision", "base", "msg", "origin", "seq",
                  "t", ROW)


def _flag(condition: Column) -> Column:
    return F.when(condition, 1).otherwise(0)


def _state_rows(
    trace: DataFrame, layers: Sequence[str] | None, revision_field: str, base_field: str
) -> DataFrame:
    """The rows that decide what replicas hold, one shuffle by (run, node), annotated.

    Every row is a write (``apply``, or a ``deliver`` with a revision in a layer without
    ``apply`` rows), a ``revert``, a ``snapshot``, a link change or a membership change.
    Added columns: ``is_write``, ``from_apply``, ``held`` (the write is held at the end),
    ``installed``, ``epoch`` (restarts of the node before the row) and ``judged`` (the node
    is up and not offline at the end). Every later window is keyed by (run, node, ...), so
    none needs another shuffle.
    """
    trace = with_row_order(trace)
    revision = _revision(revision_field)
    event = F.col("event")
    mine = _in_layers(layers) & F.col("node").isNotNull()
    keyed = mine & F.col("key").isNotNull() & revision.isNotNull()
    membership = (event.isin(list(MEMBERSHIP_EVENTS)) & F.col("node").isNotNull()
                  & F.col("layer").isin(*RUNTIME_LAYERS))
    wanted = ((event.isin("apply", "revert", "deliver") & keyed)
              | (event.isin("snapshot", *_LINK_EVENTS) & mine) | membership)
    rows = trace.filter(wanted).select(
        "run", "layer", "node", "event", "key", revision.alias("revision"),
        _revision(base_field).alias("base"), "msg", "origin", "seq", "t", ROW,
        clock().alias("at"),
        F.when(event.isin(*_LINK_EVENTS), F.get_json_object("info", "$.reason"))
        .alias("link_reason"),
        F.when(event.isin(*_LINK_EVENTS), F.get_json_object("info", "$.queued"))
        .alias("link_queued"))
    # membership changes after a run's last other row (a shutdown's leave) do not count
    ends = trace.filter(~event.isin(list(MEMBERSHIP_EVENTS))).groupBy("run").agg(
        F.max(clock()).alias("run_end"))
    with_applies = (rows.filter(event == "apply").select("run", "layer").distinct()
                    .withColumn("has_applies", F.lit(True)))
    last_changes = membership_changes(trace).groupBy("run", "node").agg(
        F.max_by("event", F.struct("at", ROW)).alias("last_change"))
    rows = (rows.join(F.broadcast(ends), "run", "left")
            .join(F.broadcast(with_applies), ["run", "layer"], "left")
            .join(F.broadcast(last_changes), ["run", "node"], "left")
            .repartition("run", "node"))
    counted = membership & (F.col("run_end").isNull() | (F.col("at") <= F.col("run_end")))
    from_apply = event == "apply"
    is_write = from_apply | ((event == "deliver") & F.col("has_applies").isNull())
    in_order = Window.partitionBy("run", "node").orderBy("t", ROW)
    whole_node = Window.partitionBy("run", "node")
    whole_layer = Window.partitionBy("run", "layer", "node")
    later = (Window.partitionBy("run", "layer", "node", "key", "revision").orderBy("t", ROW)
             .rowsBetween(1, Window.unboundedFollowing))
    rows = rows.select(
        "*", is_write.alias("is_write"), from_apply.alias("from_apply"),
        F.sum(_flag(counted & event.isin(list(_RESTART_EVENTS)))).over(
            in_order.rowsBetween(Window.unboundedPreceding, Window.currentRow)).alias("epoch"),
        F.max(F.when(event == "snapshot", F.struct("t", ROW))).over(whole_layer).alias("snap"),
        F.max(_flag(is_write)).over(later).alias("written_later"),
        F.max(_flag(event == "revert")).over(later).alias("reverted_later"),
        F.max_by(F.struct(event.alias("event"), F.col("link_reason").alias("reason"),
                          F.col("link_queued").alias("queued")),
                 F.when(event.isin(*_LINK_EVENTS) & mine, F.struct("t", ROW)))
        .over(whole_node).alias("last_link"),
    )
    snap = F.col("snap")
    held = (F.col("is_write") & (F.coalesce(F.col("written_later"), F.lit(0)) == 0)
            & (F.coalesce(F.col("reverted_later"), F.lit(0)) == 0)
            & (snap.isNull() | (F.col("t") >= snap.getField("t"))))
    installed = (snap.isNotNull() & (F.col("t") == snap.getField("t"))
                 & (F.col(ROW) < snap.getField(ROW)))
    # judged: up at the end, or gone cleanly (not crashed, killed processes included), and
    # not offline; stopped: gone cleanly, offline because the replica stopped with none of its
    # writes waiting to be sent (what it held then is what it held at the end)
    clean = (F.col("last_change").isNull()
             | F.col("last_change").isin(*_RESTART_EVENTS, "leave"))
    last_link = F.col("last_link")
    judged = clean & (last_link.isNull() | (last_link.getField("event") != "offline"))
    stopped = (clean & last_link.isNotNull() & (last_link.getField("event") == "offline")
               & (last_link.getField("reason") == STOPPED_REASON)
               & (F.coalesce(last_link.getField("queued"), F.lit("0")) == "0"))
    return rows.select(*_STATE_COLUMNS, "event", "is_write", "from_apply", held.alias("held"),
                       F.coalesce(installed, F.lit(False)).alias("installed"), "epoch",
                       judged.alias("judged"), F.coalesce(stopped, F.lit(False)).alias("stopped"))


def object_states(
    trace: DataFrame,
    *,
    layers: Sequence[str] | None = None,
    revision_field: str = "rev",
    base_field: str = "old",
) -> DataFrame:
    """Per (run, layer, node, key): the writes a replica holds at the end, each in a row.

    A write is held from its ``apply`` row (``info.<revision_field>``, based on
    ``info.<base_field>``) until a later ``revert`` of the same revision there. A ``snapshot``
    row installs state: everything applied at that node before the snapshot's instant is gone,
    and what is applied at that instant up to the snapshot row is the installed state
    (``installed``). A revision applied more than once (again after a restart) counts once,
    its last time. Layers that trace no ``apply`` rows fall back to their ``deliver`` rows that
    carry a revision: each holds its write for good (``from_apply`` false, ``base`` null).

    Returns (run, layer, node, key, revision, base, msg, origin, seq, t, row, installed,
    from_apply, epoch); ``epoch`` counts the node's restarts (recover, rejoin) before the write.
    """
    rows = _state_rows(trace, layers, revision_field, base_field)
    return rows.filter("held").select(*_STATE_COLUMNS, "installed", "from_apply", "epoch")


def convergence_violations(
    trace: DataFrame,
    *,
    layers: Sequence[str] | None = None,
    revision_field: str = "rev",
    base_field: str = "old",
) -> DataFrame:
    """Per object (``key``): replicas agree on its revisions, in order, and end in one state.

    The state of a replica is what ``object_states`` says it holds (applies minus reverts, a
    snapshot installing state). Violations:

    - revision order: the writes a replica holds, by time, form a chain, each based on the one
      before it (the first on no object, unless installed by a snapshot); a replica that
      restarted since the previous write may hold a chain cut there. Since every revision names
      its base, replicas holding the same last write hold the same path. Layers without
      ``apply`` rows (revisions on ``deliver`` rows, no base): the sequences of revisions must
      be prefix-consistent across replicas instead (the first position that differs from the
      revision most replicas have there);
    - final state: every replica up at the end (and not offline) that had the object holds
      the revision most of them hold (``none`` when all it applied was undone; ties go to the
      latest, then the greatest revision). When no replica that had it is up at the end (every
      one stopped: the ``offline`` row of a stop, with nothing queued), the replicas that
      stopped cleanly vote, and each that applied the agreed write must hold it (one that
      stopped before it arrived may hold an older state).

    One lineage, two shuffles: by (run, node) for each replica's history, then by (run, layer,
    key) to compare the replicas.
    """
    rows = _state_rows(trace, layers, revision_field, base_field)
    held, installed = F.col("held"), F.col("installed")
    sequenced = held & ~F.col("from_apply")  # a fallback write, positioned in its sequence
    per_object = Window.partitionBy("run", "layer", "node", "key").orderBy("t", ROW)
    before = per_object.rowsBetween(Window.unboundedPreceding, -1)
    upto = per_object.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    whole = per_object.rowsBetween(Window.unboundedPreceding, Window.unboundedFollowing)
    state = rows.filter(F.col("is_write") | (F.col("event") == "revert")).select(
        "*",
        F.last(F.when(held, F.col("revision")), ignorenulls=True).over(before)
        .alias("previous"),
        F.last(F.when(held, F.col("epoch")), ignorenulls=True).over(before)
        .alias("previous_epoch"),
        F.last(F.when(held, F.struct("revision", "msg", "origin", "seq", "t")),
               ignorenulls=True).over(whole).alias("final"),
        F.when(sequenced, F.sum(_flag(sequenced)).over(upto)).alias("position"),
        (F.row_number().over(per_object) == 1).alias("first_row"),
    )
    # one vote per replica up at the end or stopped cleanly; while some replica is up at the
    # end, only those vote (a replica that stopped early may hold an older state)
    up_voter = F.col("first_row") & F.col("judged")
    any_voter = F.col("first_row") & (F.col("judged") | F.col("stopped"))
    state = state.withColumn("final_revision", F.when(any_voter, F.coalesce(
        F.col("final.revision"), F.lit(_NO_STATE)))).repartition("run", "layer", "key")
    by_object = Window.partitionBy("run", "layer", "key")
    state = state.withColumn("voter", F.when(
        F.max(_flag(up_voter)).over(by_object) == 1, up_voter).otherwise(any_voter))
    voter = F.col("voter")
    by_final = Window.partitionBy("run", "layer", "key", "final_revision")
    at_position = Window.partitionBy("run", "layer", "key", "position")
    with_position = Window.partitionBy("run", "layer", "key", "position", "revision")
    state = state.select(
        "*", F.sum(_flag(voter)).over(by_final).alias("votes"),
        F.max(F.when(voter, F.coalesce(F.col("final.t"), F.lit(-1.0)))).over(by_final)
        .alias("latest"),
        F.sum(_flag(sequenced)).over(with_position).alias("position_votes"))
    state = state.select(
        "*", F.max_by(F.struct(F.col("final_revision").alias("revision"),
                               F.col("final.msg").alias("msg")), F.when(voter, F.struct(
            "votes", "latest", "final_revision"))).over(by_object).alias("agreed_final"),
        F.max_by(F.col("revision"), F.when(sequenced, F.struct(
            "position_votes", "revision"))).over(at_position).alias("reference"))
    # a replica that stopped is held to the agreed state only if it applied the agreed write
    # (it may have stopped before the write reached it)
    state = state.select(
        "*", F.col("agreed_final.revision").alias("agreed"),
        F.max(_flag(F.col("from_apply")
                    & (F.col("msg") == F.col("agreed_final.msg")))).over(
            Window.partitionBy("run", "layer", "key", "node")).alias("applied_agreed"))
    held_to_agreed = voter & (F.col("judged") | (F.col("applied_agreed") == 1))
    differs = sequenced & (F.col("revision") != F.col("reference"))
    state = state.withColumn("first_difference", F.min(F.when(differs, F.col("position"))).over(
        Window.partitionBy("run", "layer", "key", "node")))

    no_object = F.lit("no object")
    unbased = F.col("previous").isNull() & F.col("base").isNotNull()
    misbased = (F.col("previous").isNotNull() & (F.col("epoch") == F.col("previous_epoch"))
                & ~F.col("base").eqNullSafe(F.col("previous")))

    def found(condition: Column, msg: Column, origin: Column, seq: Column,
              detail: Column) -> Column:
        return F.when(condition, F.struct(msg.alias("msg"), origin.alias("origin"),
                                          seq.alias("seq"), detail.alias("detail")))

    kinds = F.array(
        found(held & F.col("from_apply") & ~installed & (unbased | misbased),
              F.col("msg"), F.col("origin"), F.col("seq"), F.format_string(
                  "revision order of key %s: %s was written on %s but applied on %s",
                  F.col("key"), F.col("revision"), F.coalesce(F.col("base"), no_object),
                  F.coalesce(F.col("previous"), no_object))),
        found(differs & (F.col("position") == F.col("first_difference")),
              F.col("msg"), F.col("origin"), F.col("seq"), F.format_string(
                  "revision order of key %s: position %d has %s where the other replicas "
                  "have %s", F.col("key"), F.col("position"), F.col("revision"),
                  F.col("reference"))),
        found(held_to_agreed & (F.col("final_revision") != F.col("agreed")),
              F.col("final.msg"), F.col("final.origin"), F.col("final.seq"), F.format_string(
                  "final state of key %s: revision %s where the other replicas ended at %s",
                  F.col("key"), F.col("final_revision"), F.col("agreed"))),
    )
    found_rows = state.select(
        "run", "node", F.explode(F.filter(kinds, lambda kind: kind.isNotNull())).alias("v"))
    return _shape(found_rows.select("run", "node", "v.*"), F.col("detail"))


# -- checks as verdicts ------------------------------------------------------------------------

#: what a partial analysis does not judge (``validity_violations`` with ``complete`` False)
PARTIAL_NOTE = ("what they held is not judged, and deliveries are not checked against the "
                "publishes, which may be among it")

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


@dataclasses.dataclass(frozen=True)
class CheckResult:
    name: str
    status: Status
    reason: str
    violation_count: int
    violations: DataFrame | None


_LAYER_LISTS = ("layers", "total_order_layers", "fifo_layers", "session_layers",
                "causal_layers", "own_delivery_layers")


@dataclasses.dataclass(frozen=True, kw_only=True)
class CheckConfig:
    """What the checks assume about a trace: which layers promise what. ``layers`` None: every
    layer. A layer list left None is not declared: its check applies where the trace shows
    what it needs and is "not applicable" elsewhere; a declared layer whose rows lack what the
    check needs is an error."""

    layers: tuple[str, ...] | None = None
    total_order_layers: tuple[str, ...] = ()
    total_order_per_key: bool = False
    revision_field: str = "rev"
    exempt_crashed_origins: bool = False
    #: layers that promise FIFO per origin (None: ``layers``); topic pub/sub does not: a
    #: subscriber sees only its topics' share of an origin's sequence numbers
    fifo_layers: tuple[str, ...] | None = None
    #: layers with sessions (seed 003): a node owes only what was published in its last up
    #: interval, and a FIFO gap across a membership change of the node is no violation
    session_layers: tuple[str, ...] = ()
    #: layers that promise causal order (deliver rows carry ``info.vector``; None: ``layers``,
    #: checked where vectors are traced)
    causal_layers: tuple[str, ...] | None = None
    #: layers in which an origin delivers its own messages (where it owes them: subscribed,
    #: up); None: the layers of ``layers`` in which some origin does, which shows the service
    #: promises it; () none
    own_delivery_layers: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        for name in _LAYER_LISTS:
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, str) or not all(isinstance(v, str) and v for v in value):
                raise PipelineError(f"{name} must be a list of layer names, got {value!r}")
            object.__setattr__(self, name, tuple(value))
        if not self.revision_field or not self.revision_field.replace("_", "").isalnum():
            raise PipelineError(f"revision_field must be a plain JSON field name, "
                                f"got {self.revision_field!r}")

    def to_mapping(self) -> dict[str, Any]:
        """The fields as plain JSON/TOML values (``from_mapping`` reads them back)."""
        return {f.name: (list(v) if isinstance(v := getattr(self, f.name), tuple) else v)
                for f in dataclasses.fields(self)}

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any], *, where: str = "[analysis]") -> CheckConfig:
        """A config from a table (an experiment's ``[analysis]``, stored settings); unknown
        keys and values of the wrong kind are errors naming ``where``."""
        if not isinstance(raw, Mapping):
            raise PipelineError(f"{where} must be a table of check settings")
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = set(raw) - fields
        if unknown:
            raise PipelineError(f"unknown {where} keys {sorted(unknown)}; known: "
                                f"{sorted(fields)}")
        values = dict(raw)
        for key in _LAYER_LISTS:
            value = values.get(key)
            if value is not None and (not isinstance(value, list | tuple)
                                      or not all(isinstance(v, str) for v in value)):
                raise PipelineError(f"{where} {key} must be a list of layer names")
        for key in ("total_order_per_key", "exempt_crashed_origins"):
            if key in values and not isinstance(values[key], bool):
                raise PipelineError(f"{where} {key} must be true or false")
        if "revision_field" in values and not isinstance(values["revision_field"], str):
            raise PipelineError(f"{where} revision_field must be a string")
        converted: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v
                                     for k, v in values.items()}
        try:
            return cls(**converted)
        except (TypeError, PipelineError) as exc:
            raise PipelineError(f"{where}: {exc}") from exc


def _publish_evidence(layers: Sequence[str] | None) -> Column:
    return (F.col("event") == "publish") & _in_layers(layers)


def _deliver_evidence(layers: Sequence[str] | None) -> Column:
    return (F.col("event") == "deliver") & _in_layers(layers)


def _named(layers: Sequence[str] | None) -> str:
    return "any layer" if layers is None else f"layers {', '.join(layers)}"


def reliability_check(*, layers: Sequence[str] | None = None,
                      exempt_crashed_origins: bool = False,
                      session_layers: Sequence[str] = ()) -> Check:
    return Check(
        "reliability", _publish_evidence(layers) & F.col("msg").isNotNull(),
        f"nothing was published in {_named(layers)}: no node owed anything",
        lambda trace: reliability_violations(
            trace, layers=layers, exempt_crashed_origins=exempt_crashed_origins,
            session_layers=session_layers),
        columns=("msg", "origin", "key"), incomplete=_publish_evidence(layers),
        lacking="publish rows carry no message id (msg)")


def own_delivery_check(*, layers: Sequence[str] | None = None,
                       own_layers: Sequence[str] | None = None,
                       session_layers: Sequence[str] = ()) -> Check:
    """Origins deliver their own messages in ``own_layers`` (None: where the trace shows some
    origin does, within ``layers``)."""
    if own_layers is not None and not own_layers:
        return Check("own delivery", None, "no layer is declared to deliver an origin's own "
                     "messages (analysis own_delivery_layers = [])", None)
    if own_layers is None:
        evidence = _deliver_evidence(layers) & (F.col("node") == F.col("origin"))
        missing = (f"no origin delivers its own messages in {_named(layers)}: the services "
                   "here do not promise it (seed 000's writers apply their own writes instead)")
        incomplete = None
    else:
        scope = [layer for layer in own_layers if layers is None or layer in layers]
        evidence = _publish_evidence(scope) & F.col("origin").isNotNull()
        missing = f"nothing was published in the layers {', '.join(own_layers)}"
        incomplete = _publish_evidence(scope)
    return Check(
        "own delivery", evidence, missing,
        lambda trace: own_delivery_violations(trace, layers=layers, own_layers=own_layers,
                                              session_layers=session_layers),
        columns=("msg", "origin", "key"), incomplete=incomplete,
        lacking="publish rows carry no origin")


def duplicates_check(*, layers: Sequence[str] | None = None) -> Check:
    return Check(
        "duplicates", _deliver_evidence(layers) & F.col("msg").isNotNull(),
        f"nothing was delivered in {_named(layers)}",
        lambda trace: duplicate_violations(trace, layers=layers),
        columns=("msg",), incomplete=_deliver_evidence(layers),
        lacking="deliver rows carry no message id (msg)")


def validity_check(*, layers: Sequence[str] | None = None, complete: bool = True) -> Check:
    return Check(
        "validity", _deliver_evidence(layers) & F.col("msg").isNotNull(),
        f"nothing was delivered in {_named(layers)}",
        lambda trace: validity_violations(trace, layers=layers, complete=complete),
        columns=("msg", "key"), incomplete=_deliver_evidence(layers),
        lacking="deliver rows carry no message id (msg)")


def fifo_check(*, layers: Sequence[str] | None = None,
               session_layers: Sequence[str] = ()) -> Check:
    if layers is not None and not layers:
        return Check("fifo", None, "no layer is declared FIFO (analysis fifo_layers = [])", None)
    return Check(
        "fifo", _deliver_evidence(layers) & F.col("origin").isNotNull()
        & F.col("seq").isNotNull(),
        f"nothing was delivered with an origin and seq in {_named(layers)}: no FIFO order to "
        "check",
        lambda trace: fifo_violations(trace, layers=layers, session_layers=session_layers),
        columns=("origin", "seq"),
        incomplete=None if layers is None else _deliver_evidence(layers),
        lacking=f"deliver rows of the FIFO layers ({_named(layers)}) carry no origin and seq")


def causal_check(*, layers: Sequence[str] | None = None, declared: bool = False) -> Check:
    return Check(
        "causal", _deliver_evidence(layers) & _vector().isNotNull(),
        f"no deliver row in {_named(layers)} records a vector clock (info.vector): no layer "
        "here traces causal order",
        lambda trace: causal_violations(trace, layers=layers),
        columns=("info", "origin", "seq"),
        incomplete=_deliver_evidence(layers) if declared else None,
        lacking=f"deliver rows of the causal layers ({_named(layers)}) carry no vector clock "
                "(info.vector)")


def total_order_check(*, layers: Sequence[str], per_key: bool = False,
                      revision_field: str = "rev") -> Check:
    if not layers:
        return Check("total order", None,
                     "no layer is declared totally ordered (analyze --total-order LAYER)", None)
    scope = " per key" if per_key else ""
    key_rows = F.col("key").isNotNull() if per_key else F.lit(True)
    evidence = _deliver_evidence(layers) & F.col("msg").isNotNull() & key_rows
    if per_key:
        evidence = evidence | ((F.col("event") == "apply") & _in_layers(layers) & key_rows
                               & _revision(revision_field).isNotNull())
    return Check(
        "total order", evidence,
        f"nothing was delivered in the totally ordered layers {', '.join(layers)}{scope}",
        lambda trace: total_order_violations(trace, layers=layers, per_key=per_key,
                                             revision_field=revision_field),
        columns=("msg", "key", "info") if per_key else ("msg",),
        incomplete=_deliver_evidence(layers),
        lacking=f"deliver rows of {', '.join(layers)} carry no message id"
                + (" and key" if per_key else ""))


def convergence_check(*, layers: Sequence[str] | None = None,
                      revision_field: str = "rev") -> Check:
    return Check(
        "convergence",
        F.col("event").isin("apply", "deliver") & _in_layers(layers) & F.col("key").isNotNull()
        & _revision(revision_field).isNotNull(),
        f"no apply or deliver row in {_named(layers)} carries a key and a revision "
        f"(info.{revision_field}): nothing here replicates objects",
        lambda trace: convergence_violations(trace, layers=layers,
                                             revision_field=revision_field),
        columns=("key", "info"),
        incomplete=(F.col("event") == "apply") & _in_layers(layers),
        lacking=f"apply rows carry no key and revision (info.{revision_field})")


def atomicity_check() -> Check:
    return Check(
        "atomicity", None,
        "cannot apply: atomic multicast (seed 004) is not built; no trace records group "
        "snapshots", None)


def default_checks(config: CheckConfig | None = None, *, complete: bool = True) -> list[Check]:
    """Every check, configured: reliability, own delivery, duplicates, validity, FIFO,
    causal, total order, convergence, atomicity. ``complete`` False: some of the trace's
    files were left out (see ``validity_violations``)."""
    config = config if config is not None else CheckConfig()
    layers = config.layers
    causal_layers = layers if config.causal_layers is None else config.causal_layers
    return [
        reliability_check(layers=layers, exempt_crashed_origins=config.exempt_crashed_origins,
                          session_layers=config.session_layers),
        own_delivery_check(layers=layers, own_layers=config.own_delivery_layers,
                           session_layers=config.session_layers),
        duplicates_check(layers=layers),
        validity_check(layers=layers, complete=complete),
        fifo_check(layers=layers if config.fifo_layers is None else config.fifo_layers,
                   session_layers=config.session_layers),
        causal_check(layers=causal_layers, declared=config.causal_layers is not None),
        total_order_check(layers=config.total_order_layers,
                          per_key=config.total_order_per_key,
                          revision_field=config.revision_field),
        convergence_check(layers=layers, revision_field=config.revision_field),
        atomicity_check(),
    ]


Materialize = Callable[[str, DataFrame], DataFrame]


def evaluate(
    trace: DataFrame,
    checks: Sequence[Check],
    *,
    materialize: Materialize | None = None,
    on_check: Callable[[str], None] | None = None,
    absent_columns: Collection[str] = (),
) -> list[CheckResult]:
    """Verdicts for ``checks``: one pass over the trace finds which apply, then each applicable
    check's violations are counted (after ``materialize``, e.g. written to Parquet and read
    back, so they are computed once). ``absent_columns``: columns the trace files lack (read
    as nulls): a check that needs one is an error naming it."""
    trace = with_row_order(trace)
    absent = set(absent_columns)
    lacks = {c.name: [col for col in (*BASE_COLUMNS, *c.columns) if col in absent]
             for c in checks}
    flags: dict[str, int] = {}
    probes = []
    for i, check in enumerate(checks):
        if check.evidence is None or lacks[check.name]:
            continue
        probes.append(F.max(F.when(check.evidence, 1).otherwise(0)).alias(f"e{i}"))
        if check.incomplete is not None:
            probes.append(F.max(F.when(check.incomplete, 1).otherwise(0)).alias(f"i{i}"))
    if probes:
        first = trace.agg(*probes).first()
        flags = {k: int(v or 0) for k, v in (first.asDict() if first is not None else {}).items()}
    results = []
    for i, check in enumerate(checks):
        if on_check is not None:
            on_check(check.name)
        if lacks[check.name]:
            columns = ", ".join(lacks[check.name])
            results.append(CheckResult(
                check.name, Status.ERROR, f"cannot check: the trace files have no column "
                f"{columns}, which this check needs", 0, None))
            continue
        if check.violations is None or not flags.get(f"e{i}"):
            if flags.get(f"i{i}"):
                results.append(CheckResult(check.name, Status.ERROR,
                                           f"cannot check: {check.lacking}", 0, None))
            else:
                results.append(CheckResult(check.name, Status.NOT_APPLICABLE, check.missing, 0,
                                           None))
            continue
        violations = check.violations(trace)
        if materialize is not None:
            violations = materialize(check.name, violations)
        count = violations.count()
        status = Status.FAIL if count else Status.PASS
        reason = f"{count:,} violations" if count else "no violations"
        results.append(CheckResult(check.name, status, reason, count, violations))
    return results
