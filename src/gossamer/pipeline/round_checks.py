"""Round consistency for round-based state sync (seed 002, APSYN): every peer applies the same
updates to each object in a round, in the same order, with the same result as the sync
server (CTRL), every acknowledgement matches what CTRL applied, and every peer ends holding
what its CTRL holds for it.

Reads ``round`` rows (which node is the CTRL of which session: ``key``; the CTRL of another
zone is also a peer of the master's session, and in peer-to-peer mode a CTRL is a peer of its
own session too: a peer's ``sync_apply`` rows name it in ``peer``, CTRL's name none),
``sync_apply`` rows (``key`` the object, ``seq`` the sync round, ``msg`` the action's id,
``info.digest`` the value after it) and ``sync_ack`` rows (``info.code``, ``msg``). A peer that
applied nothing of an object in a round (it was away, or may not see the object) is not judged
for that object and round. An update a member zone's CTRL relays from the master zone
(``info.relayed``) was acknowledged in the master's session: it must be one that CTRL applied
there as a peer (the same action), unless it turns the zone's copy into a fresh init of the
master's (``"init"``: an init's objects have no rows of their own).

Where a run recorded its end (``ctrl_state`` rows: what a CTRL holds that each of its peers may
see; ``sync_state``: what each joined peer holds; ``info.digest`` both), every joined peer must
hold exactly what its CTRL holds for it, and be served by one: a peer that fell behind for
good applies nothing wrong, so only this shows it.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from .check_rows import info_field, layer_filter, violation_rows
from .schema import with_row_order

__all__ = ["ACK", "APPLY", "CTRL_STATE", "PEER_STATE", "ROUND", "round_consistency_violations"]

ROUND = "round"
APPLY = "sync_apply"
ACK = "sync_ack"
CTRL_STATE = "ctrl_state"
PEER_STATE = "sync_state"


def round_consistency_violations(trace: DataFrame, *, layers: Sequence[str]) -> DataFrame:
    rows = with_row_order(trace).filter(layer_filter(layers))
    ctrl_nodes = rows.filter(F.col("event") == ROUND).select(
        "run", "node", F.col("key").alias("session")).distinct()
    applies = rows.filter(F.col("event") == APPLY).select(
        "run", "node", "key", "seq", "msg", "origin", "row", "peer",
        info_field("digest").alias("digest"),
        info_field("relayed").isNotNull().alias("relayed"),
        F.coalesce(info_field("relayed") == "true", F.lit(False)).alias("in_sync"),
        F.substring_index("key", "/", 1).alias("session"))  # key: session/object
    by_ctrl = applies.filter(F.col("peer").isNull())
    at_ctrl = by_ctrl.join(ctrl_nodes, ["run", "node", "session"], "left_semi")
    at_peer = applies.filter(F.col("peer").isNotNull()).unionByName(
        by_ctrl.join(ctrl_nodes, ["run", "node", "session"], "left_anti"))

    def sequence(frame: DataFrame, by: list[str]) -> DataFrame:
        ordered = Window.partitionBy(*by).orderBy("row")
        return (frame.withColumn("pos", F.row_number().over(ordered))
                .groupBy(*by)
                .agg(F.sort_array(F.collect_list(F.struct("pos", "msg", "digest")))
                     .alias("steps"))
                .withColumn("steps", F.transform("steps", lambda s: F.struct(
                    s["msg"].alias("msg"), s["digest"].alias("digest")))))

    ctrl_seq = sequence(at_ctrl, ["run", "key", "seq"]).withColumnRenamed("steps", "expected")
    peer_seq = sequence(at_peer, ["run", "node", "key", "seq"])
    compared = peer_seq.join(ctrl_seq, ["run", "key", "seq"], "left")
    differ = compared.filter(F.col("expected").isNull()
                             | (F.col("steps") != F.col("expected")))
    first_wrong = F.element_at(F.col("steps"), 1)["msg"]
    order_violations = violation_rows(
        differ.withColumn("msg", first_wrong).withColumn("origin", F.lit(None)),
        F.when(F.col("expected").isNull(),
               F.concat(F.lit("applied to "), F.col("key"),
                        F.lit(" in a round where CTRL applied nothing to it")))
        .otherwise(F.concat(F.lit("applied to "), F.col("key"), F.lit(" "),
                            F.to_json(F.col("steps")), F.lit(" where CTRL applied "),
                            F.to_json(F.col("expected")))))

    acks = rows.filter(F.col("event") == ACK).withColumn("session", F.col("key")) \
        .join(ctrl_nodes, ["run", "node", "session"], "left_semi") \
        .select("run", "node", "seq", "msg", F.col("peer").alias("origin"),
                info_field("code").cast("int").alias("code"))
    accepted = acks.filter((F.col("code") >= 20) & (F.col("code") < 30))
    applied_msgs = at_ctrl.select("run", "seq", "msg").distinct()
    accepted_msgs = accepted.select("run", "seq", "msg").distinct()
    accepted_not_applied = accepted.join(applied_msgs, ["run", "seq", "msg"], "left_anti")
    applied_not_accepted = at_ctrl.filter(~F.col("relayed")).join(
        accepted_msgs, ["run", "seq", "msg"], "left_anti")
    action = F.substring_index("msg", ":", -1)  # an action id ends with the action's digest
    taken_up = at_peer.select("run", "node", action.alias("action")).distinct()
    relayed_unknown = at_ctrl.filter(F.col("in_sync")).withColumn("action", action) \
        .join(taken_up, ["run", "node", "action"], "left_anti")
    ack_violations = violation_rows(
        accepted_not_applied,
        F.concat(F.lit("acknowledged "), F.col("code").cast("string"),
                 F.lit(" but never applied")),
    ).unionByName(violation_rows(
        applied_not_accepted,
        F.concat(F.lit("applied to "), F.col("key"),
                 F.lit(" without an accepting acknowledgement")),
    )).unionByName(violation_rows(
        relayed_unknown,
        F.concat(F.lit("relayed to "), F.col("key"),
                 F.lit(" an update this CTRL never took from the master zone")),
    ))
    return order_violations.unionByName(ack_violations).unionByName(_state_violations(rows))


def _state_violations(rows: DataFrame) -> DataFrame:
    """Each joined peer's end state against what its CTRL holds for it (same session and
    client id)."""
    held = rows.filter(F.col("event") == CTRL_STATE).select(
        "run", F.col("key").alias("session"), "peer",
        info_field("digest").alias("expected"))
    ends = rows.filter(F.col("event") == PEER_STATE).select(
        "run", "node", "seq", F.col("key").alias("session"), "peer",
        info_field("digest").alias("digest"))
    differ = ends.join(held, ["run", "session", "peer"], "left").filter(
        F.col("expected").isNull() | (F.col("expected") != F.col("digest")))
    return violation_rows(
        differ.withColumn("msg", F.lit(None)).withColumn("origin", F.lit(None)),
        F.when(F.col("expected").isNull(),
               F.concat(F.lit("ends joined to session "), F.col("session"),
                        F.lit(" as client "), F.col("peer"),
                        F.lit(", which no CTRL serves at the end")))
        .otherwise(F.concat(F.lit("ends holding state "), F.col("digest"),
                            F.lit(" in session "), F.col("session"),
                            F.lit(" where its CTRL holds "), F.col("expected"),
                            F.lit(" for client "), F.col("peer"))))
