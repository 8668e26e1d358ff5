"""The seed-000 hub as a service over connections: the seed's multicast channel.

The relay (``dissemination.hub_relay``) decides where each message goes; the keeper
(``keeper.py``, unless turned off) keeps the durable snapshot that answers subscribes and NACKs.
A multicast is forwarded exactly as it was received, to every other connection in one
``write_many`` (the runtime frames it once); everything else the hub says is encoded here. Bad
input is dropped and traced, never fatal; the runtime closes what breaks its limits (frame
size, invalid UTF-8, a slow reader) and the others hear the ``Left``.

With a keeper, nothing leaves the hub before the keeper's store has on disk what it depends
on (``_when_durable``): a data message is relayed once the keeper's delivery of it is
committed, and every frame after it waits its turn, so a power loss never makes the hub forget
what it relayed or relay it again.

One id, one writer: the first frame of a connection is its join. The hub's client book
(``identity.py``) checks the token it presents (issuing one at an id's first join), a join for
an id that another connection holds is refused, and the book's record is on disk before the
``welcome`` that answers the join leaves (which also tells a new incarnation of the id where to
resume its numbering). A refused join gets a ``refused`` frame and a close with the same code
and reason. Tokens never leave the hub in a forwarded frame.

The hub orders per object (its relay's order is the order clients see): each data message
passes through the ``orderer`` (keyed by the object) before the keeper stores it and the hub
forwards it, and only once accepted; a redirect or a refusal drops it, traced (seed 000's wire
has no answer for them: the clients' NACKs fetch what they miss). The default
``ImmediateOrderer`` accepts at once and nothing reads its positions, so the hub skips it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from ...core.conn import CloseCode, Conn
from ...core.env import Env
from ...core.errors import CorruptMessage, ProtocolError, StateError
from ...core.messages import Message
from ..dissemination.hub_relay import HubRelay, Route, dest_of
from ..ordering.orderer import Accepted, Decision, ImmediateOrderer, Orderer, Redirected
from .identity import Admitted, ClientBook, Refusal
from .keeper import HubKeeper, KeeperConfig
from .wire import (
    HUB_ID,
    MAX_REASON_CHARS,
    Data,
    JoinRefusal,
    Refused,
    ReplicaCodec,
    Subscribe,
    Welcome,
    max_write_bytes,
    write_bytes,
)

__all__ = ["DEFAULT_KEEPER", "HUB_LAYER", "HubService"]

HUB_LAYER = "hub"
DEFAULT_KEEPER = KeeperConfig()
DETAIL_CHARS = 200


class _Peer:
    """What the hub counts of one connection (for its ``leave`` row)."""

    __slots__ = ("admitted", "client", "dropped", "frames_in")

    def __init__(self) -> None:
        self.client: str | None = None
        self.frames_in = 0
        self.dropped = 0
        self.admitted: Admitted | None = None


class HubService:
    """The hub (see the module docstring). ``keeper`` None runs the seed's bare relay;
    ``orderer`` (None: an ``ImmediateOrderer``) decides each data message's place in its
    object's order before it is stored and forwarded. ``new_token()`` makes each client's
    token: a network hub passes a cryptographic source (``HubServer``: ``secrets``); the
    default draws from ``env.rng``, reproducible in the simulator and predictable elsewhere.
    ``max_clients``: client ids the hub registers at most."""

    def __init__(self, env: Env, *, keeper: KeeperConfig | None = DEFAULT_KEEPER,
                 max_connections: int = 10_000, codec: ReplicaCodec | None = None,
                 orderer: Orderer | None = None, new_token: Callable[[], str] | None = None,
                 max_clients: int = 1_000_000) -> None:
        if env.node != HUB_ID:
            raise StateError(f"the hub runs as node {HUB_ID!r}, not {env.node!r}")
        if orderer is not None and not isinstance(orderer, Orderer):
            raise TypeError(f"orderer must be an Orderer, got {orderer!r}")
        self.env = env
        self.codec = codec if codec is not None else ReplicaCodec()
        # a write over it would make catch-up frames (retries, snapshots) over the frame
        # limit: every joiner's connection closed, again and again (``max_write_bytes``)
        self.max_write = max_write_bytes(self.codec.max_frame)
        self.relay = HubRelay(max_connections=max_connections)
        self.everyone = env.group()  # the relay's connections, for the multicast fan-out
        self.keeper = None if keeper is None else HubKeeper(
            env, self._from_hub, config=keeper,
            connected=lambda client: self.relay.connection_of(client) is not None,
            tell=self._tell)
        self._peers: dict[Conn, _Peer] = {}
        # the register of client ids and tokens: in the keeper's store (one group commit with
        # what the keeper writes), else in the hub's own store (committed at each join)
        self.book = ClientBook(env.store if self.keeper is None else self.keeper.store,
                               new_token if new_token is not None else self._rng_token,
                               max_clients=max_clients)
        self.refusals = 0
        self.running = False
        self.orderer: Orderer = orderer if orderer is not None else ImmediateOrderer()
        # the one the hot path calls: None when it would accept at once at positions nobody
        # reads (the default), so a data message costs one test of this attribute
        self._ordering: Orderer | None = (None if type(self.orderer) is ImmediateOrderer
                                          else self.orderer)

    def start(self) -> None:
        self.running = True
        if self.keeper is not None:
            self.keeper.start()

    def stop(self) -> None:
        self.running = False
        if self.keeper is not None:
            self.keeper.stop()  # commits what the group commit still holds

    @property
    def connections(self) -> int:
        """Connections subscribed in the relay right now."""
        return len(self.relay)

    # -- the connection contract -------------------------------------------------------------

    def opened(self, conn: Conn, peer_address: str) -> None:
        try:
            self.relay.connect(conn)
        except StateError as exc:
            self._trace("drop", None, reason="full", detail=str(exc))
            self.env.close(conn, CloseCode.TRY_AGAIN_LATER,
                           f"hub full: {self.relay.max_connections} connections")
            return
        self.everyone.add(conn)
        self._peers[conn] = _Peer()

    def received(self, conn: Conn, frame: bytes) -> None:
        peer = self._peers.get(conn)
        if peer is None:
            return  # not subscribed (refused, or on its way out)
        peer.frames_in += 1
        relay = self.relay
        before = peer.client
        try:
            msg = self.codec.decode(frame)
            if before is None and not self._admit(conn, peer, msg):
                return  # refused and closed
            if isinstance(msg, Subscribe) and msg.joining:  # credentials stay at the hub
                if before is not None and msg.token is not None:
                    # it shows it kept the token it was just issued: confirmed, and answered by
                    # nothing (serving it would resend what its join's answer is sending)
                    self._confirm(peer, msg.id, msg.token)
                    return
                msg = dataclasses.replace(msg, token=None, incarnation=None)
                frame = self.codec.encode(msg)
            if isinstance(msg, Data) and len(frame) > self.max_write and \
                    write_bytes(msg.key, msg.data) > self.max_write:
                self._too_big(conn, peer, msg, frame)
                return
            peer.client = relay.bind(conn, msg)
            ordering = self._ordering
            if ordering is not None and isinstance(msg, Data):
                self._propose(ordering, conn, peer, msg, frame, before is None)
                return
            if self.keeper is not None and isinstance(msg, Data):
                delivered = self.keeper.handle_data(msg, frame)
                if before is None:
                    self._trace_join(conn, peer)
                self._relay(delivered, conn, msg, frame)
                return
            forward = msg if self.keeper is None else self.keeper.handle(msg, frame)
            multicast = forward is msg and dest_of(msg) is None
            routes = [] if forward is None or multicast else relay.routes(conn, forward)
        except ProtocolError as exc:
            peer.dropped += 1
            self._trace("drop", peer, size=len(frame), reason=exc.reason,
                        detail=str(exc)[:DETAIL_CHARS])
            return
        if before is None:
            self._trace_join(conn, peer)
        if multicast:
            self._when_durable(lambda: self.env.write_many(self.everyone, frame, exclude=conn))
        elif routes:
            self._when_durable(lambda: self._forward(routes, msg, frame))

    def closed(self, conn: Conn, reason: str) -> None:
        peer = self._peers.pop(conn, None)
        if peer is None:
            return
        self.everyone.discard(conn)
        routes = self.relay.disconnect(conn)
        self._trace("leave", peer, conn=conn.id, frames_in=peer.frames_in,
                    dropped=peer.dropped, reason=reason)
        if self.running and routes:
            self._when_durable(lambda: self._forward(routes, None, b""))

    # -- joins ---------------------------------------------------------------------------------

    def _admit(self, conn: Conn, peer: _Peer, msg: Message) -> bool:
        """The first frame of ``conn``: its join. Admitted: the book's record is written and
        the ``welcome`` leaves once it is on disk (frames to ``conn`` after it wait their turn).
        Refused: a ``refused`` frame, then the connection is closed with its code."""
        client = getattr(msg, "id", None)
        if not isinstance(client, str) or client == HUB_ID:
            return True  # not a client's id: the relay refuses the frame (dropped, traced)
        if self.relay.connection_of(client) is not None:
            self._refuse(conn, peer, client, Refusal(
                JoinRefusal.ID_IN_USE,
                f"client id {client!r} is connected on another connection"))
            return False
        joining = isinstance(msg, Subscribe)
        if not joining and self.book.record(client) is not None:
            self._refuse(conn, peer, client, Refusal(
                JoinRefusal.FIRST_FRAME,
                f"client id {client!r} is registered: join with a subscribe that carries "
                f"its token"))
            return False
        own = msg.vector.get(client, 0) if isinstance(msg, Subscribe | Data) else 0
        known = None if self.keeper is None else self.keeper.known_high(client)
        verdict = self.book.admit(client, msg.token if isinstance(msg, Subscribe) else None,
                                  own=own, known=known,
                                  incarnation=msg.incarnation if isinstance(msg, Subscribe)
                                  else None)
        if isinstance(verdict, Refusal):
            self._refuse(conn, peer, client, verdict)
            return False
        peer.admitted = verdict
        welcome = self.codec.encode(Welcome(id=HUB_ID, dest=client, token=verdict.token,
                                            resume=verdict.resume))
        if self.keeper is None:
            self.book.store.commit()  # the record on disk before the welcome that depends on it
            self.env.write(conn, welcome)
        else:  # the record joined the keeper's group: the welcome waits for it
            self._when_durable(lambda: self._write_if_open(conn, welcome))
        return True

    def _confirm(self, peer: _Peer, client: str, token: str) -> None:
        if client != peer.client or not self.book.confirm(client, token):
            self._trace("drop", peer, reason="bad_confirm", client=client)
            return
        if self.keeper is None:
            self.book.store.commit()
        self._trace("confirm", peer)

    def _too_big(self, conn: Conn, peer: _Peer, msg: Data, frame: bytes) -> None:
        """A write too big to travel again: refused, and its connection closed (its origin
        numbered it: it must not go on as if the hub had it)."""
        peer.dropped += 1
        reason = f"a write over {self.max_write} bytes (key and content): not kept"
        self._trace("drop", peer, size=len(frame), reason="write_too_big",
                    detail=f"{msg.id}:{msg.key}"[:DETAIL_CHARS])
        self.env.close(conn, CloseCode.TOO_BIG, reason)

    def _write_if_open(self, conn: Conn, frame: bytes) -> None:
        if conn in self._peers:
            self.env.write(conn, frame)

    def _refuse(self, conn: Conn, peer: _Peer, client: str, refusal: Refusal) -> None:
        reason = refusal.reason[:MAX_REASON_CHARS]
        self.refusals += 1
        peer.dropped += 1
        self._peers.pop(conn, None)
        self.everyone.discard(conn)
        self.relay.disconnect(conn)  # not bound: nobody is told anything
        self._trace("drop", peer, reason="join_refused", client=client, code=int(refusal.code),
                    detail=reason, conn=conn.id, remote=conn.remote)
        self.env.write(conn, self.codec.encode(Refused(id=HUB_ID, dest=client,
                                                       code=int(refusal.code), reason=reason)))
        self.env.close(conn, int(refusal.code), reason)

    def _trace_join(self, conn: Conn, peer: _Peer) -> None:
        admitted = peer.admitted
        if admitted is None:
            self._trace("join", peer, conn=conn.id, remote=conn.remote)
        else:
            self._trace("join", peer, conn=conn.id, remote=conn.remote, first=admitted.first,
                        new_incarnation=admitted.new_incarnation, resume=admitted.resume)

    def _rng_token(self) -> str:
        return f"{self.env.rng.getrandbits(128):032x}"

    # -- ordering (a non-default orderer only) -------------------------------------------------

    def _propose(self, orderer: Orderer, conn: Conn, peer: _Peer, msg: Data, frame: bytes,
                 first: bool) -> None:
        """Hand a data message to the orderer; it is stored and forwarded once accepted."""
        if self.keeper is not None and not msg.crc_ok:  # what the keeper would refuse
            raise CorruptMessage(f"data {msg.id}:{msg.seq} on {msg.key!r}: wrong crc")
        if first:
            self._trace_join(conn, peer)
        orderer.propose(
            msg.key, msg, lambda decision: self._ordered(conn, peer, msg, frame, decision))

    def _ordered(self, conn: Conn, peer: _Peer, msg: Data, frame: bytes,
                 decision: Decision) -> None:
        if not self.running:
            return
        if not isinstance(decision, Accepted):
            peer.dropped += 1
            if isinstance(decision, Redirected):
                self._trace("drop", peer, size=len(frame), reason="order_redirected",
                            msg=f"{msg.id}:{msg.seq}", key=msg.key, leader=decision.leader)
            else:
                self._trace("drop", peer, size=len(frame), reason="order_refused",
                            msg=f"{msg.id}:{msg.seq}", key=msg.key,
                            detail=decision.reason[:DETAIL_CHARS])
            return
        if self.keeper is None:  # the bare relay: as received, to everyone else
            self.env.write_many(self.everyone, frame, exclude=conn)
            return
        try:
            delivered = self.keeper.handle_data(msg, frame)
        except ProtocolError as exc:
            peer.dropped += 1
            self._trace("drop", peer, size=len(frame), reason=exc.reason,
                        detail=str(exc)[:DETAIL_CHARS])
            return
        self._relay(delivered, conn, msg, frame)

    # -- routing -----------------------------------------------------------------------------

    def _relay(self, delivered: list[Data], conn: Conn, msg: Data, frame: bytes) -> None:
        """Multicast what the keeper just delivered, once it is durable: ``msg`` as received
        (not back to ``conn``), held ones it released encoded here (not to their origin)."""
        if not delivered:
            return
        sends: list[tuple[bytes, Any]] = []  # frame, the connection it does not go to
        for data in delivered:
            if data is msg:
                sends.append((frame, conn))
            else:
                sends.append((self.codec.encode(data), self.relay.connection_of(data.id)))

        def send() -> None:
            for encoded, exclude in sends:
                self.env.write_many(self.everyone, encoded, exclude=exclude)

        self._when_durable(send)

    def _when_durable(self, send: Callable[[], None]) -> None:
        """``send`` now if the keeper's store has nothing on its way to disk, else once the
        group that holds every write so far is on disk (then in the order given): nothing
        leaves the hub before what it depends on is committed, and frames keep their order."""
        keeper = self.keeper
        if keeper is None or keeper.store.idle:
            send()
        else:
            keeper.store.commit_then(lambda: self._send_if_running(send))

    def _send_if_running(self, send: Callable[[], None]) -> None:
        if self.running:
            send()

    def _tell(self, client: str, msg: Message) -> None:
        """``msg`` from the hub to ``client`` alone (if connected)."""
        conn = self.relay.connection_of(client)
        if self.running and conn is not None:
            frame = self.codec.encode(msg)
            self._when_durable(lambda: self.env.write(conn, frame))  # type: ignore[arg-type]

    def _from_hub(self, msg: Message) -> None:
        if self.running:
            routes = self.relay.from_hub(msg)
            if routes:
                self._when_durable(lambda: self._forward(routes, None, b""))

    def _forward(self, routes: list[Route], original: Message | None, received: bytes) -> None:
        """Each route's message to its connection: ``original`` as ``received`` (the frame it
        was decoded from), anything else encoded here once."""
        encoded: dict[int, bytes] = {}
        write = self.env.write
        for route in routes:
            msg = route.msg
            frame = encoded.get(id(msg))
            if frame is None:
                frame = encoded[id(msg)] = (received if msg is original
                                            else self.codec.encode(msg))
            write(route.to, frame)  # type: ignore[arg-type]

    def _trace(self, event: str, peer: _Peer | None, *, size: int | None = None,
               **info: Any) -> None:
        if self.env.tracing:
            self.env.trace(event, layer=HUB_LAYER, peer=None if peer is None else peer.client,
                           size=size, **info)
