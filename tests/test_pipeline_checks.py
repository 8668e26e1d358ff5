"""Each guarantee check on inline traces: a planted violation it must report, a clean trace it
must pass, and the traces it cannot judge (then it says so instead of passing)."""

from __future__ import annotations

from typing import Any

import pytest
from pyspark.sql import Row
from pyspark.testing import assertDataFrameEqual

from checks import fifo_violations as oracle_fifo
from checks import missing_deliveries as oracle_missing
from gossamer.pipeline import (
    Check,
    CheckResult,
    Status,
    atomicity_check,
    causal_check,
    convergence_check,
    convergence_violations,
    default_checks,
    duplicate_violations,
    duplicates_check,
    evaluate,
    fifo_check,
    fifo_violations,
    object_states,
    reliability_check,
    reliability_summary,
    reliability_violations,
    total_order_check,
    total_order_violations,
    validity_check,
)
from trace_frames import deliver, frame, publish, row, violations

pytestmark = pytest.mark.spark


def judge(spark: Any, rows: list[Any], check: Check) -> CheckResult:
    """The check's verdict; its violations are cached, so asserting on them costs no rerun."""
    [result] = evaluate(frame(spark, rows), [check],
                        materialize=lambda _name, found: found.cache())
    return result


def verdict(spark: Any, rows: list[Any], check: Check) -> tuple[Status, str, int]:
    result = judge(spark, rows, check)
    return result.status, result.reason, result.violation_count


# -- FIFO -------------------------------------------------------------------------------------

FIFO_CLEAN = [publish(0.1, "a", 1), deliver(0.1, "a", "a", 1), publish(0.2, "a", 2),
              deliver(0.2, "a", "a", 2), deliver(0.3, "b", "a", 1), deliver(0.4, "b", "a", 2)]
FIFO_BROKEN = [deliver(1.0, "b", "a", 1), deliver(2.0, "b", "a", 3), deliver(3.0, "b", "a", 2),
               deliver(4.0, "b", "a", 2), deliver(1.0, "c", "a", 1)]


def test_fifo_passes_in_order_deliveries(spark: Any) -> None:
    result = judge(spark, FIFO_CLEAN, fifo_check())
    assert (result.status, result.reason) == (Status.PASS, "no violations")
    assertDataFrameEqual(result.violations, [])


def test_fifo_reports_gap_and_reorder_and_leaves_the_duplicate_to_its_check(spark: Any) -> None:
    result = judge(spark, FIFO_BROKEN, fifo_check())
    assert (result.status, result.reason, result.violation_count) == (
        Status.FAIL, "2 violations", 2)
    assertDataFrameEqual(result.violations, violations([
        ("r1", "b", "a:3", "a", 3, "gap: seq 3 delivered, expected 2"),
        ("r1", "b", "a:2", "a", 2, "reordered: seq 2 after seq 3"),
    ]))
    duplicate = judge(spark, FIFO_BROKEN, duplicates_check())
    assertDataFrameEqual(duplicate.violations, violations([
        ("r1", "b", "a:2", "a", 2, "delivered again in layer fifo (delivery 2; the first at "
                                   "t=3.000000, this one at t=4.000000)")]))


def test_fifo_and_duplicates_agree_with_the_test_oracle(spark: Any) -> None:
    oracle = oracle_fifo(FIFO_BROKEN)
    trace = frame(spark, FIFO_BROKEN)
    mine = fifo_violations(trace).collect() + duplicate_violations(trace).collect()
    assert len(oracle) == len(mine) == 3
    assert sorted(f"{r.node} delivered {r.origin}:{r.seq}" for r in mine) == sorted(
        p.split(", expected")[0] for p in oracle)


def test_fifo_orders_by_t_then_row_order(spark: Any) -> None:
    same_instant = [deliver(1.0, "b", "a", 2), deliver(1.0, "b", "a", 1)]
    assertDataFrameEqual(fifo_violations(frame(spark, same_instant)), violations([
        ("r1", "b", "a:2", "a", 2, "gap: seq 2 delivered, expected 1"),
        ("r1", "b", "a:1", "a", 1, "reordered: seq 1 after seq 2"),
    ]))


def test_fifo_only_checks_the_layers_asked(spark: Any) -> None:
    other = [deliver(1.0, "b", "a", 3, layer="gossip")]
    assert fifo_violations(frame(spark, other), layers=["fifo"]).count() == 0
    assert verdict(spark, other, fifo_check(layers=["fifo"]))[0] is Status.NOT_APPLICABLE


# -- reliability -----------------------------------------------------------------------------

def membership(t: float, node: str, event: str) -> Any:
    return row(t, node, event, layer="sim")


