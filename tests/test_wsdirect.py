"""``DirectWebSocketResponse``: a served WebSocket's text messages reach the handler as the
parser finds them, in order, those that came before the handler first; everything else
(binary frames, ping, close) still reaches ``receive()``. Over a raw loopback socket, so the
frames are exactly the test's. The first test fails when the installed aiohttp's internals
are not the ones ``runtimes/net/wsdirect.py`` was written against (it would then fall back to
aiohttp's queue: slower, and this says so)."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import os
import struct
from collections.abc import Awaitable, Callable

from aiohttp import WSMsgType, web

from gossamer.runtimes.net.wsdirect import EARLY_LIMIT, DirectWebSocketResponse

WAIT = 20.0
GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


def client_frame(opcode: int, payload: bytes) -> bytes:
    """A final, masked frame, as a client sends it (RFC 6455 5.2)."""
    mask = os.urandom(4)
    masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    length = len(payload)
    if length < 126:
        head = struct.pack("!BB", 0x80 | opcode, 0x80 | length)
    else:
        head = struct.pack("!BBH", 0x80 | opcode, 0x80 | 126, length)
    return head + mask + masked


def upgrade_request(port: int) -> tuple[bytes, bytes]:
    key = base64.b64encode(os.urandom(16))
    accept = base64.b64encode(hashlib.sha1(key + GUID).digest())
    return (b"GET / HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nUpgrade: websocket\r\n"
            b"Connection: Upgrade\r\nSec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n"
            b"\r\n" % (port, key)), accept


async def read_frame(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    first, second = await reader.readexactly(2)
    length = second & 0x7F
    if length == 126:
        (length,) = struct.unpack("!H", await reader.readexactly(2))
    return first & 0x0F, await reader.readexactly(length)


async def serve(handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
                ) -> tuple[web.AppRunner, int]:
    """``handler`` at ``/`` on a loopback ephemeral port."""
    app = web.Application()
    app.router.add_get("/", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, port


def test_text_messages_reach_the_handler_in_order_and_the_rest_reaches_receive() -> None:
    async def scenario() -> None:
        got: list[bytes] = []
        others: list[WSMsgType] = []
        direct: list[bool] = []
        done = asyncio.Event()

        async def handler(request: web.Request) -> web.StreamResponse:
            ws = DirectWebSocketResponse(decode_text=False)
            await ws.prepare(request)
            direct.append(ws.direct)
            await asyncio.sleep(0)  # let a burst that came with the upgrade reach the parser
            ws.deliver_to(got.append)
            async for msg in ws:  # what is not text: binary here; aiohttp answers ping, close
                others.append(msg.type)
            done.set()
            return ws

        runner, port = await serve(handler)
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            request, accept = upgrade_request(port)
            # more frames than the early bound, sent with the upgrade (before the 101: a
            # client should not, but their order must hold all the same)
            early = [b'{"n":%d}' % n for n in range(EARLY_LIMIT + 6)]
            writer.write(request + b"".join(client_frame(1, m) for m in early))
            status = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), WAIT)
            assert status.startswith(b"HTTP/1.1 101") and accept in status
            later = [b'{"later":%d,"pad":"%s"}' % (n, b"x" * 300) for n in range(50)]
            writer.write(b"".join(client_frame(1, m) for m in later[:25])  # one write
                         + client_frame(2, b"\x00binary")
                         + client_frame(9, b"are you there")  # a ping
                         + b"".join(client_frame(1, m) for m in later[25:]))
            opcode, payload = await asyncio.wait_for(read_frame(reader), WAIT)
            assert (opcode, payload) == (0xA, b"are you there")  # the pong
            writer.write(client_frame(8, struct.pack("!H", 1000) + b"bye"))
            opcode, payload = await asyncio.wait_for(read_frame(reader), WAIT)
            assert opcode == 8 and payload[:2] == struct.pack("!H", 1000)  # close answered
            await asyncio.wait_for(done.wait(), WAIT)
            writer.close()
        finally:
            await runner.cleanup()
        assert direct == [True], "aiohttp's internals changed: wsdirect fell back to its queue"
        assert got == early + later
        assert others == [WSMsgType.BINARY]

    asyncio.run(asyncio.wait_for(scenario(), 60))


def test_deliver_to_is_refused_where_text_is_decoded_by_aiohttp() -> None:
    async def scenario() -> None:
        refused: list[str] = []

        async def handler(request: web.Request) -> web.StreamResponse:
            ws = DirectWebSocketResponse()  # decode_text=True: receive() gives str
            await ws.prepare(request)
            try:
                ws.deliver_to(lambda payload: None)
            except RuntimeError as exc:
                refused.append(str(exc))
            await ws.close()
            return ws

        runner, port = await serve(handler)
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(upgrade_request(port)[0])
            await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), WAIT)
            opcode, _ = await asyncio.wait_for(read_frame(reader), WAIT)
            assert opcode == 8
            writer.close()
        finally:
            await runner.cleanup()
        assert refused and "receive()" in refused[0]

    asyncio.run(asyncio.wait_for(scenario(), 60))
