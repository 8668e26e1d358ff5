"""WebSocket library benchmark for the replica hub: broadcast deliveries per second of a bare
broadcast server (no ordering, no storage) on ``websockets`` (asyncio API) and on ``aiohttp``.

Run ``python benchmarks/ws_libs.py [--quick] [--clients N] [--messages N] [--json OUT]``.

Each server runs in its own process (``--serve MODE``); the clients are raw sockets in this
process that do the HTTP upgrade by hand, write pre-masked frames and count bytes, so both
servers face the same, nearly free, clients and the figure is the server's.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import os
import platform
import signal
import sys
import time
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.table import Table

__all__ = ["main", "render", "run"]

REPEATS = 3
MODES = ("websockets-direct", "aiohttp-direct", "websockets-queued", "aiohttp-queued")
BASELINE = {"aiohttp-direct": "websockets-direct", "aiohttp-queued": "websockets-queued"}
READY = b"\x81\x02hi"  # the text frame "hi" each server sends once it has registered a client
WAIT = 60.0  # seconds: a run that takes longer is broken, not slow
MAX_FRAME = 1 << 16


@dataclass(frozen=True)
class Sizes:
    """``FULL`` by default, ``QUICK`` for ``--quick`` (a smoke test)."""

    clients: int
    messages: int


FULL = Sizes(clients=50, messages=4_000)
QUICK = Sizes(clients=5, messages=200)


def payload(index: int) -> bytes:
    """A seed-000 data message of about 150 bytes, as the hub would relay it."""
    return json.dumps({
        "id": "sender", "key": f"obj-{index % 97:04d}", "old_value": "1700000000000-sender",
        "value": f"{1700000000001 + index}-sender", "crc": 1234567890,
        "vector": {"sender": index + 1, "b": 17, "c": 4},
    }, separators=(",", ":")).encode()


def server_frame_size(length: int) -> int:
    """Bytes of an unmasked, uncompressed server text frame carrying ``length`` bytes."""
    if length < 126:
        return 2 + length
    return 4 + length if length < 1 << 16 else 10 + length


def client_frame(data: bytes, mask: bytes = b"\x5a\x17\xc3\x08") -> bytes:
    """A masked client text frame (RFC 6455 5.3)."""
    length = len(data)
    if length < 126:
        header = bytes([0x81, 0x80 | length])
    else:
        header = bytes([0x81, 0x80 | 126]) + length.to_bytes(2, "big")
    masked = bytes(b ^ mask[i % 4] for i, b in enumerate(data))
    return header + mask + masked


# -- the servers (each in its own process) ---------------------------------------------------


async def serve_websockets(queued: bool, stop: asyncio.Event) -> None:
    from websockets.asyncio.server import ServerConnection, broadcast, serve
    from websockets.exceptions import ConnectionClosed

    clients: set[ServerConnection] = set()
    queues: dict[ServerConnection, asyncio.Queue[str]] = {}

    async def writer(ws: ServerConnection, queue: asyncio.Queue[str]) -> None:
        while True:
            await ws.send(await queue.get())

    async def handler(ws: ServerConnection) -> None:
        task = None
        if queued:
            queues[ws] = queue = asyncio.Queue[str](maxsize=1_000_000)
            task = asyncio.create_task(writer(ws, queue))
        clients.add(ws)
        try:
            await ws.send("hi")
            async for message in ws:
                assert isinstance(message, str)
                others = [c for c in clients if c is not ws]
                if queued:
                    for other in others:
                        queues[other].put_nowait(message)
                else:
                    broadcast(others, message)
        except ConnectionClosed:
            return  # the benchmark's clients abort their sockets at the end
        finally:
            clients.discard(ws)
            queues.pop(ws, None)
            if task is not None:
                task.cancel()

    async with serve(handler, "127.0.0.1", 0, ping_interval=None, compression=None,
                     max_size=MAX_FRAME) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        print(f"PORT {port}", flush=True)
        await stop.wait()


async def serve_aiohttp(queued: bool, stop: asyncio.Event) -> None:
    from aiohttp import WSMsgType, web

    clients: set[web.WebSocketResponse] = set()
    queues: dict[web.WebSocketResponse, asyncio.Queue[str]] = {}

    async def writer(ws: web.WebSocketResponse, queue: asyncio.Queue[str]) -> None:
        while True:
            await ws.send_str(await queue.get())

    async def handler(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(max_msg_size=MAX_FRAME, compress=False)
        await ws.prepare(request)
        task = None
        if queued:
            queues[ws] = queue = asyncio.Queue[str](maxsize=1_000_000)
            task = asyncio.create_task(writer(ws, queue))
        clients.add(ws)
        await ws.send_str("hi")
        try:
            async for message in ws:
                if message.type is not WSMsgType.TEXT:
                    continue
                for other in [c for c in clients if c is not ws]:
                    if queued:
                        queues[other].put_nowait(message.data)
                    else:
                        await other.send_str(message.data)
        finally:
            clients.discard(ws)
            queues.pop(ws, None)
            if task is not None:
                task.cancel()
        return ws

    app = web.Application()
    app.router.add_get("/", handler)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        port = runner.addresses[0][1]
        print(f"PORT {port}", flush=True)
        await stop.wait()
    finally:
        await runner.cleanup()


async def serve(mode: str) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    library, _, style = mode.partition("-")
    if library == "websockets":
        await serve_websockets(style == "queued", stop)
    else:
        await serve_aiohttp(style == "queued", stop)


# -- the clients (raw sockets, this process) -------------------------------------------------


class RawClient(asyncio.Protocol):
    """Does the upgrade by hand, waits for the READY frame, then counts bytes until ``expect``."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.transport: asyncio.Transport | None = None
        self.head = b""
        self.upgraded = False
        self.received = 0
        self.expect = 0
        self.ready = asyncio.get_running_loop().create_future()
        self.done = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        key = base64.b64encode(os.urandom(16)).decode()
        transport.write(
            f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
            f"Sec-WebSocket-Version: 13\r\n\r\n".encode()
        )

    def data_received(self, data: bytes) -> None:
        if not self.upgraded:
            self.head += data
            end = self.head.find(b"\r\n\r\n")
            if end < 0:
                return
            if not self.head.startswith(b"HTTP/1.1 101"):
                self.ready.set_exception(ConnectionError(self.head[:80].decode(errors="replace")))
                return
            self.upgraded = True
            data, self.head = self.head[end + 4:], b""
        self.received += len(data)
        if not self.ready.done() and self.received >= len(READY):
            self.ready.set_result(None)
        if self.expect and self.received >= self.expect and not self.done.done():
            self.done.set_result(time.perf_counter())

    def connection_lost(self, exc: Exception | None) -> None:
        for future in (self.ready, self.done):
            if future.done():
                continue
            if future is self.done and not self.expect:
                future.cancel()  # nobody waits for the sender's count
            else:
                future.set_exception(ConnectionError(f"lost: {exc!r}"))


