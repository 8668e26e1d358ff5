"""``AtomicGroup``: atomic multicast for an asyncio program, on a real IP multicast group.

    group = AtomicGroup("239.1.2.3:5000", data_dir="node-a")
    await group.join()
    result = await group.send({"text": "hi"})     # Sent(mid, committed=True/False)
    async for message in group:                   # Delivered(mid, origin, body, position)
        print(message.body)                       # handled once the next one is asked for
    await group.leave()

``data_dir`` keeps the member's name, pending messages, outcomes, delivery marks and inbox in
sqlite (fsync'd), so a member killed and restarted with the same directory delivers what it
voted YES for; without it the member is in memory only. The store commits in groups (a
``WriteBehindStore``: one fsync for every write made meanwhile, on a thread of its own), and
what depends on a write (a YES, a CONFIRM or ABORT, a delivery) waits for its group.

Every delivery carries its ``position`` in the member's durable inbox (from 1, in delivery
order, never reused) and stays there until acknowledged: ``async for`` acknowledges a message
when the next one is asked for, ``on_delivered`` when the callback returns, and
``acknowledge(position)`` does it by hand. An acknowledgement covers every position up to
it, so read the deliveries with one ``async for`` at a time (two loops side by side would
acknowledge each other's). After a kill -9 the restarted member hands over
again, first and in order, every delivery not acknowledged, with its position. So an
application that records the position it handled with its own effects, in one transaction,
and skips positions up to it, handles every delivered message exactly once; one that does not
may see the last few twice after a crash, never none (``gossamer atomic node`` does the first
with its journal). A member whose application falls ``max_inbox`` deliveries behind votes NO
on new messages (they abort) until it catches up: nothing is dropped.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import itertools
import logging
import os
import sqlite3
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from ...core.env import Store
from ...core.errors import ConfigError, OperationError, StateError
from ...core.filelock import try_lock
from ...core.jsonvalue import json_copy
from ...core.trace import TraceSink
from ...protocols.ordering.atomic import (
    CODEC,
    AtomicConfig,
    AtomicProcess,
    AtomicProcessConfig,
)
from ...runtimes.net import (
    DEFAULT_RECV_BUFFER,
    MulticastEnv,
    StoreOpenError,
    WriteBehindStore,
    parse_group,
    resolve_group_key,
)
from ...runtimes.sim import MemoryStore

__all__ = ["AtomicGroup", "Delivered", "Sent"]

log = logging.getLogger("gossamer.atomic")
_names = itertools.count(1)
LEAVE_FLUSH = 10.0  # seconds a leave waits for the group commits on their way


@dataclasses.dataclass(frozen=True, slots=True)
class Sent:
    """What became of a ``send``: committed (every snapshot member will deliver it) or
    aborted (no member delivers it)."""

    mid: str
    committed: bool


@dataclasses.dataclass(frozen=True, slots=True)
class Delivered:
    """A confirmed message and its ``position`` in the member's inbox."""

    mid: str
    origin: str
    body: Any
    position: int


def _lock(data_dir: Path) -> int:
    """A descriptor holding the exclusive lock on ``data_dir`` for this process's life (or
    until closed), the holder's pid written in it: two members on one data dir would share
    one name, one store and one journal."""
    path = data_dir / "lock"
    fd = try_lock(path)
    if fd is None:
        holder = path.read_text(errors="replace").strip() or "?"
        raise StateError(f"{data_dir} is in use by another member (pid {holder})")
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def _name_and_incarnation(data_dir: Path | None) -> tuple[str, int, int | None]:
    """A member's stable name, a new incarnation and the data dir's lock, kept in
    ``data_dir``; ``ConfigError`` for a data dir that is not one, ``StateError`` for one in
    use."""
    if data_dir is None:
        return f"m{os.getpid()}-{next(_names)}", 1, None
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise ConfigError(f"data dir {data_dir}: not a directory") from None
    lock = _lock(data_dir)
    try:
        name_file, inc_file = data_dir / "node_id", data_dir / "incarnation"
        if not name_file.exists():
            name_file.write_text(f"m{os.urandom(4).hex()}\n")
        name = name_file.read_text().strip()
        if not name:
            raise ConfigError(f"{name_file} is empty")
        try:
            incarnation = int(inc_file.read_text()) + 1 if inc_file.exists() else 1
        except ValueError:
            raise ConfigError(f"{inc_file} does not hold an incarnation number") from None
        tmp = inc_file.with_suffix(".tmp")
        tmp.write_text(f"{incarnation}\n")
        os.replace(tmp, inc_file)
    except BaseException:
        os.close(lock)
        raise
    return name, incarnation, lock


