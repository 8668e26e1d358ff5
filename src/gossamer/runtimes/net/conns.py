"""Connections on a real network: the connection contract of ``gossamer.core.conn`` on asyncio.

``Connections`` belongs to one node. It runs the node's listeners (JSON lines or length
prefixes on TCP through an ``asyncio.Protocol``; WebSocket through aiohttp, with static files
beside it), dials out, and enforces every limit of a ``ListenerSpec``: frame size, handshake
and idle timeouts, connection slots (some kept for promoted peers), and a bounded backlog per
connection (a reader that falls ``send_queue_limit`` frames behind is disconnected).

Sending is batched per event-loop iteration. A frame written to one connection joins that
connection's backlog; a frame written to a ``ConnGroup`` joins the iteration's batch in O(1),
and once per iteration the batch is framed and joined once and handed to every member (a
writer that excluded itself gets it without its own frames). Then every backlog goes to its
transport in as few writes as possible. A point-to-point write, a group change or a close
hands the batch out first, so every connection gets its frames in the order they were
written. When a transport pauses (its buffer is full: the reader is slower than we write), a
task waits for it to drain and writes the rest; meanwhile the backlog grows to its limit.

Every connection ends with exactly one ``closed(conn, reason)`` to its handler (while the
node runs), never from inside an env call.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import logging
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import WSCloseCode, WSMsgType, web
from aiohttp.http_websocket import WebSocketError

from ...core.conn import (
    CloseCode,
    CloseReason,
    ConnGroup,
    Framing,
    ListenerSpec,
    first_frame_deadline,
    parse_address,
)
from ...core.errors import ConfigError, ProtocolError
from .framing import StreamDecoder, frames_without, text_frame
from .netconn import CLOSE_TIMEOUT, NetConn, NodeSide, State, StreamProtocol
from .wsdirect import DirectWebSocketResponse

__all__ = ["Connections", "NetConn"]

log = logging.getLogger("gossamer.net")

LAYER = "conn"
CONNECT_TIMEOUT = 5.0
BATCH_LIMIT = 1024  # group frames batched before they are handed to the connections
DIALED_SEND_QUEUE = 10_000
CLOSE_REASON_BYTES = 123  # RFC 6455: a close frame's reason fits in 123 bytes
DETAIL_CHARS = 200


class Listening:
    """One bound listener: its spec, its handler (None: the node's process) and its open
    connections."""

    def __init__(self, spec: ListenerSpec, handler: Any) -> None:
        self.spec = spec
        self.handler = handler
        self.conns: set[NetConn] = set()
        self.address: tuple[str, int] = (spec.host, spec.port)
        self.server: asyncio.Server | None = None
        self.runner: web.AppRunner | None = None

    def unpromoted(self) -> int:
        return sum(1 for conn in self.conns if not conn.promoted)


class Connections:
    """The connections of one ``NetNode`` (see the module docstring)."""

    def __init__(self, node: NodeSide) -> None:
        self.node = node
        self._numbers = itertools.count(1)
        self._listeners: dict[str, Listening] = {}
        self._conns: set[NetConn] = set()
        self._flagged: list[NetConn] = []
        self._batch: list[bytes] = []
        self._batch_senders: list[NetConn | None] = []
        self._batch_group: ConnGroup | None = None
        self._flush_handle: asyncio.Handle | None = None
        self._session: aiohttp.ClientSession | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._finished = asyncio.Event()
        self._finished.set()
        self.accepting = True

    # -- listeners -------------------------------------------------------------------------

    async def listen(self, spec: ListenerSpec, handler: Any) -> tuple[str, int]:
        if spec.name in self._listeners:
            raise ConfigError(f"node {self.node.node_id} has a listener {spec.name!r} already")
        listening = Listening(spec, handler)
        if spec.framing is Framing.WS:
            await self._listen_ws(listening)
        else:
            loop = asyncio.get_running_loop()
            listening.server = await loop.create_server(
                lambda: self._accept_stream(listening), spec.host, spec.port)
            host, port = listening.server.sockets[0].getsockname()[:2]
            listening.address = (str(host), int(port))
        self._listeners[spec.name] = listening
        return listening.address

    def address(self, name: str) -> tuple[str, int]:
        return self._listeners[name].address

    def listener_names(self) -> list[str]:
        return list(self._listeners)

    async def _listen_ws(self, listening: Listening) -> None:
        spec = listening.spec
        app = web.Application()

        async def upgrade(request: web.Request) -> web.StreamResponse:
            if spec.path == "/" and spec.static_root is not None and not _is_upgrade(request):
                return _index(spec.static_root)  # a browser opening the page at /
            return await self._serve_ws(listening, request)

        app.router.add_get(spec.path, upgrade)
        if spec.path != "/":
            async def root(request: web.Request) -> web.StreamResponse:
                # a client that connects to ws://host:port/ upgrades there too
                if _is_upgrade(request):
                    return await self._serve_ws(listening, request)
                return _index(spec.static_root)
            app.router.add_get("/", root)
        if spec.static_root is not None:
            app.router.add_static("/", Path(spec.static_root), follow_symlinks=False,
                                  show_index=False)
        runner = web.AppRunner(app, access_log=None, handle_signals=False,
                               shutdown_timeout=CLOSE_TIMEOUT)
        await runner.setup()
        try:
            site = web.TCPSite(runner, spec.host, spec.port)
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        listening.runner = runner
        bound = runner.addresses[0]
        listening.address = (str(bound[0]), int(bound[1]))

    def _new_conn(self, listening: Listening | None, remote: str, *, handler: Any,
                  framing: Framing, max_frame: int, raw: bool) -> NetConn:
        spec = listening.spec if listening is not None else None
        if handler is None:
            handler = self.node.process
        prefix = spec.name if spec is not None else "out"
        conn = NetConn(f"{prefix}-{next(self._numbers)}",
                       listener=spec.name if spec is not None else None, remote=remote,
                       handler=handler, spec=spec, framing=framing, max_frame=max_frame,
                       limit=spec.send_queue_limit if spec is not None else DIALED_SEND_QUEUE,
                       raw=raw)
        if framing is not Framing.WS:
            conn.decoder = StreamDecoder(framing, max_frame)
        return conn

    def _accept_stream(self, listening: Listening) -> StreamProtocol:
        spec = listening.spec
        conn = self._new_conn(listening, "?", handler=listening.handler, framing=spec.framing,
                              max_frame=spec.max_frame, raw=True)
        return StreamProtocol(self, conn, listening)

    def accepted_stream(self, listening: Listening, conn: NetConn) -> None:
        transport = conn.transport
        if transport is None or transport.is_closing():
            return
        peer = transport.get_extra_info("peername")
        conn._remote = f"{peer[0]}:{peer[1]}" if peer else "?"
        if not self._admit(listening, conn):
            transport.close()
            return
        self._opened(conn, listening)

    async def _serve_ws(self, listening: Listening, request: web.Request) -> web.StreamResponse:
        spec = listening.spec
        ws = DirectWebSocketResponse(max_msg_size=spec.max_frame + 1, compress=False,
                                   heartbeat=spec.heartbeat, timeout=spec.close_timeout,
                                   decode_text=False)
        stream = await ws.prepare(request)
        conn = self._new_conn(listening, str(request.remote), handler=listening.handler,
                              framing=Framing.WS, max_frame=spec.max_frame, raw=True)
        conn.ws = ws
        conn.transport = request.transport
        conn.protocol = request.protocol
        conn.paused = lambda: bool(request.protocol.writing_paused)
        conn.stream = stream
        if not self._admit(listening, conn):
            with contextlib.suppress(Exception):
                async with asyncio.timeout(spec.close_timeout):
                    await ws.close(code=WSCloseCode.TRY_AGAIN_LATER,
                                   message=b"full: too many connections")
            return ws
        self._opened(conn, listening)
        if ws.direct:  # text messages straight from the parser; receive() gets the rest
            ws.deliver_to(functools.partial(self._text, conn))
        try:
            await self._read_ws(conn, ws)
        finally:
            await self._finish_ws(conn)
        return ws

    def _admit(self, listening: Listening, conn: NetConn) -> bool:
        spec = listening.spec
        starting = listening.handler is None and not self.node.running
        if not self.accepting or starting or len(listening.conns) >= spec.max_connections:
            why = (CloseReason.SHUTDOWN if not self.accepting or starting
                   else CloseReason.FULL)
            log.warning("%s: refusing a connection from %s on %s: %s", self.node.node_id,
                        conn.remote, spec.name, why)
            self._trace_conn(conn, "drop", reason=why)
            return False
        if listening.unpromoted() >= spec.max_connections - spec.reserved_for_peers:
            conn.probation = True  # a reserved slot: only for a peer that gets promoted
        return True

    def _opened(self, conn: NetConn, listening: Listening | None) -> None:
        self._spread()  # what was written to groups before it connected is not for it
        conn.state = State.OPEN
        conn.last_heard = asyncio.get_running_loop().time()
        self._conns.add(conn)
        self._finished.clear()
        if listening is not None:
            listening.conns.add(conn)
            spec = listening.spec
            loop = asyncio.get_running_loop()
            deadline = first_frame_deadline(spec, conn.probation)
            if deadline is not None:
                loop.call_later(deadline, self._handshake_due, conn)
            if spec.idle_timeout is not None:
                loop.call_later(spec.idle_timeout, self._idle_due, conn)
        self._dispatch(conn, "opened", conn, conn.remote)
        proto = conn.protocol
        if isinstance(proto, StreamProtocol) and proto.early:
            data = b"".join(proto.early)
            proto.early.clear()
            proto.data_received(data)

    # -- dialing ---------------------------------------------------------------------------

    def dial(self, address: str, *, framing: Framing, max_frame: int, handler: Any,
             limit: int | None = None) -> NetConn:
        """Dial ``address``; ``limit``: frames its backlog holds (default
        ``DIALED_SEND_QUEUE``)."""
        host, port, path = parse_address(address)
        if path is not None:
            framing = Framing.WS
        elif framing is Framing.WS:
            path = "/"
        if isinstance(max_frame, bool) or max_frame < 64:
            raise ConfigError(f"max_frame must be >= 64, got {max_frame!r}")
        conn = self._new_conn(None, address, handler=handler, framing=framing,
                              max_frame=max_frame, raw=framing is not Framing.WS)
        conn.promoted = True
        if limit is not None:
            conn.limit = limit
        self._spawn(self._dial(conn, host, port, path, framing))
        return conn

    async def _dial(self, conn: NetConn, host: str, port: int, path: str | None,
                    framing: Framing) -> None:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT):
                if framing is Framing.WS:
                    if self._session is None:
                        self._session = aiohttp.ClientSession()
                    url = (f"ws://[{host}]:{port}{path}" if ":" in host
                           else f"ws://{host}:{port}{path}")
                    ws = await self._session.ws_connect(url, max_msg_size=conn.max_frame + 1,
                                                        compress=0, autoping=True)
                    conn.ws = ws
                else:
                    await loop.create_connection(lambda: StreamProtocol(self, conn), host,
                                                 port)
        except (OSError, aiohttp.ClientError, TimeoutError) as exc:
            log.debug("%s: dial %s failed: %r", self.node.node_id, conn.remote, exc)
            if conn.state is State.CONNECTING:
                conn.state = State.CLOSED
                self._dispatch(conn, "closed", conn, CloseReason.REFUSED)
            return
        if conn.state is not State.CONNECTING:  # closed while dialing
            if conn.ws is not None:
                await conn.ws.close()
            elif conn.transport is not None:
                conn.transport.close()
            return
        if not self.accepting:
            if conn.ws is not None:
                await conn.ws.close()
            elif conn.transport is not None:
                conn.transport.close()
            return
        self._opened(conn, None)
        if conn.ws is not None:
            client = conn.ws
            try:
                await self._read_ws(conn, client)
            finally:
                await self._finish_ws(conn)

    # -- reading ---------------------------------------------------------------------------

    async def _read_ws(self, conn: NetConn,
                       ws: web.WebSocketResponse | aiohttp.ClientWebSocketResponse) -> None:
        while True:
            frame = await ws.receive()
            kind = frame.type
            if kind is WSMsgType.TEXT:
                data = frame.data
                self._text(conn, data if isinstance(data, bytes) else data.encode())
            elif kind is WSMsgType.BINARY:
                self._trace_conn(conn, "drop", size=len(frame.data), reason="binary")
                refusal = conn.spec.binary_close if conn.spec is not None else None
                if refusal is not None:
                    self._runtime_close(conn, "binary", *refusal)
            elif kind is WSMsgType.ERROR:
                exc = frame.data
                if isinstance(exc, WebSocketError) and exc.code == WSCloseCode.MESSAGE_TOO_BIG:
                    # aiohttp sent 1009 already
                    log.warning("%s: %s: too_large: a frame over %d bytes; closed it with "
                                "1009", self.node.node_id, conn, conn.max_frame)
                    self._trace_conn(conn, "drop", reason=CloseReason.TOO_LARGE,
                                     detail=str(exc)[:DETAIL_CHARS])
                    if conn.end_reason is None:
                        conn.end_reason = CloseReason.TOO_LARGE
                        conn.close_code = int(WSCloseCode.MESSAGE_TOO_BIG)
                else:
                    log.info("%s: %s failed: %r", self.node.node_id, conn, exc)
                return
            else:  # CLOSE, CLOSING, CLOSED
                return

    def _text(self, conn: NetConn, payload: bytes) -> None:
        """A WebSocket text message: UTF-8 or the connection fails (RFC 6455 8.1)."""
        if not payload.isascii():
            try:
                payload.decode()
            except UnicodeDecodeError:
                self._runtime_close(conn, CloseReason.INVALID_TEXT, CloseCode.INVALID_TEXT,
                                    "invalid UTF-8 in a text frame")
                return
        if conn.state is State.OPEN:
            self.received(conn, payload)

    def received(self, conn: NetConn, frame: bytes) -> None:
        """One frame for the service (the hot path: every attribute read here counts)."""
        conn.handshook = True
        conn.frames_in += 1
        if conn.watch_idle:
            conn.last_heard = asyncio.get_running_loop().time()
        node = self.node
        if not node.running:
            return
        try:
            conn.handler.received(conn, frame)
        except ProtocolError as exc:
            node.drop(exc.reason, peer=conn.remote, size=len(frame), error=str(exc))
        except Exception as exc:
            node.fail(exc, f"handling a frame from {conn.remote}")
            return
        if conn.probation and not conn.promoted and conn.state is State.OPEN:
            self._runtime_close(conn, CloseReason.FULL, CloseCode.TRY_AGAIN_LATER,
                                "server full: slots are kept for servers")
        if node.on_activity is not None:
            node.on_activity()

    def too_large(self, conn: NetConn, detail: str) -> None:
        log.warning("%s: closing %s: too_large: a frame over %d bytes", self.node.node_id,
                    conn, conn.max_frame)
        self._trace_conn(conn, "drop", reason=CloseReason.TOO_LARGE, detail=detail)
        conn.decoder = None  # read nothing more
        hook = getattr(conn.handler, "oversized", None)
        if hook is not None and self.node.running:
            self._call(conn, hook, conn, conn.max_frame + 1)
        self._runtime_close(conn, CloseReason.TOO_LARGE, CloseCode.TOO_BIG,
                            f"frame over {conn.max_frame} bytes")

    def _handshake_due(self, conn: NetConn) -> None:
        if conn.state is State.OPEN and not conn.handshook:
            self._runtime_close(conn, CloseReason.HANDSHAKE_TIMEOUT, CloseCode.POLICY,
                                "no first frame in time")

    def _idle_due(self, conn: NetConn) -> None:
        spec = conn.spec
        if conn.state is not State.OPEN or spec is None or spec.idle_timeout is None:
            return
        loop = asyncio.get_running_loop()
        quiet = loop.time() - conn.last_heard
        if quiet >= spec.idle_timeout:
            self._runtime_close(conn, CloseReason.IDLE_TIMEOUT, CloseCode.POLICY,
                                "idle for too long")
        else:
            loop.call_later(spec.idle_timeout - quiet, self._idle_due, conn)

    # -- writing ---------------------------------------------------------------------------

    def write(self, conn: NetConn, frame: bytes) -> None:
        if conn.state is not State.OPEN:
            return
        if self._batch:
            self._spread()
        if conn.queued >= conn.limit and self._full(conn, 1):
            return
        conn.add(conn.encode(frame) if conn.raw else frame, 1)
        if not conn.flagged:
            conn.flagged = True
            self._flagged.append(conn)
            if self._flush_handle is None:
                self._flush_handle = asyncio.get_running_loop().call_soon(self._flush)

    def write_each(self, frames: Iterable[tuple[NetConn, bytes]]) -> None:
        """Each frame queued as ``write`` queues it, and its connection's backlog handed to
        the transport at once (one write, before the next frame is read) unless the
        transport is paused, where the writer task goes on after its drain. A connection
        without a raw transport (aiohttp's WebSocket) is written at the end of the step."""
        for conn, frame in frames:
            if conn.state is not State.OPEN:
                continue
            if not conn.raw or conn.blocked:
                self.write(conn, frame)
                continue
            if self._batch:
                self._spread()
            if conn.queued >= conn.limit and self._full(conn, 1):
                continue
            conn.add(conn.encode(frame), 1)
            if self._write_backlog(conn) and conn.blocked:
                self._start_writer(conn)

    def write_many(self, conns: ConnGroup | Iterable[Any], frame: bytes,
                   exclude: Any) -> None:
        if not isinstance(conns, ConnGroup):
            for conn in list(conns):
                if conn is not exclude:
                    self.write(conn, frame)
            return
        if self._batch_group is not conns and self._batch:
            self._spread()
        self._batch_group = conns
        self._batch.append(frame)
        self._batch_senders.append(exclude)
        if len(self._batch) >= BATCH_LIMIT:
            self._spread()
        elif self._flush_handle is None:
            self._flush_handle = asyncio.get_running_loop().call_soon(self._flush)

    def group(self) -> ConnGroup:
        return ConnGroup(self._spread)

    def _spread(self) -> None:
        """Hand the batch to every open member of its group, framed and joined once (a writer
        that excluded itself gets it without its own frames)."""
        payloads = self._batch
        if not payloads:
            return
        senders = self._batch_senders
        group = self._batch_group
        self._batch, self._batch_senders, self._batch_group = [], [], None
        assert group is not None
        count = len(payloads)
        own: dict[NetConn, list[int]] = {}
        for position, sender in enumerate(senders):
            if sender is not None:
                own.setdefault(sender, []).append(position)
        # per framing: the batch framed and joined once, and where each frame starts in it
        joined: dict[Any, tuple[bytes, list[int]]] = {}
        flagged = self._flagged
        slow: list[NetConn] = []
        for conn in group:
            assert isinstance(conn, NetConn)
            if conn.state is not State.OPEN:
                continue
            mine = own.get(conn)
            n = count if mine is None else count - len(mine)
            if n == 0:
                continue
            if conn.queued + n > conn.limit and self._full(conn, n, slow):
                continue
            if not conn.raw:
                skip = set(mine or ())
                for position, payload in enumerate(payloads):
                    if position not in skip:
                        conn.add(payload, 1)
            else:
                entry = joined.get(conn.encode)
                if entry is None:
                    frames = [conn.encode(p) for p in payloads]
                    whole = frames[0] if count == 1 else b"".join(frames)
                    offsets = list(itertools.accumulate(map(len, frames), initial=0))
                    entry = joined[conn.encode] = (whole, offsets)
                whole, offsets = entry
                conn.add(whole if mine is None else frames_without(whole, offsets, mine), n)
            if not conn.flagged:
                conn.flagged = True
                flagged.append(conn)
        if flagged and self._flush_handle is None:
            self._flush_handle = asyncio.get_running_loop().call_soon(self._flush)
        for conn in slow:
            self._slow(conn)

    def _flush(self) -> None:
        """Once per loop iteration in which frames were queued: write every backlog whose
        transport takes more (a blocked one is written after its drain)."""
        self._flush_handle = None
        self._spread()
        flagged, self._flagged = self._flagged, []
        for conn in flagged:
            conn.flagged = False
            if conn.blocked:
                continue
            if not conn.raw:
                self._start_writer(conn)
                continue
            if not self._write_backlog(conn):
                continue
            if conn.blocked:
                self._start_writer(conn)

    def _write_backlog(self, conn: NetConn) -> bool:
        """Hand ``conn``'s backlog to its transport; False when the transport is broken (the
        connection is then aborted and its backlog dropped: one broken transport only)."""
        try:
            conn.write_backlog()
        except (ConnectionError, RuntimeError) as exc:
            log.info("%s: write to %s failed (%r); aborting", self.node.node_id, conn, exc)
            conn.discard_backlog()
            self._abort(conn)
            return False
        return True

    def _full(self, conn: NetConn, n: int, slow: list[NetConn] | None = None) -> bool:
        """Whether ``n`` more frames overflow ``conn``'s backlog; then it is closed as a slow
        consumer (now, or after the batch when ``slow`` collects it). A backlog at its limit
        is first written out if the transport takes more: the limit counts frames the reader
        is behind on, not frames written in one loop iteration (a burst of answers to a burst
        of commands read in one go)."""
        if conn.raw and not conn.blocked and conn.state is State.OPEN:
            if not self._write_backlog(conn):
                return True
            if conn.blocked:
                self._start_writer(conn)
            if conn.queued + n <= conn.limit:
                return False
        if slow is not None:
            slow.append(conn)
        else:
            self._slow(conn)
        return True

    def _start_writer(self, conn: NetConn) -> None:
        if conn.writer is None or conn.writer.done():
            conn.writer = asyncio.get_running_loop().create_task(
                self._write_later(conn), name=f"gossamer-writer-{conn.id}")

    async def _write_later(self, conn: NetConn) -> None:
        """Wait for the paused transport to drain, then write the backlog (or, on a WebSocket
        client, send it frame by frame). Never cancelled: it may be waiting in aiohttp's
        drain on a future that aiohttp's close shares."""
        try:
            if not conn.raw:
                ws = conn.ws
                assert isinstance(ws, aiohttp.ClientWebSocketResponse)
                while conn.backlog and conn.state in (State.OPEN, State.CLOSING):
                    payload = conn.backlog.popleft()
                    conn.queued -= conn.counts.popleft()
                    conn.frames_out += 1
                    await ws.send_frame(payload, WSMsgType.TEXT)
                return
            while conn.blocked and conn.state in (State.OPEN, State.CLOSING):
                await conn.stream.drain()
                conn.blocked = False
                conn.write_backlog()
        except (ConnectionError, RuntimeError) as exc:  # gone; the reader sees it as well
            log.debug("%s: send to %s failed: %r", self.node.node_id, conn, exc)
            conn.discard_backlog()

    def _slow(self, conn: NetConn) -> None:
        log.warning("%s: disconnecting %s: slow consumer, %d frames waiting",
                    self.node.node_id, conn, conn.queued)
        conn.discard_backlog()
        self._runtime_close(conn, CloseReason.SLOW_CONSUMER, CloseCode.POLICY,
                            f"slow consumer: {conn.limit} messages waiting to be sent")

    # -- closing ---------------------------------------------------------------------------

    def close(self, conn: NetConn, code: int, reason: str) -> None:
        """The service closes: what it wrote goes out first, then the close."""
        if conn.state is State.CONNECTING:
            conn.state = State.CLOSED
            self._announce(conn, CloseReason.CLOSED)
            return
        if conn.state is not State.OPEN:
            return
        self._begin_close(conn, CloseReason.CLOSED, code, reason)

    def _runtime_close(self, conn: NetConn, why: str, code: int, detail: str) -> None:
        if conn.state is not State.OPEN:
            return
        self._trace_conn(conn, "drop", reason=why, code=int(code))
        self._begin_close(conn, why, code, detail)

    def _begin_close(self, conn: NetConn, why: str, code: int, detail: str) -> None:
        self._spread()
        conn.state = State.CLOSING
        conn.end_reason = why
        conn.close_code = int(code)
        conn.flagged = False
        self._announce(conn, why)
        if conn.ws is None:
            transport = conn.transport
            if transport is not None and not transport.is_closing():
                if conn.backlog:
                    transport.write(b"".join(conn.backlog))
                    conn.frames_out += conn.queued
                    conn.discard_backlog()
                transport.close()  # connection_lost follows once the buffer is written
            return
        if conn.raw and conn.backlog and conn.transport is not None:
            if not conn.transport.is_closing():
                conn.transport.write(b"".join(conn.backlog))
                conn.frames_out += conn.queued
            conn.discard_backlog()
        conn.closer = asyncio.get_running_loop().create_task(
            self._close_ws(conn, code, detail), name=f"gossamer-closer-{conn.id}")

    async def _close_ws(self, conn: NetConn, code: int, detail: str) -> None:
        ws = conn.ws
        assert ws is not None
        message = detail.encode()[:CLOSE_REASON_BYTES].decode(errors="ignore").encode()
        try:
            if not conn.raw and conn.writer is not None:
                await asyncio.wait({conn.writer}, timeout=conn.close_timeout)
            async with asyncio.timeout(conn.close_timeout):
                await ws.close(code=code, message=message)
        except (TimeoutError, ConnectionError) as exc:
            log.info("%s: %s did not take its close frame (%r); aborting", self.node.node_id,
                     conn, exc)
            self._abort(conn)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            self._abort(conn)
            if task is not None and task.cancelling():
                raise
            # aiohttp's drain future was cancelled under it: not our cancellation

    def _abort(self, conn: NetConn) -> None:
        if conn.transport is not None:
            conn.transport.abort()
        elif isinstance(conn.ws, aiohttp.ClientWebSocketResponse) and not conn.ws.closed:
            self._spawn(conn.ws.close())

    def lost(self, conn: NetConn, *, reset: bool) -> None:
        """A stream connection ended (``connection_lost``)."""
        if conn.state is State.CONNECTING:
            return  # the dial gave up; _dial reports it
        self._ended(conn, reset=reset)

    async def _finish_ws(self, conn: NetConn) -> None:
        """A WebSocket's reader ended: wait for its closer and writer, then report it."""
        if conn.state is State.OPEN:
            conn.state = State.CLOSING
        conn.discard_backlog()
        if conn.closer is not None:
            await conn.closer  # bounded by the close timeout; it never raises
        if conn.writer is not None and not conn.writer.done():
            done, _ = await asyncio.wait({conn.writer}, timeout=conn.close_timeout)
            if not done:  # stuck in a drain that the peer never lets finish
                self._abort(conn)
            await asyncio.gather(conn.writer, return_exceptions=True)
        code = conn.ws.close_code if conn.ws is not None else None
        if conn.close_code is None and code is not None:
            conn.close_code = int(code)  # the peer's
        self._ended(conn, reset=code is None or code == WSCloseCode.ABNORMAL_CLOSURE)

    def _ended(self, conn: NetConn, *, reset: bool) -> None:
        if conn.state is State.CLOSED:
            return
        reason = conn.end_reason
        if reason is None:
            reason = CloseReason.RESET if reset else CloseReason.PEER_CLOSED
        conn.state = State.CLOSED
        conn.discard_backlog()
        self._trace_conn(conn, "close", reason=reason, code=conn.close_code,
                         frames_in=conn.frames_in, frames_out=conn.frames_out)
        self._conns.discard(conn)
        listening = self._listeners.get(conn.listener or "")
        if listening is not None:
            listening.conns.discard(conn)
        if not self._conns:
            self._finished.set()
        if not conn.announced:
            conn.announced = True
            self._dispatch(conn, "closed", conn, reason)

    def _announce(self, conn: NetConn, reason: str) -> None:
        """``closed(conn, reason)`` to the handler, soon (never inside the env call that
        closed it). A connection this side closes is closed for the service at once, however
        long the close handshake then takes."""
        if not conn.announced:
            conn.announced = True
            asyncio.get_running_loop().call_soon(self._dispatch, conn, "closed", conn, reason)

    async def shutdown(self) -> None:
        """Close every connection (1001), wait for them, stop listening."""
        self.accepting = False
        self._spread()
        for conn in list(self._conns):
            if conn.state is State.OPEN:  # what was written to it still goes out first
                self._begin_close(conn, CloseReason.SHUTDOWN, CloseCode.GOING_AWAY,
                                  "shutting down")
        if self._conns:
            try:
                await asyncio.wait_for(self._finished.wait(), 2 * CLOSE_TIMEOUT)
            except TimeoutError:
                log.warning("%s: %d connection(s) did not finish closing; aborting them",
                            self.node.node_id, len(self._conns))
                for conn in list(self._conns):
                    self._abort(conn)
        for listening in self._listeners.values():
            if listening.server is not None:
                listening.server.close()
                await listening.server.wait_closed()
            if listening.runner is not None:
                await listening.runner.cleanup()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._session is not None:
            await self._session.close()
            self._session = None

    # -- the service -----------------------------------------------------------------------

    def _dispatch(self, conn: NetConn, name: str, *args: Any) -> None:
        if not self.node.running:
            return
        fn = getattr(conn.handler, name, None)
        if fn is None:
            self.node.fail(ConfigError(f"{conn.handler!r} has no {name}() (see "
                                       "gossamer.core.conn.ConnectionHandler)"), name)
            return
        self._call(conn, fn, *args)
        self.node.activity()

    def _call(self, conn: NetConn, fn: Callable[..., object], *args: Any) -> None:
        try:
            fn(*args)
        except ProtocolError as exc:
            self.node.drop(exc.reason, peer=conn.remote, error=str(exc))
        except Exception as exc:
            self.node.fail(exc, f"in {getattr(fn, '__name__', fn)} of {conn.remote}")

    def promote(self, conn: NetConn) -> None:
        conn.promoted = True
        conn.probation = False

    def _spawn(self, coro: Any) -> None:
        task: asyncio.Task[None] = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _trace_conn(self, conn: NetConn, event: str, **info: Any) -> None:
        self.node.conn_row(event, peer=conn.remote, conn=conn.id, **info)


def _is_upgrade(request: web.Request) -> bool:
    return request.headers.get("Upgrade", "").lower() == "websocket"


def _index(static_root: str | None) -> web.StreamResponse:
    if static_root is None:
        raise web.HTTPNotFound(text="no web root is served here")
    index = Path(static_root) / "index.html"
    if not index.is_file():
        raise web.HTTPNotFound(text="no index.html in the web root")
    return web.FileResponse(index)


__all__ += ["text_frame"]
