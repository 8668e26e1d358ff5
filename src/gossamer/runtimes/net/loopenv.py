"""An ``Env`` on an asyncio loop for a process whose messages go through a caller's channel.

``NetNode`` owns its sockets; a process embedded in something else (the hub's snapshot keeper
inside the WebSocket server, the Python replica client behind its own WebSocket) gets this: the
loop's clock and timers, a seeded rng, a store, a trace sink, and ``send`` handed to a callback.
A protocol bug raised in a timer is recorded and reported to ``on_failure``, never swallowed.
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
import time
from collections.abc import Callable, Iterable
from typing import Any

from ...core.conn import CloseCode, Conn, ConnGroup, Framing
from ...core.env import Store, TimerHandle
from ...core.errors import ConfigError, StateError
from ...core.ids import NodeId, check_node_id
from ...core.messages import Message
from ...core.trace import NullSink, TraceSink, encode_info

__all__ = ["LoopEnv"]

log = logging.getLogger("gossamer.net")

SendFn = Callable[[NodeId, Message], None]


class _LoopTimer:
    __slots__ = ("env", "fn", "handle")

    def __init__(self, env: LoopEnv, fn: Callable[[], None]) -> None:
        self.env = env
        self.fn = fn
        self.handle: asyncio.TimerHandle | None = None

    def fire(self) -> None:
        self.env._timers.discard(self)
        if self.env.closed:
            return
        try:
            self.fn()
        except Exception as exc:
            self.env._failed(exc)

    def cancel(self) -> None:
        self.env._timers.discard(self)
        if self.handle is not None:
            self.handle.cancel()


class LoopEnv:
    """``Env`` for node ``node`` on ``loop`` (see ``gossamer.core.env.Env``)."""

    def __init__(
        self,
        node: NodeId,
        *,
        send: SendFn,
        store: Store,
        loop: asyncio.AbstractEventLoop | None = None,
        trace: TraceSink | None = None,
        run: str = "live",
        seed: int | str | None = None,
        on_failure: Callable[[BaseException], None] | None = None,
    ) -> None:
        self._node = check_node_id(node)
        self._send = send
        self._store = store
        self._loop = loop if loop is not None else asyncio.get_running_loop()
        self._epoch = time.monotonic()
        self._sink = trace if trace is not None else NullSink()
        self.tracing = self._sink.enabled  # a sink keeps rows or not for its whole life
        self._run = run
        self._rng = random.Random(f"{seed}/{node}") if seed is not None else random.Random()
        self._on_failure = on_failure
        self._timers: set[_LoopTimer] = set()
        self.closed = False
        self.failure: BaseException | None = None

    @property
    def node(self) -> NodeId:
        return self._node

    def now(self) -> float:
        return time.monotonic() - self._epoch  # not loop.time: see NetEnv.now

    def send(self, dst: NodeId, msg: Message) -> None:
        if not self.closed:
            self._send(dst, msg)

    def multicast(self, group: str, msg: Message) -> None:
        raise StateError("a LoopEnv has no multicast: run the process on a MulticastEnv")

    def backlog(self, dst: NodeId) -> int:
        return 0  # ``send`` hands each message on at once: this env holds none

    def set_timer(self, delay: float, fn: Callable[[], None]) -> TimerHandle:
        if not (isinstance(delay, int | float) and math.isfinite(delay) and delay >= 0):
            raise ConfigError(f"timer delay must be a finite number >= 0, got {delay!r}")
        timer = _LoopTimer(self, fn)
        if not self.closed:
            timer.handle = self._loop.call_later(delay, timer.fire)
            self._timers.add(timer)
        return timer

    def cancel(self, handle: TimerHandle) -> None:
        if not isinstance(handle, _LoopTimer):
            raise ConfigError(f"not a timer handle of this runtime: {handle!r}")
        handle.cancel()

    @property
    def rng(self) -> random.Random:
        return self._rng

    def trace(
        self,
        event: str,
        *,
        layer: str,
        msg: str | None = None,
        origin: str | None = None,
        peer: str | None = None,
        key: str | None = None,
        seq: int | None = None,
        size: int | None = None,
        **info: Any,
    ) -> None:
        if self.tracing:
            self._sink.append((self._run, self.now(), self._node, layer, event, msg, origin,
                               peer, key, seq, size, encode_info(info), time.time()))

    @property
    def store(self) -> Store:
        return self._store

    # connections: a LoopEnv has none (its process talks through its owner's channel)

    def connect(self, address: str, *, framing: Framing = Framing.LINES,
                max_frame: int = 64 * 1024) -> Conn:
        raise StateError("a LoopEnv has no connections: run the process on a NetNode")

    def write(self, conn: Conn, frame: bytes) -> None:
        raise StateError("a LoopEnv has no connections: run the process on a NetNode")

    def write_many(self, conns: ConnGroup | Iterable[Conn], frame: bytes, *,
                   exclude: Conn | None = None) -> None:
        raise StateError("a LoopEnv has no connections: run the process on a NetNode")

    def write_each(self, frames: Iterable[tuple[Conn, bytes]]) -> None:
        raise StateError("a LoopEnv has no connections: run the process on a NetNode")

    def close(self, conn: Conn, code: int = CloseCode.NORMAL, reason: str = "") -> None:
        raise StateError("a LoopEnv has no connections: run the process on a NetNode")

    def promote(self, conn: Conn) -> None:
        raise StateError("a LoopEnv has no connections: run the process on a NetNode")

    def group(self) -> ConnGroup:
        return ConnGroup()


    def shutdown(self) -> None:
        """Cancel every timer; sends and new timers are ignored from now on."""
        self.closed = True
        for timer in list(self._timers):
            timer.cancel()

    def _failed(self, exc: BaseException) -> None:
        log.error("%s: a timer raised %r", self._node, exc, exc_info=exc)
        if self.failure is None:
            self.failure = exc
        if self._on_failure is not None:
            self._on_failure(exc)
