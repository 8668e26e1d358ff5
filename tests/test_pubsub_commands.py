"""A pub/sub node's command port: the seed's client commands over a connection, in the
simulator (one node of a gossip overlay takes commands) and over real TCP (``gossamer pubsub
node --command-port``): answers to each command, deliveries of subscribed topics, bad input."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from typing import Any

import pytest

from gossamer.core import Conn, Env, ListenerSpec, MemorySink
from gossamer.protocols.ordering import DeferredOrderer
from gossamer.runtimes.sim import LinkModel, Simulation, Uniform
from gossamer.services.pubsub.commands import COMMANDS_LISTENER, CommandPort, NodeProcess
from gossamer.services.pubsub.node import PubSubNode
from gossamer.testing import FakeEnv

PORT = 5000
WAIT = 30.0


class Typist:
    """A command client in the simulator: sends lines once connected, records the answers."""

    def __init__(self, env: Env, address: str) -> None:
        self.env = env
        self.address = address
        self.conn: Conn | None = None
        self.open = False
        self.lines: list[bytes] = []
        self.answers: list[dict[str, Any]] = []
        self.closed_reason: str | None = None

    def start(self) -> None:
        self.conn = self.env.connect(self.address)

    def stop(self) -> None:
        pass

    def type(self, line: bytes) -> None:
        if self.open:
            assert self.conn is not None
            self.env.write(self.conn, line)
        else:
            self.lines.append(line)

    def opened(self, conn: Conn, peer_address: str) -> None:
        self.open = True
        for line in self.lines:
            self.env.write(conn, line)
        self.lines = []

    def received(self, conn: Conn, frame: bytes) -> None:
        self.answers.append(json.loads(frame))

    def closed(self, conn: Conn, reason: str) -> None:
        self.closed_reason = reason

    def events(self, event: str) -> list[dict[str, Any]]:
        return [a for a in self.answers if a["event"] == event]


def overlay(seed: int) -> Simulation:
    sim = Simulation(seed=seed, link=LinkModel(latency=Uniform(0.001, 0.01)),
                     trace=MemorySink())
    nodes = [f"n{i}" for i in range(4)]

    def make(env: Env) -> Any:
        contacts = [] if env.node == "n0" else ["n0"]
        pubsub = PubSubNode(env, "gossip", contacts=contacts)
        if env.node != "n0":
            pubsub.subscribe("news")
            return pubsub.process
        port = CommandPort(env, pubsub)
        pubsub.on_message = port.deliver
        return NodeProcess(pubsub.process, port)

    for node in nodes:
        listeners = [ListenerSpec(name=COMMANDS_LISTENER, port=PORT)] if node == "n0" else []
        sim.add_node(node, make, listeners=listeners)
    sim.add_node("me", lambda env: Typist(env, f"n0:{PORT}"))
    sim.run(until=2.0)
    return sim


def typist(sim: Simulation) -> Typist:
    process = sim.process("me")
    assert isinstance(process, Typist)
    return process


def test_commands_are_answered_and_subscribed_deliveries_stream_back() -> None:
    for seed in (1, 2):
        sim = overlay(seed)
        me = typist(sim)
        assert me.events("ready") == [{"event": "ready", "node": "n0", "mode": "gossip"}]
        for line in (b"subscribe news", b"publish news hello world", b"publish other x",
                     b"status"):
            me.type(line)
        sim.run(until=4.0)
        assert me.events("subscribe") == [{"event": "subscribe", "topic": "news"}], seed
        published = me.events("publish")
        assert [p["topic"] for p in published] == ["news", "other"]
        # n0 subscribed to news: it delivers its own publish, and nothing of "other"
        assert me.events("deliver") == [
            {"event": "deliver", "topic": "news", "message": "hello world"}], seed
        [status] = me.events("status")
        assert status["subscriptions"] == ["news"]
        # the other nodes got it through the overlay
        rows = [r for r in sim.trace_sink.named() if r.event == "deliver" and r.layer == "pubsub"]
        assert {r.node for r in rows if r.msg == published[0]["msg"]} == {"n0", "n1", "n2", "n3"}


def test_a_publish_before_the_node_joined_is_refused() -> None:
    env = FakeEnv("n0")
    port = CommandPort(env, PubSubNode(env, "gossip"), joined=lambda: False)
    conn = env.accept(listener=COMMANDS_LISTENER)
    port.opened(conn, conn.remote)
    port.received(conn, b"publish news too early")
    answers = [json.loads(frame) for _, frame in env.take_written()]
    assert answers[-1] == {"event": "error",
                           "error": "not in the overlay yet: publish once it joined",
                           "line": "publish news too early"}
    assert not [r for r in env.rows if r.event == "publish"]


def test_bad_commands_get_an_error_and_exit_closes_only_that_client() -> None:
    sim = overlay(3)
    me = typist(sim)
    for line in (b"dance", b"publish", b"\xff\xfe", b"subscribe " + b"t" * 300,
                 b"unsubscribe never", b"help", b"exit"):
        me.type(line)
    sim.run(until=3.0)
    errors = me.events("error")
    assert len(errors) == 5, me.answers
    assert "UTF-8" in errors[2]["error"] and "at most" in errors[3]["error"]
    assert errors[4]["error"] == "not subscribed to never"
    # each refusal echoes its line (answers come in completion order), cut at 200 characters
    assert [e.get("line") for e in errors] == [
        "dance", "publish", None, "subscribe " + "t" * 190, "unsubscribe never"]
    assert me.events("help") and me.closed_reason == "peer_closed"
    port = sim.process("n0")
    assert isinstance(port, NodeProcess) and len(port.port.clients) == 0


@pytest.mark.processes
@pytest.mark.parametrize("quiet", [False, True])
def test_gossamer_pubsub_node_takes_commands_on_its_command_port(quiet: bool) -> None:
    """Commands and deliveries over the command port; the node prints its deliveries on
    stdout too, unless ``--quiet``."""

    async def scenario() -> None:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "gossamer.services.pubsub.cli", "pubsub", "node", "--json",
            *(["--quiet"] if quiet else []),
            "--mode", "gossip", "--command-port", "0", stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, env=env)
        assert proc.stdout is not None
        try:
            ready = json.loads(await asyncio.wait_for(proc.stdout.readline(), WAIT))
            assert ready["event"] == "ready"
            host, port = ready["commands"].rsplit(":", 1)
            reader, writer = await asyncio.open_connection(host, int(port))
            try:
                greeting = json.loads(await asyncio.wait_for(reader.readline(), WAIT))
                assert greeting == {"event": "ready", "node": ready["node"], "mode": "gossip"}
                writer.write(b"subscribe news\npublish news over tcp\n")
                await writer.drain()
                got: list[dict[str, Any]] = []
                while len(got) < 3:
                    got.append(json.loads(await asyncio.wait_for(reader.readline(), WAIT)))
                # gossip delivers to the publisher at once: before or after the answer
                assert got[0] == {"event": "subscribe", "topic": "news"}
                assert sorted(a["event"] for a in got[1:]) == ["deliver", "publish"]
                assert {"event": "deliver", "topic": "news", "message": "over tcp"} in got
            finally:
                writer.close()
            proc.terminate()
            printed = await asyncio.wait_for(proc.stdout.read(), WAIT)
            assert await asyncio.wait_for(proc.wait(), WAIT) == 0
            events = [json.loads(line)["event"] for line in printed.splitlines()]
            assert "stopped" in events and ("deliver" in events) is not quiet, events
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()

    asyncio.run(scenario())


@pytest.mark.processes
def test_gossamer_pubsub_client_drives_a_running_node() -> None:
    """``gossamer pubsub client HOST:PORT`` in a process of its own: commands from its stdin
    to the node's command port; answers and deliveries printed; a bad address is an error."""

    async def scenario() -> None:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        node = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "gossamer.services.pubsub.cli", "pubsub", "node", "--json",
            "--mode", "gossip", "--command-port", "0", stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, env=env)
        assert node.stdout is not None
        try:
            ready = json.loads(await asyncio.wait_for(node.stdout.readline(), WAIT))
            await asyncio.wait_for(node.stdout.readline(), WAIT)  # joined
            client = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "gossamer.services.pubsub.cli", "pubsub", "client",
                ready["commands"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, env=env)
            out, err = await asyncio.wait_for(client.communicate(
                b"subscribe news\npublish news from a client\nunsubscribe other\n"), WAIT)
            lines = out.decode().splitlines()
            assert client.returncode == 0, err.decode()
            assert lines[0].startswith(f"connected to {ready['node']} mode=gossip")
            assert "ok subscribe news" in lines
            assert any(line.startswith("ok publish news ") for line in lines)
            assert "deliver news from a client" in lines
            assert "error: not subscribed to other" in lines
            refused = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "gossamer.services.pubsub.cli", "pubsub", "client",
                "127.0.0.1:1", stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, env=env)
            out, _ = await asyncio.wait_for(refused.communicate(), WAIT)
            assert refused.returncode == 1 and "cannot reach the node" in out.decode()
            node.terminate()
            assert await asyncio.wait_for(node.wait(), WAIT) == 0
        finally:
            if node.returncode is None:
                node.kill()
                await node.wait()

    asyncio.run(scenario())


