"""The hub of seed 000 on real WebSockets (aiohttp): the seed's multicast channel as a server.

``HubRelay`` decides where each message goes and ``HubKeeper`` keeps the durable snapshot
(sqlite in ``data_dir``) that answers subscribes and NACKs; this module moves frames. It also
serves the browser client's static files on the same port. Bad input is dropped, never fatal.

Sending: a multicast costs O(1) when it arrives: its frame joins the iteration's batch. Once
per event-loop iteration the batch is joined into one buffer and handed to every open
connection (a sender gets it without its own frames), then every backlog is written to its
transport, as few writes of up to ``WRITE_CHUNK`` bytes (one ``send()`` for all the frames a
connection got in that iteration, instead of one per frame and a writer-task wake-up each). A
frame for one connection (``dest``, the hub's answers) hands the batch out first, so every
connection gets its frames in the order the hub handled them. When a transport pauses
writing (its buffer is over the high-water mark: the client reads slower than we send), that
connection's writer task waits for it to drain and writes the rest; meanwhile the backlog
grows, and a connection with ``send_queue_limit`` frames waiting is disconnected (slow
consumer).
"""

from __future__ import annotations

import asyncio
import enum
import itertools
import logging
import struct
import time
from collections import deque
from collections.abc import Iterable, KeysView
from pathlib import Path
from typing import Any, cast

from aiohttp import WSCloseCode, WSMsgType, web
from aiohttp.abc import AbstractStreamWriter
from aiohttp.http_websocket import WebSocketError

from ...core.errors import ConfigError, DecodeError, ProtocolError, StateError
from ...core.messages import Message
from ...core.trace import NullSink, TraceSink, encode_info
from ...protocols.dissemination.hub_relay import HubRelay, Route, dest_of
from ...protocols.replica.keeper import HubKeeper, KeeperConfig
from ...protocols.replica.wire import HUB_ID, ReplicaCodec
from ...runtimes.net import LoopEnv, WriteBehindStore

__all__ = ["DEFAULT_MAX_FRAME", "HubServer", "HubState", "frames_without", "text_frame"]

log = logging.getLogger("gossamer.hub")

LAYER = "hub"
DEFAULT_MAX_FRAME = 64 * 1024
CLOSE_REASON_BYTES = 123  # RFC 6455: a close frame's reason fits in 123 bytes
DROP_DETAIL_CHARS = 200
DEFAULT_KEEPER = KeeperConfig()
STORE_FILE = "hub.sqlite"
WRITE_CHUNK = 64 * 1024  # bytes of frames joined into one transport write (at least one frame)
BATCH_LIMIT = 1024  # multicast frames batched before they are handed to the connections
_TEXT = 0x81  # FIN + opcode 1 (text): the first byte of every frame the hub sends
_LEN16 = struct.Struct("!BBH").pack
_LEN64 = struct.Struct("!BBQ").pack


def text_frame(payload: bytes) -> bytes:
    """A final, unmasked text frame carrying ``payload`` (RFC 6455 5.2: a server's frame)."""
    length = len(payload)
    if length < 126:
        return bytes((_TEXT, length)) + payload
    if length < 1 << 16:
        return _LEN16(_TEXT, 126, length) + payload
    return _LEN64(_TEXT, 127, length) + payload


class HubState(enum.Enum):
    NEW = "new"
    RUNNING = "running"
    STOPPING = "stopping"
    STOPPED = "stopped"


class _ConnState(enum.Enum):
    OPEN = "open"  # subscribed in the relay, frames flow both ways
    CLOSING = "closing"  # unsubscribed by the hub (slow consumer, shutdown); close in progress
    CLOSED = "closed"


