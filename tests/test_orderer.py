"""The ``Orderer`` part: the default accepts at once at a per-key counter, the deferred one holds
every proposal until the test decides it; decisions validate themselves, bad arguments and
illegal moves raise at once. The seed-000 hub with a deferred orderer stores and forwards a data
message only once accepted (Scribe's root: tests/test_scribe_sim.py).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from gossamer.core.errors import ConfigError, StateError
from gossamer.protocols.ordering import (
    Accepted,
    Decision,
    DeferredOrderer,
    ImmediateOrderer,
    Orderer,
    ProposalState,
    Redirected,
    Refused,
)
from gossamer.protocols.replica import HUB_ID, Data, ReplicaCodec, Subscribe, crc_of
from gossamer.protocols.replica.hub_service import DEFAULT_KEEPER, HubService
from gossamer.protocols.replica.keeper import KeeperConfig
from gossamer.runtimes.sim import MemoryStore
from gossamer.testing import FakeConn, FakeEnv, info_of

# -- the decisions -------------------------------------------------------------------------------


def test_decisions_name_their_state_and_cannot_change() -> None:
    assert Accepted(3).state is ProposalState.ACCEPTED
    assert Redirected("n1").state is ProposalState.REDIRECTED
    assert Refused("no_quorum").state is ProposalState.REFUSED
    with pytest.raises(dataclasses.FrozenInstanceError):
        Accepted(3).position = 4  # type: ignore[misc]
    assert not hasattr(Accepted(3), "__dict__")  # slotted


@pytest.mark.parametrize("make", [
    lambda: Accepted(0),
    lambda: Accepted(-1),
    lambda: Accepted(True),
    lambda: Accepted(1.0),  # type: ignore[arg-type]
    lambda: Redirected("not an id"),
    lambda: Redirected(""),
    lambda: Refused(""),
    lambda: Refused("x" * 201),
    lambda: Refused(7),  # type: ignore[arg-type]
])
def test_a_decision_that_cannot_exist_is_refused_by_its_constructor(make: Any) -> None:
    with pytest.raises(ValueError):
        make()


# -- the default ---------------------------------------------------------------------------------


def test_the_immediate_orderer_accepts_during_propose_at_a_counter_per_key() -> None:
    orderer = ImmediateOrderer()
    got: list[tuple[str, Decision]] = []
    for key in ("t", "t", "u", "t", "u"):
        orderer.propose(key, object(), lambda d, k=key: got.append((k, d)))
    assert got == [("t", Accepted(1)), ("t", Accepted(2)), ("u", Accepted(1)),
                   ("t", Accepted(3)), ("u", Accepted(2))]
    assert (orderer.position("t"), orderer.position("u"), orderer.position("v")) == (3, 2, 0)
    assert isinstance(orderer, Orderer)


@pytest.mark.parametrize("orderer_type", [ImmediateOrderer, DeferredOrderer])
@pytest.mark.parametrize("key, on_decided", [
    ("", print),
    (None, print),
    (7, print),
    ("t", None),
    ("t", "not callable"),
])
def test_a_bad_proposal_raises_at_once_and_is_not_held(
        orderer_type: type[Orderer], key: Any, on_decided: Any) -> None:
    orderer = orderer_type()
    with pytest.raises(ConfigError):
        orderer.propose(key, "item", on_decided)
    if isinstance(orderer, DeferredOrderer):
        assert orderer.proposals == [] and orderer.pending() == []


def test_orderer_is_abstract() -> None:
    with pytest.raises(TypeError):
        Orderer()  # type: ignore[abstract]


# -- the deferred orderer ------------------------------------------------------------------------


def test_nothing_is_decided_until_the_test_says_so_then_exactly_once() -> None:
    orderer = DeferredOrderer()
    got: list[tuple[str, Decision]] = []
    for item in ("a", "b", "c", "d"):
        orderer.propose("t" if item != "c" else "u", item,
                        lambda d, i=item: got.append((i, d)))
    assert got == []
    assert [p.item for p in orderer.pending()] == ["a", "b", "c", "d"]
    assert [p.item for p in orderer.pending("t")] == ["a", "b", "d"]
    a, b, c, d = orderer.proposals
    assert orderer.accept(b) == Accepted(1)  # in the orderer's order, not the proposals'
    assert orderer.accept(a) == Accepted(2)
    assert orderer.redirect(c, "n7") == Redirected("n7")
    assert orderer.refuse(d, "no_quorum") == Refused("no_quorum")
    assert got == [("b", Accepted(1)), ("a", Accepted(2)), ("c", Redirected("n7")),
                   ("d", Refused("no_quorum"))]
    assert [p.state for p in orderer.proposals] == [
        ProposalState.ACCEPTED, ProposalState.ACCEPTED, ProposalState.REDIRECTED,
        ProposalState.REFUSED]
    assert b.decision == Accepted(1) and orderer.pending() == []


def test_positions_are_per_key_given_or_next_and_each_decided_once() -> None:
    orderer = DeferredOrderer()
    for key in ("t", "t", "t", "u", "t"):
        orderer.propose(key, None, lambda d: None)
    t1, t2, t3, u1, t4 = orderer.proposals
    assert orderer.accept(t1, position=5) == Accepted(5)
    assert orderer.accept(u1) == Accepted(1)  # another key counts on its own
    assert orderer.accept(t2) == Accepted(6)  # the highest decided + 1
    with pytest.raises(ConfigError):
        orderer.accept(t3, position=5)
    with pytest.raises(ValueError):
        orderer.accept(t3, position=0)
    assert t3.state is ProposalState.PENDING  # a refused move changes nothing
    assert orderer.accept(t3, position=2) == Accepted(2)
    assert orderer.accept_all() == [Accepted(7)]
    assert t4.decision == Accepted(7)


def test_deciding_twice_or_another_orderers_proposal_raises_naming_the_state() -> None:
    orderer, other = DeferredOrderer(), DeferredOrderer()
    got: list[Decision] = []
    orderer.propose("t", "a", got.append)
    other.propose("t", "b", got.append)
    mine, theirs = orderer.proposals[0], other.proposals[0]
    orderer.refuse(mine, "full")
    for move in (lambda: orderer.accept(mine), lambda: orderer.redirect(mine, "n1"),
                 lambda: orderer.refuse(mine, "again")):
        with pytest.raises(StateError, match="refused already"):
            move()
    with pytest.raises(StateError, match="not this orderer's"):
        orderer.accept(theirs)
    with pytest.raises(ValueError):
        other.redirect(theirs, "bad id!")
    assert got == [Refused("full")] and theirs.state is ProposalState.PENDING


def test_a_decision_can_come_from_a_timer_later_sans_io() -> None:
    """What a Multi-Paxos orderer does: answer from a later event of the node (here a timer
    of a hand-stepped env), never during ``propose``."""
    env = FakeEnv("a")
    orderer = DeferredOrderer()
    got: list[tuple[float, Decision]] = []
    orderer.propose("t", "x", lambda d: got.append((env.now(), d)))
    env.set_timer(0.3, lambda: orderer.accept(orderer.pending()[0]))
    env.advance(0.2)
    assert got == []
    env.advance(0.2)
    assert got == [(0.3, Accepted(1))]


# -- the hub's orderer ---------------------------------------------------------------------------

CODEC = ReplicaCodec()


def data(client: str, seq: int, *, key: str = "k", crc: int | None = None) -> Data:
    value = f"{seq}-{client}"
    return Data(id=client, key=key, old_value=None, value=value,
                crc=crc_of(key, value, None) if crc is None else crc, vector={client: seq})


def hub_with(orderer: Orderer | None, *, keeper: KeeperConfig | None = DEFAULT_KEEPER,
             ) -> tuple[HubService, FakeEnv, list[FakeConn]]:
    """A running hub with clients a, b and c connected (each said who it is)."""
    env = FakeEnv(HUB_ID)
    hub = HubService(env, keeper=keeper, orderer=orderer)
    hub.start()
    conns = [env.accept() for _ in "abc"]
    for conn, client in zip(conns, "abc", strict=True):
        hub.opened(conn, conn.remote)
        hub.received(conn, CODEC.encode(Subscribe(id=client, vector={})))
    env.run_due()  # the keeper's group commit lands: its answers go out
    env.written.clear()
    env.rows.clear()
    return hub, env, conns


def test_the_hub_stores_and_forwards_a_data_message_only_once_accepted() -> None:
    orderer = DeferredOrderer()
    hub, env, (a, b, c) = hub_with(orderer)
    assert hub.keeper is not None
    first, other_key, second = data("a", 1), data("a", 2, key="j"), data("a", 3)
    frames = [CODEC.encode(m) for m in (first, other_key, second)]
    for frame in frames:
        hub.received(a, frame)
    assert env.written == [] and hub.keeper.logged("a") is None  # neither sent nor stored
    assert [(p.key, p.item) for p in orderer.pending()] == [
        ("k", first), ("j", other_key), ("k", second)]  # keyed by object
    orderer.accept(orderer.proposals[1])
    env.run_due()
    # accepted, but the hub relays what its keeper delivered (durably), and a:2 waits for a:1
    assert env.written == []
    orderer.accept(orderer.proposals[0])
    assert env.written == []  # delivered, not yet durable: not sent
    orderer.accept(orderer.proposals[2])
    env.run_due()
    # in delivery order, as received, never back to a
    assert env.take_written() == [(b, frames[0]), (c, frames[0]), (b, frames[1]), (c, frames[1]),
                                  (b, frames[2]), (c, frames[2])]
    assert hub.keeper.logged("a") == (1, 3)


def test_a_redirected_or_refused_data_message_is_dropped_traced_and_not_stored() -> None:
    orderer = DeferredOrderer()
    hub, env, (a, _b, _c) = hub_with(orderer)
    assert hub.keeper is not None
    hub.received(a, CODEC.encode(data("a", 1)))
    hub.received(a, CODEC.encode(data("a", 2)))
    orderer.redirect(orderer.proposals[0], "n2")
    orderer.refuse(orderer.proposals[1], "no_quorum")
    assert env.written == [] and hub.keeper.logged("a") is None
    drops = [info_of(r) for r in env.traced("drop")]
    assert [(d["reason"], d.get("leader"), d.get("detail")) for d in drops] == [
        ("order_redirected", "n2", None), ("order_refused", None, "no_quorum")]
    assert [r.msg for r in env.traced("drop")] == ["a:1", "a:2"]


def test_only_data_is_ordered_and_a_corrupt_one_is_refused_before_it() -> None:
    orderer = DeferredOrderer()
    hub, env, (a, _b, _c) = hub_with(orderer)
    hub.received(a, CODEC.encode(Subscribe(id="a", vector={})))
    env.run_due()
    # answered at once: an empty retry, then the hub's vector
    assert [conn for conn, _ in env.take_written()] == [a, a]
    hub.received(a, CODEC.encode(data("a", 1, crc=12345)))
    assert orderer.proposals == []
    assert env.drop_reasons() == ["crc"]


def test_a_decision_after_the_hub_stopped_forwards_nothing() -> None:
    orderer = DeferredOrderer()
    hub, env, (a, _b, _c) = hub_with(orderer, keeper=None)
    hub.received(a, CODEC.encode(data("a", 1)))
    hub.stop()
    orderer.accept(orderer.proposals[0])
    assert env.written == []


def test_without_a_keeper_an_accepted_data_message_is_relayed_as_received() -> None:
    orderer = DeferredOrderer()
    hub, env, (a, b, c) = hub_with(orderer, keeper=None)
    frame = CODEC.encode(data("a", 1))
    hub.received(a, frame)
    assert env.written == []
    hub.closed(a, "gone")  # the sender left while it was being ordered: it is still relayed
    env.written.clear()
    orderer.accept_all()
    assert env.take_written() == [(b, frame), (c, frame)]


@pytest.mark.parametrize("orderer", [None, ImmediateOrderer()])
def test_the_default_orderer_is_skipped_and_data_is_forwarded_once_durable(
        orderer: Orderer | None) -> None:
    hub, env, (a, b, c) = hub_with(orderer)
    assert isinstance(hub.orderer, ImmediateOrderer) and hub._ordering is None
    frame = CODEC.encode(data("a", 1))
    hub.received(a, frame)
    assert env.written == []  # the keeper's delivery of it is on its way to disk
    env.run_due()
    assert env.take_written() == [(b, frame), (c, frame)]


def test_a_power_loss_before_the_group_commit_relays_nothing() -> None:
    """What the hub received but had not committed is never relayed: a power loss then makes
    it forget only what nobody else saw (its writer resends it)."""
    hub, env, (a, _b, _c) = hub_with(None)
    assert hub.keeper is not None
    hub.received(a, CODEC.encode(data("a", 1)))
    hub.keeper.store.flush()  # the group is on its way to disk
    assert isinstance(env.store, MemoryStore)
    env.store.crash()  # and lost with the power
    env.run_due()
    assert env.written == []
    assert not any(r.event == "deliver" for r in env.rows)  # not delivered either


def test_the_hub_refuses_an_orderer_that_is_not_one() -> None:
    with pytest.raises(TypeError):
        HubService(FakeEnv(HUB_ID), orderer=object())  # type: ignore[arg-type]