RELIABILITY_BASE = [
    membership(0.5, "d", "crash"), membership(1.5, "d", "recover"),  # down when published
    membership(1.5, "e", "crash"),  # up when published, down at the end
    membership(2.0, "f", "join"),  # joined after the publish
    membership(1.2, "g", "crash"), membership(1.4, "g", "recover"),  # up then and at the end
    row(0.9, "sim", "partition", layer="sim", info={"groups": [["a"], ["b"]]}),
    publish(1.0, "a", 1), deliver(1.0, "a", "a", 1), deliver(1.1, "b", "a", 1),
    row(0.1, "c", "send", msg="x", peer="a"),  # c is a member: it has protocol rows
    row(3.0, "b", "send", peer="a", info={"type": "fifo.status"}),  # the run ends at t=3
    membership(3.5, "c", "leave"),  # after the end (a shutdown): c still counts as up
]


def test_reliability_passes_when_every_expected_node_delivers(spark: Any) -> None:
    rows = [*RELIABILITY_BASE, deliver(1.3, "c", "a", 1), deliver(1.6, "g", "a", 1)]
    result = judge(spark, rows, reliability_check())
    assert result.status is Status.PASS
    assertDataFrameEqual(result.violations, [])
    assertDataFrameEqual(reliability_summary(frame(spark, rows)), [Row(
        run="r1", layer="fifo", published=1, expected=4, delivered=4, reliability=1.0)])


def test_reliability_reports_nodes_up_at_publish_and_end_that_missed_it(spark: Any) -> None:
    result = judge(spark, RELIABILITY_BASE, reliability_check())
    assert result.status is Status.FAIL
    detail = "not delivered: it was up when a published it at t=1.000000 and is up at the end"
    assertDataFrameEqual(result.violations, violations([
        ("r1", "c", "a:1", "a", 1, detail),
        ("r1", "g", "a:1", "a", 1, detail),
    ]))
    assertDataFrameEqual(reliability_summary(frame(spark, RELIABILITY_BASE)), [Row(
        run="r1", layer="fifo", published=1, expected=4, delivered=2, reliability=0.5)])


def test_reliability_agrees_with_the_test_oracle(spark: Any) -> None:
    rows = [publish(1.0, "a", 1), publish(1.5, "b", 1), deliver(1.0, "a", "a", 1),
            deliver(1.5, "b", "b", 1), deliver(1.2, "b", "a", 1), deliver(1.3, "c", "a", 1),
            row(0.0, "c", "send", msg="m", peer="a")]
    mine = {f"{r.node} misses {r.msg}"
            for r in reliability_violations(frame(spark, rows)).collect()}
    assert mine == set(oracle_missing(rows, ["a", "b", "c"])) == {"a misses b:1", "c misses b:1"}


def test_reliability_can_exempt_messages_of_crashed_publishers(spark: Any) -> None:
    rows = [publish(1.0, "a", 1), deliver(1.0, "a", "a", 1), publish(2.0, "a", 2),
            deliver(2.0, "a", "a", 2), deliver(1.1, "b", "a", 1), deliver(1.1, "c", "a", 1),
            membership(2.1, "a", "crash"), row(3.0, "b", "send", peer="c")]
    strict = reliability_violations(frame(spark, rows))
    assert sorted((r.node, r.msg) for r in strict.collect()) == [("b", "a:2"), ("c", "a:2")]
    lenient = reliability_violations(frame(spark, rows), exempt_crashed_origins=True)
    assertDataFrameEqual(lenient, [])


def sub(t: float, node: str, topic: str, event: str = "subscribe") -> Any:
    return row(t, node, event, layer="pubsub", key=topic)


def pub(t: float, origin: str, seq: int, topic: str) -> Any:
    return publish(t, origin, seq, layer="pubsub", key=topic)


def got(t: float, node: str, origin: str, seq: int, topic: str) -> Any:
    return deliver(t, node, origin, seq, layer="pubsub", key=topic)


# b and c subscribe to x, d to y; c unsubscribes from x at 2.0; e subscribes to x late
PUBSUB_BASE = [
    sub(0.5, "b", "x"), sub(0.5, "c", "x"), sub(0.5, "d", "y"), sub(2.0, "c", "x", "unsubscribe"),
    sub(2.5, "e", "x"),
    pub(1.0, "a", 1, "x"), pub(3.0, "a", 2, "x"), pub(3.0, "d", 1, "y"),
    row(0.1, "a", "send", layer="pubsub", peer="b"),
]


def test_reliability_expects_only_the_subscribers_of_a_topic(spark: Any) -> None:
    rows = [*PUBSUB_BASE, got(1.1, "b", "a", 1, "x"), got(1.1, "c", "a", 1, "x"),
            got(3.1, "b", "a", 2, "x"), got(3.1, "e", "a", 2, "x"), got(3.0, "d", "d", 1, "y")]
    result = judge(spark, rows, reliability_check(layers=["pubsub"]))
    assert (result.status, result.reason) == (Status.PASS, "no violations")
    assertDataFrameEqual(reliability_summary(frame(spark, rows), layers=["pubsub"]), [Row(
        run="r1", layer="pubsub", published=3, expected=5, delivered=5, reliability=1.0)])


