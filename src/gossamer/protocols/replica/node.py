"""A replica client as a process over one connection to the hub (the connection contract).

``ReplicaNode`` owns the ``ReplicaClient`` and its link: it dials the hub, hands each frame to
the client, tells it when the link comes up (it resubscribes and syncs) and goes down (writes
queue up offline), and redials with the seed's Fibonacci backoff unless told to stay offline.
The same class runs in the simulator (``hub:PORT``) and behind the asyncio ``Replica``
(``ws://host:port/ws``).

It also holds the client's identity at the hub: the first ``subscribe`` of each connection (the
join) carries the token the hub issued at the id's first join (kept in the client's store) and
the process's incarnation; the hub's ``welcome`` may issue the token and tell a new incarnation
where to resume its numbering. A ``refused`` join is kept in ``refused`` and reported through
``on_refused``; the node dials again only when the refusal may pass (the id's other connection
may go away), else it stays offline until ``reconnect()``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from ...core.backoff import Backoff, FibonacciBackoff
from ...core.conn import CloseCode, Conn, Framing
from ...core.env import Env, TimerHandle
from ...core.errors import ConfigError, OperationError, ProtocolError
from ...core.messages import Message
from .objects import ReplicaClient
from .wire import (
    HUB_ID,
    MAX_TOKEN_CHARS,
    JoinRefusal,
    Refused,
    ReplicaCodec,
    Subscribe,
    Welcome,
    max_write_bytes,
)

__all__ = ["DEFAULT_MAX_FRAME", "JoinRefused", "ReplicaNode"]

_IDENTITY = "replica.identity"  # "token": the token the hub issued for this client's id


class JoinRefused(OperationError):
    """The hub refused this client's join (definite: nothing was written through it)."""

    def __init__(self, refused: Refused) -> None:
        try:
            name = JoinRefusal(refused.code).name
        except ValueError:
            name = "refused"
        super().__init__(f"the hub refused client {refused.dest!r} ({name}, code "
                         f"{refused.code}): {refused.reason}", definite=True)
        self.code = refused.code
        self.reason = refused.reason

LAYER = "replica"
DEFAULT_MAX_FRAME = 64 * 1024


