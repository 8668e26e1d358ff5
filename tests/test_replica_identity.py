"""One id, one writer (seed 000): the hub's client book, tokens, new incarnations, refusals.

In the simulator: a client whose store is lost comes back as a new incarnation of its id (given
its token) and its writes reach everyone; a fresh store without the token is refused and says
so; a connection that claims a connected client's id is refused and its forged frames never
land. With ``FakeEnv``: the book's record is committed before the ``welcome`` leaves.
"""

from __future__ import annotations

from typing import Any, cast

import pytest

from checks import named
from gossamer.core import CloseCode, Conn, Env, Framing, node_ids
from gossamer.core.backoff import FibonacciBackoff
from gossamer.core.errors import ConfigError
from gossamer.core.trace import MemorySink
from gossamer.protocols.replica import (
    HUB_ID,
    ClientBook,
    Data,
    HubService,
    JoinRefusal,
    KeeperConfig,
    LinkState,
    Refused,
    ReplicaCodec,
    ReplicaNode,
    Subscribe,
    Welcome,
    crc_of,
)
from gossamer.protocols.replica.hub_service import DEFAULT_KEEPER
from gossamer.protocols.replica.identity import CLIENTS_TABLE, Admitted, Refusal
from gossamer.runtimes.sim import LinkModel, MemoryStore, Scenario, Simulation
from gossamer.testing import FakeEnv
from test_replica_sim import (
    BACKOFF_CAP,
    BACKOFF_UNIT,
    HUB,
    HUB_ADDRESS,
    HUB_LISTENER,
    LATENCY,
    client_of,
)

CODEC = ReplicaCodec()


class Forger:
    """A process that dials the hub and sends ``frames`` claiming to be another client: what
    any program that can reach the hub can do."""

    def __init__(self, env: Env, frames: list[bytes]) -> None:
        self.env = env
        self.frames = frames
        self.heard: list[Any] = []
        self.closed_reason: str | None = None

    def start(self) -> None:  # once the victim is connected
        self.env.set_timer(1.0, lambda: self.env.connect(HUB_ADDRESS, framing=Framing.LINES))

    def stop(self) -> None:
        self.closed_reason = self.closed_reason or "stopped"

    def opened(self, conn: Conn, peer_address: str) -> None:
        for frame in self.frames:
            self.env.write(conn, frame)

    def received(self, conn: Conn, frame: bytes) -> None:
        self.heard.append(CODEC.decode(frame))

    def closed(self, conn: Conn, reason: str) -> None:
        self.closed_reason = reason


def set_at(scenario: Scenario, at: float, node: str, key: str, content: Any) -> None:
    scenario.at(at, lambda sim: sim.call(
        node, lambda p: cast(ReplicaNode, p).client.set(key, content)))


class Clients:
    """The process factory: the hub, and clients whose next start may be given a store of
    the test's choosing (``fresh``: a lost store) and a token."""

    def __init__(self, forger: dict[str, list[bytes]] | None = None) -> None:
        self.fresh: dict[str, MemoryStore] = {}
        self.tokens: dict[str, str | None] = {}
        self.forger = forger or {}

    def __call__(self, env: Env) -> Any:
        if env.node == HUB:
            return HubService(env, keeper=DEFAULT_KEEPER)
        if env.node in self.forger:
            return Forger(env, self.forger[env.node])
        options: dict[str, Any] = {}
        if env.node in self.fresh:
            options = {"store": self.fresh[env.node], "token": self.tokens.get(env.node)}
        return ReplicaNode(env, hub=HUB_ADDRESS,
                           backoff=FibonacciBackoff(unit=BACKOFF_UNIT, cap=BACKOFF_CAP),
                           **options)


def build(scenario: Scenario, clients: Clients) -> tuple[Simulation, MemorySink]:
    sink = MemorySink()
    return scenario.build(clients, codec=ReplicaCodec(), trace=sink), sink


def node_of(sim: Simulation, node: str) -> ReplicaNode:
    return cast(ReplicaNode, sim.process(node))


