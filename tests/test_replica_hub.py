"""The seed-000 hub on real WebSockets: routing, the id index, bad input, slow consumers, HTTP.

Clients are plain ``websockets`` connections speaking the seed's JSON (built with the wire
classes and ``ReplicaCodec``). "X does not receive M" is shown by a barrier: a message sent
after M was delivered elsewhere must be the next one X sees. Waits are on messages, trace rows
or close frames with timeouts, never fixed sleeps.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
import sys
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar, cast

import aiohttp
import orjson
import pyarrow.parquet as pq
import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from gossamer.core import ConfigError, StateError
from gossamer.core.messages import Message
from gossamer.core.trace import MemorySink, Row, TraceRow
from gossamer.core.traceio import SCHEMA, trace_path
from gossamer.protocols.replica import (
    HUB_ID,
    Data,
    JoinRefusal,
    Left,
    Nack,
    Refused,
    ReplicaCodec,
    Retry,
    Subscribe,
    Welcome,
    crc_of,
)
from gossamer.runtimes.net.framing import text_frame
from gossamer.services.replica import HubServer

WAIT = 20.0  # wall seconds: upper bounds only; every wait ends as soon as its event happens
CODEC = ReplicaCodec()
T = TypeVar("T")


def run(scenario: Callable[[], Coroutine[Any, Any, T]]) -> T:
    return asyncio.run(scenario())


def data(client: str, seq: int, *, key: str = "k", body: Any = None) -> Data:
    value = f"{seq}-{client}"
    return Data(id=client, key=key, old_value=None, value=value,
                crc=crc_of(key, value, body), vector={client: seq}, data=body)


class WatchedSink(MemorySink):
    """A memory sink whose rows can be awaited."""

    def __init__(self) -> None:
        super().__init__()
        self._changed = asyncio.Event()

    def append(self, row: Row) -> None:
        super().append(row)
        self._changed.set()

    async def wait_for(self, predicate: Callable[[TraceRow], bool]) -> TraceRow:
        async with asyncio.timeout(WAIT):
            while True:
                for row in self.named():
                    if predicate(row):
                        return row
                self._changed.clear()
                await self._changed.wait()

    def events(self, event: str, layer: str = "hub") -> list[TraceRow]:
        return [row for row in self.named() if row.event == event and row.layer == layer]

    async def hub_row(self, event: str, **match: Any) -> TraceRow:
        """The hub's first ``event`` row (layer ``hub``) whose columns match."""
        return await self.wait_for(lambda r: r.layer == "hub" and r.event == event and all(
            getattr(r, name) == value for name, value in match.items()))

    async def conn_row(self, event: str, **info: Any) -> TraceRow:
        """The runtime's first ``event`` row (layer ``conn``) whose info has ``info``."""
        return await self.wait_for(lambda r: r.layer == "conn" and r.event == event and all(
            orjson.loads(r.info or "{}").get(name) == value for name, value in info.items()))

    async def closed_conn(self, leave: TraceRow) -> dict[str, Any]:
        """What the runtime recorded of the connection a hub ``leave`` row is about."""
        conn = orjson.loads(leave.info or "{}")["conn"]
        row = await self.conn_row("close", conn=conn)
        return cast(dict[str, Any], orjson.loads(row.info or "{}"))


