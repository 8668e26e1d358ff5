"""A small replicated application over ``PaxosReplica`` in the simulator, and the checks the
Paxos tests share: agreement per slot, one order everywhere, nothing acknowledged lost."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any, cast

from checks import named
from gossamer.core import Env, MemorySink
from gossamer.protocols.ordering.paxos import (
    Committed,
    DecidedOp,
    Outcome,
    PaxosConfig,
    PaxosReplica,
)
from gossamer.runtimes.sim import LinkModel, Simulation, Uniform

FAST = PaxosConfig(heartbeat_interval=0.2, suspect_timeout=0.5, election_jitter=0.2,
                   prepare_retry=0.05, accept_retry=0.05, propose_retry=0.2,
                   catchup_retry=0.05, possible_remove_after=1.0, window=4, max_batch=8,
                   snapshot_every=20, log_retain=5)


class ListApp:
    """The replicated state machine: the ids of the operations, in the order applied."""

    def __init__(self) -> None:
        self.applied: list[str] = []

    def apply(self, op: DecidedOp) -> None:
        self.applied.append(op.id)

    def snapshot(self) -> Any:
        return list(self.applied)

    def restore(self, state: Any) -> None:
        self.applied = list(state)


class PaxosWorld:
    """``nodes`` founding replicas (and ``spares`` that may be added) in one simulation."""

    def __init__(self, nodes: Sequence[str], *, seed: int, link: LinkModel | None = None,
                 config: PaxosConfig = FAST, spares: Sequence[str] = (),
                 snapshots: bool = True) -> None:
        self.founding = list(nodes)
        self.spares = list(spares)
        self.config = config
        self.snapshots = snapshots
        self.apps: dict[str, ListApp] = {}
        self.acked: dict[str, tuple[int, int]] = {}  # op id -> (slot, index) acknowledged
        self.proposed: list[str] = []
        self.sink = MemorySink()
        self.sim = Simulation(seed=seed, trace=self.sink,
                              link=link or LinkModel(latency=Uniform(0.002, 0.02)))
        for node in self.founding:
            self.sim.add_node(node, self.factory)

    def factory(self, env: Env) -> PaxosReplica:
        app = self.apps[env.node] = ListApp()
        joining = env.node not in self.founding
        return PaxosReplica(
            env, () if joining else self.founding, joining=joining,
            contacts=self.founding, config=self.config, on_decided=app.apply,
            snapshot_fn=app.snapshot if self.snapshots else None, restore_fn=app.restore)

    def start_spare(self, node: str) -> None:
        self.sim.add_node(node, self.factory)

    def replica(self, node: str) -> PaxosReplica:
        return cast(PaxosReplica, self.sim.process(node))

    def propose(self, node: str, payload: Any) -> None:
        """Propose at ``node`` now (if it is up); record the acknowledgement when it comes."""
        if node not in self.sim.alive():
            return

        def go(process: Any) -> None:
            holder: dict[str, str] = {}

            def done(outcome: Outcome) -> None:
                if isinstance(outcome, Committed):
                    self.acked[holder["id"]] = (outcome.slot, outcome.index)

            holder["id"] = cast(PaxosReplica, process).propose(payload, done)
            self.proposed.append(holder["id"])

        self.sim.call(node, go)

    def leaders(self) -> list[str]:
        from gossamer.protocols.ordering.paxos import Role
        return [n for n in self.sim.alive() if self.replica(n).role is Role.LEADER]

    def settled(self, nodes: Iterable[str] | None = None) -> bool:
        """Every live replica of ``nodes`` has applied the same log, holding every ack."""
        live = [n for n in (nodes if nodes is not None else self.sim.alive())
                if n in self.sim.alive()]
        if not live:
            return False
        lists = [self.apps[n].applied for n in live]
        if any(lst != lists[0] for lst in lists):
            return False
        return set(self.acked) <= set(lists[0]) and all(
            self.replica(n).pending_count == 0 for n in live)

    def run_until_settled(self, timeout: float, nodes: Iterable[str] | None = None) -> bool:
        chosen = list(nodes) if nodes is not None else None
        self.sim.run(until=self.sim.now + timeout, stop_when=lambda: self.settled(chosen))
        return self.settled(chosen)


def disagreements(rows: Iterable[Sequence[object]]) -> list[str]:
    """Slots for which two replicas (or two incarnations) decided different values."""
    seen: dict[int, object] = {}
    problems = []
    for row in named(rows):
        if row.layer != "paxos" or row.event != "decide":
            continue
        assert row.seq is not None and row.info is not None
        value = row.info
        known = seen.setdefault(row.seq, value)
        if known != value:
            problems.append(f"slot {row.seq}: {row.node} decided {value}, another {known}")
    return problems


def order_problems(apps: dict[str, ListApp], nodes: Iterable[str]) -> list[str]:
    """Each replica's applied list is a prefix of the longest one, with no id twice."""
    lists = {n: apps[n].applied for n in nodes}
    longest = max(lists.values(), key=len, default=[])
    problems = []
    for node, applied in lists.items():
        if applied != longest[:len(applied)]:
            problems.append(f"{node} applied another order")
        if len(set(applied)) != len(applied):
            problems.append(f"{node} applied an operation twice")
    return problems


def lost_acks(world: PaxosWorld, nodes: Iterable[str]) -> list[str]:
    missing: dict[str, list[str]] = defaultdict(list)
    for node in nodes:
        have = set(world.apps[node].applied)
        for op in world.acked:
            if op not in have:
                missing[node].append(op)
    return [f"{node} lacks acknowledged {ops[:5]}" for node, ops in missing.items()]
