"""One connection of the network runtime: its state, its bounded backlog of frames and how
it is written to the transport, and the ``asyncio.Protocol`` that frames a TCP stream.

``conns.py`` (the node's ``Connections``) creates, feeds and closes them.
"""

from __future__ import annotations

import asyncio
import enum
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol, cast

import aiohttp
from aiohttp import web

from ...core.conn import Framing, ListenerSpec
from ...core.errors import FrameTooLarge
from .framing import StreamDecoder, encoder_for

__all__ = ["CLOSE_TIMEOUT", "WRITE_CHUNK", "NetConn", "NodeSide", "State", "StreamProtocol"]

CLOSE_TIMEOUT = 5.0  # seconds for a close handshake before the transport is aborted
WRITE_CHUNK = 64 * 1024  # bytes of frames joined into one transport write (at least one frame)


class NodeSide(Protocol):
    """What the connection layer and the peer links need of the node they serve (a
    ``NetNode``): kept here so that they depend on it, not on the node's module."""

    node_id: str
    running: bool
    process: Any
    on_activity: Callable[[], None] | None
    max_frame: int
    send_queue_limit: int

    def fail(self, exc: BaseException, where: str) -> None: ...

    def activity(self) -> None: ...

    def drop(self, reason: str, **fields: Any) -> None: ...

    def conn_row(self, event: str, *, peer: str | None = None, **info: Any) -> None: ...


class _StreamOwner(Protocol):
    """What a ``StreamProtocol`` reports to (the node's ``Connections``)."""

    def accepted_stream(self, accepted: Any, conn: NetConn) -> None: ...

    def received(self, conn: NetConn, frame: bytes) -> None: ...

    def too_large(self, conn: NetConn, detail: str) -> None: ...

    def lost(self, conn: NetConn, *, reset: bool) -> None: ...


class State(enum.Enum):
    CONNECTING = "connecting"
    OPEN = "open"
    CLOSING = "closing"  # closed by this side; the close handshake is under way
    CLOSED = "closed"


