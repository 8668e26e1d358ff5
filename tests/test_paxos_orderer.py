"""``PaxosOrderer``: the ``Orderer`` slot filled by Multi-Paxos. Accepted at the leader once
decided, with per-key positions that every replica computes alike; redirected elsewhere."""

from __future__ import annotations

import random
from typing import Any, cast

from gossamer.core import Env
from gossamer.protocols.ordering import Accepted, Decision, Redirected, Refused
from gossamer.protocols.ordering.paxos import (
    AcceptOk,
    Noop,
    PaxosConfig,
    PaxosOrderer,
    PaxosReplica,
    PrepareOk,
    Role,
)
from gossamer.runtimes.sim import LinkModel, Simulation, Uniform
from gossamer.testing import FakeEnv
from paxos_world import FAST

MEMBERS = ("a", "b", "c")


def test_the_leader_accepts_at_per_key_positions_once_decided() -> None:
    env = FakeEnv("a")
    replica = PaxosReplica(env, MEMBERS, config=PaxosConfig(window=4, snapshot_every=0))
    ordered: list[tuple[str, int, Any]] = []
    orderer = PaxosOrderer(replica, on_ordered=lambda k, p, i: ordered.append((k, p, i)))
    replica.start()
    env.run_due()
    replica.on_message("b", PrepareOk(ballot=(1, "a"), from_slot=1, accepted=(), decided=(),
                                      snapshot_slot=0))
    assert replica.role is Role.LEADER
    answers: list[Decision] = []
    for key, item in (("t", "x"), ("t", "y"), ("u", "z")):
        orderer.propose(key, item, answers.append)
    assert answers == []  # nothing is accepted before a majority decided it
    for slot in (1, 2, 3):
        replica.on_message("b", AcceptOk(ballot=(1, "a"), slot=slot))
    env.run_due()
    env.run_due()
    positions = [a.position for a in answers if isinstance(a, Accepted)]
    assert sorted(positions) == [1, 1, 2] and len(answers) == 3
    assert sorted(ordered) == [("t", 1, "x"), ("t", 2, "y"), ("u", 1, "z")]
    assert orderer.position("t") == 2 and orderer.snapshot() == {"t": 2, "u": 1}


def test_a_follower_redirects_to_the_leader_and_refuses_without_one() -> None:
    env = FakeEnv("b")
    replica = PaxosReplica(env, MEMBERS)
    orderer = PaxosOrderer(replica)
    replica.start()
    answers: list[Decision] = []
    orderer.propose("t", "x", answers.append)
    replica.on_message("a", Noop(ballot=(1, "a"), decided_upto=0))
    orderer.propose("t", "y", answers.append)
    assert isinstance(answers[0], Refused)
    assert answers[1] == Redirected("a")
    assert replica.pending_count == 0  # nothing was proposed


def test_every_replica_orders_each_key_alike_across_a_leader_crash() -> None:
    seed = 13
    sim = Simulation(seed=seed, link=LinkModel(latency=Uniform(0.002, 0.02), loss=0.05,
                                               duplicate=0.05, reorder=0.1))
    ordered: dict[str, list[tuple[str, int, Any]]] = {}
    orderers: dict[str, PaxosOrderer] = {}

    def factory(env: Env) -> PaxosReplica:
        replica = PaxosReplica(env, MEMBERS, config=FAST)
        log = ordered[env.node] = []  # rebuilt from the log at each start
        orderers[env.node] = PaxosOrderer(
            replica, on_ordered=lambda k, p, i: log.append((k, p, i)))
        return replica

    for node in MEMBERS:
        sim.add_node(node, factory)
    accepted: dict[tuple[str, int], Any] = {}
    rng = random.Random(seed)

    def propose(i: int) -> None:
        leaders = [n for n in sim.alive()
                   if cast(PaxosReplica, sim.process(n)).role is Role.LEADER]
        if not leaders:
            return
        key = rng.choice(["t", "u"])

        def answer(decision: Decision, key: str = key, i: int = i) -> None:
            if isinstance(decision, Accepted):
                accepted[(key, decision.position)] = i

        orderers[leaders[0]].propose(key, i, answer)

    for i in range(120):
        sim.schedule(0.02 * i, propose, i)
    sim.run(until=1.0)
    [first] = [n for n in MEMBERS if cast(PaxosReplica, sim.process(n)).role is Role.LEADER]
    sim.crash(first, recover_after=1.0)
    sim.run(until=8.0)
    sequences = {node: sorted(log) for node, log in ordered.items()}
    assert sequences[MEMBERS[0]] == sequences[MEMBERS[1]] == sequences[MEMBERS[2]], seed
    for key in ("t", "u"):
        positions = [p for k, p, _i in sequences["a"] if k == key]
        assert positions == list(range(1, len(positions) + 1)), seed
    by_position = {(k, p): i for k, p, i in sequences["a"]}
    assert accepted and all(by_position[kp] == i for kp, i in accepted.items()), seed