def test_reliability_reports_a_subscriber_that_missed_its_topic(spark: Any) -> None:
    # planted: b misses a:2 and e misses a:2; c (unsubscribed) and d (other topic) owe nothing
    rows = [*PUBSUB_BASE, got(1.1, "b", "a", 1, "x"), got(1.1, "c", "a", 1, "x")]
    result = judge(spark, rows, reliability_check(layers=["pubsub"]))
    assert result.status is Status.FAIL
    detail = "not delivered: it was up when a published it at t=3.000000 and is up at the end"
    assertDataFrameEqual(result.violations, violations([
        ("r1", "b", "a:2", "a", 2, detail), ("r1", "e", "a:2", "a", 2, detail)]))


def test_a_pubsub_run_in_which_nobody_subscribed_owes_nobody_its_publishes(spark: Any) -> None:
    # no subscribe row at all: the publishes of the pub/sub layer and of the Scribe tree below
    # it are owed by nobody (not by every node, as in a broadcast run)
    rows = [row(0.1, "a", "send", layer="pubsub", peer="b"), row(0.1, "b", "send", layer="scribe",
            peer="a"), pub(1.0, "a", 1, "x"), publish(1.0, "a", 1, layer="scribe", key="x")]
    assert verdict(spark, rows, reliability_check(layers=["pubsub", "scribe"]))[0] is Status.PASS
    # planted: b delivers it anyway, on a topic it never subscribed to
    result = judge(spark, [*rows, got(1.1, "b", "a", 1, "x")], validity_check())
    [found] = result.violations.collect()
    assert (found.node, found.msg) == ("b", "a:1")
    assert found.detail.startswith("delivered on topic x while not subscribed"), found.detail
    # the same rows in a layer that is no topic layer: a broadcast run, b owes the message
    plain = [publish(1.0, "a", 1, key="x"), row(0.1, "b", "send", peer="a")]
    assert verdict(spark, plain, reliability_check())[0] is Status.FAIL


def test_reliability_without_publishes_is_not_applicable(spark: Any) -> None:
    rows = [deliver(1.0, "b", "a", 1)]
    status, reason, _ = verdict(spark, rows, reliability_check())
    assert status is Status.NOT_APPLICABLE and "nothing was published" in reason


def session(t: float, node: str, event: str) -> Any:
    return row(t, node, event, layer="activity")


# seed 003: b's first session ends at 1.05, before a:1 reaches it; its second starts at 2.5
SESSION_BASE = [
    session(0.5, "b", "join"), publish(1.0, "a", 1, layer="activity"),
    session(1.05, "b", "leave"), publish(2.0, "a", 2, layer="activity"),
    session(2.5, "b", "join"), publish(3.0, "a", 3, layer="activity"),
    row(4.0, "a", "send", layer="activity", peer="b"),  # the run ends at t=4
]


def test_reliability_in_session_layers_expects_only_the_last_session(spark: Any) -> None:
    rows = [*SESSION_BASE, deliver(3.1, "b", "a", 3, layer="activity")]
    # without session layers a session's join and leave are no membership changes
    strict = reliability_violations(frame(spark, rows), layers=["activity"])
    assert sorted((r.node, r.msg) for r in strict.collect()) == [("b", "a:1"), ("b", "a:2")]
    result = judge(spark, rows, reliability_check(layers=["activity"],
                                                  session_layers=["activity"]))
    assert (result.status, result.reason) == (Status.PASS, "no violations")
    assertDataFrameEqual(reliability_summary(frame(spark, rows), layers=["activity"],
                                             session_layers=["activity"]), [Row(
        run="r1", layer="activity", published=3, expected=4, delivered=4, reliability=1.0)])


def test_reliability_in_session_layers_reports_a_miss_in_the_last_session(spark: Any) -> None:
    result = judge(spark, SESSION_BASE, reliability_check(layers=["activity"],
                                                          session_layers=["activity"]))
    assert result.status is Status.FAIL
    detail = "not delivered: it was up when a published it at t=3.000000 and is up at the end"
    assertDataFrameEqual(result.violations, violations([("r1", "b", "a:3", "a", 3, detail)]))


