"""HyParView in the simulator: views converge, stay bounded, symmetric and connected after
joins, crashes, churn and a healed partition; bad input is dropped with a reason and no effect.

Every assertion message names the seed that replays it.
"""

from __future__ import annotations

import dataclasses
import random
from collections import deque
from collections.abc import Callable, Collection, Mapping
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from gossamer.core import ConfigError, InvalidMessage, MemorySink, Message
from gossamer.protocols.membership import (
    Disconnect,
    ForwardJoin,
    HyParView,
    HyParViewConfig,
    Join,
    JoinReply,
    Neighbor,
    NeighborReply,
    OverlayState,
    Shuffle,
    ShuffleReply,
)
from gossamer.protocols.membership.hyparview import CODEC, Ping
from gossamer.runtimes.sim import LinkModel, Scenario, Simulation, Uniform
from gossamer.testing import FakeEnv, info_of

LINK = LinkModel(latency=Uniform(0.005, 0.05))


# -- overlays in the simulator -----------------------------------------------------------------


def overlay_problems(
    views: Mapping[str, HyParView], alive: Collection[str], *, active_size: int = 5,
    max_one_way: float = 0.01,
) -> list[str]:
    """What is wrong with the live nodes' active views (empty list: nothing)."""
    alive = set(alive)
    problems: list[str] = []
    links = one_way = 0
    adjacency: dict[str, list[str]] = {}
    for node in sorted(alive):
        active = views[node].active_view()
        if len(active) > active_size:
            problems.append(f"{node} has {len(active)} > {active_size} neighbours")
        if node in active or node in views[node].passive_view():
            problems.append(f"{node} lists itself")
        if not active:
            problems.append(f"{node} has no neighbour")
        if set(active) & set(views[node].passive_view()):
            problems.append(f"{node} has a node in both views")
        dead = [p for p in active if p not in alive]
        if dead:
            problems.append(f"{node} keeps dead neighbours {dead}")
        live = [p for p in active if p in alive]
        adjacency[node] = live
        links += len(live)
        one_way += sum(1 for p in live if node not in views[p].active_view())
    if links and one_way / links > max_one_way:
        problems.append(f"{one_way} of {links} links are one-way")
    if alive:
        # connected as an undirected graph: gossip flows both ways over a TCP-like link
        undirected: dict[str, set[str]] = {n: set(adjacency[n]) for n in alive}
        for node, peers in adjacency.items():
            for peer in peers:
                undirected[peer].add(node)
        start = min(alive)
        reached, todo = {start}, deque([start])
        while todo:
            for peer in undirected[todo.popleft()]:
                if peer not in reached:
                    reached.add(peer)
                    todo.append(peer)
        if len(reached) != len(alive):
            problems.append(f"overlay not connected: {len(reached)} of {len(alive)} reachable")
    return problems


@dataclasses.dataclass
class Overlay:
    """A scenario whose nodes join one by one, each through a random earlier node; a node that
    comes back after a crash joins through any initial node (possibly a dead one)."""

    scenario: Scenario
    config: HyParViewConfig
    views: dict[str, HyParView] = dataclasses.field(default_factory=dict)

    @classmethod
    def of(cls, count: int, *, seed: int, join_every: float = 0.005,
           config: HyParViewConfig | None = None, link: LinkModel = LINK) -> Overlay:
        scenario = Scenario.of(1, seed=seed, link=link)
        names = [f"n{i:05d}" for i in range(count)]
        scenario.nodes = names[:1]
        for i, node in enumerate(names[1:], start=1):
            scenario.join(i * join_every, node)
        return cls(scenario, config or HyParViewConfig())

    @property
    def ids(self) -> list[str]:
        return self.scenario.nodes + self.scenario.joiners

    def factory(self, make: Callable[[Any, HyParView], Any] | None = None) -> Callable[[Any], Any]:
        ids = self.ids
        first = random.Random(f"{self.scenario.seed}/contacts")
        contact = {node: [ids[first.randrange(i)]] if i else [] for i, node in enumerate(ids)}

        def build(env: Any) -> Any:
            node = env.node
            again = node in self.views
            contacts = [n for n in ids if n != node] if again else contact[node]
            view = HyParView(env, contacts=contacts, config=self.config)
            self.views[node] = view
            return view if make is None else make(env, view)

        return build

    def build(self, make: Callable[[Any, HyParView], Any] | None = None,
              trace: MemorySink | None = None) -> Simulation:
        return self.scenario.build(self.factory(make), trace=trace)


