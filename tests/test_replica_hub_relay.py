"""HubRelay: the seed's channel and id index, without sockets."""

from __future__ import annotations

import pytest

from gossamer.core import ConfigError, InvalidMessage, StateError
from gossamer.protocols.dissemination.hub_relay import IdInUse
from gossamer.protocols.replica import (
    Data,
    HubRelay,
    Left,
    Nack,
    Retry,
    Route,
    Subscribe,
    crc_of,
)


def data(sender: str, seq: int = 1) -> Data:
    return Data(id=sender, key="k", old_value=None, value=f"r{seq}", crc=crc_of("k", f"r{seq}"),
                vector={sender: seq})


def relay_with(*conns: str) -> HubRelay:
    relay = HubRelay()
    for conn in conns:
        relay.connect(conn)
        relay.receive(conn, Subscribe(id=conn.upper(), vector={}))
    return relay


def test_multicast_goes_to_everyone_but_the_sender() -> None:
    relay = relay_with("c1", "c2", "c3")
    routes = relay.receive("c1", data("C1"))
    assert sorted(r.to for r in routes) == ["c2", "c3"]


def test_dest_goes_only_to_the_connection_registered_under_it() -> None:
    relay = relay_with("c1", "c2", "c3")
    nack = Nack(id="C1", dest="C3", start=1, end=2)
    assert relay.receive("c1", nack) == [Route("c3", nack)]


def test_an_id_held_by_a_live_connection_cannot_be_bound_by_another() -> None:
    relay = relay_with("c1", "c2")
    relay.connect("c1-new")
    with pytest.raises(IdInUse, match="'C1' is connected on another connection"):
        relay.receive("c1-new", Subscribe(id="C1", vector={"C1": 3}))
    assert relay.connection_of("C1") == "c1" and relay.id_of("c1-new") is None
    assert relay.receive("c2", Nack(id="C2", dest="C1", start=1, end=1))[0].to == "c1"
    # once the first connection is gone, the id is free for the next one
    relay.disconnect("c1")
    relay.receive("c1-new", Subscribe(id="C1", vector={"C1": 3}))
    assert relay.connection_of("C1") == "c1-new"


def test_closing_tells_the_others() -> None:
    relay = relay_with("c1", "c2", "c3")
    routes = relay.disconnect("c2")
    assert sorted(r.to for r in routes) == ["c1", "c3"]
    assert all(r.msg == Left(id="hub", left="C2") for r in routes)
    assert relay.connection_of("C2") is None and len(relay) == 2


def test_a_spoofed_id_is_refused_and_changes_nothing() -> None:
    relay = relay_with("c1", "c2")
    with pytest.raises(InvalidMessage, match="speaks for"):
        relay.receive("c1", data("C2"))
    assert relay.connection_of("C2") == "c2" and relay.id_of("c1") == "C1"


def test_a_retry_carrying_another_clients_message_is_refused() -> None:
    """Before: a client could put a message under another client's id in a retry, and the hub
    (its keeper) applied and forwarded it: a forgery by a joined client."""
    relay = relay_with("c1", "c2")
    forged = Retry(id="C1", dest="C2", retry=(data("C1", 1), data("C2", 7)))
    with pytest.raises(InvalidMessage, match="carries a message of 'C2'"):
        relay.receive("c1", forged)
    own = Retry(id="C1", dest="C2", retry=(data("C1", 1), data("C1", 2)))
    assert relay.receive("c1", own) == [Route("c2", own)]


def test_a_dest_nobody_has_is_refused() -> None:
    relay = relay_with("c1")
    with pytest.raises(InvalidMessage, match="no client"):
        relay.receive("c1", Nack(id="C1", dest="ghost", start=1, end=1))


def test_the_hub_id_cannot_be_claimed() -> None:
    relay = relay_with()
    relay.connect("x")
    with pytest.raises(InvalidMessage):
        relay.receive("x", Subscribe(id="hub", vector={}))


def test_limits_and_misuse() -> None:
    relay = HubRelay(max_connections=1)
    relay.connect("a")
    with pytest.raises(StateError, match="full"):
        relay.connect("b")
    with pytest.raises(ConfigError):
        relay.connect("a")
    with pytest.raises(StateError):
        relay.receive("zzz", Subscribe(id="Z", vector={}))
    with pytest.raises(ConfigError):
        HubRelay(max_connections=0)
