"""``gossamer activity status HOST:PORT``: the tree of a running activity network.

The probe authenticates at one server as a child server would (it needs the network's secret),
reads its SERVER_INFO, then listens to the SERVER_ANNOUNCE messages that every server of the
network sends each announce interval and that the tree relays to every server link. Each
announcement gives a server's address, level, load (its connected clients) and, from gossamer
servers, its parent; servers of the original course protocol appear without level or parent.
The probe sends nothing but its AUTHENTICATE and leaves when ``wait`` seconds have passed.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses

from ...core.errors import OperationError, ProtocolError
from ...protocols.activity import (
    DEFAULT_MAX_LINE,
    PROTOCOL,
    ActivityCodec,
    ActivityWire,
    Authenticate,
    AuthenticationFail,
    InvalidMessageReply,
    Redirect,
    ServerAnnounce,
    ServerInfo,
)

__all__ = ["NetworkView", "ServerView", "probe"]


@dataclasses.dataclass(frozen=True, slots=True)
class ServerView:
    id: str
    hostname: str
    port: int
    level: int | None
    load: int
    parent: str | None


@dataclasses.dataclass(slots=True)
class NetworkView:
    """What one probe saw: the server it asked (``entry``), its level and users, and every
    server whose announcement arrived while it listened."""

    entry: str
    entry_level: int
    users: int
    servers: dict[str, ServerView] = dataclasses.field(default_factory=dict)

    def children(self, server_id: str | None) -> list[ServerView]:
        """Servers whose parent is ``server_id`` (None: roots and servers of unknown parent)."""
        known = set(self.servers)
        out = [s for s in self.servers.values()
               if (s.parent == server_id if server_id is not None
                   else s.parent is None or s.parent not in known)]
        return sorted(out, key=lambda s: (s.level if s.level is not None else 1 << 30, s.id))


async def probe(host: str, port: int, secret: str, *, wait: float,
                timeout: float = 10.0, max_line: int = DEFAULT_MAX_LINE) -> NetworkView:
    """Authenticate at ``host:port`` and collect announcements for ``wait`` seconds.

    Raises ``OperationError`` when the server cannot be reached, refuses the secret, redirects
    (its tree is full at that depth: probe the server it names) or sends something else."""
    codec = ActivityCodec(max_frame=max_line)
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(host, port, limit=max_line + 2), timeout)
    except (OSError, TimeoutError) as exc:
        raise OperationError(f"cannot reach {host}:{port}: {exc}", definite=True) from None
    try:
        writer.write(codec.encode(Authenticate(secret=secret, protocol=PROTOCOL)) + b"\n")
        await writer.drain()
        try:
            first = await _read(reader, codec, timeout, host, port)
        except TimeoutError:
            raise OperationError(f"{host}:{port} said nothing within {timeout}s of the "
                                 f"AUTHENTICATE", definite=True) from None
        if isinstance(first, AuthenticationFail):
            raise OperationError(f"{host}:{port} refused the secret: {first.info}",
                                 definite=True)
        if isinstance(first, Redirect):
            raise OperationError(f"{host}:{port} redirected the probe to {first.hostname}:"
                                 f"{first.port} (its tree is at max depth there): probe that "
                                 f"server", definite=True)
        if isinstance(first, InvalidMessageReply):
            raise OperationError(f"{host}:{port} answered INVALID_MESSAGE: {first.info}",
                                 definite=True)
        if not isinstance(first, ServerInfo):
            raise OperationError(f"{host}:{port} answered {first.TYPE}, not SERVER_INFO (is "
                                 f"it a server of the original protocol?)", definite=True)
        view = NetworkView(entry=first.id, entry_level=first.level, users=len(first.users))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        while (left := deadline - loop.time()) > 0:
            try:
                msg = await _read(reader, codec, left, host, port)
            except TimeoutError:
                break
            except _Closed:
                # the server drops a child that announces nothing (a hung link) after its
                # miss-announces window: the probe is one, so a long wait ends here
                break
            if isinstance(msg, ServerAnnounce):
                view.servers[msg.id] = ServerView(msg.id, msg.hostname, msg.port, msg.level,
                                                  msg.load, msg.parent)
        return view
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


class _Closed(OperationError):
    """The server closed the probe's connection."""


async def _read(reader: asyncio.StreamReader, codec: ActivityCodec, timeout: float,
                host: str, port: int) -> ActivityWire:
    try:
        line = await asyncio.wait_for(reader.readline(), timeout)
    except TimeoutError:
        raise  # an OSError too, but the caller's to handle: nothing came in time
    except (OSError, ValueError) as exc:  # ValueError: a line over the limit
        raise OperationError(f"{host}:{port}: {exc!r}", definite=True) from None
    if not line:
        raise _Closed(f"{host}:{port} closed the connection", definite=True)
    try:
        return codec.decode(line.rstrip(b"\n"))
    except ProtocolError as exc:
        raise OperationError(f"{host}:{port} sent an unreadable line: {exc}",
                             definite=True) from None