def lose_store_and_restart(scenario: Scenario, clients: Clients, at: float, node: str, *,
                           with_token: bool) -> None:
    """Crash ``node`` at ``at`` and start it again on an empty store (given its token or
    not): a new incarnation of its id."""

    def crash(sim: Simulation) -> None:
        clients.tokens[node] = node_of(sim, node).token if with_token else None
        clients.fresh[node] = MemoryStore()
        sim.crash(node)

    scenario.at(at, crash)
    scenario.recover(at + 0.5, node)


@pytest.mark.parametrize("seed", [3, 4])
def test_a_new_incarnation_on_a_fresh_store_writes_after_its_old_self_and_reaches_everyone(
        seed: int) -> None:
    """Before: the fresh store numbered its writes 1, 2, ... again and every replica dropped
    them as duplicates of its earlier run's. Now the hub tells it to resume after them."""
    writer, reader = node_ids(2)
    scenario = Scenario(seed=seed, nodes=[HUB, writer, reader], link=LinkModel(latency=LATENCY))
    scenario.listen(HUB, HUB_LISTENER)
    for n in range(10):
        set_at(scenario, 0.3 + n * 0.02, writer, f"k{n % 3}", {"before": n})
    clients = Clients()
    lose_store_and_restart(scenario, clients, 2.0, writer, with_token=True)
    for n in range(5):
        set_at(scenario, 4.0 + n * 0.05, writer, f"after{n}", {"after": n})
    sim, sink = build(scenario, clients)
    sim.run(until=15.0)
    new, other = client_of(sim, writer), client_of(sim, reader)
    assert node_of(sim, writer).refused is None
    assert new.causal.sent == 15, f"seed={seed}: numbered {new.causal.sent}, not after 10"
    for n in range(5):
        assert other.get(f"after{n}") == {"after": n}, f"seed={seed}: after{n} never arrived"
    assert new.items() == other.items(), f"seed={seed}: the replicas diverged"
    # the new incarnation got its old self's writes from the hub's snapshot
    assert new.get("k0") == other.get("k0") is not None
    joins = [r for r in named(sink.rows) if r.node == HUB and r.event == "join"
             and r.peer == writer]
    assert '"new_incarnation":true' in (joins[-1].info or ""), joins[-1]


def test_a_fresh_store_without_the_token_is_refused_and_the_same_store_works_again() -> None:
    """Before: a fresh store claiming a known id joined, and its writes were silently dropped
    everywhere. Now it is refused with a reason, stops dialing, and never reports online;
    the id's own store (restarted) joins and writes as before."""
    seed = 5
    owner, reader = node_ids(2)
    scenario = Scenario(seed=seed, nodes=[HUB, owner, reader], link=LinkModel(latency=LATENCY))
    scenario.listen(HUB, HUB_LISTENER)
    set_at(scenario, 0.5, owner, "x", 1)
    clients = Clients()
    kept: dict[str, MemoryStore] = {}

    def lose(sim: Simulation) -> None:
        kept[owner] = sim.store(owner)
        clients.fresh[owner] = MemoryStore()
        clients.tokens[owner] = None
        sim.crash(owner)

    scenario.at(2.0, lose)
    scenario.recover(2.5, owner)
    set_at(scenario, 3.0, owner, "x", 2)  # queued: never sent
    observed: dict[str, Any] = {}

    def look_then_restore(sim: Simulation) -> None:
        node = node_of(sim, owner)
        observed["refused"] = node.refused
        observed["link"] = node.client.link
        observed["connects"] = node.connects
        del clients.fresh[owner]  # the next start is on the id's own store again
        sim.crash(owner)

    scenario.at(6.0, look_then_restore)
    scenario.recover(6.5, owner)
    set_at(scenario, 8.0, owner, "x", 3)
    sim, _ = build(scenario, clients)
    sim.run(until=12.0)
    refused = observed["refused"]
    assert isinstance(refused, Refused) and refused.code == JoinRefusal.NOT_YOURS
    assert "presented no token" in refused.reason
    assert observed["link"] is LinkState.OFFLINE and observed["connects"] == 1  # no redials
    assert client_of(sim, reader).get("x") == 3
    assert client_of(sim, owner).items() == client_of(sim, reader).items()
    assert node_of(sim, owner).refused is None and node_of(sim, owner).token is not None


