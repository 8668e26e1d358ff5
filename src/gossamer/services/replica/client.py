"""The Python client of seed 000: replicated objects over a hub's WebSocket, for asyncio code.

``Replica`` runs the sans-I/O ``ReplicaNode`` (a ``ReplicaClient``: causal delivery, total
order per object, conflicts, rebase, offline queue; and its link to the hub) on the network
runtime, with its state in sqlite so a restarted process resumes where it stopped (its token
too: the hub's proof of its id, ``docs/security.md``; a refused join raises ``JoinRefused``). It
reconnects with the seed's Fibonacci backoff unless told to go offline::

    async with Replica("ws://127.0.0.1:8080/ws", db_path="me.sqlite") as replica:
        replica.set("score", {"ada": 12})
        await replica.wait_until(lambda: replica.get("score") is not None)
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ...core.backoff import Backoff, FibonacciBackoff
from ...core.env import Env
from ...core.errors import ConfigError, StateError
from ...core.ids import NodeId, check_node_id
from ...core.jsonvalue import json_copy
from ...core.trace import TraceSink
from ...protocols.replica.config import LinkState, RebaseFn, ReplicaConfig
from ...protocols.replica.node import DEFAULT_MAX_FRAME, JoinRefused, ReplicaNode
from ...protocols.replica.objects import ReplicaClient
from ...protocols.replica.wire import Refused
from ...runtimes.net import NetNode, NodeState, SqliteStore

__all__ = ["JoinRefused", "Replica"]

log = logging.getLogger("gossamer.replica")

_META = "client.meta"
RECHECK = 0.05  # seconds: wait_until looks again at least this often
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
        token: str | None = None,
    ) -> None:
        """``client_id``: this client's id (kept in the store; None: the stored one, or a new
        random id); ``db_path`` None keeps the state in memory only. ``token``: the id's token
        (``Replica.token`` of the store that first joined as it), for a new store of an id that
        joined before: the hub refuses a known id without it (``JoinRefused``)."""
        if not url.startswith("ws://"):
            raise ConfigError(f"url must be ws://HOST:PORT/PATH, got {url!r}")
        if max_frame < 64:
            raise ConfigError("max_frame must be >= 64")
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
        self._max_frame = max_frame
        self._token = token
        self._backoff: Backoff = backoff if backoff is not None else FibonacciBackoff()
        self._net: NetNode | None = None
        self._node: ReplicaNode | None = None
        self._changed: asyncio.Event | None = None  # set (and replaced) on every change
        self._closing = False
        self._watchers: dict[str | None, list[WatchFn]] = {}
        self.failure: BaseException | None = None
        self.on_clear: Callable[[str], None] | None = None
        self.on_stop: Callable[[str], None] | None = None

    # -- lifecycle -----------------------------------------------------------------------------

    def _build(self, env: Env) -> ReplicaNode:
        self._node = ReplicaNode(env, hub=self.url, backoff=self._backoff,
                                 max_frame=self._max_frame, config=self._config,
                                 rebase=self._rebase, on_change=self._on_change,
                                 on_clear=self._on_clear, on_stop=self._on_stop,
                                 on_link=self._on_link, token=self._token,
                                 on_refused=self._on_refused)
        return self._node

    async def start(self) -> None:
        if self._net is not None:
            raise StateError("this replica is already started")
        self._changed = asyncio.Event()
        self._net = NetNode(node_id=self.client_id, factory=self._build, listen=None,
                            store=self.store, trace=self._trace, run=self._run,
                            on_activity=self._notify)
        self._net.on_failure = lambda _node, exc: self._fail(exc)
        await self._net.start()

    async def close(self) -> None:
        """Disconnect, commit, release the store. Queued writes stay in the store."""
        if self._closing:
            return
        self._closing = True
        if self._net is not None:
            await self._net.close()  # the node's stop() goes offline and commits
        else:
            self.store.close()
        self._notify()

    async def __aenter__(self) -> Replica:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    @property
    def token(self) -> str | None:
        """The token that proves this client's id to the hub (issued at its first join and
        kept in the store; None before that). Keep it like a password: whoever holds it and
        the id can write as this client."""
        return None if self._node is None else self._node.token

    @property
    def refused(self) -> JoinRefused | None:
        """Why the hub refused the last join, until one succeeds (None: not refused)."""
        node = self._node
        return None if node is None or node.refused is None else JoinRefused(node.refused)

    @property
    def connects(self) -> int:
        """How many times the link to the hub came up."""
        return 0 if self._node is None else self._node.connects

    # -- reading and writing -------------------------------------------------------------------

    @property
    def replica(self) -> ReplicaClient:
        """The sans-I/O client (state, queues, vector) for inspection."""
        if self._node is None:
            raise StateError("start() the replica first")
        return self._node.client

    def get(self, key: str) -> Any:
        return self.replica.get(key)

    def items(self) -> dict[str, Any]:
        return self.replica.items()

    def revision(self, key: str) -> str | None:
        return self.replica.revision(key)

    def revisions(self) -> dict[str, str]:
        return self.replica.revisions()

    def set(self, key: str, value: Any) -> str | None:
        """Write ``value``; the new revision, or None if the write waits for a connection.
        ``ConfigError`` for a value JSON would change or cannot carry (NaN, a set, ...)."""
        self._check()
        return self.replica.set(key, json_copy(value, "a value"))

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
    def rebase_queue(self) -> list[tuple[str, Any, bool]]:
        """Own writes that lost a conflict and wait to be rebased (key, content, deleted)."""
        return self.replica.rebase_queue

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
        link event, and at least every ``RECHECK`` seconds (so it may also look at things
        outside this replica). ``TimeoutError`` when it does not hold within ``timeout``."""
        if self._changed is None:
            raise StateError("start() the replica first")
        async with asyncio.timeout(timeout):
            while not predicate():
                self._check()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), RECHECK)

    async def synced(self, timeout: float = 10.0) -> None:
        """Wait until every write the hub had accepted when this was called is applied here,
        and this client is online with nothing queued, held back, known to be missing or
        waiting to be rebased; a rebase sent meanwhile is waited for in the same way (it may
        lose again). It asks the hub for its vector (its snapshot keeper answers; a hub
        without one, ``gossamer hub --no-snapshots``, never does: then this times out).
        ``TimeoutError`` after ``timeout`` seconds."""
        client = self.replica
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        await self.wait_until(lambda: client.link is not LinkState.OFFLINE, timeout)
        while True:
            sent = client.vector.get(self.client_id, 0)
            asked = client.hub_vectors
            self._call(lambda node: node.client.ask_hub())
            # a reconnect meanwhile asks again by itself (its subscribe): any answer after ours
            # is at least as new
            await self.wait_until(functools.partial(self._settled_since, asked),
                                  max(0.0, deadline - loop.time()))
            if client.vector.get(self.client_id, 0) == sent:
                return  # nothing of ours was sent since the hub answered: all of it is settled

    def _settled_since(self, asked: int) -> bool:
        """The hub answered after ``asked`` answers and everything it told is applied here,
        online, with nothing of ours queued or waiting to be rebased."""
        client = self.replica
        return (client.hub_vectors > asked and client.link is LinkState.ONLINE
                and not client.offline_queue and not client.rebase_queue
                and client.causal.caught_up and client.has_all_the_hub_told())

    # -- going offline on purpose --------------------------------------------------------------

    async def go_offline(self) -> None:
        """Disconnect and stay offline (writes queue up) until ``reconnect()``."""
        self._call(lambda node: node.go_offline())
        await self.wait_until(lambda: self.replica.link is LinkState.OFFLINE)

    def reconnect(self) -> None:
        """Connect again now (after ``go_offline()``, or to cut a backoff wait short)."""
        self._call(lambda node: node.reconnect())

    def _call(self, fn: Callable[[ReplicaNode], object]) -> None:
        self._check()
        net, node = self._net, self._node
        if net is None or node is None or net.state is not NodeState.RUNNING:
            raise StateError(f"replica {self.client_id} is not running")
        net.call(lambda _process: fn(node))

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

    def _on_refused(self, refused: Refused) -> None:
        log.error("%s: %s", self.client_id, JoinRefused(refused))
        self._notify()

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
        """Raise what stops this replica: a protocol failure, or the hub refusing its join
        (``JoinRefused``: the id is another client's, or connected elsewhere)."""
        if self.failure is not None:
            raise StateError(f"replica {self.client_id} failed: {self.failure!r}") \
                from self.failure
        refused = self.refused
        if refused is not None:
            raise refused
