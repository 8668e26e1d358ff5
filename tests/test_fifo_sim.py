"""Reliable FIFO broadcast in the simulator, under the faults the Foundation issue names."""

from __future__ import annotations

from typing import Any, cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from checks import (
    assert_one_seed_one_trace,
    count,
    fifo_violations,
    link_faults,
    missing_deliveries,
)
from gossamer.core import Env, MemorySink, Row
from gossamer.protocols.ordering import FifoBroadcast, FifoConfig, FifoData
from gossamer.runtimes.sim import LinkModel, Scenario, Simulation, Uniform


def make_scenario(
    *, nodes: int, messages: int, seed: int, link: LinkModel, rate: float = 100.0
) -> Scenario:
    scenario = Scenario.of(nodes, seed=seed, link=link)
    ids = scenario.nodes
    for i in range(messages):
        origin = ids[i % nodes]

        def publish(sim: Simulation, origin: str = origin, i: int = i) -> None:
            if origin in sim.alive():
                sim.call(origin, lambda p: cast(FifoBroadcast, p).broadcast({"i": i}))

        scenario.at(i / rate, publish)
    return scenario


def run(scenario: Scenario, config: FifoConfig | None = None, until: float = 60.0) -> tuple[
    Simulation, MemorySink
]:
    sink = MemorySink()
    ids = scenario.nodes + scenario.joiners

    def factory(env: Env) -> FifoBroadcast:
        return FifoBroadcast(env, ids, config=config)

    sim = scenario.build(factory, trace=sink)
    sim.run(until=until)
    return sim, sink


FAULTY = LinkModel(latency=Uniform(0.005, 0.05), loss=0.2, duplicate=0.2, reorder=0.2)


@pytest.mark.parametrize("seed", [1, 2, *(pytest.param(s, marks=pytest.mark.slow)
                                     for s in (3, 4, 5))])
def test_delivers_everything_in_order_under_20_percent_loss_dup_reorder(seed: int) -> None:
    sim, sink = run(make_scenario(nodes=20, messages=300, seed=seed, link=FAULTY))
    assert fifo_violations(sink.rows) == [], f"seed={seed}"
    assert missing_deliveries(sink.rows, sim.nodes()) == [], f"seed={seed}"
    assert count(sink.rows, layer="fifo", event="publish") == 300
    # the faults really happened: repairs were needed
    assert count(sink.rows, layer="fifo", event="nack") > 0, f"seed={seed}"


@pytest.mark.parametrize("seed", [7, 8])
def test_crash_recover_members_catch_up_without_duplicates(seed: int) -> None:
    scenario = make_scenario(nodes=15, messages=300, seed=seed, link=FAULTY)
    for node in scenario.nodes[:4]:
        scenario.crash(1.0, node, recover_after=1.5)
    sim, sink = run(scenario)
    assert fifo_violations(sink.rows) == [], f"seed={seed}"
    assert missing_deliveries(sink.rows, sim.nodes()) == [], f"seed={seed}"
    assert count(sink.rows, layer="sim", event="recover") == 4


@pytest.mark.parametrize("leave", [False, True])
def test_churn_members_that_come_back_catch_up(leave: bool) -> None:
    scenario = make_scenario(nodes=12, messages=400, seed=21, link=FAULTY, rate=50.0)
    scenario.churn(start=0.5, end=6.0, rate=2.0, downtime=1.0, leave=leave)
    sim, sink = run(scenario, until=90.0)
    assert count(sink.rows, layer="sim", event="leave" if leave else "crash") > 3
    assert fifo_violations(sink.rows) == []
    assert missing_deliveries(sink.rows, sim.nodes()) == []


def test_partition_then_heal_delivers_everything() -> None:
    scenario = make_scenario(nodes=10, messages=200, seed=11, link=FAULTY)
    half = scenario.nodes[:5], scenario.nodes[5:]
    scenario.partition(0.3, half, heal_at=1.5)
    sim, sink = run(scenario)
    assert fifo_violations(sink.rows) == []
    assert missing_deliveries(sink.rows, sim.nodes()) == []


def test_crash_stop_survivors_deliver_and_order_holds() -> None:
    scenario = make_scenario(nodes=10, messages=200, seed=12, link=FAULTY)
    scenario.crash(1.0, scenario.nodes[0])
    sim, sink = run(scenario)
    survivors = [n for n in sim.nodes() if n != scenario.nodes[0]]
    assert fifo_violations(sink.rows) == []
    # messages of the crashed origin that no survivor got are not expected; all others are
    problems = [p for p in missing_deliveries(sink.rows, survivors)
                if not p.endswith(tuple(f"{scenario.nodes[0]}:{s}" for s in range(1, 999)))]
    assert problems == []