class AtomicGroup:
    """One member of the atomic multicast group ``group`` (``239.x.y.z:port``)."""

    def __init__(self, group: str, *, data_dir: str | Path | None = None,
                 name: str | None = None, group_key: str | None = None,
                 interface: str = "127.0.0.1", ttl: int = 1, session_period: float = 1.0,
                 trace: TraceSink | None = None, run: str = "live",
                 max_inbox: int = 10_000, recv_buffer: int = DEFAULT_RECV_BUFFER,
                 drop_rate: float = 0.0) -> None:
        """``drop_rate``: drop that fraction of the datagrams received (traced ``drop``,
        reason ``injected``), to try the group under loss where the network loses none."""
        self._address = parse_group(group)
        self._data_dir = None if data_dir is None else Path(data_dir)
        stored_name, self._incarnation, self._lock = _name_and_incarnation(self._data_dir)
        self.name = name if name is not None else stored_name
        self._key = resolve_group_key(group_key, interface)
        self._interface = interface
        self._ttl = ttl
        self._recv_buffer = recv_buffer
        self._drop_rate = drop_rate
        self._config = AtomicProcessConfig(
            group=f"{self._address[0]}:{self._address[1]}", session_period=session_period,
            atomic=AtomicConfig(inbox=True, max_inbox=max_inbox))
        self._trace = trace
        self._run = run
        # handed over, not yet read by ``async for``: at most ``max_inbox`` (and the messages
        # pending), since a member that many behind votes NO
        self._ready: collections.deque[Delivered] = collections.deque()
        self._arrived = asyncio.Event()
        self._left = False  # ``leave()`` ends ``async for`` once what was delivered is read
        self._waiting: dict[str, asyncio.Future[Sent]] = {}
        self._early: dict[str, bool] | None = None  # outcomes decided during a send call
        self._env: MulticastEnv | None = None
        self._process: AtomicProcess | None = None
        self._store: Store | None = None
        #: hears ``(member, joined)`` for each change of the group as this member sees it
        self.on_member: Callable[[str, bool], None] = lambda member, joined: None
        #: when set, hears each delivery at once, right after the commit that marked it
        #: delivered (and, after a restart, each one not acknowledged), instead of through
        #: ``async for``; the delivery counts as handled (acknowledged) once it returns
        self.on_delivered: Callable[[Delivered], None] | None = None
        #: hears ``(mid, yes)`` for each vote this member cast, once it has left
        self.on_vote: Callable[[str, bool], None] = lambda mid, yes: None

    async def join(self) -> None:
        if self._left:
            raise StateError("this member left: an AtomicGroup joins once; build a new one "
                             "(on the same data_dir to resume)")
        if self._env is not None:
            raise StateError("this member has joined already")
        if self._data_dir is None:
            self._store = MemoryStore()
        else:
            path = self._data_dir / "atomic.sqlite"
            try:
                self._store = WriteBehindStore(path)
            except (sqlite3.DatabaseError, StoreOpenError) as exc:
                self._release()  # this member cannot start: the data dir is free again
                raise ConfigError(f"{path}: not a member's store ({exc})") from None
        env = MulticastEnv(self.name, group=self._address, key=self._key, codec=CODEC,
                           store=self._store, interface=self._interface, ttl=self._ttl,
                           trace=self._trace, run=self._run, incarnation=self._incarnation,
                           recv_buffer=self._recv_buffer, drop_rate=self._drop_rate)
        self._env = env

        def build(env: MulticastEnv) -> AtomicProcess:
            process = AtomicProcess(env, self._config)
            process.atomic.on_deliver = self._on_deliver
            process.atomic.on_outcome = self._on_outcome
            process.atomic.on_vote = lambda mid, yes: self.on_vote(mid, yes)
            inner = process.group.on_change

            def changed(member: str, joined: bool, reason: str) -> None:
                inner(member, joined, reason)
                self.on_member(member, joined)

            process.group.on_change = changed
            self._process = process
            return process

        await env.open(build)

    def _on_deliver(self, mid: str, origin: str, body: Any, position: int | None) -> None:
        # the delivery mark is on disk: the trace's deliver row reaches the file (the OS)
        # before the application hears of it
        if self._trace is not None:
            self._trace.flush()
        if position is None:
            raise StateError("the atomic layer of an AtomicGroup keeps an inbox")
        message = Delivered(mid, origin, body, position)
        if self.on_delivered is not None:
            self.on_delivered(message)
            self.acknowledge(position)
            return
        self._ready.append(message)
        self._arrived.set()

    def acknowledge(self, message: Delivered | int) -> None:
        """Every delivery up to ``message`` (or that position) is handled: it leaves the inbox
        and is not handed over again after a restart."""
        position = message.position if isinstance(message, Delivered) else message
        if not isinstance(position, int) or isinstance(position, bool) or position < 1:
            raise ConfigError(f"acknowledge a Delivered or its position (an int >= 1), got "
                              f"{message!r}")
        self._member().atomic.acknowledge(position)

    def _on_outcome(self, mid: str, committed: bool) -> None:
        if self._early is not None:
            self._early[mid] = committed
            return
        future = self._waiting.pop(mid, None)
        if future is not None and not future.done():
            future.set_result(Sent(mid, committed))

    def _member(self) -> AtomicProcess:
        if self._process is None or self._env is None or self._env.closed:
            raise StateError("not a member: join() first")
        return self._process

    async def send(self, body: Any, *, timeout: float | None = None) -> Sent:
        """Multicast ``body`` to the group as it is now and wait for the decision. Raises
        ``DatagramTooLarge`` (nothing sent) for a body over one datagram, ``StateError``
        (nothing sent) while ``max_inbox`` deliveries wait for this member's acknowledgement
        (its own message would be one more); a ``timeout`` raises ``OperationError`` (not
        definite: it may still commit)."""
        process = self._member()
        body = json_copy(body, "a body")  # what every member will deliver
        self._early = {}
        try:
            mid = process.atomic.send(body)
        finally:
            early, self._early = self._early, None
        if mid in early:  # decided inside send (a group of one)
            return Sent(mid, early[mid])
        future: asyncio.Future[Sent] = asyncio.get_running_loop().create_future()
        self._waiting[mid] = future
        try:
            return await asyncio.wait_for(asyncio.shield(future), timeout)
        except TimeoutError:
            self._waiting.pop(mid, None)
            raise OperationError(f"{mid}: no decision within {timeout} s; it may still "
                                 f"commit", definite=False) from None

    async def _flush(self) -> None:
        """Wait until every write so far is on disk and the callbacks waiting for it ran (a
        clean leave delivers what it marked delivered); a store that fails or stalls longer
        than ``LEAVE_FLUSH`` is closed all the same, as a crash would leave it."""
        store = self._store
        if not isinstance(store, WriteBehindStore) or store.closed:
            return
        landed = asyncio.Event()
        try:
            store.commit_then(landed.set)
            await asyncio.wait_for(landed.wait(), LEAVE_FLUSH)
        except (StateError, TimeoutError) as exc:
            log.error("%s: leaving without the last group commit: %r", self.name, exc)

    def members(self) -> tuple[str, ...]:
        return self._member().group.members()

    def __aiter__(self) -> AsyncIterator[Delivered]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[Delivered]:
        while True:
            while not self._ready:
                if self._left:
                    return
                self._arrived.clear()
                await self._arrived.wait()
            message = self._ready.popleft()
            yield message
            # asked for the next one: this one is handled (unless the member left meanwhile:
            # then it is handed over again when the member rejoins on its data dir)
            if self._env is not None and not self._env.closed:
                self.acknowledge(message)

    async def leave(self) -> None:
        """Say LEAVE and close, once the group commits on their way landed (their deliveries
        are read as usual); what was delivered stays readable."""
        if self._env is not None and not self._env.closed:
            self._env.close_group()
            await asyncio.sleep(0)  # the transports finish closing on the next loop turn
            await self._flush()
        for future in self._waiting.values():
            if not future.done():
                future.set_exception(OperationError("left the group before the decision",
                                                    definite=False))
                future.exception()  # said to whoever still awaits it; nobody else to tell
        self._waiting.clear()
        if self._store is not None:
            self._store.close()
            self._store = None
        self._release()
        self._left = True
        self._arrived.set()

    def _release(self) -> None:
        """The data dir is free for the next member."""
        if self._lock is not None:
            os.close(self._lock)
            self._lock = None
