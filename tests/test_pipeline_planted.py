"""The planted-fault library: traces of real loopback processes (``tests/fixtures/traces``,
recorded by ``tests/fixtures/record_traces.py``) pass every check under the settings their
processes stored, and each planted fault is caught by the right check at the right node and
message.

A plant picks its victim by what the trace holds (the first row that qualifies), so
re-recording a trace keeps these tests meaningful."""

from __future__ import annotations

import functools
import itertools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gossamer.core.trace import COLUMNS
from gossamer.pipeline import (
    CheckConfig,
    CheckResult,
    Status,
    default_checks,
    evaluate,
    load_trace,
    read_run_settings,
    trace_schema,
)
from gossamer.pipeline.schema import read_trace, release

pytestmark = pytest.mark.spark

TRACES = Path(__file__).parent / "fixtures" / "traces"
RECORDED = ("fifo", "pubsub-gossip", "pubsub-scribe", "activity", "replica")
Rows = list[dict[str, Any]]
Plant = Callable[[Rows], tuple[Rows, set[tuple[str, str]]]]


@functools.cache
def _recorded(name: str) -> tuple[tuple[tuple[Any, ...], ...], CheckConfig]:
    run_dir = TRACES / name
    files = sorted((run_dir / "trace").glob("*/*.parquet"))
    table = pa.concat_tables([pq.read_table(f) for f in files])
    settings = read_run_settings(run_dir)
    assert len(settings) == 1, f"{name}: one run with stored settings"
    rows = tuple(tuple(r[c] for c in COLUMNS) for r in table.to_pylist())
    return rows, next(iter(settings.values())).checks


def recorded(name: str) -> tuple[Rows, CheckConfig]:
    rows, checks = _recorded(name)
    return [dict(zip(COLUMNS, r, strict=True)) for r in rows], checks


def judge(spark: Any, rows: Rows, checks: CheckConfig, names: list[str]) -> list[CheckResult]:
    trace = spark.createDataFrame([tuple(r[c] for c in COLUMNS) for r in rows],
                                  trace_schema())
    chosen = [c for c in default_checks(checks) if c.name in names]
    assert [c.name for c in chosen] == names
    return evaluate(trace, chosen)


def found(result: CheckResult) -> set[tuple[str, str]]:
    assert result.violations is not None
    return {(r.node, r.msg) for r in result.violations.collect()}


# -- plants ------------------------------------------------------------------------------------


def _shifted(row: dict[str, Any], by: float) -> dict[str, Any]:
    """``row`` moved ``by`` seconds on both clocks."""
    return {**row, "t": row["t"] + by, "wall": row["wall"] + by}


def _publishers(rows: Rows) -> dict[tuple[str, str], str]:
    return {(r["layer"], r["msg"]): r["node"] for r in rows if r["event"] == "publish"}


def _other_deliveries(rows: Rows, layer: str) -> list[int]:
    """Indexes of the deliveries in ``layer`` at a node other than the origin and publisher."""
    publishers = _publishers(rows)
    return [i for i, r in enumerate(rows)
            if r["event"] == "deliver" and r["layer"] == layer and r["node"] != r["origin"]
            and publishers.get((layer, r["msg"])) not in (None, r["node"])]


def drop_delivery(layer: str) -> Plant:
    def plant(rows: Rows) -> tuple[Rows, set[tuple[str, str]]]:
        victim = _other_deliveries(rows, layer)[0]
        return rows[:victim] + rows[victim + 1:], {(rows[victim]["node"], rows[victim]["msg"])}
    return plant


def drop_own_delivery(layer: str) -> Plant:
    def plant(rows: Rows) -> tuple[Rows, set[tuple[str, str]]]:
        victim = next(i for i, r in enumerate(rows) if r["event"] == "deliver"
                      and r["layer"] == layer and r["node"] == r["origin"])
        return rows[:victim] + rows[victim + 1:], {(rows[victim]["node"], rows[victim]["msg"])}
    return plant


def duplicate_delivery(layer: str) -> Plant:
    def plant(rows: Rows) -> tuple[Rows, set[tuple[str, str]]]:
        victim = _other_deliveries(rows, layer)[0]
        again = _shifted(rows[victim], 1e-4)
        return ([*rows[:victim + 1], again, *rows[victim + 1:]],
                {(again["node"], again["msg"])})
    return plant


