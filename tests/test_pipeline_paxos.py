"""The Paxos layer's checks and metrics (issue 19 point 4) on a real simulator trace: replicated
topic owners whose owner crashes mid-stream (``owners_world``). The clean trace passes; each
planted violation (two values for one slot, a subscriber delivering out of the decided order,
an acknowledged publish that was never decided) is caught at the planted node and message."""

from __future__ import annotations

import asyncio
import functools
import json
from pathlib import Path
from typing import Any

import pytest

from gossamer.cli.main import main
from gossamer.core.trace import COLUMNS
from gossamer.pipeline import Status, default_checks, evaluate, trace_schema
from gossamer.pipeline.paxos_checks import paxos_checks, paxos_metrics
from gossamer.protocols.ordering.paxos import PaxosConfig
from gossamer.services.paxos import ReplicatedLog
from harness_net import reserve_port
from owners_world import TOPIC, owner_crash

pytestmark = pytest.mark.spark

SEED = 2
NAMES = ["paxos agreement", "decided order", "acknowledged kept"]
Rows = list[dict[str, Any]]
SPARK_ARGS = ["--master", "local[2]", "--conf", "spark.sql.shuffle.partitions=1"]
LOOPBACK = PaxosConfig(heartbeat_interval=0.1, suspect_timeout=0.5, election_jitter=0.1)


@functools.cache
def _recorded() -> tuple[tuple[Any, ...], ...]:
    run = owner_crash(SEED, 0.03, count=30, trace_messages=True)
    return tuple(tuple(row) for row in run.rows)


def recorded() -> Rows:
    return [dict(zip(COLUMNS, row, strict=True)) for row in _recorded()]


def judge(spark: Any, rows: Rows) -> dict[str, Any]:
    frame = spark.createDataFrame([tuple(r[c] for c in COLUMNS) for r in rows], trace_schema())
    return {r.name: r for r in evaluate(frame, paxos_checks())}


def found(result: Any) -> set[tuple[str, str | None]]:
    return {(r.node, r.msg) for r in result.violations.collect()}


def test_a_clean_trace_passes_and_its_metrics_count_decisions_and_leader_changes(
        spark: Any) -> None:
    rows = recorded()
    results = judge(spark, rows)
    assert {n: r.status for n, r in results.items()} == dict.fromkeys(NAMES, Status.PASS), (
        f"seed={SEED}: {[(n, r.reason) for n, r in results.items()]}")
    assert [c.name for c in default_checks()][-3:] == NAMES
    frame = spark.createDataFrame([tuple(r[c] for c in COLUMNS) for r in rows], trace_schema())
    metrics = {r.group: r for r in paxos_metrics(frame).collect()}
    decided = {(r["key"], r["seq"]) for r in rows if r["event"] == "decide"}
    elected = [r for r in rows if r["event"] == "elected"]
    assert sum(m.decided for m in metrics.values()) == len(decided), f"seed={SEED}"
    assert sum(m.leader_changes for m in metrics.values()) == len(elected), f"seed={SEED}"
    busy = max(metrics.values(), key=lambda m: m.decided)
    assert busy.leader_changes >= 2, f"seed={SEED}: the owner crashed, a new leader was elected"
    assert 0 < busy.decide_latency_p50 <= busy.decide_latency_p99 < 2.0, f"seed={SEED}: {busy}"
    assert busy.messages_per_decision > 1, f"seed={SEED}: {busy}"
    times = sorted(r["t"] for r in rows if r["event"] == "decide" and r["key"] == busy.group)
    assert busy.decisions_per_s == pytest.approx((busy.decided - 1) / (times[-1] - times[0]))
    # fail-over, computed here from the rows: the owner (the group's first leader) crashed;
    # from its crash to the next election, and to that new leader's first decision
    group = [r for r in rows if r["key"] == busy.group]
    [first, second] = sorted((r for r in group if r["event"] == "elected"), key=lambda r: r["t"])
    [crash] = [r for r in rows if r["event"] == "crash" and r["node"] == first["node"]]
    decision = min(r["t"] for r in group if r["event"] == "decide"
                   and r["node"] == second["node"] and r["t"] >= second["t"])
    assert busy.failovers == 1, f"seed={SEED}: {busy}"
    assert busy.election_max == pytest.approx(second["t"] - crash["t"]), f"seed={SEED}"
    assert busy.failover_max == pytest.approx(decision - crash["t"]), f"seed={SEED}"
    assert busy.failover_mean == busy.failover_max
    quiet = [m for m in metrics.values() if m.decided == 0]
    assert quiet and all(m.failovers == 0 and m.failover_max is None for m in quiet)
    # without the crash row, nobody crashed: no fail-over is counted
    no_crash = [r for r in rows if r is not crash]
    frame = spark.createDataFrame([tuple(r[c] for c in COLUMNS) for r in no_crash],
                                  trace_schema())
    again = {r.group: r for r in paxos_metrics(frame).collect()}
    assert again[busy.group].failovers == 0 and again[busy.group].failover_max is None


