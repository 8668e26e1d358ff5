"""A replicated value is the same at every replica: the APIs hand their protocols a JSON copy
of the caller's object (``core.jsonvalue.json_copy``) and refuse what JSON would change or
cannot carry. Before, the replica that wrote kept the caller's object (NaN, a tuple, a dict
changed later) while the others decoded null, a list, the old dict; a set stopped the pub/sub
node that published it."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path

import pytest

from gossamer.core.errors import ConfigError
from gossamer.core.jsonvalue import json_copy
from gossamer.protocols.ordering.fifo import FifoBroadcast
from gossamer.services.atomic import AtomicGroup
from gossamer.services.paxos import ReplicatedLog
from gossamer.services.pubsub.net import CommandError, NodeOptions, PubSubNetNode
from gossamer.testing import FakeEnv
from harness_net import reserve_port


def test_a_json_copy_is_what_the_wire_carries() -> None:
    caller = {"t": (1, 2), "n": [1.5, None, True], "s": "x"}
    copy = json_copy(caller)
    assert copy == {"t": [1, 2], "n": [1.5, None, True], "s": "x"}
    caller["s"] = "changed later"
    assert copy["s"] == "x"
    assert json_copy("text") == "text" and json_copy(2**64 - 1) == 2**64 - 1
    for bad, says in [(math.nan, "nan is not a JSON number"), ({"x": math.inf}, "inf"),
                      ({1, 2}, "a set is not a JSON value"), ({1: "a"}, "keys are strings"),
                      ([2**64], "beyond 64 bits"), (b"raw", "a bytes is not")]:
        with pytest.raises(ConfigError, match=says):
            json_copy(bad, "a body")


def test_the_fifo_origin_delivers_what_the_others_decode() -> None:
    env = FakeEnv("a")
    got: list[object] = []
    fifo = FifoBroadcast(env, ["a", "b"], on_deliver=lambda _o, _s, body: got.append(body))
    fifo.start()
    body = {"pair": (1, 2)}
    fifo.broadcast(body)
    body["pair"] = (9, 9)
    assert got == [{"pair": [1, 2]}]
    with pytest.raises(ConfigError):
        fifo.broadcast(math.nan)


def test_a_pubsub_publish_that_is_no_json_value_is_refused_and_the_node_runs_on() -> None:
    async def main() -> None:
        node = PubSubNetNode(NodeOptions(mode="gossip", seed=1))
        await node.start()
        try:
            assert await node.wait_joined(20)
            with pytest.raises(CommandError, match="a set is not a JSON value"):
                node.publish("news", {"tags": {"x", "y"}})
            assert node.running and not node.failed.is_set()
            node.publish("news", "after")  # taken
        finally:
            await node.stop()
        with pytest.raises(CommandError, match="node is"):
            node.publish("news", "stopped")  # not "not in the overlay yet"

    asyncio.run(asyncio.wait_for(main(), 60))


def test_a_proposal_and_an_atomic_body_are_refused_before_they_are_sent(
        tmp_path: Path) -> None:
    async def main() -> None:
        me = f"127.0.0.1:{reserve_port()}"
        log = ReplicatedLog(me, [me])
        await log.start()
        try:
            with pytest.raises(ConfigError, match="a proposal is not a JSON value"):
                await log.propose({"op": "set", "key": "f", "value": math.inf}, timeout=5)
        finally:
            await log.stop()
        group = AtomicGroup(f"239.255.9.9:{reserve_port()}", data_dir=tmp_path / "m")
        await group.join()
        try:
            with pytest.raises(ConfigError, match="a body is not a JSON value"):
                await group.send(math.nan, timeout=5)
        finally:
            await group.leave()

    asyncio.run(asyncio.wait_for(main(), 60))
