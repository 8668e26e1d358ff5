"""Seed 000 in the simulator, beyond the seed: offline work, the hub's snapshot keeper (joiners
bootstrap from the hub, the hub crashes and recovers, everyone leaves), clear and stop-all.

Scenarios and oracles are those of ``test_replica_sim`` (a ``HubService`` and ``ReplicaNode``
clients over connections); each failure names its seed.
"""

from __future__ import annotations

import functools
import json
from collections import defaultdict
from typing import Any, cast

import pytest

from checks import count, named
from gossamer.core import Env, Message, node_ids
from gossamer.protocols.replica import (
    Data,
    HubKeeper,
    HubService,
    KeeperConfig,
    LinkState,
    ReplicaClient,
    ReplicaCodec,
    ReplicaConfig,
    ReplicaNode,
    Retry,
    Snapshot,
)
from gossamer.runtimes.sim import Latency, LinkModel, MemoryStore, Scenario, Simulation
from gossamer.testing import FakeEnv
from test_replica_sim import (
    HUB,
    HUB_LISTENER,
    LATENCY,
    LAYER,
    WIDE,
    check_all,
    client_of,
    convergence_problems,
    cuts_made,
    make_scenario,
    missing_deliveries,
    repairs,
    run,
    write,
)


def _info(row: Any) -> dict[str, Any]:
    return json.loads(row.info) if row.info else {}


def go_offline(sim: Simulation, node: str) -> None:
    sim.call(node, lambda p: cast(ReplicaNode, p).go_offline())


def reconnect(sim: Simulation, node: str) -> None:
    sim.call(node, lambda p: cast(ReplicaNode, p).reconnect())


@pytest.mark.parametrize("seed", [11, 12])
def test_offline_writers_sync_then_rebase_and_everyone_converges(seed: int) -> None:
    scenario = make_scenario(clients=15, seed=seed, writes=90, keys=3, window=(0.2, 7.0),
                             latency=WIDE, cuts=0.3)
    away = scenario.nodes[1:5]
    offline_writes: dict[str, int] = defaultdict(int)
    for index, node in enumerate(away):
        scenario.at(1.0 + index * 0.1, lambda sim, node=node: go_offline(sim, node))
        for number in range(3):  # writes on the keys everyone else is writing too

            def write(sim: Simulation, node: str = node, number: int = number) -> None:
                sim.call(node, lambda p: cast(ReplicaNode, p).client.set(
                    f"k{number % 3}", {"offline": node}))

            scenario.at(2.0 + number * 0.5, write)
            offline_writes[node] += 1
        scenario.at(5.0 + index * 0.3, lambda sim, node=node: reconnect(sim, node))
    sim, sink = run(scenario, until=60.0)
    check_all(sim, sink, seed)
    rows = named(sink.rows)
    for node in away:
        published_while_away = [r for r in rows if r.node == node and r.event == "publish"
                                and 1.0 + 0.4 < r.t < 5.0]
        assert published_while_away == [], f"seed={seed}: {node} sent while offline"
        syncs = [_info(r) for r in rows if r.node == node and r.event == "sync"
                 and r.t >= 5.0]
        assert syncs, f"seed={seed}: {node} never synced after reconnecting"
        # queued: the scripted writes plus the scenario's random writes that picked it
        assert syncs[0]["queued"] >= offline_writes[node], f"seed={seed}: {node}"
        assert syncs[0]["rebased"] >= 1, f"seed={seed}: {node} rebased on the network state"
        assert client_of(sim, node).link is LinkState.ONLINE
        assert client_of(sim, node).offline_queue == []


