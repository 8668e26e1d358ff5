"""``env.multicast`` in every runtime: the simulator's flat groups and router trees, FakeEnv,
and UDP on a loopback IP multicast group with authenticated datagrams."""

from __future__ import annotations

import asyncio
import logging
import random
import socket
import time

import orjson
import pytest

from gossamer.core.env import MAX_DATAGRAM, DatagramTooLarge, Env
from gossamer.core.errors import ConfigError, StateError
from gossamer.core.messages import Codec, Message, message
from gossamer.core.trace import MemorySink
from gossamer.runtimes.net import GroupKey, MulticastEnv, parse_group, resolve_group_key
from gossamer.runtimes.net.loopenv import LoopEnv
from gossamer.runtimes.net.multicast import REPLAY_WINDOW
from gossamer.runtimes.sim import LinkModel, RouterTree, Simulation, TreeLink
from gossamer.runtimes.sim.store import MemoryStore
from gossamer.testing import FakeEnv

CODEC = Codec()


@message("mctest.note", codec=CODEC)
class Note(Message):
    text: str


class Ear:
    """Multicasts on request, records what it hears."""

    def __init__(self, env: object) -> None:
        self.env = env
        self.heard: list[tuple[str, str]] = []

    def start(self) -> None:
        """Nothing to do at start."""

    def stop(self) -> None:
        """Nothing to say at stop."""

    def on_message(self, src: str, msg: Message) -> None:
        assert isinstance(msg, Note)
        self.heard.append((src, msg.text))


def _sim(seed: int, nodes: list[str], *, tree: RouterTree | None = None,
         member_loss: float = 0.0) -> tuple[Simulation, dict[str, Ear]]:
    sim = Simulation(seed=seed, link=LinkModel())
    ears: dict[str, Ear] = {}

    def factory(env: Env) -> Ear:
        ear = Ear(env)
        ears[env.node] = ear
        return ear

    sim.add_nodes(nodes, factory)
    sim.add_multicast_group("g", nodes, tree=tree, member_loss=member_loss)
    return sim, ears


def test_flat_group_reaches_every_other_member_once() -> None:
    nodes = ["a", "b", "c", "d"]
    sim, ears = _sim(1, nodes)
    sim.call("a", lambda p: p.env.multicast("g", Note("hi")))  # type: ignore[attr-defined]
    sim.run()
    assert ears["a"].heard == []
    assert [ears[n].heard for n in "bcd"] == [[("a", "hi")]] * 3


def test_a_lossy_link_near_the_source_drops_for_its_whole_subtree() -> None:
    members = [f"m{i}" for i in range(12)]
    tree = RouterTree.two_level("m0", members, fanout=3, lossy_link_loss=1.0)
    sim, ears = _sim(2, members, tree=tree)
    sim.call("m0", lambda p: p.env.multicast("g", Note("x")))  # type: ignore[attr-defined]
    sim.run()
    behind_r1 = {m for m in members[1:] if any(
        link.b == m and link.a == "r1" for link in tree.links)}
    assert len(behind_r1) == 4
    for member in members[1:]:
        assert (ears[member].heard == []) == (member in behind_r1), member


def test_tree_delay_adds_up_along_the_path() -> None:
    tree = RouterTree([TreeLink("a", "r", 0.01), TreeLink("r", "b", 0.02),
                       TreeLink("r", "c", 0.05)])
    assert tree.spread("a", random.Random(0)) == pytest.approx(
        {"r": 0.01, "b": 0.03, "c": 0.06})


def test_member_loss_is_independent_per_member() -> None:
    members = [f"m{i}" for i in range(200)]
    sim, ears = _sim(3, members, member_loss=0.5)
    sim.call("m0", lambda p: p.env.multicast("g", Note("x")))  # type: ignore[attr-defined]
    sim.run()
    heard = sum(1 for m in members[1:] if ears[m].heard)
    assert 60 < heard < 140, heard


def test_a_tree_that_is_not_a_tree_is_refused() -> None:
    with pytest.raises(ConfigError, match="not a tree"):
        RouterTree([TreeLink("a", "b"), TreeLink("b", "c"), TreeLink("c", "a")])


