"""The network runtime behind the conformance suite's cluster facade (see ``harness_sim``).

A synchronous ``NetCluster``: a private event loop, one ``NetHost`` with every node on a
127.0.0.1 ephemeral port and its own sqlite file; the loop runs only inside the calls.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import socket
import tempfile
from collections.abc import Callable, Coroutine, Iterable
from pathlib import Path
from typing import Any, TypeVar

from gossamer.core import (
    Codec,
    Framing,
    ListenerSpec,
    MemorySink,
    Process,
    ProcessFactory,
)
from gossamer.runtimes.net import NetHost, NetNode, NetNodeError, SqliteStore
from gossamer.runtimes.net.looppolicy import loop_factory

T = TypeVar("T")

LOOPBACK = "127.0.0.1"


_RESERVED: set[int] = set()


def reserve_port() -> int:
    """A loopback port that is free now (for a node that starts later), never one this process
    was handed before: the kernel may give a port just closed out again, and two nodes of one
    test given the same address are one node (CI saw a spare listed in two groups)."""
    for _ in range(1000):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((LOOPBACK, 0))
            port = int(sock.getsockname()[1])
        if port not in _RESERVED:
            _RESERVED.add(port)
            return port
    raise RuntimeError("no loopback port this test process has not already been handed")


async def _cancel_leftovers() -> None:
    current = asyncio.current_task()
    leftovers = [task for task in asyncio.all_tasks() if task is not current]
    for task in leftovers:
        task.cancel()
    await asyncio.gather(*leftovers, return_exceptions=True)


def uvloop_factory() -> Callable[[], asyncio.AbstractEventLoop]:
    """What makes uvloop's event loop: ``NetCluster(..., loop_factory=uvloop_factory())`` runs
    the runtime on another loop than asyncio's (uvloop is a dev dependency)."""
    return loop_factory({"GOSSAMER_LOOP": "uvloop"})