def test_a_session_that_starts_after_the_last_row_still_ends_the_one_before(
    spark: Any,
) -> None:
    """Seed 003's workload marks a healed tree with ``join`` rows, maybe after every other row
    of the run: b's last session starts there, so a:2 (published while b's server was just
    back, before the heal) is not owed. Found by ``gossamer vopr activity --seed 16``."""
    rows = [session(0.5, "b", "join"), publish(1.0, "a", 1, layer="activity"),
            deliver(1.1, "b", "a", 1, layer="activity"), session(1.5, "b", "leave"),
            membership(1.6, "b", "crash"), membership(2.0, "b", "recover"),
            publish(2.05, "a", 2, layer="activity"),
            row(3.0, "a", "send", layer="activity", peer="c"),  # the last other row
            session(5.0, "b", "join")]
    result = judge(spark, rows, reliability_check(layers=["activity"],
                                                  session_layers=["activity"]))
    assert (result.status, result.reason) == (Status.PASS, "no violations")
    # a node that first joins after the end owes nothing (it was never up before)
    late = [*rows[:-1], session(5.0, "z", "join")]
    assert reliability_violations(frame(spark, late), layers=["activity"],
                                  session_layers=["activity"]).filter(
        "node = 'z'").count() == 0
    # a trailing leave still does not take a node down at the end (a shutdown): b's last
    # session, from its recover, owes a:2
    strict = reliability_violations(frame(spark, [*late, session(6.0, "b", "leave")]),
                                    layers=["activity"], session_layers=["activity"])
    assert sorted((r.node, r.msg) for r in strict.collect()) == [("b", "a:2")]


def test_fifo_in_session_layers_allows_a_gap_across_a_membership_change(spark: Any) -> None:
    rows = [session(0.5, "b", "join"), deliver(1.1, "b", "a", 1, layer="activity"),
            session(1.2, "b", "leave"), session(2.5, "b", "join"),
            deliver(3.1, "b", "a", 3, layer="activity"),  # a gap across the rejoin: fine
            deliver(3.5, "b", "a", 5, layer="activity"),  # a gap in one session: planted
            deliver(3.6, "b", "a", 5, layer="activity"),  # a duplicate: planted
            session(3.0, "c", "join"), deliver(3.2, "c", "a", 3, layer="activity")]
    assert fifo_violations(frame(spark, rows)).count() == 3
    result = judge(spark, rows, fifo_check(layers=["activity"], session_layers=["activity"]))
    assert result.status is Status.FAIL
    assertDataFrameEqual(result.violations, violations([
        ("r1", "b", "a:5", "a", 5, "gap: seq 5 delivered, expected 4")]))
    clean = rows[:5] + rows[7:]
    status, reason, _ = verdict(spark, clean, fifo_check(session_layers=["activity"]))
    assert (status, reason) == (Status.PASS, "no violations")


def test_fifo_in_session_layers_allows_a_gap_while_the_node_is_away(spark: Any) -> None:
    """Seed 003's workload ends every session shortly before a server crashes: what a client
    then sends through the dying server is lost, and the others, already away, deliver its
    next activity with a gap. Found by ``gossamer vopr activity --seed 29``."""
    rows = [session(0.5, "b", "join"), deliver(1.0, "b", "a", 1, layer="activity"),
            session(1.2, "b", "leave"),
            deliver(1.3, "b", "a", 2, layer="activity"),  # away now
            deliver(1.5, "b", "a", 4, layer="activity"),  # a gap while away: fine
            deliver(1.6, "b", "a", 4, layer="activity"),  # a duplicate while away: planted
            session(2.0, "b", "join"),
            deliver(2.5, "b", "a", 5, layer="activity"),
            deliver(3.0, "b", "a", 7, layer="activity"),  # a gap in the session: planted
            row(4.0, "a", "send", layer="activity", peer="b")]
    result = judge(spark, rows, fifo_check(layers=["activity"], session_layers=["activity"]))
    assertDataFrameEqual(result.violations, violations([
        ("r1", "b", "a:7", "a", 7, "gap: seq 7 delivered, expected 6")]))
    duplicate = judge(spark, rows, duplicates_check(layers=["activity"]))
    assertDataFrameEqual(duplicate.violations, violations([
        ("r1", "b", "a:4", "a", 4, "delivered again in layer activity (delivery 2; the first "
                                   "at t=1.500000, this one at t=1.600000)")]))


# -- causal order ------------------------------------------------------------------------------

def cdeliver(t: float, node: str, origin: str, seq: int, vector: dict[str, int]) -> Any:
    return deliver(t, node, origin, seq, layer="causal", info={"vector": vector})


CAUSAL_CLEAN = [
    cdeliver(1.0, "a", "a", 1, {"a": 1}),
    cdeliver(2.0, "b", "a", 1, {"a": 1}), cdeliver(3.0, "b", "b", 1, {"a": 1, "b": 1}),
    cdeliver(4.0, "c", "a", 1, {"a": 1}), cdeliver(5.0, "c", "b", 1, {"a": 1, "b": 1}),
]


def test_causal_passes_deliveries_after_their_causal_past(spark: Any) -> None:
    result = judge(spark, CAUSAL_CLEAN, causal_check())
    assert result.status is Status.PASS
    assertDataFrameEqual(result.violations, [])


