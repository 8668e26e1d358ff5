"""A fake ``Env`` for unit tests of protocol handlers: a hand-stepped clock, a seeded rng, a
crash-aware store, and a record of everything the protocol sent, wrote, closed and traced.

Drive a protocol by calling its handlers, step time with ``advance``, then assert exactly on
what crossed: ``take_sent()``, ``take_written()``, ``traced("drop")``. Nothing runs unless the
test makes it run, so a test reads as the sequence of events it checks::

    env = FakeEnv("a", seed=1)
    view = HyParView(env, contacts=["b"])
    view.start()
    assert env.take_sent() == [("b", Join())]
    env.advance(view.config.join_timeout)  # no answer: it asks again
    assert env.take_sent() == [("b", Join())]
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
import random
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import orjson

from .core.conn import CloseCode, Conn, ConnGroup, Framing
from .core.env import Env, Store, TimerHandle, TracesToSink, encode_datagram
from .core.errors import ConfigError
from .core.ids import NodeId, check_node_id
from .core.messages import Message
from .core.trace import Row, TraceRow, TraceSink
from .runtimes.sim.store import MemoryStore

__all__ = ["FakeConn", "FakeEnv", "info_of"]


@dataclasses.dataclass(frozen=True, slots=True, eq=False)
class FakeConn:
    """A connection made by ``FakeEnv.accept`` (incoming) or ``FakeEnv.connect`` (dialed).

    Hashable by identity, like a runtime's connection: two conns are never equal.
    """

    id: str
    listener: str | None  # None: this node dialed it
    remote: str


class _Timer:
    __slots__ = ("due", "fn", "order")

    def __init__(self, due: float, order: int, fn: Callable[[], None] | None) -> None:
        self.due = due
        self.order = order
        self.fn = fn  # None once cancelled or fired

    def __lt__(self, other: _Timer) -> bool:
        return (self.due, self.order) < (other.due, other.order)


def info_of(row: TraceRow) -> dict[str, Any]:
    """The ``info`` fields of a trace row as a dict (empty when it has none)."""
    if row.info is None:
        return {}
    decoded = orjson.loads(row.info)
    assert isinstance(decoded, dict), f"info is not a JSON object: {row.info!r}"
    return decoded


class _RowList(TraceSink):
    """The fake env's trace: each row as a ``TraceRow`` in a list."""

    def __init__(self, rows: list[TraceRow]) -> None:
        self.rows = rows

    def append(self, row: Row) -> None:
        self.rows.append(TraceRow(*row))

    def flush(self) -> None:
        """The rows are in the list already."""


