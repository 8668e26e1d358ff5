"""Seed 000's hub relay (sans-I/O): the seed's multicast channel and its id-to-connection index,
the routing core of the hub (``gossamer.protocols.replica.hub_service``).

A connection subscribes when it opens and is unsubscribed when it closes (the other clients get
a ``Left``). A message goes to every other connection, or only to the connection registered
under its ``dest``. The first ``id`` a connection sends binds it: later messages with another id
are refused (no spoofing), as is a retry carrying another client's message, and so is an id
that another connection holds (``IdInUse``: one id, one writer; the hub refuses that join and
closes the newcomer). Who may bind an id at all is the hub's client book
(``gossamer.protocols.replica.identity``), checked before ``bind``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable, KeysView

from ...core.errors import ConfigError, InvalidMessage, StateError
from ...core.messages import Message
from ..replica.wire import HUB_ID, Conflict, Left, Nack, Retry, Snapshot

__all__ = ["HubRelay", "IdInUse", "Route"]

ConnId = Hashable


@dataclasses.dataclass(frozen=True, slots=True)
class Route:
    """Send ``msg`` to connection ``to``."""

    to: ConnId
    msg: Message


class IdInUse(InvalidMessage):
    """A connection claimed an id that another live connection holds."""


def dest_of(msg: Message) -> str | None:
    return msg.dest if isinstance(msg, Nack | Retry | Conflict | Snapshot) else None


class HubRelay:
    """Who is connected, under which id, and where each message goes."""

    def __init__(self, *, max_connections: int = 10_000) -> None:
        if max_connections < 1:
            raise ConfigError(f"max_connections must be >= 1, got {max_connections}")
        self.max_connections = max_connections
        self._ids: dict[ConnId, str | None] = {}  # connection -> the id it speaks for
        self._index: dict[str, ConnId] = {}  # id -> its current connection

    def __len__(self) -> int:
        return len(self._ids)

    def connections(self) -> KeysView[ConnId]:
        """Every subscribed connection (a live view: copy it before changing the relay)."""
        return self._ids.keys()

    def connection_of(self, client: str) -> ConnId | None:
        return self._index.get(client)

    def id_of(self, conn: ConnId) -> str | None:
        return self._ids.get(conn)

    def connect(self, conn: ConnId) -> None:
        """Subscribe a new connection; raises ``StateError`` when the hub is full."""
        if conn in self._ids:
            raise ConfigError(f"connection {conn!r} is already subscribed")
        if len(self._ids) >= self.max_connections:
            raise StateError(f"hub is full ({self.max_connections} connections)")
        self._ids[conn] = None

    def disconnect(self, conn: ConnId) -> list[Route]:
        """Unsubscribe; the others are told its id left (if it had one and still owned it)."""
        client = self._ids.pop(conn, None)
        if client is None or self._index.get(client) != conn:
            return []
        del self._index[client]
        left = Left(id=HUB_ID, left=client)
        return [Route(other, left) for other in self._ids]

    def receive(self, conn: ConnId, msg: Message) -> list[Route]:
        """Where ``msg`` from ``conn`` goes. A refused message raises ``InvalidMessage``."""
        self.bind(conn, msg)
        return self.routes(conn, msg)

    def bind(self, conn: ConnId, msg: Message) -> str:
        """Check that ``msg`` speaks for the id ``conn`` is bound to (binding it on its first
        message, and moving the id's index entry here); returns that id."""
        if conn not in self._ids:
            raise StateError(f"connection {conn!r} is not subscribed")
        client = getattr(msg, "id", None)
        if not isinstance(client, str) or client == HUB_ID:
            raise InvalidMessage(f"a client message needs its own id, got {client!r}")
        bound = self._ids[conn]
        if bound is None:
            previous = self._index.get(client)
            if previous is not None and previous != conn:
                raise IdInUse(f"client id {client!r} is connected on another connection")
            self._ids[conn] = client
            self._index[client] = conn
        elif bound != client:
            raise InvalidMessage(f"connection speaks for {bound!r}, not {client!r}")
        if isinstance(msg, Retry):  # a client resends its own messages only (the seed's rule)
            for part in msg.retry:
                if part.id != client:
                    raise InvalidMessage(f"a retry from {client!r} carries a message of "
                                         f"{part.id!r}: a client resends only its own")
        return client

    def routes(self, conn: ConnId, msg: Message) -> list[Route]:
        """Where ``msg`` from the bound connection ``conn`` goes: its ``dest``, or every other
        connection."""
        dest = dest_of(msg)
        if dest is not None:
            target = self._index.get(dest)
            if target is None:
                raise InvalidMessage(f"no client {dest!r} is connected")
            return [Route(target, msg)]
        return [Route(other, msg) for other in self._ids if other != conn]

    def from_hub(self, msg: Message) -> list[Route]:
        """Where a message the hub itself sends goes: its ``dest`` if connected (else
        nowhere), or every connection."""
        dest = dest_of(msg)
        if dest is not None:
            target = self._index.get(dest)
            return [] if target is None else [Route(target, msg)]
        return [Route(conn, msg) for conn in self._ids]
