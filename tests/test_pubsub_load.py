"""Load without loss (issue 18, point 8): a burst of publishes written at once to a node's
command port over loopback, in scribe and in gossip mode. Every publish is answered once;
every one answered ``ok`` is delivered exactly once at every subscriber; one refused is an
error the publisher sees. Nodes run in this process (real TCP on 127.0.0.1, ephemeral ports);
every wait is on an event with a timeout.
"""

from __future__ import annotations

import asyncio
import collections
import json
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from gossamer.services.pubsub.net import NodeOptions, PubSubNetNode

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


@pytest.mark.parametrize("mode", ["scribe", "gossip"])
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
