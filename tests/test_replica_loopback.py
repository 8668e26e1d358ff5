"""Seed 000 on real sockets: a ``HubServer`` on 127.0.0.1 and Python ``Replica`` clients.

Every wait is on the clients' own change events (``wait_until``) with a timeout; nothing sleeps
for a fixed time. Each test prints what every replica holds when it fails.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.client import connect

from gossamer.core import FibonacciBackoff
from gossamer.protocols.replica import (
    Data,
    JoinRefusal,
    LinkState,
    ReplicaCodec,
    Subscribe,
    crc_of,
)
from gossamer.services.replica import HubServer, JoinRefused, Replica

WAIT = 30.0
CODEC = ReplicaCodec()


def run(scenario: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(asyncio.wait_for(scenario(), 120))


def ws_url(hub: HubServer) -> str:
    host, port = hub.address
    return f"ws://{host}:{port}/ws"


def fast_backoff() -> FibonacciBackoff:
    return FibonacciBackoff(unit=0.02, cap=0.5)


def picture(replicas: list[Replica], hub: HubServer | None = None) -> str:
    lines = [f"{r.client_id}: link={r.link.value} queued={len(r.offline_queue)} "
             f"vector={r.vector} items={r.items()}" for r in replicas]
    if hub is not None and hub.keeper is not None:
        lines.append(f"hub: {hub.keeper.replica.items()}")
    return "\n".join(lines)


async def converged(replicas: list[Replica], hub: HubServer | None = None,
                    timeout: float = WAIT) -> None:
    """Wait until every replica is synced and all hold the same revisions (and the hub's keeper
    too, when there is one)."""

    def same() -> bool:
        first = replicas[0].revisions()
        if hub is not None and hub.keeper is not None \
                and hub.keeper.replica.revisions() != first:
            return False
        return all(r.revisions() == first and r.link is LinkState.ONLINE
                   and not r.offline_queue and r.replica.causal.caught_up
                   and not r.replica.rebase_queue for r in replicas)

    try:
        for replica in replicas:
            await replica.wait_until(same, timeout)
    except TimeoutError:
        pytest.fail("replicas did not converge:\n" + picture(replicas, hub))


@pytest.mark.parametrize("clients", [8, pytest.param(20, marks=pytest.mark.slow)])
def test_python_clients_converge_through_a_real_hub(clients: int) -> None:
    async def scenario() -> None:
        rng = random.Random(21)
        async with HubServer() as hub:
            replicas = [Replica(ws_url(hub), client_id=f"py{n:02d}", backoff=fast_backoff())
                        for n in range(clients)]
            for replica in replicas:
                await replica.start()
            try:
                for replica in replicas:
                    await replica.synced(WAIT)
                for round_ in range(6):
                    for replica in replicas:
                        replica.set(f"shared-{rng.randrange(3)}", {"by": replica.client_id,
                                                                   "round": round_})
                        replica.set(f"own-{replica.client_id}-{round_}", round_)
                    await asyncio.sleep(0)  # let frames flow between rounds
                await converged(replicas, hub)
                items = replicas[0].items()
                assert all(f"own-py{n:02d}-{r}" in items for n in range(clients)
                           for r in range(6))
                assert all(r.items() == items for r in replicas)
            finally:
                for replica in replicas:
                    await replica.close()

    run(scenario)


def test_a_hub_restart_loses_nothing_committed(tmp_path: Path) -> None:
    async def scenario() -> None:
        data_dir = tmp_path / "hub"
        data_dir.mkdir()
        hub = HubServer(data_dir=data_dir)
        await hub.start()
        port = hub.address[1]
        replicas = [Replica(ws_url(hub), client_id=f"r{n}", backoff=fast_backoff(),
                            db_path=tmp_path / f"r{n}.sqlite") for n in range(6)]
        try:
            for replica in replicas:
                await replica.start()
            for replica in replicas:
                await replica.synced(WAIT)
            for n, replica in enumerate(replicas):
                replica.set(f"before-{n}", n)
                replica.set("shared", {"before": n})
            await converged(replicas, hub)
            await hub.stop()
            for replica in replicas:
                await replica.wait_until(lambda r=replica: r.link is LinkState.OFFLINE, WAIT)
            for n, replica in enumerate(replicas):  # written while the hub is down: queued
                assert replica.set(f"during-{n}", n) is None
                replica.set("shared", {"during": n})
            hub = HubServer(port=port, data_dir=data_dir)
            await hub.start()
            assert hub.keeper is not None
            assert {f"before-{n}" for n in range(6)} <= set(hub.keeper.replica.items()), \
                "the hub's snapshot survived its restart"
            for replica in replicas:
                replica.reconnect()
            await converged(replicas, hub)
            items = replicas[0].items()
            for n in range(6):
                assert items[f"before-{n}"] == n and items[f"during-{n}"] == n, picture(replicas)
            assert "during" in items["shared"], "a write made while the hub was down won"
            # a newcomer after everyone left gets it all from the hub alone
            for replica in replicas:
                await replica.close()
            newcomer = Replica(ws_url(hub), client_id="zz", backoff=fast_backoff())
            await newcomer.start()
            replicas = [newcomer]
            await newcomer.wait_until(lambda: newcomer.items() == items, WAIT)
        finally:
            for replica in replicas:
                await replica.close()
            await hub.stop()

    run(scenario)


def test_offline_writes_queue_survive_a_restart_and_are_rebased_on_reconnect(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with HubServer() as hub:
            alice = Replica(ws_url(hub), client_id="alice", backoff=fast_backoff(),
                            db_path=tmp_path / "alice.sqlite")
            bob = Replica(ws_url(hub), client_id="bob", backoff=fast_backoff())
            replicas = [alice, bob]
            try:
                for replica in replicas:
                    await replica.start()
                    await replica.synced(WAIT)
                bob.set("doc", "v1")
                await alice.wait_until(lambda: alice.get("doc") == "v1", WAIT)
                await alice.go_offline()
                assert alice.set("doc", "alice-offline") is None
                assert alice.get("doc") == "alice-offline"  # read your own queued write
                assert alice.offline_queue == [("doc", "alice-offline", False)]
                bob.set("doc", "v2")  # alice's base is now stale: hers is rebased
                # alice restarts while offline: the queue is durable
                await alice.close()
                alice = Replica(ws_url(hub), backoff=fast_backoff(),
                                db_path=tmp_path / "alice.sqlite")
                replicas = [alice, bob]
                await alice.start()
                assert alice.client_id == "alice"
                await converged(replicas, hub)
                assert bob.get("doc") == "alice-offline"
                assert alice.replica.revision("doc") == bob.revision("doc")
            finally:
                for replica in replicas:
                    await replica.close()

    run(scenario)


def test_go_offline_does_not_reconnect_until_asked() -> None:
    async def scenario() -> None:
        async with HubServer() as hub:
            replica = Replica(ws_url(hub), client_id="solo", backoff=fast_backoff())
            await replica.start()
            try:
                await replica.synced(WAIT)
                connects = replica.connects
                await replica.go_offline()
                replica.set("k", 1)
                # the hub has seen the close: nobody is connected, and nobody comes back
                # while we write more (each write wakes wait_until, none reconnects)
                await replica.wait_until(lambda: hub.connections == 0, WAIT)
                for n in range(5):
                    replica.set("k", n)
                assert replica.connects == connects and replica.link is LinkState.OFFLINE
                replica.reconnect()
                await replica.synced(WAIT)
                assert replica.connects == connects + 1
                assert replica.get("k") == 4
            finally:
                await replica.close()

    run(scenario)


def test_a_corrupt_or_forged_message_is_refused_and_changes_nothing() -> None:
    async def scenario() -> None:
        async with HubServer() as hub:
            honest = Replica(ws_url(hub), client_id="honest", backoff=fast_backoff())
            await honest.start()
            try:
                await honest.synced(WAIT)
                honest.set("k", "good")
                assert hub.keeper is not None
                keeper = hub.keeper
                await honest.wait_until(lambda: keeper.replica.get("k") == "good", WAIT)
                async with connect(ws_url(hub)) as ws:
                    await ws.send(CODEC.encode(Subscribe(id="mallory", vector={})).decode())
                    bad: dict[str, Any] = CODEC.to_dict(Data(
                        id="mallory", key="k", old_value=honest.revision("k"), value="evil",
                        crc=crc_of("k", "evil", "evil"), vector={"mallory": 1}, data="evil"))
                    bad["crc"] ^= 1
                    await ws.send(CODEC.encode(CODEC.from_dict(bad)).decode())
                    forged = dict(bad, id="honest", crc=crc_of("k", "evil", "evil"),
                                  vector={"honest": 2})
                    await ws.send(CODEC.encode(CODEC.from_dict(forged)).decode())  # spoofed id
                    await ws.send('{"id": "mallory", "key": 5}')  # wrong field type
                    await ws.send("not json")
                    # a well-formed message after them: once it arrives, they were all handled
                    good = Data(id="mallory", key="m", old_value=None, value="ok",
                                crc=crc_of("m", "ok", 1), vector={"mallory": 1}, data=1)
                    await ws.send(CODEC.encode(good).decode())
                    await honest.wait_until(lambda: honest.get("m") == 1, WAIT)
                assert honest.get("k") == "good" and keeper.replica.get("k") == "good"
                assert keeper.replica.vector.get("mallory") == 1  # only the good one counted
            finally:
                await honest.close()

    run(scenario)


def test_synced_means_every_write_the_hub_had_accepted_is_applied_here() -> None:
    """``synced()`` called once the hub has accepted a burst of another client's writes
    returns only once every one of them is applied here, not merely when nothing is known to
    be missing (the relayed writes may still be on their way)."""

    async def scenario() -> None:
        async with HubServer() as hub:
            writer = Replica(ws_url(hub), client_id="w", backoff=fast_backoff())
            reader = Replica(ws_url(hub), client_id="r", backoff=fast_backoff())
            replicas = [writer, reader]
            keeper = hub.keeper
            assert keeper is not None
            accepted = asyncio.Event()
            delivered = keeper.replica.causal.on_deliver
            assert delivered is not None

            def watch(msg: Data) -> None:  # the keeper's delivery: the hub accepted it
                delivered(msg)
                if msg.id == "w" and msg.seq % 100 == 0:
                    accepted.set()

            keeper.replica.causal.on_deliver = watch
            try:
                for replica in replicas:
                    await replica.start()
                    await replica.synced(WAIT)
                for round_ in range(3):
                    for n in range(100):
                        writer.set(f"k{n}", round_)
                    # the hub has accepted (delivered) them all: from here, synced() owes them
                    await asyncio.wait_for(accepted.wait(), WAIT)
                    accepted.clear()
                    await reader.synced(WAIT)
                    stale = sorted(k for k, v in reader.items().items() if v != round_)
                    assert stale == [], f"round {round_}: synced() without {len(stale)} " \
                                        f"accepted writes\n{picture(replicas, hub)}"
            finally:
                for replica in replicas:
                    await replica.close()

    run(scenario)


def test_one_id_one_writer_over_real_websockets(tmp_path: Path) -> None:
    """A second live connection for an id is refused and the client says so; a fresh store
    without the id's token is refused; a fresh store given the token is a new incarnation whose
    writes reach the others (before: its writes restarted at 1 and were dropped everywhere);
    the id's first store, restarted, joins again and is heard."""
    async def scenario() -> None:
        async with HubServer() as hub:
            url = ws_url(hub)

            def ada(db: str, token: str | None = None) -> Replica:
                return Replica(url, client_id="ada", db_path=tmp_path / db, token=token,
                               backoff=fast_backoff())

            async def refused_with(replica: Replica) -> JoinRefused:
                await replica.start()
                try:
                    with pytest.raises(JoinRefused) as refused:
                        await replica.synced(WAIT)
                    return refused.value
                finally:
                    await replica.close()

            def ada_gone() -> bool:
                return hub.service is not None and hub.service.relay.connection_of("ada") is None

            owner, reader = ada("ada.sqlite"), Replica(url, client_id="bob",
                                                       backoff=fast_backoff())
            await owner.start()
            await reader.start()
            try:
                owner.set("x", 1)
                await owner.synced(WAIT)
                await reader.wait_until(lambda: reader.get("x") == 1, WAIT)
                token = owner.token
                assert token is not None
                twin = await refused_with(ada("twin.sqlite", token))
                assert twin.code == JoinRefusal.ID_IN_USE and twin.definite
                assert "connected on another connection" in str(twin)
                await owner.close()
                await reader.wait_until(ada_gone, WAIT)
                stranger = await refused_with(ada("stranger.sqlite"))
                assert stranger.code == JoinRefusal.NOT_YOURS, stranger
                reborn = ada("reborn.sqlite", token)
                await reborn.start()
                try:
                    await reborn.synced(WAIT)
                    assert reborn.get("x") == 1  # its earlier run's write, from the snapshot
                    reborn.set("x", 2)
                    await reader.wait_until(lambda: reader.get("x") == 2, WAIT)
                    assert reborn.vector["ada"] == 2  # numbered after its earlier run's
                finally:
                    await reborn.close()
                await reader.wait_until(ada_gone, WAIT)
                again = ada("ada.sqlite")  # the first store, restarted
                await again.start()
                try:
                    await again.synced(WAIT)
                    again.set("x", 3)
                    await reader.wait_until(lambda: reader.get("x") == 3, WAIT)
                    assert again.get("x") == 3 and again.refused is None
                finally:
                    await again.close()
            finally:
                await owner.close()
                await reader.close()

    run(scenario)