# -- convergence -------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [1, *(pytest.param(s, marks=pytest.mark.slow) for s in (2, 3))])
def test_joins_build_a_bounded_symmetric_connected_overlay(seed: int) -> None:
    net = Overlay.of(300, seed=seed)
    sink = MemorySink()
    sim = net.build(trace=sink)
    sim.run(until=15.0)
    alive = sim.alive()
    assert len(alive) == 300, f"seed={seed}"
    assert overlay_problems(net.views, alive, max_one_way=0.0) == [], f"seed={seed}"
    sizes = [len(net.views[n].active_view()) for n in alive]
    assert sum(sizes) / len(sizes) >= 4.5, f"seed={seed}: active views barely filled {sizes}"
    passive = [len(net.views[n].passive_view()) for n in alive]
    assert min(passive) >= 10 and max(passive) <= 30, f"seed={seed}: passive sizes {passive}"
    assert all(net.views[n].state is OverlayState.MEMBER for n in alive), f"seed={seed}"
    events = {r[4] for r in sink.rows if r[3] == "hyparview"}
    assert {"overlay_join", "neighbor_up"} <= events, f"seed={seed}"


@pytest.mark.parametrize("seed", [4, pytest.param(5, marks=pytest.mark.slow)])
def test_views_heal_after_a_third_of_the_nodes_crash(seed: int) -> None:
    net = Overlay.of(300, seed=seed)
    rng = random.Random(seed)
    victims = sorted(rng.sample(net.ids[1:], 100))
    for node in victims:
        net.scenario.crash(8.0, node)
    sim = net.build()
    sim.run(until=20.0)
    alive = sim.alive()
    assert len(alive) == 200, f"seed={seed}"
    assert overlay_problems(net.views, alive) == [], f"seed={seed}"


@pytest.mark.parametrize("seed", [6])
def test_views_survive_churn_of_crashes_and_recoveries(seed: int) -> None:
    net = Overlay.of(150, seed=seed)
    net.scenario.churn(start=5.0, end=20.0, rate=4.0, downtime=2.0, pool=net.ids[1:])
    sink = MemorySink()
    sim = net.build(trace=sink)
    sim.run(until=35.0)
    assert sum(1 for r in sink.rows if r[4] == "recover") > 30, f"seed={seed}"
    alive = sim.alive()
    assert len(alive) == 150, f"seed={seed}"
    assert overlay_problems(net.views, alive) == [], f"seed={seed}"


@pytest.mark.parametrize("seed", [7])
def test_a_healed_partition_merges_into_one_overlay(seed: int) -> None:
    net = Overlay.of(200, seed=seed)
    ids = net.ids
    halves = [ids[0::2], ids[1::2]]  # every node loses about half of its links
    net.scenario.partition(6.0, halves, heal_at=14.0)
    sim = net.build()
    sim.run(until=13.9)
    alive = sim.alive()
    for half in halves:  # each side repaired itself into a connected overlay of its own
        side = {n: net.views[n] for n in half}
        assert overlay_problems(side, half) == [], f"seed={seed}"
    sim.run(until=40.0)
    assert overlay_problems(net.views, alive) == [], f"seed={seed}"
    side_of = {n: i for i, half in enumerate(halves) for n in half}
    across = sum(1 for n in alive for p in net.views[n].active_view() if side_of[p] != side_of[n])
    assert across > 0, f"seed={seed}: no link across the healed partition"


