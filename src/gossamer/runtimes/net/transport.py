"""Two framings behind one small interface: TCP with one JSON object per line, and WebSocket.

A ``Connection`` moves whole frames (bytes without framing); ``listen`` and ``connect`` make them.
Every network failure surfaces as ``LinkError`` (an ``OSError``), an oversized frame as
``FrameTooLarge``; nothing here knows about messages, nodes or traces.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import enum
from collections.abc import Awaitable, Callable

import websockets
from websockets.asyncio.client import ClientConnection
from websockets.asyncio.client import connect as ws_connect
from websockets.asyncio.server import Server as WsServer
from websockets.asyncio.server import ServerConnection
from websockets.asyncio.server import serve as ws_serve
from websockets.frames import CloseCode

from ...core.errors import ConfigError, FrameTooLarge

__all__ = [
    "Address",
    "Connection",
    "LinkError",
    "Listener",
    "TransportKind",
    "connect",
    "listen",
]

Address = tuple[str, int]
Handler = Callable[["Connection"], Awaitable[None]]

_WS_CLOSE_TIMEOUT = 2.0  # seconds to wait for the peer's close frame before dropping TCP
_DISCARD_CHUNK = 1 << 16


class TransportKind(enum.Enum):
    TCP = "tcp"
    WS = "ws"


class LinkError(ConnectionError):
    """The connection could not be made, or is gone."""


class Connection(abc.ABC):
    """One established connection carrying whole frames."""

    def __init__(self, remote: str) -> None:
        self.remote = remote

    @abc.abstractmethod
    async def send(self, frame: bytes) -> None:
        """Write one frame; raises ``LinkError`` when the connection is gone."""

    @abc.abstractmethod
    async def recv(self) -> bytes:
        """The next frame; ``LinkError`` at the end, ``FrameTooLarge`` (connection then closed)."""

    @abc.abstractmethod
    async def wait_closed(self) -> None:
        """Return once the other end has closed or the connection broke (for send-only use)."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Close; never raises for network trouble."""


class Listener(abc.ABC):
    """A listening server; ``address`` is the bound (host, port)."""

    address: Address

    @abc.abstractmethod
    async def close(self) -> None:
        """Stop accepting connections (established ones are the handler's to close)."""


# -- TCP: newline-delimited frames ---------------------------------------------------------


class TcpConnection(Connection):
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peername = writer.get_extra_info("peername")
        super().__init__(f"tcp:{peername[0]}:{peername[1]}" if peername else "tcp:?")
        self._reader = reader
        self._writer = writer

    async def send(self, frame: bytes) -> None:
        if b"\n" in frame:
            raise ConfigError("a TCP frame must not contain a newline")
        if self._writer.is_closing():
            raise LinkError(f"{self.remote}: connection closed")
        try:
            self._writer.write(frame + b"\n")
            await self._writer.drain()
        except OSError as exc:
            raise LinkError(f"{self.remote}: {exc}") from exc

    async def recv(self) -> bytes:
        try:
            line = await self._reader.readline()
        except ValueError as exc:  # the StreamReader limit: a line longer than max_frame
            await self.close()
            raise FrameTooLarge(f"{self.remote}: line over the frame limit ({exc})") from exc
        except OSError as exc:
            raise LinkError(f"{self.remote}: {exc}") from exc
        if not line.endswith(b"\n"):
            raise LinkError(f"{self.remote}: closed" + (" mid-frame" if line else ""))
        return line[:-1]

    async def wait_closed(self) -> None:
        # the receiver never writes on a send-only connection; anything it does send is
        # discarded so that the buffer stays bounded
        with contextlib.suppress(OSError):
            while await self._reader.read(_DISCARD_CHUNK):
                continue

    async def close(self) -> None:
        self._writer.close()
        with contextlib.suppress(OSError):
            await self._writer.wait_closed()


class TcpListener(Listener):
    def __init__(self, server: asyncio.Server) -> None:
        self._server = server
        host, port = server.sockets[0].getsockname()[:2]
        self.address = (str(host), int(port))

    async def close(self) -> None:
        self._server.close()
        await self._server.wait_closed()