def _consecutive(rows: Rows, layer: str) -> tuple[int, int]:
    """Two deliveries at one node of one origin's seq s and s + 1 (node not the origin), after
    its delivery of s - 1 (in a session the first delivery after joining may start anywhere)."""
    by_key: dict[tuple[str, str, int], int] = {}
    for i, r in enumerate(rows):
        if r["event"] == "deliver" and r["layer"] == layer and r["node"] != r["origin"]:
            by_key[(r["node"], r["origin"], r["seq"])] = i
    for (node, origin, seq), i in sorted(by_key.items()):
        later = by_key.get((node, origin, seq + 1))
        if later is not None and (node, origin, seq - 1) in by_key:
            return i, later
    raise AssertionError(f"no consecutive deliveries in layer {layer}")


def reorder_deliveries(layer: str, *, caught: str = "both") -> Plant:
    """The node delivers an origin's seq s + 1 before s (their times swapped). FIFO finds both
    (s + 1 is a gap, s comes after it); causal order finds s + 1 (delivered before its cause):
    ``caught="later"``."""
    def plant(rows: Rows) -> tuple[Rows, set[tuple[str, str]]]:
        first, second = _consecutive(rows, layer)
        a, b = rows[first], rows[second]
        moved = list(rows)
        moved[first] = {**a, "t": b["t"], "wall": b["wall"]}
        moved[second] = {**b, "t": a["t"], "wall": a["wall"]}
        moved[first], moved[second] = moved[second], moved[first]  # row order agrees
        later = {(b["node"], b["msg"])}
        return moved, later if caught == "later" else later | {(a["node"], a["msg"])}
    return plant


def skip_delivery(layer: str) -> Plant:
    """The node never delivers seq s but does deliver s + 1: a gap."""
    def plant(rows: Rows) -> tuple[Rows, set[tuple[str, str]]]:
        first, second = _consecutive(rows, layer)
        return rows[:first] + rows[first + 1:], {(rows[second]["node"], rows[second]["msg"])}
    return plant


def deliver_after_leaving(layer: str) -> Plant:
    """A node delivers a message after its process left (net leave)."""
    def plant(rows: Rows) -> tuple[Rows, set[tuple[str, str]]]:
        victim = rows[_other_deliveries(rows, layer)[0]]
        leave = next(r for r in rows if r["node"] == victim["node"] and r["layer"] == "net"
                     and r["event"] == "leave")
        ghost = {**victim, "msg": f"{victim['msg']}-late", "seq": 10**9,
                 "t": leave["t"] + 0.5, "wall": leave["wall"] + 0.5}
        published = next(r for r in rows if r["event"] == "publish" and r["layer"] == layer
                         and r["msg"] == victim["msg"])
        return ([*rows, {**published, "msg": ghost["msg"], "seq": 10 ** 9}, ghost],
                {(ghost["node"], ghost["msg"])})
    return plant


def deliver_unpublished(layer: str) -> Plant:
    def plant(rows: Rows) -> tuple[Rows, set[tuple[str, str]]]:
        victim = rows[_other_deliveries(rows, layer)[0]]
        forged = {**_shifted(victim, 1e-4), "msg": "forged:1", "seq": 10**9}
        return [*rows, forged], {(forged["node"], "forged:1")}
    return plant


def deliver_to_non_subscriber(rows: Rows) -> tuple[Rows, set[tuple[str, str]]]:
    """A node subscribed to another topic only delivers a message of ``news``."""
    subscribed: dict[str, set[str]] = {}
    for r in rows:
        if r["event"] == "subscribe":
            subscribed.setdefault(r["node"], set()).add(r["key"])
    outsider = next(node for node, topics in sorted(subscribed.items()) if "news" not in topics)
    victim = rows[next(i for i in _other_deliveries(rows, "pubsub") if rows[i]["key"] == "news")]
    stray = {**_shifted(victim, 1e-4), "node": outsider}
    return [*rows, stray], {(outsider, victim["msg"])}


def _info(row: dict[str, Any]) -> dict[str, Any]:
    value = json.loads(row["info"] or "{}")
    assert isinstance(value, dict)
    return value


