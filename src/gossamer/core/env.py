"""The environment contract between a protocol and the runtime that drives it.

A protocol is a state machine: it never opens a socket, sleeps, reads a clock, starts a thread
or uses the global ``random``. Everything it touches comes through an ``Env``; the simulator
(``gossamer.runtimes.sim``) and the asyncio host (``gossamer.runtimes.net``) both provide one.
"""

from __future__ import annotations

import abc
import random
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import orjson

from .conn import CloseCode, Conn, ConnGroup, Framing
from .errors import ConfigError
from .ids import NodeId
from .messages import Message
from .trace import TraceSink, encode_info

__all__ = [
    "INCARNATION_SPAN",
    "MAX_DATAGRAM",
    "DatagramTooLarge",
    "DurableSequence",
    "Env",
    "MessageHandler",
    "Process",
    "ProcessFactory",
    "Store",
    "TimerHandle",
    "TracesToSink",
    "encode_datagram",
    "get_json",
    "put_json",
    "scan_with_pending",
]


TimerHandle = object
"""Opaque: what ``env.set_timer`` returns; pass it back to ``env.cancel``."""

MAX_DATAGRAM = 8 * 1024
"""The largest encoded message ``env.multicast`` carries, in bytes (one UDP datagram on any
network; IP fragments beyond one datagram are lost together, so bigger ones are refused)."""


class DatagramTooLarge(ConfigError):
    """``env.multicast`` of a message over ``MAX_DATAGRAM`` encoded bytes: refused, never sent
    in part. The caller splits its data (the atomic service refuses such a send at once)."""


def encode_datagram(msg: Message, limit: int = MAX_DATAGRAM) -> bytes:
    """``msg`` through its protocol's codec, or ``DatagramTooLarge`` when over ``limit``."""
    codec = type(msg).CODEC
    if codec is None:
        raise ConfigError(f"{type(msg).__name__} has no codec: it cannot be multicast")
    try:
        data = codec.encode(msg)
    except ConfigError as exc:  # over the codec's own frame limit: too large all the same
        raise DatagramTooLarge(f"{msg.TYPE} is over the datagram limit: {exc}") from exc
    if len(data) > limit:
        raise DatagramTooLarge(
            f"{msg.TYPE} encodes to {len(data)} bytes, over the datagram limit of {limit}")
    return data


class Store(abc.ABC):
    """Durable key/value tables.

    Reads see uncommitted writes; ``commit()`` makes them durable: when it returns they are on
    disk (an fsync, or what a power loss cannot undo), not only handed to the operating system.
    A crash or power loss loses everything not committed and nothing committed. A protocol
    commits before it sends a message that depends on the write: write, commit, then send.

    ``commit_then(fn)`` is the same promise for many writers at the price of one commit (group
    commit): the writes so far join a group with whatever else is committed meanwhile, the group
    is made durable at once, and only then does ``fn`` send the replies that depend on them.
    """

    @abc.abstractmethod
    def get(self, table: str, key: str) -> bytes | None:
        """The value, or None."""

    @abc.abstractmethod
    def put(self, table: str, key: str, value: bytes) -> None:
        """Write (not yet durable)."""

    @abc.abstractmethod
    def delete(self, table: str, key: str) -> None:
        """Remove (not yet durable); absent keys are fine."""

    @abc.abstractmethod
    def scan(self, table: str) -> Iterator[tuple[str, bytes]]:
        """All (key, value) pairs of a table, sorted by key."""

    @abc.abstractmethod
    def commit(self) -> None:
        """Make every write so far durable; returns once it is on disk."""

    def commit_then(self, fn: Callable[[], None]) -> None:
        """Commit every write so far, durably, in one group with whatever else joins it, then
        call ``fn`` (where the replies that depend on the writes are sent).

        ``fn`` runs once, only after its group is on disk, and the callbacks of a store run in
        the order they were given; a crash, a power loss or ``close()`` before the group is on
        disk loses its writes and never runs them. ``fn`` may run before this returns (this
        default: commit at once, then call) or later on the node's thread (a store that commits
        on a thread of its own, the simulator's next event): the caller must be right either
        way. A failed commit is an error the node sees, not a callback silently skipped.
        """
        self.commit()
        fn()

    def apply(self, changes: Mapping[tuple[str, str], bytes | None]) -> None:
        """Write each ``(table, key) -> value``, deleting the row where ``value`` is None (not
        yet durable). A store may do it in bulk."""
        for (table, key), value in changes.items():
            if value is None:
                self.delete(table, key)
            else:
                self.put(table, key, value)

    def close(self) -> None:  # noqa: B027 - optional hook, most stores hold nothing to release
        """Release resources; the default store has none."""