class NetCluster:
    """``down`` nodes get a reserved port and are only started by ``start_node``."""

    def __init__(
        self,
        node_ids: list[str],
        factory: ProcessFactory,
        *,
        transport: str,
        seed: int = 0,
        loss: float = 0.0,
        run: str = "test",
        codec: Codec,
        down: Iterable[str] = (),
        listeners: dict[str, list[ListenerSpec]] | None = None,
        sees_cluster: bool = False,
        loop_factory: Callable[[], asyncio.AbstractEventLoop] = asyncio.new_event_loop,
        **node_options: Any,
    ) -> None:
        """``sees_cluster``: ``factory(env, cluster)``, so a process can find the others'
        listeners (``listener_address``) when it starts. ``loop_factory`` makes the event
        loop the nodes run on (``uvloop.new_event_loop``: the runtime on uvloop's)."""
        self.node_ids = list(node_ids)
        if sees_cluster:
            inner = factory
            factory = lambda env: inner(env, self)  # type: ignore[call-arg,misc]  # noqa: E731
        # a service listener on an ephemeral port of 127.0.0.1 (the simulator's port names it)
        self.listeners = {node: [dataclasses.replace(spec, host=LOOPBACK, port=0)
                                 for spec in specs]
                          for node, specs in (listeners or {}).items()}
        self.trace = MemorySink()
        self.factory = factory
        self.transport = transport
        self._options: dict[str, Any] = dict(
            node_options, transport=transport, seed=seed, loss=loss, run=run, codec=codec,
            trace=self.trace,
        )
        self._tmp = tempfile.TemporaryDirectory(prefix="gossamer-net-")
        self._loop = loop_factory()
        self._wake = asyncio.Event()
        self.host = NetHost(on_activity=self._wake.set)
        self._ports: dict[str, int] = {}
        down_set = set(down)
        for node in down_set:
            port = self._ports[node] = reserve_port()
            self.host.directory[node] = (LOOPBACK, port)
        try:
            for node in self.node_ids:
                if node not in down_set:
                    self.host.add(self._make_node(node))
            self._run(self.host.start())
            for started in self.host.nodes.values():
                self._ports[started.node_id] = started.address[1]
        except BaseException:
            self.close()
            raise

    def _make_node(self, node: str) -> NetNode:
        store = SqliteStore(Path(self._tmp.name) / f"{node}.sqlite")
        return NetNode(node_id=node, factory=self.factory, store=store,
                       listen=(LOOPBACK, self._ports.get(node, 0)),
                       listeners=self.listeners.get(node, ()), **self._options)

    def listener_address(self, node: str, name: str) -> str:
        """Where a process dials ``node``'s listener ``name`` (``ws://`` for a WebSocket)."""
        spec = next(s for s in self.listeners[node] if s.name == name)
        host, port = self.host.nodes[node].listener_address(name)
        if spec.framing is Framing.WS:
            return f"ws://{host}:{port}{spec.path}"
        return f"{host}:{port}"

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self._loop.run_until_complete(coro)

    def _check_failures(self) -> None:
        if self.host.failures:
            node, exc = next(iter(self.host.failures.items()))
            raise NetNodeError(f"node {node} failed: {exc!r}") from exc

    # -- the facade the conformance suite uses -------------------------------------------

    def node(self, node: str) -> NetNode:
        return self.host.nodes[node]

    def process(self, node: str) -> Process:
        process = self.node(node).process
        assert process is not None, f"node {node} has no process"
        return process

    def call(self, node: str, fn: Callable[[Process], None]) -> None:
        async def inside() -> None:
            self.node(node).call(fn)

        self._run(inside())

    def run_until(self, predicate: Callable[[], bool], timeout: float) -> bool:
        """Run the loop until ``predicate()`` holds (re-checked on every activity of any node)
        or ``timeout`` wall seconds pass; a node failure raises ``NetNodeError``."""

        async def wait() -> bool:
            deadline = self._loop.time() + timeout
            while not predicate():
                self._check_failures()
                remaining = deadline - self._loop.time()
                if remaining <= 0:
                    return False
                self._wake.clear()
                try:
                    await asyncio.wait_for(self._wake.wait(), remaining)
                except TimeoutError:
                    continue
            return True

        result = self._run(wait())
        self._check_failures()
        return result

    def close(self) -> None:
        loop = self._loop
        if loop.is_closed():
            return
        try:
            loop.run_until_complete(self.host.stop())
            loop.run_until_complete(_cancel_leftovers())
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
        finally:
            loop.close()
            self._tmp.cleanup()

    # -- extras for the runtime's own tests ----------------------------------------------

    def run_async(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run a coroutine on the cluster's loop (raw clients, node control)."""
        return self._run(coro)

    def address(self, node: str) -> tuple[str, int]:
        return (LOOPBACK, self._ports[node])

    def stop_node(self, node: str) -> None:
        """Close a node (uncommitted store writes are lost); its port stays reserved for it."""
        self._run(self.host.stop_node(node))

    def start_node(self, node: str) -> NetNode:
        """Start a fresh incarnation of ``node`` on its port and its sqlite file."""
        made = self.host.add(self._make_node(node))
        self._run(self.host.start())
        self._ports[node] = made.address[1]
        return made

    def restart(self, node: str) -> NetNode:
        self.stop_node(node)
        return self.start_node(node)


class RawClient:
    """A hand-made client on a real socket: frames go out exactly as given (JSON lines on TCP,
    text messages on a WebSocket), for tests that speak to a listener as an outsider would."""

    def __init__(self) -> None:
        self._writer: asyncio.StreamWriter | None = None
        self._reader: asyncio.StreamReader | None = None
        self._session: Any = None
        self._ws: Any = None

    @classmethod
    async def open(cls, transport: str, address: tuple[str, int], *,
                   path: str = "/") -> RawClient:
        client = cls()
        host, port = address
        if transport == "ws":
            import aiohttp

            client._session = aiohttp.ClientSession()
            client._ws = await client._session.ws_connect(f"ws://{host}:{port}{path}",
                                                          max_msg_size=1 << 22)
        else:
            client._reader, client._writer = await asyncio.open_connection(host, port,
                                                                           limit=1 << 22)
        return client

    async def send(self, frame: bytes) -> None:
        if self._ws is not None:
            await self._ws.send_str(frame.decode())
        else:
            assert self._writer is not None
            self._writer.write(frame + b"\n")
            await self._writer.drain()

    async def recv(self) -> bytes | None:
        """The next frame, or None once the other end closed."""
        if self._ws is not None:
            import aiohttp

            msg = await self._ws.receive()
            if msg.type is aiohttp.WSMsgType.TEXT:
                return str(msg.data).encode()
            return None
        assert self._reader is not None
        line = await self._reader.readline()
        return line[:-1] if line.endswith(b"\n") else None

    async def wait_closed(self) -> None:
        """Return once the other end hung up (anything it sends meanwhile is discarded)."""
        while await self.recv() is not None:
            continue

    async def close(self) -> None:
        if self._ws is not None:
            await self._ws.close()
            await self._session.close()
        elif self._writer is not None:
            self._writer.close()
            with contextlib.suppress(OSError):
                await self._writer.wait_closed()
