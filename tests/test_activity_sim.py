"""The seed-003 network in the simulator: the server core and the client core (the same classes
as over TCP) on simulated connections, servers crashing and coming back. Every assertion names
its seed (replay it)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any, cast

import pytest

from gossamer.core import Env, ListenerSpec, MemorySink
from gossamer.core.trace import TraceRow
from gossamer.protocols.activity import (
    ActivityClientNode,
    ActivityServer,
    ClientScript,
    ServerConfig,
    TreeState,
)
from gossamer.runtimes.sim import LinkModel, Scenario, Simulation, Uniform

SECRET = "network-secret"
LINK = LinkModel(latency=Uniform(0.002, 0.03))  # links reorder; connections put order back
TOPOLOGY = {"s0": None, "s1": "s0", "s2": "s0", "s3": "s1", "s4": "s2"}
SERVERS = list(TOPOLOGY)
START = 2.0  # clients come once the tree has formed
PORT = 3780


def factory(scripts: dict[str, ClientScript],
            topology: dict[str, str | None] = TOPOLOGY) -> Any:
    def make(env: Env) -> ActivityServer | ActivityClientNode:
        if env.node in topology:
            up = topology[env.node]
            return ActivityServer(env, ServerConfig(
                secret=SECRET, hostname=env.node, port=PORT,
                remote=None if up is None else (up, PORT), announce_interval=1.0,
                reconnect_delay=1.0, hash_iterations=10))
        return ActivityClientNode(env, scripts[env.node])
    return make


def address(server: str) -> str:
    return f"{server}:{PORT}"


def clients(count: int, **script: Any) -> dict[str, ClientScript]:
    out = {}
    for i in range(count):
        order = SERVERS[i % len(SERVERS):] + SERVERS[:i % len(SERVERS)]
        out[f"c{i:02d}"] = ClientScript(servers=tuple(map(address, order)), **script)
    return out


def build(seed: int, scripts: dict[str, ClientScript]) -> Scenario:
    scenario = Scenario(seed=seed, nodes=list(SERVERS), link=LINK)
    for server in SERVERS:
        scenario.listen(server, ListenerSpec(name="activity", port=PORT, reserved_for_peers=4))
    for i, name in enumerate(scripts):
        scenario.join(START + 0.01 * i, name)
    return scenario


def publisher(name: str, n: int) -> Any:
    def act(sim: Simulation) -> None:
        if name in sim.alive():
            cast(ActivityClientNode, sim.process(name)).publish({"n": n})
    return act


def rows_of(sink: MemorySink) -> list[TraceRow]:
    return [TraceRow(*row) for row in sink.rows]


def sessions(rows: list[TraceRow], end: float) -> dict[str, list[tuple[float, float]]]:
    """Per client: its (join, leave) intervals (leave = end when it stayed)."""
    out: dict[str, list[tuple[float, float]]] = defaultdict(list)
    open_at: dict[str, float] = {}
    for row in rows:
        if row.layer != "activity" or not row.node.startswith("c"):
            continue
        if row.event == "join":
            open_at[row.node] = row.t
        elif row.event == "leave" and row.node in open_at:
            out[row.node].append((open_at.pop(row.node), row.t))
    for node, t in open_at.items():
        out[node].append((t, end))
    return out


def quiet(t: float, faults: list[tuple[float, float]]) -> bool:
    """Not within a fault's window: from just before a crash until the tree has healed (the
    seed's buffer only covers a subtree's own activities while it reconnects)."""
    return all(not (crash - 0.1 <= t <= back + 5.0) for crash, back in faults)


def check(rows: list[TraceRow], seed: int, end: float,
          faults: list[tuple[float, float]]) -> int:
    """Reliability and per-client FIFO; returns how many activities were checked."""
    delivered: dict[str, set[str]] = defaultdict(set)
    last: dict[tuple[str, str], int] = {}
    for row in rows:
        if row.event == "deliver" and row.node.startswith("c"):
            assert row.msg is not None and row.origin is not None and row.seq is not None
            assert row.msg not in delivered[row.node], f"seed={seed}: {row.node} got " \
                f"{row.msg} twice"
            delivered[row.node].add(row.msg)
            key = (row.node, row.origin)
            assert row.seq > last.get(key, 0), \
                f"seed={seed}: {row.node} got {row.msg} after seq {last.get(key)} (FIFO)"
            last[key] = row.seq
    spans = sessions(rows, end)
    checked = 0
    for row in rows:
        if row.event != "publish" or not quiet(row.t, faults):
            continue
        checked += 1
        for node, intervals in spans.items():
            # connected when it was sent and still on that same connection at the end
            if any(a < row.t and b >= end for a, b in intervals):
                assert row.msg in delivered[node], \
                    f"seed={seed}: {row.msg} published t={row.t:.3f} by {row.origin} " \
                    f"never reached {node} (connected since {intervals[-1][0]:.3f})"
    return checked


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_every_activity_reaches_every_connected_client_in_fifo_order(seed: int) -> None:
    scripts = clients(15)
    scenario = build(seed, scripts)
    faults = [(8.0, 11.0), (14.0, 16.0)]
    scenario.crash(8.0, "s1", recover_after=3.0)  # s3's parent: s3 reattaches to s0
    scenario.crash(14.0, "s4", recover_after=2.0)  # a leaf: its clients move elsewhere
    for step in range(240):
        name = f"c{step % 15:02d}"
        scenario.at(START + 1.0 + step * 0.1, publisher(name, step))
    sink = MemorySink()
    sim = scenario.build(factory(scripts), trace=sink)
    end = 30.0
    sim.run(until=end)
    rows = rows_of(sink)
    checked = check(rows, seed, end, faults)
    assert checked >= 60, f"seed={seed}: only {checked} activities outside fault windows"
    assert sum(r.event == "publish" for r in rows) >= 150, f"seed={seed}"
    # the tree healed: every server is back and attached (or the root)
    for server in SERVERS:
        core = cast(ActivityServer, sim.process(server))
        assert core.state in (TreeState.ATTACHED, TreeState.ROOT), f"seed={seed}: {server}"
    roots = [s for s in SERVERS
             if cast(ActivityServer, sim.process(s)).state is TreeState.ROOT]
    assert roots == ["s0"], f"seed={seed}: roots {roots}"
    # every client is logged in again somewhere
    for name in scripts:
        assert cast(ActivityClientNode, sim.process(name)).joined, f"seed={seed}: {name} not back"


@pytest.mark.parametrize("seed", [11, 12, 13, 14])
def test_a_username_is_registered_at_most_once_under_concurrent_registrations(
        seed: int) -> None:
    scripts = clients(10, username="alice", secret="pw", register=True)
    scenario = build(seed, scripts)
    sink = MemorySink()
    sim = scenario.build(factory(scripts), trace=sink)
    sim.run(until=15.0)
    rows = rows_of(sink)
    winners = [r.node for r in rows if r.event == "registered" and r.layer == "activity"
               and r.node.startswith("c")]
    assert len(winners) <= 1, f"seed={seed}: alice registered by {winners}"
    outcomes = [cast(ActivityClientNode, sim.process(n)).register_result for n in scripts]
    assert None not in outcomes, f"seed={seed}: a registration never finished: {outcomes}"
    # everyone got in: the winner as alice, the others anonymously after REGISTER_FAILED
    assert all(cast(ActivityClientNode, sim.process(n)).joined for n in scripts), f"seed={seed}"


def test_sequential_registrations_all_succeed_and_are_known_everywhere() -> None:
    seed = 21
    scripts = {f"c{i:02d}": ClientScript(servers=(address(SERVERS[i % 5]),), username=f"user{i}",
                                         secret=f"pw{i}", register=True) for i in range(5)}
    scenario = build(seed, scripts)
    sim = scenario.build(factory(scripts), trace=MemorySink())
    sim.run(until=10.0)
    assert all(cast(ActivityClientNode, sim.process(n)).register_result
               for n in scripts), f"seed={seed}"
    for server in SERVERS:
        users = cast(ActivityServer, sim.process(server)).users
        assert all(f"user{i}" in users for i in range(5)), f"seed={seed}: {server}"


def test_same_seed_same_trace() -> None:
    def once() -> list[tuple[Any, ...]]:
        scripts = clients(6)
        scenario = build(5, scripts).crash(5.0, "s2", recover_after=1.0)
        for step in range(30):
            scenario.at(START + 1.0 + step * 0.2, publisher(f"c{step % 6:02d}", step))
        sink = MemorySink()
        scenario.build(factory(scripts), trace=sink).run(until=12.0)
        return list(sink.rows)
    assert once() == once()


TREE7 = {"s0": None, "s1": "s0", "s2": "s0", "s3": "s1", "s4": "s1", "s5": "s2", "s6": "s2"}


@pytest.mark.parametrize(("seed", "killed"), [(31, "s1"), (32, "s2"), (33, "s0"), (34, "s1")])
def test_kill_of_a_middle_server_loses_nothing_a_surviving_server_accepted(
        seed: int, killed: str) -> None:
    """Seed 003 under issue 18's target: a 7-server tree, 10 senders, ``kill -9`` of a server
    with children mid-stream. Every activity a surviving server accepted reaches every client
    that stays connected to the surviving tree, exactly once and in per-sender order (the gap
    is resent from the servers' logs when the tree heals). What only the killed server
    accepted may be lost: seed 003 has no client acknowledgement."""
    servers = list(TREE7)
    scripts = {}
    for i in range(10):
        order = servers[3 + i % 4:] + servers[:3 + i % 4]  # mostly on the leaves
        scripts[f"c{i:02d}"] = ClientScript(servers=tuple(map(address, order)))
    scenario = Scenario(seed=seed, nodes=servers, link=LINK)
    for server in servers:
        scenario.listen(server, ListenerSpec(name="activity", port=PORT, reserved_for_peers=4))
    for i, name in enumerate(scripts):
        scenario.join(START + 0.01 * i, name)
    for step in range(400):  # 100 per second over 4 s, the kill at the middle
        scenario.at(START + 1.0 + step * 0.01, publisher(f"c{step % 10:02d}", step))
    scenario.crash(START + 3.0, killed)
    sink = MemorySink()
    sim = scenario.build(factory(scripts, TREE7), trace=sink)
    end = 25.0
    sim.run(until=end)
    rows = rows_of(sink)
    delivered: dict[str, list[str]] = defaultdict(list)
    last: dict[tuple[str, str], int] = {}
    for row in rows:
        if row.event == "deliver" and row.node.startswith("c"):
            assert row.msg is not None and row.origin is not None and row.seq is not None
            assert row.msg not in delivered[row.node], \
                f"seed={seed}: {row.node} got {row.msg} twice"
            delivered[row.node].append(row.msg)
            key = (row.node, row.origin)
            assert row.seq > last.get(key, 0), \
                f"seed={seed}: {row.node} got {row.msg} after seq {last.get(key)} (FIFO)"
            last[key] = row.seq
    spans = sessions(rows, end)
    stayed = [node for node, intervals in spans.items() if intervals[-1][1] >= end]
    accepted = [r for r in rows if r.event == "publish" and r.node != killed]
    assert len(accepted) >= 300, f"seed={seed}: only {len(accepted)} accepted"
    missing = {}
    for node in stayed:
        since = spans[node][-1][0]
        owed = [r.msg for r in accepted if r.t > since]
        got = set(delivered[node])
        lost = [m for m in owed if m not in got and not m.startswith(f"{node}#")]
        if lost:
            missing[node] = (len(lost), lost[:3])
    assert not missing, f"seed={seed} killed={killed}: {missing}"
    assert len(stayed) >= 6, f"seed={seed}: only {stayed} stayed connected"
