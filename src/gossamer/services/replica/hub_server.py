"""The hub of seed 000 on real WebSockets: ``HubService`` on the network runtime.

One ``NetNode`` named ``hub`` with one WebSocket listener (at ``/ws``, and ``/`` for an upgrade
there) that also serves the browser client's files from ``web_root``. The runtime frames each
multicast once and writes each connection's frames in as few writes as possible, refuses frames
over ``max_frame`` (1009) and text that is not UTF-8 (1007), and disconnects a client that falls
``send_queue_limit`` frames behind (1008); the keeper's snapshot lives in ``DATA_DIR/hub.sqlite``
(a ``WriteBehindStore``: group commits on a writer thread).
"""

from __future__ import annotations

import enum
import logging
import secrets
from pathlib import Path

from ...core.conn import Framing, ListenerSpec
from ...core.env import Env
from ...core.errors import ConfigError, StateError
from ...core.trace import TraceSink
from ...protocols.replica.hub_service import DEFAULT_KEEPER, HubService
from ...protocols.replica.keeper import KeeperConfig
from ...protocols.replica.wire import HUB_ID
from ...runtimes.net import NetNode, WriteBehindStore

__all__ = ["DEFAULT_MAX_FRAME", "LISTENER", "HubServer", "HubState"]

log = logging.getLogger("gossamer.hub")

DEFAULT_MAX_FRAME = 64 * 1024
STORE_FILE = "hub.sqlite"
LISTENER = "clients"


class HubState(enum.Enum):
    NEW = "new"
    RUNNING = "running"
    STOPPED = "stopped"


class HubServer:
    """The seed-000 hub: ``await start()``, then ``address``; ``await stop()`` closes every
    connection (1001) and flushes ``trace`` (the caller closes the sink)."""

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
        if web_root is not None and not Path(web_root).is_dir():
            raise ConfigError(f"web_root {web_root} is not a directory")
        if data_dir is not None and not Path(data_dir).is_dir():
            raise ConfigError(f"data_dir {data_dir} is not a directory")
        if not run:
            raise ConfigError("run must be non-empty")
        self.spec = ListenerSpec(
            name=LISTENER, host=host, port=port, framing=Framing.WS, path="/ws",
            static_root=None if web_root is None else str(Path(web_root).resolve()),
            max_frame=max_frame, max_connections=max_connections,
            send_queue_limit=send_queue_limit, heartbeat=heartbeat, handshake_timeout=None,
            close_timeout=close_timeout)
        self.web_root = None if web_root is None else Path(web_root).resolve()
        self.max_frame = max_frame
        self.send_queue_limit = send_queue_limit
        self.max_connections = max_connections
        self.trace = trace
        self.run = run
        self.data_dir = None if data_dir is None else Path(data_dir)
        self.keeper_config = keeper
        self.service: HubService | None = None
        self.state = HubState.NEW
        self._node: NetNode | None = None

    @property
    def address(self) -> tuple[str, int]:
        """The bound (host, port); only after ``start()``."""
        if self._node is None or self.state is not HubState.RUNNING:
            raise StateError(f"hub is {self.state.value}: address is known once started")
        return self._node.listener_address(LISTENER)

    @property
    def url(self) -> str:
        host, port = self.address
        return f"http://[{host}]:{port}/" if ":" in host else f"http://{host}:{port}/"

    @property
    def connections(self) -> int:
        """Connections subscribed in the relay right now."""
        return 0 if self.service is None else self.service.connections

    @property
    def keeper(self) -> object | None:
        return None if self.service is None else self.service.keeper

    def _build(self, env: Env) -> HubService:
        self.service = HubService(env, keeper=self.keeper_config,
                                  max_connections=self.max_connections,
                                  new_token=lambda: secrets.token_urlsafe(24))
        return self.service

    async def start(self) -> None:
        if self.state is not HubState.NEW:
            raise StateError(f"start() on a hub that is {self.state.value}")
        path = ":memory:" if self.data_dir is None else self.data_dir / STORE_FILE
        node = NetNode(node_id=HUB_ID, factory=self._build, listen=None, listeners=[self.spec],
                       store=WriteBehindStore(path), trace=self.trace, run=self.run)
        try:
            await node.start()
        except OSError as exc:  # the port is taken, say: the store is free for the next try
            await node.close()
            raise ConfigError(f"the hub cannot listen on {self.spec.host}:{self.spec.port}: "
                              f"{exc.strerror or exc}") from None
        self._node = node
        self.state = HubState.RUNNING
        log.info("hub listening on %s", self.url)

    async def stop(self) -> None:
        if self.state is not HubState.RUNNING or self._node is None:
            return
        await self._node.close()
        self.state = HubState.STOPPED
        log.info("hub stopped")

    async def __aenter__(self) -> HubServer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()