@pytest.mark.parametrize("seed", [8])
def test_graceful_leave_is_noticed_at_once_not_by_timeout(seed: int) -> None:
    net = Overlay.of(60, seed=seed)
    leaver = net.ids[30]
    net.scenario.leave(8.0, leaver)
    sink = MemorySink()
    sim = net.build(trace=sink)
    sim.run(until=7.99)
    neighbours = net.views[leaver].active_view()
    assert neighbours, f"seed={seed}"
    sim.run(until=8.2)  # well under the keepalive timeout
    for node in neighbours:
        assert leaver not in net.views[node].active_view(), f"seed={seed}"
        assert leaver not in net.views[node].passive_view(), f"seed={seed}"
    reasons = {r[11] for r in sink.rows if r[4] == "neighbor_down" and r[7] == leaver
               and r[1] >= 8.0}
    assert reasons and all('"left"' in str(r) for r in reasons), f"seed={seed}: {reasons}"
    sim.run(until=15.0)
    assert overlay_problems(net.views, sim.alive()) == [], f"seed={seed}"


@pytest.mark.parametrize("seed", [9])
def test_views_converge_under_message_loss(seed: int) -> None:
    lossy = LinkModel(latency=Uniform(0.005, 0.05), loss=0.05, duplicate=0.05, reorder=0.1)
    net = Overlay.of(150, seed=seed, link=lossy)
    sim = net.build()
    sim.run(until=25.0)
    assert overlay_problems(net.views, sim.alive(), max_one_way=0.03) == [], f"seed={seed}"


def test_one_seed_one_trace() -> None:
    def run(seed: int) -> list[tuple[Any, ...]]:
        net = Overlay.of(80, seed=seed)
        for node in net.ids[10:20]:
            net.scenario.crash(5.0, node, recover_after=3.0)
        sink = MemorySink()
        net.build(trace=sink).run(until=15.0)
        return sink.rows

    first, again, other = run(11), run(11), run(12)
    assert first == again, "seed=11: two runs differ"
    assert first != other


# -- unit tests: one node, a fake env --------------------------------------------------------


def member(node: str = "a", *, active: Collection[str] = (), passive: Collection[str] = (),
           config: HyParViewConfig | None = None, seed: int = 0) -> tuple[HyParView, FakeEnv]:
    """A started first node with the given neighbours (linked through JOIN_REPLYs)."""
    env = FakeEnv(node, seed=seed)
    view = HyParView(env, config=config)
    view.start()
    for peer in active:
        view.on_message(peer, JoinReply())
    for peer in passive:
        view._add_passive(peer)  # test set-up only
    env.take_sent()
    env.rows.clear()
    return view, env


def snapshot(view: HyParView) -> tuple[Any, ...]:
    return (view.state, view.active_view(), view.passive_view(), sorted(view._pending),
            view._shuffle_sent, dict(view._suspects))


def test_join_adds_the_joiner_and_walks_it_to_every_other_neighbour() -> None:
    view, env = member(active=["b", "c", "d"])
    view.on_message("x", Join())
    assert "x" in view.active_view()
    sent = env.take_sent()
    assert ("x", JoinReply()) in sent
    walks = sorted(dst for dst, msg in sent if isinstance(msg, ForwardJoin))
    assert walks == ["b", "c", "d"]
    assert all(msg == ForwardJoin(new_node="x", ttl=6) for _, msg in sent
               if isinstance(msg, ForwardJoin))


def test_forward_join_enters_passive_at_prwl_and_active_at_the_end() -> None:
    view, env = member(active=["b", "c"])
    view.on_message("b", ForwardJoin(new_node="x", ttl=3))  # PRWL: passive, then walk on
    assert "x" in view.passive_view() and "x" not in view.active_view()
    [(dst, msg)] = env.take_sent()
    assert dst == "c" and msg == ForwardJoin(new_node="x", ttl=2)
    view.on_message("b", ForwardJoin(new_node="y", ttl=0))
    assert "y" in view.active_view()
    assert env.take_sent() == [("y", JoinReply())]