def test_offline_write_is_queued_visible_locally_and_survives_a_crash() -> None:
    seed = 13
    scenario = make_scenario(clients=4, seed=seed, writes=0, keys=1)
    node = scenario.nodes[1]
    scenario.at(0.5, lambda sim: client_of(sim, scenario.nodes[2]).set("k", 1))
    scenario.at(1.0, lambda sim: go_offline(sim, node))
    scenario.at(1.5, lambda sim: client_of(sim, node).set("k", 2))
    scenario.at(1.7, lambda sim: client_of(sim, scenario.nodes[3]).set("k", 3))
    scenario.crash(2.0, node, recover_after=1.0)  # recovers connected, offline queue intact
    seen: dict[str, Any] = {}

    def look(sim: Simulation) -> None:
        seen["before"] = client_of(sim, scenario.nodes[3]).get("k")

    scenario.at(1.6, look)
    sim, sink = run(scenario, until=20.0)
    check_all(sim, sink, seed)
    assert seen["before"] == 1, f"seed={seed}: the offline write stayed local"
    assert all(client_of(sim, n).get("k") == 2 for n in scenario.nodes[1:]), f"seed={seed}"
    syncs = [_info(r) for r in named(sink.rows) if r.node == node and r.event == "sync"]
    assert any(s["queued"] == 1 and s["sent"] == 1 and s["rebased"] == 1 for s in syncs)


class RecordingClient(ReplicaClient):
    """A client that keeps every message it is given."""

    def __init__(self, env: Env, **kwargs: Any) -> None:
        super().__init__(env, **kwargs)
        self.received: list[Message] = []

    def on_message(self, src: str, msg: Message) -> None:
        self.received.append(msg)
        super().on_message(src, msg)


@pytest.mark.parametrize("log_per_origin", [1000, 5], ids=["from-log", "snapshot"])
def test_a_late_joiner_bootstraps_from_the_hub_not_from_its_peers(log_per_origin: int) -> None:
    seed = 14
    nodes = node_ids(7)
    scenario = make_scenario(clients=6, seed=seed, writes=80, keys=4, window=(0.2, 4.0))
    joiner = nodes[-1]
    scenario.join(8.0, joiner)
    sim, sink = run(scenario, until=20.0,
                    client=functools.partial(ReplicaNode, client_class=RecordingClient),
                    keeper=KeeperConfig(log_per_origin=log_per_origin))
    check_all(sim, sink, seed)
    got = cast(RecordingClient, client_of(sim, joiner)).received
    from_peers = [m for m in got if isinstance(m, Retry) and m.id != HUB]
    assert from_peers == [], f"seed={seed}: peers resent {len(from_peers)} retries"
    snapshots = [m for m in got if isinstance(m, Snapshot)]
    served = [_info(r)["kind"] for r in named(sink.rows)
              if r.event == "serve" and r.peer == joiner]
    if log_per_origin == 5:
        assert snapshots and snapshots[-1].last, f"seed={seed}: bootstrapped from a snapshot"
        assert served[0] == "snapshot"
    else:
        assert snapshots == [] and served[0] == "retry", f"seed={seed}"
    assert client_of(sim, joiner).items() == client_of(sim, nodes[0]).items()


@pytest.mark.parametrize("seed", [15, 16])
def test_the_hub_crashes_recovers_and_nothing_is_lost(seed: int) -> None:
    scenario = make_scenario(clients=10, seed=seed, writes=80, keys=3, window=(0.2, 6.0),
                             latency=WIDE, cuts=0.3)
    scenario.crash(2.0, HUB, recover_after=1.0)
    scenario.crash(4.0, HUB, recover_after=0.5)
    sim, sink = run(scenario, until=60.0)
    check_all(sim, sink, seed)
    assert repairs(sink.rows).nacks > 0, f"seed={seed}"
    keeper = cast(HubService, sim.process(HUB)).keeper
    assert keeper is not None
    assert keeper.replica.revisions() == client_of(sim, scenario.nodes[1]).revisions(), \
        f"seed={seed}: the hub's snapshot converged too"


@pytest.mark.parametrize("log_per_origin", [1000, 3], ids=["from-log", "snapshot"])
def test_everyone_leaves_and_a_newcomer_gets_everything_from_the_hub(
    log_per_origin: int,
) -> None:
    seed = 17
    nodes = node_ids(6)
    scenario = make_scenario(clients=5, seed=seed, writes=40, keys=3, window=(0.2, 3.0))
    for node in nodes[:5]:
        scenario.leave(6.0, node)
    scenario.join(8.0, nodes[5])
    sim, sink = run(scenario, until=20.0, keeper=KeeperConfig(log_per_origin=log_per_origin))
    newcomer = client_of(sim, nodes[5])
    assert missing_deliveries(sink.rows, [nodes[5]]) == [], f"seed={seed}"
    states = {nodes[5]: (newcomer.revisions(), newcomer.items())}
    assert convergence_problems(sink.rows, states) == [], f"seed={seed}"
    assert newcomer.items(), f"seed={seed}: there was something to get"


