"""The hub as a simulator process: ``HubRelay`` routing with node ids as connections, plus the
snapshot keeper (``keeper.py``) unless it is turned off.

A client's first message is its connect (the simulator has no connection to open); a crash is
not observable here, so no ``Left`` is ever sent. What the relay refuses is dropped and traced.
"""

from __future__ import annotations

from typing import cast

from ...core.env import Env
from ...core.errors import ProtocolError, StateError
from ...core.ids import NodeId
from ...core.messages import Message
from ..dissemination.hub_relay import HubRelay, Route
from .keeper import HubKeeper, KeeperConfig

__all__ = ["HubNode"]

LAYER = "hub"
DEFAULT_KEEPER = KeeperConfig()


class HubNode:
    """The seed's multicast channel on one simulated node (``"hub"`` when it keeps snapshots).

    ``keeper``: a ``KeeperConfig`` (default), or None for the seed's bare relay."""

    def __init__(self, env: Env, *, max_connections: int = 10_000,
                 keeper: KeeperConfig | None = DEFAULT_KEEPER) -> None:
        self.env = env
        self.relay = HubRelay(max_connections=max_connections)
        self.keeper = None if keeper is None else HubKeeper(env, self._from_hub, config=keeper)
        self._connected: set[NodeId] = set()
        self.routed = 0

    def start(self) -> None:
        if self.keeper is not None:
            self.keeper.start()

    def stop(self) -> None:
        if self.keeper is not None:
            self.keeper.stop()

    def on_message(self, src: NodeId, msg: Message) -> None:
        if src not in self._connected:
            try:
                self.relay.connect(src)
            except StateError as exc:
                self.env.trace("drop", layer=LAYER, peer=src, reason="hub_full", error=str(exc))
                return
            self._connected.add(src)
        try:
            self.relay.bind(src, msg)
            forward = msg if self.keeper is None else self.keeper.handle(msg)
            routes = [] if forward is None else self.relay.routes(src, forward)
        except ProtocolError as exc:
            self.env.trace("drop", layer=LAYER, peer=src, reason=exc.reason, error=str(exc),
                           type=msg.TYPE)
            return
        self._send(routes)

    def _from_hub(self, msg: Message) -> None:
        self._send(self.relay.from_hub(msg))

    def _send(self, routes: list[Route]) -> None:
        send = self.env.send
        for route in routes:
            send(cast(NodeId, route.to), route.msg)  # connections are the senders' node ids
        self.routed += len(routes)