class NetConn:
    """One connection (the ``Conn`` a service holds); hashed by identity."""

    __slots__ = (
        "_listener", "_remote", "announced", "backlog", "blocked", "close_code",
        "close_timeout", "closer", "counts", "decoder", "encode", "end_reason", "flagged",
        "frames_in", "frames_out",
        "handler", "handshook", "id", "last_heard", "limit", "max_frame", "paused",
        "probation", "promoted", "protocol", "queued", "raw", "spec", "state", "stream",
        "transport", "watch_idle", "writer", "ws",
    )

    def __init__(self, conn_id: str, *, listener: str | None, remote: str, handler: Any,
                 spec: ListenerSpec | None, framing: Framing, max_frame: int, limit: int,
                 raw: bool) -> None:
        self.id = conn_id
        self._listener = listener
        self._remote = remote
        self.handler = handler
        self.spec = spec
        self.watch_idle = spec is not None and spec.idle_timeout is not None
        self.max_frame = max_frame
        self.limit = limit
        # raw: frames are framed here and written to the transport (streams, a WebSocket
        # server); otherwise (a WebSocket client, whose frames are masked) sent one by one
        self.raw = raw
        self.encode = encoder_for(framing)
        self.decoder: StreamDecoder | None = None
        self.state = State.CONNECTING
        self.end_reason: str | None = None  # why this side closed it
        self.announced = False  # the handler heard ``closed`` (once, as soon as it is so)
        self.close_code: int | None = None  # the code it was closed with (either side)
        self.close_timeout = spec.close_timeout if spec is not None else CLOSE_TIMEOUT
        self.frames_in = 0
        self.frames_out = 0
        self.handshook = False
        self.promoted = False
        self.probation = False
        self.last_heard = 0.0
        # frames not yet written, oldest first, one or several joined in each entry
        # (``counts``: how many); ``queued`` in all, at most ``limit``
        self.backlog: deque[bytes] = deque()
        self.counts: deque[int] = deque()
        self.queued = 0
        self.flagged = False  # on the list of backlogs to write this loop iteration
        self.blocked = False  # the transport paused: a writer task waits for its drain
        self.writer: asyncio.Task[None] | None = None
        self.closer: asyncio.Task[None] | None = None
        self.transport: asyncio.Transport | None = None
        self.protocol: Any = None  # has ``writing_paused`` (aiohttp) or ``paused`` (ours)
        self.paused: Callable[[], bool] = _never
        self.stream: Any = None  # has ``drain()``
        self.ws: web.WebSocketResponse | aiohttp.ClientWebSocketResponse | None = None

    @property
    def listener(self) -> str | None:
        return self._listener

    @property
    def remote(self) -> str:
        return self._remote

    def add(self, frames: bytes, count: int) -> None:
        self.backlog.append(frames)
        self.counts.append(count)
        self.queued += count

    def discard_backlog(self) -> None:
        self.backlog.clear()
        self.counts.clear()
        self.queued = 0

    def write_backlog(self) -> None:
        """Write the backlog to the transport in writes of up to ``WRITE_CHUNK`` bytes, until
        it is empty or the transport pauses (``blocked``: the writer task goes on)."""
        backlog = self.backlog
        transport = self.transport
        if transport is None or transport.is_closing():
            self.discard_backlog()
            return
        counts = self.counts
        whole = True  # everything in one write first: the usual case (small frames)
        while backlog:
            if self.paused():
                self.blocked = True
                return
            if whole:
                if len(backlog) == 1 or sum(map(len, backlog)) <= WRITE_CHUNK:
                    data = backlog[0] if len(backlog) == 1 else b"".join(backlog)
                    self.frames_out += self.queued
                    self.discard_backlog()
                    transport.write(data)
                    return
                whole = False
            data = backlog.popleft()
            count = counts.popleft()
            parts = [data]
            size = len(data)
            while backlog and size + len(backlog[0]) <= WRITE_CHUNK:
                part = backlog.popleft()
                count += counts.popleft()
                parts.append(part)
                size += len(part)
            self.queued -= count
            self.frames_out += count
            transport.write(data if len(parts) == 1 else b"".join(parts))

    def __repr__(self) -> str:
        return f"<NetConn {self.id} {self.state.value} {self._remote}>"


def _never() -> bool:
    return False


class StreamProtocol(asyncio.Protocol):
    """A TCP connection framed as JSON lines or length prefixes."""

    def __init__(self, manager: _StreamOwner, conn: NetConn, accepted: Any = None) -> None:
        self.manager = manager
        self.conn = conn
        self.accepted = accepted  # the listener it came in on (None: dialed)
        self.paused = False
        self.early: list[bytes] = []  # what arrived before the connection was announced
        self._drained: asyncio.Future[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # a stream's transport has the whole Transport interface; not an isinstance check:
        # other event loops' transports (uvloop's) implement it without subclassing it
        conn = self.conn
        conn.transport = cast(asyncio.Transport, transport)
        conn.protocol = self
        conn.paused = self.is_paused
        conn.stream = self
        if self.accepted is not None:
            self.manager.accepted_stream(self.accepted, conn)

    def is_paused(self) -> bool:
        return self.paused

    def data_received(self, data: bytes) -> None:
        conn = self.conn
        decoder = conn.decoder
        if conn.state is State.CONNECTING:
            self.early.append(data)
            return
        if decoder is None or conn.state is not State.OPEN:
            return
        try:
            frames = decoder.feed(data)
        except FrameTooLarge as exc:
            self.manager.too_large(conn, str(exc))
            return
        manager = self.manager
        for frame in frames:
            if conn.state is not State.OPEN:
                return
            manager.received(conn, frame)

    def eof_received(self) -> bool:
        return False  # close our side too

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)

    async def drain(self) -> None:
        if not self.paused:
            return
        if self._drained is None or self._drained.done():
            self._drained = asyncio.get_running_loop().create_future()
        await self._drained

    def connection_lost(self, exc: Exception | None) -> None:
        if self._drained is not None and not self._drained.done():
            self._drained.set_exception(ConnectionResetError("connection lost"))
            self._drained.exception()  # retrieved: nobody may be waiting
        self.manager.lost(self.conn, reset=exc is not None)