def test_holdback_stays_bounded_and_everything_arrives() -> None:
    config = FifoConfig(holdback_limit=4)
    scenario = make_scenario(nodes=5, messages=200, seed=13, rate=1000.0,
                             link=LinkModel(latency=Uniform(0.001, 0.2), reorder=0.5))
    sink = MemorySink()
    ids = scenario.nodes
    apps: list[FifoBroadcast] = []

    def factory(env: Env) -> FifoBroadcast:
        app = FifoBroadcast(env, ids, config=config)
        apps.append(app)
        return app

    sim = scenario.build(factory, trace=sink)
    peak = 0

    def watch() -> bool:
        nonlocal peak
        peak = max(peak, *(a.holdback_size() for a in apps))
        return False

    sim.run(until=60.0, stop_when=watch)
    assert peak <= 4 * (len(ids) - 1)
    assert count(sink.rows, layer="fifo", event="drop") > 0  # the bound was hit
    assert fifo_violations(sink.rows) == []
    assert missing_deliveries(sink.rows, ids) == []


def test_evicted_messages_are_skipped_in_order_not_delivered_out_of_order() -> None:
    config = FifoConfig(send_log_limit=10)
    scenario = make_scenario(nodes=3, messages=90, seed=14, link=LinkModel())
    scenario.partition(0.0, [scenario.nodes[:2], scenario.nodes[2:]], heal_at=2.0)
    _sim, sink = run(scenario, config)
    seqs_by_stream: dict[tuple[str, str], list[int]] = {}
    for row in sink.rows:
        if row[4] == "deliver":
            seqs_by_stream.setdefault((row[2], row[6]), []).append(row[9])
    for stream, seqs in seqs_by_stream.items():
        assert seqs == sorted(set(seqs)), stream  # increasing, no duplicates
    # within the connected pair nothing was lost
    pair = scenario.nodes[:2]
    assert fifo_violations([r for r in sink.rows if r[2] in pair and r[6] in pair]) == []
    evicted = [r for r in sink.rows if r[4] == "drop" and r[11] and "evicted" in r[11]]
    assert evicted, "the isolated node should have been told messages were evicted"


def test_checker_catches_a_broken_protocol() -> None:
    """With retransmission off, losses are permanent: the oracle must notice."""
    lossy = LinkModel(latency=Uniform(0.005, 0.05), loss=0.2)
    sim, sink = run(make_scenario(nodes=8, messages=100, seed=3, link=lossy),
                    FifoConfig(retransmit=False))
    assert missing_deliveries(sink.rows, sim.nodes()) != []


def test_data_claiming_another_origin_is_dropped_not_crashing() -> None:
    sink = MemorySink()
    sim = Simulation(seed=1, trace=sink)
    ids = ["a", "b", "c"]
    sim.add_nodes(ids, lambda env: FifoBroadcast(env, ids))
    forged = FifoData(origin="c", seq=1, body="forged")
    sim.env("a").send("b", forged)
    sim.run(until=1.0)
    drops = [r for r in sink.rows if r[4] == "drop" and r[2] == "b"]
    assert drops and "invalid" in str(drops[0][11])
    assert cast(FifoBroadcast, sim.process("b")).delivered_upto("c") == 0



# -- one seed, one trace -----------------------------------------------------------------------


def faulty_run(seed: int) -> list[Row]:
    """Loss, duplication, reordering and a member that crashes and recovers."""
    link = LinkModel(latency=Uniform(0.005, 0.05), loss=0.1, duplicate=0.1, reorder=0.2)
    scenario = make_scenario(nodes=6, messages=60, seed=seed, link=link)
    scenario.crash(0.2, scenario.nodes[2], recover_after=0.3)
    _sim, sink = run(scenario, until=4.0)
    return sink.rows


def test_one_seed_one_trace() -> None:
    seed = 31
    rows = assert_one_seed_one_trace(faulty_run, seed)
    faults = link_faults(rows)
    assert min(faults[f] for f in ("lost", "duplicated", "reordered")) > 0, (
        f"seed={seed}: the faults did not all happen: {faults}")
    assert count(rows, layer="sim", event="recover") == 1, f"seed={seed}"
    assert count(rows, layer="fifo", event="nack") > 0, f"seed={seed}"
    assert fifo_violations(rows) == [], f"seed={seed}"

@settings(max_examples=15, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    loss=st.floats(0.0, 0.4),
    duplicate=st.floats(0.0, 0.5),
    reorder=st.floats(0.0, 0.5),
    nodes=st.integers(2, 8),
)
def test_property_any_faults_everything_delivered_in_order(
    seed: int, loss: float, duplicate: float, reorder: float, nodes: int
) -> None:
    link = LinkModel(latency=Uniform(0.001, 0.05), loss=loss, duplicate=duplicate,
                     reorder=reorder)
    sim, sink = run(make_scenario(nodes=nodes, messages=40, seed=seed, link=link), until=120.0)
    info: dict[str, Any] = {"seed": seed, "loss": loss, "dup": duplicate, "reorder": reorder}
    assert fifo_violations(sink.rows) == [], info
    assert missing_deliveries(sink.rows, sim.nodes()) == [], info