def test_planted_violations_are_caught_at_the_planted_node_and_message(spark: Any) -> None:
    rows = recorded()
    # another value for a decided slot at one replica
    decide = next(r for r in rows if r["event"] == "decide")
    info = json.loads(decide["info"])
    rows[rows.index(decide)] = {**decide, "info": json.dumps({**info, "digest": 12345})}
    # a subscriber delivers two positions swapped
    deliveries = [r for r in rows if r["event"] == "deliver" and r["key"] == TOPIC]
    first = deliveries[3]
    second = next(r for r in deliveries[4:] if r["node"] == first["node"])
    i, j = rows.index(first), rows.index(second)
    rows[i] = {**second, "t": first["t"], "wall": first["wall"]}
    rows[j] = {**first, "t": second["t"], "wall": second["wall"]}
    # a publish acknowledged that no replica decided
    acked = next(r for r in rows if r["event"] == "acked")
    rows.append({**acked, "msg": "ghost:1", "t": acked["t"] + 0.001})
    results = judge(spark, rows)
    assert {n: r.status for n, r in results.items()} == dict.fromkeys(NAMES, Status.FAIL)
    assert (decide["node"], None) in found(results["paxos agreement"]), f"seed={SEED}"
    assert (first["node"], first["msg"]) in found(results["decided order"]), f"seed={SEED}"
    assert found(results["acknowledged kept"]) == {(acked["node"], "ghost:1")}, f"seed={SEED}"


async def _three_traced_replicas(trace_dir: Path) -> None:
    members = [f"127.0.0.1:{reserve_port()}" for _ in range(3)]
    logs = [ReplicatedLog(m, members, config=LOOPBACK, trace_dir=trace_dir, run="paxos-3")
            for m in members]
    try:
        for log in logs:
            await log.start()
        for log in logs:
            await log.wait_leader(30.0)
        await asyncio.gather(*(logs[i % 3].propose({"op": "incr", "key": "n", "by": 1},
                                                    timeout=30.0) for i in range(12)))
    finally:
        for log in logs:
            await log.stop()


@pytest.mark.slow  # a whole ``gossamer analyze``: about a minute of Spark
def test_a_traced_replicated_log_on_loopback_is_analysed_by_gossamer_analyze(
        spark: Any, tmp_path: Path) -> None:
    asyncio.run(_three_traced_replicas(tmp_path))
    out = tmp_path / "analysis"
    assert main(["analyze", str(tmp_path), "--out", str(out), *SPARK_ARGS]) == 0
    checks = {r.check: r for r in spark.read.parquet(str(out / "checks")).collect()}
    assert checks["paxos agreement"].status == "pass", checks["paxos agreement"]
    groups = spark.read.parquet(str(out / "paxos")).collect()
    assert [g.group for g in groups] == ["paxos"] and groups[0].decided >= 1, groups


def test_vopr_paxos_holds_agreement_order_and_acknowledged_operations_on_six_seeds(
        spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "vopr"
    code = main(["vopr", "paxos", "--seeds", "6", "--out", str(out), *SPARK_ARGS])
    text = capsys.readouterr().out
    assert code == 0, text
    assert "6 of 6 seeds held every guarantee" in text, text
    record = json.loads((out / "vopr.json").read_text())
    drawn = [s["options"] for s in record["schedules"]]
    assert any(o.get("leader_crash") for o in drawn) and any(o.get("partition") for o in drawn)
    checks = {r.check: r for r in
              spark.read.parquet(str(out / "analysis" / "checks")).collect()}
    assert {n: checks[n].status for n in NAMES} == dict.fromkeys(NAMES, "pass")
