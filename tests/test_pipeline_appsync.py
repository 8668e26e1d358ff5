"""The round-consistency check of seed 002 (``pipeline.round_checks``): a trace of a simulated
APSYN session with faults passes, and planted faults are caught: a peer that reorders a round's
updates, one whose value diverged, one that applied an update CTRL never applied, an
acknowledgement of something never applied and an update applied without an accepting one;
with two zones, the member zone's CTRL is judged as a peer of the master's session too."""

from __future__ import annotations

import functools
import itertools
import math
from typing import Any

import orjson
import pytest

from gossamer.core import MemorySink
from gossamer.pipeline.checks import CheckConfig, Status, default_checks, evaluate
from gossamer.pipeline.schema import trace_schema
from gossamer.services.appsync.sim import (
    SERVER,
    SESSION,
    ZONE_SERVER,
    AppSyncWorld,
    P2PWorld,
    WorldConfig,
)

pytestmark = pytest.mark.spark

Rows = list[list[Any]]
EVENT, NODE, MSG, PEER, KEY, SEQ, INFO = 4, 2, 5, 7, 8, 9, 11


@functools.cache
def _recorded() -> tuple[tuple[Any, ...], ...]:
    sink = MemorySink()
    world = AppSyncWorld(WorldConfig(peers=4, seed=5, request_chance=0.8), trace=sink)
    world.run_for(0.5)
    world.faults(1.5, cuts=2, leaves=1, server_restarts=1)
    world.quiesce(1.0)
    world.record_states()
    return tuple(tuple(row) for row in sink.rows)


@functools.cache
def _recorded_zones(zones: int = 2) -> tuple[tuple[Any, ...], ...]:
    sink = MemorySink()
    world = AppSyncWorld(WorldConfig(peers=2 * zones, seed=5, zones=zones, request_chance=0.8),
                         trace=sink)
    world.run_for(0.5)
    world.faults(1.5, cuts=1, leaves=1, server_restarts=0, zone_faults=2)
    world.quiesce(1.5)
    world.record_states()
    return tuple(tuple(row) for row in sink.rows)


@functools.cache
def _recorded_p2p() -> tuple[tuple[Any, ...], ...]:
    """Peer-to-peer mode: the CTRL crashes and another continues the session."""
    sink = MemorySink()
    world = P2PWorld(WorldConfig(peers=5, seed=2, request_chance=0.8), trace=sink)
    world.run_for(2.0)
    world.crash_ctrl(recover_after=1.0)
    world.run_for(3.0)
    world.quiesce(1.5)
    world.record_states()
    return tuple(tuple(row) for row in sink.rows)


def recorded() -> Rows:
    return [list(row) for row in _recorded()]


def peer_applies(rows: Rows) -> list[int]:
    return [i for i, r in enumerate(rows) if r[EVENT] == "sync_apply" and r[NODE] != SERVER]


def as_run(rows: Rows, run: str) -> Rows:
    return [[run, *row[1:]] for row in rows]


