"""Guarantee checks over a trace: pure ``DataFrame -> DataFrame`` transforms yielding violations.

Each ``*_violations`` function takes the trace (with or without ``row``) and its config as
keyword arguments and returns rows ``(run, node, msg, origin, seq, detail)``. A ``Check`` pairs
one of them with the evidence that makes it applicable; ``evaluate`` turns checks into verdicts
(pass, fail, or not applicable with the reason) without collecting any per-event data.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Sequence

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from .errors import PipelineError
from .schema import MEMBERSHIP_EVENTS, ROW, membership_changes, with_row_order

__all__ = [
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
    "evaluate",
    "expected_deliveries",
    "fifo_check",
    "fifo_violations",
    "member_status",
    "object_states",
    "reliability_check",
    "reliability_summary",
    "reliability_violations",
    "subscription_intervals",
    "total_order_check",
    "total_order_violations",
]

VIOLATION_COLUMNS = ("run", "node", "msg", "origin", "seq", "detail")
_UP_EVENTS = ("join", "recover")
_VECTOR = T.StructType([T.StructField("vector", T.MapType(T.StringType(), T.LongType()))])


class Status(enum.Enum):
    PASS = "pass"
    FAIL = "fail"
    NOT_APPLICABLE = "not applicable"


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


def member_status(trace: DataFrame, *, layers: Sequence[str] | None = None) -> DataFrame:
    """Per (run, node): ``up_at_end`` and the intervals in which the node was up.

    Members are the nodes that record a membership event or a row of a protocol layer (the
    simulator's own rows, layer ``sim``, name node ``sim``). A node is up from the start unless
    its first membership event is ``join``; ``join``/``recover`` bring it up, ``crash``/
    ``leave`` take it down, up to the end of the run (see ``membership_changes``).

    Returns (run, node, up_at_end, start_t, start_row, end_t, end_row), one row per interval
    in which the node was up (null start: from the beginning; null end: to the end).
    """
    trace = with_row_order(trace)
    membership = F.col("event").isin(list(MEMBERSHIP_EVENTS))
    protocol_rows = (F.col("layer") != "sim") & _in_layers(layers)
    members = (trace.filter(F.col("node").isNotNull() & (membership | protocol_rows))
               .select("run", "node").distinct())
    in_order = Window.partitionBy("run", "node").orderBy("t", ROW)
    whole = in_order.rowsBetween(Window.unboundedPreceding, Window.unboundedFollowing)
    up_after = F.col("event").isin(list(_UP_EVENTS))
    # one window pass over the membership rows gives every interval and the final state
    changes = membership_changes(trace).select(
        "run", "node", "t", ROW, "event", up_after.alias("up_after"),
        F.lead("t").over(in_order).alias("next_t"),
        F.lead(ROW).over(in_order).alias("next_row"),
        F.row_number().over(in_order).alias("nth"),
        F.last(up_after).over(whole).alias("up_at_end"),
    )
    no_time, no_row = F.lit(None).cast("double"), F.lit(None).cast("long")
    initial = changes.filter((F.col("nth") == 1) & (F.col("event") != "join")).select(
        "run", "node", "up_at_end", no_time.alias("start_t"), no_row.alias("start_row"),
        F.col("t").alias("end_t"), F.col(ROW).alias("end_row"))
    later = changes.filter("up_after").select(
        "run", "node", "up_at_end", F.col("t").alias("start_t"), F.col(ROW).alias("start_row"),
        F.col("next_t").alias("end_t"), F.col("next_row").alias("end_row"))
    steady = members.join(changes.select("run", "node"), ["run", "node"], "left_anti").select(
        "run", "node", F.lit(True).alias("up_at_end"), no_time.alias("start_t"),
        no_row.alias("start_row"), no_time.alias("end_t"), no_row.alias("end_row"))
    return steady.unionByName(initial).unionByName(later)


# -- reliability -----------------------------------------------------------------------------

_SUBSCRIPTION_EVENTS = ("subscribe", "unsubscribe")


def subscription_intervals(trace: DataFrame, *,
                           layers: Sequence[str] | None = None) -> DataFrame:
    """(run, layer, key, node, sub_t, sub_row, unsub_t, unsub_row): when each node was subscribed
    to each topic (``key``), from its ``subscribe`` row to its next ``subscribe`` or
    ``unsubscribe`` row of that layer and key (null end: to the end of the run).

    A crash ends no subscription here: a node that recovers without subscribing again would
    still be expected to deliver (the pub/sub workloads do not recover crashed nodes)."""
    trace = with_row_order(trace)
    rows = trace.filter(F.col("event").isin(list(_SUBSCRIPTION_EVENTS)) & _in_layers(layers)
                        & F.col("key").isNotNull() & F.col("node").isNotNull())
    in_order = Window.partitionBy("run", "layer", "key", "node").orderBy("t", ROW)
    return rows.select(
        "run", "layer", "key", "node", "event", F.col("t").alias("sub_t"),
        F.col(ROW).alias("sub_row"), F.lead("t").over(in_order).alias("unsub_t"),
        F.lead(ROW).over(in_order).alias("unsub_row"),
    ).filter(F.col("event") == "subscribe").drop("event")


def expected_deliveries(
    trace: DataFrame,
    *,
    layers: Sequence[str] | None = None,
    exempt_crashed_origins: bool = False,
    session_layers: Sequence[str] = (),
) -> DataFrame:
    """(run, layer, msg, origin, seq, node, t_publish, publisher): who must deliver what.

    Every member up when the message was published and up at the end must deliver it. In a
    layer that traces ``subscribe``/``unsubscribe`` rows (topic pub/sub, key = topic), only
    the members subscribed to the message's ``key`` when it was published (see
    ``subscription_intervals``). With ``exempt_crashed_origins``, messages of a publisher that
    is down at the end are left out (a protocol without relaying cannot repair them).

    In ``session_layers`` (sessions: what a node missed while away is not sent again, like
    seed 003's clients), only the members up from the publish to the end without a break:
    the message must fall in a node's last up interval, not in an earlier one.
    """
    trace = with_row_order(trace)
    status = member_status(trace, layers=layers)
    publishes = trace.filter((F.col("event") == "publish") & _in_layers(layers)).select(
        "run", "layer", "msg", "origin", "seq", "key", F.col("t").alias("t_publish"),
        F.col(ROW).alias("row_publish"), F.col("node").alias("publisher"),
    )
    if exempt_crashed_origins:
        alive = status.filter("up_at_end").select(F.col("run"), F.col("node").alias("publisher"))
        publishes = publishes.join(F.broadcast(alive), ["run", "publisher"], "left_semi")
    up = status.filter("up_at_end")
    covers = (
        (F.col("start_t").isNull()
         | _before(F.col("start_t"), F.col("start_row"), F.col("t_publish"),
                   F.col("row_publish")))
        & (F.col("end_t").isNull()
           | _before(F.col("t_publish"), F.col("row_publish"), F.col("end_t"),
                     F.col("end_row")))
    )
    # a few intervals per node: broadcast them, or one task would pair every message of a run
    # (the join key is the run) with every node; a node's intervals never overlap
    pairs = publishes.join(F.broadcast(up), "run").filter(covers)
    if session_layers:
        pairs = pairs.filter(~F.col("layer").isin(list(session_layers))
                             | F.col("end_t").isNull())
    subscriptions = subscription_intervals(trace, layers=layers)
    topic_layers = subscriptions.select("run", "layer").distinct()
    unfiltered = pairs.join(F.broadcast(topic_layers), ["run", "layer"], "left_anti")
    subscribed = (
        _before(F.col("sub_t"), F.col("sub_row"), F.col("t_publish"), F.col("row_publish"))
        & (F.col("unsub_t").isNull()
           | _before(F.col("t_publish"), F.col("row_publish"), F.col("unsub_t"),
                     F.col("unsub_row"))))
    by_topic = (pairs.join(subscriptions, ["run", "layer", "key", "node"]).filter(subscribed)
                .select(*unfiltered.columns))
    pairs = unfiltered.unionByName(by_topic)
    return pairs.select("run", "layer", "msg", "origin", "seq", "node", "t_publish",
                        "publisher")


def _delivered_pairs(trace: DataFrame, layers: Sequence[str] | None) -> DataFrame:
    """(run, layer, msg, node) delivered; a publisher has its own message (a protocol that
    traces no ``deliver`` of its own writes, like seed 000's clients, is not missing it)."""
    published = with_row_order(trace).filter((F.col("event") == "publish") & _in_layers(layers))
    return (_deliveries(trace, layers).select("run", "layer", "msg", "node")
            .unionByName(published.select("run", "layer", "msg", "node")))


def reliability_violations(
    trace: DataFrame,
    *,
    layers: Sequence[str] | None = None,
    exempt_crashed_origins: bool = False,
    session_layers: Sequence[str] = (),
) -> DataFrame:
    """Expected (message, node) pairs without a ``deliver`` row (or the node's ``publish``)."""
    expected = expected_deliveries(trace, layers=layers,
                                   exempt_crashed_origins=exempt_crashed_origins,
                                   session_layers=session_layers)
    missing = expected.join(_delivered_pairs(trace, layers), ["run", "layer", "msg", "node"],
                            "left_anti")
    return _shape(missing, F.format_string(
        "not delivered: up when %s published it at t=%.6f and up at the end",
        F.col("publisher"), F.col("t_publish")))


def reliability_summary(
    trace: DataFrame,
    *,
    layers: Sequence[str] | None = None,
    exempt_crashed_origins: bool = False,
    session_layers: Sequence[str] = (),
) -> DataFrame:
    """Per (run, layer): published, expected, delivered (of expected) and reliability."""
    expected = expected_deliveries(trace, layers=layers,
                                   exempt_crashed_origins=exempt_crashed_origins,
                                   session_layers=session_layers)
    delivered = _delivered_pairs(trace, layers).distinct().withColumn("hit", F.lit(1))
    joined = expected.join(delivered, ["run", "layer", "msg", "node"], "left")
    return joined.groupBy("run", "layer").agg(
        F.countDistinct("msg").alias("published"),
        F.count(F.lit(1)).alias("expected"),
        F.count("hit").alias("delivered"),
    ).withColumn("reliability", F.col("delivered") / F.col("expected"))


# -- FIFO per origin ---------------------------------------------------------------------------


def fifo_violations(trace: DataFrame, *, layers: Sequence[str] | None = None,
                    session_layers: Sequence[str] = ()) -> DataFrame:
    """Each node delivers each origin's seqs as 1, 2, 3, ... once, by t then row order.

    In ``session_layers`` a gap (a higher seq than the next) is no violation when the node's
    membership changed (join, leave, crash, recover) since its previous delivery from that
    origin: what it missed while away is not sent again. Duplicates and reordering still are.
    """
    trace = with_row_order(trace)
    rows = _deliveries(trace, layers).filter(
        F.col("origin").isNotNull() & F.col("seq").isNotNull())
    earlier = (Window.partitionBy("run", "layer", "node", "origin").orderBy("t", ROW)
               .rowsBetween(Window.unboundedPreceding, -1))
    rows = rows.withColumn("highest_before", F.coalesce(F.max("seq").over(earlier), F.lit(0)))
    expected = F.col("highest_before") + 1
    if session_layers:
        rows = rows.withColumn("previous", F.max(F.struct(
            F.col("t").alias("t"), F.col(ROW).alias(ROW))).over(earlier))
    bad = rows.filter(F.col("seq") != expected)
    if session_layers:
        bad = _without_session_gaps(trace, bad, session_layers)
    detail = (F.when(F.col("seq") <= F.col("highest_before"),
                     F.format_string("duplicate or reordered: seq %d after seq %d",
                                     F.col("seq"), F.col("highest_before")))
              .otherwise(F.format_string("gap: seq %d delivered, expected %d",
                                         F.col("seq"), expected)))
    return _shape(bad, detail)


def _without_session_gaps(trace: DataFrame, bad: DataFrame,
                          session_layers: Sequence[str]) -> DataFrame:
    """FIFO findings ``bad`` minus the gaps in ``session_layers`` that being away explains:
    the node's membership changed between its ``previous`` delivery from the origin (if any)
    and this one, or the node is away at this one (its last change before it took it down:
    ``leave``, ``crash``), so what it missed may have been sent while it was away."""
    changes = membership_changes(trace).select(
        "run", "node", F.col("t").alias("change_t"), F.col(ROW).alias("change_row"),
        F.col("event").alias("change_event"))
    gaps = bad.filter(F.col("layer").isin(list(session_layers))
                      & (F.col("seq") > F.col("highest_before")))
    keys = ["run", "layer", "node", "origin", "seq", "t", ROW]
    earlier = gaps.join(changes, ["run", "node"]).filter(
        _before(F.col("change_t"), F.col("change_row"), F.col("t"), F.col(ROW)))
    latest = earlier.groupBy(*keys, "previous").agg(F.max(F.struct(
        "change_t", "change_row", "change_event")).alias("last"))
    previous, last = F.col("previous"), F.col("last")
    since_previous = previous.isNull() | _before(
        previous.getField("t"), previous.getField(ROW), last.getField("change_t"),
        last.getField("change_row"))
    away = ~last.getField("change_event").isin(*_UP_EVENTS)
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
    return _shape(per_delivery, F.concat(F.lit("causal past not respected: "), F.col("what")))


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
    trace: DataFrame, *, layers: Sequence[str], per_key: bool = False
) -> DataFrame:
    """Every replica delivers the same sequence of messages (per key with ``per_key``)."""
    if not layers:
        raise PipelineError("total order needs the layers that promise it (layers=[...])")
    rows = _deliveries(trace, layers).filter(F.col("msg").isNotNull())
    groups = ["run", "layer", "key"] if per_key else ["run", "layer"]
    if per_key:
        rows = rows.filter(F.col("key").isNotNull())
    return _sequence_divergence(rows, groups, "msg", "total order")


# -- per-object convergence ---------------------------------------------------------------------

_NO_STATE = "none"  # the final state of an object a replica no longer holds
_RESTART_EVENTS = ("recover", "join")  # a process restarts on its durable store
_LINK_EVENTS = ("connect", "offline")  # a replica's link to the others, up or down
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
    membership = event.isin(list(MEMBERSHIP_EVENTS)) & F.col("node").isNotNull()
    wanted = ((event.isin("apply", "revert", "deliver") & keyed)
              | (event.isin("snapshot", *_LINK_EVENTS) & mine) | membership)
    rows = trace.filter(wanted).select(
        "run", "layer", "node", "event", "key", revision.alias("revision"),
        _revision(base_field).alias("base"), "msg", "origin", "seq", "t", ROW)
    # membership changes after a run's last other row (a shutdown's leave) do not count
    ends = trace.filter(~event.isin(list(MEMBERSHIP_EVENTS))).groupBy("run").agg(
        F.max("t").alias("run_end"))
    with_applies = (rows.filter(event == "apply").select("run", "layer").distinct()
                    .withColumn("has_applies", F.lit(True)))
    rows = (rows.join(F.broadcast(ends), "run", "left")
            .join(F.broadcast(with_applies), ["run", "layer"], "left")
            .repartition("run", "node"))
    counted = membership & (F.col("run_end").isNull() | (F.col("t") <= F.col("run_end")))
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
        F.max_by(event, F.when(counted, F.struct("t", ROW))).over(whole_node)
        .alias("last_change"),
        F.max_by(event, F.when(event.isin(*_LINK_EVENTS) & mine, F.struct("t", ROW)))
        .over(whole_node).alias("last_link"),
    )
    snap = F.col("snap")
    held = (F.col("is_write") & (F.coalesce(F.col("written_later"), F.lit(0)) == 0)
            & (F.coalesce(F.col("reverted_later"), F.lit(0)) == 0)
            & (snap.isNull() | (F.col("t") >= snap.getField("t"))))
    installed = (snap.isNotNull() & (F.col("t") == snap.getField("t"))
                 & (F.col(ROW) < snap.getField(ROW)))
    judged = ((F.col("last_change").isNull() | F.col("last_change").isin(*_RESTART_EVENTS))
              & (F.col("last_link").isNull() | (F.col("last_link") != "offline")))
    return rows.select(*_STATE_COLUMNS, "event", "is_write", "from_apply", held.alias("held"),
                       F.coalesce(installed, F.lit(False)).alias("installed"), "epoch",
                       judged.alias("judged"))


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
      latest, then the greatest revision).

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
    voter = F.col("first_row") & F.col("judged")  # one vote per replica up at the end
    state = state.withColumn("final_revision", F.when(voter, F.coalesce(
        F.col("final.revision"), F.lit(_NO_STATE)))).repartition("run", "layer", "key")
    by_object = Window.partitionBy("run", "layer", "key")
    by_final = Window.partitionBy("run", "layer", "key", "final_revision")
    at_position = Window.partitionBy("run", "layer", "key", "position")
    with_position = Window.partitionBy("run", "layer", "key", "position", "revision")
    state = state.select(
        "*", F.sum(_flag(voter)).over(by_final).alias("votes"),
        F.max(F.when(voter, F.coalesce(F.col("final.t"), F.lit(-1.0)))).over(by_final)
        .alias("latest"),
        F.sum(_flag(sequenced)).over(with_position).alias("position_votes"))
    state = state.select(
        "*", F.max_by(F.col("final_revision"), F.when(voter, F.struct(
            "votes", "latest", "final_revision"))).over(by_object).alias("agreed"),
        F.max_by(F.col("revision"), F.when(sequenced, F.struct(
            "position_votes", "revision"))).over(at_position).alias("reference"))
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
        found(voter & (F.col("final_revision") != F.col("agreed")),
              F.col("final.msg"), F.col("final.origin"), F.col("final.seq"), F.format_string(
                  "final state of key %s: revision %s where the other replicas ended at %s",
                  F.col("key"), F.col("final_revision"), F.col("agreed"))),
    )
    found_rows = state.select(
        "run", "node", F.explode(F.filter(kinds, lambda kind: kind.isNotNull())).alias("v"))
    return _shape(found_rows.select("run", "node", "v.*"), F.col("detail"))