def test_a_joining_contact_relays_a_repeated_join_to_its_own_contact() -> None:
    # the joiner may know no one else: were we to crash before we are in, it would JOIN us
    # for ever; once it has waited a join_timeout, a walk gets it in through our contact
    env = FakeEnv("a")
    view = HyParView(env, contacts=["c"])
    view.start()
    assert view.state is OverlayState.JOINING
    env.take_sent()
    view.on_message("x", Join())
    assert env.take_sent() == []  # held: we may be in at any moment
    view.on_message("x", Join())  # its retry: our own join is slow
    assert env.take_sent() == [("c", ForwardJoin(new_node="x", ttl=6))]
    assert view.active_view() == []
    view.on_message("c", JoinReply())  # in: the held joiner is served
    assert view.state is OverlayState.MEMBER
    assert sorted(view.active_view()) == ["c", "x"]


def test_full_active_view_evicts_a_random_neighbour_with_a_disconnect() -> None:
    view, env = member(active=["b", "c", "d", "e", "f"])
    view.on_message("x", Neighbor(priority="high"))
    assert len(view.active_view()) == 5 and "x" in view.active_view()
    sent = env.take_sent()
    [victim] = [dst for dst, msg in sent if isinstance(msg, Disconnect)]
    assert victim in view.passive_view()
    assert ("x", NeighborReply(accepted=True)) in sent


def test_low_priority_neighbor_request_is_refused_when_full() -> None:
    view, env = member(active=["b", "c", "d", "e", "f"])
    view.on_message("x", Neighbor(priority="low"))
    assert "x" not in view.active_view() and "x" in view.passive_view()
    assert env.take_sent() == [("x", NeighborReply(accepted=False))]


def test_peer_down_replaces_the_neighbour_from_the_passive_view() -> None:
    view, env = member(active=["b", "c"], passive=["p", "q"])
    view.peer_down("b")
    assert view.active_view() == ["c"]
    sent = env.take_sent()  # one request per free slot, as far as the passive view goes
    assert sorted(sent) == [("p", Neighbor(priority="low")), ("q", Neighbor(priority="low"))]
    view.on_message("q", NeighborReply(accepted=True))
    view.on_message("p", NeighborReply(accepted=False))
    assert view.active_view() == ["c", "q"]
    assert view.passive_view() == ["p"]


def test_an_isolated_node_asks_with_high_priority_and_moves_on_when_a_target_is_silent() -> None:
    config = HyParViewConfig(neighbor_timeout=1.0)
    view, env = member(active=["b"], passive=["p"], config=config)
    view.peer_down("b")
    assert env.take_sent() == [("p", Neighbor(priority="high"))]
    env.advance(1.01)  # p never answers: presumed dead, asked again later
    assert "p" not in view.passive_view() and "p" in view._suspects
    env.take_sent()
    env.advance(config.suspect_retry + config.keepalive_interval)
    assert ("p", Neighbor(priority="high")) in env.take_sent()


def test_keepalive_times_out_a_silent_neighbour() -> None:
    config = HyParViewConfig()
    view, env = member(active=["b", "c"], config=config)
    for _ in range(5):
        env.advance(config.keepalive_interval)
        view.on_message("c", Ping())  # c keeps talking, b is silent
    assert view.active_view() == ["c"]
    downs = env.traced("neighbor_down")
    assert downs and downs[0].peer == "b" and info_of(downs[0])["reason"] == "timeout"
    assert ("c", Ping()) in env.sent


def test_stray_ping_is_taken_back_when_there_is_room_else_disconnected() -> None:
    view, _env = member(active=["b"])
    view.on_message("x", Ping())
    assert "x" in view.active_view()
    full, env2 = member(active=["b", "c", "d", "e", "f"])
    full.on_message("x", Ping())
    assert "x" not in full.active_view()
    assert env2.take_sent() == [("x", Disconnect())]


