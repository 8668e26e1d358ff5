"""Peer links: ``env.send`` between the nodes of one deployment, on top of connections.

One protocol among others on the connection layer, used only on a node's peer listener: the
dialing node's first frame is ``{"hello": <its node id>}``, then one codec-encoded message per
frame, one way. Each peer gets one outbound link that dials, says hello, writes a bounded
queue and redials with backoff when the connection is refused or lost; the process hears of
an outage once, through ``on_unreachable(peer)``. What was written to a connection that breaks
may be lost (``env.send`` promises no more).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from typing import Protocol

import orjson

from ...core.backoff import Backoff
from ...core.conn import CloseCode, Conn, Framing
from ...core.errors import ConfigError, DecodeError, ProtocolError
from ...core.ids import NodeId, check_node_id
from ...core.messages import Message
from .conns import Connections, NetConn
from .netconn import NodeSide


class LinkNode(NodeSide, Protocol):
    """What the peer links need of their node, beyond the connection layer's needs."""

    connections: Connections
    backoff_factory: Callable[[], Backoff]

    def address_of(self, node: NodeId) -> tuple[str, int] | None: ...

    def deliver(self, peer: NodeId, frame: bytes) -> None: ...

    def trace_message(self, event: str, msg: Message, peer: str, size: int) -> None: ...

    def unreachable(self, peer: NodeId) -> None: ...

__all__ = ["PeerLinks", "hello_frame", "parse_hello"]

log = logging.getLogger("gossamer.net")


def hello_frame(node: NodeId) -> bytes:
    return orjson.dumps({"hello": node})


def parse_hello(frame: bytes) -> NodeId:
    try:
        obj = orjson.loads(frame)
    except orjson.JSONDecodeError as exc:
        raise DecodeError(f"hello is not JSON: {exc}") from exc
    if not isinstance(obj, dict) or set(obj) != {"hello"}:
        raise DecodeError('expected {"hello": <node id>} as the first frame')
    try:
        return check_node_id(obj["hello"])
    except ConfigError as exc:
        raise DecodeError(f"hello: {exc}") from exc


def _net(conn: Conn) -> NetConn:
    assert isinstance(conn, NetConn)
    return conn


class _Outgoing:
    __slots__ = ("frame", "msg")

    def __init__(self, frame: bytes, msg: Message) -> None:
        self.frame = frame
        self.msg = msg


class _Link:
    """The outbound connection to one peer (it is that connection's handler)."""

    def __init__(self, links: PeerLinks, peer: NodeId) -> None:
        self.links = links
        self.peer = peer
        self.queue: deque[_Outgoing] = deque()
        self.conn: NetConn | None = None
        self.connected = False
        self.connect_failures = 0
        self._backoff = links.node.backoff_factory()
        self._retry: asyncio.TimerHandle | None = None
        self._down_reported = False
        self.stopped = False

    def send(self, item: _Outgoing) -> bool:
        if self.connected and self.conn is not None:
            self._write(item)
            return True
        if len(self.queue) >= self.links.node.send_queue_limit:
            return False
        self.queue.append(item)
        if self.conn is None and self._retry is None:
            self.dial()
        return True

    def _write(self, item: _Outgoing) -> None:
        node = self.links.node
        assert self.conn is not None
        node.connections.write(self.conn, item.frame)
        node.trace_message("send", item.msg, self.peer, len(item.frame))

    def dial(self) -> None:
        self._retry = None
        if self.stopped:
            return
        node = self.links.node
        address = node.address_of(self.peer)
        if address is None:
            log.warning("%s: no address for peer %s", node.node_id, self.peer)
            self._down()
            self._again()
            return
        host, port = address
        self.conn = node.connections.dial(f"{host}:{port}", framing=self.links.framing,
                                          max_frame=node.max_frame, handler=self)

    def kick(self) -> None:
        """The peer's address changed: retry now."""
        if self._retry is not None:
            self._retry.cancel()
            self.dial()

    def _again(self) -> None:
        if self.stopped:
            return
        delay = self._backoff.next_delay()
        self._retry = asyncio.get_running_loop().call_later(delay, self.dial)

    def _down(self) -> None:
        # edge-triggered: once per outage, not once per failed redial
        if not self._down_reported:
            self._down_reported = True
            self.links.node.unreachable(self.peer)

    # -- the connection's handler ----------------------------------------------------------

    def opened(self, conn: Conn, peer_address: str) -> None:
        node = self.links.node
        node.connections.write(_net(conn), hello_frame(node.node_id))
        self._backoff.reset()
        self.connected = True
        self._down_reported = False
        log.info("%s -> %s: connected (%s)", node.node_id, self.peer, peer_address)
        queue, self.queue = self.queue, deque()
        for item in queue:
            self._write(item)

    def received(self, conn: Conn, frame: bytes) -> None:
        pass  # an outbound link is one way; whatever comes back is ignored

    def closed(self, conn: Conn, reason: str) -> None:
        node = self.links.node
        if self.connected:
            log.info("%s -> %s: link lost: %s", node.node_id, self.peer, reason)
        else:
            self.connect_failures += 1
            log.debug("%s -> %s: connect failed: %s", node.node_id, self.peer, reason)
        self.connected = False
        self.conn = None
        self._down()
        self._again()

    def close(self) -> None:
        self.stopped = True
        if self._retry is not None:
            self._retry.cancel()
            self._retry = None


