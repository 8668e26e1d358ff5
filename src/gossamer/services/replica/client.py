"""The Python client of seed 000: replicated objects over a hub's WebSocket, for asyncio code.

``Replica`` drives the sans-I/O ``ReplicaClient`` (causal delivery, total order per object,
conflicts, rebase, offline queue) over one WebSocket to the hub, with its state in sqlite so a
restarted process resumes where it stopped. It reconnects with the seed's Fibonacci backoff
unless told to go offline::

    async with Replica("ws://127.0.0.1:8080/ws", db_path="me.sqlite") as replica:
        replica.set("score", {"ada": 12})
        await replica.wait_until(lambda: replica.get("score") is not None)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp

from ...core.backoff import Backoff, FibonacciBackoff
from ...core.errors import ConfigError, ProtocolError, StateError
from ...core.ids import NodeId, check_node_id
from ...core.messages import Message
from ...core.trace import TraceSink
from ...protocols.replica.objects import (
    LinkState,
    RebaseFn,
    ReplicaClient,
    ReplicaConfig,
)
from ...protocols.replica.wire import HUB_ID, ReplicaCodec
from ...runtimes.net import LoopEnv, SqliteStore
from .hub_server import DEFAULT_MAX_FRAME

__all__ = ["Replica"]

log = logging.getLogger("gossamer.replica")

_META = "client.meta"
WatchFn = Callable[[str, Any, "str | None"], None]


class Replica:
    """One client of the replicated objects. ``await start()`` (or ``async with``), then read
    and write; writes never block: while the hub is unreachable they wait in the durable
    offline queue and are rebased and sent once the client has caught up."""

    def __init__(
        self,
        url: str,
        *,
        client_id: str | None = None,
        db_path: str | Path | None = None,
        config: ReplicaConfig | None = None,
        rebase: RebaseFn | None = None,
        backoff: Backoff | None = None,
        trace: TraceSink | None = None,
        run: str = "live",
        max_frame: int = DEFAULT_MAX_FRAME,
        send_queue_limit: int = 10_000,
        connect_timeout: float = 10.0,
    ) -> None:
        """``client_id``: this client's id (kept in the store; None: the stored one, or a new
        random id); ``db_path`` None keeps the state in memory only."""
        if not url.startswith(("ws://", "wss://")):
            raise ConfigError(f"url must be ws:// or wss://, got {url!r}")
        if send_queue_limit < 1 or max_frame < 1 or connect_timeout <= 0:
            raise ConfigError("send_queue_limit, max_frame and connect_timeout must be > 0")
        self.url = url
        self.store = SqliteStore(":memory:" if db_path is None else db_path)
        stored = self.store.get(_META, "id")
        if stored is not None and client_id is not None and stored.decode() != client_id:
            self.store.close()
            raise ConfigError(f"{db_path} belongs to client {stored.decode()!r}, "
                              f"not {client_id!r}")
        if client_id is None:
            client_id = stored.decode() if stored is not None else secrets.token_hex(16)
        self.client_id: NodeId = check_node_id(client_id)
        if stored is None:
            self.store.put(_META, "id", client_id.encode())
            self.store.commit()
        self._config = config
        self._rebase = rebase
        self._trace = trace
        self._run = run
        self._codec = ReplicaCodec(max_frame=max_frame)
        self._max_frame = max_frame
        self._send_queue_limit = send_queue_limit
        self._connect_timeout = connect_timeout
        self._backoff: Backoff = backoff if backoff is not None else FibonacciBackoff()
        self._env: LoopEnv | None = None
        self._client: ReplicaClient | None = None
        self._session: aiohttp.ClientSession | None = None
        self._ws: aiohttp.ClientWebSocketResponse | None = None
        self._outgoing: asyncio.Queue[str] | None = None
        self._task: asyncio.Task[None] | None = None
        self._changed: asyncio.Event | None = None  # set (and replaced) on every change
        self._wake: asyncio.Event | None = None
        self._want_online = True
        self._closing = False
        self._watchers: dict[str | None, list[WatchFn]] = {}
        self.connects = 0
        self.failure: BaseException | None = None
        self.on_clear: Callable[[str], None] | None = None
        self.on_stop: Callable[[str], None] | None = None

    # -- lifecycle -----------------------------------------------------------------------------

    async def start(self) -> None:
        if self._task is not None:
            raise StateError("this replica is already started")
        loop = asyncio.get_running_loop()
        self._changed = asyncio.Event()
        self._wake = asyncio.Event()
        self._outgoing = asyncio.Queue(maxsize=self._send_queue_limit)
        self._env = LoopEnv(self.client_id, send=self._send, store=self.store, loop=loop,
                            trace=self._trace, run=self._run, on_failure=self._fail)
        self._client = ReplicaClient(self._env, config=self._config, rebase=self._rebase,
                                     on_change=self._on_change, on_clear=self._on_clear,
                                     on_stop=self._on_stop, on_link=self._on_link)
        self._session = aiohttp.ClientSession()
        self._task = asyncio.create_task(self._run_forever(), name=f"replica-{self.client_id}")

    async def close(self) -> None:
        """Disconnect, commit, release the store. Queued writes stay in the store."""
        if self._closing:
            return
        self._closing = True
        self._want_online = False
        if self._wake is not None:
            self._wake.set()
        if self._ws is not None:
            await self._ws.close()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._client is not None:
            self._client.stop()
        if self._env is not None:
            self._env.shutdown()
        if self._session is not None:
            await self._session.close()
        self.store.close()

    async def __aenter__(self) -> Replica:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # -- reading and writing -------------------------------------------------------------------

    @property
    def replica(self) -> ReplicaClient:
        """The sans-I/O client (state, queues, vector) for inspection."""
        if self._client is None:
            raise StateError("start() the replica first")
        return self._client

    def get(self, key: str) -> Any:
        return self.replica.get(key)

    def items(self) -> dict[str, Any]:
        return self.replica.items()

    def revision(self, key: str) -> str | None:
        return self.replica.revision(key)

    def revisions(self) -> dict[str, str]:
        return self.replica.revisions()

    def set(self, key: str, value: Any) -> str | None:
        """Write ``value``; the new revision, or None if the write waits for a connection."""
        self._check()
        return self.replica.set(key, value)

    def delete(self, key: str) -> str | None:
        self._check()
        return self.replica.delete(key)

    def clear_all(self) -> None:
        self._check()
        self.replica.clear_all()

    def stop_all(self) -> None:
        self._check()
        self.replica.stop_all()

    @property
    def link(self) -> LinkState:
        return self.replica.link

    @property
    def offline_queue(self) -> list[tuple[str, Any, bool]]:
        return self.replica.offline_queue

    @property
    def vector(self) -> dict[str, int]:
        return self.replica.vector

    def watch(self, key: str | None, callback: WatchFn) -> Callable[[], None]:
        """Call ``callback(key, value, revision)`` when ``key`` (None: any key) changes here;
        returns a function that stops watching."""
        self._watchers.setdefault(key, []).append(callback)

        def unwatch() -> None:
            with contextlib.suppress(ValueError):
                self._watchers.get(key, []).remove(callback)

        return unwatch

    async def wait_until(self, predicate: Callable[[], bool], timeout: float = 10.0) -> None:
        """Wait until ``predicate()`` holds; it is checked after every change, delivery and
        link event. ``TimeoutError`` when it does not hold within ``timeout`` seconds."""
        if self._changed is None:
            raise StateError("start() the replica first")
        async with asyncio.timeout(timeout):
            while not predicate():
                self._check()
                await self._changed.wait()

    async def synced(self, timeout: float = 10.0) -> None:
        """Wait until online with nothing queued, held back or known to be missing."""
        client = self.replica
        await self.wait_until(lambda: client.link is LinkState.ONLINE
                              and not client.offline_queue and client.causal.caught_up,
                              timeout)

    # -- going offline on purpose --------------------------------------------------------------

    async def go_offline(self) -> None:
        """Disconnect and stay offline (writes queue up) until ``reconnect()``."""
        self._want_online = False
        if self._ws is not None:
            await self._ws.close()
        await self.wait_until(lambda: self.replica.link is LinkState.OFFLINE)

    def reconnect(self) -> None:
        """Connect again now (after ``go_offline()``, or to cut a backoff wait short)."""
        self._want_online = True
        self._backoff.reset()
        if self._wake is not None:
            self._wake.set()

    # -- the connection ------------------------------------------------------------------------

    async def _run_forever(self) -> None:
        assert self._wake is not None and self._session is not None
        while not self._closing:
            if not self._want_online:
                self._wake.clear()
                await self._wake.wait()
                continue
            try:
                ws = await self._session.ws_connect(
                    self.url, max_msg_size=self._max_frame, autoping=True, heartbeat=30.0,
                    timeout=aiohttp.ClientWSTimeout(ws_close=self._connect_timeout),
                )
            except (aiohttp.ClientError, OSError, TimeoutError) as exc:
                delay = self._backoff.next_delay()
                log.info("%s: cannot reach %s (%r); next try in %.1fs", self.client_id,
                         self.url, exc, delay)
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), delay)
                continue
            await self._serve(ws)

    async def _serve(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        assert self._outgoing is not None
        while not self._outgoing.empty():  # frames of an old connection: the protocol resends
            self._outgoing.get_nowait()
        self._ws = ws
        self.connects += 1
        self._backoff.reset()
        writer = asyncio.create_task(self._write_loop(ws), name=f"replica-writer-{self.client_id}")
        self.replica.connected()
        try:
            async for frame in ws:
                if frame.type is aiohttp.WSMsgType.TEXT:
                    self._receive(frame.data)
                elif frame.type is aiohttp.WSMsgType.ERROR:
                    log.info("%s: connection error %r", self.client_id, ws.exception())
                    break
        finally:
            self._ws = None
            writer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await writer
            if not ws.closed:
                await ws.close()
            if self._client is not None and not self._closing:
                self._client.disconnected()
            self._notify()

    def _receive(self, text: str) -> None:
        try:
            msg = self._codec.decode(text)
            self.replica.on_message(HUB_ID, msg)
        except ProtocolError as exc:
            log.info("%s: dropped a frame from the hub: %s", self.client_id, exc)
            if self._env is not None:
                self._env.trace("drop", layer="replica", peer=HUB_ID, reason=exc.reason,
                                error=str(exc)[:200])
        except Exception as exc:
            self._fail(exc)
            raise
        self._notify()

    async def _write_loop(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        assert self._outgoing is not None
        while True:
            text = await self._outgoing.get()
            await ws.send_str(text)

    def _send(self, dst: NodeId, msg: Message) -> None:
        if self._ws is None or self._outgoing is None:
            return  # offline: the protocol resends what matters once connected
        try:
            self._outgoing.put_nowait(self._codec.encode(msg).decode())
        except asyncio.QueueFull:
            # the hub is not keeping up: drop; NACKs and announcements repair it
            log.warning("%s: send queue full; dropped a %s", self.client_id, msg.TYPE)

    # -- events --------------------------------------------------------------------------------

    def _on_change(self, key: str, value: Any, revision: str | None) -> None:
        for watcher in (*self._watchers.get(key, ()), *self._watchers.get(None, ())):
            watcher(key, value, revision)
        self._notify()

    def _on_clear(self, by: str) -> None:
        if self.on_clear is not None:
            self.on_clear(by)

    def _on_stop(self, by: str) -> None:
        if self.on_stop is not None:
            self.on_stop(by)

    def _on_link(self, state: LinkState) -> None:
        log.info("%s: %s", self.client_id, state.value)
        self._notify()

    def _notify(self) -> None:
        """Wake every ``wait_until``: set this generation's event, start a new one."""
        if self._changed is not None:
            fired, self._changed = self._changed, asyncio.Event()
            fired.set()

    def _fail(self, exc: BaseException) -> None:
        log.error("%s: protocol failure %r", self.client_id, exc, exc_info=exc)
        if self.failure is None:
            self.failure = exc
        self._notify()

    def _check(self) -> None:
        if self.failure is not None:
            raise StateError(f"replica {self.client_id} failed: {self.failure!r}") \
                from self.failure
