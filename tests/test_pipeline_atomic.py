"""The pipeline's atomicity check on a simulated atomic multicast trace: the clean trace
passes, and each planted violation is caught at the right node and message (and agrees with
the plain-Python verdict the simulator tests use)."""

from __future__ import annotations

import functools
from typing import Any

import orjson
import pytest

from gossamer.core.trace import COLUMNS, MemorySink, TraceRow
from gossamer.pipeline import Status, atomicity_check, evaluate, trace_schema
from gossamer.pipeline.atomic_metrics import atomic_metrics
from gossamer.services.atomic import AtomicRunOptions, judge_atomicity, run_atomic_sim

pytestmark = pytest.mark.spark

Rows = list[dict[str, Any]]


@functools.cache
def _clean() -> tuple[tuple[Any, ...], ...]:
    sink = MemorySink()
    run_atomic_sim(3, AtomicRunOptions(members=4, messages=6, loss=0.1, member_crashes=1),
                   trace=sink, run="atomic-3")
    return tuple(sink.rows)


def clean() -> Rows:
    return [dict(zip(COLUMNS, row, strict=True)) for row in _clean()]


def judge(spark: Any, rows: Rows) -> tuple[Status, set[tuple[str | None, str, str]]]:
    frame = spark.createDataFrame([tuple(r[c] for c in COLUMNS) for r in rows], trace_schema())
    (result,) = evaluate(frame, [atomicity_check()])
    found = set()
    if result.violations is not None:
        found = {(v.node, v.msg, v.detail) for v in result.violations.collect()}
    return result.status, found


def decided(rows: Rows, event: str) -> list[dict[str, Any]]:
    return [r for r in rows if r["layer"] == "atomic" and r["event"] == event]


def test_a_clean_trace_passes_and_planted_violations_are_caught(spark: Any) -> None:
    rows = clean()
    verdict = judge_atomicity(_as_trace_rows(rows))
    assert verdict.ok and verdict.committed > 0 and verdict.aborted > 0, verdict
    status, found = judge(spark, rows)
    assert (status, found) == (Status.PASS, set())

    commit = decided(rows, "commit")[0]
    mid = commit["msg"]
    snapshot = orjson.loads(commit["info"])["snapshot"]
    gone = next(r for r in rows if r["event"] == "deliver" and r["msg"] == mid
                and r["node"] != commit["node"])
    aborted = decided(rows, "abort")[0]
    outsider = "m999"  # never a member
    assert outsider not in snapshot
    planted = [r for r in rows if r is not gone]
    planted.append({**gone, "msg": aborted["msg"], "t": gone["t"] + 1})  # an aborted delivered
    planted.append({**commit, "event": "abort", "t": commit["t"] + 1})  # decided twice
    second = next(r for r in rows if r["event"] == "deliver" and r["msg"] != mid)
    planted.append({**second, "t": second["t"] + 1})  # delivered twice
    status, found = judge(spark, planted)
    assert status is Status.FAIL
    details = {(node, msg): detail for node, msg, detail in found}
    assert details[(gone["node"], mid)].startswith("committed, but this snapshot member")
    assert details[(gone["node"], aborted["msg"])] == "delivered an aborted message"
    assert details[(None, mid)] == "both committed and aborted"
    assert details[(second["node"], second["msg"])] == "delivered 2 times"
    extra = [*rows, {**gone, "node": outsider}]
    assert judge(spark, extra)[1] == {
        (outsider, mid, "delivered by a node outside the message's snapshot")}
    assert not judge_atomicity(_as_trace_rows(planted)).ok


def test_a_redelivery_stands_for_a_lost_deliver_row_and_is_no_second_delivery(
        spark: Any) -> None:
    """After a kill -9 an inbox hands a delivery over again (``redeliver``): it stands for a
    ``deliver`` row the kill kept out of the trace, counts no second time, and like any
    delivery must be of a committed message."""
    rows = clean()
    commit = decided(rows, "commit")[0]
    gone = next(r for r in rows if r["event"] == "deliver" and r["msg"] == commit["msg"]
                and r["node"] != commit["node"])
    instead = [r for r in rows if r is not gone] + [{**gone, "event": "redeliver"}]
    both = [*rows, {**gone, "event": "redeliver", "t": gone["t"] + 1}]
    for trace in (instead, both):
        assert judge(spark, trace) == (Status.PASS, set())
        assert judge_atomicity(_as_trace_rows(trace)).ok
    # the protocol delivering twice, its first deliver row lost with the kill: the message
    # handed over again at its position, then delivered anew at another
    first = {**gone, "event": "redeliver", "info": orjson.dumps({"position": 1}).decode()}
    again = {**gone, "t": gone["t"] + 2, "info": orjson.dumps({"position": 2}).decode()}
    anew = [r for r in rows if r is not gone] + [first, again]
    assert judge(spark, anew)[1] == {(gone["node"], gone["msg"],
                                      "handed over under 2 positions")}
    assert not judge_atomicity(_as_trace_rows(anew)).ok
    aborted = decided(rows, "abort")[0]
    wrong = [*rows, {**gone, "event": "redeliver", "msg": aborted["msg"]}]
    assert judge(spark, wrong)[1] == {(gone["node"], aborted["msg"],
                                       "delivered an aborted message")}
    assert not judge_atomicity(_as_trace_rows(wrong)).ok