def scan_with_pending(
    rows: Iterable[tuple[str, bytes]], table: str,
    *pending: Mapping[tuple[str, str], bytes | None],
) -> Iterator[tuple[str, bytes]]:
    """``rows`` of ``table`` with writes not yet in them on top (``(table, key) -> value``,
    None: deleted; oldest first), sorted by key: ``scan`` for a store that holds writes."""
    merged = dict(rows)
    for changes in pending:
        for (tbl, key), value in changes.items():
            if tbl == table:
                if value is None:
                    merged.pop(key, None)
                else:
                    merged[key] = value
    return iter(sorted(merged.items()))


def get_json(store: Store, table: str, key: str) -> Any:
    raw = store.get(table, key)
    return None if raw is None else orjson.loads(raw)


def put_json(store: Store, table: str, key: str, value: Any) -> None:
    store.put(table, key, orjson.dumps(value))


INCARNATION_SPAN = 1 << 31  # sequence numbers one incarnation may hand out


class DurableSequence:
    """A node's sequence numbers; with a ``store`` a bound above every number handed out is
    committed before ``take`` returns one, so a node that crashes and recovers never hands the
    same one out twice.

    ``lease``: how far ahead that bound is committed, so one commit (one fsync on a network)
    serves ``lease`` numbers instead of each costing one (1: a commit per number, no gaps).
    A restart continues from the bound plus ``restart_gap``: the numbers leased and not used
    before the crash are skipped, and a peer that chases gaps (SRM) can be told so by a gap
    wider than it chases.

    A sequence that has nothing saved (a first start, or a process restarted without its data)
    starts at its ``incarnation``'s own range: ``(incarnation - 1) * INCARNATION_SPAN + 1``. So
    a message id (origin, seq) carries the incarnation that made it, and a node restarted
    without its store is never mistaken for its old self (incarnation 1: 1, 2, ...; the
    network runtime numbers incarnations by the clock when nothing is saved, see ``NetNode``).
    ``floor``: the sequence never starts below it (a clock reading, say)."""

    def __init__(self, store: Store | None, table: str, *, incarnation: int = 1,
                 lease: int = 1, restart_gap: int = 0, floor: int = 0) -> None:
        if isinstance(incarnation, bool) or not isinstance(incarnation, int) or incarnation < 1:
            raise ValueError(f"incarnation must be an int >= 1, got {incarnation!r}")
        if isinstance(lease, bool) or not isinstance(lease, int) or lease < 1:
            raise ValueError(f"lease must be an int >= 1, got {lease!r}")
        if isinstance(restart_gap, bool) or not isinstance(restart_gap, int) or restart_gap < 0:
            raise ValueError(f"restart_gap must be an int >= 0, got {restart_gap!r}")
        self._store = store
        self._table = table
        self._lease = lease
        saved = get_json(store, table, "next_seq") if store is not None else None
        self.next = max(int(saved) + restart_gap if saved is not None
                        else (incarnation - 1) * INCARNATION_SPAN + 1, floor)
        self._bound = self.next  # committed: no number at or above it was handed out

    def take(self) -> int:
        seq = self.next
        self.next = seq + 1
        if self._store is not None and self.next > self._bound:
            self._bound = seq + self._lease
            put_json(self._store, self._table, "next_seq", self._bound)
            self._store.commit()
        return seq


class TracesToSink:
    """``Env.trace`` for the runtimes: a row appended to ``trace_sink`` (tagged ``run_id``, at
    ``now()`` and ``trace_wall()``, by ``node``) while ``tracing``. An env that mixes this in
    provides those. ``trace_wall`` is the row's wall-clock time (the ``wall`` column, see
    ``gossamer.core.trace``): the runtime's, never offered to a protocol."""

    __slots__ = ()

    if TYPE_CHECKING:
        @property
        def node(self) -> NodeId: ...

        @property
        def tracing(self) -> bool: ...

        @property
        def trace_sink(self) -> TraceSink: ...

        @property
        def run_id(self) -> str: ...

        def now(self) -> float: ...

        def trace_wall(self) -> float: ...

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
            self.trace_sink.append((self.run_id, self.now(), self.node, layer, event, msg,
                                    origin, peer, key, seq, size, encode_info(info),
                                    self.trace_wall()))


