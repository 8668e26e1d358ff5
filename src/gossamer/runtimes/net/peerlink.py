"""Peer links: ``env.send`` between the nodes of one deployment, on top of connections.

One protocol among others on the connection layer, used only on a node's peer listener. The
accepting node speaks first, a challenge; the dialer answers with an authenticated hello (its
id, incarnation and nonce, proven with the cluster key: ``linkauth.py``); the accepting node
then checks the claimed id where it points (it asks that node, over its own link there, to echo
a secret token back on the link being checked) and delivers nothing from the link before that.
Then one codec-encoded message per frame, one way. Each peer gets one outbound link that dials,
answers the challenge, writes a bounded queue and redials with backoff when the connection is
refused or lost; the process hears of an outage once, through ``on_unreachable(peer)``. What
was written to a connection that breaks may be lost (``env.send`` promises no more). Refused
links and frames are traced (``drop``, with the reason).
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections import deque
from collections.abc import Callable
from typing import Protocol

from ...core.backoff import Backoff
from ...core.conn import CloseCode, Conn, Framing
from ...core.errors import ProtocolError
from ...core.ids import NodeId
from ...core.messages import Message
from .conns import Connections, NetConn
from .linkauth import (
    ClusterKey,
    Hello,
    challenge_frame,
    control_of,
    hello_frame,
    new_nonce,
    parse_challenge,
    parse_hello,
    verified_frame,
    verify_frame,
)
from .netconn import NodeSide
from .ratelog import RateLimitedLog

__all__ = ["LinkNode", "PeerLinks"]

log = logging.getLogger("gossamer.net")

MAX_UNVERIFIED_FRAMES = 1000  # held per link while its claimed id is checked
CONTROL_FRAMES = 16  # room in a link's backlog beside its messages (the hello, echoes)


class LinkNode(NodeSide, Protocol):
    """What the peer links need of their node, beyond the connection layer's needs."""

    connections: Connections
    backoff_factory: Callable[[], Backoff]
    incarnation: int
    hello_timeout: float
    overload: RateLimitedLog  # per-message warnings, once per interval with counts

    def address_of(self, node: NodeId) -> tuple[str, int] | None: ...

    def deliver(self, peer: NodeId, frame: bytes) -> None: ...

    def trace_message(self, event: str, msg: Message, peer: str, size: int) -> None: ...

    def unreachable(self, peer: NodeId) -> None: ...


def _net(conn: Conn) -> NetConn:
    assert isinstance(conn, NetConn)
    return conn


class _Outgoing:
    __slots__ = ("frame", "msg")

    def __init__(self, frame: bytes, msg: Message | None) -> None:
        self.frame = frame
        self.msg = msg  # None: a control frame of the link protocol


class _Link:
    """The outbound connection to one peer (it is that connection's handler)."""

    def __init__(self, links: PeerLinks, peer: NodeId) -> None:
        self.links = links
        self.peer = peer
        self.queue: deque[_Outgoing] = deque()
        self.conn: NetConn | None = None
        self.connected = False  # the hello went out: frames may follow
        self.nonce: str | None = None  # the nonce of the hello on the current connection
        self.connect_failures = 0
        self._backoff = links.node.backoff_factory()
        self._retry: asyncio.TimerHandle | None = None
        self._down_reported = False
        self.stopped = False

    def send(self, item: _Outgoing, *, control: bool = False) -> bool:
        if self.connected and self.conn is not None:
            self._write(item)
            return True
        if len(self.queue) >= self.links.node.send_queue_limit and not control:
            return False
        self.queue.append(item)
        if self.conn is None and self._retry is None:
            self.dial()
        return True

    def _write(self, item: _Outgoing) -> None:
        node = self.links.node
        assert self.conn is not None
        node.connections.write(self.conn, item.frame)
        if item.msg is not None:
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
        # the connection's backlog holds as much as the queue before it: a live peer that
        # reads is never cut off for a burst the node accepted (see ``send_queue_limit``)
        self.conn = node.connections.dial(f"{host}:{port}", framing=self.links.framing,
                                          max_frame=node.max_frame, handler=self,
                                          limit=node.send_queue_limit + CONTROL_FRAMES)

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
        pass  # the accepting node speaks first: its challenge

    def received(self, conn: Conn, frame: bytes) -> None:
        """The challenge (the one frame the other end sends on an outbound link)."""
        if conn is not self.conn or self.connected:
            return
        node = self.links.node
        try:
            challenge = parse_challenge(frame)
        except ProtocolError as exc:
            log.warning("%s -> %s: %s: %s", node.node_id, self.peer, exc.reason, exc)
            node.drop(exc.reason, peer=self.peer, error=str(exc), side="dialer")
            node.connections.close(_net(conn), CloseCode.PROTOCOL_ERROR, "bad challenge")
            return
        self.nonce = new_nonce()
        node.connections.write(_net(conn), hello_frame(
            self.links.key, node.node_id, node.incarnation, challenge, self.nonce))
        self._backoff.reset()
        self.connected = True
        self._down_reported = False
        log.info("%s -> %s: connected (%s)", node.node_id, self.peer, conn.remote)
        queue, self.queue = self.queue, deque()
        for item in queue:
            self._write(item)

    def closed(self, conn: Conn, reason: str) -> None:
        node = self.links.node
        if self.connected:
            log.info("%s -> %s: link lost: %s", node.node_id, self.peer, reason)
        else:
            self.connect_failures += 1
            log.debug("%s -> %s: connect failed: %s", node.node_id, self.peer, reason)
        self.connected = False
        self.conn = None
        self.nonce = None
        self._down()
        self._again()

    def close(self) -> None:
        self.stopped = True
        if self._retry is not None:
            self._retry.cancel()
            self._retry = None