def test_clear_deletes_everything_everywhere_and_drops_queues() -> None:
    seed = 18
    scenario = make_scenario(clients=6, seed=seed, writes=30, keys=3, window=(0.2, 2.0))
    clearer = scenario.nodes[1]
    cleared: dict[str, list[str]] = defaultdict(list)
    stopped: dict[str, list[str]] = defaultdict(list)

    def client(env: Env, **options: Any) -> ReplicaNode:
        return ReplicaNode(env, on_clear=lambda by: cleared[env.node].append(by),
                           on_stop=lambda by: stopped[env.node].append(by), **options)

    scenario.at(4.0, lambda sim: client_of(sim, clearer).clear_all())
    scenario.at(4.0, lambda sim: client_of(sim, clearer).stop_all())
    sim, sink = run(scenario, until=15.0, client=client)
    check_all(sim, sink, seed)
    clients = scenario.nodes[1:]
    assert all(client_of(sim, n).items() == {} for n in clients), f"seed={seed}"
    assert all(cleared[n] == [clearer] for n in clients), f"seed={seed}: {dict(cleared)}"
    assert all(stopped[n] == [clearer] for n in clients), f"seed={seed}: {dict(stopped)}"
    assert count(sink.rows, layer=LAYER, event="clear") == len(clients)


def test_clear_and_stop_need_the_hub() -> None:
    scenario = make_scenario(clients=2, seed=19, writes=0, keys=1)
    node = scenario.nodes[1]
    errors: list[str] = []

    def try_clear(sim: Simulation) -> None:
        try:
            client_of(sim, node).clear_all()
        except Exception as exc:
            errors.append(type(exc).__name__)

    scenario.at(1.0, lambda sim: go_offline(sim, node))
    scenario.at(1.5, try_clear)
    run(scenario, until=3.0)
    assert errors == ["StateError"]


def test_a_snapshot_behind_the_client_is_not_installed() -> None:
    """A client that delivered something the snapshot lacks keeps its state."""
    seed = 20
    scenario = make_scenario(clients=3, seed=seed, writes=10, keys=2)
    sim, sink = run(scenario, until=10.0,
                    config=ReplicaConfig(), keeper=KeeperConfig(log_per_origin=2))
    client = client_of(sim, scenario.nodes[1])
    before = client.revisions()
    sim.call(scenario.nodes[1], lambda p: cast(ReplicaNode, p).client.on_message(
        HUB, Snapshot(id=HUB, dest=scenario.nodes[1], vector={}, objects={}, last=True)))
    sim.run(until=11.0)
    assert client.revisions() == before
    assert any(r.event == "drop" and "snapshot_behind" in str(r.info)
               for r in named(sink.rows) if r.node == scenario.nodes[1])