async def start_server(mode: str) -> tuple[asyncio.subprocess.Process, int]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, os.path.abspath(__file__), "--serve", mode,
        stdout=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), WAIT)
    if not line.startswith(b"PORT "):
        proc.kill()
        await proc.wait()
        raise RuntimeError(f"server {mode} did not start: {line!r}")
    return proc, int(line.split()[1])


async def one_run(mode: str, sizes: Sizes) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    proc, port = await start_server(mode)
    clients: list[RawClient] = []
    try:
        for _ in range(sizes.clients):
            _, client = await loop.create_connection(lambda: RawClient(port), "127.0.0.1", port)
            clients.append(client)
        await asyncio.wait_for(asyncio.gather(*(c.ready for c in clients)), WAIT)
        bodies = [payload(i) for i in range(sizes.messages)]
        receive_bytes = len(READY) + sum(server_frame_size(len(b)) for b in bodies)
        sender, receivers = clients[0], clients[1:]
        for client in receivers:
            client.expect = receive_bytes
        stream = b"".join(client_frame(b) for b in bodies)
        start = time.perf_counter()
        assert sender.transport is not None
        sender.transport.write(stream)
        ends = await asyncio.wait_for(asyncio.gather(*(c.done for c in receivers)), WAIT)
        seconds = max(ends) - start
    finally:
        for client in clients:
            if client.transport is not None:
                client.transport.abort()
        proc.send_signal(signal.SIGTERM)
        await proc.wait()
    deliveries = sizes.messages * len(receivers)
    return {"mode": mode, "deliveries": deliveries, "seconds": seconds,
            "deliveries_per_s": deliveries / seconds}


async def run_all(sizes: Sizes, repeats: int) -> dict[str, Any]:
    best: dict[str, dict[str, Any]] = {}
    for _ in range(repeats):  # interleaved, so a noisy moment hurts every mode alike
        for mode in MODES:
            result = await one_run(mode, sizes)
            if mode not in best or result["seconds"] < best[mode]["seconds"]:
                best[mode] = result
    ratios = {
        f"{mode}/{base}": best[mode]["deliveries_per_s"] / best[base]["deliveries_per_s"]
        for mode, base in BASELINE.items()
    }
    return {"clients": sizes.clients, "messages": sizes.messages, "repeats": repeats,
            "modes": best, "ratios": ratios, "python": platform.python_version(),
            "machine": f"{os.cpu_count()} CPUs, {platform.system()}"}


def run(quick: bool = False, *, clients: int | None = None, messages: int | None = None,
        repeats: int = REPEATS) -> dict[str, Any]:
    base = QUICK if quick else FULL
    sizes = Sizes(clients=clients or base.clients, messages=messages or base.messages)
    if sizes.clients < 2 or sizes.messages < 1:
        raise ValueError("need at least 2 clients and 1 message")
    return asyncio.run(run_all(sizes, 1 if quick else repeats))


def render(result: dict[str, Any], console: Console) -> None:
    table = Table(title=f"bare broadcast, {result['clients']} clients, {result['messages']:,} "
                        f"messages from one of them, best of {result['repeats']}")
    for column in ("server", "deliveries", "best s", "deliveries/s", "vs websockets"):
        table.add_column(column, justify="left" if column == "server" else "right")
    for mode in MODES:
        row = result["modes"][mode]
        base = BASELINE.get(mode, mode)
        ratio = row["deliveries_per_s"] / result["modes"][base]["deliveries_per_s"]
        table.add_row(mode, f"{row['deliveries']:,}", f"{row['seconds']:.3f}",
                      f"{row['deliveries_per_s']:,.0f}", f"{ratio:.2f}x")
    console.print(table)
    console.print(f"{result['machine']}, CPython {result['python']}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="small sizes, one repetition")
    parser.add_argument("--clients", type=int, help="connected clients (one of them sends)")
    parser.add_argument("--messages", type=int, help="messages the sender broadcasts")
    parser.add_argument("--json", metavar="OUT", help="also write the figures as JSON to OUT")
    parser.add_argument("--serve", choices=MODES, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(serve(args.serve))
        return 0
    result = run(args.quick, clients=args.clients, messages=args.messages)
    render(result, Console())
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(result, out, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