def test_a_connection_claiming_a_connected_clients_id_is_refused_and_forges_nothing() -> None:
    """Before: the forger's frames were bound to the victim's id and applied everywhere; the
    victim's own next write (the same sequence number) was dropped as a duplicate, for good.
    Now the forger is refused (4001) and the victim's writes are the ones everyone holds."""
    seed = 6
    victim, reader, forger = node_ids(3)
    forged = Data(id=victim, key="x", old_value=None, value="forged",
                  crc=crc_of("x", "forged", "evil"), vector={victim: 2}, data="evil")
    frames = [CODEC.encode(Subscribe(id=victim, vector={victim: 1})), CODEC.encode(forged)]
    scenario = Scenario(seed=seed, nodes=[HUB, victim, reader, forger],
                        link=LinkModel(latency=LATENCY))
    scenario.listen(HUB, HUB_LISTENER)
    set_at(scenario, 0.5, victim, "y", "first")
    set_at(scenario, 2.0, victim, "x", "mine")
    sim, _ = build(scenario, Clients(forger={forger: frames}))
    sim.run(until=6.0)
    process = cast(Forger, sim.process(forger))
    assert [type(m) for m in process.heard] == [Refused]
    assert cast(Refused, process.heard[0]).code == JoinRefusal.ID_IN_USE
    assert process.closed_reason is not None
    for node in (victim, reader):
        assert client_of(sim, node).get("x") == "mine", node
    assert client_of(sim, reader).items() == client_of(sim, victim).items()


# -- the book and the hub, by hand ------------------------------------------------------------


def open_conn(hub: HubService, env: FakeEnv) -> Conn:
    conn = env.accept()
    hub.opened(conn, conn.remote)
    return conn


def frames_to(env: FakeEnv, conn: Conn) -> list[Any]:
    return [CODEC.decode(frame) for to, frame in env.written if to is conn]


def test_the_record_is_committed_before_the_welcome_leaves_and_survives_a_crash() -> None:
    store = MemoryStore()
    env = FakeEnv(HUB_ID, store=store)
    hub = HubService(env, keeper=KeeperConfig())
    hub.start()
    conn = open_conn(hub, env)
    hub.received(conn, CODEC.encode(Subscribe(id="ada", vector={}, incarnation=7)))
    assert not any(isinstance(m, Welcome) for m in frames_to(env, conn))  # not on disk yet
    assert store.get(CLIENTS_TABLE, "ada") is None  # the record waits in the keeper's group
    env.run_due()
    welcome = next(m for m in frames_to(env, conn) if isinstance(m, Welcome))
    assert welcome.token is not None and welcome.resume == 0
    store.crash()  # whatever was not committed is gone; the record is not
    book = ClientBook(store, lambda: "unused")
    record = book.record("ada")
    assert record is not None and record.incarnation == 7 and not record.confirmed
    assert record.holds(welcome.token) and not record.holds("guess")
    assert welcome.token.encode() not in b"".join(v for _, v in store.scan(CLIENTS_TABLE))


def test_the_book_decides_joins() -> None:
    tokens = iter(["t1", "t2", "t3"])
    book = ClientBook(MemoryStore(), lambda: next(tokens), max_clients=2)
    first = book.admit("ada", None, own=0, known=0, incarnation=1)
    assert first == Admitted("t1", 0, False, first=True)
    # the welcome may have been lost: until ada shows t1, a join without a token is re-issued
    assert book.admit("ada", None, own=0, known=0, incarnation=2) == Admitted(
        "t2", 0, False, first=True)
    assert book.confirm("ada", "t2") and not book.confirm("ada", "t1")
    refused = book.admit("ada", None, own=0, known=0, incarnation=3)
    assert isinstance(refused, Refusal) and refused.code is JoinRefusal.NOT_YOURS
    assert isinstance(book.admit("ada", "t1", own=0, known=0, incarnation=3), Refusal)
    # a restored store (3 of the 9 writes the hub knows): a new incarnation, resumed after 9
    assert book.admit("ada", "t2", own=3, known=9, incarnation=4) == Admitted(
        None, 9, True, first=False)
    # a hub without its keeper has no count: a store behind the highest seen is refused
    behind = book.admit("ada", "t2", own=3, known=None, incarnation=5)
    assert isinstance(behind, Refusal) and behind.code is JoinRefusal.NO_RESUME
    assert book.admit("bob", None, own=0, known=0, incarnation=1) == Admitted(
        "t3", 0, False, first=True)
    full = book.admit("cy", None, own=0, known=0, incarnation=1)
    assert isinstance(full, Refusal) and full.code is JoinRefusal.TOO_MANY_IDS