def test_shuffle_ends_with_a_reply_and_both_sides_integrate() -> None:
    view, env = member("a", active=["b"], passive=["p1", "p2", "p3"], seed=3)
    view.on_message("b", Shuffle(origin="o", ttl=1, nodes=("o", "s1", "s2"), nonce=7))
    [(dst, reply)] = env.take_sent()
    assert dst == "o" and isinstance(reply, ShuffleReply) and reply.nonce == 7
    assert len(reply.nodes) == 3
    assert {"o", "s1", "s2"} <= set(view.passive_view())

    origin, oenv = member("o", active=["b", "c"], seed=4)
    oenv.advance(origin.config.shuffle_period)
    [shuffle] = [m for _, m in oenv.take_sent() if isinstance(m, Shuffle)]
    assert shuffle.origin == "o" and shuffle.ttl == 6 and "o" in shuffle.nodes
    origin.on_message("a", ShuffleReply(nodes=("p1", "p2"), nonce=shuffle.nonce))
    assert {"p1", "p2"} <= set(origin.passive_view())


def test_passive_view_stays_bounded() -> None:
    config = HyParViewConfig(passive_size=4)
    view, _env = member(active=["b"], config=config)
    for i in range(10):
        view.on_message("b", Shuffle(origin=f"o{i}", ttl=1, nodes=(f"o{i}", f"s{i}"), nonce=i))
    assert len(view.passive_view()) == 4


# -- bad input: dropped with a reason, no state change ----------------------------------------


@pytest.mark.parametrize(
    ("src", "msg", "reason"),
    [
        ("z", NeighborReply(accepted=False), "unsolicited"),
        ("z", ShuffleReply(nodes=("q",), nonce=99), "unsolicited"),
        ("b", ForwardJoin(new_node="a", ttl=3), "own_walk"),
        ("b", Shuffle(origin="a", ttl=2, nodes=("a",), nonce=1), "own_walk"),
        ("a", Join(), "from_self"),
        ("a", Ping(), "from_self"),
    ],
)
def test_unexpected_messages_are_dropped_with_a_reason_and_change_nothing(
    src: str, msg: Message, reason: str
) -> None:
    view, env = member(active=["b", "c"], passive=["p"])
    before = snapshot(view)
    view.on_message(src, msg)
    assert snapshot(view) == before
    assert env.sent == []
    [drop] = env.traced("drop")
    assert drop.layer == "hyparview" and info_of(drop)["reason"] == reason
    assert info_of(drop)["type"] == msg.TYPE


def test_a_message_of_another_layer_is_dropped() -> None:
    from gossamer.protocols.ordering import FifoSync

    view, env = member(active=["b"])
    before = snapshot(view)
    view.on_message("b", FifoSync())
    assert snapshot(view) == before and env.drop_reasons() == ["wrong_layer"]


def test_late_accept_is_undone_so_views_stay_symmetric() -> None:
    view, env = member(active=["b"], passive=["p"])
    view.peer_down("b")
    env.take_sent()
    env.advance(view.config.neighbor_timeout + 0.01)  # gave up on p
    env.take_sent()
    before = snapshot(view)
    view.on_message("p", NeighborReply(accepted=True))
    assert snapshot(view) == before
    assert ("p", Disconnect()) in env.take_sent()
    assert env.drop_reasons()[-1] == "late_reply"


def test_messages_after_stop_are_dropped() -> None:
    view, env = member(active=["b", "c"])
    view.stop()
    assert sorted(dst for dst, m in env.take_sent() if m == Disconnect(leaving=True)) == [
        "b", "c"]
    view.on_message("b", Join())
    assert view.active_view() == [] and env.drop_reasons()[0] == "stopped"