def _last_held_apply(rows: Rows, *, of_others: bool = False) -> int:
    """A replica's (not the hub's) last apply of some key, not reverted after it (with
    ``of_others``: of a write by another replica)."""
    last: dict[tuple[str, str], int] = {}
    for i, r in enumerate(rows):
        if r["layer"] == "replica" and r["event"] in ("apply", "revert") and r["node"] != "hub":
            last[(r["node"], r["key"])] = i
    return next(i for _, i in sorted(last.items()) if rows[i]["event"] == "apply"
                and not (of_others and rows[i]["origin"] == rows[i]["node"]))


def misbase_write(rows: Rows) -> tuple[Rows, set[tuple[str, str]]]:
    """A replica holds a write based on a revision other than the one it held before."""
    victim = _last_held_apply(rows)
    changed = {**rows[victim], "info": json.dumps({**_info(rows[victim]), "old": "planted"})}
    return [*rows[:victim], changed, *rows[victim + 1:]], {(changed["node"], changed["msg"])}


def reuse_seq(layer: str) -> Plant:
    """After seq s + 1, the node delivers another message numbered s (an origin whose numbering
    started over): not a duplicate (another message), a FIFO violation."""
    def plant(rows: Rows) -> tuple[Rows, set[tuple[str, str]]]:
        first, second = _consecutive(rows, layer)
        again = {**_shifted(rows[second], 1e-4), "msg": f"{rows[second]['msg']}-renumbered",
                 "seq": rows[first]["seq"]}
        return ([*rows[:second + 1], again, *rows[second + 1:]],
                {(again["node"], again["msg"])})
    return plant


def _vector_of(row: dict[str, Any]) -> dict[str, int]:
    vector = _info(row).get("vector") or {}
    assert isinstance(vector, dict)
    return vector


def drop_a_cause(rows: Rows) -> tuple[Rows, set[tuple[str, str]]]:
    """A replica never delivers a message that a later delivery there depends on (another
    origin's): causal order finds that delivery."""
    delivered = {(r["node"], r["msg"]): i for i, r in enumerate(rows)
                 if r["event"] == "deliver" and r["layer"] == "replica"}
    for i, r in enumerate(rows):
        if r["event"] != "deliver" or r["layer"] != "replica":
            continue
        for past, count in sorted(_vector_of(r).items()):
            cause = delivered.get((r["node"], f"{past}:{count}"))
            if past not in (r["origin"], r["node"]) and count >= 1 and cause is not None \
                    and cause < i:
                return rows[:cause] + rows[cause + 1:], {(r["node"], r["msg"])}
    raise AssertionError("no delivery that depends on another origin's message")


def _held(rows: Rows, node: str, key: str) -> list[int]:
    """Indexes of the applies ``node`` holds of ``key`` at the end, oldest first (an apply
    holds its revision until a later revert or apply of that revision there)."""
    last: dict[str, tuple[int, str]] = {}
    for i, r in enumerate(rows):
        if r["layer"] == "replica" and r["node"] == node and r["key"] == key \
                and r["event"] in ("apply", "revert"):
            last[_info(r)["rev"]] = (i, r["event"])
    return sorted(i for i, event in last.values() if event == "apply")


def _held_pair(rows: Rows) -> tuple[int, int]:
    """Two applies that a replica holds of one key, the second based on the first."""
    pairs = sorted({(r["node"], r["key"]) for r in rows
                    if r["layer"] == "replica" and r["event"] == "apply"})
    for node, key in pairs:
        held = _held(rows, node, key)
        for first, second in itertools.pairwise(held):
            if _info(rows[second])["old"] == _info(rows[first])["rev"]:
                return first, second
    raise AssertionError("no replica holds two writes of one key")


def swap_held_writes(rows: Rows) -> tuple[Rows, set[tuple[str, str]]]:
    """A replica applies two writes of a key in the opposite order (their times swapped):
    each of them, and the write it holds next, is then held after what it was not based on."""
    first, second = _held_pair(rows)
    a, b = rows[first], rows[second]
    moved = list(rows)
    moved[first] = {**b, "t": a["t"], "wall": a["wall"]}
    moved[second] = {**a, "t": b["t"], "wall": b["wall"]}
    expected = {(a["node"], a["msg"]), (b["node"], b["msg"])}
    held = _held(rows, a["node"], a["key"])
    after = held[held.index(second) + 1:]
    if after:
        expected.add((a["node"], rows[after[0]]["msg"]))
    return moved, expected


