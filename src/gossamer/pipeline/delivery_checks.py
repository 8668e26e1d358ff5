"""Checks of what was delivered: who was up and subscribed (the membership timeline), what each
node was owed (reliability, an origin's own delivery), and deliveries that must not happen
(duplicates, validity). Pure ``DataFrame -> DataFrame`` transforms (see ``checks``)."""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from .check_rows import (
    OWED_DETAIL,
    deliver_rows,
    layer_filter,
    precedes,
    violation_rows,
)
from .schema import (
    ROW,
    RUNTIME_LAYERS,
    SUBSCRIPTION_EVENTS,
    TOPIC_LAYERS,
    UP_EVENTS,
    clock,
    members_of,
    membership_changes,
    shared,
    with_row_order,
)

__all__ = [
    "duplicate_violations",
    "expected_deliveries",
    "member_status",
    "missing_deliveries",
    "own_delivery_violations",
    "reliability_summary",
    "reliability_violations",
    "subscription_intervals",
    "validity_violations",
]

_UP_AT_END, _LEFT_CLEANLY, _CRASHED = "up at the end", "left cleanly", "crashed"

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
    return shared("member_status", trace, (tuple(session_layers),),
                  lambda: _member_status(with_row_order(trace), tuple(session_layers)))


def _member_status(trace: DataFrame, session_layers: Sequence[str]) -> DataFrame:
    members = members_of(trace, session_layers=session_layers)
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
    return ((start_at.isNull() | precedes(start_at, start_row, at, row))
            & (end_at.isNull() | precedes(at, row, end_at, end_row)))


# -- who is owed what ----------------------------------------------------------------------------


def subscription_intervals(trace: DataFrame) -> DataFrame:
    """(run, key, node, sub_at, sub_row, unsub_at, unsub_row): when each node was subscribed
    to each topic (``key``), on the shared clock, from its ``subscribe`` row to its next
    ``subscribe`` or ``unsubscribe`` row of that key in any layer (null end: to the end of the
    run).

    A crash ends no subscription here: a node that recovers without subscribing again would
    still be expected to deliver (the pub/sub workloads do not recover crashed nodes)."""
    trace = with_row_order(trace)
    rows = trace.filter(F.col("event").isin(list(SUBSCRIPTION_EVENTS))
                        & F.col("key").isNotNull() & F.col("node").isNotNull())
    in_order = Window.partitionBy("run", "key", "node").orderBy("at", ROW)
    return rows.select("run", "key", "node", "event", clock().alias("at"), ROW).select(
        "run", "key", "node", "event", F.col("at").alias("sub_at"),
        F.col(ROW).alias("sub_row"), F.lead("at").over(in_order).alias("unsub_at"),
        F.lead(ROW).over(in_order).alias("unsub_row"),
    ).filter(F.col("event") == "subscribe").drop("event")