@pytest.mark.parametrize(
    "raw",
    [
        {"type": "hyparview.forward_join", "new_node": "x", "ttl": -1},
        {"type": "hyparview.forward_join", "new_node": "x", "ttl": 65},
        {"type": "hyparview.forward_join", "new_node": "bad id!", "ttl": 3},
        {"type": "hyparview.forward_join", "new_node": "x"},
        {"type": "hyparview.neighbor", "priority": "urgent"},
        {"type": "hyparview.neighbor", "priority": True},
        {"type": "hyparview.neighbor_reply", "accepted": "yes"},
        {"type": "hyparview.shuffle", "origin": "o", "ttl": 3, "nodes": ["x"] * 129, "nonce": 1},
        {"type": "hyparview.shuffle", "origin": "o", "ttl": 3, "nodes": [""], "nonce": 1},
        {"type": "hyparview.shuffle_reply", "nodes": "abc", "nonce": 1},
        {"type": "hyparview.join", "extra": 1},
    ],
)
def test_malformed_messages_never_reach_the_protocol(raw: dict[str, Any]) -> None:
    import orjson

    with pytest.raises(InvalidMessage):
        CODEC.decode(orjson.dumps(raw))


def test_malformed_message_in_the_simulator_is_dropped_with_a_trace_row() -> None:
    sink = MemorySink()
    sim = Simulation(seed=13, trace=sink)
    sim.add_node("a", lambda env: HyParView(env))
    sim.add_node("b", lambda env: HyParView(env, contacts=["a"]))
    sim.run(until=1.0)
    sim.env("b").send("a", ShuffleReply(nodes=("q",), nonce=42))
    sim.run(until=1.1)
    drops = [r for r in sink.rows if r[4] == "drop" and r[2] == "a"]
    assert drops and "unsolicited" in str(drops[0][11]), "seed=13"


def test_config_is_checked_at_once() -> None:
    with pytest.raises(ConfigError):
        HyParViewConfig(prwl=7, arwl=6)
    with pytest.raises(ConfigError):
        HyParViewConfig(active_size=0)
    with pytest.raises(ConfigError):
        HyParViewConfig(keepalive_timeout=0.5, keepalive_interval=1.0)


# -- any input sequence keeps the views' invariants -----------------------------------------

PEERS = ["a", "b", "c", "d", "e", "f", "g", "h", "i"]  # "a" is the node itself
peer = st.sampled_from(PEERS)
hv_messages = st.one_of(
    st.builds(Join), st.builds(JoinReply), st.builds(Ping),
    st.builds(ForwardJoin, new_node=peer, ttl=st.integers(0, 7)),
    st.builds(Neighbor, priority=st.sampled_from(["high", "low"])),
    st.builds(NeighborReply, accepted=st.booleans()),
    st.builds(Disconnect, leaving=st.booleans()),
    st.builds(Shuffle, origin=peer, ttl=st.integers(0, 7),
              nodes=st.lists(peer, max_size=8).map(tuple), nonce=st.integers(0, 3)),
    st.builds(ShuffleReply, nodes=st.lists(peer, max_size=8).map(tuple),
              nonce=st.integers(0, 3)),
)
steps = st.lists(st.one_of(
    st.tuples(st.just("msg"), peer, hv_messages),
    st.tuples(st.just("down"), peer, st.none()),
    st.tuples(st.just("wait"), st.none(), st.floats(0.0, 3.0)),
), max_size=60)


@settings(max_examples=60, deadline=None)
@given(steps=steps, seed=st.integers(0, 2**16))
@example(steps=[("down", "a", None), ("msg", "b", JoinReply()), ("wait", None, 3.0)], seed=0)
def test_property_any_input_keeps_views_bounded_and_disjoint(
    steps: list[tuple[str, Any, Any]], seed: int
) -> None:
    config = HyParViewConfig(active_size=3, passive_size=4)
    env = FakeEnv("a", seed=seed)
    view = HyParView(env, contacts=["b"], config=config)
    view.start()
    for kind, src, arg in steps:
        if kind == "msg":
            view.on_message(src, arg)
        elif kind == "down":
            view.peer_down(src)
        else:
            env.advance(arg)
        active, passive = view.active_view(), view.passive_view()
        note = f"seed={seed} after {kind} {src} {arg}"
        assert len(active) <= 3 and len(passive) <= 4, note
        assert "a" not in active and "a" not in passive, note
        assert not set(active) & set(passive), note
        assert len(view._pending) + len(active) <= 3 + 1, note  # one forced accept at most
        assert all(dst != "a" for dst, _ in env.sent), note
