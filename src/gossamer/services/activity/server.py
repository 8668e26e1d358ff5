"""The seed-003 server over TCP JSON lines: ``ActivityServer`` on the network runtime.

One ``NetNode`` with one JSON-lines listener; the runtime enforces the line limit (answered with
INVALID_MESSAGE, then closed), a handshake timeout (a connection that says nothing is closed),
and a connection limit with slots kept for servers (a server that authenticates is promoted).
Users live in sqlite under ``data_dir``; the trace goes to ``trace``.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from pathlib import Path

from ...core.conn import Framing, ListenerSpec
from ...core.env import Env
from ...core.errors import ConfigError, StateError
from ...core.trace import TraceSink
from ...protocols.activity import DEFAULT_MAX_LINE, ActivityServer, ServerConfig
from ...runtimes.net import NetNode
from ...runtimes.net.datadir import DataDir

__all__ = ["DEFAULT_PORT", "LISTENER", "ActivityTcpServer"]

log = logging.getLogger("gossamer.activity")

DEFAULT_PORT = 3780
STORE_FILE = "activity.sqlite"
LISTENER = "activity"


class ActivityTcpServer:
    """``await start()``, then ``address``; ``await stop()`` closes everything.

    ``failed`` is set (and ``failure`` says why) when the server gave up joining: the network
    it was pointed at refused its secret ``ServerConfig.join_attempts`` times.
    """

    def __init__(self, *, secret: str, host: str = "127.0.0.1", port: int = DEFAULT_PORT,
                 remote: tuple[str, int] | None = None, announce_interval: float = 5.0,
                 data_dir: Path | None = None, max_depth: int | None = None,
                 max_line: int = DEFAULT_MAX_LINE, max_connections: int = 1000,
                 reserved_for_servers: int | None = None, handshake_timeout: float = 10.0,
                 send_queue_limit: int = 10_000, server_id: str | None = None,
                 trace: TraceSink | None = None, run: str = "activity",
                 hash_iterations: int = 100_000) -> None:
        if data_dir is not None and not Path(data_dir).is_dir():
            raise ConfigError(f"data_dir {data_dir} is not a directory")
        if not isinstance(secret, str) or not secret:
            raise ConfigError("the server secret must be a non-empty string")
        reserved = (min(16, max_connections // 10) if reserved_for_servers is None
                    else reserved_for_servers)
        self.spec = ListenerSpec(name=LISTENER, host=host, port=port, framing=Framing.LINES,
                                 max_frame=max_line, max_connections=max_connections,
                                 reserved_for_peers=reserved,
                                 handshake_timeout=handshake_timeout,
                                 send_queue_limit=send_queue_limit)
        self.secret = secret
        self.remote = remote
        self.announce_interval = announce_interval
        self.data_dir = data_dir
        self.max_depth = max_depth
        self.max_line = max_line
        self.server_id = server_id or secrets.token_hex(8)
        self.trace = trace
        self.run = run
        self.hash_iterations = hash_iterations
        self.core: ActivityServer | None = None
        self._node: NetNode | None = None
        self.failure: str | None = None  # why the server gave up (its secret refused)
        self._dir = DataDir(None if data_dir is None else Path(data_dir), STORE_FILE,
                            who="activity server")
        self.failed = asyncio.Event()  # set when it gave up: the process should exit

    def _gave_up(self, reason: str) -> None:
        self.failure = reason
        self.failed.set()

    @property
    def address(self) -> tuple[str, int]:
        if self._node is None:
            raise StateError("the server has not started")
        return self._node.listener_address(LISTENER)

    def _build(self, env: Env) -> ActivityServer:
        host, port = self.address
        config = ServerConfig(secret=self.secret, hostname=host, port=port,
                              server_id=self.server_id, remote=self.remote,
                              announce_interval=self.announce_interval,
                              reconnect_delay=min(1.0, self.announce_interval),
                              max_depth=self.max_depth, max_line=self.max_line,
                              hash_iterations=self.hash_iterations)
        self.core = ActivityServer(env, config, salt=lambda: secrets.token_bytes(16))
        self.core.on_failure = self._gave_up
        self.core.on_join_retry = self._join_retry
        return self.core

    def _join_retry(self, host: str, port: int, attempts: int) -> None:
        """Not joined: said at the first failed try and every tenth, not silently forever."""
        if attempts == 1 or attempts % 10 == 0:
            log.warning("%s: cannot join the server at %s:%d (attempts: %d); trying again",
                        self.server_id, host, port, attempts)

    async def start(self) -> None:
        """Listen (and join ``remote``); ``ConfigError`` when the address cannot be bound or
        the data dir's store cannot be opened, ``StateError`` when another live server uses
        the data dir (two would register users into one store behind each other's back)."""
        if self._node is not None:
            raise StateError("start() called twice")
        store = self._dir.open_store()
        node = NetNode(node_id=self.server_id, factory=self._build, listen=None,
                       listeners=[self.spec], store=store, trace=self.trace, run=self.run)
        self._node = node  # the process's factory reads its address
        try:
            await self._dir.start(node, self.spec)
        except BaseException:
            self._node = None
            raise

    async def stop(self) -> None:
        if self._node is not None:
            await self._node.close()
        self.core = None
        self._dir.release()

    async def __aenter__(self) -> ActivityTcpServer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()