class ReplicaNode:
    """One client process (see the module docstring); ``client_options`` go to the client
    (config, rebase, on_change, ...). ``client_class``: the client to build, ``ReplicaClient``
    or a subclass of it; it is given ``env``, ``send`` (this link) and ``client_options``."""

    def __init__(self, env: Env, *, hub: str, backoff: Backoff | None = None,
                 max_frame: int = DEFAULT_MAX_FRAME, online: bool = True,
                 client_class: type[ReplicaClient] = ReplicaClient,
                 token: str | None = None,
                 on_refused: Callable[[Refused], None] | None = None,
                 **client_options: Any) -> None:
        """``token``: this id's token, for a store that does not hold it yet (a new store of
        an id that joined before; kept in the store); None: the stored one, if any."""
        if not (isinstance(client_class, type) and issubclass(client_class, ReplicaClient)):
            raise ConfigError(f"client_class must be ReplicaClient or a subclass, "
                              f"got {client_class!r}")
        if token is not None and not (isinstance(token, str)
                                      and 0 < len(token) <= MAX_TOKEN_CHARS):
            raise ConfigError(f"token must be a string of 1-{MAX_TOKEN_CHARS} characters")
        self.env = env
        self.hub = hub
        self.codec = ReplicaCodec(max_frame=max_frame)
        self.max_frame = max_frame
        self.backoff = backoff if backoff is not None else FibonacciBackoff()
        self.client = client_class(env, send=self._send, **client_options)
        self.client.max_write = min(self.client.max_write, max_write_bytes(max_frame))
        store = self.client.store
        stored = store.get(_IDENTITY, "token")
        if token is not None and (stored is None or stored.decode() != token):
            store.put(_IDENTITY, "token", token.encode())
            store.commit()
        self.token: str | None = token if token is not None else (
            None if stored is None else stored.decode())
        self.on_refused = on_refused
        self.refused: Refused | None = None  # the last refusal, until a join succeeds
        self.welcomes = 0
        self._join_pending = False  # the connection's first subscribe is still to be sent
        self.want_online = online
        self.conn: Conn | None = None
        self.open = False
        self.connects = 0
        self._redial: TimerHandle | None = None
        self.running = False

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        self.running = True
        if self.want_online:
            self._dial()

    def stop(self) -> None:
        self.running = False
        self._cancel_redial()
        self.client.stop()
        if self.conn is not None:
            self.env.close(self.conn, CloseCode.GOING_AWAY, "client stopping")

    def go_offline(self) -> None:
        """Disconnect and stay offline (writes queue up) until ``reconnect()``."""
        self.want_online = False
        self._cancel_redial()
        if self.conn is not None:
            conn, self.conn = self.conn, None
            self.open = False
            self.env.close(conn, CloseCode.NORMAL, "going offline")
            self.client.disconnected()

    def reconnect(self) -> None:
        """Connect again now (after ``go_offline()``, or to cut a backoff wait short)."""
        self.want_online = True
        self.backoff.reset()
        self._cancel_redial()
        if self.conn is None and self.running:
            self._dial()

    def _dial(self) -> None:
        framing = Framing.WS if self.hub.startswith("ws://") else Framing.LINES
        self.conn = self.env.connect(self.hub, framing=framing, max_frame=self.max_frame)

    def _cancel_redial(self) -> None:
        if self._redial is not None:
            self.env.cancel(self._redial)
            self._redial = None

    def _redial_now(self) -> None:
        self._redial = None
        if self.running and self.want_online and self.conn is None:
            self._dial()

    # -- the connection ----------------------------------------------------------------------

    def opened(self, conn: Conn, peer_address: str) -> None:
        if conn is not self.conn:
            return
        self.open = True
        self.connects += 1
        self._join_pending = True
        self.client.connected()  # its first message is the subscribe that joins

    def received(self, conn: Conn, frame: bytes) -> None:
        if conn is not self.conn:
            return  # a connection we left
        try:
            msg = self.codec.decode(frame)
            if isinstance(msg, Welcome):
                self._welcomed(msg)
            elif isinstance(msg, Refused):
                self._refused(msg)
            else:
                self.client.on_message(HUB_ID, msg)
        except ProtocolError as exc:
            self.env.trace("drop", layer=LAYER, peer=HUB_ID, reason=exc.reason,
                           error=str(exc)[:200])

    def closed(self, conn: Conn, reason: str) -> None:
        if conn is not self.conn:
            return
        was_open, self.open, self.conn = self.open, False, None
        if was_open:
            self.client.disconnected()
        if self.running and self.want_online:
            self._redial = self.env.set_timer(self.backoff.next_delay(), self._redial_now)

    def _welcomed(self, msg: Welcome) -> None:
        if msg.dest != self.env.node:
            self.env.trace("drop", layer=LAYER, peer=HUB_ID, reason="not_for_me", type=msg.TYPE)
            return
        self.refused = None
        self.welcomes += 1
        self.backoff.reset()  # joined: the next outage starts its backoff afresh
        self.env.trace("welcome", layer=LAYER, peer=HUB_ID, issued=msg.token is not None,
                       resume=msg.resume)
        self.client.resume_after(msg.resume)
        if msg.token is not None:
            self.token = msg.token
            store = self.client.store
            store.put(_IDENTITY, "token", msg.token.encode())
            store.commit()  # kept before the hub is told so (and before any write as this id)
            self._send(Subscribe(id=self.env.node, vector=self.client.causal.vector,
                                 token=msg.token))  # confirms: the hub may forget it otherwise

    def _refused(self, msg: Refused) -> None:
        self.refused = msg
        try:
            again = JoinRefusal(msg.code).retry
        except ValueError:
            again = False
        self.env.trace("refused", layer=LAYER, peer=HUB_ID, code=msg.code,
                       reason=msg.reason, again=again)
        if not again:
            self.want_online = False  # the hub closes the connection; no redial
        if self.on_refused is not None:
            self.on_refused(msg)

    def _send(self, msg: Message) -> None:
        if self.open and self.conn is not None:
            if self._join_pending and isinstance(msg, Subscribe):
                self._join_pending = False
                msg = dataclasses.replace(msg, token=self.token,
                                          incarnation=self.env.incarnation)
            self.env.write(self.conn, self.codec.encode(msg))
        # offline: dropped; the protocol resends what matters once connected
