"""Load without loss (issue 18, point 8): a burst of publishes written at once to a node's
command port over loopback, in scribe and in gossip mode. Every publish is answered once;
every one answered ``ok`` is delivered exactly once at every subscriber; one refused is an
error the publisher sees. Nodes run in this process (real TCP on 127.0.0.1, ephemeral ports);
every wait is on an event with a timeout.
"""

from __future__ import annotations

import asyncio
import collections
import io
import json
import os
import threading
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from gossamer.core import Conn, Env, ListenerSpec, MemorySink
from gossamer.protocols.dissemination.gossip import GossipConfig, GossipData
from gossamer.protocols.dissemination.scribe import PublishResult, ScribeConfig, TreeRole
from gossamer.protocols.dissemination.scribe.messages import ScribeData
from gossamer.protocols.ordering import DeferredOrderer
from gossamer.runtimes.sim import LinkModel, Simulation, Uniform
from gossamer.services.pubsub.client import run_client
from gossamer.services.pubsub.commands import COMMANDS_LISTENER, CommandPort, NodeProcess
from gossamer.services.pubsub.net import NodeOptions, Output, PubSubNetNode
from gossamer.services.pubsub.node import Overloaded, PubSubNode
from gossamer.testing import FakeEnv

WAIT = 60.0  # an upper bound only: every wait ends when its event comes
TOPIC = "load"
BURST = 5000


class Subscriber:
    """A node's deliveries of ``TOPIC``, counted per message."""

    def __init__(self) -> None:
        self.counts: collections.Counter[str] = collections.Counter()
        self.changed = asyncio.Event()

    def __call__(self, topic: str, message: Any) -> None:
        if topic == TOPIC:
            self.counts[str(message)] += 1
            self.changed.set()


async def wait_for(predicate: Callable[[], bool], event: asyncio.Event, what: str) -> None:
    async def loop() -> None:
        while not predicate():
            event.clear()
            await event.wait()

    try:
        await asyncio.wait_for(loop(), WAIT)
    except TimeoutError:
        raise AssertionError(f"timed out waiting for {what}") from None


async def overlay(mode: str, subscribers: int,
                  publisher_options: dict[str, Any] | None = None,
                  ) -> tuple[PubSubNetNode, list[PubSubNetNode], list[Subscriber]]:
    """A publisher with a command port and ``subscribers`` nodes subscribed to ``TOPIC``,
    probed until a publish reaches them all."""
    publisher = PubSubNetNode(NodeOptions(mode=mode, command_port=0, seed=1,  # type: ignore[arg-type]
                                          **(publisher_options or {})))
    contact = await publisher.start()
    heard = [Subscriber() for _ in range(subscribers)]
    nodes = [PubSubNetNode(NodeOptions(mode=mode, contacts=(contact,), seed=2 + i),  # type: ignore[arg-type]
                           on_message=heard[i]) for i in range(subscribers)]
    for node in nodes:
        await node.start()
    for node in [publisher, *nodes]:
        assert await node.wait_joined(WAIT), f"{node.node_id} never joined"
    for node in nodes:
        node.subscribe(TOPIC)
    probe = 0
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT
    while True:
        probe += 1
        text = f"probe-{probe}"
        publisher.publish(TOPIC, text)
        try:
            for sub in heard:
                await asyncio.wait_for(
                    wait_for(lambda s=sub, t=text: s.counts[t] > 0, sub.changed, text), 1.0)
            break
        except (TimeoutError, AssertionError):
            if loop.time() > deadline:
                raise AssertionError("no probe reached every subscriber") from None
    return publisher, nodes, heard


