"""APSYN peer-to-peer mode (docs/appsync-zones.md): participants choose a CTRL at random through
the Multi-Paxos log, all agree on it, and when it crashes they choose another that starts from
the latest decided state; every peer ends holding what the CTRL says it may see."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from gossamer.core import MemorySink
from gossamer.protocols.appsync import Status
from gossamer.protocols.appsync.peer import PeerPhase
from gossamer.protocols.appsync.state import object_to_json
from gossamer.protocols.ordering.paxos import PaxosConfig
from gossamer.services.appsync.net import AppSyncP2PNode
from gossamer.services.appsync.sim import SESSION, P2PWorld, WorldConfig
from harness_net import reserve_port

EVENT, NODE, PEER, SEQ = 4, 2, 7, 9


def _rows(sink: MemorySink, event: str) -> list[Any]:
    return [row for row in sink.rows if row[EVENT] == event]


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_a_crashed_ctrl_is_replaced_by_one_holding_the_latest_state(seed: int) -> None:
    sink = MemorySink()
    world = P2PWorld(WorldConfig(peers=5, seed=seed, request_chance=0.6), trace=sink)
    world.run_for(3.0)
    first = world.ctrl()
    assert first is not None, f"seed {seed}: no agreed CTRL"
    old = world.crash_ctrl()
    world.run_for(4.0)
    new = world.ctrl()
    assert new is not None and new != old, f"seed {seed}: no new CTRL after the crash"
    world.quiesce(3.0)
    states = world.visible_states()
    peers = sorted(name for name in states if not name.startswith("="))
    assert peers == sorted(world.participants()), f"seed {seed}: not every live peer joined"
    for name in peers:
        assert states[name] == states[f"={name}"], f"seed {seed}: {name} differs from CTRL"
    # the replicated state is the same everywhere and is what the CTRL serves
    participants = world.participants()
    assert len(world.replicated_states()) == 1, f"seed {seed}: the participants disagree"
    server = participants[new].server
    assert server is not None
    served = {key: orjson.loads(object_to_json(obj))
              for key, obj in server.sessions[SESSION].objects.items()}
    assert served == participants[new].sessions[SESSION][1], f"seed {seed}"
    # the new CTRL went on from the old one's last round: it held the latest state (the
    # old one's last round may have been decided after it crashed, unsent: one more)
    rounds = _rows(sink, "round")
    last_old = max(row[SEQ] for row in rounds if row[NODE] == old)
    first_new = min(row[SEQ] for row in rounds if row[NODE] == new)
    assert last_old < first_new <= last_old + 2, f"seed {seed}: {last_old} -> {first_new}"
    elected = [(row[SEQ], row[PEER]) for row in _rows(sink, "ctrl_elected")]
    assert {e for e in elected} == {(1, old), (2, new)}, f"seed {seed}: {set(elected)}"


def test_the_first_ctrl_is_chosen_at_random_and_one_seed_gives_one_trace() -> None:
    def run(seed: int) -> tuple[str | None, list[Any]]:
        sink = MemorySink()
        world = P2PWorld(WorldConfig(peers=5, seed=seed), trace=sink)
        world.run_for(2.0)
        return world.ctrl(), [tuple(r[1:]) for r in sink.rows if r[EVENT] != "wall"]

    chosen = {run(seed)[0] for seed in range(1, 9)}
    assert None not in chosen and len(chosen) >= 3, chosen
    assert run(5) == run(5)


def test_three_participants_over_loopback_replace_a_stopped_ctrl() -> None:
    asyncio.run(_over_loopback())


async def _over_loopback() -> None:
    fast = PaxosConfig(heartbeat_interval=0.1, suspect_timeout=0.4, election_jitter=0.1)
    links = [f"127.0.0.1:{reserve_port()}" for _ in range(3)]
    urls = {link: f"ws://127.0.0.1:{reserve_port()}/" for link in links}
    nodes = {link: AppSyncP2PNode(link, links, urls, "quiz", timeout=10, elect_after=0.3,
                                  paxos=fast, min_ms=5, max_ms=100,
                                  cluster_key="p2p-test-cluster-key")
             for link in links}
    try:
        await asyncio.gather(*(node.connect() for node in nodes.values()))
        first = next(iter(nodes.values())).ctrl
        assert first is not None and all(n.ctrl == first for n in nodes.values())
        others = [node for link, node in nodes.items() if link != first]
        board = others[0].share("board", {"question": 1})
        assert await asyncio.wait_for(board.set("answer", "a"), 10) in (
            Status.ACCEPTED, Status.MULTIPLE_ACCEPTED)
        await others[1].wait_until(
            lambda: others[1].value("G//board") == {"question": 1, "answer": "a"})
        await nodes[first].close()  # the CTRL goes away
        await others[0].wait_until(lambda: others[0].ctrl not in (None, first), timeout=10)
        second = others[0].ctrl
        await others[1].wait_until(lambda: others[1].ctrl == second)
        for node in others:  # both rejoined the new CTRL, which kept the decided state
            await node.wait_until(lambda n=node: n.core is not None  # type: ignore[misc]
                                  and n.core.phase is PeerPhase.SYNCING
                                  and n.core.address == urls[second])
            assert node.value("G//board") == {"question": 1, "answer": "a"}
        moved = others[1].share("board")
        assert await asyncio.wait_for(moved.set("answer", "b"), 10) in (
            Status.ACCEPTED, Status.MULTIPLE_ACCEPTED)
        await others[0].wait_until(lambda: others[0].value("G//board")["answer"] == "b")
    finally:
        await asyncio.gather(*(node.close() for node in nodes.values()))


@pytest.mark.parametrize("seed", [1, 2])
def test_a_ctrl_cut_off_from_the_majority_is_replaced_and_rejoins_after_the_heal(
        seed: int) -> None:
    """A partition leaves the CTRL alone: its connections stay open but no round of it can be
    decided, so no sync comes; the others' peers give it up (``sync_timeout``), choose another
    CTRL and go on; after the heal the old one follows the new one."""
    sink = MemorySink()
    world = P2PWorld(WorldConfig(peers=5, seed=seed), trace=sink)
    world.run_for(2.0)
    old = world.ctrl()
    assert old is not None
    others = [name for name in world.names if name != old]
    world.sim.partition([[old], others])
    world.run_for(6.0)
    majority = {(p.epoch, p.ctrl) for name, p in world.participants().items() if name != old}
    assert len(majority) == 1, f"seed {seed}: {majority}"
    [(epoch, new)] = majority
    assert epoch == 2 and new != old, f"seed {seed}: {majority}"
    rounds_of_new = [r[SEQ] for r in sink.rows if r[EVENT] == "round" and r[NODE] == new]
    assert len(rounds_of_new) > 20, f"seed {seed}: the majority's rounds did not go on"
    world.sim.heal()
    world.run_for(4.0)
    world.quiesce(3.0)
    assert world.ctrl() == new
    states = world.visible_states()
    peers = sorted(name for name in states if not name.startswith("="))
    assert peers == world.names, f"seed {seed}: not every participant joined the new CTRL"
    for name in peers:
        assert states[name] == states[f"={name}"], f"seed {seed}: {name}"
    assert any(r[EVENT] == "sync_timeout" for r in sink.rows)
