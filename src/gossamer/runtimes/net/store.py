"""The network runtime's durable store: one sqlite table of (table, key) -> bytes.

Reads see uncommitted writes of the same store; closing without ``commit()`` loses them, which
is exactly what a crash does to a real node, and a commit is on disk when it returns.
``WriteBehindStore`` commits in groups on a thread of its own: one fsync for many writers, each
group durable in the store's redo log (``redo.py``) and in sqlite at the next checkpoint.
Opening a file store replays its redo log first, so every reader sees every durable group.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import logging
import sqlite3
import threading
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from ...core.env import Store, scan_with_pending
from ...core.errors import ConfigError, StateError
from .redo import RedoLog, base64_changes, encode_changes, merge, read_redo, redo_path

__all__ = ["SqliteStore", "StoreOpenError", "WriteBehindStore"]

log = logging.getLogger("gossamer.store")

Changes = dict[tuple[str, str], bytes | None]  # (table, key) -> value, None: deleted


class StoreOpenError(ConfigError):
    """The store's file cannot be opened as one: not sqlite, damaged, or not a file. Nothing
    in it was changed; the message names it."""

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS kv ("
    "tbl TEXT NOT NULL, key TEXT NOT NULL, value BLOB NOT NULL, PRIMARY KEY (tbl, key))"
)
_UPSERT = ("INSERT INTO kv (tbl, key, value) VALUES (?, ?, ?) "
           "ON CONFLICT (tbl, key) DO UPDATE SET value = excluded.value")
_DELETE = "DELETE FROM kv WHERE tbl = ? AND key = ?"
_UPSERT_JSON = ("INSERT INTO kv (tbl, key, value) "
                "SELECT value ->> 0, value ->> 1, CAST(value ->> 2 AS BLOB) FROM json_each(?) "
                "WHERE true ON CONFLICT (tbl, key) DO UPDATE SET value = excluded.value")
_DELETE_JSON = ("DELETE FROM kv WHERE (tbl, key) IN "
                "(SELECT value ->> 0, value ->> 1 FROM json_each(?))")


class SqliteStore(Store):
    """``Store`` on a sqlite file in WAL mode with ``synchronous=FULL``, or ``":memory:"``.

    What a commit costs and buys: in WAL mode a commit appends the transaction to the
    write-ahead log; with ``synchronous=FULL`` sqlite then syncs the log (fsync; ``F_FULLFSYNC``
    on macOS, where ``fullfsync`` is on) before ``COMMIT`` returns, so ``commit()`` returns
    once the writes survive a power loss. With ``NORMAL`` (this store's setting before) the log
    is synced only at checkpoints: a commit survives a crash of the process but may roll back
    after a power loss or an OS crash. Either way a crash never leaves half a transaction. A
    ``":memory:"`` store has no disk: its commits last as long as the process.

    ``before_durable``, when set, runs before each commit that has writes (the runtime's: it
    writes the process's queued trace rows to their file first, so a row traced before a write
    outlives any crash that keeps the write).
    """

    before_durable: Callable[[], None] | None = None

    def __init__(self, path: str | Path = ":memory:", *, any_thread: bool = False,
                 replay: bool = True) -> None:
        """``any_thread``: the connection may be used from other threads than this one (one
        at a time: the caller serialises, as ``WriteBehindStore`` does). ``replay``: apply
        the file's redo log (what a ``WriteBehindStore`` made durable and had not yet
        checkpointed) before anything else; while a live ``WriteBehindStore`` holds that log,
        its records are read beside the file instead and this store refuses writes."""
        if not isinstance(path, str | Path) or str(path) == "":
            raise ConfigError(f"store path must be a non-empty str or Path, got {path!r}")
        self.path = str(path)
        # autocommit mode: transactions are opened explicitly on the first write, so a close
        # without commit() rolls back instead of committing behind our back
        self._db: sqlite3.Connection | None = None
        try:
            self._db = sqlite3.connect(self.path, isolation_level=None,
                                       check_same_thread=not any_thread)
            if self.path != ":memory:":
                self._db.execute("PRAGMA journal_mode=WAL")
                self._db.execute("PRAGMA synchronous=FULL")  # each commit syncs the log
                self._db.execute("PRAGMA fullfsync=ON")  # macOS: F_FULLFSYNC, past the cache
            self._db.execute(_SCHEMA)
        except sqlite3.Error as exc:  # junk, a damaged file, a directory: nothing is changed
            if self._db is not None:
                self._db.close()
                self._db = None
            raise StoreOpenError(f"{self.path}: cannot be opened as a store ({exc}); move it "
                                 "aside or use another data directory") from None
        # a live writer's redo log, read at open: its rows on top of the file's (read only)
        self._beside: Changes | None = None
        if self.path != ":memory:" and replay:
            try:
                self._recover()
            except BaseException:  # a damaged log: refuse, and leave nothing open
                self._db.close()
                self._db = None
                raise

    def _recover(self) -> None:
        path = redo_path(self.path)
        if not path.exists() or path.stat().st_size == 0:
            return
        redo = RedoLog.try_open(path)
        if redo is None:  # a live WriteBehindStore writes it: read it, change nothing
            self._beside = merge(read_redo(path))
            return
        try:
            self.replay(redo)
        finally:
            redo.close()

    def replay(self, redo: RedoLog) -> int:
        """Apply every record of ``redo`` in order, commit, then empty it; how many records."""
        records = redo.read()
        if records:
            merged = merge(records)
            self.apply(merged)
            self.commit()
            log.info("store %s: %d group commits replayed from the redo log (%d rows)",
                     self.path, len(records), len(merged))
        if redo.size:
            redo.reset()
        return len(records)

    def _open_db(self) -> sqlite3.Connection:
        if self._db is None:
            raise StateError(f"store {self.path}: closed, cannot be used")
        return self._db

    def _writing(self) -> sqlite3.Connection:
        db = self._open_db()
        if self._beside is not None:
            raise StateError(f"store {self.path}: opened beside a live writer (its redo log is "
                             f"locked by another process), so read only")
        if not db.in_transaction:
            db.execute("BEGIN")
        return db

    def get(self, table: str, key: str) -> bytes | None:
        if self._beside is not None and (table, key) in self._beside:
            return self._beside[(table, key)]
        row = self._open_db().execute(
            "SELECT value FROM kv WHERE tbl = ? AND key = ?", (table, key)
        ).fetchone()
        return None if row is None else bytes(row[0])

    def put(self, table: str, key: str, value: bytes) -> None:
        if not isinstance(value, bytes):
            raise TypeError(f"store values are bytes, got {type(value).__name__}")
        self._writing().execute(_UPSERT, (table, key, value))

    def delete(self, table: str, key: str) -> None:
        self._writing().execute(_DELETE, (table, key))

    def apply(self, changes: Mapping[tuple[str, str], bytes | None]) -> None:
        """The changes in two statements (``executemany``): the puts, then the deletes."""
        puts: list[tuple[str, str, bytes]] = []
        deletes: list[tuple[str, str]] = []
        for (table, key), value in changes.items():
            if value is None:
                deletes.append((table, key))
            elif isinstance(value, bytes):
                puts.append((table, key, value))
            else:
                raise TypeError(f"store values are bytes, got {type(value).__name__}")
        db = self._writing()
        if puts:
            db.executemany(_UPSERT, puts)
        if deletes:
            db.executemany(_DELETE, deletes)

    def apply_json(self, puts: bytes, deletes: bytes) -> None:
        """The changes as two JSON arrays, ``[[table, key, value as UTF-8 text], ...]`` and
        ``[[table, key], ...]``, in two statements: sqlite runs each whole (``json_each``)
        without holding the GIL, where ``executemany`` takes it back for every row."""
        db = self._writing()
        db.execute(_UPSERT_JSON, (puts,))
        db.execute(_DELETE_JSON, (deletes,))

    def scan(self, table: str) -> Iterator[tuple[str, bytes]]:
        # fetched eagerly: the caller may write to the store while it iterates; sqlite's
        # BINARY collation orders UTF-8 like Python orders str (by code point)
        rows = self._open_db().execute(
            "SELECT key, value FROM kv WHERE tbl = ? ORDER BY key", (table,)
        ).fetchall()
        found = [(str(key), bytes(value)) for key, value in rows]
        if self._beside is not None:
            return scan_with_pending(found, table, self._beside)
        return iter(found)

    def commit(self) -> None:
        """Commit; on a file, returns once the log is synced (see the class docstring)."""
        db = self._open_db()
        if db.in_transaction:
            if self.before_durable is not None:
                self.before_durable()
            db.execute("COMMIT")

    @property
    def uncommitted(self) -> bool:
        """True while there are writes that a crash would lose."""
        return self._db is not None and self._db.in_transaction

    @property
    def items(self) -> int:
        """How many (table, key) rows the store holds, uncommitted writes included."""
        if self._beside is not None:
            return len(self._sizes())
        row = self._open_db().execute("SELECT COUNT(*) FROM kv").fetchone()
        return int(row[0])

    @property
    def size(self) -> int:
        """Bytes the store holds: table name, key (UTF-8) and value of every row (not the
        file's size, which has pages and the WAL; the same measure as ``MemoryStore.size``)."""
        if self._beside is not None:
            return sum(self._sizes().values())
        row = self._open_db().execute(
            "SELECT COALESCE(SUM(LENGTH(CAST(tbl AS BLOB)) + LENGTH(CAST(key AS BLOB)) "
            "+ LENGTH(value)), 0) FROM kv").fetchone()
        return int(row[0])

    def _sizes(self) -> dict[tuple[str, str], int]:
        """Each row's bytes, the live writer's redo log on top (a reader beside it)."""
        sizes = {(str(tbl), str(key)): int(n) for tbl, key, n in self._open_db().execute(
            "SELECT tbl, key, LENGTH(CAST(tbl AS BLOB)) + LENGTH(CAST(key AS BLOB)) "
            "+ LENGTH(value) FROM kv")}
        for (tbl, key), value in (self._beside or {}).items():
            if value is None:
                sizes.pop((tbl, key), None)
            else:
                sizes[(tbl, key)] = len(tbl.encode()) + len(key.encode()) + len(value)
        return sizes

    @property
    def closed(self) -> bool:
        return self._db is None

    def close(self) -> None:
        """Close; uncommitted writes are rolled back (lost), as in a crash."""
        db, self._db = self._db, None
        if db is not None:
            db.close()


class _Group:
    """Writes committed together, and the callbacks that wait for them."""

    __slots__ = ("callbacks", "durable", "future", "seq", "writes")

    def __init__(self) -> None:
        self.writes: Changes = {}
        self.callbacks: list[Callable[[], None]] = []
        self.future: Future[None] | None = None  # set when handed to the writer
        self.seq = 0  # the store's count of groups handed over, this one's
        self.durable = False  # set by the writer thread once the group is on disk

    def written(self) -> bool:
        return self.durable


def _call(fn: Callable[[], None]) -> None:
    fn()


class WriteBehindStore(Store):
    """A ``SqliteStore`` committed in groups by a thread of its own (group commit).

    Writes wait in memory (reads see them). ``commit_then(fn)`` adds what was written so far,
    and ``fn``, to the group that is forming, and returns. The writer thread makes one group
    durable at a time; while it does, the next group forms, so every ``commit_then`` meanwhile
    shares one fsync. Once a group is on disk its callbacks run on ``loop``
    (``call_soon_threadsafe``), in the order they were given, each once, through ``guard``
    (the runtime's: a raise stops the node), and what they commit joins the next group.
    ``commit()`` hands everything over too and blocks until it is on disk, for a caller that
    cannot wait for a callback (a stop).

    On a file, a group is durable once it is appended to the store's redo log and synced
    (``redo.py``: one small write and ``fdatasync``); the writer then applies it to an open
    sqlite transaction, which it commits (fsync'd) and empties the log with at a checkpoint,
    once the log holds ``checkpoint_bytes``, and at ``close()``. Many groups so share sqlite's
    page writes. Reads see landed groups that sqlite does not hold yet from memory (bounded by
    the checkpoint), and opening the file again replays the log. A ``":memory:"`` store has no
    log: each group is one sqlite transaction.

    Bounds: a forming group is handed over when no group is on its way (after the callbacks of
    the last one ran), or early when it holds ``max_group_writes`` rows; at most
    ``max_groups`` groups are handed over and not yet written, and handing over one more waits
    for the oldest (back-pressure: it blocks the loop).

    A failed commit is the node's error: ``on_failure(exc)`` runs on the loop (without one the
    error is logged and raised there), no callback of that group or of a later one runs, and
    every later call raises ``StateError`` (a failure after a group was durable, in sqlite or a
    checkpoint, leaves the log whole: the next open replays it). ``close()`` writes nothing
    more: writes and callbacks not handed over are lost, as in a crash, and a group being
    written finishes but its callbacks never run. Use the store from the loop's thread only;
    one process per file (the redo log is locked: a second writer gets ``StateError``).

    ``before_durable``, when set, runs on the loop's thread before each group is handed to the
    writer (see ``SqliteStore``).
    """

    before_durable: Callable[[], None] | None = None

    def __init__(self, path: str | Path = ":memory:", *,
                 loop: asyncio.AbstractEventLoop | None = None, max_groups: int = 4,
                 max_group_writes: int = 65_536, checkpoint_bytes: int = 1 << 20) -> None:
        """``loop``: where callbacks run (default: the running loop, if any; without one
        only ``commit()`` commits, and each one checkpoints)."""
        for name, value in (("max_groups", max_groups), ("max_group_writes", max_group_writes),
                            ("checkpoint_bytes", checkpoint_bytes)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"{name} must be an int >= 1, got {value!r}")
        self.max_groups = max_groups
        self.max_group_writes = max_group_writes
        self.checkpoint_bytes = checkpoint_bytes
        self.inner = SqliteStore(path, any_thread=True, replay=False)
        self.path = self.inner.path
        self.redo: RedoLog | None = None
        if self.path != ":memory:":
            try:
                self.redo = RedoLog.open(redo_path(self.path))
                self.inner.replay(self.redo)  # what the last life made durable, into sqlite
            except BaseException:
                if self.redo is not None:
                    self.redo.close()
                self.inner.close()
                raise
        # reads of what is on disk go through a connection of their own (WAL: readers never
        # wait for the writer), so a read never waits for a group's fsync; a write not yet
        # in sqlite is still in a group here, read from memory first. ":memory:" has one
        # database per connection: its reads share the writer's (under the lock).
        self._reader = (None if self.path == ":memory:"
                        else SqliteStore(path, replay=False))
        self.loop = loop if loop is not None else _running_loop()
        self.guard: Callable[[Callable[[], None]], None] = _call
        self.on_failure: Callable[[BaseException], None] | None = None
        self.groups_written = 0  # groups made durable by the writer (one fsync each)
        self.checkpoints = 0  # sqlite commits that emptied the redo log
        self._lock = threading.Lock()  # the inner store and the log: one thread at a time
        self._pending: Changes = {}  # written since the last commit
        self._forming = _Group()  # committed, waiting for the writer
        self._handed: deque[_Group] = deque()  # handed over, oldest first, until it lands
        self._seq = 0  # groups handed over
        # landed groups sqlite does not hold yet (row -> value, group), until a checkpoint
        self._unsynced: dict[tuple[str, str], tuple[bytes | None, int]] = {}
        self._unsynced_groups: deque[_Group] = deque()
        self._applied = 0  # writer thread: the newest group in sqlite's open transaction
        self._failure: BaseException | None = None
        self._landing = False  # a landed group's callbacks are running
        self._writer_failed = False  # set by the writer thread: it writes nothing more
        self._writer: ThreadPoolExecutor | None = ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="store-writer")

    def bind(self, loop: asyncio.AbstractEventLoop, *,
             guard: Callable[[Callable[[], None]], None] | None = None,
             on_failure: Callable[[BaseException], None] | None = None) -> None:
        """The runtime's hooks: the loop callbacks run on, how each one is run, and who hears
        of a failed commit (a ``NetNode`` binds its store when its process starts)."""
        self.loop = loop
        if guard is not None:
            self.guard = guard
        self.on_failure = on_failure

    # -- reads and writes ------------------------------------------------------------------

    def get(self, table: str, key: str) -> bytes | None:
        row = (table, key)
        if row in self._pending:
            return self._pending[row]
        if row in self._forming.writes:
            return self._forming.writes[row]
        for group in reversed(self._handed):
            if row in group.writes:
                return group.writes[row]
        landed = self._unsynced.get(row)
        if landed is not None:
            return landed[0]
        if self._reader is not None:
            return self._reader.get(table, key)
        with self._lock:  # waits for a group being written: not for a hot path
            return self.inner.get(table, key)

    def put(self, table: str, key: str, value: bytes) -> None:
        if not isinstance(value, bytes):
            raise TypeError(f"store values are bytes, got {type(value).__name__}")
        self._usable()
        self._pending[(table, key)] = value

    def delete(self, table: str, key: str) -> None:
        self._usable()
        self._pending[(table, key)] = None

    def apply(self, changes: Mapping[tuple[str, str], bytes | None]) -> None:
        self._usable()
        for value in changes.values():
            if value is not None and value.__class__ is not bytes:
                raise TypeError(f"store values are bytes, got {type(value).__name__}")
        self._pending.update(changes)

    def scan(self, table: str) -> Iterator[tuple[str, bytes]]:
        if self._reader is not None:
            rows = list(self._reader.scan(table))
        else:
            with self._lock:
                rows = list(self.inner.scan(table))
        landed = {row: value for row, (value, _) in self._unsynced.items() if row[0] == table}
        return scan_with_pending(rows, table, landed, *(group.writes for group in self._handed),
                                 self._forming.writes, self._pending)

    # -- commits ---------------------------------------------------------------------------

    def commit_then(self, fn: Callable[[], None]) -> None:
        """``fn`` runs on the loop once every write so far is on disk (see the class)."""
        self._usable()
        loop = self.loop
        if loop is None:
            raise StateError(f"store {self.path}: commit_then needs an event loop (none was "
                             f"running when the store was made, and none was bound)")
        self._close_pending()
        forming = self._forming
        if not forming.writes:
            if self._handed:  # the newest group holds every write so far
                self._handed[-1].callbacks.append(fn)
            else:  # everything is on disk already
                loop.call_soon(self._run, fn)
            return
        forming.callbacks.append(fn)
        idle = not self._handed and not self._landing  # landing: the group starts after it
        if idle or len(forming.writes) >= self.max_group_writes:
            self._hand_over()

    def commit(self) -> None:
        """Hand every write so far to the writer and block until all is on disk (callbacks of
        ``commit_then`` still run on the loop, after this returns)."""
        self._usable()
        self._close_pending()
        if self._forming.writes:
            self._hand_over()
        handed = list(self._handed)
        concurrent.futures.wait([group.future for group in handed if group.future is not None])
        for group in handed:
            exc = group.future.exception() if group.future is not None else None
            if exc is not None:
                self._failed(exc)
                raise exc
        if self.loop is None:
            # no loop lands groups (commit_then needs one), so nothing would hold in memory
            # what sqlite has not committed yet: checkpoint now
            self._handed.clear()
            if self.redo is not None:
                with self._lock:
                    self._checkpoint()

    def _close_pending(self) -> None:
        pending = self._pending
        if pending:
            forming = self._forming.writes
            if forming:
                forming.update(pending)
            else:
                self._forming.writes = pending
            self._pending = {}

    def _hand_over(self) -> None:
        """The forming group to the writer, once fewer than ``max_groups`` are unwritten."""
        writer = self._usable()
        if self.before_durable is not None:
            self.before_durable()
        unwritten = [group for group in self._handed if not group.written()]
        while len(unwritten) >= self.max_groups:
            oldest = unwritten.pop(0)
            if oldest.future is not None:
                concurrent.futures.wait([oldest.future])
        group, self._forming = self._forming, _Group()
        self._seq += 1
        group.seq = self._seq
        group.future = writer.submit(self._write, group)
        self._handed.append(group)
        if self.loop is not None:
            group.future.add_done_callback(functools.partial(self._written, group))

    def _write(self, group: _Group) -> None:
        """On the writer thread: make the group durable (the redo log, or a ``":memory:"``
        transaction), tell the loop, then apply it to sqlite's open transaction and checkpoint
        when the log is long enough. After a failure nothing more is written (a later group
        must not commit what the failed one left behind)."""
        if self._writer_failed:
            raise StateError(f"store {self.path}: an earlier group commit failed")
        changes = group.writes
        encoded = encode_changes(changes)  # sqlite then holds the GIL for two statements
        with self._lock:
            try:
                if self.redo is None:
                    self._apply(changes, encoded)
                    self.inner.commit()
                elif encoded is None:
                    self.redo.append(b"", b"", base64_rows=base64_changes(changes))
                else:
                    self.redo.append(*encoded)
                self.groups_written += 1
                group.durable = True
                self._tell_loop(self._landed, group)
                if self.redo is not None:
                    self._apply(changes, encoded)
                    self._applied = group.seq
                    if self.redo.size >= self.checkpoint_bytes:
                        self._checkpoint()
            except BaseException:
                self._writer_failed = True
                db = self.inner._open_db()
                if db.in_transaction:  # what the log holds is replayed at the next open
                    with contextlib.suppress(sqlite3.Error):
                        db.execute("ROLLBACK")
                raise

    def _apply(self, changes: Changes, encoded: tuple[bytes, bytes] | None) -> None:
        if encoded is None:  # a value that is not text sqlite keeps whole: row by row
            self.inner.apply(changes)
        else:
            self.inner.apply_json(*encoded)

    def _checkpoint(self) -> None:
        """With the lock held: commit sqlite's transaction (fsync'd), then empty the log, then
        tell the loop which groups sqlite holds."""
        redo = self.redo
        if redo is None:
            return
        self.inner.commit()
        if redo.size:
            redo.reset()
            self.checkpoints += 1
        self._tell_loop(self._synced, self._applied)

    def _tell_loop(self, fn: Callable[..., None], arg: object) -> None:
        loop = self.loop
        if loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop is closed: no one is left
                loop.call_soon_threadsafe(fn, arg)

    def _written(self, group: _Group, _future: Future[None]) -> None:
        """On the writer thread: the group's work is done (or failed); tell the loop."""
        self._tell_loop(self._finished, group)

    def _finished(self, group: _Group) -> None:
        """On the loop: a group's write ended; a failure is the store's, whenever it came."""
        future, group.future = group.future, None  # its done-callback holds the group: a
        # reference cycle that kept every landed group's callbacks (and all they hold) alive
        # until a full garbage collection, 100-165 ms pauses under the hub's load
        exc = future.exception() if future is not None else None
        if exc is None or self._writer is None or self._failure is not None:
            return
        self._failed(exc)
        self._report(exc)

    def _landed(self, group: _Group) -> None:
        """On the loop: the oldest group is durable. Run its callbacks, then start the next
        group: what formed meanwhile and what the callbacks committed (a writer that waited for
        this group writes again at once), together."""
        if self._writer is None or self._failure is not None:
            return  # closed or failed: its callbacks never run
        handed = self._handed
        if not handed or handed[0] is not group:
            return  # commit() without a loop drained it already
        handed.popleft()
        if self.redo is not None:
            unsynced = self._unsynced
            seq = group.seq
            for row, value in group.writes.items():
                unsynced[row] = (value, seq)
            self._unsynced_groups.append(group)
        self._landing = True
        callbacks, group.callbacks = group.callbacks, []
        try:
            for fn in callbacks:
                if self._writer is None or self._failure is not None:
                    return  # a callback closed the store (the node stopped)
                self.guard(fn)
        finally:
            self._landing = False
            if self._writer is not None and self._failure is None:
                self._start_next()

    def _synced(self, seq: int) -> None:
        """On the loop: sqlite holds every group up to ``seq``; forget them here."""
        groups = self._unsynced_groups
        unsynced = self._unsynced
        if groups and groups[-1].seq <= seq:  # the usual case: every landed group
            groups.clear()
            unsynced.clear()
            return
        while groups and groups[0].seq <= seq:
            for row in groups.popleft().writes:
                landed = unsynced.get(row)
                if landed is not None and landed[1] <= seq:
                    del unsynced[row]

    def _start_next(self) -> None:
        if not self._handed and self._forming.writes:
            self._hand_over()

    def _run(self, fn: Callable[[], None]) -> None:
        if self._writer is not None and self._failure is None:
            self.guard(fn)

    def _failed(self, exc: BaseException) -> None:
        """A commit failed: nothing of it or after it is acknowledged, and nothing more is
        written."""
        if self._failure is None:
            self._failure = exc
            log.error("store %s: a group commit failed; its writes and every later one are "
                      "lost, no callback runs", self.path, exc_info=exc)
        self._pending = {}
        self._forming = _Group()
        for group in self._handed:
            group.callbacks = []

    def _report(self, exc: BaseException) -> None:
        if self.on_failure is not None:
            self.on_failure(exc)
        else:
            raise StateError(f"store {self.path}: a group commit failed: {exc!r}") from exc

    # -- state -----------------------------------------------------------------------------

    @property
    def uncommitted(self) -> bool:
        """True while there are writes that a crash would lose."""
        return bool(self._pending or self._forming.writes
                    or any(not group.written() for group in self._handed))

    @property
    def groups_in_flight(self) -> int:
        """Groups handed to the writer whose callbacks have not run yet."""
        return len(self._handed)

    @property
    def unsynced_rows(self) -> int:
        """Rows of landed groups held in memory until the next checkpoint."""
        return len(self._unsynced)

    def _usable(self) -> ThreadPoolExecutor:
        if self._writer is None:
            raise StateError(f"store {self.path}: closed, cannot be used")
        if self._failure is not None:
            raise StateError(f"store {self.path}: a commit failed ({self._failure!r}), "
                             f"nothing more is written") from self._failure
        return self._writer

    @property
    def closed(self) -> bool:
        return self._writer is None

    def close(self) -> None:
        """Drop what was not handed over (a crash), finish the group being written, checkpoint
        what is durable into sqlite, close; no callback runs any more."""
        writer, self._writer = self._writer, None
        if writer is None:
            return
        self._pending = {}
        self._forming = _Group()
        try:
            writer.shutdown(wait=True, cancel_futures=True)  # queued groups never start
            for group in self._handed:
                future = group.future
                if (future is not None and not future.cancelled()
                        and future.exception() is not None and self._failure is None):
                    log.error("store %s: a group commit failed while closing; its writes are "
                              "lost", self.path, exc_info=future.exception())
            if self.redo is not None and not self._writer_failed:
                with self._lock:
                    self.loop = None  # nobody is left to hear of the checkpoint
                    self._checkpoint()
        finally:
            self._handed.clear()
            self._unsynced.clear()
            self._unsynced_groups.clear()
            if self.redo is not None:
                self.redo.close()
            self.inner.close()
            if self._reader is not None:
                self._reader.close()


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