class _Connection:
    """One WebSocket client: its bounded backlog of frames, writer task and counters.

    The object itself is the relay's connection key (hashed by identity).
    """

    __slots__ = ("backlog", "blocked", "client", "close_code", "closer", "counts", "dropped",
                 "flagged", "frames_in", "frames_out", "number", "protocol", "queued", "reason",
                 "remote", "state", "stopped", "stream", "transport", "wake", "writer", "ws")

    def __init__(self, number: int, ws: web.WebSocketResponse, request: web.Request,
                 stream: AbstractStreamWriter) -> None:
        self.number = number
        self.ws = ws
        self.remote = str(request.remote)
        self.transport = request.transport  # frames go here; also to abort a stuck client
        self.protocol = request.protocol  # ``writing_paused``: the transport's buffer is full
        self.stream = stream  # ``drain()``: wait until the transport takes more
        # encoded frames not yet written to the transport, oldest first, one or several joined
        # in each entry (``counts``: how many); ``queued`` frames in all, at most the hub's
        # ``send_queue_limit`` (a full backlog disconnects the connection)
        self.backlog: deque[bytes] = deque()
        self.counts: deque[int] = deque()
        self.queued = 0
        self.flagged = False  # on the hub's list of backlogs to write this loop iteration
        self.blocked = False  # the transport paused: the writer task waits for its drain
        self.stopped = False  # the writer task ends (see ``stop_writer``)
        self.wake = asyncio.Event()  # tells the writer task to drain or to stop
        self.state = _ConnState.OPEN
        self.client: str | None = None  # the id it last spoke for
        self.writer: asyncio.Task[None] | None = None
        self.closer: asyncio.Task[None] | None = None
        self.reason = "closed by the client"
        self.close_code: int | None = None  # the code the hub closed with, if it closed first
        self.frames_in = 0
        self.frames_out = 0
        self.dropped = 0

    def stop_writer(self) -> None:
        """Discard the backlog and let the writer end by itself.

        Never cancel the writer: it may be waiting in aiohttp's drain, on a future aiohttp
        shares with ``close()``, and cancelling the task would cancel that future too.
        """
        self.discard_backlog()
        self.stopped = True
        self.wake.set()

    def discard_backlog(self) -> None:
        self.backlog.clear()
        self.counts.clear()
        self.queued = 0

    def add(self, frames: bytes, count: int) -> None:
        """Queue ``count`` encoded frames, joined in ``frames``."""
        self.backlog.append(frames)
        self.counts.append(count)
        self.queued += count

    def write_backlog(self) -> None:
        """Write the backlog to the transport, in writes of up to ``WRITE_CHUNK`` bytes, until
        it is empty or the transport pauses (then the writer task takes over: ``blocked``).
        Nothing is written once the hub or aiohttp started closing the connection (a data
        frame must not follow the close frame): the backlog is dropped then."""
        backlog = self.backlog
        transport = self.transport
        if (self.state is not _ConnState.OPEN or self.ws.closed or transport is None
                or transport.is_closing()):
            self.discard_backlog()
            return
        protocol = self.protocol
        counts = self.counts
        whole = True  # try everything in one write first (the usual case: small frames)
        while backlog:
            if protocol.writing_paused:
                self.blocked = True
                self.wake.set()
                return
            if whole:
                if len(backlog) == 1 or sum(map(len, backlog)) <= WRITE_CHUNK:
                    data = backlog[0] if len(backlog) == 1 else b"".join(backlog)
                    self.frames_out += self.queued
                    self.discard_backlog()
                    transport.write(data)
                    return
                whole = False
            # at least one entry, then more while they fit in WRITE_CHUNK bytes
            data = backlog.popleft()
            count = counts.popleft()
            parts = [data]
            size = len(data)
            while backlog and size + len(backlog[0]) <= WRITE_CHUNK:
                part = backlog.popleft()
                count += counts.popleft()
                parts.append(part)
                size += len(part)
            self.frames_out += count
            self.queued -= count
            transport.write(data if len(parts) == 1 else b"".join(parts))

    def __repr__(self) -> str:
        return f"<connection #{self.number} {self.client or '?'} from {self.remote}>"