class LinkState(enum.Enum):
    CHALLENGED = "challenged"  # our challenge went out; the hello is next
    VERIFYING = "verifying"  # a valid hello; the claimed id is being checked
    VERIFIED = "verified"  # messages are delivered


class _Inbound:
    """An inbound peer link: its state, and what it holds while its id is checked."""

    __slots__ = ("challenge", "held", "hello", "state", "timer", "token")

    def __init__(self, challenge: str) -> None:
        self.challenge = challenge
        self.state = LinkState.CHALLENGED
        self.hello: Hello | None = None
        self.token: str | None = None  # what the claimed node must echo on this link
        self.held: list[bytes] = []
        self.timer: asyncio.TimerHandle | None = None

    @property
    def peer(self) -> NodeId | None:
        return None if self.hello is None else self.hello.node


class PeerLinks:
    """The peer listener's handler and every outbound link of one node."""

    def __init__(self, node: LinkNode, framing: Framing, key: ClusterKey, *,
                 verify_ids: bool = True) -> None:
        """``verify_ids``: check each claimed id with the node it names (ids are addresses);
        off only where ids are not (tests of a node's own frame handling)."""
        self.node = node
        self.framing = framing
        self.key = key
        self.verify_ids = verify_ids
        self.links: dict[NodeId, _Link] = {}
        self._inbound: dict[Conn, _Inbound] = {}

    # -- sending ---------------------------------------------------------------------------

    def send(self, dst: NodeId, frame: bytes, msg: Message) -> None:
        node = self.node
        link = self.links.get(dst)
        if link is None:
            if node.address_of(dst) is None:
                node.overload.warn(f"unknown_peer {node.node_id} {dst}",
                              "%s: %s to unknown peer %s dropped", node.node_id, msg.TYPE, dst)
                node.drop("unknown_peer", msg=msg, peer=dst, size=len(frame))
                return
            link = self.links[dst] = _Link(self, dst)
        if not link.send(_Outgoing(frame, msg)):
            node.overload.warn(f"queue_full {node.node_id} {dst}",
                          "%s: send queue to %s full (%d), %s dropped", node.node_id, dst,
                          node.send_queue_limit, msg.TYPE)
            node.drop("queue_full", msg=msg, peer=dst, size=len(frame))

    def kick(self, peer: NodeId) -> None:
        link = self.links.get(peer)
        if link is not None and not link.connected:
            link.kick()

    def close(self) -> int:
        """Stop redialing; returns how many messages were still queued."""
        self.node.overload.flush()
        dropped = 0
        for link in self.links.values():
            dropped += len(link.queue)
            link.close()
        return dropped

    # -- the peer listener -----------------------------------------------------------------

    def opened(self, conn: Conn, peer_address: str) -> None:
        state = self._inbound[conn] = _Inbound(new_nonce())
        self.node.connections.write(_net(conn), challenge_frame(state.challenge))

    def received(self, conn: Conn, frame: bytes) -> None:
        state = self._inbound.get(conn)
        if state is None:
            return
        if state.state is LinkState.VERIFIED and not frame.startswith(b'{"verif'):
            self.node.deliver(state.hello.node, frame)  # type: ignore[union-attr]
            return
        try:
            if state.state is LinkState.CHALLENGED:
                self._hello(conn, state, parse_hello(frame))
                return
            control = control_of(frame)
        except ProtocolError as exc:
            self._refuse(conn, state, exc.reason, str(exc))
            return
        if control is None:  # a message while the id is checked: held, bounded
            if len(state.held) >= MAX_UNVERIFIED_FRAMES:
                self._refuse(conn, state, "unverified_overflow",
                             f"over {MAX_UNVERIFIED_FRAMES} frames before the check")
                return
            state.held.append(frame)
        elif control[0] == "verify":
            self._answer_verify(state, control[1], control[2])
        else:
            self._verified(conn, state, control[1])

    def _hello(self, conn: Conn, state: _Inbound, hello: Hello) -> None:
        node = self.node
        if not hello.proves(self.key, state.challenge):
            self._refuse(conn, state, "bad_proof",
                         f"hello from {hello.node}: not proven with this cluster's key")
            return
        state.hello = hello
        state.state = LinkState.VERIFYING
        if not self.verify_ids:
            self._accept(conn, state)
            return
        if hello.node == node.node_id:  # a link to ourselves: we know our own nonce
            link = self.links.get(hello.node)
            if link is not None and link.nonce == hello.nonce:
                self._accept(conn, state)
            else:
                self._refuse(conn, state, "impersonation", f"a link claims to be {hello.node}")
            return
        if node.address_of(hello.node) is None:
            self._refuse(conn, state, "unverifiable", f"{hello.node} has no address to ask")
            return
        state.token = new_nonce()
        state.timer = asyncio.get_running_loop().call_later(
            node.hello_timeout, self._verify_due, conn)
        self._control(hello.node, verify_frame(hello.nonce, state.token))

    def _answer_verify(self, state: _Inbound, nonce: str, token: str) -> None:
        """The node at the other end asks whether our link to it carried ``nonce``: only if
        it did, the token goes back on that link (so only a link we made proves our id)."""
        asker = state.peer
        if asker is None:
            return
        link = self.links.get(asker)
        if link is not None and link.connected and link.nonce == nonce:
            link.send(_Outgoing(verified_frame(token), None), control=True)

    def _verified(self, conn: Conn, state: _Inbound, token: str) -> None:
        if state.state is LinkState.VERIFYING and state.token == token:
            self._accept(conn, state)

    def _accept(self, conn: Conn, state: _Inbound) -> None:
        assert state.hello is not None
        if state.timer is not None:
            state.timer.cancel()
            state.timer = None
        state.state = LinkState.VERIFIED
        log.info("%s <- %s: connected (%s)", self.node.node_id, state.hello.node, conn.remote)
        held, state.held = state.held, []
        for frame in held:
            if self._inbound.get(conn) is not state:
                return  # the node failed while handling one
            self.node.deliver(state.hello.node, frame)

    def _verify_due(self, conn: Conn) -> None:
        state = self._inbound.get(conn)
        if state is not None and state.state is LinkState.VERIFYING:
            self._refuse(conn, state, "unverified",
                         f"{state.peer} did not confirm this link in time")

    def _control(self, peer: NodeId, frame: bytes) -> None:
        link = self.links.get(peer)
        if link is None:
            link = self.links[peer] = _Link(self, peer)
        link.send(_Outgoing(frame, None), control=True)

    def _refuse(self, conn: Conn, state: _Inbound, reason: str, detail: str) -> None:
        node = self.node
        log.warning("%s: closing a peer link from %s (%s): %s: %s", node.node_id,
                    state.peer or "?", conn.remote, reason, detail)
        node.drop(reason, peer=state.peer, error=detail, remote=conn.remote)
        if state.timer is not None:
            state.timer.cancel()
        self._inbound.pop(conn, None)
        node.connections.close(_net(conn), CloseCode.POLICY, reason)

    def closed(self, conn: Conn, reason: str) -> None:
        state = self._inbound.pop(conn, None)
        if state is not None and state.timer is not None:
            state.timer.cancel()
        if state is not None:
            log.info("%s <- %s: connection ended: %s", self.node.node_id,
                     state.peer or conn.remote, reason)

    def connected(self, peer: NodeId) -> bool:
        link = self.links.get(peer)
        return link is not None and link.connected

    def backlog(self, peer: NodeId) -> int:
        """Messages to ``peer`` not yet taken by its transport: queued while the link
        connects, or in the connection's backlog."""
        link = self.links.get(peer)
        if link is None:
            return 0
        conn = link.conn
        return len(link.queue) + (conn.queued if conn is not None and link.connected else 0)

