"""``env.multicast`` on a network: UDP on an IP multicast group, each datagram authenticated.

A ``MulticastEnv`` is a ``LoopEnv`` (the loop's clock and timers, a store, a trace) whose
``multicast`` sends one UDP datagram to the group and whose ``send`` answers one member by UDP
unicast, at the address its own datagrams came from. Anyone on the segment can send to a
group, so every datagram carries an HMAC-SHA256 tag (16 bytes) under the group key; a datagram
without a good tag, malformed, or from this node itself is dropped with a traced reason. A
captured datagram sent again is dropped too (``replay``): each sender numbers its datagrams
(inside the tagged envelope) from a counter that only grows, across restarts too (it starts at
the wall clock in microseconds, or past the bound it last committed to the store, whichever
is higher: one commit per ``COUNTER_LEASE`` datagrams), and each receiver keeps, per sender,
the highest number heard and which of the ``REPLAY_WINDOW`` below it arrived (reordering within
the window is taken, anything older or heard before is not; the sliding window of IPsec's
anti-replay). At most ``MAX_SENDERS`` senders are remembered, the longest silent forgotten
first (a datagram of a forgotten sender is taken as its first).
Datagrams are bounded by ``MAX_DATAGRAM``: a bigger message is refused (``DatagramTooLarge``).
The receive socket asks for ``recv_buffer`` bytes of kernel buffer (``SO_RCVBUF``): while the
loop is busy, datagrams wait there, and what does not fit is lost (SRM repairs it, at a cost).
A ``WriteBehindStore`` is bound to the loop: its group commits' callbacks run there.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import ipaddress
import logging
import os
import random
import socket
import struct
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any

import orjson

from ...core.env import MAX_DATAGRAM, DurableSequence, Process, Store, encode_datagram
from ...core.errors import ConfigError, ProtocolError
from ...core.ids import NodeId, check_node_id
from ...core.messages import Codec, Message, layer_of
from ...core.trace import TraceSink
from .gcpolicy import tune_gc
from .loopenv import LoopEnv
from .mallocpolicy import tune_malloc
from .ratelog import RateLimitedLog
from .store import SqliteStore, WriteBehindStore

__all__ = ["COUNTER_LEASE", "DEFAULT_RECV_BUFFER", "GROUP_KEY_ENV", "MAX_SENDERS",
           "REPLAY_WINDOW", "GroupKey", "MulticastEnv", "parse_group", "resolve_group_key"]

log = logging.getLogger("gossamer.net")

GROUP_KEY_ENV = "GOSSAMER_GROUP_KEY"
_LOOPBACK_GROUP_KEY = b"gossamer: the built-in multicast group key, loopback only"
_TAG = 16
_MAGIC = b"G4"
_OVERHEAD = 512  # the envelope around a message: magic, tag, node id, group
REPLAY_WINDOW = 1024  # datagrams of one sender taken out of order
MAX_SENDERS = 4096
COUNTER_LEASE = 1_000_000  # datagram numbers per commit of the counter's bound
_COUNTER = "multicast.counter"
DEFAULT_RECV_BUFFER = 4 << 20
"""Bytes of receive buffer asked for: about 2,000 full datagrams, or a few seconds of a busy
group, waiting while the loop does something else. Linux grants at most twice
``net.core.rmem_max`` (often 208 KiB): the size granted is logged."""


class GroupKey:
    """The secret the members of one multicast group share (at least 16 bytes)."""

    __slots__ = ("builtin", "secret")

    def __init__(self, secret: bytes, *, builtin: bool = False) -> None:
        if not isinstance(secret, bytes) or len(secret) < 16:
            raise ConfigError("a group key has at least 16 bytes")
        self.secret = secret
        self.builtin = builtin

    def tag(self, body: bytes) -> bytes:
        return hmac.new(self.secret, body, hashlib.sha256).digest()[:_TAG]


def resolve_group_key(given: str | None, interface: str,
                      environ: Mapping[str, str] | None = None) -> GroupKey:
    """``given`` (``--group-key``), else ``$GOSSAMER_GROUP_KEY``, else on a loopback interface
    the built-in key, said in a log line; elsewhere a missing key is a ``ConfigError``."""
    if given is None:
        given = (os.environ if environ is None else environ).get(GROUP_KEY_ENV) or None
    if given is not None:
        return GroupKey(given.encode())
    if not ipaddress.ip_address(interface).is_loopback:
        raise ConfigError(f"multicast on {interface} needs a group key (--group-key or "
                          f"${GROUP_KEY_ENV}); only loopback has a built-in one")
    log.warning("multicast on %s uses the built-in group key (loopback only); set %s or "
             "--group-key for a key of your own", interface, GROUP_KEY_ENV)
    return GroupKey(_LOOPBACK_GROUP_KEY, builtin=True)


def parse_group(text: str) -> tuple[str, int]:
    """``239.x.y.z:port`` -> (address, port); the address must be IPv4 multicast."""
    host, sep, port_text = text.rpartition(":")
    try:
        address = ipaddress.IPv4Address(host)
        port = int(port_text)
    except ValueError:
        raise ConfigError(f"a group is IPv4-multicast-address:port, got {text!r}") from None
    if not sep or not address.is_multicast or not 0 < port < 65536:
        raise ConfigError(f"a group is IPv4-multicast-address:port, got {text!r}")
    return str(address), port


class _ReplayWindow:
    """What arrived of one sender: its highest datagram number, and a bit for each of the
    ``REPLAY_WINDOW`` numbers below it (bit 0: the highest itself)."""

    __slots__ = ("highest", "seen")

    def __init__(self, counter: int) -> None:
        self.highest = counter
        self.seen = 1

    def admit(self, counter: int) -> bool:
        """Take ``counter`` if it is new; False for one heard before or too old to tell."""
        if counter > self.highest:
            shift = counter - self.highest
            self.seen = ((self.seen << shift) | 1) & _WINDOW_MASK if shift < REPLAY_WINDOW else 1
            self.highest = counter
            return True
        back = self.highest - counter
        if back >= REPLAY_WINDOW or self.seen >> back & 1:
            return False
        self.seen |= 1 << back
        return True


_WINDOW_MASK = (1 << REPLAY_WINDOW) - 1


class _Datagrams(asyncio.DatagramProtocol):
    def __init__(self, env: MulticastEnv) -> None:
        self.env = env

    def datagram_received(self, data: bytes, addr: tuple[str | Any, int]) -> None:
        self.env._received(data, (str(addr[0]), int(addr[1])))

    def error_received(self, exc: Exception) -> None:
        self.env.trace("drop", layer="multicast", reason="socket_error", error=str(exc))


class MulticastEnv(LoopEnv):
    """An ``Env`` on the group ``group`` (address, port) through ``interface``: call ``await
    open(factory)`` to bind, build the process and start it, ``close_group()`` to stop."""

    def __init__(
        self,
        node: NodeId,
        *,
        group: tuple[str, int],
        key: GroupKey,
        codec: Codec,
        store: Store,
        interface: str = "127.0.0.1",
        ttl: int = 1,
        trace: TraceSink | None = None,
        run: str = "live",
        seed: int | str | None = None,
        incarnation: int = 1,
        on_failure: Callable[[BaseException], None] | None = None,
        recv_buffer: int = DEFAULT_RECV_BUFFER,
        drop_rate: float = 0.0,
    ) -> None:
        super().__init__(check_node_id(node), send=self._unicast, store=store, trace=trace,
                         run=run, seed=seed, on_failure=on_failure)
        if not (isinstance(drop_rate, int | float) and 0.0 <= drop_rate < 1.0):
            raise ConfigError(f"drop_rate must be in [0, 1), got {drop_rate!r}")
        # loss injected on receipt (loopback loses nothing): its own rng, so the protocol's
        # draws stay what they would be without it
        self.drop_rate = float(drop_rate)
        self._drop_rng = random.Random(f"{seed}/{node}/drop")
        if not 0 <= ttl <= 255:
            raise ConfigError(f"ttl must be in [0, 255], got {ttl}")
        if isinstance(recv_buffer, bool) or not isinstance(recv_buffer, int) or recv_buffer < 1:
            raise ConfigError(f"recv_buffer must be an int >= 1 (bytes), got {recv_buffer!r}")
        self.recv_buffer = recv_buffer
        self.recv_buffer_granted: int | None = None  # what the kernel gave, once open
        self.group_name = f"{group[0]}:{group[1]}"
        self._group = group
        self._key = key
        self._codec = codec
        self._interface = interface
        self._ttl = ttl
        self.incarnation = incarnation
        self._addresses: dict[NodeId, tuple[str, int]] = {}
        self._windows: OrderedDict[NodeId, _ReplayWindow] = OrderedDict()
        # datagrams that fail authentication, said at WARNING (a wrong group key makes a
        # member a group of one, silently otherwise), once per 5 s with a count
        self._refusals = RateLimitedLog(log)
        self._counter = DurableSequence(store, _COUNTER, lease=COUNTER_LEASE,
                                        floor=time.time_ns() // 1000)
        self._send_transport: asyncio.DatagramTransport | None = None
        self._recv_transport: asyncio.DatagramTransport | None = None
        self.process: Process | None = None

    async def open(self, factory: Callable[[MulticastEnv], Process]) -> None:
        loop = asyncio.get_running_loop()
        tune_gc()  # a server process's collector policy (gcpolicy.py), once per process
        tune_malloc()  # and its allocator's (mallocpolicy.py)
        address, port = self._group
        recv = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_UDP)
        recv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        recv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)  # several processes, one port
        self.recv_buffer_granted = _ask_recv_buffer(recv, self.recv_buffer, self.node)
        recv.bind(("", port))
        membership = struct.pack("4s4s", socket.inet_aton(address),
                                 socket.inet_aton(self._interface))
        recv.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, membership)
        send = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_UDP)
        send.bind((self._interface, 0))
        send.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF,
                        socket.inet_aton(self._interface))
        send.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_LOOP, 1)
        send.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, self._ttl)
        self._recv_transport, _ = await loop.create_datagram_endpoint(
            lambda: _Datagrams(self), sock=recv)
        self._send_transport, _ = await loop.create_datagram_endpoint(
            lambda: _Datagrams(self), sock=send)
        if isinstance(self.store, WriteBehindStore):  # its commit_then callbacks: guarded
            self.store.bind(loop, guard=self._run_committed, on_failure=self._failed)
        if isinstance(self.store, SqliteStore | WriteBehindStore) and self.tracing:
            # as ``NetNode``: the rows traced before a write reach their file before the write
            # is durable, so a kill -9 that keeps the write keeps the rows
            self.store.before_durable = self._sink.flush
        # the process's life, as ``NetNode`` traces it: a kill -9 leaves no leave, and a
        # restart's join while up makes the pipeline infer the crash in between
        self.trace("join", layer="net", transport="multicast", group=self.group_name,
                   incarnation=self.incarnation)
        self.process = factory(self)
        self.process.start()

    def _run_committed(self, fn: Callable[[], None]) -> None:
        """A ``commit_then`` callback: its writes are on disk. It runs even after
        ``close_group`` (a leave waits for the callbacks due; their sends are ignored)."""
        try:
            fn()
        except Exception as exc:
            self._failed(exc)

    def close_group(self) -> None:
        """Stop: the process's ``stop()`` (it may say goodbye), then the sockets close."""
        if self.process is not None and not self.closed:
            self.process.stop()
            self.trace("leave", layer="net")
        self.shutdown()
        for transport in (self._recv_transport, self._send_transport):
            if transport is not None:
                transport.close()

    # -- sending -------------------------------------------------------------------------

    def _frame(self, msg: Message) -> bytes:
        counter = self._counter.take()  # a restart starts above every one used
        body = orjson.dumps({"n": self.node, "g": self.group_name, "c": counter,
                             "m": self._codec.to_dict(msg)})
        return _MAGIC + self._key.tag(body) + body

    def multicast(self, group: str, msg: Message) -> None:
        encode_datagram(msg)  # the size limit, before anything leaves
        if group != self.group_name:
            raise ConfigError(f"this env is on group {self.group_name}, not {group!r}")
        if self.closed or self._send_transport is None:
            return
        frame = self._frame(msg)
        self._send_transport.sendto(frame, self._group)
        self._traced_send(msg, self.group_name, len(frame), multicast=True)

    def _unicast(self, dst: NodeId, msg: Message) -> None:
        encode_datagram(msg)
        address = self._addresses.get(dst)
        if address is None:
            self.trace("drop", layer="multicast", peer=dst, reason="no_address")
            return
        if self._send_transport is not None:
            frame = self._frame(msg)
            self._send_transport.sendto(frame, address)
            self._traced_send(msg, dst, len(frame))

    def _traced_send(self, msg: Message, peer: str, size: int, **info: Any) -> None:
        """A ``send`` row per datagram, as the simulator writes (its layer and type): what
        the pipeline counts SRM's requests and repairs from. Receipts are not traced (each
        datagram would be a row at every member)."""
        if self.tracing:
            mid, origin, key, seq = msg.trace_ids()
            self.trace("send", layer=layer_of(msg), msg=mid, origin=origin, peer=peer,
                       key=key, seq=seq, size=size, type=msg.TYPE, **info)

    # -- receiving -----------------------------------------------------------------------

    def _received(self, data: bytes, addr: tuple[str, int]) -> None:
        if self.closed or self.process is None:
            return
        try:
            src, counter, msg = self._open_frame(data)
        except ProtocolError as exc:
            self.trace("drop", layer="multicast", peer=f"{addr[0]}:{addr[1]}",
                       reason=exc.reason, error=str(exc))
            if exc.reason == "auth":
                self._refusals.warn("auth", "%s: datagrams from %s fail authentication: "
                                    "another group key (--group-key, $GOSSAMER_GROUP_KEY) "
                                    "on %s", self.node, addr[0], self.group_name)
            return
        if src == self.node:
            return  # our own datagram, looped back
        if not self._fresh(src, counter):
            self.trace("drop", layer="multicast", peer=src, reason="replay",
                       error=f"datagram {counter} of {src} heard before, or too old")
            return
        if self.drop_rate and self._drop_rng.random() < self.drop_rate:
            self.trace("drop", layer="multicast", peer=src, reason="injected")
            return
        self._addresses[src] = addr
        try:
            self.process.on_message(src, msg)  # type: ignore[attr-defined]
        except ProtocolError as exc:
            self.trace("drop", layer="multicast", peer=src, reason=exc.reason, error=str(exc))
        except Exception as exc:
            self._failed(exc)

    def _fresh(self, src: NodeId, counter: int) -> bool:
        window = self._windows.get(src)
        if window is None:
            self._windows[src] = _ReplayWindow(counter)
            while len(self._windows) > MAX_SENDERS:
                self._windows.popitem(last=False)
            return True
        self._windows.move_to_end(src)
        return window.admit(counter)

    def _open_frame(self, data: bytes) -> tuple[NodeId, int, Message]:
        if len(data) > MAX_DATAGRAM + _OVERHEAD or not data.startswith(_MAGIC):
            raise _Refused("malformed", "not a gossamer datagram or too large")
        tag, body = data[2:2 + _TAG], data[2 + _TAG:]
        if not hmac.compare_digest(tag, self._key.tag(body)):
            raise _Refused("auth", "bad tag: not from a holder of the group key")
        try:
            obj = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            raise _Refused("malformed", f"not JSON: {exc}") from exc
        if not isinstance(obj, dict) or set(obj) != {"n", "g", "c", "m"}:
            raise _Refused("malformed", "bad envelope")
        if obj["g"] != self.group_name:
            raise _Refused("other_group", f"for group {obj['g']!r}")
        if not isinstance(obj["n"], str):
            raise _Refused("malformed", "bad sender id")
        counter = obj["c"]
        if isinstance(counter, bool) or not isinstance(counter, int) or counter < 0:
            raise _Refused("malformed", "bad datagram number")
        try:
            src = check_node_id(obj["n"])
        except ConfigError as exc:
            raise _Refused("malformed", str(exc)) from exc
        return src, counter, self._codec.from_dict(obj["m"])


def _ask_recv_buffer(sock: socket.socket, wanted: int, node: str) -> int:
    """Ask for ``wanted`` bytes of receive buffer; returns (and logs) what the kernel granted
    (Linux reports twice what it keeps for data, and caps it by ``net.core.rmem_max``)."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, wanted)
    except OSError as exc:
        log.warning("%s: SO_RCVBUF %d refused (%s)", node, wanted, exc)
    granted = int(sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF))
    if granted < wanted:
        log.warning("%s: multicast receive buffer: asked %d bytes, granted %d (raise "
                    "net.core.rmem_max to get more)", node, wanted, granted)
    else:
        log.info("%s: multicast receive buffer: asked %d bytes, granted %d", node, wanted,
                 granted)
    return granted


class _Refused(ProtocolError):
    def __init__(self, reason: str, text: str) -> None:
        super().__init__(text)
        self.reason = reason