async def burst(mode: str, *, subscribers: int = 2, count: int = BURST,
                publisher_options: dict[str, Any] | None = None,
                check: Callable[[list[dict[str, Any]], list[Subscriber]], Awaitable[None]]
                | None = None) -> tuple[list[dict[str, Any]], list[Subscriber]]:
    """``count`` publish lines written at once to the publisher's command port; returns every
    answer and what each subscriber delivered once the answers are in and deliveries settled."""
    publisher, nodes, heard = await overlay(mode, subscribers, publisher_options)
    try:
        address = publisher.command_address
        assert address is not None
        reader, writer = await asyncio.open_connection(*address, limit=1 << 20)
        try:
            greeting = json.loads(await asyncio.wait_for(reader.readline(), WAIT))
            assert greeting["event"] == "ready"
            writer.write(b"".join(f"publish {TOPIC} m{i}\n".encode() for i in range(count)))
            await writer.drain()
            answers: list[dict[str, Any]] = []
            while len(answers) < count:
                line = await asyncio.wait_for(reader.readline(), WAIT)
                assert line, f"the node closed the command connection after {len(answers)}"
                answers.append(json.loads(line))
        finally:
            writer.close()
        accepted = {a["msg"] for a in answers if a["event"] == "publish"}
        assert len(accepted) == sum(a["event"] == "publish" for a in answers)
        expected = sum(1 for a in answers if a["event"] == "publish")
        for sub in heard:  # every accepted message arrives (at most WAIT seconds)
            await wait_for(lambda s=sub: sum(
                n for m, n in s.counts.items() if m.startswith("m")) >= expected,
                sub.changed, f"{expected} deliveries")
        if check is not None:
            await check(answers, heard)
        return answers, heard
    finally:
        for node in [publisher, *nodes]:
            await node.stop()


def delivered_exactly_once(answers: list[dict[str, Any]], heard: list[Subscriber]) -> None:
    """Every publish has one answer; every ``ok`` one is delivered once at every subscriber,
    and nothing else is."""
    ok = [a for a in answers if a["event"] == "publish"]
    refused = [a for a in answers if a["event"] == "error"]
    assert len(ok) + len(refused) == len(answers), answers[:3]
    texts = collections.Counter()  # type: collections.Counter[str]
    for sub in heard:
        got = {m: n for m, n in sub.counts.items() if m.startswith("m")}
        assert all(n == 1 for n in got.values()), "a message delivered twice"
        texts.update(got)
    for sub in heard:
        got = {m for m in sub.counts if m.startswith("m")}
        assert len(got) == len(ok), (len(got), len(ok), len(refused))


@pytest.mark.parametrize("mode", [
    # slow: three nodes in this process on a loaded machine (the fast lane's workers) can
    # starve a Scribe tree's heartbeats mid-burst; it churns and loses what a replaced stream
    # had not repaired (docs/pubsub.md, Limits): the full lane runs it
    pytest.param("scribe", marks=pytest.mark.slow), "gossip"])
def test_a_burst_of_publishes_is_accepted_and_delivered_exactly_once(mode: str) -> None:
    """5,000 publish lines at once: all accepted (the bound makes them wait, not fail) and
    every one delivered exactly once at every subscriber. The publisher's peer links hold
    2,000 messages each: a burst larger than that must wait for them to drain."""

    async def scenario() -> None:
        answers, heard = await burst(mode, publisher_options={"send_queue_limit": 200})
        delivered_exactly_once(answers, heard)
        errors = [a for a in answers if a["event"] == "error"]
        assert not errors, f"{len(errors)} refused, first: {errors[0]}"

    asyncio.run(scenario())


# -- the bounds, by hand (FakeEnv) and in the simulator ------------------------------------------


def scribe_port(*, max_pending: int, max_waiting: int = 100) -> tuple[
        FakeEnv, CommandPort, DeferredOrderer, Conn]:
    """A lone Scribe node (the root of every topic) whose orderer the test drives, with
    ``max_pending`` publishes in flight at most; one client on its command port."""
    env = FakeEnv("n0")
    orderer = DeferredOrderer()
    pubsub = PubSubNode(env, "scribe", create=True, orderer=orderer,
                        scribe_config=ScribeConfig(max_pending=max_pending))
    pubsub.process.start()
    env.advance(0.1)
    port = CommandPort(env, pubsub, max_waiting=max_waiting, overload=Recorded())
    conn = env.accept(listener=COMMANDS_LISTENER)
    port.opened(conn, conn.remote)
    env.take_written()
    return env, port, orderer, conn