def lone_scribe_port() -> tuple[FakeEnv, CommandPort, DeferredOrderer, Conn]:
    """Node n0 alone on a Chord ring (the root of every topic), whose root orders with a
    ``DeferredOrderer`` the test drives; one client connected to its command port."""
    env = FakeEnv("n0")
    orderer = DeferredOrderer()
    pubsub = PubSubNode(env, "scribe", create=True, orderer=orderer)
    pubsub.process.start()
    env.advance(0.1)
    port = CommandPort(env, pubsub)
    conn = env.accept(listener=COMMANDS_LISTENER)
    port.opened(conn, conn.remote)
    env.take_written()
    return env, port, orderer, conn


def answers(env: FakeEnv) -> list[dict[str, Any]]:
    return [json.loads(frame) for _, frame in env.take_written()]


def test_a_publish_is_answered_ok_only_once_the_topics_root_accepted_it() -> None:
    env, port, orderer, conn = lone_scribe_port()
    port.received(conn, b"publish news first")
    port.received(conn, b"publish news second")
    env.advance(0.5)
    assert answers(env) == [], "answered before the root's orderer decided"
    first, second = orderer.pending("news")
    orderer.accept(first)
    env.advance(0.01)
    assert answers(env) == [{"event": "publish", "topic": "news", "msg": "n0:1"}]
    orderer.refuse(second, "no_quorum")
    env.advance(0.01)
    (refusal,) = answers(env)
    assert refusal["event"] == "error" and refusal["msg"] == "n0:2"
    assert refusal["definite"] is True and "no_quorum" in refusal["error"]


def test_a_publish_no_root_answered_is_an_error_that_may_still_have_happened() -> None:
    env, port, orderer, conn = lone_scribe_port()
    port.received(conn, b"publish news lost")
    env.advance(60.0)  # every retry ends in the orderer's hands, undecided
    assert orderer.pending("news"), "the publish never reached the root"
    (failure,) = answers(env)
    assert failure["event"] == "error" and failure["msg"] == "n0:1"
    assert failure["definite"] is False, "a timeout is not a rejection"


def test_a_client_gone_before_the_root_decided_is_not_written_to() -> None:
    env, port, orderer, conn = lone_scribe_port()
    port.received(conn, b"publish news bye")
    port.closed(conn, "peer_closed")
    orderer.accept_all()
    env.advance(0.01)
    assert answers(env) == []
