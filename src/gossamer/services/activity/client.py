"""An asyncio client of the activity network: login (anonymous, or register-then-login with a
generated secret), REDIRECT followed transparently, activities sent and received.

``async with ActivityClient(host, port, username=...) as client:`` then ``await client.send``
and ``await client.receive()``. Deliveries are traced as ``deliver`` rows under ``node``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from typing import Any

from ...core.errors import OperationError, ProtocolError
from ...core.trace import NullSink, TraceSink, encode_info
from ...protocols.activity import (
    ANONYMOUS,
    DEFAULT_MAX_LINE,
    LAYER,
    ORIGIN_KEY,
    SEQ_KEY,
    ActivityBroadcast,
    ActivityCodec,
    ActivityMessage,
    ActivityWire,
    Login,
    LoginSuccess,
    Logout,
    Redirect,
    Register,
    RegisterSuccess,
    activity_ids,
)

__all__ = ["ActivityClient"]

MAX_REDIRECTS = 10


log = logging.getLogger("gossamer.activity.client")

class ActivityClient:
    def __init__(self, host: str, port: int, *, username: str = ANONYMOUS,
                 secret: str | None = None, timeout: float = 10.0,
                 max_line: int = DEFAULT_MAX_LINE, max_pending: int = 10_000,
                 trace: TraceSink | None = None, node: str = "client",
                 run: str = "activity", client_id: str | None = None) -> None:
        self.host = host
        self.port = port
        self.username = username
        self.secret = secret
        self.generated_secret = False
        self.timeout = timeout
        self.codec = ActivityCodec(max_frame=max_line)
        self.max_pending = max_pending
        self.trace = trace if trace is not None else NullSink()
        self.node = node
        self.run = run
        self.redirects = 0
        self.dropped = 0
        # who this client is across connections: the origin of its activities (extension)
        self.client_id = client_id if client_id is not None else \
            f"{username}.{secrets.token_hex(4)}"
        self.seq = 0
        self.joined = False
        self.closed = asyncio.Event()
        self.error: str | None = None
        self._activities: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._replies: asyncio.Queue[ActivityWire] = asyncio.Queue()
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._task: asyncio.Task[None] | None = None
        self._loop = asyncio.get_running_loop()
        self._t0 = self._loop.time()

    async def __aenter__(self) -> ActivityClient:
        await self.connect()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def connect(self) -> str:
        """Log in (registering first when a username comes without a secret); the
        LOGIN_SUCCESS info. Raises ``OperationError`` (definite) on refusal."""
        await self._open(self.host, self.port)
        if self.username != ANONYMOUS and self.secret is None:
            self.secret = secrets.token_hex(16)
            self.generated_secret = True
            await self._write(Register(username=self.username, secret=self.secret))
            reply = await self._reply()
            if not isinstance(reply, RegisterSuccess):
                raise OperationError(f"register refused: {reply}", definite=True)
        return await self._login()

    async def _login(self) -> str:
        await self._write(Login(username=self.username,
                                secret=None if self.username == ANONYMOUS else self.secret))
        reply = await self._reply()
        if not isinstance(reply, LoginSuccess):
            raise OperationError(f"login refused: {reply}", definite=True)
        self._membership("join")
        return reply.info

    def _row(self, event: str, msg: str | None, origin: str | None, seq: int | None,
             size: int | None, **info: Any) -> None:
        if self.trace.enabled:
            self.trace.append((self.run, self._loop.time() - self._t0, self.node, LAYER, event,
                               msg, origin, None, None, seq, size, encode_info(info)))

    def _membership(self, event: str) -> None:
        """``join`` once logged in, ``leave`` when the connection ends (reliability needs
        who was connected when an activity was sent)."""
        if (event == "join") != self.joined:
            self.joined = event == "join"
            self._row(event, None, None, None, None, host=self.host, port=self.port)

    async def _open(self, host: str, port: int) -> None:
        self.closed.clear()
        async with asyncio.timeout(self.timeout):
            self._reader, self._writer = await asyncio.open_connection(
                host, port, limit=2 * self.codec.max_frame + 2)
        self._task = self._loop.create_task(self._read_loop(self._reader))

    async def _write(self, msg: ActivityWire) -> None:
        if self._writer is None or self._writer.is_closing():
            raise OperationError("not connected", definite=True)
        self._writer.write(self.codec.encode(msg) + b"\n")
        await self._writer.drain()

    async def _reply(self) -> ActivityWire:
        try:
            async with asyncio.timeout(self.timeout):
                return await self._replies.get()
        except TimeoutError:
            raise OperationError("no reply from the server", definite=False) from None

    async def _read_loop(self, reader: asyncio.StreamReader) -> None:
        try:
            while True:
                line = await reader.readline()
                if not line.endswith(b"\n"):
                    break
                try:
                    msg = self.codec.decode(line.rstrip(b"\r\n"))
                except ProtocolError as exc:
                    self.error = f"bad message from the server: {exc}"
                    break
                if isinstance(msg, ActivityBroadcast):
                    self._delivered(msg.activity, len(line))
                elif isinstance(msg, Redirect):
                    self._membership("leave")
                    self._loop.create_task(self._follow(msg))
                    return
                else:
                    if msg.TYPE in ("INVALID_MESSAGE", "AUTHENTICATION_FAIL"):
                        self.error = f"{msg.TYPE}: {getattr(msg, 'info', '')}"
                    self._replies.put_nowait(msg)
        except (OSError, ValueError) as exc:  # the connection broke, or a line over the limit
            log.info("%s: connection lost: %r", self.node, exc)
        self._membership("leave")
        self.closed.set()

    async def _follow(self, redirect: Redirect) -> None:
        self.redirects += 1
        if self._writer is not None:
            self._writer.close()
        if self.redirects > MAX_REDIRECTS:
            self.error = f"more than {MAX_REDIRECTS} redirects"
            self.closed.set()
            return
        try:
            await self._open(redirect.hostname, redirect.port)
            await self._login()
        except (OSError, OperationError) as exc:
            self.error = f"redirect to {redirect.hostname}:{redirect.port} failed: {exc}"
            self.closed.set()

    def _delivered(self, activity: dict[str, Any], size: int) -> None:
        ids = activity_ids(activity)
        origin, seq = ids if ids is not None else (None, None)
        self._row("deliver", None if ids is None else f"{origin}#{seq}", origin, seq, size)
        if self._activities.qsize() >= self.max_pending:
            self.dropped += 1
            return
        self._activities.put_nowait(activity)

    async def send(self, activity: dict[str, Any]) -> None:
        """Publish ``activity``; it carries this client's id and next sequence number."""
        self.seq += 1
        stamped = {**activity, ORIGIN_KEY: self.client_id, SEQ_KEY: self.seq}
        await self._write(ActivityMessage(username=self.username, secret=self.secret,
                                          activity=stamped))
        # the publisher has its own activity: the server sends it to the others only
        self._row("deliver", f"{self.client_id}#{self.seq}", self.client_id, self.seq, None,
                  own=True)

    async def receive(self, timeout: float | None = None) -> dict[str, Any]:
        """The next activity broadcast to this client."""
        async with asyncio.timeout(timeout):
            return await self._activities.get()

    async def close(self) -> None:
        self._membership("leave")
        if self._writer is not None and not self._writer.is_closing():
            with contextlib.suppress(OSError, OperationError):
                await self._write(Logout())
            self._writer.close()
            with contextlib.suppress(OSError):
                await self._writer.wait_closed()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
