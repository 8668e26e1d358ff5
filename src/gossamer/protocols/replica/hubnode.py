"""The hub as a simulator process: ``HubRelay`` routing with node ids as connections.

A client's first message is its connect (the simulator has no connection to open); a crash is
not observable here, so no ``Left`` is ever sent. What the relay refuses is dropped and traced.
"""

from __future__ import annotations

from typing import cast

from ...core.env import Env
from ...core.errors import ProtocolError, StateError
from ...core.ids import NodeId
from ...core.messages import Message
from .hub import HubRelay

__all__ = ["HubNode"]

LAYER = "hub"


class HubNode:
    """The seed's multicast channel on one simulated node (conventionally ``"hub"``)."""

    def __init__(self, env: Env, *, max_connections: int = 10_000) -> None:
        self.env = env
        self.relay = HubRelay(max_connections=max_connections)
        self._connected: set[NodeId] = set()
        self.routed = 0

    def start(self) -> None:
        """Nothing to do until a client speaks."""

    def stop(self) -> None:
        """The relay holds no durable state."""

    def on_message(self, src: NodeId, msg: Message) -> None:
        if src not in self._connected:
            try:
                self.relay.connect(src)
            except StateError as exc:
                self.env.trace("drop", layer=LAYER, peer=src, reason="hub_full", error=str(exc))
                return
            self._connected.add(src)
        try:
            routes = self.relay.receive(src, msg)
        except ProtocolError as exc:
            self.env.trace("drop", layer=LAYER, peer=src, reason=exc.reason, error=str(exc),
                           type=msg.TYPE)
            return
        send = self.env.send
        for route in routes:
            send(cast(NodeId, route.to), route.msg)  # connections are the senders' node ids
        self.routed += len(routes)
