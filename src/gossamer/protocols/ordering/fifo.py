"""Reliable FIFO broadcast: every live member delivers every origin's messages once, in order.

Per-origin sequence numbers, duplicate discard, a bounded holdback queue for early messages,
NACKs for gaps (delayed to let reordered messages land, retried with backoff), retransmission
from a bounded durable send log, and STATUS announcements (repeated to each peer until it ACKs
them) so that a lost *last* message is noticed, with no traffic once everyone is caught up.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from typing import Any

import orjson

from ...core.env import Env, TimerHandle, get_json, put_json
from ...core.errors import ConfigError, InvalidMessage
from ...core.ids import NodeId
from ...core.jsonvalue import json_copy
from ...core.messages import Codec, Message, TraceIds, message

__all__ = [
    "FifoAck",
    "FifoBroadcast",
    "FifoConfig",
    "FifoData",
    "FifoGone",
    "FifoNack",
    "FifoStatus",
    "FifoSync",
]

LAYER = "fifo"
_STATE, _DELIVERED, _LOG = "fifo", "fifo.delivered", "fifo.log"


def _check_seq(name: str, value: int) -> None:
    if value < 1:
        raise ValueError(f"{name} must be >= 1, got {value}")


CODEC = Codec()
"""The codec of the fifo messages (``Codec.union`` joins it with a node's other layers)."""


@message("fifo.data", codec=CODEC)
class FifoData(Message):
    origin: str
    seq: int
    body: Any
    retransmit: bool = False

    def __post_init__(self) -> None:
        _check_seq("seq", self.seq)

    def trace_ids(self) -> TraceIds:
        return (f"{self.origin}:{self.seq}", self.origin, None, self.seq)


@message("fifo.nack", codec=CODEC)
class FifoNack(Message):
    """Please resend your messages ``start..end`` (inclusive)."""

    start: int
    end: int

    def __post_init__(self) -> None:
        _check_seq("start", self.start)
        if self.end < self.start:
            raise ValueError(f"end {self.end} < start {self.start}")


@message("fifo.gone", codec=CODEC)
class FifoGone(Message):
    """Messages before ``first_kept`` have left my send log; skip them."""

    first_kept: int

    def __post_init__(self) -> None:
        _check_seq("first_kept", self.first_kept)


@message("fifo.status", codec=CODEC)
class FifoStatus(Message):
    """My highest sequence number so far (0: none)."""

    high: int

    def __post_init__(self) -> None:
        if self.high < 0:
            raise ValueError(f"high must be >= 0, got {self.high}")


@message("fifo.ack", codec=CODEC)
class FifoAck(Message):
    """Answer to a STATUS: I have delivered your messages up to ``upto``."""

    upto: int

    def __post_init__(self) -> None:
        if self.upto < 0:
            raise ValueError(f"upto must be >= 0, got {self.upto}")


@message("fifo.sync", codec=CODEC)
class FifoSync(Message):
    """I (re)started: tell me your STATUS so I can ask for what I missed."""


@dataclasses.dataclass(frozen=True, slots=True)
class FifoConfig:
    nack_delay: float = 0.05  # wait this long for reordered messages before NACKing a gap
    nack_retry: float = 0.2  # first retry interval while a gap persists; doubles
    nack_retry_cap: float = 2.0
    status_interval: float = 0.1  # first STATUS after a broadcast; then doubling
    status_retry_cap: float = 2.0  # STATUS repeats to un-ACKed peers at most this far apart
    holdback_limit: int = 1024  # early messages kept per origin
    send_log_limit: int = 4096  # own messages kept for retransmission
    max_nack_range: int = 256  # most messages one NACK asks for
    durable: bool = True  # keep seq, delivered watermarks and send log in env.store
    retransmit: bool = True  # answer NACKs (off only to show the checks catch the loss)

    def __post_init__(self) -> None:
        for name in ("nack_delay", "nack_retry", "status_interval"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be > 0")
        if self.nack_retry_cap < self.nack_retry:
            raise ConfigError("nack_retry_cap must be >= nack_retry")
        if self.status_retry_cap < self.status_interval:
            raise ConfigError("status_retry_cap must be >= status_interval")
        for name in ("holdback_limit", "send_log_limit", "max_nack_range"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1")


class _OriginState:
    """What a receiver knows about one origin's stream."""

    __slots__ = ("high", "holdback", "nack_interval", "nack_timer", "next_expected")

    def __init__(self, next_expected: int) -> None:
        self.next_expected = next_expected
        self.high = next_expected - 1  # highest seq known to exist
        self.holdback: dict[int, Any] = {}
        self.nack_timer: TimerHandle | None = None
        self.nack_interval = 0.0


DeliverFn = Callable[[NodeId, int, Any], None]


class FifoBroadcast:
    """One member of a static group. ``broadcast(body)``; deliveries go to ``on_deliver``."""

    def __init__(
        self,
        env: Env,
        peers: Iterable[NodeId],
        *,
        config: FifoConfig | None = None,
        on_deliver: DeliverFn | None = None,
    ) -> None:
        self.env = env
        self.config = config if config is not None else FifoConfig()
        self.peers = sorted(set(peers) - {env.node})
        self.on_deliver = on_deliver
        self.delivered_count = 0
        self.duplicates = 0
        self._origins: dict[NodeId, _OriginState] = {}
        self._send_log: dict[int, Any] = {}
        self._status_timer: TimerHandle | None = None
        self._status_delay = 0.0
        self._acked: dict[NodeId, int] = {}  # peer -> highest own seq it has confirmed
        store = env.store if self.config.durable else None
        self._store = store
        self._next_seq = 1
        self._recovered = False
        if store is not None:
            saved = get_json(store, _STATE, "next_seq")
            if saved is not None:
                self._next_seq = int(saved)
                self._recovered = True
            for origin, raw in store.scan(_DELIVERED):
                self._origins[origin] = _OriginState(int(raw) + 1)
            # any durable state means we ran before: ask peers what we missed while away
            self._recovered = self._recovered or bool(self._origins)
            for key, raw in store.scan(_LOG):
                self._send_log[int(key)] = orjson.loads(raw)

    # -- Process ---------------------------------------------------------------------------

    def start(self) -> None:
        if self._recovered:
            # tell peers what we sent before the crash, and learn what we missed meanwhile
            self._arm_status()
            self._send_all(FifoSync())

    def stop(self) -> None:
        if self._store is not None:
            self._store.commit()

    def on_message(self, src: NodeId, msg: Message) -> None:
        if isinstance(msg, FifoData):
            if msg.origin != src and not msg.retransmit:
                raise InvalidMessage(f"data of origin {msg.origin} sent by {src}")
            self._on_data(msg)
        elif isinstance(msg, FifoStatus):
            self._learn_high(src, msg.high)
            self.env.send(src, FifoAck(upto=self.delivered_upto(src)))
        elif isinstance(msg, FifoAck):
            if msg.upto > self._acked.get(src, 0):
                self._acked[src] = msg.upto
        elif isinstance(msg, FifoNack):
            self._on_nack(src, msg)
        elif isinstance(msg, FifoGone):
            self._on_gone(src, msg)
        elif isinstance(msg, FifoSync):
            self.env.send(src, FifoStatus(high=self._next_seq - 1))
        else:
            raise InvalidMessage(f"fifo layer got {msg.TYPE}")

    # -- sending ---------------------------------------------------------------------------

    @property
    def last_seq(self) -> int:
        return self._next_seq - 1

    def broadcast(self, body: Any) -> int:
        """Send ``body`` to the group; it is delivered here at once (as every member will
        hold it: ``json_copy``). Returns its seq."""
        body = json_copy(body, "a body")
        env = self.env
        seq = self._next_seq
        self._next_seq = seq + 1
        self._send_log[seq] = body
        if len(self._send_log) > self.config.send_log_limit:
            evicted = min(self._send_log)
            del self._send_log[evicted]
            if self._store is not None:
                self._store.delete(_LOG, f"{evicted:012d}")
        if self._store is not None:
            # the seq must be durable before anyone can see it, or a recovered node reuses it
            put_json(self._store, _STATE, "next_seq", self._next_seq)
            put_json(self._store, _LOG, f"{seq:012d}", body)
            self._store.commit()
        msg = FifoData(origin=env.node, seq=seq, body=body)
        env.trace("publish", layer=LAYER, msg=f"{env.node}:{seq}", origin=env.node, seq=seq)
        self._deliver(env.node, seq, body)
        self._send_all(msg)
        self._arm_status()
        return seq

    def _send_all(self, msg: Message) -> None:
        send = self.env.send
        for peer in self.peers:
            send(peer, msg)

    def _arm_status(self) -> None:
        self._status_delay = self.config.status_interval
        if self._status_timer is not None:
            self.env.cancel(self._status_timer)
        self._status_timer = self.env.set_timer(self._status_delay, self._announce_status)

    def _announce_status(self) -> None:
        self._status_timer = None
        high = self._next_seq - 1
        behind = [peer for peer in self.peers if self._acked.get(peer, 0) < high]
        if not behind:
            return
        status = FifoStatus(high=high)
        for peer in behind:
            self.env.send(peer, status)
        self._status_delay = min(self._status_delay * 2, self.config.status_retry_cap)
        self._status_timer = self.env.set_timer(self._status_delay, self._announce_status)

    def _on_nack(self, src: NodeId, nack: FifoNack) -> None:
        if not self.config.retransmit:
            self.env.trace("drop", layer=LAYER, peer=src, reason="retransmit_disabled")
            return
        end = min(nack.end, self._next_seq - 1, nack.start + self.config.max_nack_range - 1)
        if self._send_log:
            first_kept = min(self._send_log)
            if nack.start < first_kept:
                self.env.send(src, FifoGone(first_kept=first_kept))
        me = self.env.node
        for seq in range(nack.start, end + 1):
            if seq in self._send_log:
                self.env.send(
                    src, FifoData(origin=me, seq=seq, body=self._send_log[seq], retransmit=True)
                )

    # -- receiving -------------------------------------------------------------------------

    def _state(self, origin: NodeId) -> _OriginState:
        state = self._origins.get(origin)
        if state is None:
            state = self._origins[origin] = _OriginState(1)
        return state

    def _on_data(self, msg: FifoData) -> None:
        origin, seq = msg.origin, msg.seq
        if origin == self.env.node:
            return
        state = self._state(origin)
        if seq < state.next_expected or seq in state.holdback:
            self.duplicates += 1
            return
        if seq > state.high:
            state.high = seq
        if seq == state.next_expected:
            self._deliver(origin, seq, msg.body)
            state.next_expected = seq + 1
            self._drain(origin, state)
        elif seq - state.next_expected >= self.config.holdback_limit:
            # too far ahead: dropping is safe, the gap logic will ask again later
            self.env.trace("drop", layer=LAYER, msg=f"{origin}:{seq}", origin=origin, seq=seq,
                           reason="holdback_full")
        else:
            state.holdback[seq] = msg.body
        self._after_receive(origin, state)

    def _drain(self, origin: NodeId, state: _OriginState) -> None:
        holdback = state.holdback
        while state.next_expected in holdback:
            seq = state.next_expected
            self._deliver(origin, seq, holdback.pop(seq))
            state.next_expected = seq + 1

    def _learn_high(self, origin: NodeId, high: int) -> None:
        if origin == self.env.node:
            return
        state = self._state(origin)
        if high > state.high:
            state.high = high
        self._after_receive(origin, state)

    def _on_gone(self, origin: NodeId, gone: FifoGone) -> None:
        state = self._state(origin)
        if gone.first_kept <= state.next_expected:
            return
        self.env.trace("drop", layer=LAYER, origin=origin, seq=state.next_expected,
                       reason="evicted", first_kept=gone.first_kept)
        state.next_expected = gone.first_kept
        for seq in [s for s in state.holdback if s < gone.first_kept]:
            del state.holdback[seq]
        if state.high < gone.first_kept - 1:
            state.high = gone.first_kept - 1
        self._persist_watermark(origin, state)
        self._drain(origin, state)
        self._after_receive(origin, state)

    def _after_receive(self, origin: NodeId, state: _OriginState) -> None:
        gap = state.high >= state.next_expected
        if gap and state.nack_timer is None:
            state.nack_interval = self.config.nack_retry
            state.nack_timer = self.env.set_timer(
                self.config.nack_delay, lambda: self._nack_due(origin)
            )
        elif not gap and state.nack_timer is not None:
            self.env.cancel(state.nack_timer)
            state.nack_timer = None

    def _nack_due(self, origin: NodeId) -> None:
        state = self._origins[origin]
        state.nack_timer = None
        if state.high < state.next_expected:
            return
        start = state.next_expected
        end = min(state.high, start + self.config.max_nack_range - 1)
        self.env.send(origin, FifoNack(start=start, end=end))
        self.env.trace("nack", layer=LAYER, peer=origin, origin=origin, seq=start, end=end)
        state.nack_timer = self.env.set_timer(state.nack_interval, lambda: self._nack_due(origin))
        state.nack_interval = min(state.nack_interval * 2, self.config.nack_retry_cap)

    def _deliver(self, origin: NodeId, seq: int, body: Any) -> None:
        self.delivered_count += 1
        self.env.trace("deliver", layer=LAYER, msg=f"{origin}:{seq}", origin=origin, seq=seq)
        if origin != self.env.node and self._store is not None:
            # commit per delivery: a recovered node must not deliver the same message twice
            self._store.put(_DELIVERED, origin, str(seq).encode())
            self._store.commit()
        if self.on_deliver is not None:
            self.on_deliver(origin, seq, body)

    def _persist_watermark(self, origin: NodeId, state: _OriginState) -> None:
        if self._store is not None:
            self._store.put(_DELIVERED, origin, str(state.next_expected - 1).encode())
            self._store.commit()

    # -- inspection --------------------------------------------------------------------------

    def delivered_upto(self, origin: NodeId) -> int:
        """Highest seq of ``origin`` delivered here (own messages: all sent)."""
        if origin == self.env.node:
            return self._next_seq - 1
        state = self._origins.get(origin)
        return 0 if state is None else state.next_expected - 1

    def holdback_size(self) -> int:
        return sum(len(s.holdback) for s in self._origins.values())