def plants() -> dict[str, tuple[Rows, str | None]]:
    """Each planted trace, as its own run, with the node whose fault must be found (None: the
    clean run) -- all judged in one Spark job."""
    rows = recorded()
    applies = peer_applies(rows)
    assert applies, "the run applied updates at the peers"
    # two updates of one object in one round at one peer, swapped
    pairs = [(a, b) for a, b in itertools.pairwise(applies)
             if rows[a][NODE] == rows[b][NODE] and rows[a][KEY] == rows[b][KEY]
             and rows[a][SEQ] == rows[b][SEQ] and rows[a][MSG] != rows[b][MSG]]
    assert pairs, "some round had two updates of one object"
    a, b = pairs[0]
    swapped = recorded()
    swapped[a], swapped[b] = swapped[b], swapped[a]
    diverged = recorded()
    info = orjson.loads(diverged[applies[-1]][INFO])
    diverged[applies[-1]][INFO] = orjson.dumps({**info, "digest": "0" * 16}).decode()
    extra = recorded()
    extra.append([*extra[applies[0]][:SEQ], 0xFFFE, *extra[applies[0]][SEQ + 1:]])
    acks = [i for i, r in enumerate(rows) if r[EVENT] == "sync_ack"]
    accepted = [i for i in acks if 20 <= orjson.loads(rows[i][INFO])["code"] < 30]
    refused = [i for i in acks if orjson.loads(rows[i][INFO])["code"] >= 30
               and rows[i][MSG] is not None]
    assert accepted and refused
    lying = recorded()  # a refused request reported accepted: never applied
    lying[refused[0]][INFO] = orjson.dumps({"code": 21}).decode()
    hidden = recorded()  # every accepting ack of an applied update turned into a refusal
    for i in accepted:
        if rows[i][MSG] == rows[accepted[0]][MSG] and rows[i][SEQ] == rows[accepted[0]][SEQ]:
            hidden[i][INFO] = orjson.dumps({"code": 32}).decode()
    zones = [list(row) for row in _recorded_zones()]
    relayed = [i for i, r in enumerate(zones) if r[NODE] == ZONE_SERVER
               and r[EVENT] == "sync_apply" and r[KEY].startswith(f"{SESSION}/")]
    assert relayed, "the member zone's CTRL applied the master's updates"
    zone_diverged = [list(row) for row in zones]  # the member CTRL's copy of a G object
    info = orjson.loads(zone_diverged[relayed[-1]][INFO])
    zone_diverged[relayed[-1]][INFO] = orjson.dumps({**info, "digest": "0" * 16}).decode()
    in_sync = [r for r in zones if r[NODE] == ZONE_SERVER and r[EVENT] == "sync_apply"
               and orjson.loads(r[INFO]).get("relayed") is True]
    assert in_sync, "the member zone's CTRL relayed the master's updates in its rounds"
    action = in_sync[-1][MSG].rsplit(":", 1)[1]  # never taken from the master: its rows gone
    untaken = [r for r in zones if not (r[NODE] == ZONE_SERVER and r[EVENT] == "sync_apply"
                                        and r[KEY].startswith(f"{SESSION}/")
                                        and r[MSG].endswith(action))]
    ends = [i for i, r in enumerate(rows) if r[EVENT] == "sync_state"]
    assert len(ends) == 4, "every peer recorded its end"
    stale = recorded()  # a peer that ends holding something else than its CTRL holds for it
    stale[ends[0]][INFO] = orjson.dumps({**orjson.loads(stale[ends[0]][INFO]),
                                         "digest": "0" * 16}).decode()
    unserved = [r for r in recorded() if not (r[EVENT] == "ctrl_state"
                                              and r[PEER] == rows[ends[1]][PEER])]
    return {"clean": (rows, None), "zones": (zones, None),
            "zones3": ([list(row) for row in _recorded_zones(3)], None),
            "stale_end": (stale, rows[ends[0]][NODE]),
            "unserved": (unserved, rows[ends[1]][NODE]),
            "p2p": ([list(row) for row in _recorded_p2p()], None),
            "zone_diverged": (zone_diverged, ZONE_SERVER),
            "zone_untaken": (untaken, ZONE_SERVER),
            "swapped": (swapped, rows[a][NODE]),
            "diverged": (diverged, rows[applies[-1]][NODE]),
            "extra": (extra, rows[applies[0]][NODE]), "lying": (lying, SERVER),
            "hidden": (hidden, SERVER)}


def test_a_clean_run_passes_and_every_planted_fault_is_caught(spark: Any) -> None:
    runs = plants()
    rows = [tuple(r) for name, (planted, _) in runs.items() for r in as_run(planted, name)]
    frame = spark.createDataFrame(rows, trace_schema())
    config = CheckConfig(layers=("appsync",), round_layers=("appsync",))
    [result] = [r for r in evaluate(frame, default_checks(config))
                if r.name == "round consistency"]
    assert result.status is Status.FAIL and result.violations is not None
    found: dict[str, set[str]] = {}
    details: dict[str, list[str]] = {}
    for violation in result.violations.collect():
        found.setdefault(violation.run, set()).add(violation.node)
        details.setdefault(violation.run, []).append(violation.detail)
    assert "clean" not in found, details.get("clean")
    assert "zones" not in found, details.get("zones")
    assert "zones3" not in found, details.get("zones3")
    assert "p2p" not in found, details.get("p2p")
    for name, (_, node) in runs.items():
        if node is not None:
            assert found.get(name) == {node}, (name, details.get(name))
    assert any("never applied" in d for d in details["lying"])
    assert any("without an accepting" in d for d in details["hidden"])
    assert any("never took from the master" in d for d in details["zone_untaken"])
    assert any("where its CTRL holds" in d for d in details["stale_end"])
    assert any("which no CTRL serves" in d for d in details["unserved"])