class Peer:
    """A client connection that speaks seed-000 messages."""

    def __init__(self, ws: ClientConnection, name: str) -> None:
        self.ws = ws
        self.name = name
        self.token: str | None = None  # issued by the hub at the join

    async def send(self, msg: Message) -> str:
        text = CODEC.encode(msg).decode()
        await self.ws.send(text)
        return text

    async def recv_text(self) -> str:
        frame = await asyncio.wait_for(self.ws.recv(), WAIT)
        assert isinstance(frame, str), frame
        return frame

    async def recv(self) -> Message:
        return CODEC.decode(await self.recv_text())

    async def recv_subscriber(self) -> str:
        """The id of the ``subscribe`` that must come next."""
        msg = await self.recv()
        assert isinstance(msg, Subscribe), msg
        return msg.id

    async def join(self, vector: dict[str, int] | None = None, token: str | None = None) -> Welcome:
        """Send the join (a subscribe) and read the hub's ``welcome``: the first frame the hub
        sends a connection after its first frame."""
        await self.send(Subscribe(id=self.name, vector=vector or {}, token=token))
        welcome = await self.recv()
        assert isinstance(welcome, Welcome) and welcome.dest == self.name, welcome
        if welcome.token is not None:
            self.token = welcome.token
        return welcome

    async def closed_with(self) -> tuple[int, str]:
        """Read until the hub closes the connection; its close code and reason."""
        with pytest.raises(ConnectionClosed) as closed:
            async with asyncio.timeout(WAIT):
                while True:
                    await self.ws.recv()
        assert closed.value.rcvd is not None, "the hub closed without a close frame"
        return closed.value.rcvd.code, closed.value.rcvd.reason


@asynccontextmanager
async def hub_and_peers(
    names: list[str], *, path: str = "/ws", **options: Any,
) -> AsyncIterator[tuple[HubServer, WatchedSink, AsyncExitStack, dict[str, Peer]]]:
    """A running hub and one joined peer per name, joined one after the other: each has its
    ``welcome`` (and token) and the peers before it heard its ``subscribe``, so the hub has
    bound every id. The hub is the seed's bare relay unless ``keeper`` is given."""
    options.setdefault("keeper", None)
    sink = WatchedSink()
    async with AsyncExitStack() as stack:
        hub = HubServer(trace=sink, **options)
        await hub.start()
        stack.push_async_callback(hub.stop)
        peers: dict[str, Peer] = {}
        for name in names:
            peer = await open_peer(stack, hub, name, path=path)
            assert (await peer.join()).token
            for earlier in peers.values():
                assert await earlier.recv_subscriber() == name
            peers[name] = peer
        yield hub, sink, stack, peers


async def open_peer(stack: AsyncExitStack, hub: HubServer, name: str, *, path: str = "/ws",
                    **options: Any) -> Peer:
    host, port = hub.address
    ws = await stack.enter_async_context(
        connect(f"ws://{host}:{port}{path}", open_timeout=WAIT, **options))
    return Peer(ws, name)


# -- routing ---------------------------------------------------------------------------------


def test_data_from_a_reaches_b_and_c_but_not_a() -> None:
    async def scenario() -> None:
        async with hub_and_peers(["a", "b", "c"], path="/") as (_, _, _, peers):
            a, b, c = peers["a"], peers["b"], peers["c"]
            sent = await a.send(data("a", 1))
            assert await b.recv_text() == sent  # the original frame, forwarded as received
            assert await c.recv() == data("a", 1)
            barrier = data("b", 1)
            await b.send(barrier)
            assert await a.recv() == barrier  # a's own message never came back
            assert await c.recv() == barrier

    run(scenario)


def test_a_nack_with_dest_reaches_only_that_client() -> None:
    async def scenario() -> None:
        async with hub_and_peers(["a", "b", "c"]) as (_, _, _, peers):
            a, b, c = peers["a"], peers["b"], peers["c"]
            nack = Nack(id="a", dest="b", start=1, end=3)
            await a.send(nack)
            assert await b.recv() == nack
            barrier = data("b", 1)
            await b.send(barrier)
            assert await c.recv() == barrier
            assert await a.recv() == barrier

    run(scenario)


