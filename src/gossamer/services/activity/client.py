"""An asyncio client of the activity network: login (anonymous, or register-then-login with a
generated secret), REDIRECT followed transparently, activities sent and received.

``async with ActivityClient(host, port, username=...) as client:`` then ``await client.send``
and ``await client.receive()``. It runs the sans-I/O ``ActivityClientNode`` on the network
runtime, so it behaves as the simulator's clients do; deliveries are traced as ``deliver`` rows
under ``node``. A ``send`` during a redirect waits until the client is logged in again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from typing import Any

from ...core.env import Env
from ...core.errors import OperationError
from ...core.trace import TraceSink
from ...protocols.activity import (
    ANONYMOUS,
    DEFAULT_MAX_LINE,
    ActivityClientNode,
    ActivityWire,
    ClientScript,
    LoginSuccess,
)
from ...protocols.activity.client import ClientPhase
from ...runtimes.net import NetNode, NodeState

__all__ = ["ActivityClient"]

log = logging.getLogger("gossamer.activity.client")

MAX_REDIRECTS = 10


class ActivityClient:
    def __init__(self, host: str, port: int, *, username: str = ANONYMOUS,
                 secret: str | None = None, timeout: float = 10.0,
                 max_line: int = DEFAULT_MAX_LINE, max_pending: int = 10_000,
                 trace: TraceSink | None = None, node: str = "client",
                 run: str = "activity", client_id: str | None = None) -> None:
        self.host = host
        self.port = port
        self.username = username
        self.secret = secret
        self.generated_secret = False
        self.timeout = timeout
        self.max_line = max_line
        self.max_pending = max_pending
        self.trace = trace
        self.node = node
        self.run = run
        self.dropped = 0
        # who this client is across connections: the origin of its activities (extension)
        self.client_id = client_id if client_id is not None else \
            f"{username}.{secrets.token_hex(4)}"
        self.closed = asyncio.Event()
        self.core: ActivityClientNode | None = None
        self._net: NetNode | None = None
        self._joined = asyncio.Event()
        self._settled = asyncio.Event()  # the first login succeeded, or the client gave up
        self._info = ""
        self._activities: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

    @property
    def error(self) -> str | None:
        return None if self.core is None else self.core.error

    @property
    def redirects(self) -> int:
        return 0 if self.core is None else self.core.redirects

    @property
    def joined(self) -> bool:
        return self._joined.is_set()

    @property
    def seq(self) -> int:
        return 0 if self.core is None else self.core.seq

    async def __aenter__(self) -> ActivityClient:
        await self.connect()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def _build(self, env: Env) -> ActivityClientNode:
        register = self.username != ANONYMOUS and self.secret is None
        if register:
            self.secret = secrets.token_hex(16)
            self.generated_secret = True
        script = ClientScript(servers=(f"{self.host}:{self.port}",), username=self.username,
                              secret=self.secret, register=register, reconnect=False,
                              max_redirects=MAX_REDIRECTS, client_id=self.client_id,
                              max_line=self.max_line, keep=0)
        core = ActivityClientNode(env, script)
        core.on_phase = self._phase
        core.on_reply = self._reply
        core.on_activity = self._activity
        self.core = core
        return core

    def _phase(self, phase: ClientPhase) -> None:
        if phase is ClientPhase.JOINED:
            self._joined.set()
            self._settled.set()
        else:
            self._joined.clear()
        if phase is ClientPhase.DONE:
            self._settled.set()
            self.closed.set()

    def _reply(self, msg: ActivityWire) -> None:
        if isinstance(msg, LoginSuccess):
            self._info = msg.info

    def _activity(self, activity: dict[str, Any]) -> None:
        if self._activities.qsize() >= self.max_pending:
            self.dropped += 1
            return
        self._activities.put_nowait(activity)

    async def connect(self) -> str:
        """Log in (registering first when a username comes without a secret); the
        LOGIN_SUCCESS info. Raises ``OperationError`` (definite) on refusal."""
        if self._net is not None:
            raise OperationError("connect() called twice", definite=True)
        self._net = NetNode(node_id=self.node, factory=self._build, listen=None,
                            trace=self.trace, run=self.run)
        await self._net.start()
        try:
            async with asyncio.timeout(self.timeout):
                # logged in (maybe after redirects), or given up
                while not self._joined.is_set() and not self.closed.is_set():
                    self._settled.clear()
                    await self._settled.wait()
        except TimeoutError:
            raise OperationError(f"no login at {self.host}:{self.port} within "
                                 f"{self.timeout}s", definite=False) from None
        if not self._joined.is_set():
            what = "register" if self.core is not None and self.core.register_result is False \
                else "login"
            raise OperationError(f"{what} refused: {self.error}", definite=True)
        return self._info

    async def send(self, activity: dict[str, Any]) -> None:
        """Publish ``activity``; it carries this client's id and next sequence number. While
        the client follows a redirect, this waits (up to ``timeout``) until it is back."""
        net, core = self._net, self.core
        if net is None or core is None or self.closed.is_set():
            raise OperationError("not connected", definite=True)
        try:
            async with asyncio.timeout(self.timeout):
                while True:
                    await self._joined.wait()
                    if self._publish(net, core, activity):
                        return
        except TimeoutError:
            raise OperationError(f"not connected: {self.error or 'no login'}",
                                 definite=True) from None

    @staticmethod
    def _publish(net: NetNode, core: ActivityClientNode, activity: dict[str, Any]) -> bool:
        sent: list[bool] = []
        net.call(lambda _p: sent.append(core.publish(activity)))
        return sent[0]

    async def receive(self, timeout: float | None = None) -> dict[str, Any]:
        """The next activity broadcast to this client."""
        async with asyncio.timeout(timeout):
            return await self._activities.get()

    async def close(self) -> None:
        net, core = self._net, self.core
        if net is None:
            return
        if net.state is NodeState.RUNNING and core is not None:
            with contextlib.suppress(Exception):
                net.call(lambda _p: core.stop())
        await net.close()
        self.closed.set()