def everything_at_once(clients: int, seed: int, *, writes: int, until: float,
                       cuts: float = 0.5, latency: Latency = WIDE) -> None:
    """Every client's connection cut ``cuts`` times a second while they write, over a wide
    latency spread (by default); a tenth of the clients cut off by a partition that heals; a
    twentieth crashing and restarting; a twentieth going offline and writing."""
    scenario = make_scenario(clients=clients, seed=seed, writes=writes, keys=5,
                             window=(0.5, 4.0), latency=latency, cuts=cuts)
    nodes = scenario.nodes[1:]
    tenth, twentieth = max(1, clients // 10), max(1, clients // 20)
    cut_off = nodes[:tenth]
    scenario.partition(1.0, [[HUB, *nodes[tenth:]], cut_off], heal_at=3.0)
    for index, node in enumerate(nodes[tenth:tenth + twentieth]):
        scenario.crash(1.5 + index * 0.01, node, recover_after=1.0)
    away = nodes[tenth + twentieth:tenth + 2 * twentieth]
    for index, node in enumerate(away):
        scenario.at(1.2 + index * 0.01, lambda sim, node=node: go_offline(sim, node))
        scenario.at(2.0 + index * 0.01, lambda sim, node=node, key=f"k{index % 5}":
                    client_of(sim, node).set(key, {"offline": node}))
        scenario.at(3.5 + index * 0.04, lambda sim, node=node: reconnect(sim, node))
    sim, sink = run(scenario, until=until)
    check_all(sim, sink, seed)
    assert cuts_made(sink.rows) > 0, f"seed={seed}"
    repaired = repairs(sink.rows)
    assert repaired.nacks > 0 and repaired.delivered_after_nack > 0, f"seed={seed}: {repaired}"
    syncs = {r.node for r in named(sink.rows) if r.event == "sync" and _info(r)["queued"]}
    assert set(away) <= syncs, f"seed={seed}: every offline writer synced its queue"
    keeper = cast(HubService, sim.process(HUB)).keeper
    assert keeper is not None
    assert keeper.replica.revisions() == client_of(sim, nodes[0]).revisions(), f"seed={seed}"
    # every detecting replica tells the loser; the hub forwards one of each
    assert keeper.duplicate_conflicts > 0, f"seed={seed}"


def test_twenty_clients_everything_at_once() -> None:
    everything_at_once(20, 22, writes=60, until=60.0)


@pytest.mark.slow
def test_fifty_clients_everything_at_once() -> None:
    everything_at_once(50, 22, writes=150, until=60.0)


@pytest.mark.slow
def test_a_thousand_clients_everything_at_once() -> None:
    # fewer cuts and the usual latency: every cut is a Left to all the others, and a wide
    # spread makes more of the writes concurrent (more conflicts, rebases and Conflicts)
    everything_at_once(1000, 23, writes=40, until=40.0, cuts=0.05, latency=LATENCY)


# -- the keeper's store ------------------------------------------------------------------------


def keeper_on(store: MemoryStore, log_per_origin: int) -> tuple[HubKeeper, FakeEnv]:
    env = FakeEnv(HUB, store=store)
    keeper = HubKeeper(env, lambda msg: None,
                       config=KeeperConfig(log_per_origin=log_per_origin))
    keeper.start()
    return keeper, env


def chain(writer: str, seqs: range) -> list[Data]:
    """``writer``'s consecutive writes of its own object."""
    return [write(writer, {writer: seq}, f"k-{writer}", None if seq == 1 else f"{writer}-{seq - 1}",
                  f"{writer}-{seq}") for seq in seqs]


def stored_log(store: MemoryStore) -> dict[str, list[tuple[int, int]]]:
    """origin -> the (first, last) seqs of each of its stored rows."""
    rows: dict[str, list[tuple[int, int]]] = {}
    for key, raw in store.scan("keeper.log"):
        origin, first = json.loads(key)
        seqs = [int(entry.split(b" ", 1)[0]) for entry in _split(raw)]
        assert seqs[0] == first and seqs == list(range(first, seqs[-1] + 1))
        rows.setdefault(origin, []).append((first, seqs[-1]))
    return {origin: sorted(spans) for origin, spans in rows.items()}


def _split(raw: bytes) -> list[bytes]:
    """A row's entries, each ``seq length body``."""
    entries, offset = [], 0
    while offset < len(raw):
        a = raw.index(b" ", offset)
        b = raw.index(b" ", a + 1)
        end = b + 1 + int(raw[a + 1:b])
        entries.append(raw[offset:end])
        offset = end
    return entries


def test_the_log_is_stored_append_only_bounded_and_reloaded() -> None:
    store = MemoryStore()
    keeper, env = keeper_on(store, log_per_origin=100)
    for msg in chain("a", range(1, 301)) + chain("b", range(1, 11)):
        assert keeper.handle(msg) is msg
    env.advance(1.0)  # the group commit
    rows = stored_log(store)
    # a: rows that reach seqs 201-300 and no row wholly older; b: seqs 1-10
    assert all(last >= 201 for _, last in rows["a"]) and rows["a"][-1][1] == 300
    assert rows["a"][0][0] <= 201 and rows["b"][0][0] == 1 and rows["b"][-1][1] == 10
    assert keeper.logged("a") == (201, 300) and keeper.logged("b") == (1, 10)
    keeper.stop()
    again, env = keeper_on(store, log_per_origin=100)
    assert again.logged("a") == (201, 300) and again.logged("b") == (1, 10)
    assert again.replica.causal.vector == {"a": 300, "b": 10}
    assert again.handle(chain("a", range(301, 302))[0]) is not None
    env.advance(1.0)
    assert again.logged("a") == (202, 301)
    again.stop()
    third, _ = keeper_on(store, log_per_origin=100)
    assert third.logged("a") == (202, 301)


def test_a_crash_loses_only_the_writes_since_the_last_group_commit() -> None:
    store = MemoryStore()
    keeper, env = keeper_on(store, log_per_origin=100)
    for msg in chain("a", range(1, 11)):
        keeper.handle(msg)
    env.advance(1.0)
    for msg in chain("a", range(11, 16)):
        keeper.handle(msg)
    store.crash()  # before the next group commit
    again, _ = keeper_on(store, log_per_origin=100)
    assert again.logged("a") == (1, 10) and again.replica.causal.vector == {"a": 10}


def test_a_message_delivered_at_once_is_logged_as_it_came_and_reloads_the_same() -> None:
    store = MemoryStore()
    keeper, env = keeper_on(store, log_per_origin=100)
    codec = ReplicaCodec()
    first, second = chain("a", range(1, 3))
    spaced = b"  " + codec.encode(first).replace(b",", b", ") + b"\n"  # the same JSON
    assert codec.decode(spaced) == first
    other = codec.encode(second)
    # "second" arrives first: held back, it is logged (encoded again) when "first" comes
    keeper.handle(codec.decode(other), b'{"not": "what it came as"}')
    keeper.handle(codec.decode(spaced), spaced)
    env.advance(1.0)
    keeper.stop()
    (_, raw), = store.scan("keeper.log")
    assert spaced in raw and b"not" not in raw and other in raw
    again, _ = keeper_on(store, log_per_origin=100)
    assert again.logged("a") == (1, 2)
    assert again._log["a"][1][1] == first and again._log["a"][2][1] == second


def set_at(scenario: Any, at: float, node: str, key: str, content: Any) -> None:
    scenario.at(at, lambda sim: sim.call(
        node, lambda p: cast(ReplicaNode, p).client.set(key, content)))


@pytest.mark.parametrize("seed", [41, 42])
def test_a_restarted_client_gets_a_departed_origins_past_from_the_snapshot(seed: int) -> None:
    """A client crashes right after a write the hub never got (so its vector is ahead of the
    hub's), an origin writes past the hub's log meanwhile and leaves for good, another client
    keeps writing. Restarted on its store, the client still gets the departed origin's past
    (the hub answers with its snapshot what it cannot serve from its log), and its NACKs are
    not sent after the departed client again and again."""
    old, writer, restarted = node_ids(3)
    scenario = Scenario(seed=seed, nodes=[HUB, old, writer, restarted],
                        link=LinkModel(latency=LATENCY))
    scenario.listen(HUB, HUB_LISTENER)
    for number in range(30):
        at = 0.2 + number * 0.02 if number < 10 else 1.5 + number * 0.02
        set_at(scenario, at, old, f"old{number}", {"n": number})
    set_at(scenario, 1.0, restarted, "mine", "lost on the way")
    scenario.crash(1.0001, restarted, recover_after=3.0)
    scenario.leave(2.5, old)
    for number in range(80):
        set_at(scenario, 3.0 + number * 0.05, writer, f"w{number % 4}", {"n": number})
    sim, sink = run(scenario, until=30.0, keeper=KeeperConfig(log_per_origin=5))
    mine = client_of(sim, restarted)
    got = sorted(k for k in mine.items() if k.startswith("old"))
    assert len(got) == 30, f"seed={seed}: the restarted client holds {len(got)} of the 30"
    assert mine.items() == client_of(sim, writer).items(), f"seed={seed}"
    unserved = [r for r in named(sink.rows) if r.node == HUB and r.event == "drop"
                and "is connected" in _info(r).get("detail", "")]
    assert len(unserved) <= 1, f"seed={seed}: {len(unserved)} NACKs sent after {old}"
    syncs = [_info(r) for r in named(sink.rows) if r.node == restarted and r.event == "sync"]
    assert not any(s["timed_out"] for s in syncs), f"seed={seed}: synced only by timeout"