@pytest.mark.parametrize("token", [False, True])
def test_a_second_connection_for_a_connected_id_is_refused_and_its_frames_never_land(
        token: bool) -> None:
    """One id, one writer: a fresh connection claiming "a" while "a" is connected gets a
    ``refused`` frame and a close with code 4001, with or without a's token; it is never
    bound, so nothing it sends is relayed and a's own next write still reaches b."""
    async def scenario() -> None:
        async with hub_and_peers(["a", "b"]) as (hub, sink, stack, peers):
            a, b = peers["a"], peers["b"]
            forger = await open_peer(stack, hub, "a")
            await forger.send(Subscribe(id="a", vector={}, token=a.token if token else None))
            refused = await forger.recv()
            assert isinstance(refused, Refused) and refused.code == JoinRefusal.ID_IN_USE
            assert "connected on another connection" in refused.reason
            code, reason = await forger.closed_with()
            assert code == 4001 and reason == refused.reason
            drop = await sink.hub_row("drop")
            assert orjson.loads(drop.info or "{}")["reason"] == "join_refused"
            write = data("a", 1)
            await a.send(write)
            assert await b.recv() == write  # the first thing b hears: nothing of the forger's
            assert hub.connections == 2
            assert [row.peer for row in sink.events("join")] == ["a", "b"]

    run(scenario)


def test_a_known_id_needs_its_token_and_a_first_frame_that_carries_it() -> None:
    async def scenario() -> None:
        async with hub_and_peers(["a", "b"]) as (hub, _sink, stack, peers):
            a, b = peers["a"], peers["b"]
            token = a.token
            assert token is not None
            # a shows it kept its token (as a client does once it stored it): the id is a's
            # for good; until then a join without a token would be given a new one
            await a.send(Subscribe(id="a", vector={}, token=token))
            await _sink.hub_row("confirm", peer="a")  # answered by nothing, forwarded nowhere
            await a.ws.close()
            assert (await b.recv()) == Left(id=HUB_ID, left="a")
            for first in (Subscribe(id="a", vector={}), Subscribe(id="a", vector={}, token="x"),
                          data("a", 1)):
                impostor = await open_peer(stack, hub, "a")
                await impostor.send(first)
                refused = await impostor.recv()
                assert isinstance(refused, Refused), refused
                expected = (JoinRefusal.FIRST_FRAME if isinstance(first, Data)
                            else JoinRefusal.NOT_YOURS)
                assert refused.code == expected
                assert (await impostor.closed_with())[0] == expected
            back = await open_peer(stack, hub, "a")
            welcome = await back.join(token=token)
            assert welcome.token is None and welcome.resume == 0  # nothing new to keep
            assert await b.recv_subscriber() == "a"
            assert hub.connections == 2

    run(scenario)


def test_closing_a_connection_sends_left_to_the_others() -> None:
    async def scenario() -> None:
        async with hub_and_peers(["a", "b", "c"]) as (_, sink, _, peers):
            await peers["c"].ws.close()
            for name in ("a", "b"):
                text = await peers[name].recv_text()
                assert orjson.loads(text) == {"id": "hub", "left": "c"}
                assert CODEC.decode(text) == Left(id=HUB_ID, left="c")
            leave = await sink.hub_row("leave", peer="c")
            assert orjson.loads(leave.info or "{}")["frames_in"] == 1
            info = await sink.closed_conn(leave)
            assert info["frames_in"] == 1 and info["frames_out"] == 1  # its welcome
            assert info["code"] == 1000 and info["reason"] == "peer_closed"

    run(scenario)


# -- bad input -------------------------------------------------------------------------------

BAD_FRAMES: dict[str, tuple[str, str, str]] = {
    # case: (frame sent by "a", trace reason, words in the detail)
    "malformed JSON": ('{"id": "a", "key": ', "decode", "not JSON"),
    "not an object": ('["a"]', "decode", "JSON object"),
    "wrong field types": (
        '{"id": "a", "key": 5, "old_value": null, "value": "v", "crc": 1, "vector": {"a": 1}}',
        "invalid", "wrong type"),
    "unknown shape": ('{"id": "a", "hello": true}', "invalid", "not a seed-000 message"),
    "unknown dest": (CODEC.encode(Nack(id="a", dest="zed", start=1, end=1)).decode(),
                     "invalid", "no client 'zed'"),
    "spoofed id": (CODEC.encode(data("b", 9)).decode(), "invalid", "speaks for 'a', not 'b'"),
    "hub's id": (CODEC.encode(Left(id=HUB_ID, left="b")).decode(), "invalid", "own id"),
}