def test_the_papers_tree_bounds_degree_and_loses_next_to_the_source() -> None:
    members = [f"m{i:02d}" for i in range(30)]

    def tree(seed: int) -> RouterTree:
        return RouterTree.bounded_degree("m00", members, vertices=200, degree=4,
                                         lossy_link_loss=0.5, rng=random.Random(seed))

    built = tree(3)
    assert built.links == tree(3).links  # one rng seed, one tree
    links_of: dict[str, int] = {}
    for link in built.links:
        for vertex in (link.a, link.b):
            links_of[vertex] = links_of.get(vertex, 0) + 1
    assert len(links_of) == 200 and max(links_of.values()) <= 4
    assert set(members) <= built.vertices()
    (lossy,) = [link for link in built.links if link.loss]
    assert "m00" in (lossy.a, lossy.b)  # next to the source
    # everything behind it misses a dropped packet together; the rest still hears it
    spreads = [built.spread("m00", random.Random(seed)) for seed in range(40)]
    dropped = [set(s) for s in spreads if len(s) < 199]
    assert dropped and len(dropped) < len(spreads)
    behind = set(members[1:]) - set().union(*dropped)
    assert 0 < len(behind) < len(members) - 1
    depths = {round(d, 3) for m, d in spreads[0].items() if m in members}
    assert len(depths) > 3  # members at many depths (unlike the two-level tree)
    with pytest.raises(ConfigError):
        RouterTree.bounded_degree("x", members, vertices=200, rng=random.Random(1))
    with pytest.raises(ConfigError):
        RouterTree.bounded_degree("m00", members, vertices=20, rng=random.Random(1))


def test_oversized_datagram_is_refused_everywhere() -> None:
    big = Note("x" * (MAX_DATAGRAM + 1))
    with pytest.raises(DatagramTooLarge):
        FakeEnv("a").multicast("g", big)
    sim, _ = _sim(4, ["a", "b"])
    with pytest.raises(DatagramTooLarge):
        sim.env("a").multicast("g", big)


def test_fake_env_records_multicasts() -> None:
    env = FakeEnv("a")
    env.multicast("g", Note("one"))
    assert env.take_multicast() == [("g", Note("one"))]
    assert env.take_multicast() == []


def test_runtimes_without_multicast_say_so() -> None:
    async def main() -> None:
        env = LoopEnv("a", send=lambda dst, msg: None, store=MemoryStore())
        with pytest.raises(StateError, match="MulticastEnv"):
            env.multicast("g", Note("x"))

    asyncio.run(main())


def test_group_address_and_key_are_checked() -> None:
    assert parse_group("239.1.2.3:5000") == ("239.1.2.3", 5000)
    for bad in ("10.0.0.1:5000", "239.1.2.3", "239.1.2.3:0", "x:1"):
        with pytest.raises(ConfigError):
            parse_group(bad)
    assert resolve_group_key(None, "127.0.0.1", environ={}).builtin
    with pytest.raises(ConfigError, match="group key"):
        resolve_group_key(None, "10.0.0.1", environ={})
    assert resolve_group_key(None, "10.0.0.1", environ={"GOSSAMER_GROUP_KEY": "k" * 16}).secret


def _free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def _wait(condition: object, timeout: float = 5.0) -> None:
    async with asyncio.timeout(timeout):
        while not condition():  # type: ignore[operator]
            await asyncio.sleep(0.005)