def test_causal_reports_deliveries_before_or_without_their_causal_past(spark: Any) -> None:
    rows = [*CAUSAL_CLEAN,
            cdeliver(4.0, "d", "b", 1, {"a": 1, "b": 1}), cdeliver(5.0, "d", "a", 1, {"a": 1}),
            cdeliver(4.0, "e", "b", 1, {"a": 1, "b": 1}),
            cdeliver(4.0, "f", "a", 2, {"a": 2}), cdeliver(5.0, "f", "a", 1, {"a": 1})]
    result = judge(spark, rows, causal_check())
    assert (result.status, result.reason) == (Status.FAIL, "3 violations")
    prefix = "causal past not respected: "
    assertDataFrameEqual(result.violations, violations([
        ("r1", "d", "b:1", "b", 1, prefix + "a:1 delivered after it"),
        ("r1", "e", "b:1", "b", 1, prefix + "a:1 never delivered"),
        ("r1", "f", "a:2", "a", 2, prefix + "a:1 delivered after it"),
    ]))


def test_causal_without_vectors_is_not_applicable(spark: Any) -> None:
    status, reason, count = verdict(spark, FIFO_CLEAN, causal_check())
    assert (status, count) == (Status.NOT_APPLICABLE, 0)
    assert "info.vector" in reason


# -- total order -------------------------------------------------------------------------------

def tdeliver(t: float, node: str, seq: int, key: str | None = None) -> Any:
    return deliver(t, node, "x", seq, layer="paxos", key=key)


TOTAL_CLEAN = [tdeliver(1, "a", 1), tdeliver(2, "a", 2), tdeliver(3, "a", 3),
               tdeliver(1, "b", 1), tdeliver(2, "b", 2), tdeliver(3, "b", 3),
               tdeliver(1, "c", 1), tdeliver(2, "c", 2)]  # c is behind: a prefix is fine


def test_total_order_passes_prefix_consistent_sequences(spark: Any) -> None:
    result = judge(spark, TOTAL_CLEAN, total_order_check(layers=["paxos"]))
    assert result.status is Status.PASS
    assertDataFrameEqual(result.violations, [])


def test_total_order_reports_the_first_divergence_per_replica(spark: Any) -> None:
    rows = [*TOTAL_CLEAN[:6], tdeliver(1, "c", 1), tdeliver(2, "c", 3), tdeliver(3, "c", 2)]
    result = judge(spark, rows, total_order_check(layers=["paxos"]))
    assert result.status is Status.FAIL
    assertDataFrameEqual(result.violations, violations([
        ("r1", "c", "x:3", "x", 3, "total order: position 2 has x:3 where the other replicas "
                                   "have x:2"),
    ]))


def test_total_order_per_key_ignores_interleaving_across_keys(spark: Any) -> None:
    rows = [tdeliver(1, "a", 1, "k1"), tdeliver(2, "a", 2, "k2"),
            tdeliver(1, "b", 2, "k2"), tdeliver(2, "b", 1, "k1")]
    per_key = total_order_violations(frame(spark, rows), layers=["paxos"], per_key=True)
    assertDataFrameEqual(per_key, [])
    assert total_order_violations(frame(spark, rows), layers=["paxos"]).count() > 0


def test_total_order_needs_a_declared_layer(spark: Any) -> None:
    status, reason, _ = verdict(spark, TOTAL_CLEAN, total_order_check(layers=()))
    assert status is Status.NOT_APPLICABLE and "--total-order" in reason
    status, reason, _ = verdict(spark, TOTAL_CLEAN, total_order_check(layers=["raft"]))
    assert status is Status.NOT_APPLICABLE and "raft" in reason


# -- per-object convergence ----------------------------------------------------------------

def rdeliver(t: float, node: str, origin: str, rev: str) -> Any:
    return deliver(t, node, origin, 1, layer="replica", key="obj", info={"rev": rev})


CONVERGED = [rdeliver(1, "a", "a", "r1"), rdeliver(2, "a", "b", "r2"),
             rdeliver(1, "b", "a", "r1"), rdeliver(2, "b", "b", "r2"),
             rdeliver(1, "d", "a", "r1"), row(1.5, "d", "crash", layer="sim")]


def test_convergence_passes_when_replicas_agree(spark: Any) -> None:
    result = judge(spark, CONVERGED, convergence_check())
    assert result.status is Status.PASS
    assertDataFrameEqual(result.violations, [])