@pytest.mark.parametrize("case", sorted(BAD_FRAMES))
def test_a_bad_frame_is_dropped_and_traced_and_the_connection_still_works(
    case: str, caplog: pytest.LogCaptureFixture,
) -> None:
    frame, reason, detail = BAD_FRAMES[case]
    caplog.set_level(logging.INFO, logger="gossamer.hub")

    async def scenario() -> None:
        async with hub_and_peers(["a", "b"]) as (_, sink, _, peers):
            a, b = peers["a"], peers["b"]
            await a.ws.send(frame)
            drop = await sink.hub_row("drop")
            assert drop.peer == "a" and drop.size == len(frame.encode())
            info = orjson.loads(drop.info or "{}")
            assert info["reason"] == reason
            assert detail in info["detail"]
            good = data("a", 1)
            await a.send(good)
            assert await b.recv() == good  # the bad frame was not forwarded
            await b.send(data("b", 1))
            assert await a.recv() == data("b", 1)

    run(scenario)


def test_a_binary_frame_is_dropped() -> None:
    async def scenario() -> None:
        async with hub_and_peers(["a", "b"]) as (_, sink, _, peers):
            await peers["a"].ws.send(CODEC.encode(data("a", 1)))  # bytes: a binary frame
            await sink.conn_row("drop", reason="binary")  # framing: refused by the runtime
            await peers["a"].send(data("a", 2))
            assert await peers["b"].recv() == data("a", 2)

    run(scenario)


async def closed_alone(sink: WatchedSink, a: Peer, b: Peer, c: Peer, *, code: int,
                       reason: str) -> TraceRow:
    """``a`` is closed with ``code``, ``b`` and ``c`` are told it left and still talk; the
    runtime traced a ``drop`` with ``reason`` (returned) and ``a``'s close with ``code``."""
    closed, _ = await a.closed_with()
    assert closed == code
    for peer in (b, c):
        assert await peer.recv() == Left(id=HUB_ID, left="a")
    await b.send(data("b", 1))
    assert await c.recv() == data("b", 1)
    drop = await sink.conn_row("drop", reason=reason)
    leave = await sink.hub_row("leave", peer="a")
    assert orjson.loads(leave.info or "{}")["reason"] == reason
    info = await sink.closed_conn(leave)
    assert info["code"] == code and info["reason"] == reason
    return drop


def test_a_text_frame_that_is_not_utf8_closes_only_that_connection_with_1007() -> None:
    async def scenario() -> None:
        async with hub_and_peers(["a", "b", "c"]) as (_, sink, _, peers):
            a, b, c = peers["a"], peers["b"], peers["c"]
            await a.send(data("a", 1))
            for peer in (b, c):
                assert await peer.recv() == data("a", 1)
            invalid = b'{"id": "a", "key": "k\xff"}'
            await a.ws.send(invalid, text=True)  # a text frame, not UTF-8
            await closed_alone(sink, a, b, c, code=1007, reason="invalid_text")

    run(scenario)


def test_an_oversized_frame_closes_only_that_connection_with_1009(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="gossamer.hub")

    async def scenario() -> None:
        async with hub_and_peers(["a", "b", "c"], max_frame=1024) as (_, sink, _, peers):
            a, b, c = peers["a"], peers["b"], peers["c"]
            await a.send(data("a", 1, body="x" * 2000))
            await closed_alone(sink, a, b, c, code=1009, reason="too_large")

    run(scenario)
    assert "closed it with 1009" in caplog.text


# -- slow consumers --------------------------------------------------------------------------


async def flood_until_left(a: Peer, b: Peer, gone: str) -> int:
    """``a`` sends big data messages, ``b`` reads each, until ``b`` hears ``gone`` left;
    returns the last sequence number sent."""
    body = "x" * 16_000
    left = Left(id=HUB_ID, left=gone)
    seq = 0
    while True:
        seq += 1
        assert seq < 5_000, f"{gone} was never disconnected"
        await a.send(data("a", seq, body=body))
        got = await b.recv()
        if got == left:
            assert await b.recv() == data("a", seq, body=body)
            return seq
        assert got == data("a", seq, body=body)