def test_loopback_multicast_delivers_and_drops_forgeries(
        caplog: pytest.LogCaptureFixture) -> None:
    group = ("239.255.77.1", _free_udp_port())
    key = GroupKey(b"k" * 16)

    async def main() -> None:
        sinks = {n: MemorySink() for n in ("a", "b", "c")}
        envs = [MulticastEnv(n, group=group, key=key, codec=CODEC, store=MemoryStore(),
                             trace=sinks[n]) for n in ("a", "b", "c")]
        ears: dict[str, Ear] = {}
        for env in envs:
            await env.open(lambda e: ears.setdefault(e.node, Ear(e)))
        try:
            envs[0].multicast(envs[0].group_name, Note("hello"))
            await _wait(lambda: ears["b"].heard and ears["c"].heard)
            assert ears["b"].heard == [("a", "hello")] and ears["c"].heard == [("a", "hello")]
            envs[1].send("a", Note("reply"))  # unicast, to the address a's datagram came from
            await _wait(lambda: ears["a"].heard)
            assert ears["a"].heard == [("b", "reply")]
            # a datagram tagged with another key, and garbage: dropped, nothing delivered
            stranger = MulticastEnv("x", group=group, key=GroupKey(b"z" * 16), codec=CODEC,
                                    store=MemoryStore())
            await stranger.open(Ear)
            stranger.multicast(stranger.group_name, Note("forged"))
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as raw:
                raw.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF,
                               socket.inet_aton("127.0.0.1"))
                raw.sendto(b"G4" + b"\0" * 40, group)
            envs[0].multicast(envs[0].group_name, Note("after"))
            await _wait(lambda: len(ears["b"].heard) == 2)
            assert ears["b"].heard[-1] == ("a", "after")
            assert all(text != "forged" for _, text in ears["b"].heard)
            await _wait(lambda: len([r for r in sinks["b"].named() if r.event == "drop"]) >= 2)
            reasons = {orjson.loads(r.info or "{}")["reason"] for r in sinks["b"].named()
                       if r.event == "drop"}
            assert reasons == {"auth"}  # the raw one fails the tag check too
            # and said at WARNING, once for both (a wrong --group-key is not silent)
            warned = [r for r in caplog.records if r.levelno == logging.WARNING
                      and "fail authentication" in r.getMessage() and "b:" in r.getMessage()]
            assert len(warned) == 1, [r.getMessage() for r in caplog.records]
            stranger.close_group()
        finally:
            for env in envs:
                env.close_group()
        # each life traced as the pipeline reads a process's: a net join, a net leave at the end
        life = [(r.layer, r.event) for r in sinks["b"].named() if r.layer == "net"]
        assert life == [("net", "join"), ("net", "leave")]

    asyncio.run(main())


def test_replays_and_untrusted_envelopes_are_dropped_and_a_restart_is_not_a_replay(
        monkeypatch: pytest.MonkeyPatch) -> None:
    group = ("239.255.77.2", _free_udp_port())
    key = GroupKey(b"k" * 16)

    async def main() -> None:
        sink = MemorySink()
        store_a = MemoryStore()
        a = MulticastEnv("a", group=group, key=key, codec=CODEC, store=store_a)
        b = MulticastEnv("b", group=group, key=key, codec=CODEC, store=MemoryStore(),
                         trace=sink)
        ears: dict[str, Ear] = {}
        for env in (a, b):
            await env.open(lambda e: ears.setdefault(e.node, Ear(e)))

        def reasons() -> list[str]:
            return [orjson.loads(r.info or "{}")["reason"] for r in sink.named()
                    if r.event == "drop"]

        def tagged(envelope: object) -> bytes:  # a holder of the key writing by hand
            body = orjson.dumps(envelope)
            return b"G4" + key.tag(body) + body

        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as raw:
            raw.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF,
                           socket.inet_aton("127.0.0.1"))
            try:
                first, second = a._frame(Note("1")), a._frame(Note("2"))
                old = a._frame(Note("old"))
                for _ in range(REPLAY_WINDOW + 5):
                    a._frame(Note("unsent"))
                raw.sendto(second, group)  # out of order, within the window: both taken
                raw.sendto(first, group)
                await _wait(lambda: len(ears["b"].heard) == 2)
                raw.sendto(first, group)  # the same datagram again: a replay
                a.multicast(a.group_name, Note("3"))
                await _wait(lambda: len(ears["b"].heard) == 3)
                raw.sendto(old, group)  # never heard, but older than the window
                raw.sendto(tagged({"n": "a", "g": a.group_name, "m": {}}), group)
                raw.sendto(tagged({"n": "a", "g": "239.9.9.9:9", "c": 1,
                                   "m": CODEC.to_dict(Note("elsewhere"))}), group)
                a.multicast(a.group_name, Note("4"))
                await _wait(lambda: len(ears["b"].heard) == 4 and len(reasons()) == 4)
                assert [text for _, text in ears["b"].heard] == ["2", "1", "3", "4"]
                assert reasons() == ["replay", "replay", "malformed", "other_group"]
                a.close_group()
                # a restarts on its store with its clock set back an hour: it numbers on from
                # the bound it committed, above every number it used
                now_ns = time.time_ns
                monkeypatch.setattr(time, "time_ns",
                                    lambda: now_ns() - 3600 * 10**9)
                again = MulticastEnv("a", group=group, key=key, codec=CODEC, store=store_a)
                await again.open(lambda e: Ear(e))
                again.multicast(again.group_name, Note("5"))
                await _wait(lambda: len(ears["b"].heard) == 5)
                again.close_group()
            finally:
                a.close_group()
                b.close_group()

    asyncio.run(main())