def skip_revision(rows: Rows) -> tuple[Rows, set[tuple[str, str]]]:
    """A replica never applies a write that the next write it holds is based on."""
    first, second = _held_pair(rows)
    return rows[:first] + rows[first + 1:], {(rows[second]["node"], rows[second]["msg"])}


def _agreed_final(rows: Rows) -> tuple[int, int]:
    """A replica's final apply of a key (not its own write) that some other replica also
    holds last, and the apply it held before it."""
    finals: dict[tuple[str, str], int] = {}
    for node, key in sorted({(r["node"], r["key"]) for r in rows
                             if r["layer"] == "replica" and r["event"] == "apply"}):
        held = _held(rows, node, key)
        if held:
            finals[(node, key)] = held[-1]
    for (node, key), last in finals.items():
        held = _held(rows, node, key)
        shared = [other for (n, k), other in finals.items() if k == key and n != node
                  and rows[other]["msg"] == rows[last]["msg"]]
        if rows[last]["origin"] != node and len(held) >= 2 and shared:
            return last, held[-2]
    raise AssertionError("no final write that two replicas hold")


def wrong_final_revision(rows: Rows) -> tuple[Rows, set[tuple[str, str]]]:
    """A replica's last apply of a key holds a revision nobody else holds."""
    last, _ = _agreed_final(rows)
    changed = {**rows[last], "info": json.dumps({**_info(rows[last]), "rev": "planted"})}
    return [*rows[:last], changed, *rows[last + 1:]], {(changed["node"], changed["msg"])}


def stale_write_again(rows: Rows) -> tuple[Rows, set[tuple[str, str]]]:
    """After the final write, a replica applies the write before it again: it ends on the
    older revision, and the final write is no longer based on what it held before it."""
    last, before = _agreed_final(rows)
    again = _shifted(rows[before], rows[last]["t"] - rows[before]["t"] + 1e-4)
    return ([*rows[:last + 1], again, *rows[last + 1:]],
            {(again["node"], again["msg"]), (rows[last]["node"], rows[last]["msg"])})


def revert_final(rows: Rows) -> tuple[Rows, set[tuple[str, str]]]:
    """A replica undoes the final write of a key (and holds the one before it again)."""
    last, before = _agreed_final(rows)
    undo = {**_shifted(rows[last], 1e-4), "event": "revert",
            "info": json.dumps({"rev": _info(rows[last])["rev"]})}
    return ([*rows[:last + 1], undo, *rows[last + 1:]],
            {(rows[before]["node"], rows[before]["msg"])})


# -- the library -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", RECORDED)
def test_a_recorded_real_process_trace_passes_every_check(spark: Any, name: str) -> None:
    rows, checks = recorded(name)
    results = judge(spark, rows, checks, [c.name for c in default_checks(checks)])
    verdicts = {r.name: (r.status, r.reason) for r in results}
    assert all(status in (Status.PASS, Status.NOT_APPLICABLE) for status, _ in
               verdicts.values()), verdicts
    # the checks its service promises ran and held
    promised = {"reliability", "duplicates", "validity"}
    promised |= {"fifo"} if checks.fifo_layers else set()
    promised |= {"own delivery"} if checks.own_delivery_layers else set()
    promised |= {"causal"} if checks.causal_layers else set()
    promised |= {"total order", "convergence"} if checks.total_order_layers else set()
    assert {n for n, (s, _) in verdicts.items() if s is Status.PASS} >= promised, verdicts