class FakeEnv(TracesToSink):
    """An ``Env`` (``gossamer.core.env.Env``) for one node, driven by hand.

    Time starts at ``start`` and moves only by ``advance``/``run_due``; timers run then, in
    time order (ties in the order they were set). ``sent``, ``written``, ``closes``, ``dialed``
    and ``promoted`` record what the protocol did, oldest first; ``rows`` holds its trace rows
    (``TraceRow``, run ``run``). ``store`` is a crash-aware ``MemoryStore`` unless one is given:
    share it between two envs to model a restart (the newest env owns it), and ``crash()`` to
    lose what was not committed. A group commit of a ``MemoryStore``
    (``store.commit_then(fn)``) lands at the next ``run_due``/``advance``: then its writes are
    durable and its callbacks run; a ``crash()`` before loses both. ``rng`` is
    ``random.Random(seed)``. A row's ``wall`` is
    ``wall_epoch`` + its ``t``, as in the simulator.
    """

    def __init__(
        self,
        node: NodeId = "a",
        *,
        seed: int | str = 0,
        store: Store | None = None,
        start: float = 0.0,
        run: str = "fake",
        tracing: bool = True,
        incarnation: int = 1,
        wall_epoch: float = 0.0,
    ) -> None:
        self._node = check_node_id(node)
        self._now = float(start)
        self.wall_epoch = float(wall_epoch)
        self._rng = random.Random(seed)
        self._store: Store = store if store is not None else MemoryStore()
        self._tracing = tracing
        self.incarnation = incarnation
        self.run = run
        self.sent: list[tuple[NodeId, Message]] = []
        self.multicasts: list[tuple[str, Message]] = []
        self.backlogs: dict[NodeId, int] = {}  # what ``backlog(dst)`` answers
        self.rows: list[TraceRow] = []
        self._rows = _RowList(self.rows)
        self.written: list[tuple[Conn, bytes]] = []
        self.closes: list[tuple[Conn, int, str]] = []
        self.dialed: list[Conn] = []
        self.promoted: list[Conn] = []
        self._timers: list[_Timer] = []
        self._timer_order = itertools.count()
        self._conn_ids = itertools.count(1)
        self._closed: set[Conn] = set()
        if isinstance(self._store, MemoryStore):
            self._store.attach(self._next_event)

    def _next_event(self, fn: Callable[[], None]) -> None:
        self.set_timer(0.0, fn)

    # -- the Env contract ----------------------------------------------------------------

    @property
    def node(self) -> NodeId:
        return self._node

    def now(self) -> float:
        return self._now

    def trace_wall(self) -> float:
        """The ``wall`` of a row traced now: ``wall_epoch`` + ``now()``."""
        return self.wall_epoch + self._now

    def send(self, dst: NodeId, msg: Message) -> None:
        self.sent.append((dst, msg))

    def multicast(self, group: str, msg: Message) -> None:
        """Record ``(group, msg)`` in ``multicasts`` (nothing loops back: a test hands copies
        to the other members); over ``MAX_DATAGRAM`` bytes raises ``DatagramTooLarge``."""
        encode_datagram(msg)
        self.multicasts.append((group, msg))

    def backlog(self, dst: NodeId) -> int:
        """What ``backlogs`` says for ``dst`` (a test sets it to model a slow link), else 0."""
        return self.backlogs.get(dst, 0)

    def set_timer(self, delay: float, fn: Callable[[], None]) -> TimerHandle:
        if not delay >= 0:
            raise ConfigError(f"timer delay must be >= 0, got {delay}")
        timer = _Timer(self._now + delay, next(self._timer_order), fn)
        heapq.heappush(self._timers, timer)
        return timer

    def cancel(self, handle: TimerHandle) -> None:
        """Cancel a timer; cancelling one that fired or was cancelled already is harmless."""
        if not isinstance(handle, _Timer):
            raise TypeError(f"not a timer of this env: {handle!r}")
        handle.fn = None

    @property
    def rng(self) -> random.Random:
        return self._rng

    @property
    def trace_sink(self) -> TraceSink:
        return self._rows

    @property
    def run_id(self) -> str:
        return self.run

    @property
    def store(self) -> Store:
        return self._store

    @property
    def tracing(self) -> bool:
        """False when built with ``tracing=False``: rows are then discarded, not recorded."""
        return self._tracing

    # -- the connection part of the contract ---------------------------------------------

    def connect(self, address: str, *, framing: Framing = Framing.LINES,
                max_frame: int = 64 * 1024) -> Conn:
        """Dial ``address``: a new conn (listener None), recorded in ``dialed``. Nothing is
        opened: the test calls the service's ``opened`` or ``closed(conn, "refused")``."""
        conn = FakeConn(f"c{next(self._conn_ids)}", None, address)
        self.dialed.append(conn)
        return conn

    def write(self, conn: Conn, frame: bytes) -> None:
        """Record ``(conn, frame)`` in ``written``; a conn closed by ``close`` takes nothing."""
        if conn not in self._closed:
            self.written.append((conn, frame))

    def write_many(self, conns: ConnGroup | Iterable[Conn], frame: bytes, *,
                   exclude: Conn | None = None) -> None:
        """One ``write`` per member of ``conns`` but ``exclude``, in the group's order."""
        for member in list(conns):
            if member is not exclude:
                self.write(member, frame)

    def write_each(self, frames: Iterable[tuple[Conn, bytes]]) -> None:
        """One ``write`` per pair, in order (recorded in ``written``)."""
        for conn, frame in frames:
            self.write(conn, frame)

    def close(self, conn: Conn, code: int = CloseCode.NORMAL, reason: str = "") -> None:
        """Record ``(conn, code, reason)`` in ``closes`` (every call: closing twice shows);
        later writes to ``conn`` are dropped."""
        self.closes.append((conn, code, reason))
        self._closed.add(conn)

    def promote(self, conn: Conn) -> None:
        self.promoted.append(conn)

    def group(self) -> ConnGroup:
        return ConnGroup()

    # -- what a test does ----------------------------------------------------------------

    def accept(self, listener: str = "clients", remote: str = "127.0.0.1:5000") -> FakeConn:
        """A new incoming conn on ``listener``; the test hands it to the service's
        ``opened``."""
        return FakeConn(f"c{next(self._conn_ids)}", listener, remote)

    def advance(self, seconds: float) -> None:
        """Move time forward by ``seconds``, running every timer due by then in time order,
        timers set by those timers included when they fall due within the window."""
        if not seconds >= 0:
            raise ValueError(f"time only moves forward: advance({seconds})")
        end = self._now + seconds
        timers = self._timers
        while timers and timers[0].due <= end:
            timer = heapq.heappop(timers)
            fn, timer.fn = timer.fn, None
            if fn is not None:
                self._now = timer.due
                fn()
        self._now = end

    def run_due(self) -> None:
        """Run the timers due now (zero-delay timers, and those they set), without moving
        time."""
        self.advance(0.0)

    def pending_timers(self) -> list[float]:
        """When each live timer is due, soonest first."""
        return sorted(t.due for t in self._timers if t.fn is not None)

    def take_sent(self) -> list[tuple[NodeId, Message]]:
        """What was sent since the last call, oldest first; ``sent`` starts empty again."""
        sent, self.sent = self.sent, []
        return sent

    def take_multicast(self) -> list[tuple[str, Message]]:
        """What was multicast since the last call, oldest first; ``multicasts`` starts empty
        again."""
        sent, self.multicasts = self.multicasts, []
        return sent

    def take_written(self) -> list[tuple[Conn, bytes]]:
        """What was written since the last call, oldest first; ``written`` starts empty
        again."""
        written, self.written = self.written, []
        return written

    def traced(self, event: str | None = None, *, layer: str | None = None) -> list[TraceRow]:
        """The trace rows of ``event`` (None: any), of ``layer`` (None: any), oldest first."""
        return [row for row in self.rows
                if (event is None or row.event == event) and (layer is None or row.layer == layer)]

    def drop_reasons(self, layer: str | None = None) -> list[str | None]:
        """The ``reason`` of each ``drop`` row (of ``layer``), oldest first."""
        return [info_of(row).get("reason") for row in self.traced("drop", layer=layer)]

    def crash(self) -> None:
        """The node crashes: its store loses every write not committed and its timers are
        void. Build the next incarnation on this env or on ``FakeEnv(node, store=env.store)``.
        """
        if not isinstance(self._store, MemoryStore):
            raise TypeError(f"crash() needs a MemoryStore, this env has a "
                            f"{type(self._store).__name__}")
        self._store.crash()
        for timer in self._timers:
            timer.fn = None
        self._timers = []


if TYPE_CHECKING:

    def _fake_env_is_an_env(env: FakeEnv) -> Env:  # mypy holds FakeEnv to the contract
        return env