def test_a_slow_consumer_is_disconnected_with_a_reason_and_the_others_keep_receiving() -> None:
    async def scenario() -> None:
        async with hub_and_peers(["a", "b"], send_queue_limit=5,
                                 close_timeout=WAIT) as (hub, sink, stack, peers):
            a, b = peers["a"], peers["b"]
            slow = await subscribe_slow_peer(stack, hub, [a, b])
            seq = await flood_until_left(a, b, "slow")
            await a.send(data("a", seq + 1))
            assert await b.recv() == data("a", seq + 1)  # b never stalled
            code, reason = await slow.closed_with()  # "slow" reads its backlog, then the close
            assert code == 1008 and "slow consumer" in reason
            leave = await sink.hub_row("leave", peer="slow")
            info = await sink.closed_conn(leave)
            assert info["code"] == 1008 and info["reason"] == "slow_consumer"
            assert hub.connections == 2

    run(scenario)


def test_a_consumer_that_never_reads_is_aborted_after_the_close_timeout() -> None:
    async def scenario() -> None:
        async with hub_and_peers(["a", "b"], send_queue_limit=5,
                                 close_timeout=0.2) as (hub, sink, stack, peers):
            a, b = peers["a"], peers["b"]
            stuck = await open_slow_peer(stack, hub, "stuck")
            await stuck.send(Subscribe(id="stuck", vector={}))
            assert await a.recv_subscriber() == "stuck"
            assert await b.recv_subscriber() == "stuck"
            seq = await flood_until_left(a, b, "stuck")
            # "stuck" never reads: the hub gives up on the close handshake and drops the socket
            leave = await sink.hub_row("leave", peer="stuck")
            assert (await sink.closed_conn(leave))["code"] == 1008
            await a.send(data("a", seq + 1))
            assert await b.recv() == data("a", seq + 1)
            assert hub.connections == 2

    run(scenario)


async def open_slow_peer(stack: AsyncExitStack, hub: HubServer, name: str) -> Peer:
    """A client that does not read: a tiny receive buffer and a one-frame receive queue."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    try:
        await asyncio.get_running_loop().sock_connect(sock, hub.address)
    except BaseException:
        sock.close()
        raise
    return await open_peer(stack, hub, name, sock=sock, max_queue=1, close_timeout=0.5)


async def subscribe_slow_peer(stack: AsyncExitStack, hub: HubServer, others: list[Peer]) -> Peer:
    """A slow peer "slow" that has subscribed, once every one of ``others`` has heard it."""
    slow = await open_slow_peer(stack, hub, "slow")
    await slow.join()
    for peer in others:
        assert await peer.recv_subscriber() == "slow"
    return slow


# -- the send path: one write per iteration, backpressure --------------------------------------


def hub_connection(hub: HubServer, client: str) -> Any:
    """The runtime's connection of ``client`` at the hub (white box: the send path's state)."""
    assert hub.service is not None
    return hub.service.relay.connection_of(client)


def handle(hub: HubServer, conn: Any, frame: bytes) -> None:
    """``frame`` from ``conn``, as the runtime's reader hands it to the hub."""
    assert hub.service is not None
    hub.service.received(conn, frame)