def test_convergence_reports_revision_order_and_final_state(spark: Any) -> None:
    rows = [*CONVERGED, rdeliver(1, "c", "b", "r2"), rdeliver(2, "c", "a", "r1")]
    result = judge(spark, rows, convergence_check())
    assert result.status is Status.FAIL
    assertDataFrameEqual(result.violations, violations([
        ("r1", "c", "b:1", "b", 1, "revision order of key obj: position 1 has r2 where the "
                                   "other replicas have r1"),
        ("r1", "c", "a:1", "a", 1, "final state of key obj: revision r1 where the other "
                                   "replicas ended at r2"),
    ]))
    # a revision ordering transform on its own: only the per-key order, with a custom field
    renamed = [rdeliver(1, "a", "a", "r1"), rdeliver(1, "c", "b", "r2")]
    assert convergence_violations(frame(spark, renamed), revision_field="version").count() == 0


def test_convergence_without_revisions_is_not_applicable(spark: Any) -> None:
    status, reason, _ = verdict(spark, FIFO_CLEAN, convergence_check())
    assert status is Status.NOT_APPLICABLE and "info.rev" in reason


# -- per-object convergence from apply minus revert (seed 000's trace) -----------------------

def apply(t: float, node: str, write: tuple[str, int, str, str | None], key: str = "obj") -> Any:
    writer, seq, rev, old = write
    return row(t, node, "apply", layer="replica", msg=f"{writer}:{seq}", origin=writer, key=key,
               seq=seq, info={"rev": rev, "old": old})


def revert(t: float, node: str, write: tuple[str, int, str, str | None],
           key: str = "obj") -> Any:
    writer, seq, rev, _old = write
    return row(t, node, "revert", layer="replica", msg=f"{writer}:{seq}", origin=writer,
               key=key, seq=seq, info={"rev": rev})


def snapshot(t: float, node: str) -> Any:
    return row(t, node, "snapshot", layer="replica", peer="hub",
               info={"objects": 1, "vector": {"a": 1, "c": 1}})


# a and b create the object at once: a's write wins (lowest id); c then writes on it
A, B, C = ("a", 1, "rA", None), ("b", 1, "rB", None), ("c", 1, "rC", "rA")
D = ("f", 1, "rD", "rA")  # written on rA by f

APPLIED = [
    apply(1.0, "a", A), apply(3.0, "a", C),
    # b applied its own write, then delivered a's: reverted its own
    apply(1.0, "b", B), revert(2.0, "b", B), apply(2.0, "b", A), apply(3.0, "b", C),
    apply(1.5, "c", A), apply(2.5, "c", C),
    apply(1.2, "d", A), membership(1.4, "d", "crash"), membership(1.6, "d", "recover"),
    apply(3.2, "d", C),
    # e held the loser, then a snapshot replaced its state with the installed path
    apply(1.1, "e", B), row(4.0, "e", "recv", layer="replica", peer="hub"),
    apply(4.0, "e", A), apply(4.0, "e", C), snapshot(4.0, "e"),
    # k applied the loser, crashed before committing it, and after its restart applied the
    # winner on the durable state (no revert of the lost write is traced)
    apply(1.0, "k", B), membership(1.3, "k", "crash"), membership(1.5, "k", "recover"),
    apply(2.0, "k", A), apply(3.0, "k", C),
]


def test_convergence_from_applies_minus_reverts_passes_a_converged_trace(spark: Any) -> None:
    result = judge(spark, APPLIED, convergence_check())
    assert (result.status, result.reason) == (Status.PASS, "no violations")
    assertDataFrameEqual(result.violations, [])
    held = object_states(frame(spark, APPLIED)).select(
        "node", "revision", "installed", "epoch")
    assertDataFrameEqual(held, [
        Row(node=node, revision=rev, installed=installed, epoch=epoch)
        for node, rev, installed, epoch in [
            ("a", "rA", False, 0), ("a", "rC", False, 0), ("b", "rA", False, 0),
            ("b", "rC", False, 0), ("c", "rA", False, 0), ("c", "rC", False, 0),
            ("d", "rA", False, 0), ("d", "rC", False, 1), ("e", "rA", True, 0),
            ("e", "rC", True, 0), ("k", "rB", False, 0), ("k", "rA", False, 1),
            ("k", "rC", False, 1)]])


def test_convergence_from_applies_reports_planted_divergence(spark: Any) -> None:
    rows = [
        *APPLIED,
        apply(1.0, "f", A), apply(2.0, "f", C), apply(2.5, "f", D),  # rD applied on rC
        apply(1.0, "g", B),  # the loser, never reverted
        apply(1.0, "h", A), apply(2.0, "h", C), revert(3.0, "h", C),  # undone, no winner
        apply(1.0, "i", A), row(2.0, "i", "offline", layer="replica"),  # offline: not judged
        apply(1.0, "j", A), apply(2.0, "j", C), snapshot(3.0, "j"),  # a snapshot without it
    ]
    result = judge(spark, rows, convergence_check())
    assert (result.status, result.violation_count) == (Status.FAIL, 5)
    final = "final state of key obj: revision {} where the other replicas ended at rC"
    assertDataFrameEqual(result.violations, violations([
        ("r1", "f", "f:1", "f", 1, "revision order of key obj: rD was written on rA but "
                                   "applied on rC"),
        ("r1", "f", "f:1", "f", 1, final.format("rD")),
        ("r1", "g", "b:1", "b", 1, final.format("rB")),
        ("r1", "h", "a:1", "a", 1, final.format("rA")),
        ("r1", "j", None, None, None, final.format("none")),
    ]))