class Recorded:
    """An overload log that keeps what it was told."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def warn(self, key: str, fmt: str, *args: object) -> None:
        self.lines.append(fmt % args)


def said(env: FakeEnv) -> list[dict[str, Any]]:
    return [json.loads(frame) for _, frame in env.take_written()]


def test_scribe_publishes_beyond_max_pending_wait_for_acks_and_none_is_lost() -> None:
    env, port, orderer, conn = scribe_port(max_pending=3)
    for i in range(8):
        port.received(conn, f"publish news m{i}".encode())
    port.received(conn, b"status")  # behind the waiting publishes: run after they were made
    env.advance(0.01)
    assert len(orderer.pending("news")) == 3, "more than max_pending went to the root"
    assert said(env) == []
    assert port.waited == 6 and port.refused == 0
    assert isinstance(port.overload, Recorded) and port.overload.lines
    assert "commands wait for room" in port.overload.lines[0]
    answered: list[dict[str, Any]] = []
    while len(answered) < 9:
        for proposal in orderer.pending("news"):
            orderer.accept(proposal)
        env.advance(0.01)
        answered += said(env)
        assert len(orderer.pending("news")) <= 3
    publishes = [a for a in answered if a["event"] == "publish"]
    assert [a["msg"] for a in publishes] == [f"n0:{i}" for i in range(1, 9)]
    # the status ran once the last publish was made (answered when its root acknowledged)
    assert answered.index({"event": "status", "node": "n0", "mode": "scribe",
                           "subscriptions": []}) >= 5


def test_scribe_publishes_beyond_the_waiting_bound_are_refused_and_said_so() -> None:
    env, port, orderer, conn = scribe_port(max_pending=2, max_waiting=3)
    for i in range(7):
        port.received(conn, f"publish news m{i}".encode())
    env.advance(0.01)
    refusals = said(env)
    assert [r["event"] for r in refusals] == ["error", "error"]
    assert all(r["definite"] is True and "overloaded" in r["error"] for r in refusals)
    assert port.refused == 2
    orderer.accept_all()
    answered: list[dict[str, Any]] = []
    while len(answered) < 5:
        orderer.accept_all()
        env.advance(0.01)
        answered += said(env)
    assert [a["event"] for a in answered] == ["publish"] * 5  # 2 in flight + 3 that waited
    rows = [r for r in env.rows if r.event == "drop" and r.layer == "scribe"]
    assert rows == [], "a refused publish reached Scribe"


def test_what_a_client_left_waiting_is_forgotten_and_never_published() -> None:
    env, port, orderer, conn = scribe_port(max_pending=1)
    for i in range(4):
        port.received(conn, f"publish news m{i}".encode())
    port.closed(conn, "peer_closed")
    for _ in range(5):
        orderer.accept_all()
        env.advance(0.01)
    assert len([r for r in env.rows if r.event == "publish" and r.layer == "pubsub"]) == 1
    assert port.waiting == 0  # the bound is given back


def test_gossip_takes_no_publish_while_a_neighbour_link_is_full() -> None:
    env = FakeEnv("n0")
    config = GossipConfig(max_backlog=10, backlog_resume=4, backlog_poll=0.01)
    pubsub = PubSubNode(env, "gossip", gossip_config=config)
    gossip = pubsub.gossip
    assert gossip is not None
    view = gossip.membership
    view.start()
    for peer in ("n1", "n2"):  # neighbours, as if they had joined
        view._add_active(peer, "test")  # a test drives the view by hand
    assert view.active_view() == ["n1", "n2"]
    pubsub.publish("news", "first")
    env.backlogs["n2"] = 10
    assert not pubsub.has_room()
    with pytest.raises(Overloaded):
        pubsub.publish("news", "refused")
    woken: list[float] = []
    pubsub.when_room(lambda: woken.append(env.now()))
    env.backlogs["n2"] = 5
    env.advance(0.05)
    assert woken == [] and not pubsub.has_room(), "woken above the resume mark"
    env.backlogs["n2"] = 3
    env.advance(0.05)
    assert len(woken) == 1 and pubsub.has_room()
    pubsub.publish("news", "again")
    sent = [m for _, m in env.sent if isinstance(m, GossipData)]
    assert [m.payload["message"] for m in sent] == ["first", "first", "again", "again"]


def test_a_burst_through_the_command_port_in_the_simulator_loses_nothing() -> None:
    """Scribe on a simulated Chord ring (jittery links, no loss: as TCP between live peers):
    2,000 publish lines at once to n0's command port with at most 64 in flight; every one is
    acknowledged and delivered exactly once at each subscriber. (With loss, a burst that
    outruns a topic's repair window, ``topic_log_limit`` positions, can still lose: see
    docs/pubsub.md.)"""
    from test_pubsub_commands import PORT, Typist

    for seed in (1, 2):
        sim = Simulation(seed=seed, link=LinkModel(latency=Uniform(0.001, 0.005)),
                         trace=MemorySink())
        nodes = [f"n{i}" for i in range(4)]

        def make(env: Env) -> Any:
            pubsub = PubSubNode(env, "scribe", create=env.node == "n0",
                                contacts=[] if env.node == "n0" else ["n0"],
                                scribe_config=ScribeConfig(max_pending=64))
            if env.node != "n0":
                pubsub.subscribe(TOPIC)
                return pubsub.process
            return NodeProcess(pubsub.process, CommandPort(env, pubsub))

        for node in nodes:
            listeners = ([ListenerSpec(name=COMMANDS_LISTENER, port=PORT)] if node == "n0"
                         else [])
            sim.add_node(node, make, listeners=listeners)
        sim.run(until=5.0)
        sim.add_node("me", lambda env: Typist(env, f"n0:{PORT}"))
        sim.run(until=5.5)
        me = sim.process("me")
        assert isinstance(me, Typist)
        count = 2000
        for i in range(count):
            me.type(f"publish {TOPIC} m{i}".encode())
        sim.run(until=60.0)
        ok = me.events("publish")
        assert len(ok) == count, (seed, len(ok), me.events("error")[:2])
        accepted = {a["msg"] for a in ok}
        rows = [r for r in sim.trace_sink.named()
                if r.event == "deliver" and r.layer == "pubsub"]
        for node in nodes[1:]:
            got = collections.Counter(r.msg for r in rows if r.node == node)
            assert set(got) == accepted, (seed, node, len(accepted - set(got)))
            assert max(got.values()) == 1, (seed, node)


@pytest.mark.parametrize("mode", ["scribe", "gossip"])
def test_a_burst_piped_into_the_client_is_accepted_and_delivered_exactly_once(
        mode: str) -> None:
    """``gossamer pubsub client``'s loop, in this process: 5,000 publish lines piped in at
    once; it keeps at most ``window`` unanswered (it stops reading meanwhile), every line is
    answered ``ok`` and delivered exactly once at every subscriber."""

    async def scenario() -> None:
        publisher, nodes, heard = await overlay(mode, 2)
        try:
            address = publisher.command_address
            assert address is not None
            read_fd, write_fd = os.pipe()
            lines = b"".join(f"publish {TOPIC} m{i}\n".encode() for i in range(BURST))

            def feed() -> None:
                with os.fdopen(write_fd, "wb") as pipe:
                    pipe.write(lines)

            feeder = threading.Thread(target=feed, daemon=True)
            feeder.start()
            out = io.StringIO()
            try:
                code = await run_client(address[0], address[1], Output(out), fd=read_fd,
                                        window=100)
            finally:
                os.close(read_fd)
            assert code == 0, out.getvalue()[-500:]
            printed = out.getvalue().splitlines()
            ok = [line for line in printed if line.startswith(f"ok publish {TOPIC} ")]
            assert len(ok) == BURST, [line for line in printed if line.startswith("error")][:3]
            for sub in heard:
                await wait_for(lambda s=sub: sum(
                    n for m, n in s.counts.items() if m.startswith("m")) >= BURST,
                    sub.changed, f"{BURST} deliveries")
                got = {m: n for m, n in sub.counts.items() if m.startswith("m")}
                assert set(got) == {f"m{i}" for i in range(BURST)}
                assert set(got.values()) == {1}
        finally:
            for node in [publisher, *nodes]:
                await node.stop()

    asyncio.run(scenario())


def test_a_scribe_root_takes_no_publish_while_a_childs_link_is_full() -> None:
    env = FakeEnv("n0")
    pubsub = PubSubNode(env, "scribe", create=True,
                        scribe_config=ScribeConfig(max_backlog=10, backlog_poll=0.01))
    pubsub.process.start()
    env.advance(0.1)
    ended: list[tuple[str, bool]] = []

    def done(result: PublishResult) -> None:
        ended.append((result.msg, result.accepted))

    pubsub.publish("news", "first", on_done=done)
    env.advance(0.01)
    assert ended == [("n0:1", True)]
    scribe = pubsub.scribe
    assert scribe is not None and scribe.role("news") is TreeRole.ROOT
    scribe._topics["news"].children["n1"] = env.now()  # a child, as if it had joined
    env.backlogs["n1"] = 10
    pubsub.publish("news", "second", on_done=done)
    pubsub.publish("news", "third", on_done=done)
    env.advance(0.1)
    assert ended == [("n0:1", True)], "acknowledged while the child's link is full"
    assert not [m for _, m in env.sent if isinstance(m, ScribeData)]
    env.backlogs["n1"] = 0
    env.advance(0.05)
    assert ended[1:] == [("n0:2", True), ("n0:3", True)]
    sent = [m.payload for dst, m in env.sent if isinstance(m, ScribeData) and dst == "n1"]
    assert sent == ["second", "third"]