@functools.cache
def _with_app() -> tuple[tuple[Any, ...], ...]:
    sink = MemorySink()
    run_atomic_sim(8, AtomicRunOptions(members=5, messages=15, loss=0.1, member_crashes=3,
                                       sender_crashes=1, inbox=True),
                   trace=sink, run="atomic-app")
    return tuple(sink.rows)


def test_an_application_over_the_inbox_is_held_to_exactly_once(spark: Any) -> None:
    rows = [dict(zip(COLUMNS, row, strict=True)) for row in _with_app()]
    assert any(r["event"] == "redeliver" for r in rows)
    assert judge(spark, rows) == (Status.PASS, set())
    handles = [r for r in rows if r["event"] == "handle"]
    again, dropped = handles[0], handles[1]
    stranger = next(r for r in rows if r["event"] == "deliver" and r["node"] != again["node"]
                    and (r["msg"], again["node"]) not in {(h["msg"], h["node"]) for h in rows
                                                          if h["event"] == "deliver"})
    planted = [r for r in rows if r is not dropped]
    planted += [{**again, "t": again["t"] + 1},  # handled twice
                {**again, "msg": stranger["msg"], "t": again["t"] + 2}]  # never delivered
    status, found = judge(spark, planted)
    assert status is Status.FAIL
    assert found == {
        (again["node"], again["msg"], "handled 2 times by the application"),
        (again["node"], stranger["msg"], "handled by the application, never delivered"),
        (dropped["node"], dropped["msg"], "delivered, never handled by the application")}
    assert len(judge_atomicity(_as_trace_rows(planted)).violations) == 3


def _as_trace_rows(rows: Rows) -> list[TraceRow]:
    return [TraceRow(*(r[c] for c in COLUMNS)) for r in rows]


def test_atomic_metrics_count_what_the_trace_shows(spark: Any) -> None:
    rows = clean()
    frame = spark.createDataFrame([tuple(r[c] for c in COLUMNS) for r in rows], trace_schema())
    (got,) = [r.asDict() for r in atomic_metrics(frame).collect()]

    def msgs(event: str) -> set[str]:
        return {r["msg"] for r in rows if r["layer"] == "atomic" and r["event"] == event}

    def srm(event: str, kind: str | None = None) -> int:
        return sum(1 for r in rows if r["layer"] == "srm" and r["event"] == event
                   and (kind is None or orjson.loads(r["info"] or b"{}").get("type") == kind))

    committed, aborted = len(msgs("commit")), len(msgs("abort"))
    losses = srm("loss")
    assert committed and aborted and losses  # the run shows every figure
    assert (got["published"], got["committed"], got["aborted"]) == (
        len(msgs("publish")), committed, aborted)
    assert got["abort_rate"] == pytest.approx(aborted / (committed + aborted))
    assert got["commit_rate"] == pytest.approx(committed / (committed + aborted))
    delivered = msgs("deliver")
    assert delivered and (got["delivered"], got["deliveries"]) == (
        len(delivered), sum(1 for r in rows if r["layer"] == "atomic" and r["event"] == "deliver"))
    assert got["delivered_fraction"] == pytest.approx(len(delivered) / len(msgs("publish")))
    assert (got["losses"], got["recovered"], got["gave_up"]) == (
        losses, srm("recovered"), srm("gave_up"))
    assert got["requests_per_loss"] == pytest.approx(srm("send", "srm.request") / losses)
    assert got["repairs_per_loss"] == pytest.approx(srm("send", "srm.repair") / losses)
    sent = {r["msg"]: r["t"] for r in rows if r["layer"] == "atomic" and r["event"] == "publish"}
    waits = sorted(r["t"] - sent[r["msg"]] for r in rows
                   if r["layer"] == "atomic" and r["event"] == "commit")
    assert got["commit_latency_max"] == pytest.approx(waits[-1])
    assert waits[0] <= got["commit_latency_p50"] <= waits[-1]
    delays = [orjson.loads(r["info"])["delay"] for r in rows
              if r["layer"] == "srm" and r["event"] == "recovered"]
    assert min(delays) <= got["recovery_delay_p50"] <= max(delays)
    # a trace without seed 004's layers has no row here
    other = frame.filter(~frame.layer.isin("atomic", "srm"))
    assert atomic_metrics(other).count() == 0
