"""Authenticated peer links: a process without the cluster key cannot join, relay or inject;
a member cannot claim another member's node id on its own link; the key is required off
loopback; refused links are traced with their reason."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from gossamer.core import Codec, ConfigError, Env, MemorySink, Message, NodeId, message
from gossamer.runtimes.net import NetHost, NetNode
from gossamer.runtimes.net.linkauth import (
    KEY_ENV,
    ClusterKey,
    control_of,
    hello_frame,
    parse_challenge,
    parse_hello,
    resolve_cluster_key,
)
from harness_net import RawClient

CODEC = Codec(max_frame=4096)
WAIT = 20.0  # wall seconds: an upper bound; every wait ends as soon as its condition holds


@message("authtest.note", codec=CODEC)
class Note(Message):
    text: str


class Inbox:
    """Keeps what it was sent; sends a note when asked."""

    def __init__(self, env: Env) -> None:
        self.env = env
        self.got: list[tuple[NodeId, str]] = []

    def start(self) -> None:
        """Nothing to start: it only answers what it is sent."""

    def stop(self) -> None:
        """Nothing to stop: it holds no timers."""

    def on_message(self, src: NodeId, msg: Message) -> None:
        assert isinstance(msg, Note)
        self.got.append((src, msg.text))


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


async def until(predicate: Any, timeout: float = WAIT) -> None:
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.01)


def inbox(node: NetNode) -> Inbox:
    assert isinstance(node.process, Inbox)
    return node.process


def drops(sink: MemorySink, node: str) -> list[str]:
    return [orjson.loads(r.info or "{}").get("reason") for r in sink.named()
            if r.node == node and r.event == "drop"]


def make(node_id: str, sink: MemorySink, **options: Any) -> NetNode:
    return NetNode(node_id=node_id, factory=Inbox, codec=CODEC, trace=sink, **options)


def test_members_with_the_key_talk_and_ids_are_checked(loop: asyncio.AbstractEventLoop) -> None:
    async def scenario() -> None:
        sink = MemorySink()
        key = ClusterKey.from_text("a key of this test, long enough")
        host = NetHost([make(n, sink, cluster_key=key) for n in ("a", "b", "c")])
        await host.start()
        try:
            for src in ("a", "b", "c"):
                for dst in ("a", "b", "c"):
                    host.nodes[src].call(lambda p, d=dst, s=src: p.env.send(d, Note(s)))
            await until(lambda: all(len(inbox(n).got) == 3 for n in host.nodes.values()))
            assert sorted(inbox(host.nodes["b"]).got) == [("a", "a"), ("b", "b"), ("c", "c")]
            assert drops(sink, "a") == drops(sink, "b") == []
        finally:
            await host.stop()

    loop.run_until_complete(scenario())


def test_a_node_with_another_key_cannot_join_or_inject(loop: asyncio.AbstractEventLoop) -> None:
    async def scenario() -> None:
        sink = MemorySink()
        good = make("a", sink, cluster_key="the deployment's own key, 32 B")
        stranger = make("x", sink, cluster_key="somebody else's key, not ours!")
        host = NetHost([good, stranger])
        await host.start()
        try:
            stranger.call(lambda p: p.env.send("a", Note("let me in")))
            await until(lambda: "bad_proof" in drops(sink, "a"))
            good.call(lambda p: p.env.send("a", Note("mine")))  # the node still works
            await until(lambda: inbox(good).got == [("a", "mine")])
            assert ("x", "let me in") not in inbox(good).got
        finally:
            await host.stop()

    loop.run_until_complete(scenario())


def test_a_raw_client_without_the_key_is_refused(loop: asyncio.AbstractEventLoop) -> None:
    async def scenario() -> None:
        sink = MemorySink()
        node = make("a", sink)
        await node.start()
        try:
            client = await RawClient.open("tcp", node.address)
            challenge = await client.recv()
            assert challenge is not None
            nonce = parse_challenge(challenge)
            wrong = ClusterKey.from_text("not the built-in key at all....")
            await client.send(hello_frame(wrong, "mallory", 1, nonce, "1" * 32))
            await client.send(CODEC.encode(Note("injected")))
            await client.wait_closed()
            await client.close()
            # a recorded hello does not answer a new challenge either
            replay = await RawClient.open("tcp", node.address)
            assert await replay.recv() is not None
            builtin = resolve_cluster_key(None, "127.0.0.1", environ={})
            await replay.send(hello_frame(builtin, "mallory", 1, nonce, "1" * 32))
            await replay.wait_closed()
            await replay.close()
            assert drops(sink, "a") == ["bad_proof", "bad_proof"]
            assert inbox(node).got == []
        finally:
            await node.close()

    loop.run_until_complete(scenario())


def test_a_member_cannot_claim_another_members_id(loop: asyncio.AbstractEventLoop,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    """A node with the key that says it is "b" on its link to "a": "a" asks the real "b",
    which never made that link, so nothing the impostor sent is delivered."""

    async def scenario() -> None:
        sink = MemorySink()
        host = NetHost([make("a", sink, hello_timeout=1.0), make("b", sink)])
        await host.start()
        impostor = make("b", sink, peers={"a": host.nodes["a"].address})
        await impostor.start()
        try:
            impostor.call(lambda p: p.env.send("a", Note("I am b, trust me")))
            await until(lambda: "unverified" in drops(sink, "a"))
            host.nodes["b"].call(lambda p: p.env.send("a", Note("the real b")))
            await until(lambda: ("b", "the real b") in inbox(host.nodes["a"]).got)
            assert ("b", "I am b, trust me") not in inbox(host.nodes["a"]).got
        finally:
            await impostor.close()
            await host.stop()

    loop.run_until_complete(scenario())
    assert "unverified" in caplog.text


def test_the_key_is_required_off_loopback_and_taken_from_the_environment(
        caplog: pytest.LogCaptureFixture) -> None:
    with pytest.raises(ConfigError, match="needs a cluster key"):
        resolve_cluster_key(None, "10.1.2.3", environ={})
    from_env = resolve_cluster_key(None, "10.1.2.3", environ={KEY_ENV: "x" * 20})
    assert from_env == ClusterKey(b"x" * 20) and not from_env.builtin
    with caplog.at_level(logging.INFO, logger="gossamer.net"):
        builtin = resolve_cluster_key(None, "127.0.0.1", environ={})
    assert builtin.builtin and "built-in cluster key" in caplog.text
    with pytest.raises(ConfigError, match="at least 16 bytes"):
        ClusterKey.from_text("short")
    with pytest.raises(ConfigError, match="needs a cluster key"):
        NetNode(node_id="a", factory=Inbox, codec=CODEC, listen=("192.0.2.1", 0))


def test_frames_of_the_handshake_are_validated() -> None:
    key = ClusterKey.from_text("k" * 16)
    frame = hello_frame(key, "a", 3, "a" * 32, "b" * 32)
    hello = parse_hello(frame)
    assert hello.proves(key, "a" * 32) and not hello.proves(key, "c" * 32)
    for bad in (b"[]", b'{"hello": "a"}', b'{"hello": "a b", "incarnation": 1, "nonce": "' +
                b"a" * 32 + b'", "proof": "' + b"0" * 64 + b'"}'):
        with pytest.raises(Exception, match="hello"):
            parse_hello(bad)
    assert control_of(CODEC.encode(Note("x"))) is None
    assert control_of(b'{"verified":"' + b"f" * 32 + b'"}') == ("verified", "f" * 32, "")
    with pytest.raises(Exception, match="control frame"):
        control_of(b'{"verify": "x"}')