class _Inbound:
    __slots__ = ("peer",)

    def __init__(self) -> None:
        self.peer: NodeId | None = None


class PeerLinks:
    """The peer listener's handler and every outbound link of one node."""

    def __init__(self, node: LinkNode, framing: Framing) -> None:
        self.node = node
        self.framing = framing
        self.links: dict[NodeId, _Link] = {}
        self._inbound: dict[Conn, _Inbound] = {}

    # -- sending ---------------------------------------------------------------------------

    def send(self, dst: NodeId, frame: bytes, msg: Message) -> None:
        node = self.node
        link = self.links.get(dst)
        if link is None:
            if node.address_of(dst) is None:
                log.warning("%s: %s to unknown peer %s dropped", node.node_id, msg.TYPE, dst)
                node.drop("unknown_peer", msg=msg, peer=dst, size=len(frame))
                return
            link = self.links[dst] = _Link(self, dst)
        if not link.send(_Outgoing(frame, msg)):
            log.warning("%s: send queue to %s full (%d), %s dropped", node.node_id, dst,
                        node.send_queue_limit, msg.TYPE)
            node.drop("queue_full", msg=msg, peer=dst, size=len(frame))

    def kick(self, peer: NodeId) -> None:
        link = self.links.get(peer)
        if link is not None and not link.connected:
            link.kick()

    def close(self) -> int:
        """Stop redialing; returns how many messages were still queued."""
        dropped = 0
        for link in self.links.values():
            dropped += len(link.queue)
            link.close()
        return dropped

    # -- the peer listener -----------------------------------------------------------------

    def opened(self, conn: Conn, peer_address: str) -> None:
        self._inbound[conn] = _Inbound()

    def received(self, conn: Conn, frame: bytes) -> None:
        state = self._inbound.get(conn)
        if state is None:
            return
        node = self.node
        if state.peer is None:
            try:
                state.peer = parse_hello(frame)
            except ProtocolError as exc:
                log.warning("%s: closing connection from %s: %s: %s", node.node_id,
                            conn.remote, exc.reason, exc)
                node.drop(exc.reason, peer=None, error=str(exc), remote=conn.remote)
                node.connections.close(_net(conn), CloseCode.PROTOCOL_ERROR, "bad hello")
                return
            log.info("%s <- %s: connected (%s)", node.node_id, state.peer, conn.remote)
            return
        node.deliver(state.peer, frame)

    def closed(self, conn: Conn, reason: str) -> None:
        state = self._inbound.pop(conn, None)
        if state is not None:
            log.info("%s <- %s: connection ended: %s", self.node.node_id,
                     state.peer or conn.remote, reason)

    def connected(self, peer: NodeId) -> bool:
        link = self.links.get(peer)
        return link is not None and link.connected

