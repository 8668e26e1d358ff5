"""The net runtime's bounded backlog per connection counts frames a reader is behind on, not
frames written in one loop iteration: a burst of answers to a burst of commands read in one go
reaches a client that reads, while a client that stops reading is still cut off."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from typing import Any

import pytest

from gossamer.core import Conn, Env, Framing, ListenerSpec
from gossamer.runtimes.net import NetNode
from harness_net import RawClient

WAIT = 20.0
LIMIT = 10  # frames a connection's backlog holds
ANSWERS = 40 * LIMIT  # frames written in answer to one command, in one callback


class Burst:
    """Answers each frame with ``ANSWERS`` frames, all written in one callback."""

    def __init__(self, env: Env) -> None:
        self.env = env
        self.reasons: list[str] = []
        self.gone = asyncio.Event()

    def start(self) -> None:
        """Nothing to start: it only answers what a client sends."""

    def stop(self) -> None:
        """Nothing to stop."""

    def opened(self, conn: Conn, peer_address: str) -> None:
        """A client says something first."""

    def received(self, conn: Conn, frame: bytes) -> None:
        for i in range(ANSWERS):
            self.env.write(conn, b"%s %d" % (frame, i))

    def closed(self, conn: Conn, reason: str) -> None:
        self.reasons.append(reason)
        self.gone.set()


async def serve() -> tuple[NetNode, Burst, tuple[str, int]]:
    spec = ListenerSpec(name="burst", host="127.0.0.1", port=0, framing=Framing.LINES,
                        send_queue_limit=LIMIT, handshake_timeout=None)
    node = NetNode(node_id="burst", listen=None, listeners=[spec], factory=Burst)
    await node.start()
    process = node.process
    assert isinstance(process, Burst)
    return node, process, node.listener_address("burst")


def test_a_burst_written_in_one_callback_reaches_a_client_that_reads() -> None:
    async def scenario() -> None:
        node, burst, address = await serve()
        try:
            client = await RawClient.open("tcp", address)
            await client.send(b"go")
            got = [await asyncio.wait_for(client.recv(), WAIT) for _ in range(ANSWERS)]
            assert got == [b"go %d" % i for i in range(ANSWERS)]
            assert burst.reasons == [], "a reader that keeps up was cut off as slow"
            await client.close()
        finally:
            await node.close()

    asyncio.run(scenario())


def test_a_client_that_stops_reading_is_still_cut_off() -> None:
    async def scenario() -> None:
        node, burst, address = await serve()
        try:
            sock = socket.create_connection(address)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            try:
                for _ in range(200):  # answers pile up: the kernel buffers fill, then ours
                    try:
                        sock.sendall(b"x" * 200 + b"\n")
                    except OSError:  # cut off already (reset)
                        break
                    if burst.gone.is_set():
                        break
                    await asyncio.sleep(0)
                await asyncio.wait_for(burst.gone.wait(), WAIT)
                assert burst.reasons == ["slow_consumer"]
            finally:
                sock.close()
        finally:
            await node.close()

    asyncio.run(scenario())


class Silent(Burst):
    """Records closes only."""

    def received(self, conn: Conn, frame: bytes) -> None:
        """Nothing to answer."""


def test_a_silent_connection_in_a_kept_slot_is_closed_after_probation_timeout() -> None:
    """The real runtime as the simulator: a connection let in on probation (the kept slot of
    a full listener) that says nothing is closed after ``probation_timeout``, well before the
    ``handshake_timeout`` the others have."""

    async def scenario() -> None:
        spec = ListenerSpec(name="kept", host="127.0.0.1", port=0, framing=Framing.LINES,
                            max_connections=2, reserved_for_peers=1, handshake_timeout=60.0,
                            probation_timeout=0.2)
        node = NetNode(node_id="kept", listen=None, listeners=[spec], factory=Silent)
        await node.start()
        process = node.process
        assert isinstance(process, Silent)
        clients = []
        try:
            for _ in range(2):
                clients.append(await RawClient.open("tcp", node.listener_address("kept")))
            await asyncio.wait_for(process.gone.wait(), WAIT)  # not 60 s: the kept slot's
            assert process.reasons == ["handshake_timeout"]
        finally:
            for client in clients:
                await client.close()
            await node.close()

    asyncio.run(scenario())


class Fan(Burst):
    """On ``fan``: ``before`` written to the asker, then ``write_each`` of a frame to every
    client, built lazily; ``queued_when_next`` records, as each next frame is built, how
    many frames the connection written before still had queued (0: handed to its
    transport already)."""

    def __init__(self, env: Env) -> None:
        super().__init__(env)
        self.clients: list[Conn] = []
        self.queued_when_next: list[int] = []
        self.joined = asyncio.Event()

    def opened(self, conn: Conn, peer_address: str) -> None:
        self.clients.append(conn)
        self.joined.set()

    def received(self, conn: Conn, frame: bytes) -> None:
        self.env.write(conn, b"before")
        self.env.write_each(self._frames())

    def _frames(self) -> Iterator[tuple[Conn, bytes]]:
        previous: Any = None
        for n, conn in enumerate(self.clients):
            if previous is not None:
                self.queued_when_next.append(previous.queued)
            previous = conn
            yield conn, b"to %d" % n


@pytest.mark.parametrize("transport", ["tcp", "ws"])
def test_write_each_hands_each_frame_over_at_once_after_what_was_written_before(
        transport: str) -> None:
    async def scenario() -> None:
        spec = ListenerSpec(name="fan", host="127.0.0.1", port=0,
                            framing=Framing.WS if transport == "ws" else Framing.LINES,
                            handshake_timeout=None)
        node = NetNode(node_id="fan", listen=None, listeners=[spec], factory=Fan)
        await node.start()
        fan = node.process
        assert isinstance(fan, Fan)
        try:
            clients = []
            for _ in range(3):
                fan.joined.clear()
                clients.append(await RawClient.open(transport, node.listener_address("fan")))
                await asyncio.wait_for(fan.joined.wait(), WAIT)  # opened in the order dialed
            await clients[1].send(b"fan")
            got = [[await asyncio.wait_for(c.recv(), WAIT) for _ in range(2 if n == 1 else 1)]
                   for n, c in enumerate(clients)]
            assert got == [[b"to 0"], [b"before", b"to 1"], [b"to 2"]]
            assert fan.queued_when_next == [0, 0], "a frame waited for the end of the step"
            for client in clients:
                await client.close()
        finally:
            await node.close()

    asyncio.run(scenario())