# -- checks as verdicts ------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Check:
    """A named check: the rows that make it applicable, and its violations transform.

    ``evidence`` None means the check can never apply (``missing`` says why); otherwise a
    trace without any evidence row makes it "not applicable" with ``missing`` as the reason.
    """

    name: str
    evidence: Column | None
    missing: str
    violations: Callable[[DataFrame], DataFrame] | None


@dataclasses.dataclass(frozen=True)
class CheckResult:
    name: str
    status: Status
    reason: str
    violation_count: int
    violations: DataFrame | None


@dataclasses.dataclass(frozen=True, kw_only=True)
class CheckConfig:
    """What the checks assume about a trace. ``layers`` None: every layer."""

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

    def __post_init__(self) -> None:
        object.__setattr__(self, "session_layers", tuple(self.session_layers))
        if not self.revision_field or not self.revision_field.replace("_", "").isalnum():
            raise PipelineError(f"revision_field must be a plain JSON field name, "
                                f"got {self.revision_field!r}")


def _publish_evidence(layers: Sequence[str] | None) -> Column:
    return (F.col("event") == "publish") & _in_layers(layers)


def _deliver_evidence(layers: Sequence[str] | None) -> Column:
    return (F.col("event") == "deliver") & _in_layers(layers)


def reliability_check(*, layers: Sequence[str] | None = None,
                      exempt_crashed_origins: bool = False,
                      session_layers: Sequence[str] = ()) -> Check:
    return Check(
        "reliability", _publish_evidence(layers), "no publish rows: nothing was expected",
        lambda trace: reliability_violations(
            trace, layers=layers, exempt_crashed_origins=exempt_crashed_origins,
            session_layers=session_layers))


