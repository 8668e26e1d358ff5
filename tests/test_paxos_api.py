"""``ReplicatedLog``, the asyncio API of the replicated log: three replicas on loopback in one
event loop propose, await their decisions and hear every decided operation in one order."""

from __future__ import annotations

import asyncio

import pytest

from gossamer.core.errors import ConfigError, OperationError
from gossamer.protocols.ordering.paxos import PaxosConfig
from gossamer.services.paxos import KeyValue, ReplicatedLog
from harness_net import reserve_port

CONFIG = PaxosConfig(heartbeat_interval=0.1, suspect_timeout=0.5, election_jitter=0.1)
WAIT = 30.0


async def three_replicas() -> None:
    members = [f"127.0.0.1:{reserve_port()}" for _ in range(3)]
    stores = {m: KeyValue() for m in members}
    logs = {m: ReplicatedLog(m, members, config=CONFIG, snapshot_fn=stores[m].snapshot,
                             restore_fn=stores[m].restore) for m in members}
    seen: dict[str, list[str]] = {m: [] for m in members}
    for member, log in logs.items():
        log.subscribe(lambda op, m=member: (seen[m].append(op.id), stores[m].apply(op.payload)))
    try:
        for log in logs.values():
            await log.start()
        leaders = {await log.wait_leader(WAIT) for log in logs.values()}
        assert len(leaders) == 1
        results = await asyncio.gather(*(
            logs[members[i % 3]].propose({"op": "incr", "key": "n", "by": 1}, timeout=WAIT)
            for i in range(30)))
        assert len({(r.slot, r.index) for r in results}) == 30
        async with asyncio.timeout(WAIT):
            while any(len(ids) < 30 for ids in seen.values()):
                await asyncio.sleep(0.01)
        assert seen[members[0]] == seen[members[1]] == seen[members[2]]
        assert all(kv.data == {"n": 30} for kv in stores.values())
        assert all(log.group == frozenset(members) for log in logs.values())
        # a proposal that cannot be decided in time is not a rejection
        leader = leaders.pop()
        for member in members:
            if member != leader:
                await logs[member].stop()
        with pytest.raises(OperationError) as info:
            await logs[leader].propose({"op": "set", "key": "k", "value": 1}, timeout=0.3)
        assert info.value.definite is False
    finally:
        for log in logs.values():
            await log.stop()


def test_three_replicas_on_loopback_decide_one_order() -> None:
    asyncio.run(three_replicas())


def test_bad_arguments_are_refused_at_once() -> None:
    with pytest.raises(ConfigError):
        ReplicatedLog("node-a", ["node-a"])  # not host:port
    with pytest.raises(ConfigError):
        ReplicatedLog("127.0.0.1:4000", ["127.0.0.1:4001"])  # not a member itself
    with pytest.raises(ConfigError):
        KeyValue.check({"op": "incr", "key": "n", "by": "1"})


def test_key_value_applies_set_and_incr_and_skips_the_unknown() -> None:
    kv = KeyValue()
    for op in ({"op": "set", "key": "a", "value": [1]}, {"op": "incr", "key": "n", "by": 2},
               {"op": "incr", "key": "n", "by": 3}, {"op": "drop", "key": "a"}):
        kv.apply(op)
    assert kv.data == {"a": [1], "n": 5}
    copy = KeyValue()
    copy.restore(kv.snapshot())
    assert copy.data == kv.data