def topic_runs(trace: DataFrame, subscriptions: DataFrame) -> DataFrame:
    """(run): the runs whose keyed messages are owed by topic: those that trace a subscription
    or any row of a topic layer (a pub/sub run in which nobody subscribed owes nobody its
    publishes; without the layer rule it would look like a broadcast run)."""
    by_layer = trace.filter(F.col("layer").isin(list(TOPIC_LAYERS))).select("run")
    return subscriptions.select("run").unionByName(by_layer).distinct()


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

    - topics: in a run that traces ``subscribe``/``unsubscribe`` rows or rows of a topic layer
      (topic pub/sub, key = topic: ``topic_runs``), a message with a ``key`` is owed only by
      the nodes subscribed to that key when it was published (in every layer that carries
      it: the pub/sub layer and the Scribe tree below it); a message without a key (a
      broadcast layer below pub/sub) by every member;
    - sessions (``session_layers``: what a node missed while away is not sent again, like seed
      003's clients): only by the nodes whose latest up interval covers the publish.

    With ``exempt_crashed_origins``, messages of a publisher that is not judged (crashed) are
    left out (a protocol without relaying cannot repair them). ``t_publish`` is the publisher's
    own run time ``t``; the node that recorded the publish row is ``publisher`` (the origin's
    server, for seed 003), the message's ``origin`` the node that created it.
    """
    scope = None if layers is None else tuple(layers)
    return shared("expected_deliveries", trace,
                  (scope, exempt_crashed_origins, tuple(session_layers)),
                  lambda: _expected_deliveries(with_row_order(trace), scope,
                                               exempt_crashed_origins, tuple(session_layers)))


def _expected_deliveries(trace: DataFrame, layers: Sequence[str] | None,
                         exempt_crashed_origins: bool,
                         session_layers: Sequence[str]) -> DataFrame:
    status = member_status(trace, session_layers=session_layers)
    publishes = trace.filter((F.col("event") == "publish") & layer_filter(layers)).select(
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
    by_topic_runs = topic_runs(trace, subscriptions)
    scoped = F.col("key").isNotNull()
    everyone = (pairs.join(F.broadcast(by_topic_runs), "run", "left_anti")
                .unionByName(pairs.join(F.broadcast(by_topic_runs), "run", "left_semi")
                             .filter(~scoped)))
    subscribed = (
        precedes(F.col("sub_at"), F.col("sub_row"), F.col("at_publish"), F.col("row_publish"))
        & (F.col("unsub_at").isNull()
           | precedes(F.col("at_publish"), F.col("row_publish"), F.col("unsub_at"),
                     F.col("unsub_row"))))
    by_topic = (pairs.filter(scoped).join(subscriptions, ["run", "key", "node"])
                .filter(subscribed).select(*everyone.columns))
    return everyone.unionByName(by_topic).select(
        "run", "layer", "msg", "origin", "seq", "key", "node", "t_publish", "publisher",
        "ending")


def _delivered(trace: DataFrame, layers: Sequence[str] | None) -> DataFrame:
    """(run, layer, msg, node): the messages each node delivered."""
    return deliver_rows(trace, layers).select("run", "layer", "msg", "node")


def _owed_detail(what: str) -> Column:
    return F.format_string(
        OWED_DETAIL, F.lit(what), F.col("publisher"), F.col("t_publish"),
        F.when(F.col("ending") == _LEFT_CLEANLY, F.lit("left cleanly later"))
        .otherwise(F.lit("is up at the end")))


def missing_deliveries(
    trace: DataFrame,
    *,
    layers: Sequence[str] | None = None,
    exempt_crashed_origins: bool = False,
    session_layers: Sequence[str] = (),
) -> DataFrame:
    """The rows of ``expected_deliveries`` that did not happen: no ``deliver`` row at the node,
    which is not the node that recorded the publish (it has the message). One anti join, shared
    by reliability's violations and its summary (``shared``: within an analysis it is built
    once)."""
    scope = None if layers is None else tuple(layers)
    return shared("missing_deliveries", trace,
                  (scope, exempt_crashed_origins, tuple(session_layers)),
                  lambda: _missing_deliveries(trace, scope, exempt_crashed_origins,
                                              tuple(session_layers)))


def _missing_deliveries(trace: DataFrame, layers: Sequence[str] | None,
                        exempt_crashed_origins: bool,
                        session_layers: Sequence[str]) -> DataFrame:
    expected = expected_deliveries(trace, layers=layers,
                                   exempt_crashed_origins=exempt_crashed_origins,
                                   session_layers=session_layers)
    return expected.filter(F.col("node") != F.col("publisher")).join(
        _delivered(trace, layers), ["run", "layer", "msg", "node"], "left_anti")


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
    missing = missing_deliveries(trace, layers=layers,
                                 exempt_crashed_origins=exempt_crashed_origins,
                                 session_layers=session_layers)
    return violation_rows(missing.filter(~F.col("node").eqNullSafe(F.col("origin"))),
                          _owed_detail("not delivered"))


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
        promising = (deliver_rows(trace, scope).filter(F.col("node") == F.col("origin"))
                     .select("layer").distinct())
        expected = expected.join(F.broadcast(promising), "layer", "left_semi")
    missing = expected.join(_delivered(trace, scope), ["run", "layer", "msg", "node"],
                            "left_anti")
    return violation_rows(missing, _owed_detail("its own message not delivered"))


def reliability_summary(
    trace: DataFrame,
    *,
    layers: Sequence[str] | None = None,
    exempt_crashed_origins: bool = False,
    session_layers: Sequence[str] = (),
) -> DataFrame:
    """Per (run, layer): published, expected, delivered (of expected) and reliability (the
    node that recorded a publish counts as having the message): what was owed, less what is
    missing (``missing_deliveries``, the reliability check's own join)."""
    expected = expected_deliveries(trace, layers=layers,
                                   exempt_crashed_origins=exempt_crashed_origins,
                                   session_layers=session_layers)
    missing = missing_deliveries(trace, layers=layers,
                                 exempt_crashed_origins=exempt_crashed_origins,
                                 session_layers=session_layers)
    owed = expected.groupBy("run", "layer").agg(
        F.countDistinct("msg").alias("published"), F.count(F.lit(1)).alias("expected"))
    lost = missing.groupBy("run", "layer").agg(F.count(F.lit(1)).alias("lost"))
    return owed.join(lost, ["run", "layer"], "left").select(
        "run", "layer", "published", "expected",
        (F.col("expected") - F.coalesce(F.col("lost"), F.lit(0))).alias("delivered"),
    ).withColumn("reliability", F.col("delivered") / F.col("expected"))


# -- deliveries that must not happen -------------------------------------------------------------


def duplicate_violations(trace: DataFrame, *, layers: Sequence[str] | None = None) -> DataFrame:
    """Every delivery of a message at a node after its first one there, in each layer."""
    rows = deliver_rows(trace, layers).filter(F.col("msg").isNotNull())
    in_order = Window.partitionBy("run", "layer", "node", "msg").orderBy("t", ROW)
    again = rows.select("*", F.row_number().over(in_order).alias("nth"),
                        F.first("t").over(in_order).alias("first_t")).filter(F.col("nth") > 1)
    return violation_rows(again, F.format_string(
        "delivered again in layer %s (delivery %d; the first at t=%.6f, this one at t=%.6f)",
        F.col("layer"), F.col("nth"), F.col("first_t"), F.col("t")))


def _in_a_lost_tail(trace: DataFrame, unpublished: DataFrame) -> DataFrame:
    """(run, origin, seq) of the deliveries of ``unpublished`` whose publish row the origin's
    trace may have lost. A process of the network runtime writes its rows in order, a batch
    at a time; killed (SIGKILL), it loses the batch it had not written, and with it the
    publish rows of its last messages, while other processes wrote their deliveries. So a
    message of origin O with sequence s is in a lost tail when O's trace was cut (a crash of
    its net runtime, recorded or inferred, or its rows end without a clean leave) at a point
    before which every publish O traced has a lower sequence and after which every one has
    a higher one (sequences only grow, across restarts too). A publish row lost from the
    middle of what O wrote is still a message never published."""
    origins = unpublished.filter(F.col("seq").isNotNull()).select(
        "run", "origin", "seq").distinct()
    wanted = origins.select("run", "origin").distinct()
    net = (trace.filter(F.col("layer") == "net").select("run", F.col("node").alias("origin"))
           .distinct().join(wanted, ["run", "origin"], "left_semi"))
    crashes = (membership_changes(trace)
               .filter((F.col("event") == "crash") & (F.col("layer") == "net"))
               .select("run", F.col("node").alias("origin"), F.col("at").alias("cut_at"),
                       F.col(ROW).alias("cut_row")))
    unclean = (member_status(trace).filter(F.col("ending") != _LEFT_CLEANLY)
               .select("run", F.col("node").alias("origin")).distinct()
               .select("*", F.lit(None).cast("double").alias("cut_at"),
                       F.lit(None).cast("long").alias("cut_row")))
    cuts = crashes.unionByName(unclean).join(net, ["run", "origin"], "left_semi")
    publishes = trace.filter((F.col("event") == "publish") & F.col("seq").isNotNull()).select(
        "run", F.col("node").alias("origin"), F.col("seq").alias("pub_seq"),
        clock().alias("pub_at"), F.col(ROW).alias("pub_row")).join(
        wanted, ["run", "origin"], "left_semi")
    before = F.col("cut_at").isNull() | precedes(F.col("pub_at"), F.col("pub_row"),
                                                 F.col("cut_at"), F.col("cut_row"))
    bounds = cuts.join(publishes, ["run", "origin"], "left").groupBy(
        "run", "origin", "cut_at", "cut_row").agg(
        F.max(F.when(before, F.col("pub_seq"))).alias("below"),
        F.min(F.when(~before, F.col("pub_seq"))).alias("above"))
    inside = ((F.col("below").isNull() | (F.col("below") < F.col("seq")))
              & (F.col("above").isNull() | (F.col("above") > F.col("seq"))))
    return origins.join(bounds, ["run", "origin"]).filter(inside).select(
        "run", "origin", "seq").distinct()


def validity_violations(trace: DataFrame, *, layers: Sequence[str] | None = None,
                        complete: bool = True) -> DataFrame:
    """Deliveries that cannot be right whatever was lost: of a message nobody published in the
    run (in any layer; an origin's own message excepted), at a node that was down (crashed, or
    gone after it left: runtime membership only), or on a topic the node was not subscribed to
    when it delivered.
    ``complete`` False (trace files were left out: ``--allow-partial``): a publish may be in a
    file that was left out, so "never published" is not judged."""
    trace = with_row_order(trace)
    rows = deliver_rows(trace, layers).filter(F.col("msg").isNotNull()).select(
        "run", "layer", "node", "msg", "origin", "seq", "key", "t", ROW, clock().alias("at"))
    published = trace.filter(F.col("event") == "publish").select("run", "msg").distinct()
    # an origin's delivery of its own message is its copy of what it wrote, not a message from
    # nowhere: seed 003's clients trace it as they send, and a server that dies before the
    # activity reaches it publishes nothing (the activity is lost, as the seed allows)
    others = rows.filter(~F.col("node").eqNullSafe(F.col("origin")))
    unpublished = others.join(published, ["run", "msg"], "left_anti")
    if complete:
        unpublished = unpublished.join(_in_a_lost_tail(trace, unpublished),
                                       ["run", "origin", "seq"], "left_anti")
    else:
        unpublished = unpublished.limit(0)
    unpublished = unpublished.select(
        "*", F.lit("delivered a message that was never published in the run").alias("what"))
    # anti joins with the interval as the join's condition: a delivery is kept when no
    # interval of its node covers it, on the map side (a node has few intervals: broadcast),
    # and no delivery is shuffled to find the ones that are covered
    status = member_status(trace).select(
        "run", "node", *(F.col(c).alias(f"up_{c}")
                         for c in ("start_at", "start_row", "end_at", "end_row")))
    covered = ((rows["run"] == status["run"]) & (rows["node"] == status["node"]) & _up_during(
        status["up_start_at"], status["up_start_row"], status["up_end_at"],
        status["up_end_row"], rows["at"], rows[ROW]))
    while_down = rows.join(F.broadcast(status), covered, "left_anti").select(
        "*", F.lit("delivered while the node was down (crashed or left)").alias("what"))
    subscriptions = subscription_intervals(trace)
    scoped = rows.filter(F.col("key").isNotNull()).join(
        F.broadcast(topic_runs(trace, subscriptions)), "run", "left_semi")
    entitled = ((scoped["run"] == subscriptions["run"]) & (scoped["key"] == subscriptions["key"])
                & (scoped["node"] == subscriptions["node"])
                & precedes(subscriptions["sub_at"], subscriptions["sub_row"], scoped["at"],
                           scoped[ROW])
                & (subscriptions["unsub_at"].isNull()
                   | precedes(scoped["at"], scoped[ROW], subscriptions["unsub_at"],
                              subscriptions["unsub_row"])))
    unsubscribed = scoped.join(subscriptions, entitled, "left_anti").select(
        "*", F.format_string("delivered on topic %s while not subscribed to it",
                             F.col("key")).alias("what"))
    found = unpublished.unionByName(while_down).unionByName(unsubscribed)
    return violation_rows(found, F.concat(F.col("what"), F.format_string(" (layer %s, t=%.6f)",
                                                                 F.col("layer"), F.col("t"))))