def fifo_check(*, layers: Sequence[str] | None = None,
               session_layers: Sequence[str] = ()) -> Check:
    if layers is not None and not layers:
        return Check("fifo", None, "no layer is declared FIFO (analysis fifo_layers = [])", None)
    return Check(
        "fifo", _deliver_evidence(layers) & F.col("origin").isNotNull()
        & F.col("seq").isNotNull(),
        "no deliver rows with origin and seq",
        lambda trace: fifo_violations(trace, layers=layers, session_layers=session_layers))


def causal_check(*, layers: Sequence[str] | None = None) -> Check:
    return Check(
        "causal", _deliver_evidence(layers) & _vector().isNotNull(),
        "no deliver row records a vector clock (info.vector)",
        lambda trace: causal_violations(trace, layers=layers))


def total_order_check(*, layers: Sequence[str], per_key: bool = False) -> Check:
    if not layers:
        return Check("total order", None,
                     "no layer is declared totally ordered (analyze --total-order LAYER)", None)
    scope = " per key" if per_key else ""
    return Check(
        "total order", _deliver_evidence(layers) & F.col("msg").isNotNull(),
        f"no deliver rows in the totally ordered layers {', '.join(layers)}{scope}",
        lambda trace: total_order_violations(trace, layers=layers, per_key=per_key))