async def _tcp_listen(host: str, port: int, handler: Handler, max_frame: int) -> Listener:
    async def accepted(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await handler(TcpConnection(reader, writer))

    server = await asyncio.start_server(accepted, host, port, limit=max_frame)
    return TcpListener(server)


async def _tcp_connect(host: str, port: int, max_frame: int) -> Connection:
    reader, writer = await asyncio.open_connection(host, port, limit=max_frame)
    return TcpConnection(reader, writer)


# -- WebSocket: one text message per frame -------------------------------------------------


class WsConnection(Connection):
    def __init__(self, ws: ServerConnection | ClientConnection) -> None:
        address = ws.remote_address
        super().__init__(f"ws:{address[0]}:{address[1]}" if address else "ws:?")
        self._ws = ws

    async def send(self, frame: bytes) -> None:
        try:
            await self._ws.send(frame.decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise ConfigError(f"a WebSocket text frame must be UTF-8: {exc}") from exc
        except websockets.ConnectionClosed as exc:
            raise LinkError(f"{self.remote}: {exc}") from exc

    async def recv(self) -> bytes:
        try:
            return await self._ws.recv(decode=False)
        except websockets.ConnectionClosed as exc:
            if exc.sent is not None and exc.sent.code == CloseCode.MESSAGE_TOO_BIG:
                raise FrameTooLarge(f"{self.remote}: closed with 1009 ({exc})") from exc
            raise LinkError(f"{self.remote}: {exc}") from exc

    async def wait_closed(self) -> None:
        await self._ws.wait_closed()

    async def close(self) -> None:
        await self._ws.close()


class WsListener(Listener):
    def __init__(self, server: WsServer) -> None:
        self._server = server
        host, port = server.sockets[0].getsockname()[:2]
        self.address = (str(host), int(port))

    async def close(self) -> None:
        self._server.close()
        await self._server.wait_closed()


def _ws_uri(host: str, port: int) -> str:
    return f"ws://[{host}]:{port}/" if ":" in host else f"ws://{host}:{port}/"


async def _ws_listen(host: str, port: int, handler: Handler, max_frame: int) -> Listener:
    async def accepted(ws: ServerConnection) -> None:
        await handler(WsConnection(ws))

    server = await ws_serve(
        accepted, host, port, max_size=max_frame, compression=None,
        close_timeout=_WS_CLOSE_TIMEOUT,
    )
    return WsListener(server)


async def _ws_connect(host: str, port: int, max_frame: int) -> Connection:
    try:
        ws = await ws_connect(
            _ws_uri(host, port), max_size=max_frame, compression=None,
            close_timeout=_WS_CLOSE_TIMEOUT,
        )
    except websockets.WebSocketException as exc:
        raise LinkError(f"{_ws_uri(host, port)}: handshake failed: {exc}") from exc
    return WsConnection(ws)


# -- one entry point per direction ---------------------------------------------------------


async def listen(
    kind: TransportKind, address: Address, handler: Handler, *, max_frame: int
) -> Listener:
    """Listen on ``address``; ``handler(conn)`` runs once per accepted connection."""
    host, port = address
    if kind is TransportKind.TCP:
        return await _tcp_listen(host, port, handler, max_frame)
    return await _ws_listen(host, port, handler, max_frame)


async def connect(
    kind: TransportKind, address: Address, *, max_frame: int, timeout: float
) -> Connection:
    """Dial ``address``; any failure (refused, timeout, bad handshake) raises ``LinkError``."""
    host, port = address
    try:
        async with asyncio.timeout(timeout):
            if kind is TransportKind.TCP:
                return await _tcp_connect(host, port, max_frame)
            return await _ws_connect(host, port, max_frame)
    except LinkError:
        raise
    except OSError as exc:  # includes TimeoutError and ConnectionRefusedError
        raise LinkError(f"{kind.value}://{host}:{port}: {exc or type(exc).__name__}") from exc