def test_round_consistency_is_judged_only_where_round_layers_are_declared() -> None:
    assert "round consistency" not in [c.name for c in default_checks(CheckConfig())]
    names = [c.name for c in default_checks(CheckConfig(round_layers=("appsync",)))]
    assert names[-1] == "round consistency"


def test_round_metrics_match_the_rows_of_the_run(spark: Any) -> None:
    """Round time, requests, conflicts, codes and visibility, computed here from the recorded
    rows (one clock: a simulated run's ``wall`` is ``t`` plus a constant), equal what
    ``round_metrics`` finds."""
    from gossamer.pipeline.round_metrics import CONFLICT_CODES, round_metrics

    rows = recorded()
    frame = spark.createDataFrame([tuple(r) for r in rows], trace_schema())
    [found] = round_metrics(frame).collect()
    rounds = [r for r in rows if r[EVENT] == "round"]
    infos = [orjson.loads(r[INFO]) for r in rounds]
    assert found.rounds == len(rounds)
    assert found.requests_per_round == pytest.approx(
        sum(i["requests"] for i in infos) / len(rounds))
    assert found.conflicts_per_round == pytest.approx(sum(
        n for i in infos for code, n in i["codes"].items() if code in CONFLICT_CODES)
        / len(rounds))
    assert found.conflicts_per_round > 0, "two peers met on a property at least once"
    assert found.bytes_per_round == pytest.approx(sum(i["bytes"] for i in infos) / len(rounds))
    assert found.bytes_per_round > 0
    totals: dict[str, int] = {}
    for i in infos:
        for code, n in i["codes"].items():
            totals[code] = totals.get(code, 0) + n
    assert orjson.loads(found.codes) == totals
    times = [r[1] for r in rounds]  # t: one server, its restart's rounds go on in t
    gaps = sorted(b - a for a, b in itertools.pairwise(times))
    assert gaps[0] <= found.round_time_p50 <= found.round_time_p99 <= gaps[-1]
    assert found.round_time_p50 == pytest.approx(gaps[len(gaps) // 2], abs=0.005)
    applied = {r[MSG]: r[1] for r in rows if r[EVENT] == "sync_apply" and r[NODE] == SERVER}
    last: dict[str, float] = {}
    for r in rows:
        if r[EVENT] == "sync_apply" and r[NODE] != SERVER and r[MSG] in applied:
            last[r[MSG]] = max(last.get(r[MSG], 0.0), r[1])
    visible = sorted(t - applied[m] for m, t in last.items())
    assert found.visible_p99 == pytest.approx(visible[int(0.99 * len(visible))], abs=0.005)
    assert 0 < found.visible_p50 <= found.visible_p99
    # from a peer's request to the last peer applying it: the server's first apply of an
    # update carrying that peer's action with the request's digest (the action itself, or
    # an update merging it with others: ``info.parts``), at or after the request
    ORIGIN = 6
    requests = [(r[ORIGIN], orjson.loads(r[INFO])["action"], r[1]) for r in rows
                if r[EVENT] == "sync_request"]
    assert requests, "the peers traced their requests"
    server_applies = [(o, d, r[MSG], r[1]) for r in rows
                      if r[EVENT] == "sync_apply" and r[NODE] == SERVER
                      for o, d in orjson.loads(r[INFO]).get(
                          "parts", [[r[ORIGIN], r[MSG].rsplit(":", 1)[1]]])]
    assert any(r[EVENT] == "sync_apply" and "parts" in orjson.loads(r[INFO]) for r in rows), \
        "some round merged property updates of one object into one upd"
    waits = []
    for origin, digest, at in requests:
        taken = [(t, m) for o, d, m, t in server_applies
                 if o == origin and d == digest and t >= at]
        if taken and min(taken)[1] in last:
            waits.append(last[min(taken)[1]] - at)
    waits.sort()
    assert len(waits) > len(requests) // 2, "most requests were applied and seen"
    p50, p99 = (waits[max(0, math.ceil(q * len(waits)) - 1)] for q in (0.5, 0.99))
    assert found.request_visible_p99 == pytest.approx(p99, abs=1e-9)
    assert found.request_visible_p50 == pytest.approx(p50, abs=1e-9)
    assert found.visible_p50 < found.request_visible_p50 <= found.request_visible_p99
