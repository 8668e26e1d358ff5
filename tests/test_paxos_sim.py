"""Multi-Paxos in the simulator: the seed's three tests (same order at every replica, leader
election after the leader's crash, adding and removing replicas), state transfer behind a
compacted log, a property test under loss, duplication, reordering, crashes and power loss,
and one seed, one trace."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from checks import assert_one_seed_one_trace, count, link_faults
from gossamer.protocols.ordering.paxos import Role
from gossamer.runtimes.sim import LinkModel, Uniform
from paxos_world import FAST, PaxosWorld, disagreements, lost_acks, order_problems

# the ci profile (50 examples) gets a dozen runs (seconds); the thorough one its own count
PROPERTY_EXAMPLES = 12 if settings.default.max_examples <= 50 else settings.default.max_examples
LOSSY = LinkModel(latency=Uniform(0.002, 0.03), loss=0.1, duplicate=0.1, reorder=0.2)


def workload(world: PaxosWorld, ops: int, *, start: float, end: float, seed: int,
             nodes: list[str] | None = None) -> None:
    """``ops`` proposals at random replicas at random times in [start, end)."""
    rng = random.Random(seed)
    pool = nodes if nodes is not None else world.founding
    for i in range(ops):
        node = rng.choice(pool)
        world.sim.schedule(rng.uniform(start, end) - world.sim.now,
                           lambda node=node, i=i: world.propose(node, {"i": i}))


def check(world: PaxosWorld, nodes: list[str], seed: int) -> None:
    rows = world.sink.rows
    assert disagreements(rows) == [], f"seed={seed}"
    assert order_problems(world.apps, nodes) == [], f"seed={seed}"
    assert lost_acks(world, nodes) == [], f"seed={seed}"


def test_same_order_at_every_replica() -> None:
    seed = 3
    world = PaxosWorld([f"r{i}" for i in range(5)], seed=seed, link=LOSSY)
    workload(world, 300, start=0.0, end=3.0, seed=seed)
    world.sim.run(until=3.0)
    assert world.run_until_settled(30.0), f"seed={seed}"
    check(world, world.founding, seed)
    assert len(world.acked) == 300
    applied = world.apps["r0"].applied
    assert all(world.apps[n].applied == applied for n in world.founding)
    # batching: far fewer slots than operations
    assert count(rows := world.sink.rows, layer="paxos", event="propose") < 300, f"seed={seed}"
    assert count(rows, layer="paxos", event="snapshot") > 0


def test_leader_election_after_the_leaders_crash() -> None:
    seed = 5
    world = PaxosWorld(["a", "b", "c"], seed=seed, link=LOSSY)
    workload(world, 100, start=0.0, end=1.0, seed=seed)
    world.sim.run(until=1.0)
    [first] = world.leaders()
    world.sim.crash(first)
    survivors = [n for n in world.founding if n != first]
    workload(world, 100, start=1.0, end=2.0, seed=seed + 1, nodes=survivors)
    world.sim.run(until=2.0)
    assert world.run_until_settled(30.0), f"seed={seed}"
    [second] = world.leaders()
    assert second != first
    elected = [r for r in world.sink.rows if r[3] == "paxos" and r[4] == "elected"]
    assert [r[2] for r in elected] == [first, second]
    crash_at = next(r[1] for r in world.sink.rows if r[4] == "crash")
    # suspicion after 0.5 s (FAST), a jitter up to 0.2 s, one round of PREPARE
    assert elected[1][1] - crash_at < FAST.suspect_timeout * 3, f"seed={seed}"
    check(world, survivors, seed)
    world.sim.recover(first)
    assert world.run_until_settled(30.0), f"seed={seed}"
    check(world, world.founding, seed)
    assert world.replica(first).role is Role.FOLLOWER


def test_adding_and_removing_replicas() -> None:
    seed = 7
    world = PaxosWorld(["a", "b", "c"], seed=seed, link=LOSSY, spares=["d", "e"])
    added: list[tuple[str, int, str]] = []
    removed: list[tuple[str, int, str]] = []
    workload(world, 150, start=0.0, end=3.0, seed=seed)
    world.sim.run(until=0.5)
    for spare in ("d", "e"):
        world.start_spare(spare)
    [leader] = world.leaders()
    for node in world.founding:
        rep = world.replica(node)
        rep.on_added_replica = lambda slot, n, me=node: added.append((me, slot, n))
        rep.on_removed_replica = lambda slot, n, me=node: removed.append((me, slot, n))
    world.sim.call("b", lambda p: p.add_replica("d"))  # type: ignore[attr-defined]
    world.sim.call("c", lambda p: p.add_replica("e"))  # type: ignore[attr-defined]
    world.sim.run(until=1.5)
    assert world.replica("a").members == frozenset("abcde"), f"seed={seed}"
    world.sim.call("b", lambda p: p.remove_replica(leader))  # type: ignore[attr-defined]
    world.sim.run(until=3.0)
    everyone = ["a", "b", "c", "d", "e"]
    assert world.run_until_settled(30.0, [n for n in everyone if n != leader]), f"seed={seed}"
    remaining = [n for n in everyone if n != leader]
    check(world, remaining, seed)
    assert {n for _me, _slot, n in added} == {"d", "e"}
    assert {n for _me, _slot, n in removed} == {leader}
    # every founder was told, at one slot per change
    assert len({(slot, n) for _me, slot, n in added}) == 2
    assert world.replica(leader).role is Role.OUTSIDE
    # the removed leader stepped down; the lowest remaining member took over without waiting
    # to suspect it
    rows = world.sink.rows
    out_at = next(r[1] for r in rows if r[3] == "paxos" and r[4] == "outside" and r[2] == leader)
    elected_at = next(r[1] for r in rows if r[3] == "paxos" and r[4] == "elected"
                      and r[1] >= out_at)
    assert elected_at - out_at < FAST.suspect_timeout, f"seed={seed}"
    assert world.replica("d").members == frozenset(remaining)
    # the old leader is gone: crash it, the group still decides
    world.sim.crash(leader)
    workload(world, 30, start=world.sim.now, end=world.sim.now + 0.5, seed=seed + 2,
             nodes=remaining)
    world.sim.run(until=world.sim.now + 0.5)
    assert world.run_until_settled(30.0, remaining), f"seed={seed}"
    check(world, remaining, seed)
    assert len(world.leaders()) == 1 and world.leaders()[0] != leader


def test_a_replica_set_change_takes_effect_in_an_idle_group() -> None:
    # a change decided at slot s applies from slot s + window: with nothing else to propose
    # the leader fills the window with no-ops, or the change would wait for traffic for ever
    # (a placement's dead member stayed in its group once the publishes stopped)
    seed = 13
    world = PaxosWorld(["a", "b", "c"], seed=seed, spares=["d"])
    world.sim.run(until=0.5)
    world.start_spare("d")
    [leader] = world.leaders()
    world.sim.call(leader, lambda p: p.add_replica("d"))  # type: ignore[attr-defined]
    world.sim.run(until=world.sim.now + 2.0)
    assert world.replica("a").members == frozenset("abcd"), f"seed={seed}"
    gone = next(n for n in "abc" if n != leader)
    world.sim.call(leader, lambda p: p.remove_replica(gone))  # type: ignore[attr-defined]
    world.sim.run(until=world.sim.now + 2.0)
    remaining = [n for n in "abcd" if n != gone]
    for node in remaining:
        assert world.replica(node).members == frozenset(remaining), f"seed={seed} {node}"
    assert world.replica(gone).role is Role.OUTSIDE, f"seed={seed}"


def test_a_lagging_replica_gets_a_snapshot_and_the_log_stays_bounded() -> None:
    seed = 11
    world = PaxosWorld(["a", "b", "c"], seed=seed)
    workload(world, 40, start=0.0, end=0.5, seed=seed)
    world.sim.run(until=0.5)
    world.sim.partition([["a", "b"], ["c"]])
    workload(world, 400, start=0.5, end=3.0, seed=seed + 1, nodes=["a", "b"])
    world.sim.run(until=3.0)
    assert world.replica("c").decided_upto < world.replica("a").decided_upto - 50
    world.sim.heal()
    assert world.run_until_settled(30.0), f"seed={seed}"
    check(world, world.founding, seed)
    assert count(world.sink.rows, layer="paxos", event="install") >= 1
    bound = FAST.snapshot_every + FAST.log_retain + 4 * FAST.window
    assert all(world.replica(n).log_rows() <= bound for n in world.founding)


def one_run(seed: int, nodes: int, loss: float, duplicate: float, reorder: float,
            crashes: int, partitions: int = 0, add_spare: bool = False,
            ) -> tuple[PaxosWorld, list[str]]:
    """Proposals at random replicas under link faults, crashes with restarts (a crash loses
    what was not committed: power loss), partitions healed after a while, and maybe a spare
    replica added during the run."""
    rng = random.Random(seed)
    names = [f"r{i}" for i in range(nodes)]
    link = LinkModel(latency=Uniform(0.002, 0.03), loss=loss, duplicate=duplicate,
                     reorder=reorder)
    world = PaxosWorld(names, seed=seed, link=link, spares=["spare"])
    workload(world, 80, start=0.0, end=3.0, seed=seed)
    for _ in range(crashes):
        node, at, down = rng.choice(names), rng.uniform(0.1, 2.8), rng.uniform(0.05, 1.0)

        def crash(node: str = node, down: float = down) -> None:
            if node in world.sim.alive():
                world.sim.crash(node, recover_after=down)

        world.sim.schedule(at, crash)
    for _ in range(partitions):
        side = rng.sample(names, rng.randint(1, nodes - 1))
        rest = [n for n in [*names, "spare"] if n not in side]
        at = rng.uniform(0.1, 2.5)
        world.sim.schedule(at, world.sim.partition, [side, rest])
        world.sim.schedule(at + rng.uniform(0.1, 0.8), world.sim.heal)
    if add_spare:

        def add() -> None:
            world.start_spare("spare")
            proposer = next((n for n in names if n in world.sim.alive()), None)
            if proposer is not None:
                world.sim.call(proposer, lambda p: p.add_replica("spare"))  # type: ignore

        world.sim.schedule(rng.uniform(0.2, 2.0), add)
    world.sim.run(until=4.0)
    world.sim.heal()
    return world, names


@settings(max_examples=PROPERTY_EXAMPLES, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), nodes=st.integers(3, 5), loss=st.floats(0.0, 0.3),
       duplicate=st.floats(0.0, 0.3), reorder=st.floats(0.0, 0.3), crashes=st.integers(0, 4),
       partitions=st.integers(0, 2), add_spare=st.booleans())
def test_property_agreement_and_nothing_acknowledged_lost(
    seed: int, nodes: int, loss: float, duplicate: float, reorder: float, crashes: int,
    partitions: int, add_spare: bool,
) -> None:
    world, names = one_run(seed, nodes, loss, duplicate, reorder, crashes, partitions,
                           add_spare)
    info = dict(seed=seed, nodes=nodes, loss=loss, dup=duplicate, reorder=reorder,
                crashes=crashes, partitions=partitions, add_spare=add_spare)
    assert world.run_until_settled(60.0, names), info
    replicas = names + (["spare"] if add_spare else [])
    assert disagreements(world.sink.rows) == [], info
    assert order_problems(world.apps, [n for n in replicas if n in world.apps]) == [], info
    assert lost_acks(world, names) == [], info
    assert world.acked, info


def faulty_rows(seed: int) -> list[tuple[object, ...]]:
    world, _ = one_run(seed, 3, 0.1, 0.1, 0.2, 2, partitions=1)
    world.run_until_settled(30.0)
    return [tuple(r) for r in world.sink.rows]


def test_one_seed_one_trace() -> None:
    seed = 41
    rows = assert_one_seed_one_trace(faulty_rows, seed)
    faults = link_faults(rows)
    assert min(faults[f] for f in ("lost", "duplicated", "reordered")) > 0, faults
    assert count(rows, layer="sim", event="crash") >= 1, f"seed={seed}"
    assert count(rows, layer="paxos", event="decide") > 0, f"seed={seed}"
