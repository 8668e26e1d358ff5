"""APSYN in the simulator: the same server and peer classes on simulated connections, under
cut connections, delays, peers leaving and rejoining and the server restarting, end with every
peer holding exactly what the server says it may see."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from gossamer.core import MemorySink, NullSink
from gossamer.services.appsync.sim import AppSyncWorld, WorldConfig


def converge(world: AppSyncWorld) -> dict[str, dict[str, Any]]:
    world.quiesce(4.0)
    states = world.visible_states()
    peers = [name for name in states if not name.startswith("=")]
    assert len(peers) == len(world.peer_names), f"seed {world.config.seed}: not all joined"
    for name in peers:
        assert states[name] == states[f"={name}"], f"seed {world.config.seed}: {name} differs"
    return states


def run_faulted(config: WorldConfig, seconds: float, *, cuts: int, leaves: int,
                traced: bool = True) -> tuple[AppSyncWorld, MemorySink]:
    """``config``'s world after half a second of workload and ``seconds`` of cuts and leaves,
    converged (``traced`` False: nothing traced, so CTRL keeps no step of a round)."""
    sink = MemorySink()
    world = AppSyncWorld(config, trace=sink if traced else NullSink())
    world.run_for(0.5)
    world.faults(seconds, cuts=cuts, leaves=leaves, server_restarts=0)
    converge(world)
    return world, sink


def test_two_peers_share_a_board_and_see_each_others_changes() -> None:
    world = AppSyncWorld(WorldConfig(peers=2, seed=3))
    world.run_for(2.0)
    states = converge(world)
    board = states["p000"]["G//board"]
    assert board["hot"] > 0 and len([k for k in board if k.startswith("p")]) == 2


@pytest.mark.parametrize("drop", [False, True])
def test_a_broken_peer_that_skips_the_contended_property_ends_apart_from_its_ctrl(
        drop: bool) -> None:
    """``drop_updates`` (a fault the checks are tried on) loses ``board.hot`` at the peers,
    sent alone or merged with the round's other properties of the board."""
    world = AppSyncWorld(WorldConfig(peers=3, seed=4, drop_updates=drop))
    world.run_for(1.0)
    world.quiesce(2.0)
    states = world.visible_states()
    peers = [name for name in states if not name.startswith("=")]
    assert len(peers) == 3
    apart = [name for name in peers if states[name] != states[f"={name}"]]
    assert apart == (peers if drop else []), apart


@pytest.mark.parametrize("seed", [1])
def test_fifty_peers_under_cuts_delays_churn_and_a_server_restart_converge(seed: int) -> None:
    sink = MemorySink()
    world = AppSyncWorld(WorldConfig(peers=50, seed=seed, latency="uniform:0.001,0.05",
                                     request_chance=0.2), trace=sink)
    world.run_for(0.5)
    world.faults(3.0, cuts=10, leaves=8, server_restarts=1)
    states = converge(world)
    assert len({str(sorted(s["G//board"].items())) for s in states.values()}) == 1
    events = {row[4] for row in sink.rows}
    assert {"cut", "crash", "recover", "sync_init", "sync_apply", "round"} <= events, f"seed {seed}"


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_peers_on_lossy_connections_converge_and_rounds_wait_for_the_resent_frames(
        seed: int) -> None:
    """Loss on a connection costs time (TCP sends a lost frame again after its timeout), so
    rounds take longer than on clean links, and every peer still ends where the server is."""
    def round_times(loss: float) -> list[float]:
        _, sink = run_faulted(WorldConfig(peers=10, seed=seed, loss=loss, rto=0.2, min_ms=20,
                                          max_ms=1000, tout=100), 3.0, cuts=0, leaves=0)
        starts = [row[1] for row in sink.rows if row[4] == "round"]
        return [b - a for a, b in itertools.pairwise(starts)]

    clean, lossy = round_times(0.0), round_times(0.05)
    assert max(clean) < 0.2, f"seed {seed}"
    assert max(lossy) >= 0.2, f"seed {seed}: no round waited for a resent frame"


@pytest.mark.parametrize("seed", [1, 2])
def test_quiet_peers_in_fixed_rounds_converge_under_faults_and_stay_joined_while_idle(
        seed: int) -> None:
    """Quiet peers (``PeerConfig.quiet``) send a rqst only with requests, in rounds of a fixed
    20 ms: under cuts and churn they end where CTRL is, and through 3 s of idling (150
    rounds, tout 20) none is dropped for silence: each speaks up every tout / 2 rounds."""
    world, sink = run_faulted(WorldConfig(peers=12, seed=seed, quiet=True, request_chance=0.3,
                                          min_ms=20, max_ms=20, tout=20), 2.0, cuts=4, leaves=2)
    idle_from = world.sim.now
    world.run_for(3.0)
    converge(world)
    rows = [row for row in sink.rows if row[1] >= idle_from]
    assert [row for row in rows if row[4] in ("timeout", "sync_init")] == [], f"seed {seed}"
    starts = [row[1] for row in rows if row[4] == "round"]
    assert len(starts) >= 140, f"seed {seed}: rounds of fixed length go on while idle"


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_untraced_rounds_converge_under_faults(seed: int) -> None:
    """Without a trace CTRL sets a round's property updates of the board in one copy of it
    (``process_round(steps=False)``): 20 peers under cuts and leaves still end where it is."""
    world, sink = run_faulted(WorldConfig(peers=20, seed=seed, request_chance=0.6), 2.0,
                              cuts=5, leaves=3, traced=False)
    server = world.server()
    assert sink.rows == [] and server is not None and not server.env.tracing


def test_one_seed_one_trace() -> None:
    def run() -> list[tuple[object, ...]]:
        sink = MemorySink()
        world = AppSyncWorld(WorldConfig(peers=5, seed=7), trace=sink)
        world.faults(2.0, cuts=2, leaves=1, server_restarts=1)
        return [row[:12] for row in sink.rows]

    assert run() == run()


def test_a_sampled_trace_records_only_the_traced_peers_applies() -> None:
    """A big run traces a sample of its peers (``traced_peers``): the others run unrecorded."""
    sink = MemorySink()
    world = AppSyncWorld(WorldConfig(peers=6, seed=4, traced_peers=2), trace=sink)
    world.run_for(1.0)
    converge(world)
    writers = {row[2] for row in sink.rows if row[4] in ("sync_apply", "sync_request")}
    assert writers == {"ctrl", "p000", "p001"}, writers
