"""Checks that replicas agree: one sequence everywhere (total order, per key for replicated
objects) and per-object convergence (the writes each replica holds, from apply minus revert
rows). Pure ``DataFrame -> DataFrame`` transforms (see ``checks``)."""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from .check_rows import (
    VIOLATION_COLUMNS,
    as_flag,
    deliver_rows,
    info_field,
    layer_filter,
    violation_rows,
)
from .errors import PipelineError
from .schema import (
    MEMBERSHIP_EVENTS,
    ROW,
    RUNTIME_LAYERS,
    clock,
    membership_changes,
    with_row_order,
)

__all__ = [
    "STOPPED_REASON",
    "convergence_violations",
    "object_states",
    "total_order_violations",
]

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
    return violation_rows(first.select(*groups, "node", "d.*"), F.format_string(
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
    rows = deliver_rows(trace, layers).filter(F.col("msg").isNotNull())
    if not per_key:
        return _sequence_divergence(rows, ["run", "layer"], "msg", "total order")
    applied = (trace.filter((F.col("event") == "apply") & layer_filter(layers))
               .select("run", "layer").distinct())
    rows = (rows.filter(F.col("key").isNotNull())
            .join(F.broadcast(applied), ["run", "layer"], "left_anti"))
    delivered = _sequence_divergence(rows, ["run", "layer", "key"], "msg", "total order")
    held = _held_chain_breaks(trace, layers, revision_field, base_field).select(
        *VIOLATION_COLUMNS[:-1], F.format_string(
            "total order of key %s: %s was written on %s but held after %s", F.col("key"),
            F.col("revision"), F.coalesce(F.col("base"), F.lit("no object")),
            F.coalesce(F.col("previous"), F.lit("no object"))).alias("detail"))
    return delivered.unionByName(violation_rows(held, F.col("detail")))


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
    revision = info_field(revision_field)
    event = F.col("event")
    mine = layer_filter(layers) & F.col("node").isNotNull()
    keyed = mine & F.col("key").isNotNull() & revision.isNotNull()
    membership = (event.isin(list(MEMBERSHIP_EVENTS)) & F.col("node").isNotNull()
                  & F.col("layer").isin(*RUNTIME_LAYERS))
    wanted = ((event.isin("apply", "revert", "deliver") & keyed)
              | (event.isin("snapshot", *_LINK_EVENTS) & mine) | membership)
    rows = trace.filter(wanted).select(
        "run", "layer", "node", "event", "key", revision.alias("revision"),
        info_field(base_field).alias("base"), "msg", "origin", "seq", "t", ROW,
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
        F.sum(as_flag(counted & event.isin(list(_RESTART_EVENTS)))).over(
            in_order.rowsBetween(Window.unboundedPreceding, Window.currentRow)).alias("epoch"),
        F.max(F.when(event == "snapshot", F.struct("t", ROW))).over(whole_layer).alias("snap"),
        F.max(as_flag(is_write)).over(later).alias("written_later"),
        F.max(as_flag(event == "revert")).over(later).alias("reverted_later"),
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
        F.when(sequenced, F.sum(as_flag(sequenced)).over(upto)).alias("position"),
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
        F.max(as_flag(up_voter)).over(by_object) == 1, up_voter).otherwise(any_voter))
    voter = F.col("voter")
    by_final = Window.partitionBy("run", "layer", "key", "final_revision")
    at_position = Window.partitionBy("run", "layer", "key", "position")
    with_position = Window.partitionBy("run", "layer", "key", "position", "revision")
    state = state.select(
        "*", F.sum(as_flag(voter)).over(by_final).alias("votes"),
        F.max(F.when(voter, F.coalesce(F.col("final.t"), F.lit(-1.0)))).over(by_final)
        .alias("latest"),
        F.sum(as_flag(sequenced)).over(with_position).alias("position_votes"))
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
        F.max(as_flag(F.col("from_apply")
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
    return violation_rows(found_rows.select("run", "node", "v.*"), F.col("detail"))