def stop(t: float, node: str, *, queued: int = 0) -> Any:
    return row(t, node, "offline", layer="replica", info={"reason": "stopped", "queued": queued})


def test_convergence_judges_replicas_that_all_stopped_cleanly(spark: Any) -> None:
    # every replica went offline by stopping (a real run's end): those that applied the agreed
    # write are held to it; one that stopped before it arrived, or with writes queued, is not
    rows = [
        apply(1.0, "a", A), apply(3.0, "a", C), stop(5.0, "a"),
        apply(1.5, "b", A), apply(3.1, "b", C), stop(5.1, "b"),
        apply(1.5, "c", A), stop(2.0, "c"),  # stopped before C reached it
        apply(1.0, "q", A), apply(3.0, "q", C), apply(4.0, "q", ("q", 1, "rE", "rC")),
        stop(5.0, "q", queued=1),  # its own last write never left
    ]
    assert judge(spark, rows, convergence_check()).status is Status.PASS
    planted = [*rows, apply(1.2, "x", A), apply(3.3, "x", C), revert(3.5, "x", C),
               stop(5.2, "x")]
    result = judge(spark, planted, convergence_check())
    assertDataFrameEqual(result.violations, violations([
        ("r1", "x", "a:1", "a", 1, "final state of key obj: revision rA where the other "
                                   "replicas ended at rC")]))


def test_convergence_ignores_deliveries_in_layers_that_trace_applies(spark: Any) -> None:
    # a deliver row with a revision in the replica layer is not a state: its apply rows are
    rows = [*APPLIED, rdeliver(5.0, "a", "b", "rB")]
    assert judge(spark, rows, convergence_check()).status is Status.PASS
    only_applies = [apply(1.0, "a", A)]
    status, _reason, _count = verdict(spark, only_applies, convergence_check())
    assert status is Status.PASS


def test_a_delivery_just_before_a_kill_is_not_one_while_down(spark: Any) -> None:
    # n2's process was killed right after its delivery of n1:2 (no crash row: the crash is
    # inferred where it joins again) and restarted; the delivery was made while it was up
    rows = [
        row(0.0, "n1", "join", layer="net"), row(0.0, "n2", "join", layer="net"),
        publish(1.0, "n1", 1), deliver(1.1, "n2", "n1", 1),
        publish(2.0, "n1", 2), deliver(2.1, "n2", "n1", 2),
        row(5.0, "n2", "join", layer="net"),
        publish(6.0, "n1", 3), deliver(6.1, "n2", "n1", 3),
    ]
    assert verdict(spark, rows, validity_check())[0] is Status.PASS
    # the same trace with a delivery after n2 left: that one is
    late = [*rows, row(7.0, "n2", "leave", layer="net"), publish(7.5, "n1", 4),
            deliver(8.0, "n2", "n1", 4)]
    result = judge(spark, late, validity_check())
    [found] = result.violations.collect()
    assert (found.node, found.msg) == ("n2", "n1:4")
    assert found.detail.startswith("delivered while the node was down"), found.detail


def test_a_publish_row_a_killed_process_had_not_written_is_no_message_from_nowhere(
        spark: Any) -> None:
    # n1's process was killed (SIGKILL) before it wrote its last batch of rows: its publish of
    # n1:3 is gone, n2's delivery of it was written. Its rows end without a clean leave
    up = [row(0.0, "n1", "join", layer="net"), row(0.0, "n2", "join", layer="net")]
    killed = [*up, publish(1.0, "n1", 1), deliver(1.1, "n2", "n1", 1),
              publish(2.0, "n1", 2), deliver(2.1, "n2", "n1", 2), deliver(3.1, "n2", "n1", 3)]
    assert verdict(spark, killed, validity_check())[0] is Status.PASS
    # killed and restarted (the crash inferred where it joins again): the lost tail is the
    # one before the restart, the publishes after it are written
    restarted = [*killed, row(4.0, "n1", "join", layer="net"), publish(5.0, "n1", 4),
                 deliver(5.1, "n2", "n1", 4), row(6.0, "n1", "leave", layer="net"),
                 row(6.0, "n2", "leave", layer="net")]
    assert verdict(spark, restarted, validity_check())[0] is Status.PASS

    def unpublished(rows: list[Any]) -> set[tuple[str, str]]:
        return {(v.node, v.msg) for v in judge(spark, rows, validity_check()).violations.collect()
                if v.detail.startswith("delivered a message that was never published")}

    # rows are written in order: a publish lost while a later one of the same process was
    # written is no lost tail
    middle = [*up, publish(1.0, "n1", 1), deliver(3.1, "n2", "n1", 2), publish(3.0, "n1", 3)]
    assert unpublished(middle) == {("n2", "n1:2")}
    # a process that stopped cleanly wrote everything
    clean = [*up, publish(1.0, "n1", 1), row(2.0, "n1", "leave", layer="net"),
             deliver(2.1, "n2", "n1", 2), row(3.0, "n2", "leave", layer="net")]
    assert unpublished(clean) == {("n2", "n1:2")}
    # and the simulator loses no rows: its crashed node's messages are judged whole
    simulated = [row(0.0, "n1", "join", layer="sim"), row(0.0, "n2", "join", layer="sim"),
                 publish(1.0, "n1", 1), row(1.5, "n1", "crash", layer="sim"),
                 deliver(2.1, "n2", "n1", 2)]
    assert unpublished(simulated) == {("n2", "n1:2")}