@runtime_checkable
class Env(Protocol):
    """What a runtime gives a protocol. See ARCHITECTURE.md, "One rule above all"."""

    @property
    def node(self) -> NodeId: ...

    def now(self) -> float: ...

    def send(self, dst: NodeId, msg: Message) -> None: ...

    def backlog(self, dst: NodeId) -> int:
        """Messages sent to ``dst`` that the runtime still holds: queued while its link
        connects, or written and not yet taken by the transport (0 where the runtime keeps no
        queue, as in the simulator). A protocol that must not outrun a link (a publisher's
        credits) waits while it is high."""

    def set_timer(self, delay: float, fn: Callable[[], None]) -> TimerHandle: ...

    def cancel(self, handle: TimerHandle) -> None: ...

    def multicast(self, group: str, msg: Message) -> None:
        """Datagram multicast (seed 004): one unreliable send of ``msg`` to every other member
        of ``group`` that is up (never back to the sender); each copy may be lost, delayed or
        duplicated on its own. Members receive it through ``on_message(src, msg)``, as with
        ``send``. Which nodes belong to a group is the runtime's setting (the simulator's
        ``Simulation.add_multicast_group``, the network's ``MulticastEnv`` bound to an IP
        group), not the protocol's. A message encoding to more than ``MAX_DATAGRAM`` bytes
        raises ``DatagramTooLarge`` and nothing is sent; a runtime without multicast raises
        ``StateError``."""

    @property
    def rng(self) -> random.Random: ...

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
    ) -> None: ...

    @property
    def store(self) -> Store: ...

    @property
    def tracing(self) -> bool:
        """False while trace rows are discarded: a hot path may skip building them."""

    @property
    def incarnation(self) -> int:
        """This run of the node, >= 1: new at every start of its process, the same again only
        when restored from its data (see ``DurableSequence``)."""

    # -- connections (``gossamer.core.conn``): for services that talk over connections --------

    def connect(self, address: str, *, framing: Framing = Framing.LINES,
                max_frame: int = 64 * 1024) -> Conn:
        """Dial ``address`` (``host:port``, or ``ws://host:port/path``); ``opened`` follows
        once connected, or ``closed(conn, "refused")``. The connection counts as a peer."""

    def write(self, conn: Conn, frame: bytes) -> None:
        """Queue one frame (unframed bytes) on ``conn``, after everything written before; a
        connection that is not open takes nothing. A full queue closes the connection
        (``slow_consumer``)."""

    def write_many(self, conns: ConnGroup | Iterable[Conn], frame: bytes, *,
                   exclude: Conn | None = None) -> None:
        """``write(conn, frame)`` to every connection of ``conns`` but ``exclude``: the frame
        is framed once; to a ``ConnGroup`` (``group()``) it costs O(1) per call."""

    def write_each(self, frames: Iterable[tuple[Conn, bytes]]) -> None:
        """``write(conn, frame)`` for each pair, in order, each handed to its connection now
        rather than at the end of the step: for a fan-out of frames that differ per
        connection, one each (a round's syncs), which gains nothing from waiting to be
        joined with later writes. ``frames`` is read one pair at a time, each written before
        the next is asked for (a generator that builds them spreads the building over the
        writes, and the first leave before the last are built), and to its end within the
        call."""

    def close(self, conn: Conn, code: int = CloseCode.NORMAL, reason: str = "") -> None:
        """Close ``conn`` after what was written to it; ``closed(conn, "closed")`` follows."""

    def promote(self, conn: Conn) -> None:
        """``conn`` is a server peer: it may use the listener's slots kept for peers."""

    def group(self) -> ConnGroup:
        """A new, empty group of connections for ``write_many``."""


class Process(Protocol):
    """A protocol instance as a runtime sees it: started once, then fed what arrives.

    Datagram-style protocols define ``on_message(src, msg)`` (what ``env.send`` delivers, see
    ``MessageHandler``); services over connections define ``opened``, ``received`` and
    ``closed`` (``gossamer.core.conn.ConnectionHandler``). A process may also define
    ``on_unreachable(node)``: both runtimes call it, once per outage, when a message could not
    be delivered because ``node`` is down or its link failed (a refused or reset connection),
    so membership can repair at once (see ``GossipBroadcast``).
    """

    def start(self) -> None: ...

    def stop(self) -> None: ...


@runtime_checkable
class MessageHandler(Protocol):
    """A process fed by ``env.send``: the runtime calls ``on_message`` for each message."""

    def on_message(self, src: NodeId, msg: Message) -> None: ...


ProcessFactory = Callable[[Env], Process]
"""Builds a node's process on its env; called again with a fresh env after a crash-recover."""
