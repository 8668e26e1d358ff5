"""The seed-003 server over TCP JSON lines: an asyncio adapter around ``ActivityServer``.

It accepts and dials connections, feeds whole lines to the core and carries out its actions
(send, close, dial). Users live in sqlite under ``data_dir``; the trace goes to ``trace``.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import secrets
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

from ...core.errors import ConfigError, StateError
from ...core.trace import TraceSink
from ...protocols.activity import (
    DEFAULT_MAX_LINE,
    Action,
    ActivityServer,
    Close,
    Dial,
    ServerConfig,
)
from ...runtimes.net import LoopEnv, SqliteStore

__all__ = ["DEFAULT_PORT", "ActivityTcpServer"]

log = logging.getLogger("gossamer.activity")

DEFAULT_PORT = 3780
STORE_FILE = "activity.sqlite"
DIAL_TIMEOUT = 5.0
MAX_WRITE_BUFFER = 4 << 20  # bytes waiting for one slow peer before it is disconnected


class ActivityTcpServer:
    """``await start()``, then ``address``; ``await stop()`` closes everything."""

    def __init__(self, *, secret: str, host: str = "127.0.0.1", port: int = DEFAULT_PORT,
                 remote: tuple[str, int] | None = None, announce_interval: float = 5.0,
                 data_dir: Path | None = None, max_depth: int | None = None,
                 max_line: int = DEFAULT_MAX_LINE, max_connections: int = 1000,
                 server_id: str | None = None, trace: TraceSink | None = None,
                 run: str = "activity", hash_iterations: int = 100_000) -> None:
        if data_dir is not None and not Path(data_dir).is_dir():
            raise ConfigError(f"data_dir {data_dir} is not a directory")
        if not 0 <= port <= 65535:
            raise ConfigError(f"port must be in 0..65535, got {port}")
        self.secret = secret
        self.host = host
        self.port = port
        self.remote = remote
        self.announce_interval = announce_interval
        self.data_dir = data_dir
        self.max_depth = max_depth
        self.max_line = max_line
        self.max_connections = max_connections
        self.server_id = server_id or secrets.token_hex(8)
        self.trace = trace
        self.run = run
        self.hash_iterations = hash_iterations
        self.core: ActivityServer | None = None
        self._env: LoopEnv | None = None
        self._store: SqliteStore | None = None
        self._listener: asyncio.Server | None = None
        self._writers: dict[str, asyncio.StreamWriter] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._numbers = itertools.count(1)
        self._address: tuple[str, int] | None = None

    @property
    def address(self) -> tuple[str, int]:
        if self._address is None:
            raise StateError("the server has not started")
        return self._address

    async def start(self) -> None:
        if self._listener is not None:
            raise StateError("start() called twice")
        self._listener = await asyncio.start_server(self._accepted, self.host, self.port,
                                                    limit=2 * self.max_line + 2)
        host, port = self._listener.sockets[0].getsockname()[:2]
        self._address = (str(host), int(port))
        path = ":memory:" if self.data_dir is None else Path(self.data_dir) / STORE_FILE
        self._store = SqliteStore(path)
        self._env = LoopEnv(self.server_id, send=lambda _dst, _msg: None, store=self._store,
                            trace=self.trace, run=self.run)
        config = ServerConfig(secret=self.secret, hostname=self._address[0],
                              port=self._address[1], server_id=self.server_id,
                              remote=self.remote, announce_interval=self.announce_interval,
                              reconnect_delay=min(1.0, self.announce_interval),
                              max_depth=self.max_depth, max_line=self.max_line,
                              max_connections=self.max_connections,
                              hash_iterations=self.hash_iterations)
        self.core = ActivityServer(self._env, config, salt=lambda: secrets.token_bytes(16))
        self.core.on_action = self._act
        self.core.start()
        log.info("activity server %s listening on %s:%d", self.server_id, *self._address)

    async def stop(self) -> None:
        if self.core is not None:
            self.core.stop()
        if self._listener is not None:
            self._listener.close()
            await self._listener.wait_closed()
        for writer in list(self._writers.values()):
            writer.close()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._env is not None:
            self._env.close()
        if self._store is not None:
            self._store.close()
        if self.trace is not None:
            self.trace.flush()
        self.core = None

    async def __aenter__(self) -> ActivityTcpServer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    # -- connections -------------------------------------------------------------------------

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _accepted(self, reader: asyncio.StreamReader,
                        writer: asyncio.StreamWriter) -> None:
        conn = f"in-{next(self._numbers)}"
        self._writers[conn] = writer
        if self.core is None:
            writer.close()
            return
        self.core.connected(conn)
        await self._read_loop(conn, reader, writer)

    async def _read_loop(self, conn: str, reader: asyncio.StreamReader,
                         writer: asyncio.StreamWriter) -> None:
        try:
            while conn in self._writers:
                try:
                    line = await reader.readline()
                except ValueError:  # a line far over the limit: refuse without reading on
                    writer.write(b'{"command":"INVALID_MESSAGE","info":"message over the limit'
                                 b' of %d bytes"}\n' % self.max_line)
                    break
                if not line.endswith(b"\n"):
                    break
                if self.core is not None:
                    self.core.line(conn, line.rstrip(b"\r\n"))
        except (OSError, asyncio.IncompleteReadError) as exc:
            log.info("connection %s broke: %r", conn, exc)
        finally:
            self._drop(conn)

    def _drop(self, conn: str) -> None:
        writer = self._writers.pop(conn, None)
        if writer is not None:
            writer.close()
        if self.core is not None:
            self.core.closed(conn)

    def _act(self, action: Action) -> None:
        if isinstance(action, Dial):
            self._spawn(self._dial(action))
            return
        writer = self._writers.get(action.conn)
        if writer is None:
            return
        if isinstance(action, Close):
            del self._writers[action.conn]
            writer.close()  # the transport sends what it buffered, then closes
            return
        assert self.core is not None
        writer.write(self.core.codec.encode(action.msg) + b"\n")
        if writer.transport.get_write_buffer_size() > MAX_WRITE_BUFFER:
            log.warning("%s: peer too slow, disconnecting", action.conn)
            self._drop(action.conn)

    async def _dial(self, dial: Dial) -> None:
        try:
            async with asyncio.timeout(DIAL_TIMEOUT):
                reader, writer = await asyncio.open_connection(
                    dial.host, dial.port, limit=2 * self.max_line + 2)
        except OSError as exc:
            log.info("dial %s:%d failed: %s", dial.host, dial.port, exc)
            if self.core is not None:
                self.core.closed(dial.conn)
            return
        if self.core is None:
            writer.close()
            return
        self._writers[dial.conn] = writer
        self.core.connected(dial.conn)
        await self._read_loop(dial.conn, reader, writer)
