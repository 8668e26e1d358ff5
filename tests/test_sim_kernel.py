"""The simulator kernel, network model and scenarios, driven by tiny test protocols.

Messages live on a private ``Codec`` handed to ``Simulation(codec=...)``, so every send still
crosses the wire format without touching the global registry.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gossamer.core import (
    Codec,
    ConfigError,
    Env,
    InvalidMessage,
    LocalError,
    MemorySink,
    Message,
    NullSink,
    StateError,
    TraceRow,
    message,
)
from gossamer.runtimes.sim import (
    Constant,
    Exponential,
    FaultKind,
    Latency,
    LinkModel,
    LogNormal,
    NodeStatus,
    Scenario,
    Simulation,
    SimulationError,
    Uniform,
    parse_latency,
)

codec = Codec()


@message("t.ping", codec=codec)
class Ping(Message):
    n: int


@message("t.pong", codec=codec)
class Pong(Message):
    n: int


@message("t.bye", codec=codec)
class Bye(Message):
    """Goodbye, sent from stop()."""


@message("t.boom", codec=codec)
class Boom(Message):
    """The receiver raises: a ProtocolError for kind "protocol", a plain bug otherwise."""

    kind: str


Hook = Callable[["Node"], None]


class Node:
    """A ping-pong node that records what it receives and which of its timers fired."""

    def __init__(self, env: Env, *, on_start: Hook | None = None, reply: bool = True,
                 goodbye_to: str | None = None) -> None:
        self.env = env
        self.on_start = on_start
        self.reply = reply
        self.goodbye_to = goodbye_to
        self.started_at: float | None = None
        self.stopped = False
        self.received: list[tuple[float, str, Message]] = []
        self.fired: list[tuple[float, object]] = []
        self.seen_store: list[tuple[str, bytes]] | None = None

    def start(self) -> None:
        self.started_at = self.env.now()
        if self.on_start is not None:
            self.on_start(self)

    def on_message(self, src: str, msg: Message) -> None:
        if isinstance(msg, Boom):
            if msg.kind == "protocol":
                raise InvalidMessage("refused on purpose")
            raise RuntimeError("a local bug")
        self.received.append((self.env.now(), src, msg))
        if isinstance(msg, Ping) and self.reply:
            self.env.send(src, Pong(msg.n))

    def stop(self) -> None:
        self.stopped = True
        if self.goodbye_to is not None:
            self.env.send(self.goodbye_to, Bye())

    def after(self, delay: float, label: object) -> object:
        return self.env.set_timer(delay, lambda: self.fired.append((self.env.now(), label)))

    def tick_every(self, period: float) -> None:
        def tick() -> None:
            self.fired.append((self.env.now(), "tick"))
            self.env.set_timer(period, tick)

        self.env.set_timer(period, tick)

    def payloads(self, kind: type[Message] = Ping) -> list[Any]:
        return [getattr(m, "n", None) for _, _, m in self.received if isinstance(m, kind)]


def factory(**kwargs: Any) -> Callable[[Env], Node]:
    return lambda env: Node(env, **kwargs)


def make_sim(nodes: list[str], *, seed: int = 1, link: LinkModel | None = None,
             **kwargs: Any) -> Simulation:
    sim = Simulation(seed=seed, link=link or LinkModel(latency=Constant(0.25)), codec=codec)
    sim.add_nodes(nodes, factory(**kwargs))
    return sim


def node(sim: Simulation, name: str) -> Node:
    process = sim.process(name)
    assert isinstance(process, Node)
    return process


def rows(sim: Simulation) -> list[TraceRow]:
    sink = sim.trace_sink
    assert isinstance(sink, MemorySink)
    return sink.named()


def events(sim: Simulation, event: str) -> list[TraceRow]:
    return [row for row in rows(sim) if row.event == event]


def send_at(sim: Simulation, time: float, src: str, dst: str, msg: Message) -> None:
    sim.schedule(time - sim.now, lambda: sim.env(src).send(dst, msg))


# -- virtual time ------------------------------------------------------------------------------


def test_ping_pong_at_virtual_times() -> None:
    sim = make_sim(["a", "b"], on_start=lambda n: n.env.node == "a" and n.env.send("b", Ping(7)))
    ran = sim.run()
    assert ran == 2
    assert node(sim, "b").received == [(0.25, "a", Ping(7))]
    assert node(sim, "a").received == [(0.5, "b", Pong(7))]
    assert sim.now == 0.5
    assert sim.pending_events == 0
    sends = events(sim, "send")
    assert [(r.t, r.node, r.peer, r.layer) for r in sends] == [(0.0, "a", "b", "t"),
                                                               (0.25, "b", "a", "t")]
    assert sends[0].size == len(codec.encode(Ping(7)))
    assert orjson.loads(sends[0].info or "{}") == {"type": "t.ping"}
    assert [(r.t, r.node, r.peer) for r in events(sim, "recv")] == [(0.25, "b", "a"),
                                                                    (0.5, "a", "b")]


def test_wall_is_the_run_epoch_plus_virtual_time_and_the_same_per_seed() -> None:
    def traced(wall_epoch: float | None) -> list[TraceRow]:
        options = {} if wall_epoch is None else {"wall_epoch": wall_epoch}
        sim = Simulation(seed=3, link=LinkModel(latency=Uniform(0.1, 0.3)), codec=codec,
                         **options)
        sim.add_nodes(["a", "b"], factory(on_start=lambda n: n.env.node == "a"
                                          and n.env.send("b", Ping(1))))
        sim.run()
        sim.crash("b")  # a row of the kernel itself
        sim.trace_storage()  # and its stored rows
        return rows(sim)

    default = traced(None)
    assert {r.event for r in default} >= {"send", "recv", "crash", "stored"}
    assert all(r.wall == r.t for r in default)  # epoch 0: wall is t to the bit
    epoch = 1_700_000_000.0
    dated = traced(epoch)
    assert dated == traced(epoch)  # same seed, same trace
    assert [r._replace(wall=None) for r in dated] == [r._replace(wall=None) for r in default]
    assert all(r.wall == epoch + r.t for r in dated)
    with pytest.raises(ConfigError):
        Simulation(seed=1, wall_epoch=float("nan"))


def test_run_until_stops_at_until_and_resumes() -> None:
    sim = make_sim(["a"], on_start=lambda n: n.after(1.5, "x"))
    assert sim.run(until=1.0) == 0
    assert sim.now == 1.0
    assert node(sim, "a").fired == []
    assert sim.run(until=2.0) == 1
    assert node(sim, "a").fired == [(1.5, "x")]
    assert sim.now == 2.0
    assert sim.run(until=5.0) == 0  # empty heap: time still advances to until
    assert sim.now == 5.0


def test_run_until_includes_events_at_until() -> None:
    sim = make_sim(["a"], on_start=lambda n: n.after(1.0, "edge"))
    sim.run(until=1.0)
    assert node(sim, "a").fired == [(1.0, "edge")]
    assert sim.now == 1.0


def test_run_without_until_ends_at_last_event() -> None:
    sim = make_sim(["a"], on_start=lambda n: (n.after(0.5, "p"), n.after(3.25, "q")))
    sim.run()
    assert sim.now == 3.25
    assert [t for t, _ in node(sim, "a").fired] == [0.5, 3.25]


def test_max_events_and_stop_when_leave_time_at_last_event() -> None:
    sim = make_sim(["a"], on_start=lambda n: n.tick_every(1.0))
    assert sim.run(until=100.0, max_events=3) == 3
    assert sim.now == 3.0
    ticks = node(sim, "a").fired
    assert sim.run(until=100.0, stop_when=lambda: len(ticks) >= 5) == 2
    assert sim.now == 5.0
    assert sim.events == 5


def test_timers_fire_in_time_order_ties_in_scheduling_order() -> None:
    delays = [3.0, 1.0, 2.0, 1.0, 1.0, 0.0, 2.0]

    def arm(n: Node) -> None:
        for label, delay in enumerate(delays):
            n.after(delay, label)

    sim = make_sim(["a"], on_start=arm)
    sim.run()
    fired = node(sim, "a").fired
    expected = sorted(range(len(delays)), key=lambda i: (delays[i], i))
    assert [label for _, label in fired] == expected
    assert [t for t, _ in fired] == sorted(delays)


def test_timer_set_in_a_callback_runs_after_ties_already_scheduled() -> None:
    def arm(n: Node) -> None:
        n.env.set_timer(1.0, lambda: (n.fired.append((n.env.now(), "first")),
                                      n.after(0.0, "nested")))
        n.after(1.0, "second")

    sim = make_sim(["a"], on_start=arm)
    sim.run()
    assert node(sim, "a").fired == [(1.0, "first"), (1.0, "second"), (1.0, "nested")]


def test_cancel() -> None:
    handles: dict[str, object] = {}

    def arm(n: Node) -> None:
        for label in ["keep1", "drop", "keep2"]:
            handles[label] = n.after(1.0, label)
        handles["late"] = n.after(2.0, "late")

    sim = make_sim(["a"], on_start=arm)
    a = node(sim, "a")
    a.env.cancel(handles["drop"])
    sim.run(until=1.5)
    assert a.fired == [(1.0, "keep1"), (1.0, "keep2")]
    a.env.cancel(handles["keep1"])  # cancelling a fired timer is harmless
    a.env.cancel(handles["late"])
    sim.run()
    assert a.fired == [(1.0, "keep1"), (1.0, "keep2")]


def test_negative_delays_are_refused() -> None:
    sim = make_sim(["a"])
    with pytest.raises(ConfigError):
        sim.env("a").set_timer(-1.0, lambda: None)
    with pytest.raises(ConfigError):
        sim.schedule(-0.5, lambda: None)


# -- latency distributions -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("latency", "low", "high"),
    [
        (Constant(0.03), 0.03, 0.03),
        (Uniform(0.01, 0.05), 0.01, 0.05),
        (Exponential(0.02, 0.005), 0.005, float("inf")),
        (LogNormal(0.02, 0.5), 0.0, float("inf")),
        (parse_latency("const:0.01"), 0.01, 0.01),
        (parse_latency("uniform:0.005,0.05"), 0.005, 0.05),
        (parse_latency("exp:0.02"), 0.0, float("inf")),
        (parse_latency("lognormal:0.02,0.5"), 0.0, float("inf")),
    ],
    ids=repr,
)
def test_latency_support_and_mean(latency: Latency, low: float, high: float) -> None:
    rng = random.Random(11)
    draws = [latency.sample(rng) for _ in range(20_000)]
    assert all(low <= d <= high for d in draws)
    if low > 0:
        assert min(draws) >= low
    assert sum(draws) / len(draws) == pytest.approx(latency.mean, rel=0.03)


def test_latency_means() -> None:
    assert Constant(0.2).mean == 0.2
    assert Uniform(0.1, 0.3).mean == pytest.approx(0.2)
    assert Exponential(0.02, 0.01).mean == pytest.approx(0.03)
    assert LogNormal(0.02, 0.0).mean == pytest.approx(0.02)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("const:0.01", Constant(0.01)),
        ("constant:0.5", Constant(0.5)),
        ("uniform:0.005,0.05", Uniform(0.005, 0.05)),
        ("exp:0.02", Exponential(0.02)),
        ("exponential:0.02,0.001", Exponential(0.02, 0.001)),
        ("lognormal:0.02,0.5", LogNormal(0.02, 0.5)),
        ("uniform", Uniform()),
    ],
)
def test_parse_latency(text: str, expected: Latency) -> None:
    assert parse_latency(text) == expected


@pytest.mark.parametrize(
    "text",
    ["", "gauss:1", "const:x", "const:-1", "uniform:0.05,0.01", "uniform:1,2,3", "exp:0",
     "lognormal:0,1", "lognormal:1,-1"],
)
def test_parse_latency_rejects(text: str) -> None:
    with pytest.raises(ConfigError):
        parse_latency(text)


@pytest.mark.parametrize(
    "kwargs",
    [{"loss": -0.1}, {"loss": 1.5}, {"duplicate": 2.0}, {"reorder": -1.0},
     {"reorder_delay": -0.1}],
)
def test_link_model_rejects(kwargs: dict[str, float]) -> None:
    with pytest.raises(ConfigError):
        LinkModel(**kwargs)


# -- loss, duplication, reordering ---------------------------------------------------------


def blast(link: LinkModel, count: int, *, spacing: float = 0.0, seed: int = 5) -> Simulation:
    """``a`` sends ``Ping(0..count-1)`` to ``b`` (no replies)."""

    def send_all(n: Node) -> None:
        if n.env.node != "a":
            return
        for i in range(count):
            if spacing:
                n.env.set_timer(i * spacing, lambda i=i: n.env.send("b", Ping(i)))
            else:
                n.env.send("b", Ping(i))

    sim = make_sim(["a", "b"], seed=seed, link=link, on_start=send_all, reply=False)
    sim.run()
    return sim


def test_loss_one_delivers_nothing() -> None:
    sim = blast(LinkModel(loss=1.0), 200)
    assert node(sim, "b").received == []
    assert len(events(sim, "send")) == 200
    assert events(sim, "recv") == []


def test_loss_zero_delivers_everything_once() -> None:
    sim = blast(LinkModel(loss=0.0, latency=Uniform(0.01, 0.2)), 200)
    assert sorted(node(sim, "b").payloads()) == list(range(200))


def test_partial_loss_rate() -> None:
    sim = blast(LinkModel(loss=0.3), 2000)
    delivered = len(node(sim, "b").received)
    assert 0.25 * 2000 < 2000 - delivered < 0.35 * 2000


def test_duplicate_one_delivers_every_message_twice() -> None:
    sim = blast(LinkModel(duplicate=1.0, latency=Uniform(0.01, 0.1)), 100)
    got = node(sim, "b").payloads()
    assert sorted(got) == sorted(list(range(100)) * 2)
    assert len(events(sim, "send")) == 100
    assert len(events(sim, "recv")) == 200


def test_reorder_lets_later_messages_overtake() -> None:
    link = LinkModel(latency=Constant(0.01), reorder=0.3, reorder_delay=0.5)
    sim = blast(link, 100, spacing=0.01)
    got = node(sim, "b").payloads()
    assert sorted(got) == list(range(100))
    assert got != sorted(got)
    overtaken = sum(1 for i in range(len(got) - 1) if got[i] > got[i + 1])
    assert overtaken >= 5


@pytest.mark.parametrize("spacing", [0.0, 0.003])
def test_no_reorder_with_constant_latency_keeps_order(spacing: float) -> None:
    sim = blast(LinkModel(latency=Constant(0.01), reorder=0.0), 100, spacing=spacing)
    assert node(sim, "b").payloads() == list(range(100))


def test_per_link_models() -> None:
    sim = make_sim(["a", "b", "c"], reply=False)
    sim.network.set_link("a", "b", LinkModel(loss=1.0))
    sim.network.set_link("a", "c", LinkModel(latency=Constant(2.0)), both=False)
    for dst in ["b", "c"]:
        sim.env("a").send(dst, Ping(1))
        sim.env(dst).send("a", Ping(2))
    sim.run()
    assert node(sim, "b").received == []
    assert node(sim, "c").received == [(2.0, "a", Ping(1))]
    assert node(sim, "a").received == [(0.25, "c", Ping(2))]  # b -> a is lossy too


# -- partitions ------------------------------------------------------------------------------


NAMES = ["a", "b", "c", "d", "e"]


def all_to_all(sim: Simulation, time: float, n: int) -> None:
    for src in NAMES:
        for dst in NAMES:
            if src != dst:
                send_at(sim, time, src, dst, Ping(n))


def pairs_received(sim: Simulation, n: int) -> set[tuple[str, str]]:
    return {(src, dst) for dst in NAMES for _, src, msg in node(sim, dst).received
            if msg == Ping(n)}


def test_partition_blocks_both_ways_and_heal_restores() -> None:
    sim = make_sim(NAMES, reply=False)
    sim.partition([["a", "b"], ["c"]])  # d and e are unlisted: one more group
    all_to_all(sim, 0.0, 1)
    sim.schedule(1.0, sim.heal)
    all_to_all(sim, 2.0, 2)
    sim.run()
    groups = [{"a", "b"}, {"c"}, {"d", "e"}]
    same_group = {(s, d) for g in groups for s in g for d in g if s != d}
    assert pairs_received(sim, 1) == same_group
    assert ("a", "c") not in same_group and ("c", "a") not in same_group
    every_pair = {(s, d) for s in NAMES for d in NAMES if s != d}
    assert pairs_received(sim, 2) == every_pair
    assert [r.event for r in rows(sim) if r.node == "sim"] == ["partition", "heal"]


def test_partition_drops_messages_already_in_flight() -> None:
    sim = make_sim(["a", "b"], reply=False)
    sim.env("a").send("b", Ping(1))
    sim.schedule(0.1, sim.partition, [["a"], ["b"]])
    sim.schedule(0.5, sim.heal)
    sim.run()
    assert node(sim, "b").received == []


def test_partition_node_in_two_groups_is_refused() -> None:
    sim = make_sim(["a", "b"])
    with pytest.raises(ConfigError):
        sim.partition([["a"], ["a", "b"]])


# -- crashes, recovery, leave, join -----------------------------------------------------------


def test_crash_stops_timers_and_recover_builds_a_new_process() -> None:
    sim = make_sim(["a"], on_start=lambda n: n.tick_every(1.0))
    old = node(sim, "a")
    sim.schedule(2.5, sim.crash, "a")
    sim.run(until=3.0)
    assert [t for t, _ in old.fired] == [1.0, 2.0]
    assert sim.status("a") is NodeStatus.CRASHED
    assert sim.alive() == []
    sim.recover("a")
    new = node(sim, "a")
    assert new is not old
    assert new.started_at == 3.0
    sim.run(until=5.5)
    assert [t for t, _ in old.fired] == [1.0, 2.0]
    assert [t for t, _ in new.fired] == [4.0, 5.0]
    assert [(r.t, r.event) for r in rows(sim) if r.layer == "sim"] == [(2.5, "crash"),
                                                                      (3.0, "recover")]


def test_recovered_incarnation_gets_fresh_env_and_rng() -> None:
    sim = make_sim(["a"])
    first_env = sim.env("a")
    first_draws = [first_env.rng.random() for _ in range(3)]
    sim.crash("a")
    with pytest.raises(StateError):
        sim.env("a")
    sim.recover("a")
    second_env = sim.env("a")
    assert second_env is not first_env
    assert second_env.incarnation == first_env.incarnation + 1
    assert [second_env.rng.random() for _ in range(3)] != first_draws
    first_env.send("a", Ping(1))  # a dead env sends nothing
    sim.run()
    assert node(sim, "a").received == []


def test_message_in_flight_to_crashed_node_is_dropped() -> None:
    sim = make_sim(["a", "b"], link=LinkModel(latency=Constant(1.0)))
    sim.env("a").send("b", Ping(1))
    sim.schedule(0.5, sim.crash, "b")
    sim.run()
    assert sim.status("b") is NodeStatus.CRASHED
    assert [r for r in events(sim, "recv") if r.node == "b"] == []
    assert node(sim, "a").received == []


def test_message_in_flight_at_crash_does_not_reach_the_recovered_incarnation() -> None:
    # the crash voids in-flight deliveries (kernel docstring), even if b is back before arrival
    sim = make_sim(["a", "b"], link=LinkModel(latency=Constant(1.0)))
    sim.env("a").send("b", Ping(1))
    sim.schedule(0.5, lambda: sim.crash("b", recover_after=0.2))
    sim.run()
    assert sim.status("b") is NodeStatus.UP
    assert node(sim, "b").started_at == pytest.approx(0.7)
    assert node(sim, "b").received == []


class Refused(Node):
    def __init__(self, env: Env) -> None:
        super().__init__(env)
        self.unreachable: list[tuple[float, str]] = []

    def on_unreachable(self, dst: str) -> None:
        self.unreachable.append((self.env.now(), dst))


def refusing_sim(*, refused: bool) -> Simulation:
    sim = Simulation(seed=1, link=LinkModel(latency=Constant(1.0)), codec=codec,
                     connection_refused=refused)
    sim.add_nodes(["a", "b", "c", "d"], Refused)
    return sim


def refused_at(sim: Simulation, name: str) -> list[tuple[float, str]]:
    process = sim.process(name)
    assert isinstance(process, Refused)
    return process.unreachable


def test_connection_refused_tells_the_sender_one_link_delay_later() -> None:
    sim = refusing_sim(refused=True)
    sim.crash("b")
    sim.env("a").send("b", Ping(1))  # b already down
    sim.env("c").send("d", Ping(2))  # d crashes while it is in flight
    sim.schedule(0.5, sim.crash, "d")
    sim.env("a").send("c", Ping(3))  # delivered: nothing to report
    sim.run()
    assert refused_at(sim, "a") == [(2.0, "b")]
    assert refused_at(sim, "c") == [(2.0, "d")]


def test_no_refusal_without_the_option_across_a_partition_or_to_a_dead_sender() -> None:
    quiet = refusing_sim(refused=False)
    quiet.crash("b")
    quiet.env("a").send("b", Ping(1))
    quiet.run()
    assert refused_at(quiet, "a") == []
    cut = refusing_sim(refused=True)
    cut.network.partition([["a"], ["b", "c", "d"]])
    cut.crash("b")
    cut.env("a").send("b", Ping(1))  # a cut cable says nothing
    cut.env("c").send("b", Ping(2))
    cut.schedule(1.5, cut.crash, "c")  # c crashes before the refusal comes back
    cut.run()
    assert refused_at(cut, "a") == []
    assert cut.status("c") is NodeStatus.CRASHED


def test_messages_sent_after_recovery_are_delivered() -> None:
    sim = make_sim(["a", "b"])
    sim.schedule(0.5, lambda: sim.crash("b", recover_after=0.2))
    send_at(sim, 1.0, "a", "b", Ping(3))
    sim.run()
    assert node(sim, "b").received == [(1.25, "a", Ping(3))]
    assert node(sim, "a").received == [(1.5, "b", Pong(3))]


def boot_with_store(n: Node) -> None:
    store = n.env.store
    if store.get("t", "booted") is None:
        store.put("t", "booted", b"1")
        store.put("t", "committed", b"yes")
        store.commit()
        store.put("t", "uncommitted", b"lost")
        store.delete("t", "booted")  # an uncommitted delete is lost too
    n.seen_store = list(store.scan("t"))


def test_crash_loses_uncommitted_writes_and_keeps_committed() -> None:
    sim = make_sim(["a"], on_start=boot_with_store)
    assert node(sim, "a").seen_store == [("committed", b"yes"), ("uncommitted", b"lost")]
    assert sim.store("a").uncommitted == 2
    sim.crash("a", recover_after=1.0)
    assert sim.store("a").uncommitted == 0
    sim.run()
    assert sim.status("a") is NodeStatus.UP
    assert node(sim, "a").seen_store == [("booted", b"1"), ("committed", b"yes")]


def test_crash_stop_keeps_the_node_down() -> None:
    sim = make_sim(["a", "b"], on_start=lambda n: n.tick_every(1.0))
    old = node(sim, "b")
    sim.schedule(1.5, sim.crash, "b")
    send_at(sim, 3.0, "a", "b", Ping(1))
    sim.run(until=20.0)
    assert sim.status("b") is NodeStatus.CRASHED
    assert sim.alive() == ["a"]
    assert [t for t, _ in old.fired] == [1.0]
    assert old.received == []
    assert node(sim, "a").received == []
    with pytest.raises(StateError):
        sim.process("b")
    with pytest.raises(StateError):
        sim.crash("b")
    with pytest.raises(StateError):
        sim.leave("b")


def test_recover_of_a_node_that_is_up_is_refused() -> None:
    sim = make_sim(["a"])
    with pytest.raises(StateError):
        sim.recover("a")
    with pytest.raises(ConfigError):
        sim.crash("nobody")


def test_leave_calls_stop_and_the_node_is_gone() -> None:
    sim = make_sim(["a", "b"], goodbye_to="b", on_start=lambda n: n.tick_every(1.0))
    a = node(sim, "a")
    sim.schedule(1.5, sim.leave, "a")
    send_at(sim, 2.0, "b", "a", Ping(1))
    sim.run(until=5.0)
    assert a.stopped
    assert not node(sim, "b").stopped
    assert sim.status("a") is NodeStatus.LEFT
    assert [t for t, _ in a.fired] == [1.0]
    assert a.received == []
    assert node(sim, "b").received == [(1.75, "a", Bye())]  # the goodbye sent in stop()
    leave_rows = [r for r in rows(sim) if r.event == "leave"]
    assert [(r.t, r.node) for r in leave_rows] == [(1.5, "a")]
    with pytest.raises(StateError):
        sim.recover("a")


def test_join_starts_the_node_at_its_time() -> None:
    scenario = Scenario(seed=3, nodes=["a"], link=LinkModel(latency=Constant(0.25)))
    scenario.join(2.5, "j")
    sim = scenario.build(factory(on_start=lambda n: n.env.send("a", Ping(9))), codec=codec)
    assert sim.status("j") is NodeStatus.PENDING
    with pytest.raises(StateError):
        sim.process("j")
    sim.run(until=2.0)
    assert sim.status("j") is NodeStatus.PENDING
    sim.run()
    assert node(sim, "j").started_at == 2.5
    assert node(sim, "j").received == [(3.0, "a", Pong(9))]
    assert [(r.t, r.node) for r in events(sim, "join")] == [(2.5, "j")]


def test_add_node_at_a_later_time() -> None:
    sim = make_sim(["a"])
    sim.add_node("late", factory(), at=4.0)
    with pytest.raises(ConfigError):
        sim.add_node("late", factory())
    sim.run()
    assert node(sim, "late").started_at == 4.0
    assert sim.nodes() == ["a", "late"]


# -- errors ------------------------------------------------------------------------------------


def test_protocol_error_becomes_a_drop_row_and_the_node_keeps_running() -> None:
    sim = make_sim(["a", "b"], on_start=lambda n: n.tick_every(1.0))
    send_at(sim, 0.5, "a", "b", Boom("protocol"))
    send_at(sim, 1.5, "a", "b", Ping(4))
    sim.run(until=3.0)
    b = node(sim, "b")
    assert b.received == [(1.75, "a", Ping(4))]
    assert node(sim, "a").received == [(2.0, "b", Pong(4))]
    assert [t for t, _ in b.fired] == [1.0, 2.0, 3.0]
    drops = events(sim, "drop")
    assert len(drops) == 1
    drop = drops[0]
    assert (drop.t, drop.node, drop.layer, drop.peer) == (0.75, "b", "t", "a")
    info = orjson.loads(drop.info or "{}")
    assert info["reason"] == "invalid"
    assert "refused on purpose" in info["error"]


def test_other_exceptions_become_simulation_error_with_the_seed() -> None:
    sim = make_sim(["a", "b"], seed=4242)
    send_at(sim, 0.5, "a", "b", Boom("bug"))
    with pytest.raises(SimulationError) as info:
        sim.run()
    text = str(info.value)
    assert "seed=4242" in text
    assert "node b" in text
    assert "RuntimeError" in text
    assert isinstance(info.value, LocalError)
    assert isinstance(info.value.__cause__, RuntimeError)


def test_exception_in_a_timer_becomes_simulation_error() -> None:
    def arm(n: Node) -> None:
        n.env.set_timer(1.0, lambda: 1 / 0)  # type: ignore[arg-type, func-returns-value]

    sim = make_sim(["a"], seed=77, on_start=arm)
    with pytest.raises(SimulationError, match=r"seed=77") as info:
        sim.run()
    assert "ZeroDivisionError" in str(info.value)
    assert "t=1.000000" in str(info.value)


def test_exception_in_start_becomes_simulation_error() -> None:
    def broken(n: Node) -> None:
        raise KeyError("missing")

    sim = Simulation(seed=9, codec=codec)
    with pytest.raises(SimulationError, match="seed=9"):
        sim.add_node("a", factory(on_start=broken))


# -- scenarios -------------------------------------------------------------------------------


def churn_faults(seed: int, **kwargs: Any) -> list[tuple[float, FaultKind, str | None]]:
    scenario = Scenario.of(12, seed=seed)
    scenario.churn(**{"start": 1.0, "end": 20.0, "rate": 2.0, "downtime": 1.5, **kwargs})
    return [(f.at, f.kind, f.node) for f in scenario.faults]


def test_churn_is_deterministic_for_a_seed() -> None:
    first = churn_faults(5)
    assert first == churn_faults(5)
    assert first != churn_faults(6)
    crashes = [f for f in first if f[1] is FaultKind.CRASH]
    assert len(crashes) > 10  # about rate * (end - start) = 38
    assert all(1.0 <= at < 20.0 for at, _, _ in crashes)
    assert len(first) == 2 * len(crashes)


@given(
    seed=st.integers(0, 10_000),
    rate=st.floats(0.5, 20.0),
    downtime=st.floats(0.01, 5.0),
    pool_size=st.integers(1, 4),
)
def test_churn_never_crashes_a_node_that_is_down(seed: int, rate: float, downtime: float,
                                                 pool_size: int) -> None:
    scenario = Scenario.of(6, seed=seed)
    pool = scenario.nodes[:pool_size]
    scenario.churn(start=0.5, end=10.0, rate=rate, downtime=downtime, pool=pool)
    down: set[str] = set()
    ordered = sorted(enumerate(scenario.faults), key=lambda item: (item[1].at, item[0]))
    for _, fault in ordered:
        assert fault.node in pool
        if fault.kind is FaultKind.CRASH:
            assert fault.node not in down
            down.add(fault.node)
        else:
            assert fault.kind is FaultKind.RECOVER
            assert fault.node in down
            down.remove(fault.node)
    # and the kernel, which refuses to crash a down node, agrees
    sim = scenario.build(factory(), codec=codec, trace_messages=False)
    sim.run()
    assert sorted(sim.alive()) == scenario.nodes


def test_churn_bad_args() -> None:
    scenario = Scenario.of(3)
    for kwargs in [{"end": 1.0}, {"rate": 0.0}, {"downtime": 0.0}]:
        with pytest.raises(ConfigError):
            scenario.churn(**{"start": 1.0, "end": 5.0, "rate": 1.0, "downtime": 1.0, **kwargs})


@pytest.mark.parametrize(("count", "fraction", "expected"),
                         [(10, 0.3, 3), (20, 0.25, 5), (7, 0.0, 0), (7, 1.0, 7), (100, 0.1, 10)])
def test_crash_fraction_count(count: int, fraction: float, expected: int) -> None:
    scenario = Scenario.of(count, seed=8)
    victims = scenario.crash_fraction(1.0, fraction)
    assert len(victims) == expected
    assert len(set(victims)) == expected
    assert set(victims) <= set(scenario.nodes)
    assert victims == sorted(victims)
    assert [(f.at, f.kind, f.node) for f in scenario.faults] == [
        (1.0, FaultKind.CRASH, v) for v in victims
    ]


def test_crash_fraction_is_seeded_and_runs() -> None:
    first = Scenario.of(30, seed=2).crash_fraction(1.0, 0.2, recover_after=2.0)
    assert first == Scenario.of(30, seed=2).crash_fraction(1.0, 0.2)
    assert first != Scenario.of(30, seed=3).crash_fraction(1.0, 0.2)
    scenario = Scenario.of(30, seed=2)
    scenario.crash_fraction(1.0, 0.2, recover_after=2.0)
    sim = scenario.build(factory(), codec=codec)
    sim.run(until=2.0)
    assert len(sim.alive()) == 24
    assert sorted(set(scenario.nodes) - set(sim.alive())) == first
    sim.run()
    assert len(sim.alive()) == 30
    with pytest.raises(ConfigError):
        scenario.crash_fraction(1.0, 1.5)


def test_scenario_faults_and_actions_run_in_order() -> None:
    scenario = Scenario.of(3, seed=1, link=LinkModel(latency=Constant(0.25)))
    a, b, c = scenario.nodes
    scenario.partition(1.0, [[a], [b, c]], heal_at=3.0)
    scenario.crash(2.0, c, recover_after=0.5)
    scenario.leave(4.0, b)
    scenario.at(1.5, lambda sim: sim.env(a).send(b, Ping(1)))
    scenario.at(3.5, lambda sim: sim.env(a).send(b, Ping(2)))
    sim = scenario.build(factory(), codec=codec)
    sim.run(until=3.9)
    assert node(sim, b).payloads() == [2]  # the first ping crossed the partition: dropped
    sim.run()
    sim_rows = [(r.t, r.node, r.event) for r in rows(sim) if r.layer == "sim"]
    assert sim_rows == [(1.0, "sim", "partition"), (2.0, c, "crash"), (2.5, c, "recover"),
                        (3.0, "sim", "heal"), (4.0, b, "leave")]
    assert sim.status(b) is NodeStatus.LEFT


def test_leave_then_rejoin_runs_a_fresh_process_on_the_kept_store() -> None:
    sim = make_sim(["a", "b"])
    first = node(sim, "a")
    sim.store("a").put("t", "k", b"v")
    sim.store("a").commit()
    sim.leave("a")
    assert sim.status("a") is NodeStatus.LEFT
    sim.rejoin("a")
    assert sim.status("a") is NodeStatus.UP
    assert node(sim, "a") is not first
    assert sim.store("a").get("t", "k") == b"v"
    with pytest.raises(StateError):
        sim.rejoin("b")  # b never left


def test_churn_with_leaves_rejoins_every_node_and_is_deterministic() -> None:
    def build(seed: int) -> tuple[Simulation, list[tuple[float, str, str | None]]]:
        scenario = Scenario.of(12, seed=seed)
        scenario.churn(start=1.0, end=5.0, rate=3.0, downtime=0.5, leave=True)
        sim = scenario.build(lambda env: Node(env), codec=codec)
        sim.run(until=10.0)
        churn = [(r.t, r.event, r.node) for r in rows(sim) if r.event in ("leave", "join")]
        return sim, churn

    sim, churn = build(3)
    leaves = [r for r in churn if r[1] == "leave"]
    joins = [r for r in churn if r[1] == "join"]
    assert leaves and len(leaves) == len(joins)
    assert all(sim.status(n) is NodeStatus.UP for n in sim.nodes())
    assert build(3)[1] == churn


# -- what nodes store --------------------------------------------------------------------------


def test_trace_storage_writes_one_stored_row_per_started_node() -> None:
    sim = make_sim(["a", "b", "c"], on_start=boot_with_store)
    sim.add_node("late", factory(), at=10.0)  # not started yet: no row
    sim.crash("c")  # down, but its committed store is still there
    sim.run(until=2.0)
    assert sim.trace_storage() == 3
    stored = {row.node: row for row in events(sim, "stored")}
    assert sorted(stored) == ["a", "b", "c"]
    for name, row in stored.items():
        store = sim.store(name)
        assert (row.t, row.layer, row.size) == (2.0, "store", store.size)
        assert orjson.loads(row.info or "{}") == {"items": store.items}
    # a sees its uncommitted writes too (booted deleted, uncommitted added); c, crashed, kept
    # only what it committed (booted, committed)
    assert stored["a"].size == stored["b"].size == 29  # t+committed+yes, t+uncommitted+lost
    assert stored["c"].size == 21  # t+booted+1, t+committed+yes
    assert orjson.loads(stored["c"].info or "{}") == {"items": 2}


def test_trace_storage_of_a_node_without_a_store_is_zero() -> None:
    sim = make_sim(["a"])
    sim.trace_storage()
    [row] = events(sim, "stored")
    assert (row.node, row.size, row.info) == ("a", 0, '{"items":0}')


def test_trace_storage_writes_nothing_when_not_tracing() -> None:
    sim = Simulation(seed=1, trace=NullSink(), codec=codec)
    sim.add_nodes(["a"], factory())
    assert sim.trace_storage() == 0
