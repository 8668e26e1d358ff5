"""A replica client as a process over one connection to the hub (the connection contract).

``ReplicaNode`` owns the ``ReplicaClient`` and its link: it dials the hub, hands each frame to
the client, tells it when the link comes up (it resubscribes and syncs) and goes down (writes
queue up offline), and redials with the seed's Fibonacci backoff unless told to stay offline.
The same class runs in the simulator (``hub:PORT``) and behind the asyncio ``Replica``
(``ws://host:port/ws``).
"""

from __future__ import annotations

from typing import Any

from ...core.backoff import Backoff, FibonacciBackoff
from ...core.conn import CloseCode, Conn, Framing
from ...core.env import Env, TimerHandle
from ...core.errors import ConfigError, ProtocolError
from ...core.messages import Message
from .objects import ReplicaClient
from .wire import HUB_ID, ReplicaCodec

__all__ = ["DEFAULT_MAX_FRAME", "ReplicaNode"]

LAYER = "replica"
DEFAULT_MAX_FRAME = 64 * 1024


class ReplicaNode:
    """One client process (see the module docstring); ``client_options`` go to the client
    (config, rebase, on_change, ...). ``client_class``: the client to build, ``ReplicaClient``
    or a subclass of it; it is given ``env``, ``send`` (this link) and ``client_options``."""

    def __init__(self, env: Env, *, hub: str, backoff: Backoff | None = None,
                 max_frame: int = DEFAULT_MAX_FRAME, online: bool = True,
                 client_class: type[ReplicaClient] = ReplicaClient,
                 **client_options: Any) -> None:
        if not (isinstance(client_class, type) and issubclass(client_class, ReplicaClient)):
            raise ConfigError(f"client_class must be ReplicaClient or a subclass, "
                              f"got {client_class!r}")
        self.env = env
        self.hub = hub
        self.codec = ReplicaCodec(max_frame=max_frame)
        self.max_frame = max_frame
        self.backoff = backoff if backoff is not None else FibonacciBackoff()
        self.client = client_class(env, send=self._send, **client_options)
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
        self.backoff.reset()
        self.client.connected()

    def received(self, conn: Conn, frame: bytes) -> None:
        if conn is not self.conn:
            return  # a connection we left
        try:
            msg = self.codec.decode(frame)
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

    def _send(self, msg: Message) -> None:
        if self.open and self.conn is not None:
            self.env.write(self.conn, self.codec.encode(msg))
        # offline: dropped; the protocol resends what matters once connected