PLANTED: list[tuple[str, str, Plant, str]] = [
    # (trace, what was planted, how, the check that must catch it)
    ("fifo", "a dropped delivery", drop_delivery("fifo"), "reliability"),
    ("pubsub-gossip", "a subscriber's dropped delivery", drop_delivery("pubsub"), "reliability"),
    ("pubsub-scribe", "a dropped tree delivery", drop_delivery("scribe"), "reliability"),
    ("activity", "a dropped delivery in a session", drop_delivery("activity"), "reliability"),
    ("replica", "a replica's dropped delivery", drop_delivery("replica"), "reliability"),
    ("fifo", "an origin that skips its own", drop_own_delivery("fifo"), "own delivery"),
    ("pubsub-gossip", "a subscribed publisher that skips its own",
     drop_own_delivery("pubsub"), "own delivery"),
    ("pubsub-scribe", "a tree that skips the publisher", drop_own_delivery("scribe"),
     "own delivery"),
    ("fifo", "a duplicated delivery", duplicate_delivery("fifo"), "duplicates"),
    ("pubsub-scribe", "a duplicated subscriber delivery", duplicate_delivery("pubsub"),
     "duplicates"),
    ("activity", "a duplicated activity", duplicate_delivery("activity"), "duplicates"),
    ("replica", "a duplicated replica delivery", duplicate_delivery("replica"), "duplicates"),
    ("fifo", "a reordered pair", reorder_deliveries("fifo"), "fifo"),
    ("fifo", "a gap", skip_delivery("fifo"), "fifo"),
    ("activity", "a reordered pair", reorder_deliveries("activity"), "fifo"),
    ("replica", "a reordered pair", reorder_deliveries("replica"), "fifo"),
    ("replica", "a delivery before its cause", reorder_deliveries("replica", caught="later"),
     "causal"),
    ("fifo", "a delivery after the node left", deliver_after_leaving("fifo"), "validity"),
    ("pubsub-gossip", "a delivery to a non-subscriber", deliver_to_non_subscriber, "validity"),
    ("activity", "a delivery of a message never published", deliver_unpublished("activity"),
     "validity"),
    ("fifo", "a seq delivered again as another message", reuse_seq("fifo"), "fifo"),
    ("replica", "a dropped cause from another origin", drop_a_cause, "causal"),
    ("replica", "a gap in an origin's messages", skip_delivery("replica"), "causal"),
    ("replica", "a write held on the wrong base", misbase_write, "total order"),
    ("replica", "two writes of a key applied in swapped order", swap_held_writes,
     "total order"),
    ("replica", "a write applied without the one it is based on", skip_revision,
     "total order"),
    ("replica", "a final revision nobody else holds", wrong_final_revision, "convergence"),
    ("replica", "an older write applied again after the final one", stale_write_again,
     "convergence"),
    ("replica", "the final write undone", revert_final, "convergence"),
]


@pytest.mark.parametrize(("name", "what", "plant", "check"), PLANTED,
                         ids=[f"{n}: {w}" for n, w, _, _ in PLANTED])
def test_a_planted_fault_is_caught_by_the_right_check(spark: Any, name: str, what: str,
                                                      plant: Plant, check: str) -> None:
    rows, checks = recorded(name)
    planted, expected = plant(rows)
    [result] = judge(spark, planted, checks, [check])
    assert result.status is Status.FAIL, (what, result.reason)
    if check == "causal":
        # the deliveries after it at that node from that origin lack their causal past too
        assert expected <= found(result), what
        assert {node for node, _ in found(result)} == {node for node, _ in expected}, what
    else:
        assert found(result) == expected, what



# -- a restarted process -----------------------------------------------------------------------


def restart(rows: Rows, node: str, *, at_wall: float, downtime: float = 2.0) -> Rows:
    """``node`` killed at ``at_wall`` and started again ``downtime`` seconds later: its later
    rows have ``t`` counting from 0 again (a new process's clock) and a later ``wall``, as a
    real restart writes them."""
    split = min((r for r in rows if r["node"] == node and r["wall"] >= at_wall),
                key=lambda r: r["wall"])
    return [{**r, "t": r["t"] - split["t"], "wall": r["wall"] + downtime}
            if r["node"] == node and r["wall"] >= at_wall else r for r in rows]


