"""Hub fan-out benchmark: deliveries/s of the seed-000 hub (``HubServer``) with 50 and 200
connected clients, side by side in the same run with two bare aiohttp broadcast servers (no
decoding, ordering or storage) and python-socketio broadcasting to the same clients; plus server
memory per connected client and the p50/p99 delivery latency at half of peak load.

The two bare servers: ``bare`` does one ``await ws.send_str()`` per frame per recipient (the
naive loop); ``bare-corked`` coalesces its writes the way the hub does (a frame built once per
message, the loop iteration's frames joined once and handed to every connection, one
``transport.write`` per connection per loop iteration, ``drain()`` under backpressure). The
stronger of the two in a run is the Python ceiling, and the hub's 0.7x target is judged
against it.

Run ``python benchmarks/hub_fanout.py [--quick] [--clients N ...] [--window S] [--rounds R]
[--relay] [--against SRC] [--json OUT]``. ``--against SRC`` adds ``hub-base``: the same hub
served from another checkout's ``src`` (``git worktree add /tmp/base <commit>``, then
``--against /tmp/base/src``), measured in the same run, so a change is judged against the code
before it.

Each server runs in its own process (``--serve KIND``: it prints its port, answers ``stats`` on
stdin and stops at end of input), with the defaults it ships with: the hub is
``HubServer(data_dir=<temp dir>)`` with its snapshot keeper (sqlite on disk, group commits),
``--relay`` adds ``keeper=None``. All clients run in this process as raw-socket WebSocket
clients: they do the HTTP upgrade by hand, send masked frames built from a template and only
parse frame headers on receive (they answer pings, and socket.io's handshake and pings), so
every server faces the same, nearly free, clients and the figure is the server's. On two cores
that leaves one core to the server and one to the clients; each window reports the CPU time of
the server, of the clients and of the rest of the machine (it is shared), so a load generator
that became the bottleneck shows.

Workload: every client writes its own object ``k-c0007`` again and again: seed-000 data
messages (``vector`` = {its id: seq}, a correct ``crc``, the send time in ``data``; the script
checks they are byte for byte what ``ReplicaCodec`` encodes), which each server sends to every
other client. The hub's clients first send a ``subscribe`` (what a seed-000 client says on
connect). socket.io carries the same JSON object as a ``msg`` event. A delivery is a data frame
received by a client.

- peak: closed loop in rounds (each client sends one message per round); at most ``R`` rounds in
  flight, so at most about 400 frames wait for any one client (the hub disconnects a client with
  1,000 queued); deliveries/s over a window after a warm-up, servers interleaved, best round.
- latency: open loop at half of that server's own peak (messages round robin over the clients,
  what is due sent every millisecond); send-to-receive time of every delivery of the messages
  sent in the window. Its median over the rounds.
- memory: server RSS with no client (after one connect/disconnect cycle) and with the clients
  connected after each has sent one message that every other received; per client = delta / n.
  RSS once more after the load, which for the hub includes the keeper's log.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import gc
import importlib.metadata
import itertools
import json
import os
import platform
import resource
import signal
import statistics
import sys
import tempfile
import time
import zlib
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import WSMsgType, web
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from gossamer.protocols.replica.wire import Data, ReplicaCodec, Subscribe, crc_of

__all__ = ["main", "render", "run"]

TARGET_VS_BARE = 0.7  # hub deliveries/s at least 0.7x the stronger bare server's (the ceiling)
TARGET_VS_SOCKETIO = 2.0  # and at least twice python-socketio's
RELAY = "hub-relay"  # --relay: the hub with keeper=None (the seed's relay, no snapshot)
BASE = "hub-base"  # --against SRC: the hub of another checkout, served from SRC
CORKED = "bare-corked"  # bare, with the hub's write coalescing
BARES = ("bare", CORKED)  # the ceiling is the stronger of these in each run
KINDS = ("hub", BASE, RELAY, "bare", CORKED, "socketio")  # in table order
CORKED_BACKLOG = 1000  # frames waiting for one bare-corked connection (the hub's limit too)
# server kinds served as the hub from another checkout's src folder (PYTHONPATH): --against
# adds hub-base; hub_against.py adds one kind per checkout it compares
SOURCES: dict[str, str] = {}
# environment variables set for one server kind's process only (hub_against.py --loop)
ENVIRONS: dict[str, dict[str, str]] = {}
WAIT = 60.0  # seconds: a wait that takes longer is broken, not slow
MAX_FRAME = 64 * 1024
IN_FLIGHT_PER_CLIENT = 400  # frames on their way to one client, at most (the hub's queue: 1,000)
MAX_ROUNDS_IN_FLIGHT = 32
CONNECT_CONCURRENCY = 50
POLL = 0.02  # seconds between two looks at a condition we wait for (with a deadline)
PACE_TICK = 0.001  # seconds: the open loop sends what is due at most this often
BUSY = 0.4  # cores used by other work in the peak windows above which the run was noisy
CLIENT_BOUND = 0.85  # clients above and server below this (cores): the clients may be the limit
MASK = b"\x5a\x17\xc3\x08"  # one masking key for every client frame (RFC 6455 5.3)
KEY_MARK = b'","key"'  # after the client id in a data message: {"id":"c0007","key":...


@dataclass(frozen=True)
class Sizes:
    """``FULL`` by default, ``QUICK`` for ``--quick`` (a smoke test)."""

    clients: tuple[int, ...]
    rounds: int  # peak and latency windows per server, interleaved; the best peak counts
    warmup: float  # seconds of load before each measuring window
    window: float  # seconds of the peak-throughput window
    latency_window: float  # seconds of the paced, half-load window


FULL = Sizes(clients=(50, 200), rounds=4, warmup=1.0, window=3.0, latency_window=2.0)
QUICK = Sizes(clients=(10,), rounds=1, warmup=0.5, window=1.0, latency_window=1.0)


def rounds_in_flight(clients: int) -> int:
    """Rounds a closed loop may have sent and not yet seen complete at every client."""
    return max(1, min(MAX_ROUNDS_IN_FLIGHT, IN_FLIGHT_PER_CLIENT // (clients - 1)))


def client_id(prefix: str, index: int) -> str:
    return f"{prefix}{index:04d}"


# -- the frames --------------------------------------------------------------------------------


def data_payload(cid: str, seq: int, sent_ns: int) -> bytes:
    """Message ``seq`` of client ``cid``, as ``ReplicaCodec`` encodes it: a write of its own
    object, stamped with the send time in ``data`` (which the crc covers)."""
    key = f"k-{cid}"
    value = f"{seq:010d}-{cid}"
    old = f'"{seq - 1:010d}-{cid}"' if seq > 1 else "null"
    crc = zlib.crc32(f'{key}|{value}|{{"t":{sent_ns}}}'.encode()) & 0xFFFFFFFF
    return (f'{{"id":"{cid}","key":"{key}","old_value":{old},"value":"{value}","crc":{crc},'
            f'"vector":{{"{cid}":{seq}}},"data":{{"t":{sent_ns}}}}}').encode()


def check_payloads() -> int:
    """The template writes exactly what the codec does, with a crc the hub accepts; returns a
    typical frame's payload size."""
    codec = ReplicaCodec(max_frame=MAX_FRAME)
    for seq in (1, 2, 1234):
        now = time.perf_counter_ns()
        payload = data_payload("c0007", seq, now)
        msg = codec.decode(payload)
        expected = Data(id="c0007", key="k-c0007",
                        old_value=None if seq == 1 else f"{seq - 1:010d}-c0007",
                        value=f"{seq:010d}-c0007",
                        crc=crc_of("k-c0007", f"{seq:010d}-c0007", {"t": now}),
                        vector={"c0007": seq}, data={"t": now})
        if msg != expected or not isinstance(msg, Data) or not msg.crc_ok:
            raise AssertionError(f"template message {payload!r} decodes to {msg!r}")
        if codec.encode(msg) != payload:
            raise AssertionError(f"template {payload!r} != codec {codec.encode(msg)!r}")
    return len(data_payload("c0007", 1000, time.perf_counter_ns()))