class CountingTransport:
    """Wraps a connection's transport and records every write."""

    def __init__(self, inner: asyncio.Transport) -> None:
        self.inner = inner
        self.writes: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.writes.append(bytes(data))
        self.inner.write(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@pytest.mark.parametrize("length", [0, 1, 125, 126, 127, 65_535, 65_536, 70_000])
def test_text_frame_is_a_final_unmasked_text_frame_with_the_shortest_length(length: int) -> None:
    payload = bytes(i % 251 for i in range(length))
    frame = text_frame(payload)
    assert frame[0] == 0x81  # FIN, text
    assert frame[1] & 0x80 == 0  # a server's frame is not masked
    if length < 126:
        assert (frame[1], frame[2:]) == (length, payload)
    elif length < 65_536:
        assert frame[1] == 126 and int.from_bytes(frame[2:4], "big") == length
        assert frame[4:] == payload
    else:
        assert frame[1] == 127 and int.from_bytes(frame[2:10], "big") == length
        assert frame[10:] == payload


def test_frames_queued_in_one_loop_iteration_reach_a_peer_in_one_write_in_order() -> None:
    async def scenario() -> None:
        async with hub_and_peers(["a", "b", "c"]) as (hub, sink, _, peers):
            sender = hub_connection(hub, "a")
            receiver = hub_connection(hub, "b")
            counting = CountingTransport(receiver.transport)
            receiver.transport = counting
            texts = [CODEC.encode(data("a", seq)).decode() for seq in range(1, 11)]
            for text in texts:  # as the read loop handles frames that arrived together
                handle(hub, sender, text.encode())
            for text in texts:
                assert await peers["b"].recv_text() == text
                assert await peers["c"].recv_text() == text
            assert counting.writes == [b"".join(text_frame(t.encode()) for t in texts)]
            assert receiver.frames_out == 2 + len(texts)  # the two subscribes first
            await peers["b"].ws.close()
            leave = await sink.hub_row("leave", peer="b")
            assert (await sink.closed_conn(leave))["frames_out"] == 2 + len(texts)

    run(scenario)


def test_a_batch_from_several_senders_reaches_each_peer_without_its_own_frames_in_order() -> None:
    async def scenario() -> None:
        async with hub_and_peers(["a", "b", "c"]) as (hub, _, _stack, peers):
            conns = {name: hub_connection(hub, name) for name in "abc"}
            counting = {name: CountingTransport(conns[name].transport) for name in "abc"}
            for name in "abc":
                conns[name].transport = counting[name]
            order = ["a", "b", "a", "c", "a", "b"]  # handled in one loop iteration
            seqs = {name: 0 for name in "abc"}
            sent: list[tuple[str, str]] = []
            for name in order:
                seqs[name] += 1
                text = CODEC.encode(data(name, seqs[name])).decode()
                sent.append((name, text))
                handle(hub, conns[name], text.encode())
            # a frame for one connection, handled after them, comes after them
            nack = CODEC.encode(Nack(id="c", dest="a", start=1, end=1)).decode()
            handle(hub, conns["c"], nack.encode())
            for name in "abc":
                expected = [text for sender, text in sent if sender != name]
                if name == "a":
                    expected.append(nack)
                for text in expected:
                    assert await peers[name].recv_text() == text
                frames = b"".join(text_frame(t.encode()) for t in expected)
                assert b"".join(counting[name].writes) == frames
                assert len(counting[name].writes) == 1  # one write per loop iteration
                # its welcome, and the subscribes of those that joined after it, first
                assert conns[name].frames_out == 3 - "abc".index(name) + len(expected)
                assert conns[name].queued == 0

    run(scenario)


def test_a_paused_transport_keeps_frames_in_the_backlog_and_sends_them_all_in_order() -> None:
    async def scenario() -> None:
        async with hub_and_peers(["a", "b"], send_queue_limit=1000,
                                 close_timeout=WAIT) as (hub, _, stack, peers):
            a, b = peers["a"], peers["b"]
            slow = await subscribe_slow_peer(stack, hub, [a, b])
            conn = hub_connection(hub, "slow")
            body = "x" * 16_000
            seq = 0
            while not (conn.blocked and conn.queued >= 5):  # "slow" reads nothing yet
                seq += 1
                assert seq < 500, "the transport never paused"
                await a.send(data("a", seq, body=body))
                assert await b.recv() == data("a", seq, body=body)  # the hub handled it
            assert conn.writer is not None and not conn.writer.done()
            for _ in range(5):  # more while it is paused: they queue behind the rest
                seq += 1
                await a.send(data("a", seq, body=body))
                assert await b.recv() == data("a", seq, body=body)
            assert conn.blocked and conn.queued >= 10
            for expected in range(1, seq + 1):  # now "slow" reads: everything, in order
                assert await slow.recv() == data("a", expected, body=body)
            await a.send(data("a", seq + 1))
            assert await slow.recv() == data("a", seq + 1)
            assert not conn.blocked and not conn.backlog
            assert hub.connections == 3

    run(scenario)


# -- capacity, HTTP --------------------------------------------------------------------------


def test_the_hub_refuses_connections_beyond_max_connections() -> None:
    async def scenario() -> None:
        async with hub_and_peers(["a", "b"], max_connections=2) as (hub, sink, stack, peers):
            extra = await open_peer(stack, hub, "c")
            code, reason = await extra.closed_with()
            assert code == 1013 and "full" in reason
            await sink.conn_row("drop", reason="full")
            await peers["a"].send(data("a", 1))
            assert await peers["b"].recv() == data("a", 1)
            await peers["a"].ws.close()  # a slot frees up
            await sink.hub_row("leave", peer="a")
            again = await open_peer(stack, hub, "c")
            await again.send(Subscribe(id="c", vector={}))
            assert await peers["b"].recv() == Left(id=HUB_ID, left="a")
            assert await peers["b"].recv_subscriber() == "c"

    run(scenario)


def test_http_get_serves_the_web_root_on_the_same_port(tmp_path: Path) -> None:
    (tmp_path / "index.html").write_text("<title>gossamer demo</title>")
    (tmp_path / "client.js").write_text("export const x = 1;")

    async def scenario() -> None:
        async with HubServer(web_root=tmp_path) as hub, aiohttp.ClientSession() as http:
            async with http.get(hub.url) as index:
                assert index.status == 200
                assert await index.text() == "<title>gossamer demo</title>"
                assert index.content_type == "text/html"
            async with http.get(hub.url + "client.js") as script:
                assert script.status == 200 and await script.text() == "export const x = 1;"
            async with http.get(hub.url + "missing.txt") as missing:
                assert missing.status == 404
        async with HubServer() as bare, aiohttp.ClientSession() as http, \
                http.get(bare.url) as nothing:
            assert nothing.status == 404

    run(scenario)


def test_bad_options_are_refused_at_once(tmp_path: Path) -> None:
    for options in ({"max_frame": 0}, {"send_queue_limit": 0}, {"max_connections": 0},
                    {"port": 70_000}, {"web_root": tmp_path / "nope"}, {"close_timeout": 0}):
        with pytest.raises(ConfigError):
            HubServer(**options)
    with pytest.raises(StateError):
        _ = HubServer().address


# -- the command line ------------------------------------------------------------------------


def hub_command() -> list[str]:
    """``gossamer hub`` once cli/main.py has the verb, else the module's own entry point."""
    from gossamer.cli.main import build_parser

    verbs = [action for action in build_parser()._actions if action.dest == "verb"]
    if verbs and "hub" in (verbs[0].choices or {}):
        return [sys.executable, "-m", "gossamer.cli.main", "hub"]
    return [sys.executable, "-m", "gossamer.services.replica.cli", "hub"]


@pytest.mark.processes
def test_gossamer_hub_prints_its_url_and_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    web = tmp_path / "web"
    web.mkdir()
    (web / "index.html").write_text("hello")
    data_dir = tmp_path / "data"

    async def scenario() -> tuple[int, bytes]:
        proc = await asyncio.create_subprocess_exec(
            *hub_command(), "--host", "127.0.0.1", "--port", "0", "--data-dir", str(data_dir),
            "--web-root", str(web), "--run", "cli", stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        assert proc.stdout is not None and proc.stderr is not None
        try:
            line = (await asyncio.wait_for(proc.stdout.readline(), WAIT)).decode()
            assert line.startswith("hub ready at http://127.0.0.1:"), line
            url = line.split()[3]
            async with AsyncExitStack() as stack:
                ws_url = url.replace("http://", "ws://") + "ws"
                a = Peer(await stack.enter_async_context(connect(ws_url)), "a")
                b = Peer(await stack.enter_async_context(connect(ws_url)), "b")
                assert (await a.join()).token is not None  # issued at its first join
                # with snapshots on, the hub's keeper answers a's subscribe itself
                reply = await a.recv()
                while isinstance(reply, Subscribe) and reply.id == "hub":  # its own vector
                    reply = await a.recv()
                assert isinstance(reply, Retry) and reply.id == "hub" and reply.dest == "a"
                proc.send_signal(signal.SIGTERM)  # with both connections open
                assert (await a.closed_with())[0] == 1001
                assert (await b.closed_with())[0] == 1001
            code = await asyncio.wait_for(proc.wait(), WAIT)
            out = await proc.stdout.read()
            errors = await proc.stderr.read()
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        assert code == 0, errors.decode()
        return code, out

    _, out = run(scenario)
    assert b"trace:" in out
    table = pq.read_table(trace_path(data_dir, "cli", "hub"))
    assert table.schema.equals(SCHEMA)
    rows = table.to_pylist()
    assert [r["peer"] for r in rows if r["event"] == "join" and r["layer"] == "hub"] == ["a"]
    closes = [orjson.loads(r["info"]) for r in rows if r["event"] == "close"]
    assert sorted(close["code"] for close in closes) == [1001, 1001]
    assert {r["run"] for r in rows} == {"cli"}


def test_the_hub_help_says_where_snapshots_live(capsys: pytest.CaptureFixture[str]) -> None:
    from gossamer.services.replica.cli import main

    with pytest.raises(SystemExit) as exited:
        main(["hub", "--help"])
    assert exited.value.code == 0
    assert "DATA_DIR/hub.sqlite" in " ".join(capsys.readouterr().out.split())


def test_a_hub_that_cannot_listen_says_so_and_frees_its_store(tmp_path: Path) -> None:
    async def main() -> None:
        with socket.socket() as busy:
            busy.bind(("127.0.0.1", 0))
            busy.listen()
            hub = HubServer(port=busy.getsockname()[1], data_dir=tmp_path)
            with pytest.raises(ConfigError, match=r"the hub cannot listen on 127\.0\.0\.1"):
                await hub.start()
        again = HubServer(port=0, data_dir=tmp_path)  # the same store: free again
        await again.start()
        await again.stop()

    asyncio.run(asyncio.wait_for(main(), 30))


def test_a_watcher_hears_each_write_once(tmp_path: Path) -> None:
    from gossamer.services.replica import Replica

    async def main() -> None:
        async with HubServer(port=0, data_dir=tmp_path) as hub:
            heard: dict[str, list[tuple[str, object, str | None]]] = {"bob": [], "ada": []}
            url = hub.url.replace("http://", "ws://") + "ws"
            async with Replica(url, client_id="bob", db_path=tmp_path / "bob.sqlite") as bob, \
                    Replica(url, client_id="ada", db_path=tmp_path / "ada.sqlite") as ada:
                await bob.synced()
                await ada.synced()
                bob.watch("score", lambda *change: heard["bob"].append(change))
                ada.watch("score", lambda *change: heard["ada"].append(change))
                bob.set("score", {"bob": 3})
                await bob.synced()
                await ada.wait_until(lambda: ada.get("score") == {"bob": 3})
                await bob.go_offline()  # then a write queued offline, sent on reconnecting
                bob.set("score", {"bob": 4})
                bob.reconnect()
                await bob.synced()
                await ada.wait_until(lambda: ada.get("score") == {"bob": 4})
                await bob.synced()
            first, second = (change[2] for change in heard["ada"])
            assert None not in (first, second) and first != second
            # connected, a write has its revision at once; offline, none until it is sent:
            # each told once, not again when its copy comes back from the hub
            assert heard["bob"] == [("score", {"bob": 3}, first), ("score", {"bob": 4}, None),
                                    ("score", {"bob": 4}, second)]
            assert heard["ada"] == [("score", {"bob": 3}, first), ("score", {"bob": 4}, second)]

    asyncio.run(asyncio.wait_for(main(), 60))
