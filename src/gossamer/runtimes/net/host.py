"""Many ``NetNode`` s in one event loop (``NetHost``), and running a host until a signal.

``NetHost`` gives its nodes one start time and an address book, so that every process can reach
every other node of the host from its first step; ``run_until_signalled`` runs one as an
operating-system process that stops cleanly on SIGINT or SIGTERM.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from collections.abc import Callable, Iterable

from ...core.errors import ConfigError, StateError
from ...core.ids import NodeId
from ...core.trace import TraceSink
from .node import Address, NetNode, NodeState

__all__ = ["NetHost", "run_until_signalled"]

log = logging.getLogger("gossamer.net")


class NetHost:
    """Many ``NetNode`` s in one event loop, sharing one start time and an address book.

    With ``link_local`` (default) every node resolves the other nodes of this host through
    ``directory``, which also keeps the address of a stopped node for its restart.
    """

    def __init__(
        self,
        nodes: Iterable[NetNode] = (),
        *,
        on_activity: Callable[[], None] | None = None,
        link_local: bool = True,
    ) -> None:
        self.nodes: dict[NodeId, NetNode] = {}
        self.directory: dict[NodeId, Address] = {}
        #: called after every delivered message, fired timer, drop and link change
        self.on_activity = on_activity
        self.link_local = link_local
        self.failures: dict[NodeId, BaseException] = {}
        self.epoch: float | None = None
        self._failed: asyncio.Event | None = None
        self._sinks: dict[int, TraceSink] = {}
        for node in nodes:
            self.add(node)

    def add(self, node: NetNode) -> NetNode:
        """Add a node; ``start()`` starts it (again after the host started)."""
        if not isinstance(node, NetNode):
            raise ConfigError(f"expected a NetNode, got {node!r}")
        if node.node_id in self.nodes:
            raise ConfigError(f"node {node.node_id} is already on this host")
        if node.state is not NodeState.NEW:
            raise StateError(f"node {node.node_id} is {node.state.value}: add it before starting")
        self.nodes[node.node_id] = node
        self._sinks.setdefault(id(node.trace_sink), node.trace_sink)
        if node.on_activity is None:
            node.on_activity = self._activity
        node.on_failure = self._node_failed
        if self.link_local:
            node.resolver = self.directory.get
        return node

    def _activity(self) -> None:
        if self.on_activity is not None:
            self.on_activity()

    def _node_failed(self, node: NetNode, exc: BaseException) -> None:
        self.failures.setdefault(node.node_id, exc)
        if self._failed is not None:
            self._failed.set()

    async def wait_failure(self) -> None:
        """Return once any node of this host has failed."""
        if self._failed is None:
            self._failed = asyncio.Event()
        if self.failures:
            return
        await self._failed.wait()

    async def start(self) -> None:
        """Start every added node that is not running yet: bind all, then start processes,
        so that each process can reach every other node of the host from its first step."""
        if self.epoch is None:
            self.epoch = time.monotonic()  # the nodes' clock (NetEnv.now)
        if self._failed is None:
            self._failed = asyncio.Event()
        pending = [node for node in self.nodes.values() if node.state is NodeState.NEW]
        for node in pending:
            await node.listen()
            self.directory[node.node_id] = node.address
        for node in pending:
            node.start_process(epoch=self.epoch)

    async def stop_node(self, node_id: NodeId) -> NetNode:
        """Close one node and take it off the host (its directory entry stays)."""
        node = self.nodes.pop(node_id, None)
        if node is None:
            raise ConfigError(f"no node {node_id} on this host")
        await node.close()
        return node

    async def stop(self) -> None:
        """Close every node, then flush and close every trace sink once."""
        nodes = list(self.nodes.values())
        await asyncio.gather(*(node.close() for node in nodes))
        sinks, self._sinks = list(self._sinks.values()), {}
        for sink in sinks:
            sink.close()


async def run_until_signalled(
    host: NetHost,
    *,
    ready: Callable[[NetHost], None] | None = None,
    signals: Iterable[signal.Signals] = (signal.SIGINT, signal.SIGTERM),
) -> int:
    """Start ``host``, call ``ready(host)``, run until a signal or a node failure, stop cleanly.

    Returns a process exit code: 0 after a signal, 1 if a node failed.
    """
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    installed = list(signals)
    for sig in installed:
        loop.add_signal_handler(sig, stop.set)
    try:
        await host.start()
        if ready is not None:
            ready(host)
        waiters = [loop.create_task(stop.wait()), loop.create_task(host.wait_failure())]
        try:
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()
            await asyncio.gather(*waiters, return_exceptions=True)
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)
        await host.stop()
    for node_id, exc in host.failures.items():
        log.error("node %s failed: %r", node_id, exc)
    return 1 if host.failures else 0