def convergence_check(*, layers: Sequence[str] | None = None,
                      revision_field: str = "rev") -> Check:
    return Check(
        "convergence",
        F.col("event").isin("apply", "deliver") & _in_layers(layers) & F.col("key").isNotNull()
        & _revision(revision_field).isNotNull(),
        f"no apply or deliver rows carry a key and a revision (info.{revision_field})",
        lambda trace: convergence_violations(trace, layers=layers,
                                             revision_field=revision_field))


def atomicity_check() -> Check:
    return Check(
        "atomicity", None,
        "cannot apply: atomic multicast (seed 004) is not built; no trace records group "
        "snapshots", None)


def default_checks(config: CheckConfig | None = None) -> list[Check]:
    """Every check, configured: reliability, FIFO, causal, total order, convergence,
    atomicity."""
    config = config if config is not None else CheckConfig()
    layers = config.layers
    return [
        reliability_check(layers=layers, exempt_crashed_origins=config.exempt_crashed_origins,
                          session_layers=config.session_layers),
        fifo_check(layers=layers if config.fifo_layers is None else config.fifo_layers,
                   session_layers=config.session_layers),
        causal_check(layers=layers),
        total_order_check(layers=config.total_order_layers,
                          per_key=config.total_order_per_key),
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
) -> list[CheckResult]:
    """Verdicts for ``checks``: one pass over the trace finds which apply, then each applicable
    check's violations are counted (after ``materialize``, e.g. written to Parquet and read
    back, so they are computed once)."""
    trace = with_row_order(trace)
    applicable = [c for c in checks if c.evidence is not None]
    found: dict[str, bool] = {}
    if applicable:
        flags = trace.agg(*[F.max(F.when(c.evidence, 1).otherwise(0)).alias(f"c{i}")
                            for i, c in enumerate(applicable) if c.evidence is not None]).first()
        found = {c.name: bool(flags is not None and flags[f"c{i}"])
                 for i, c in enumerate(applicable)}
    results = []
    for check in checks:
        if on_check is not None:
            on_check(check.name)
        if check.violations is None or not found.get(check.name, False):
            results.append(CheckResult(check.name, Status.NOT_APPLICABLE, check.missing, 0, None))
            continue
        violations = check.violations(trace)
        if materialize is not None:
            violations = materialize(check.name, violations)
        count = violations.count()
        status = Status.FAIL if count else Status.PASS
        reason = f"{count:,} violations" if count else "no violations"
        results.append(CheckResult(check.name, status, reason, count, violations))
    return results