def test_an_origins_own_message_is_never_one_nobody_published(spark: Any) -> None:
    # seed 003's clients trace their own activity as they send it; a server that dies before it
    # arrives publishes nothing: the origin's copy is not a message from nowhere. The same
    # message delivered at another node is
    rows = [publish(1.0, "n1", 1), deliver(1.0, "n1", "n1", 1), deliver(1.1, "n2", "n1", 1),
            deliver(2.0, "n1", "n1", 2, layer="activity")]
    assert verdict(spark, rows, validity_check())[0] is Status.PASS
    result = judge(spark, [*rows, deliver(2.1, "n2", "n1", 2, layer="activity")],
                   validity_check())
    [found] = result.violations.collect()
    assert (found.node, found.msg) == ("n2", "n1:2")
    assert found.detail.startswith("delivered a message that was never published"), found.detail


# -- atomicity and the verdicts together ------------------------------------------------------

def test_atomicity_does_not_apply_without_atomic_rows(spark: Any) -> None:
    status, reason, _ = verdict(spark, FIFO_CLEAN, atomicity_check())
    assert status is Status.NOT_APPLICABLE
    assert "no atomic multicast" in reason


@pytest.mark.parametrize(("rows", "expected"), [
    (FIFO_CLEAN, {"reliability": Status.PASS, "own delivery": Status.PASS,
                  "duplicates": Status.PASS, "validity": Status.PASS, "fifo": Status.PASS}),
    (FIFO_BROKEN, {"reliability": Status.NOT_APPLICABLE, "own delivery": Status.NOT_APPLICABLE,
                   "duplicates": Status.FAIL, "validity": Status.FAIL, "fifo": Status.FAIL}),
])
def test_default_checks_give_one_verdict_each(spark: Any, rows: list[Any],
                                              expected: dict[str, Status]) -> None:
    results = {r.name: r.status for r in evaluate(frame(spark, rows), default_checks())}
    assert results == {**expected, "causal": Status.NOT_APPLICABLE,
                       "total order": Status.NOT_APPLICABLE,
                       "convergence": Status.NOT_APPLICABLE,
                       "atomicity": Status.NOT_APPLICABLE,
                       "paxos agreement": Status.NOT_APPLICABLE,
                       "decided order": Status.NOT_APPLICABLE,
                       "acknowledged kept": Status.NOT_APPLICABLE}


# -- what the checks share ---------------------------------------------------------------------


def test_checks_share_the_membership_timeline_within_one_evaluation_only(spark: Any) -> None:
    from gossamer.pipeline.delivery_checks import expected_deliveries, member_status
    from gossamer.pipeline.schema import is_held, membership_changes, sharing_intermediates

    trace = frame(spark, FIFO_CLEAN)
    assert member_status(trace) is not member_status(trace)  # no block: built each time
    with sharing_intermediates():
        status = member_status(trace)
        assert member_status(trace) is status and is_held(status)
        assert membership_changes(trace) is membership_changes(trace)
        assert member_status(trace, session_layers=("x",)) is not status
        owed = expected_deliveries(trace, layers=["fifo"])
        assert expected_deliveries(trace, layers=("fifo",)) is owed
        assert expected_deliveries(trace, layers=None) is not owed
        with sharing_intermediates():  # an inner block shares the outer one's
            assert member_status(trace) is status
        assert is_held(status)
        shared_rows = sorted(owed.collect(), key=repr)
        assert shared_rows  # b owes a:1 and a:2
    # still there after the block: a check's violations are counted after evaluate's block
    assert sorted(owed.collect(), key=repr) == shared_rows
    assert sorted(expected_deliveries(trace, layers=["fifo"]).collect(), key=repr) == shared_rows
    with sharing_intermediates(release_at_end=True):  # analyze's: freed at its end
        status = member_status(trace)
        assert is_held(status)
    assert not is_held(status)