_KEYS: dict[int, int] = {}


def client_frame(payload: bytes, opcode: int = 0x1) -> bytes:
    """A final, masked client frame (RFC 6455 5.2-5.3)."""
    length = len(payload)
    if length < 126:
        header = bytes((0x80 | opcode, 0x80 | length))
    elif length < 1 << 16:
        header = bytes((0x80 | opcode, 0x80 | 126)) + length.to_bytes(2, "big")
    else:
        header = bytes((0x80 | opcode, 0x80 | 127)) + length.to_bytes(8, "big")
    key = _KEYS.get(length)
    if key is None:
        key = _KEYS[length] = int.from_bytes((MASK * (length // 4 + 1))[:length], "big")
    masked = (int.from_bytes(payload, "big") ^ key).to_bytes(length, "big")
    return header + MASK + masked


@dataclass(frozen=True)
class Dialect:
    """How a client of one server kind speaks."""

    path: str
    prefix: bytes  # around a data message in the frames it sends and receives
    suffix: bytes
    subscribe: bool  # a seed-000 client's first word: subscribe with its (empty) vector
    socketio: bool  # engine.io open / socket.io connect handshake, engine.io pings


WS = Dialect("/ws", b"", b"", subscribe=False, socketio=False)
DIALECTS = {
    "hub": Dialect("/ws", b"", b"", subscribe=True, socketio=False),
    RELAY: Dialect("/ws", b"", b"", subscribe=True, socketio=False),
    BASE: Dialect("/ws", b"", b"", subscribe=True, socketio=False),
    "bare": WS,
    CORKED: WS,
    "socketio": Dialect("/socket.io/?EIO=4&transport=websocket", b'42["msg",', b"]",
                        subscribe=False, socketio=True),
}


# -- the servers (each in its own process) ----------------------------------------------------

Counter = Callable[[], int]


@contextlib.asynccontextmanager
async def hub_server(relay_only: bool = False) -> AsyncIterator[tuple[int, Counter]]:
    """The seed-000 hub as deployed (its sqlite store in a temporary ``data_dir``, the default
    keeper, no trace); with ``relay_only``, ``keeper=None``: the seed's relay, no snapshot."""
    from gossamer.services.replica.hub_server import HubServer

    with tempfile.TemporaryDirectory(prefix="hub-fanout-") as tmp:
        if relay_only:
            hub = HubServer(host="127.0.0.1", port=0, data_dir=Path(tmp), keeper=None)
        else:
            hub = HubServer(host="127.0.0.1", port=0, data_dir=Path(tmp))
        await hub.start()
        try:
            yield hub.address[1], lambda: hub.connections
        finally:
            await hub.stop()


@contextlib.asynccontextmanager
async def serve_app(app: web.Application, connected: Counter,
                    ) -> AsyncIterator[tuple[int, Counter]]:
    """Serve ``app`` on an ephemeral port of 127.0.0.1: (port, connection counter)."""
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        yield int(runner.addresses[0][1]), connected
    finally:
        await runner.cleanup()


@contextlib.asynccontextmanager
async def bare_server() -> AsyncIterator[tuple[int, Counter]]:
    """aiohttp, each text frame sent on to every other connection from the read loop (the
    fastest shape in ``ws_libs.py``): no decoding, no queue, no ordering, no storage."""
    peers: list[tuple[web.WebSocketResponse, ...]] = [()]  # rebuilt on (dis)connect

    async def handler(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(max_msg_size=MAX_FRAME, compress=False)
        await ws.prepare(request)
        peers[0] = (*peers[0], ws)
        try:
            async for frame in ws:
                if frame.type is not WSMsgType.TEXT:
                    continue
                text = frame.data
                for other in peers[0]:
                    if other is not ws:
                        try:
                            await other.send_str(text)
                        except ConnectionError:
                            continue  # closing: its own handler removes it
        finally:
            peers[0] = tuple(p for p in peers[0] if p is not ws)
        return ws

    app = web.Application()
    app.router.add_get("/ws", handler)
    async with serve_app(app, lambda: len(peers[0])) as served:
        yield served


def server_frame(payload: bytes) -> bytes:
    """A final, unmasked text frame carrying ``payload`` (RFC 6455 5.2: a server's frame)."""
    length = len(payload)
    if length < 126:
        return bytes((0x81, length)) + payload
    if length < 1 << 16:
        return bytes((0x81, 126)) + length.to_bytes(2, "big") + payload
    return bytes((0x81, 127)) + length.to_bytes(8, "big") + payload


class _Corked:
    """One ``bare-corked`` connection: the frames not yet written to its transport."""

    __slots__ = ("backlog", "drainer", "protocol", "queued", "stream", "transport")

    def __init__(self, request: web.Request, stream: Any) -> None:
        self.transport = request.transport
        self.protocol = request.protocol  # ``writing_paused``: the transport's buffer is full
        self.stream = stream  # the response's stream writer: ``drain()``
        self.backlog: list[bytes] = []  # joined batches of frames
        self.queued = 0  # frames in the backlog
        self.drainer: asyncio.Task[None] | None = None  # waiting for a paused transport


@contextlib.asynccontextmanager
async def bare_corked_server() -> AsyncIterator[tuple[int, Counter]]:
    """``bare`` with the hub's write coalescing: each text frame is built once and joins the
    loop iteration's batch; once per iteration (a ``call_soon`` flush) the batch is joined and
    handed to every connection (a sender's without its own frames) and each backlog goes out in
    one ``transport.write``; a paused transport keeps its backlog until a task has awaited
    ``drain()``. No decoding, no ordering, no storage; a connection with ``CORKED_BACKLOG``
    frames waiting is aborted (its client then fails the run)."""
    # here, not at the top: --against serves an older hub that has no such module
    from gossamer.runtimes.net.framing import frames_without

    loop = asyncio.get_running_loop()
    peers: list[tuple[_Corked, ...]] = [()]  # rebuilt on (dis)connect
    batch: list[bytes] = []
    senders: list[_Corked] = []
    due = [False]  # a flush is scheduled

    def write(peer: _Corked) -> None:
        backlog, transport = peer.backlog, peer.transport
        if transport is None or transport.is_closing():
            backlog.clear()
            peer.queued = 0
        elif peer.protocol.writing_paused:
            peer.drainer = asyncio.create_task(drain(peer))
        else:
            transport.write(backlog[0] if len(backlog) == 1 else b"".join(backlog))
            backlog.clear()
            peer.queued = 0

    async def drain(peer: _Corked) -> None:
        try:
            await peer.stream.drain()
        except ConnectionError:
            peer.backlog.clear()
            peer.queued = 0
        peer.drainer = None
        if peer.backlog:
            write(peer)

    def flush() -> None:
        due[0] = False
        count = len(batch)
        whole = batch[0] if count == 1 else b"".join(batch)
        own: dict[_Corked, list[int]] = {}
        for position, sender in enumerate(senders):
            own.setdefault(sender, []).append(position)
        offsets = list(itertools.accumulate(map(len, batch), initial=0)) if own else []
        batch.clear()
        senders.clear()
        for peer in peers[0]:
            mine = own.get(peer)
            n = count if mine is None else count - len(mine)
            if n == 0:
                continue
            if peer.queued + n > CORKED_BACKLOG:  # a slow consumer
                peer.backlog.clear()
                peer.queued = 0
                if peer.transport is not None:
                    peer.transport.abort()
                continue
            peer.backlog.append(whole if mine is None else frames_without(whole, offsets, mine))
            peer.queued += n
            if peer.drainer is None:
                write(peer)

    async def handler(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(max_msg_size=MAX_FRAME, compress=False)
        me = _Corked(request, await ws.prepare(request))
        peers[0] = (*peers[0], me)
        try:
            async for msg in ws:
                if msg.type is not WSMsgType.TEXT:
                    continue
                batch.append(server_frame(msg.data.encode()))
                senders.append(me)
                if not due[0]:
                    due[0] = True
                    loop.call_soon(flush)
        finally:
            peers[0] = tuple(p for p in peers[0] if p is not me)
            me.backlog.clear()
            me.queued = 0
        return ws

    app = web.Application()
    app.router.add_get("/ws", handler)
    async with serve_app(app, lambda: len(peers[0])) as served:
        yield served


@contextlib.asynccontextmanager
async def socketio_server() -> AsyncIterator[tuple[int, Counter]]:
    """python-socketio on aiohttp (its defaults): each ``msg`` event emitted to every client
    but its sender."""
    import socketio  # type: ignore[import-untyped]

    sio = socketio.AsyncServer(async_mode="aiohttp", max_http_buffer_size=MAX_FRAME)
    count = [0]

    async def on_connect(sid: str, environ: Any, *auth: Any) -> None:
        count[0] += 1

    async def on_disconnect(sid: str, *reason: Any) -> None:
        count[0] -= 1

    async def on_msg(sid: str, data: Any) -> None:
        await sio.emit("msg", data, skip_sid=sid)

    sio.on("connect", on_connect)
    sio.on("disconnect", on_disconnect)
    sio.on("msg", on_msg)
    app = web.Application()
    sio.attach(app)
    async with serve_app(app, lambda: count[0]) as served:
        yield served


FACTORIES: dict[str, Callable[[], contextlib.AbstractAsyncContextManager[tuple[int, Counter]]]] = {
    "hub": hub_server, RELAY: lambda: hub_server(relay_only=True), "bare": bare_server,
    CORKED: bare_corked_server, "socketio": socketio_server,
}


async def serve(kind: str) -> None:
    """Print ``PORT n``; answer each ``stats`` line on stdin (after a full collection) with
    ``{"connections": n}``; stop at end of input or on SIGTERM."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)

    async def control(count: Counter) -> None:
        while line := await reader.readline():
            if line.strip() == b"stats":
                gc.collect()
                print(json.dumps({"connections": count()}), flush=True)
        stop.set()

    async with FACTORIES[kind]() as (port, count):
        print(f"PORT {port}", flush=True)
        task = asyncio.create_task(control(count))
        await stop.wait()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


# -- the server process, seen from here -------------------------------------------------------


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for process {pid}")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` so far."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine_busy_seconds() -> float:
    """CPU time every process on the machine has used so far (all cores, from /proc/stat)."""
    with open("/proc/stat", encoding="ascii") as stat:
        ticks = [int(v) for v in stat.readline().split()[1:9]]
    idle = ticks[3] + ticks[4]  # idle, iowait
    return (sum(ticks) - idle) / os.sysconf("SC_CLK_TCK")


class ServerProcess:
    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.proc: asyncio.subprocess.Process | None = None
        self.port = 0

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    async def start(self) -> None:
        env = None
        kind = self.kind
        src = SOURCES.get(kind)
        extra = ENVIRONS.get(kind, {})
        if src is not None:  # the hub of another checkout: its src first on the path
            env = dict(os.environ, PYTHONPATH=src, **extra)
            kind = "hub"
        elif extra:
            env = dict(os.environ, **extra)
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable, os.path.abspath(__file__), "--serve", kind,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, env=env,
        )
        try:
            line = await self._line()
            if not line.startswith("PORT "):
                raise RuntimeError(f"server {self.kind} did not start: {line!r}")
        except BaseException:
            await self.stop()
            raise
        self.port = int(line.split()[1])

    async def _line(self) -> str:
        assert self.proc is not None and self.proc.stdout is not None
        line = await asyncio.wait_for(self.proc.stdout.readline(), WAIT)
        if not line:
            raise RuntimeError(f"server {self.kind} exited (code {await self.proc.wait()})")
        return line.decode().strip()

    async def connections(self) -> int:
        """Connections the server holds (after a ``gc.collect()`` there, so RSS is settled)."""
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.write(b"stats\n")
        await self.proc.stdin.drain()
        return int(json.loads(await self._line())["connections"])

    async def wait_connections(self, want: int) -> None:
        deadline = time.monotonic() + WAIT
        while (have := await self.connections()) != want:
            if time.monotonic() > deadline:
                raise RuntimeError(f"server {self.kind} holds {have} connections, not {want}")
            await asyncio.sleep(POLL)

    async def stop(self) -> None:
        proc = self.proc
        if proc is None or proc.returncode is not None:
            return
        assert proc.stdin is not None
        with contextlib.suppress(ConnectionError):
            proc.stdin.close()  # end of input: the server stops
        try:
            await asyncio.wait_for(proc.wait(), WAIT / 4)
        except TimeoutError:
            proc.kill()
            await proc.wait()


# -- the clients (raw sockets, this process) ---------------------------------------------------


class RawClient(asyncio.Protocol):
    """One WebSocket client: HTTP upgrade by hand, masked frames out, frame headers parsed in;
    counts the data frames of its fleet's clients (the ``mark`` at a text frame's start)."""

    def __init__(self, fleet: Fleet, index: int) -> None:
        self.fleet = fleet
        self.index = index
        self.cid = fleet.ids[index]
        self.transport: asyncio.Transport | None = None
        self.head = b""
        self.upgraded = False
        self.buffer = b""
        self.ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.received = 0  # data frames received
        self.base = 0  # ``received`` when the current closed loop started
        self.level = 0  # closed-loop rounds this client has received the frames of
        self.closing = False

    # -- asyncio.Protocol --

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        key = base64.b64encode(os.urandom(16)).decode()
        transport.write(
            f"GET {self.fleet.dialect.path} HTTP/1.1\r\nHost: 127.0.0.1:{self.fleet.port}\r\n"
            f"Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
            f"Sec-WebSocket-Version: 13\r\n\r\n".encode()
        )

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.ready.done():
            self.ready.set_exception(ConnectionError(f"{self.cid}: connection lost: {exc!r}"))
        elif not self.closing:
            self.fleet.fail(f"{self.cid}'s connection was lost ({exc!r})")

    def data_received(self, data: bytes) -> None:
        if not self.upgraded:
            self.head += data
            end = self.head.find(b"\r\n\r\n")
            if end < 0:
                return
            if not self.head.startswith(b"HTTP/1.1 101"):
                status = self.head.split(b"\r\n", 1)[0].decode(errors="replace")
                self.ready.set_exception(ConnectionError(f"{self.cid}: upgrade refused: {status}"))
                return
            self.upgraded = True
            data, self.head = self.head[end + 4:], b""
            self._upgraded()
        buffer = self.buffer + data if self.buffer else data
        fleet = self.fleet
        mark = fleet.mark
        size = len(buffer)
        pos = count = 0
        now = time.perf_counter_ns() if fleet.recording else 0
        while pos + 2 <= size:
            first = buffer[pos]
            length = buffer[pos + 1]  # server frames are not masked
            if length < 126:
                start = pos + 2
            elif length == 126:
                start = pos + 4
                if start > size:
                    break
                length = (buffer[pos + 2] << 8) | buffer[pos + 3]
            else:
                start = pos + 10
                if start > size:
                    break
                length = int.from_bytes(buffer[pos + 2:start], "big")
            stop = start + length
            if stop > size:
                break
            pos = stop
            if first == 0x81:  # a final text frame
                if (buffer.startswith(mark, start)
                        and buffer.startswith(KEY_MARK, start + fleet.key_at)):
                    count += 1
                    if now:  # the send time: ...,"data":{"t":<ns>}}
                        sent = int(buffer[buffer.rindex(b":", start, stop) + 1:
                                          stop - fleet.tail])
                        if fleet.record_from <= sent < fleet.record_until:
                            fleet.latencies.append(now - sent)
                elif fleet.dialect.socketio:
                    self._engineio(buffer[start:stop])
            else:
                self._control(first, buffer[start:stop])
        self.buffer = buffer[pos:] if pos < size else b""
        if count:
            fleet.on_data(self, count)

    # -- the rest of the protocol --

    def _upgraded(self) -> None:
        if self.fleet.dialect.subscribe:
            hello = ReplicaCodec().encode(Subscribe(id=self.cid, vector={}))
            self.write(hello)
        if not self.fleet.dialect.socketio:
            self.ready.set_result(None)

    def _engineio(self, payload: bytes) -> None:
        if payload == b"2":  # engine.io ping
            self.write(b"3")
        elif payload.startswith(b"0{"):  # engine.io open: connect to the default namespace
            self.write(b"40")
        elif payload.startswith(b"40") and not self.ready.done():
            self.ready.set_result(None)
        elif payload.startswith(b"44"):
            self.fleet.fail(f"{self.cid}: socket.io refused: {payload[:200]!r}")

    def _control(self, first: int, payload: bytes) -> None:
        opcode = first & 0x0F
        if opcode == 0x9:  # ping
            self.write(payload, opcode=0xA)
        elif opcode == 0x8:  # close
            if not self.closing:
                code = int.from_bytes(payload[:2], "big") if len(payload) >= 2 else None
                self.fleet.fail(f"{self.cid} was closed by the server (code {code}: "
                                f"{payload[2:].decode(errors='replace')})")
            self.close()
        elif opcode != 0xA:
            self.fleet.fail(f"{self.cid}: unexpected frame 0x{first:02x} (fragmented?)")

    def write(self, payload: bytes, opcode: int = 0x1) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(client_frame(payload, opcode))

    def close(self) -> None:
        self.closing = True
        if self.transport is not None:
            self.transport.abort()


class Fleet:
    """``n`` clients of one server, all in this process; what they sent and received.

    ``expected - delivered`` is what is on its way; ``drained`` is set when that is 0 (every
    message has reached every other client: servers never duplicate).
    """

    def __init__(self, kind: str, n: int, port: int, prefix: str = "c") -> None:
        self.kind = kind
        self.n = n
        self.port = port
        self.dialect = DIALECTS[kind]
        self.ids = [client_id(prefix, i) for i in range(n)]
        # a data frame of one of these clients starts with mark + 4 digits + KEY_MARK
        self.mark = self.dialect.prefix + b'{"id":"' + prefix.encode()
        self.key_at = len(self.mark) + 4
        self.tail = 2 + len(self.dialect.suffix)  # bytes after the send time: }} (])
        self.rounds = rounds_in_flight(n)
        self.clients = [RawClient(self, i) for i in range(n)]
        self.seq = [0] * n
        self.sent = 0  # messages
        self.expected = 0  # deliveries those messages make
        self.delivered = 0
        self.drained = asyncio.Event()
        self.drained.set()
        self.failures: list[str] = []
        # the closed loop
        self.looping = False
        self.rounds_sent = 0
        self.rounds_done = 0
        self.reached: dict[int, int] = {}  # round -> clients that have all its frames
        self.waker: asyncio.Future[None] | None = None
        # latency
        self.recording = False
        self.record_from = 0  # ns (perf_counter_ns): latencies of messages sent in the window
        self.record_until = 0
        self.latencies: list[int] = []

    async def connect(self) -> None:
        loop = asyncio.get_running_loop()
        gate = asyncio.Semaphore(CONNECT_CONCURRENCY)

        async def one(client: RawClient) -> None:
            async with gate:
                await loop.create_connection(lambda: client, "127.0.0.1", self.port)
                await asyncio.wait_for(client.ready, WAIT)

        await asyncio.gather(*(one(c) for c in self.clients))

    def send(self, index: int) -> None:
        seq = self.seq[index] + 1
        self.seq[index] = seq
        dialect = self.dialect
        payload = data_payload(self.ids[index], seq, time.perf_counter_ns())
        if dialect.prefix:
            payload = dialect.prefix + payload + dialect.suffix
        self.clients[index].write(payload)
        self.sent += 1
        self.expected += self.n - 1
        self.drained.clear()

    def on_data(self, client: RawClient, count: int) -> None:
        client.received += count
        self.delivered += count
        if self.looping:
            level = (client.received - client.base) // (self.n - 1)
            if level > client.level:
                reached = self.reached
                for number in range(client.level + 1, level + 1):
                    have = reached.get(number, 0) + 1
                    if have < self.n:
                        reached[number] = have
                    else:  # every client has every frame of that round and of those before
                        reached.pop(number, None)
                        self.rounds_done = number
                        self._wake()
                client.level = level
        if self.delivered == self.expected:
            self.drained.set()
        elif self.delivered > self.expected:
            self.fail(f"{self.delivered} deliveries of {self.expected} sent: duplicates")

    def _wake(self) -> None:
        waker = self.waker
        if waker is not None:
            self.waker = None
            if not waker.done():
                waker.set_result(None)

    def fail(self, why: str) -> None:
        self.failures.append(why)
        self.looping = False
        self.drained.set()  # wake the waiter, which checks ``failures``
        self._wake()

    def check(self, what: str) -> None:
        if self.failures:
            raise RuntimeError(f"{self.kind}, {self.n} clients, {what}: {self.failures[0]}")

    async def wait_drained(self, what: str) -> None:
        try:
            await asyncio.wait_for(self.drained.wait(), WAIT)
        except TimeoutError:
            raise RuntimeError(
                f"{self.kind}, {self.n} clients, {what}: {self.expected - self.delivered} "
                f"deliveries still missing after {WAIT:.0f} s") from None
        self.check(what)

    async def sync(self) -> None:
        """Each client in turn sends one message and waits until every other client has it
        (in turn: a burst of n x (n - 1) deliveries would leave its high-water mark in RSS)."""
        for index in range(self.n):
            self.send(index)
            await self.wait_drained("first message of each client")

    async def closed_loop(self) -> None:
        """Round after round (every client sends one message), ``rounds`` in flight at most,
        until ``looping`` goes false."""
        self.check("closed loop")
        for client in self.clients:
            client.base, client.level = client.received, 0
        self.rounds_sent = self.rounds_done = 0
        self.reached.clear()
        self.looping = True
        loop = asyncio.get_running_loop()
        while self.looping:
            if self.rounds_sent - self.rounds_done < self.rounds:
                for index in range(self.n):
                    self.send(index)
                self.rounds_sent += 1
                if self.rounds_sent % 8 == 0:
                    await asyncio.sleep(0)  # let the readers in now and then
            else:
                self.waker = loop.create_future()
                await self.waker

    def stop_loop(self) -> None:
        self.looping = False
        self._wake()

    async def paced(self, messages_per_s: float, seconds: float) -> int:
        """Open loop: ``messages_per_s``, round robin over the clients, for ``seconds``;
        a send is skipped (and counted) while more than the closed loop's limit is on its way:
        the server is not keeping up."""
        limit = self.rounds * self.n * (self.n - 1)
        start = time.perf_counter()
        sent = skipped = 0
        while (elapsed := time.perf_counter() - start) < seconds and not self.failures:
            due = int(elapsed * messages_per_s) + 1
            while sent < due:
                if self.expected - self.delivered > limit:
                    skipped += 1
                else:
                    self.send(sent % self.n)
                sent += 1
            # the next message is due at sent / rate; wake at most every PACE_TICK and send
            # what is due then (each message carries its own send time)
            await asyncio.sleep(max(PACE_TICK, sent / messages_per_s
                                    - (time.perf_counter() - start)))
        self.check("paced")
        return skipped

    def close(self) -> None:
        for client in self.clients:
            client.close()


# -- measuring --------------------------------------------------------------------------------


def percentile(sorted_values: Sequence[int], fraction: float) -> float:
    if not sorted_values:
        return float("nan")
    index = min(len(sorted_values) - 1, round(fraction * (len(sorted_values) - 1)))
    return float(sorted_values[index])


@dataclass
class Setup:
    """One running server and its connected clients."""

    kind: str
    server: ServerProcess
    fleet: Fleet
    memory: dict[str, float]


async def set_up(kind: str, n: int) -> Setup:
    """Start the server; its RSS with no client and with ``n`` connected clients."""
    server = ServerProcess(kind)
    await server.start()
    fleet: Fleet | None = None
    try:
        # one connection cycle first, so what the server allocates once is not counted per client
        warm = Fleet(kind, 2, server.port, prefix="w")
        try:
            await warm.connect()
            await server.wait_connections(2)
            await warm.sync()
        finally:
            warm.close()
        await server.wait_connections(0)
        rss_idle = rss_kib(server.pid)
        fleet = Fleet(kind, n, server.port)
        await fleet.connect()
        await server.wait_connections(n)
        await fleet.sync()
        await server.connections()  # a collection in the server before reading its RSS
        rss_connected = rss_kib(server.pid)
    except BaseException:
        if fleet is not None:
            fleet.close()
        await server.stop()
        raise
    memory = {"rss_idle_kib": rss_idle, "rss_connected_kib": rss_connected,
              "kib_per_client": (rss_connected - rss_idle) / n}
    return Setup(kind, server, fleet, memory)


async def tear_down(setup: Setup) -> None:
    setup.fleet.close()
    with contextlib.suppress(RuntimeError, TimeoutError):
        await setup.server.wait_connections(0)
    await setup.server.stop()


def snapshot(fleet: Fleet, pid: int) -> tuple[int, float, float, float, float]:
    return (fleet.delivered, time.perf_counter(), cpu_seconds(pid), time.process_time(),
            machine_busy_seconds())


async def peak_window(setup: Setup, sizes: Sizes) -> dict[str, float]:
    """Closed loop: deliveries/s over the window, after a warm-up."""
    fleet = setup.fleet
    pump = asyncio.create_task(fleet.closed_loop())
    try:
        await asyncio.sleep(sizes.warmup)
        fleet.check("closed loop")
        d0, t0, s0, c0, m0 = snapshot(fleet, setup.server.pid)
        await asyncio.sleep(sizes.window)
        d1, t1, s1, c1, m1 = snapshot(fleet, setup.server.pid)
    finally:
        fleet.stop_loop()
        await pump
    await fleet.wait_drained("closed loop")
    seconds = t1 - t0
    client_cpu = (c1 - c0) / seconds
    return {
        "deliveries": d1 - d0,
        "seconds": seconds,
        "deliveries_per_s": (d1 - d0) / seconds,
        "server_cpu": (s1 - s0) / seconds,  # in cores
        "client_cpu": client_cpu,
        "other_cpu": max(0.0, (m1 - m0) - (s1 - s0) - (c1 - c0)) / seconds,
        "deliveries_per_server_cpu_s": (d1 - d0) / (s1 - s0) if s1 > s0 else float("nan"),
        # the clients were saturated while the server still had CPU to spare
        "client_bound": client_cpu >= CLIENT_BOUND and (s1 - s0) / seconds < CLIENT_BOUND,
    }


async def latency_window(setup: Setup, deliveries_per_s: float, sizes: Sizes
                         ) -> dict[str, float]:
    """Open loop at ``deliveries_per_s``: send-to-receive latency of every delivery of the
    messages sent in the window (after a short warm-up)."""
    fleet = setup.fleet
    warmup = sizes.warmup / 2
    fleet.latencies = []
    fleet.record_from = time.perf_counter_ns() + int(warmup * 1e9)
    fleet.record_until = fleet.record_from + int(sizes.latency_window * 1e9)
    fleet.recording = True
    before = fleet.delivered
    started = time.perf_counter()
    try:
        skipped = await fleet.paced(deliveries_per_s / (fleet.n - 1),
                                    warmup + sizes.latency_window)
        seconds = time.perf_counter() - started
        await fleet.wait_drained("paced")
    finally:
        fleet.recording = False
    latencies = sorted(fleet.latencies)
    fleet.latencies = []
    return {
        "target_deliveries_per_s": deliveries_per_s,
        "achieved_deliveries_per_s": (fleet.delivered - before) / seconds,
        "skipped_sends": skipped,
        "samples": len(latencies),
        "p50_ms": percentile(latencies, 0.50) / 1e6,
        "p99_ms": percentile(latencies, 0.99) / 1e6,
    }


async def measure(n: int, sizes: Sizes, kinds: Sequence[str], step: Callable[[str], None],
                  frame_bytes: int) -> dict[str, Any]:
    """Every figure of the servers with ``n`` clients. They run side by side (idle while
    another is measured) so the rounds interleave them: a noisy moment on a shared machine
    then hurts one round of each, and the best round counts."""
    setups: dict[str, Setup] = {}
    peaks: dict[str, list[dict[str, float]]] = {kind: [] for kind in kinds}
    latencies: dict[str, list[dict[str, float]]] = {kind: [] for kind in kinds}
    try:
        for kind in kinds:
            step(f"{kind}: start, connect, memory")
            setups[kind] = await set_up(kind, n)
        for round_number in range(sizes.rounds):
            for kind in kinds:
                step(f"{kind}: peak, round {round_number + 1}")
                peaks[kind].append(await peak_window(setups[kind], sizes))
        best = {kind: max(peaks[kind], key=lambda p: p["deliveries_per_s"]) for kind in kinds}
        for round_number in range(sizes.rounds):
            for kind in kinds:
                step(f"{kind}: latency at half peak, round {round_number + 1}")
                half = best[kind]["deliveries_per_s"] / 2
                latencies[kind].append(await latency_window(setups[kind], half, sizes))
        for kind in kinds:
            setup = setups[kind]
            await setup.server.connections()  # a collection first
            setup.memory["rss_after_load_kib"] = after = rss_kib(setup.server.pid)
            setup.memory["kib_per_client_after_load"] = (after - setup.memory["rss_idle_kib"]) / n
            setup.memory["messages_per_client"] = setup.fleet.sent / n
    finally:
        step("disconnect")
        for setup in setups.values():
            await tear_down(setup)
    servers: dict[str, dict[str, Any]] = {}
    for kind in kinds:
        rounds = latencies[kind]
        servers[kind] = {
            "server": kind,
            "clients": n,
            "rounds_in_flight": rounds_in_flight(n),
            "frame_bytes": frame_bytes,
            **best[kind],
            "peak_rounds": peaks[kind],
            "latency": {
                "target_deliveries_per_s": rounds[0]["target_deliveries_per_s"],
                "achieved_deliveries_per_s": statistics.median(
                    r["achieved_deliveries_per_s"] for r in rounds),
                "skipped_sends": sum(r["skipped_sends"] for r in rounds),
                "samples": sum(r["samples"] for r in rounds),
                "p50_ms": statistics.median(r["p50_ms"] for r in rounds),
                "p99_ms": statistics.median(r["p99_ms"] for r in rounds),
                "rounds": rounds,
            },
            "memory": setups[kind].memory,
        }
    return servers


def version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "?"


def raise_file_limit(want: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < want:
        top = want if hard == resource.RLIM_INFINITY else min(want, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (top, hard))


async def run_all(sizes: Sizes, kinds: Sequence[str], console: Console) -> dict[str, Any]:
    frame_bytes = check_payloads()
    raise_file_limit(len(kinds) * max(sizes.clients) + 256)
    progress = Progress(TextColumn("{task.description:<52}"), BarColumn(),
                        TextColumn("{task.completed}/{task.total}"), TimeElapsedColumn(),
                        console=console, transient=True)
    steps = len(kinds) * (1 + 2 * sizes.rounds) + 1
    runs: list[dict[str, Any]] = []
    targets: list[dict[str, Any]] = []
    started = time.perf_counter()
    with progress:
        task = progress.add_task("", total=len(sizes.clients) * steps)
        for n in sizes.clients:
            def step(what: str, n: int = n) -> None:
                progress.update(task, description=f"{n} clients, {what}")
                progress.advance(task)

            servers = await measure(n, sizes, kinds, step, frame_bytes)
            for kind in kinds:
                row = servers[kind]
                progress.console.log(
                    f"{n} clients, {kind}: {row['deliveries_per_s']:,.0f} deliveries/s, "
                    f"server CPU {row['server_cpu']:.0%}, clients {row['client_cpu']:.0%}; "
                    f"half load p50 {row['latency']['p50_ms']:.2f} ms, "
                    f"p99 {row['latency']['p99_ms']:.2f} ms")
            hub = servers["hub"]
            ratios: dict[str, float] = {}
            for name in (*BARES, "socketio"):
                ratios[f"hub/{name}"] = hub["deliveries_per_s"] / servers[name][
                    "deliveries_per_s"]
                ratios[f"hub/{name} per server CPU-s"] = (
                    hub["deliveries_per_server_cpu_s"]
                    / servers[name]["deliveries_per_server_cpu_s"])
            # the ceiling: the stronger bare server, on each measure
            ceiling = max(BARES, key=lambda b: servers[b]["deliveries_per_s"])
            ceiling_cpu = max(BARES, key=lambda b: servers[b]["deliveries_per_server_cpu_s"])
            for name, against, against_cpu, target in (
                    ("best bare", ceiling, ceiling_cpu, TARGET_VS_BARE),
                    ("socketio", "socketio", "socketio", TARGET_VS_SOCKETIO)):
                value = ratios[f"hub/{against}"]
                per_cpu = ratios[f"hub/{against_cpu} per server CPU-s"]
                targets.append({"name": f"hub/{name}, {n} clients", "target": target,
                                "against": against, "against_per_server_cpu": against_cpu,
                                "value": value, "met": value >= target,
                                "per_server_cpu": per_cpu,
                                "met_per_server_cpu": per_cpu >= target})
            if RELAY in servers:
                ratios["hub/hub-relay"] = hub["deliveries_per_s"] / servers[RELAY][
                    "deliveries_per_s"]
            runs.append({"clients": n, "servers": servers, "ratios": ratios,
                         "ceiling": ceiling, "ceiling_per_server_cpu": ceiling_cpu})
    return {
        "quick": sizes == QUICK,
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "machine": f"{os.cpu_count()} CPUs, {platform.machine()}, {platform.system()}",
        "versions": {p: version(p) for p in ("aiohttp", "python-socketio", "python-engineio")},
        "servers": list(kinds),
        "settings": {"rounds": sizes.rounds, "warmup_s": sizes.warmup, "window_s": sizes.window,
                     "latency_window_s": sizes.latency_window,
                     "in_flight_per_client": IN_FLIGHT_PER_CLIENT},
        "seconds": time.perf_counter() - started,
        "runs": runs,
        "targets": targets,
    }


def run(quick: bool = False, *, clients: Sequence[int] | None = None,
        window: float | None = None, rounds: int | None = None, relay: bool = False,
        console: Console | None = None) -> dict[str, Any]:
    """Measure everything; a JSON-ready dict. Progress goes to ``console`` (stderr).
    ``relay`` adds the hub without its snapshot keeper (``keeper=None``)."""
    base = QUICK if quick else FULL
    sizes = Sizes(clients=tuple(clients) if clients else base.clients,
                  rounds=base.rounds if rounds is None else rounds, warmup=base.warmup,
                  window=base.window if window is None else window,
                  latency_window=base.latency_window if window is None else window)
    if min(sizes.clients) < 2 or max(sizes.clients) > 9999:
        raise ValueError("clients must be in 2..9999")
    if sizes.rounds < 1 or sizes.window <= 0:
        raise ValueError("need rounds >= 1 and a window > 0")
    kinds = [kind for kind in KINDS
             if (kind != RELAY or relay) and (kind != BASE or BASE in SOURCES)]
    return asyncio.run(run_all(sizes, kinds, console or Console(stderr=True)))


def render(result: dict[str, Any], console: Console) -> None:
    settings = result["settings"]
    for entry in result["runs"]:
        servers = entry["servers"]
        hub = servers["hub"]
        table = Table(
            title=f"Hub fan-out: {entry['clients']} clients, each sending to all the others "
                  f"({hub['frame_bytes']} B data messages)",
            caption=f"peak: closed loop, {hub['rounds_in_flight']} rounds in flight, best of "
                    f"{settings['rounds']} x {settings['window_s']:g} s; latency: open loop at "
                    f"half that server's peak, median of {settings['rounds']} x "
                    f"{settings['latency_window_s']:g} s; CPU in cores (srv: the server, cli: "
                    f"all clients, other: the rest of the machine, kernel network work "
                    f"included); {result['machine']}, "
                    f"CPython {result['python']}",
        )
        for column in ("server", "deliveries/s", "hub / server", "srv CPU", "cli CPU",
                       "other CPU", "deliv./srv CPU-s", "half load/s", "p50 ms", "p99 ms",
                       "KiB/client"):
            table.add_column(column, justify="left" if column == "server" else "right")
        for kind in result["servers"]:
            row = servers[kind]
            latency = row["latency"]
            table.add_row(
                kind, f"{row['deliveries_per_s']:,.0f}",
                f"{hub['deliveries_per_s'] / row['deliveries_per_s']:.2f}x",
                f"{row['server_cpu']:.2f}", f"{row['client_cpu']:.2f}",
                f"{row['other_cpu']:.2f}",
                f"{row['deliveries_per_server_cpu_s']:,.0f}",
                f"{latency['achieved_deliveries_per_s']:,.0f}",
                f"{latency['p50_ms']:.2f}", f"{latency['p99_ms']:.2f}",
                f"{row['memory']['kib_per_client']:.1f}",
            )
        console.print(table)
        ratios = entry["ratios"]
        console.print(
            f"{entry['clients']} clients: hub / bare {ratios['hub/bare']:.2f}x, hub / "
            f"{CORKED} {ratios['hub/' + CORKED]:.2f}x, hub / socketio "
            f"{ratios['hub/socketio']:.2f}x; the ceiling (the stronger bare server, which the "
            f"{TARGET_VS_BARE}x target is judged against) is {entry['ceiling']}")
        bound = [kind for kind in result["servers"] if servers[kind]["client_bound"]]
        if bound:
            console.print(f"[yellow]note:[/yellow] in the best peak window of "
                          f"{', '.join(bound)} the clients used >= {CLIENT_BOUND:.0%} of a core "
                          f"and the server less: that figure may be the load generator's limit")
        heavy = [kind for kind in result["servers"] if kind not in bound
                 and servers[kind]["client_cpu"] > servers[kind]["server_cpu"]]
        if heavy:
            console.print(f"[yellow]note:[/yellow] in the best peak window of "
                          f"{', '.join(heavy)} the clients used more CPU than the server: on a "
                          f"shared machine that figure is likely the load generator's limit "
                          f"(compare deliveries per server CPU-s)")
        skipped = [kind for kind in result["servers"]
                   if servers[kind]["latency"]["skipped_sends"]]
        if skipped:
            console.print(f"[yellow]note:[/yellow] at half load, {', '.join(skipped)} fell "
                          f"behind (sends skipped): its latency is that of an overloaded server")

    memory = Table(title="Server memory (RSS, KiB)",
                   caption="idle: after one connect/disconnect cycle; connected: after each "
                           "client sent one message; per client = (connected - idle) / clients; "
                           "after load: at the end of the run (the hub's keeper log and object "
                           "histories included), per client = (after load - idle) / clients")
    for column in ("server", "clients", "idle", "connected", "KiB/client", "after load",
                   "KiB/client after", "messages/client"):
        memory.add_column(column, justify="left" if column == "server" else "right")
    for entry in result["runs"]:
        for kind in result["servers"]:
            mem = entry["servers"][kind]["memory"]
            memory.add_row(kind, str(entry["clients"]), f"{mem['rss_idle_kib']:,}",
                           f"{mem['rss_connected_kib']:,}", f"{mem['kib_per_client']:.1f}",
                           f"{mem['rss_after_load_kib']:,}",
                           f"{mem['kib_per_client_after_load']:.1f}",
                           f"{mem['messages_per_client']:,.0f}")
    console.print(memory)

    verdicts = Table(
        title="Targets (deliveries/s)",
        caption=f"hub >= {TARGET_VS_BARE}x is judged against the stronger of the two bare "
                f"servers in that run (the Python ceiling: {' or '.join(BARES)}, the server in "
                "brackets), on each measure; the targets are on deliveries/s; per server CPU-s "
                "(deliveries / server CPU time) helps when other work took CPU from a server, "
                "but it rises under CPU pressure (more frames per wake-up and per write)")
    for column in ("measure", "target", "deliveries/s", "result", "per server CPU-s",
                   "result "):
        verdicts.add_column(column, justify="left" if column.startswith(("m", "r")) else "right")
    for t in result["targets"]:
        verdicts.add_row(t["name"], f">= {t['target']}x",
                         f"{t['value']:.2f}x ({t['against']})", _verdict(t["met"]),
                         f"{t['per_server_cpu']:.2f}x ({t['against_per_server_cpu']})",
                         _verdict(t["met_per_server_cpu"]))
    console.print(verdicts)
    met = sum(t["met"] for t in result["targets"])
    console.print(f"{met} of {len(result['targets'])} targets met on deliveries/s, "
                  f"{sum(t['met_per_server_cpu'] for t in result['targets'])} on deliveries "
                  f"per server CPU-s ({result['seconds']:.0f} s)")
    other = [servers["other_cpu"] for entry in result["runs"]
             for servers in entry["servers"].values()]
    if other and statistics.mean(other) >= BUSY:
        console.print(f"[yellow]note:[/yellow] other work on the machine used "
                      f"{statistics.mean(other):.2f} cores on average during the best peak "
                      f"windows: the servers competed for CPU, so the ratios are noisy")


def _verdict(met: bool) -> str:
    return "[green]met[/green]" if met else "[red]MISSED[/red]"


def serve_loop(kind: str) -> Callable[[Any], Any]:
    """How a server kind runs: a gossamer hub on the event loop its commands choose
    (``GOSSAMER_LOOP``; a checkout from before that choice, on asyncio's), every other server
    on asyncio's, as its own library runs by default."""
    if kind in ("hub", RELAY):  # (another checkout's hub is served as "hub" from its src)
        try:
            from gossamer.runtimes.net.looppolicy import run as run_on_policy
        except ImportError:
            return asyncio.run
        return run_on_policy
    return asyncio.run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true",
                        help="10 clients, one round of 1-second windows (the smoke test)")
    parser.add_argument("--clients", type=int, nargs="+", help="client counts (default 50 200)")
    parser.add_argument("--window", type=float, help="seconds of each measuring window")
    parser.add_argument("--rounds", type=int, help="measuring rounds per server (default 4)")
    parser.add_argument("--json", metavar="OUT", help="also write the figures as JSON to OUT")
    parser.add_argument("--relay", action="store_true",
                        help="also measure the hub without its snapshot keeper (keeper=None)")
    parser.add_argument("--against", metavar="SRC",
                        help="also measure the hub served from another checkout's src "
                             "(hub-base), e.g. a worktree of the commit before a change")
    parser.add_argument("--serve", choices=KINDS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.against:
        if not os.path.isdir(os.path.join(args.against, "gossamer")):
            parser.error(f"--against {args.against}: no gossamer package there")
        SOURCES[BASE] = os.path.abspath(args.against)
    if args.serve:
        with contextlib.suppress(KeyboardInterrupt):
            serve_loop(args.serve)(serve(args.serve))
        return 0
    result = run(args.quick, clients=args.clients, window=args.window,
                 rounds=args.rounds, relay=args.relay)
    render(result, Console())
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(result, out, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