def loaded(spark: Any, rows: Rows, folder: Path) -> Any:
    """``rows`` written to a Parquet file and read back as every analysis reads a trace."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "trace.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    return load_trace(spark, [path])


@pytest.mark.parametrize("case", ["plain", "restarted", "restored"])
def test_read_trace_gives_the_rows_load_trace_gives(spark: Any, tmp_path: Path,
                                                    case: str) -> None:
    """``read_trace`` applies ``continuous_lives`` and ``restored_deliveries`` only when the
    trace has a restart or a restored delivery: its rows are ``load_trace``'s either way."""
    rows, _checks = recorded("replica")
    if case != "plain":
        hub_walls = sorted(r["wall"] for r in rows if r["node"] == "hub")
        split = hub_walls[len(hub_walls) // 2]
        rows = restart(rows, "hub", at_wall=split)
    if case == "restored":
        delivered = [r for r in rows if r["node"] == "hub" and r["event"] == "deliver"
                     and r["wall"] < split][:3]
        rows = rows + [{**r, "event": "restored", "wall": split + 2.0, "t": 0.0}
                       for r in delivered]
    path = tmp_path / "trace.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    once = read_trace(spark, [path])
    try:
        got = sorted((tuple(r) for r in once.collect()), key=repr)
    finally:
        release(once)
    assert got == sorted((tuple(r) for r in load_trace(spark, [path]).collect()), key=repr)
    written = sorted((r["node"], r["t"]) for r in rows if r["event"] != "restored")
    read = sorted((r[COLUMNS.index("node")], r[COLUMNS.index("t")]) for r in got)
    # a restart's second life continues the first one's clock: the rows were changed
    assert (read == written) is (case == "plain")


def test_a_restarted_process_starting_its_clock_again_is_no_violation(
    spark: Any, tmp_path: Path
) -> None:
    rows, checks = recorded("replica")
    hub_walls = sorted(r["wall"] for r in rows if r["node"] == "hub")
    restarted = restart(rows, "hub", at_wall=hub_walls[len(hub_walls) // 2])
    # ordered by the process's own clock, the hub's two lives interleave: false alarms
    [raw] = judge(spark, restarted, checks, ["fifo"])
    assert raw.status is Status.FAIL, raw.reason
    # read as a trace is read, the second life continues the first one's clock
    verdicts = {r.name: (r.status, r.reason) for r in
                evaluate(loaded(spark, restarted, tmp_path), default_checks(checks))}
    assert all(status in (Status.PASS, Status.NOT_APPLICABLE) for status, _ in
               verdicts.values()), verdicts


def test_a_reorder_in_a_restarted_process_s_second_life_is_caught(
    spark: Any, tmp_path: Path
) -> None:
    rows, checks = recorded("replica")
    planted, expected = reorder_deliveries("replica")(rows)
    [node] = {n for n, _ in expected}
    first = min(r["wall"] for r in planted if (r["node"], r["msg"]) in expected)
    restarted = restart(planted, node, at_wall=first)
    [result] = evaluate(loaded(spark, restarted, tmp_path),
                        [c for c in default_checks(checks) if c.name == "fifo"])
    assert result.status is Status.FAIL
    assert found(result) == expected


def test_deliveries_a_restarted_node_restored_stand_in_for_rows_its_kill_lost(
    spark: Any, tmp_path: Path
) -> None:
    """The hub's last deliveries before its kill were stored but their rows died with it;
    at its restart it traces what its store restored (``restored`` rows): those rows count
    as the lost deliveries, and the ones whose ``deliver`` row survived are not counted
    twice."""
    rows, checks = recorded("replica")
    hub_delivers = sorted((r for r in rows if r["node"] == "hub" and r["event"] == "deliver"),
                          key=lambda r: r["wall"])
    split = hub_delivers[len(hub_delivers) // 2]
    lost = {r["msg"] for r in hub_delivers[len(hub_delivers) // 2 - 2:len(hub_delivers) // 2]}
    survived = hub_delivers[:len(hub_delivers) // 2 - 2]
    kept = [r for r in rows if not (r["node"] == "hub" and r["event"] == "deliver"
                                    and r["msg"] in lost)]
    restarted = restart(kept, "hub", at_wall=split["wall"])
    again = [r for r in restarted if r["node"] == "hub" and r["wall"] >= split["wall"] + 2.0]
    start = min(again, key=lambda r: r["wall"])
    # traced as the new life starts, before it delivers anything
    restored = [{**r, "event": "restored", "t": start["t"] - 1e-3, "wall": start["wall"] - 1e-3}
                for r in (*survived, *(r for r in hub_delivers if r["msg"] in lost))]
    names = ["reliability", "duplicates", "fifo", "causal"]
    chosen = [c for c in default_checks(checks) if c.name in names]
    verdicts = {r.name: (r.status, r.reason) for r in
                evaluate(loaded(spark, [*restarted, *restored], tmp_path / "a"), chosen)}
    assert all(status is Status.PASS for status, _ in verdicts.values()), verdicts
    # without the restored rows the lost deliveries are missed
    [result] = evaluate(loaded(spark, restarted, tmp_path / "b"),
                        [c for c in chosen if c.name == "reliability"])
    assert result.status is Status.FAIL
    assert found(result) == {("hub", msg) for msg in lost}