class HubServer:
    """The seed-000 hub: WebSocket relay at ``/ws`` (and ``/``) plus static files from
    ``web_root``. ``await start()``, then ``address``; ``await stop()`` closes every connection
    and flushes ``trace`` (the caller closes the sink)."""

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        web_root: Path | None = None,
        max_frame: int = DEFAULT_MAX_FRAME,
        send_queue_limit: int = 1000,
        max_connections: int = 10_000,
        heartbeat: float | None = 30.0,
        close_timeout: float = 5.0,
        trace: TraceSink | None = None,
        run: str = "hub",
        data_dir: Path | None = None,
        keeper: KeeperConfig | None = DEFAULT_KEEPER,
    ) -> None:
        """``data_dir``: where the keeper's sqlite store lives (None: in memory, lost on stop);
        ``keeper`` None runs the seed's bare relay, with no snapshot."""
        if not host:
            raise ConfigError("host must be non-empty")
        if isinstance(port, bool) or not 0 <= port <= 65535:
            raise ConfigError(f"port must be in 0..65535, got {port}")
        if web_root is not None and not Path(web_root).is_dir():
            raise ConfigError(f"web_root {web_root} is not a directory")
        for name, value in (("max_frame", max_frame), ("send_queue_limit", send_queue_limit),
                            ("max_connections", max_connections)):
            if isinstance(value, bool) or value < 1:
                raise ConfigError(f"{name} must be >= 1, got {value}")
        if heartbeat is not None and heartbeat <= 0:
            raise ConfigError(f"heartbeat must be > 0 seconds or None, got {heartbeat}")
        if close_timeout <= 0:
            raise ConfigError(f"close_timeout must be > 0 seconds, got {close_timeout}")
        if not run:
            raise ConfigError("run must be non-empty")
        if data_dir is not None and not Path(data_dir).is_dir():
            raise ConfigError(f"data_dir {data_dir} is not a directory")
        self.host = host
        self.port = port
        self.web_root = None if web_root is None else Path(web_root).resolve()
        self.max_frame = max_frame
        self.send_queue_limit = send_queue_limit
        self.max_connections = max_connections
        self.heartbeat = heartbeat
        self.close_timeout = close_timeout
        self.trace = trace if trace is not None else NullSink()
        self.run = run
        self.data_dir = None if data_dir is None else Path(data_dir)
        self.keeper_config = keeper
        self.keeper: HubKeeper | None = None
        self._keeper_env: LoopEnv | None = None
        self._store: WriteBehindStore | None = None
        self.state = HubState.NEW
        self._codec = ReplicaCodec(max_frame=max_frame)
        self._relay = HubRelay(max_connections=max_connections)
        self._numbers = itertools.count(1)
        self._connections: set[_Connection] = set()
        self._flagged: list[_Connection] = []  # backlogs to write at the end of this iteration
        # multicast frames of this iteration, not yet handed to the connections, and who sent
        # each (it does not get its own)
        self._batch: list[bytes] = []
        self._batch_senders: list[_Connection] = []
        self._flush_handle: asyncio.Handle | None = None
        self._all_finished = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self._address: tuple[str, int] | None = None
        self._t0 = time.monotonic()

    # -- lifecycle -------------------------------------------------------------------------

    @property
    def address(self) -> tuple[str, int]:
        """The bound (host, port); only after ``start()``."""
        if self._address is None:
            raise StateError(f"hub is {self.state.value}: address is known once started")
        return self._address

    @property
    def url(self) -> str:
        host, port = self.address
        return f"http://[{host}]:{port}/" if ":" in host else f"http://{host}:{port}/"

    @property
    def connections(self) -> int:
        """Connections subscribed in the relay right now."""
        return len(self._relay)

    async def start(self) -> None:
        if self.state is not HubState.NEW:
            raise StateError(f"start() on a hub that is {self.state.value}")
        app = web.Application()
        app.router.add_get("/ws", self._serve_websocket)
        app.router.add_get("/", self._serve_root)
        if self.web_root is not None:
            app.router.add_static("/", self.web_root, follow_symlinks=False, show_index=False)
        if self.keeper_config is not None:
            self._start_keeper(self.keeper_config)
        runner = web.AppRunner(app, access_log=None, handle_signals=False,
                               shutdown_timeout=self.close_timeout)
        await runner.setup()
        try:
            site = web.TCPSite(runner, self.host, self.port)
            await site.start()
        except BaseException:
            await runner.cleanup()
            self._stop_keeper()
            raise
        self._runner = runner
        bound = runner.addresses[0]
        self._address = (str(bound[0]), int(bound[1]))
        self._t0 = time.monotonic()
        self.state = HubState.RUNNING
        log.info("hub listening on %s", self.url)

    async def stop(self) -> None:
        """Close every connection (1001), wait for their handlers, stop listening, flush."""
        if self.state is not HubState.RUNNING:
            return
        self.state = HubState.STOPPING
        for conn in list(self._connections):
            self._unsubscribe(conn, WSCloseCode.GOING_AWAY, "hub shutting down")
        if self._connections:
            try:
                await asyncio.wait_for(self._all_finished.wait(), 2 * self.close_timeout)
            except TimeoutError:
                log.warning("%d connection(s) did not finish closing; aborting them",
                            len(self._connections))
                for conn in self._connections:
                    self._abort(conn)
        assert self._runner is not None
        await self._runner.cleanup()
        self._runner = None
        self._stop_keeper()
        self.trace.flush()
        self.state = HubState.STOPPED
        log.info("hub stopped")

    def _start_keeper(self, config: KeeperConfig) -> None:
        path = ":memory:" if self.data_dir is None else self.data_dir / STORE_FILE
        self._store = WriteBehindStore(path)
        self._keeper_env = LoopEnv(HUB_ID, send=lambda _dst, msg: self._from_hub(msg),
                                   store=self._store, trace=self.trace, run=self.run)
        self.keeper = HubKeeper(self._keeper_env, self._from_hub, config=config)
        self.keeper.start()

    def _stop_keeper(self) -> None:
        if self.keeper is not None:
            self.keeper.stop()  # commits what the group commit still holds
            self.keeper = None
        if self._keeper_env is not None:
            self._keeper_env.shutdown()
            self._keeper_env = None
        if self._store is not None:
            self._store.close()
            self._store = None

    def _from_hub(self, msg: Message) -> None:
        if self.state is HubState.RUNNING:
            self._forward(self._relay.from_hub(msg), None, b"")

    async def __aenter__(self) -> HubServer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    # -- HTTP --------------------------------------------------------------------------------

    async def _serve_root(self, request: web.Request) -> web.StreamResponse:
        # The seed's client connects to ws://host:port/, so "/" upgrades too.
        if request.headers.get("Upgrade", "").lower() == "websocket":
            return await self._serve_websocket(request)
        if self.web_root is None:
            raise web.HTTPNotFound(text="this hub serves no web root (start it with --web-root)")
        index = self.web_root / "index.html"
        if not index.is_file():
            raise web.HTTPNotFound(text="no index.html in the web root")
        return web.FileResponse(index)

    # -- one WebSocket connection --------------------------------------------------------------

    async def _serve_websocket(self, request: web.Request) -> web.StreamResponse:
        ws = web.WebSocketResponse(max_msg_size=self.max_frame, compress=False,
                                   heartbeat=self.heartbeat, timeout=self.close_timeout,
                                   decode_text=False)
        stream = await ws.prepare(request)
        conn = _Connection(next(self._numbers), ws, request, stream)
        self._spread()  # what was multicast before it connected is not for it
        if self.state is not HubState.RUNNING:
            await self._close(conn, WSCloseCode.GOING_AWAY, "hub shutting down")
            return ws
        try:
            self._relay.connect(conn)
        except StateError as exc:
            log.warning("refused %r: %s", conn, exc)
            self._trace("drop", conn, info={"reason": "full", "detail": str(exc)})
            await self._close(conn, WSCloseCode.TRY_AGAIN_LATER,
                              f"hub full: {self.max_connections} connections")
            return ws
        self._connections.add(conn)
        self._all_finished.clear()
        conn.writer = asyncio.create_task(self._write_loop(conn), name=f"hub-writer-{conn.number}")
        try:
            await self._read_loop(conn)
        finally:
            await self._finish(conn)
        return ws

    async def _read_loop(self, conn: _Connection) -> None:
        ws = conn.ws
        while True:
            frame = await ws.receive()
            if frame.type is WSMsgType.TEXT:
                self._on_text(conn, frame.data)
            elif frame.type is WSMsgType.BINARY:
                conn.frames_in += 1
                self._drop(conn, "binary", "binary frames are not seed-000 messages",
                           len(frame.data))
            elif frame.type is WSMsgType.ERROR:
                self._on_error(conn, frame.data)
                return
            else:  # CLOSE, CLOSING, CLOSED
                return

    def _on_error(self, conn: _Connection, exc: BaseException) -> None:
        if isinstance(exc, WebSocketError) and exc.code == WSCloseCode.MESSAGE_TOO_BIG:
            conn.close_code = WSCloseCode.MESSAGE_TOO_BIG  # aiohttp sent it already
            conn.reason = f"frame over max_frame={self.max_frame}"
            log.warning("%r sent a frame over %d bytes; closed it with 1009", conn,
                        self.max_frame)
            self._trace("drop", conn,
                        info={"reason": "too_large", "detail": str(exc)[:DROP_DETAIL_CHARS]})
        else:
            conn.reason = f"connection error: {exc!r}"[:DROP_DETAIL_CHARS]
            log.info("%r failed: %r", conn, exc)

    def _on_text(self, conn: _Connection, payload: bytes) -> None:
        """A text frame's payload (aiohttp hands it over undecoded: the JSON decoder checks
        the UTF-8, and the payload is forwarded as it came)."""
        conn.frames_in += 1
        if conn.state is not _ConnState.OPEN:
            return  # already unsubscribed: what it still sends goes nowhere
        before = self._relay.id_of(conn)
        try:
            msg = self._codec.decode(payload)
            self._relay.bind(conn, msg)
            forward = msg if self.keeper is None else self.keeper.handle(msg, payload)
            multicast = forward is msg and dest_of(msg) is None
            routes = ([] if forward is None or multicast
                      else self._relay.routes(conn, forward))
        except ProtocolError as exc:
            if isinstance(exc, DecodeError) and not _is_utf8(payload):
                # RFC 6455 8.1: a text frame that is not UTF-8 fails the connection
                self._drop(conn, "invalid_text", "a text frame that is not UTF-8",
                           len(payload))
                self._forward(self._unsubscribe(conn, WSCloseCode.INVALID_TEXT,
                                                "invalid UTF-8 in a text frame"), None, b"")
                return
            self._drop(conn, exc.reason, str(exc), len(payload))
            return
        if before is None:
            conn.client = self._relay.id_of(conn)
            self._trace("join", conn, info={"conn": conn.number, "remote": conn.remote})
        if multicast:
            self._multicast(conn, payload)
        else:
            self._forward(routes, msg, payload)

    def _multicast(self, sender: _Connection, payload: bytes) -> None:
        """The hot path: ``payload`` as received, to every other connection, at the end of this
        loop iteration (``_spread``); O(1) here, whatever the number of connections."""
        batch = self._batch
        batch.append(text_frame(payload))
        self._batch_senders.append(sender)
        if len(batch) >= BATCH_LIMIT:
            self._spread()
        elif self._flush_handle is None:
            self._flush_handle = asyncio.get_running_loop().call_soon(self._flush)

    def _spread(self) -> None:
        """Hand the batch of multicast frames to every open connection, as one buffer (a
        sender's without its own frames): one backlog entry per connection per batch."""
        frames = self._batch
        if not frames:
            return
        senders = self._batch_senders
        self._batch, self._batch_senders = [], []
        count = len(frames)
        whole = frames[0] if count == 1 else b"".join(frames)
        own: dict[_Connection, list[int]] = {}  # sender -> the positions of its frames
        for position, sender in enumerate(senders):
            mine = own.get(sender)
            if mine is None:
                own[sender] = [position]
            else:
                mine.append(position)
        offsets: list[int] | None = None
        limit = self.send_queue_limit
        flagged = self._flagged
        slow: list[_Connection] = []
        for conn in cast(KeysView[_Connection], self._relay.connections()):
            if conn.state is not _ConnState.OPEN:
                continue
            mine = own.get(conn)
            if mine is None:
                frames_for, n = whole, count
            else:
                n = count - len(mine)
                if n == 0:
                    continue
                if offsets is None:
                    offsets = list(itertools.accumulate(map(len, frames), initial=0))
                frames_for = frames_without(whole, offsets, mine)
            if conn.queued + n > limit:
                slow.append(conn)
                continue
            conn.add(frames_for, n)
            if not conn.flagged:
                conn.flagged = True
                flagged.append(conn)
        if self._flush_handle is None and flagged:
            self._flush_handle = asyncio.get_running_loop().call_soon(self._flush)
        for conn in slow:
            self._forward(self._evict(conn), None, b"")

    def _enqueue(self, conn: _Connection, frame: bytes) -> bool:
        """Append ``frame`` to the backlog of the open ``conn`` (after the multicasts handled
        before it); False when the backlog is full."""
        self._spread()
        if conn.queued >= self.send_queue_limit:
            return False
        conn.add(frame, 1)
        if not conn.flagged:
            conn.flagged = True
            self._flagged.append(conn)
            if self._flush_handle is None:
                self._flush_handle = asyncio.get_running_loop().call_soon(self._flush)
        return True

    def _flush(self) -> None:
        """Once per loop iteration in which frames were queued: write every backlog whose
        transport takes more (a blocked one is written by its writer task after the drain)."""
        self._flush_handle = None
        self._spread()
        flagged, self._flagged = self._flagged, []
        for conn in flagged:
            conn.flagged = False
            if not conn.blocked:
                try:
                    conn.write_backlog()
                except (ConnectionError, RuntimeError) as exc:  # one broken transport only
                    log.info("%r: write failed (%r); aborting", conn, exc)
                    conn.discard_backlog()
                    self._abort(conn)

    async def _write_loop(self, conn: _Connection) -> None:
        """Wait for the paused transport to drain, then write the backlog; until stopped."""
        wake, stream = conn.wake, conn.stream
        try:
            while True:
                await wake.wait()
                wake.clear()
                if conn.stopped:
                    return
                await stream.drain()
                if conn.stopped:
                    return
                conn.blocked = False
                conn.write_backlog()
        except ConnectionError as exc:  # the transport is gone; the read loop sees it as well
            log.debug("%r: send failed: %r", conn, exc)

    async def _finish(self, conn: _Connection) -> None:
        if conn.state is _ConnState.OPEN:
            conn.state = _ConnState.CLOSED
            routes = self._relay.disconnect(conn)
            if self.state is HubState.RUNNING:
                self._forward(routes, None, b"")
        conn.state = _ConnState.CLOSED
        conn.stop_writer()
        if conn.closer is not None:
            await conn.closer  # bounded by close_timeout; it never raises
        if conn.writer is not None:
            done, _ = await asyncio.wait({conn.writer}, timeout=self.close_timeout)
            if not done:  # stuck in a drain that the peer never lets finish
                self._abort(conn)
            await asyncio.gather(conn.writer, return_exceptions=True)
        close_code = conn.close_code if conn.close_code is not None else conn.ws.close_code
        self._trace("leave", conn, info={
            "conn": conn.number, "frames_in": conn.frames_in, "frames_out": conn.frames_out,
            "dropped": conn.dropped, "close_code": close_code, "reason": conn.reason,
        })
        log.info("%r left (code %s: %s; %d frames in, %d out, %d dropped)", conn, close_code,
                 conn.reason, conn.frames_in, conn.frames_out, conn.dropped)
        self._connections.discard(conn)
        if not self._connections:
            self._all_finished.set()

    # -- routing -------------------------------------------------------------------------------

    def _forward(self, routes: Iterable[Route], original: Message | None,
                 received: bytes) -> None:
        """Append each route's frame to its connection's backlog; a full backlog evicts that
        connection (whose ``Left`` routes join the work list). ``original`` is forwarded as
        ``received``, the payload it was decoded from; anything else the hub says is encoded
        here."""
        pending = deque(routes)
        encoded: dict[int, bytes] = {}
        while pending:
            route = pending.popleft()
            conn = route.to
            assert isinstance(conn, _Connection)
            if conn.state is not _ConnState.OPEN:
                continue
            frame = encoded.get(id(route.msg))
            if frame is None:
                payload = (received if route.msg is original
                           else self._codec.encode(route.msg))
                frame = encoded[id(route.msg)] = text_frame(payload)
            if not self._enqueue(conn, frame):
                pending.extend(self._evict(conn))

    def _evict(self, conn: _Connection) -> list[Route]:
        """Disconnect a slow consumer; the ``Left`` routes for the others."""
        reason = f"slow consumer: {self.send_queue_limit} messages waiting to be sent"
        log.warning("disconnecting %r: %s", conn, reason)
        return self._unsubscribe(conn, WSCloseCode.POLICY_VIOLATION, reason)

    def _unsubscribe(self, conn: _Connection, code: WSCloseCode, reason: str) -> list[Route]:
        """Take ``conn`` out of the relay now and close it in the background with ``code``."""
        if conn.state is not _ConnState.OPEN:
            return []
        conn.state = _ConnState.CLOSING
        conn.reason = reason
        conn.close_code = code
        routes = self._relay.disconnect(conn)
        conn.stop_writer()  # its backlog will never be sent
        conn.closer = asyncio.create_task(self._close(conn, code, reason),
                                          name=f"hub-closer-{conn.number}")
        return routes

    async def _close(self, conn: _Connection, code: WSCloseCode, reason: str) -> None:
        try:
            async with asyncio.timeout(self.close_timeout):
                await conn.ws.close(code=code, message=_reason_bytes(reason))
        except (TimeoutError, ConnectionError) as exc:
            # A client that does not read would hold the socket open forever.
            log.info("%r did not take its close frame (%r); aborting", conn, exc)
            self._abort(conn)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                self._abort(conn)
                raise
            # aiohttp's drain future was cancelled under it: not our cancellation
            log.info("%r: close interrupted; aborting", conn)
            self._abort(conn)

    def _abort(self, conn: _Connection) -> None:
        if conn.transport is not None:
            conn.transport.abort()

    # -- trace and drops -------------------------------------------------------------------------

    def _drop(self, conn: _Connection, reason: str, detail: str, size: int) -> None:
        conn.dropped += 1
        detail = detail[:DROP_DETAIL_CHARS]
        log.info("dropped a frame from %r: %s: %s", conn, reason, detail)
        self._trace("drop", conn, size=size, info={"reason": reason, "detail": detail})

    def _trace(self, event: str, conn: _Connection, *, size: int | None = None,
               info: dict[str, Any]) -> None:
        sink = self.trace
        if not sink.enabled:
            return
        sink.append((self.run, time.monotonic() - self._t0, HUB_ID, LAYER, event, None, None,
                     conn.client, None, None, size, encode_info(info)))


def _is_utf8(payload: bytes) -> bool:
    try:
        payload.decode()
    except UnicodeDecodeError:
        return False
    return True


def frames_without(frames: bytes, offsets: list[int], positions: list[int]) -> bytes:
    """``frames`` (joined; frame i spans ``offsets[i]:offsets[i + 1]``) without the frames at
    ``positions`` (ascending)."""
    view = memoryview(frames)
    parts: list[memoryview] = []
    start = 0
    for position in positions:
        if offsets[position] > start:
            parts.append(view[start:offsets[position]])
        start = offsets[position + 1]
    if start < len(frames):
        parts.append(view[start:])
    return b"".join(parts)


def _reason_bytes(reason: str) -> bytes:
    """``reason`` as a close frame's reason: UTF-8, cut to 123 bytes on a character boundary."""
    return reason.encode()[:CLOSE_REASON_BYTES].decode(errors="ignore").encode()