def test_a_token_is_never_forwarded_and_a_refusal_closes_with_its_code() -> None:
    env = FakeEnv(HUB_ID)
    hub = HubService(env, keeper=None)
    hub.start()
    ada, bob = open_conn(hub, env), open_conn(hub, env)
    hub.received(ada, CODEC.encode(Subscribe(id="ada", vector={})))
    token = next(m for m in frames_to(env, ada) if isinstance(m, Welcome)).token
    assert token is not None
    hub.received(bob, CODEC.encode(Subscribe(id="bob", vector={})))
    env.take_written()
    hub.received(ada, CODEC.encode(Subscribe(id="ada", vector={}, token=token)))  # confirms
    assert env.take_written() == []  # a confirmation is answered by nothing
    record = hub.book.record("ada")
    assert record is not None and record.confirmed
    hub.closed(ada, "peer_closed")
    ada = open_conn(hub, env)
    hub.received(ada, CODEC.encode(Subscribe(id="ada", vector={}, token=token)))  # rejoins
    to_bob = b"".join(frame for to, frame in env.written if to is bob)
    assert b'"subscribe":true' in to_bob and b'"id":"ada"' in to_bob  # forwarded: no keeper
    assert token.encode() not in to_bob and b"token" not in to_bob
    assert frames_to(env, ada) == [Welcome(id=HUB_ID, dest="ada", token=None, resume=0)]
    again = open_conn(hub, env)
    hub.received(again, CODEC.encode(Subscribe(id="bob", vector={})))
    assert frames_to(env, again) == [Refused(id=HUB_ID, dest="bob", code=4001,
                                             reason="client id 'bob' is connected on another "
                                                    "connection")]
    assert env.closes[-1][0] is again and env.closes[-1][1] == JoinRefusal.ID_IN_USE
    assert env.closes[-1][1] != CloseCode.NORMAL and hub.connections == 2


def test_a_write_too_big_to_travel_again_is_refused_by_client_and_hub_and_changes_nothing(
) -> None:
    """A write over half the frame limit would make catch-up frames (a retry, a snapshot row
    beside the vector) over the limit, and every joiner would be closed again and again: the
    client refuses it before numbering anything, and the hub closes a connection that sends
    one anyway (1009), keeping and relaying none of it."""
    env = FakeEnv("ada")
    node = ReplicaNode(env, hub=HUB_ADDRESS, max_frame=16_384)
    client = node.client
    assert client.max_write == 8_192
    client.set("small", "x" * 100)  # not connected: into the offline queue
    queued, vector = len(client.offline_queue), dict(client.vector)
    with pytest.raises(ConfigError, match="nothing was written"):
        client.set("big", "x" * 8_200)
    assert client.get("big") is None and len(client.offline_queue) == queued
    assert client.vector == vector
    client.set("fits", "x" * 8_000)  # under the limit: taken
    assert len(client.offline_queue) == queued + 1

    hub_env = FakeEnv(HUB_ID, store=MemoryStore())
    hub = HubService(hub_env, keeper=KeeperConfig(), codec=ReplicaCodec(max_frame=16_384))
    hub.start()
    ada, bob = open_conn(hub, hub_env), open_conn(hub, hub_env)
    hub.received(ada, CODEC.encode(Subscribe(id="ada", vector={})))
    hub.received(bob, CODEC.encode(Subscribe(id="bob", vector={})))
    hub_env.run_due()
    hub_env.take_written()
    big = "x" * 9_000
    hub.received(ada, CODEC.encode(Data(id="ada", key="k", old_value=None, value="r1",
                                        crc=crc_of("k", "r1", big), vector={"ada": 1},
                                        data=big)))
    hub_env.run_due()
    assert hub_env.closes[-1][:2] == (ada, CloseCode.TOO_BIG)
    assert all(to is not bob for to, _ in hub_env.take_written())  # nothing relayed
    assert hub.keeper is not None and hub.keeper.replica.get("k") is None  # nor kept
