"""Trace rows of a live process as segment files that survive ``kill -9``, and their compaction.

A ``SegmentSink`` writes a part's rows (``trace_path(RUN_DIR, run, part)`` names the part's
Parquet file ``PART.parquet``) beside that file, in the same directory:

- ``PART.seg.partial``: the segment being written; every flush appends one record batch;
- ``PART-000123.seg``: a completed segment, renamed from the partial one when it is rotated
  (``os.rename`` is atomic: a reader sees a whole segment or none);
- ``PART.seg.lock``: held (``flock``) by the live writer; the kernel releases it when the
  process dies, which is how a recovery tells a dead writer's segments from a live one's.

A segment is an Arrow IPC stream (the trace ``SCHEMA``, then one record batch per flush, then
the end-of-stream marker when complete): cheap to append (one ``os.write`` of a serialized
batch) and read back by pyarrow at about 0.2 us a row (docs/trace-segments.md has the numbers
and the comparison with JSON lines). A record cut short by a kill, a full disk or power loss
is a torn tail: ``read_segment`` keeps every whole batch before it and reports the bytes after.

``compact`` merges a part's segments into its Parquet file (rows of an existing one first) and
removes them; the Parquet file records the last segment it holds (``COMPACTED_KEY``), so a
compaction interrupted between writing it and removing the segments never counts a row twice.
A clean ``SegmentSink.close()`` compacts; ``recover_segments`` does it for the parts whose
writer is gone (``gossamer analyze`` calls it), reporting rows recovered and torn tails.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

from .errors import ConfigError, StateError
from .filelock import try_lock
from .trace import Row, TraceSink
from .traceio import SCHEMA, read_trace_file, trace_files

__all__ = [
    "COMPACTED_KEY",
    "SEGMENT_NAME",
    "PartSegments",
    "Recovery",
    "SegmentRead",
    "SegmentSink",
    "compact",
    "decode_segment",
    "find_parts",
    "read_run",
    "read_segment",
    "recover_segments",
]

log = logging.getLogger("gossamer.trace")

PARTIAL_SUFFIX = ".seg.partial"
LOCK_SUFFIX = ".seg.lock"
SEGMENT_SUFFIX = ".seg"
#: Parquet key-value metadata: the index of the last segment compacted into the file
COMPACTED_KEY = b"gossamer.compacted_through"
#: the name of a completed segment: PART-NNNNNN.seg
SEGMENT_NAME = re.compile(r"^(?P<part>.+)-(?P<index>\d{6,})\.seg$")
_EOS = b"\xff\xff\xff\xff\x00\x00\x00\x00"  # Arrow IPC end of stream
_LEGACY_EOS = b"\x00\x00\x00\x00"
_ROW_GROUP_ROWS = 65_536  # rows per row group of a compacted file


# -- reading ----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class SegmentRead:
    """The rows of one segment file and how many bytes at its end were not a whole record."""

    path: Path
    table: pa.Table
    torn_bytes: int

    @property
    def torn(self) -> bool:
        return self.torn_bytes > 0


def read_segment(path: str | Path) -> SegmentRead:
    """Every whole record batch of a segment (completed or partial), as a table with the trace
    schema; bytes after the last whole record (a torn tail) are skipped and counted."""
    path = Path(path)
    table, torn = decode_segment(path.read_bytes())
    return SegmentRead(path, table, torn)


def decode_segment(data: bytes) -> tuple[pa.Table, int]:
    """The whole record batches of a segment's bytes, as a table with the trace schema, and
    the number of bytes after the last whole record (a torn tail; 0 when none)."""
    source = pa.BufferReader(pa.py_buffer(data))
    batches: list[pa.RecordBatch] = []
    good = 0  # offset just after the last whole message
    try:
        messages = ipc.MessageReader.open_stream(source)
        schema = ipc.read_schema(messages.read_next_message())
        good = source.tell()
        while True:
            message = messages.read_next_message()
            batches.append(ipc.read_record_batch(message, schema))
            good = source.tell()
    except StopIteration:
        pass  # the stream's end: every message was whole
    except (pa.ArrowInvalid, OSError, EOFError):
        pass  # a message cut short: the torn tail starts at ``good``
    rest = data[good:]
    torn = 0 if rest in (b"", _EOS, _LEGACY_EOS) else len(rest)
    if not batches:
        return SCHEMA.empty_table(), torn
    return _conform(pa.Table.from_batches(batches)), torn


def _conform(table: pa.Table) -> pa.Table:
    """``table`` with exactly the trace schema: a column it lacks (a file older than the
    column, such as ``wall``) filled with nulls, in schema order."""
    if table.schema.equals(SCHEMA):
        return table
    columns = [table[field.name].cast(field.type) if field.name in table.column_names
               else pa.nulls(table.num_rows, field.type) for field in SCHEMA]
    return pa.Table.from_arrays(columns, schema=SCHEMA)


@dataclasses.dataclass(frozen=True)
class PartSegments:
    """The segment files of one part (``parquet`` is where they are compacted to)."""

    parquet: Path
    completed: list[tuple[int, Path]]  # (index, path), by index
    partial: Path | None

    @property
    def lock(self) -> Path:
        return _sibling(self.parquet, LOCK_SUFFIX)


def _sibling(parquet: Path, suffix: str) -> Path:
    return parquet.with_name(parquet.stem + suffix)


def _segment_path(parquet: Path, index: int) -> Path:
    return parquet.with_name(f"{parquet.stem}-{index:06d}{SEGMENT_SUFFIX}")


def _segments_of(parquet: Path) -> PartSegments:
    completed = []
    if parquet.parent.is_dir():
        for path in parquet.parent.iterdir():
            match = SEGMENT_NAME.match(path.name)
            if match and match["part"] == parquet.stem:
                completed.append((int(match["index"]), path))
    partial = _sibling(parquet, PARTIAL_SUFFIX)
    return PartSegments(parquet, sorted(completed), partial if partial.exists() else None)


def find_parts(run_dir: str | Path) -> list[PartSegments]:
    """Every part under ``RUN_DIR/trace/<run>/`` that has segment files, by path."""
    root = Path(run_dir) / "trace"
    if not root.is_dir():
        return []
    stems: set[Path] = set()
    for path in root.glob(f"*/*{SEGMENT_SUFFIX}"):
        match = SEGMENT_NAME.match(path.name)
        if match:
            stems.add(path.with_name(match["part"] + ".parquet"))
    for path in root.glob(f"*/*{PARTIAL_SUFFIX}"):
        stems.add(path.with_name(path.name.removesuffix(PARTIAL_SUFFIX) + ".parquet"))
    return [_segments_of(parquet) for parquet in sorted(stems)]


def read_run(run_dir: str | Path) -> tuple[pa.Table, list[PartSegments]]:
    """Every row under ``RUN_DIR/trace``, without writing anything: its Parquet files, and
    the segment files of the parts not compacted to Parquet yet (a process still running,
    or killed); also those parts. ``ConfigError`` when there is no trace file at all, or one
    is damaged (named)."""
    tables = [read_trace_file(f) for f in trace_files(run_dir)]
    pending = [part for part in find_parts(run_dir) if not part.parquet.exists()]
    for part in pending:
        paths = [path for _index, path in part.completed]
        if part.partial is not None:
            paths.append(part.partial)
        for path in paths:
            try:
                tables.append(read_segment(path).table)
            except (pa.ArrowException, OSError) as exc:
                raise ConfigError(f"{path}: not a readable segment file ({exc})") from None
    if not tables:
        raise ConfigError(f"no trace files under {Path(run_dir) / 'trace'}")
    return pa.concat_tables(tables), pending


def _compacted_through(parquet: Path) -> int:
    """The last segment index a Parquet file holds (0: none, or no such file)."""
    if not parquet.exists():
        return 0
    try:
        metadata = pq.read_schema(parquet).metadata or {}
    except (pa.ArrowInvalid, OSError):
        return 0  # no footer: not a finished file, nothing in it counts
    return int(metadata.get(COMPACTED_KEY, b"0"))


# -- locking ----------------------------------------------------------------------------------


def _unlock(fd: int, path: Path) -> None:
    path.unlink(missing_ok=True)
    os.close(fd)  # closing releases the flock


# -- compaction -------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Recovery:
    """What compacting one part did: segments and rows moved into ``parquet``, torn tails
    skipped (``(segment, bytes)``); ``live``: a writer still holds the part, nothing done."""

    parquet: Path
    segments: int = 0
    rows: int = 0
    torn: tuple[tuple[Path, int], ...] = ()
    live: bool = False

    @property
    def torn_bytes(self) -> int:
        return sum(size for _, size in self.torn)


def _seal_partial(part: PartSegments) -> PartSegments:
    """A dead writer's partial segment, renamed as the next completed one (torn or not)."""
    if part.partial is None:
        return part
    last = max([index for index, _ in part.completed] + [_compacted_through(part.parquet)])
    os.rename(part.partial, _segment_path(part.parquet, last + 1))
    return _segments_of(part.parquet)


def _existing_row_groups(parquet: Path) -> Iterator[pa.Table]:
    """The rows a finished Parquet file of the part holds (one without a footer holds none
    that can be read: it is replaced)."""
    if not parquet.exists() or not _finished(parquet):
        return
    source = pq.ParquetFile(parquet)
    for index in range(source.num_row_groups):
        yield _conform(source.read_row_group(index))


def _finished(parquet: Path) -> bool:
    try:
        pq.read_schema(parquet)
    except (pa.ArrowInvalid, OSError):
        return False
    return True


def compact(parquet: str | Path, *, include_partial: bool = False) -> Recovery:
    """Move the completed segments of the part ``parquet`` (``trace_path``) into that Parquet
    file, after the rows it already holds, then remove them. ``include_partial``: the partial
    segment too, sealed first (only for a writer known to be gone). The caller holds the
    part's lock (``SegmentSink`` does; ``recover_segments`` takes it)."""
    parquet = Path(parquet)
    part = _segments_of(parquet)
    if include_partial:
        part = _seal_partial(part)
    through = _compacted_through(parquet)
    fresh = [(index, path) for index, path in part.completed if index > through]
    stale = [path for index, path in part.completed if index <= through]
    if not fresh:
        for path in stale:  # already in the Parquet file: a compaction stopped before this
            path.unlink(missing_ok=True)
        return Recovery(parquet)
    reads = [read_segment(path) for _, path in fresh]
    last = fresh[-1][0]
    _write_parquet(parquet, [*_existing_row_groups(parquet), *(r.table for r in reads)], last)
    for path in stale + [path for _, path in fresh]:
        path.unlink(missing_ok=True)
    torn = tuple((read.path, read.torn_bytes) for read in reads if read.torn)
    for path, size in torn:
        log.warning("trace segment %s: torn tail of %d bytes skipped", path, size)
    return Recovery(parquet, segments=len(reads), rows=sum(r.table.num_rows for r in reads),
                    torn=torn)


def _write_parquet(parquet: Path, tables: list[pa.Table], compacted_through: int) -> None:
    """``tables`` as the Parquet file ``parquet``, written aside and renamed into place, in
    row groups of about ``_ROW_GROUP_ROWS``."""
    temporary = parquet.with_name(parquet.name + ".compacting")
    schema = SCHEMA.with_metadata({COMPACTED_KEY: str(compacted_through).encode()})
    with pq.ParquetWriter(temporary, schema, compression="zstd") as writer:
        pending: list[pa.Table] = []
        for table in tables:
            pending.append(table)
            if sum(t.num_rows for t in pending) >= _ROW_GROUP_ROWS:
                writer.write_table(pa.concat_tables(pending))
                pending.clear()
        if pending:
            writer.write_table(pa.concat_tables(pending))
    os.replace(temporary, parquet)


def recover_segments(run_dir: str | Path) -> list[Recovery]:
    """Compact the segments of every part under ``RUN_DIR/trace`` whose writer is gone
    (killed, or it never compacted); parts still held by a live writer are reported
    ``live`` and left alone."""
    recoveries = []
    for part in find_parts(run_dir):
        fd = try_lock(part.lock)
        if fd is None:
            recoveries.append(Recovery(part.parquet, live=True))
            continue
        try:
            recoveries.append(compact(part.parquet, include_partial=True))
        finally:
            _unlock(fd, part.lock)
    return recoveries


# -- writing ----------------------------------------------------------------------------------


class SegmentSink(TraceSink):
    """Rows of one part to segment files, written by a background thread (see the module).

    ``append`` only queues the row (the event loop never waits on the disk); the writer thread
    writes what is queued every ``flush_interval`` seconds (one ``os.write`` per batch: after a
    ``kill -9`` the rows of at most the last ``flush_interval`` plus one write are lost; no
    fsync, so power loss may cost more) and rotates the partial segment once it is
    ``rotate_interval`` old. At most ``max_pending`` rows wait: past that ``append`` writes
    them itself (back-pressure, memory stays bounded). ``close()`` writes the rest, completes
    the segment and compacts the part into its Parquet file.

    ``path`` is the part's Parquet path (``trace_path``); it may be None until the part's name
    is known (set ``sink.path`` then: rows wait until it is). ``clock`` (monotonic seconds)
    times the rotation; with ``background=False`` no thread runs and the caller calls
    ``poll()`` (tests drive it with a fake clock).
    """

    def __init__(
        self,
        path: str | Path | None,
        *,
        flush_interval: float = 0.1,
        rotate_interval: float = 1.0,
        max_pending: int = 100_000,
        batch_rows: int = 2048,
        clock: Callable[[], float] = time.monotonic,
        background: bool = True,
    ) -> None:
        if not 0 < flush_interval <= 0.2:
            raise ConfigError(f"flush_interval must be in (0, 0.2] seconds, got "
                              f"{flush_interval!r}")
        if not 0 < rotate_interval <= 1.0:
            raise ConfigError(f"rotate_interval must be in (0, 1] seconds, got "
                              f"{rotate_interval!r}")
        if max_pending < 1 or batch_rows < 1:
            raise ConfigError("max_pending and batch_rows must be >= 1")
        self._path = None if path is None else Path(path)
        self.flush_interval = flush_interval
        self.rotate_interval = rotate_interval
        self.max_pending = max_pending
        self.batch_rows = batch_rows
        self._clock = clock
        # deque.append and popleft are atomic: the loop thread appends, the writer pops
        self._pending: collections.deque[Row] = collections.deque()
        self._lock = threading.Lock()  # one writer of the files at a time
        self._lock_fd: int | None = None
        self._fd: int | None = None  # the partial segment, while one is open
        self._opened_at = 0.0
        self._next_index = 1
        self._closed = False
        self.failure: BaseException | None = None
        #: rows written to segments so far, and segments completed
        self.rows_written = 0
        self.segments_completed = 0
        self.recovery: Recovery | None = None  # what close() compacted
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if background:
            self._thread = threading.Thread(target=self._run, name="gossamer-trace-segments",
                                            daemon=True)
            self._thread.start()

    # -- the part's name --------------------------------------------------------------------

    @property
    def path(self) -> Path | None:
        return self._path

    @path.setter
    def path(self, path: str | Path) -> None:
        with self._lock:
            if self._lock_fd is not None:
                raise StateError(f"trace sink already writes {self._path}: too late to rename")
            self._path = Path(path)

    # -- TraceSink ----------------------------------------------------------------------------

    def append(self, row: Row) -> None:
        if self._closed:
            raise StateError(f"trace sink {self._path} is closed")
        if self.failure is not None:
            raise StateError(f"trace sink {self._path} failed: {self.failure}") from self.failure
        self._pending.append(row)
        if len(self._pending) >= self.max_pending:
            self._write_pending()

    def flush(self) -> None:
        """Write every queued row to the partial segment now (the caller's thread waits)."""
        if not self._closed:
            self._write_pending()

    def close(self) -> None:
        """Write the rest, complete the segment, compact the part into its Parquet file."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        with self._lock:
            if self._path is None:
                if self._pending:
                    log.warning("trace sink closed without a file name: %d rows dropped",
                                len(self._pending))
                return
            try:
                self._write_locked()
                self._complete_locked()
                if self._lock_fd is None:  # no row was written: the lock is still to take
                    self._lock_fd = try_lock(_sibling(self._path, LOCK_SUFFIX))
                    if self._lock_fd is None:
                        raise StateError(f"another live process writes the trace part "
                                         f"{self._path}")
                self.recovery = compact(self._path, include_partial=True)
                if not self._path.exists():  # a clean exit leaves a file, rows or not
                    _write_parquet(self._path, [], 0)
            finally:
                if self._lock_fd is not None:
                    _unlock(self._lock_fd, _sibling(self._path, LOCK_SUFFIX))
                    self._lock_fd = None
        if self.failure is not None:
            raise StateError(f"trace sink {self._path} failed: {self.failure}") from self.failure

    # -- the writer ---------------------------------------------------------------------------

    def poll(self) -> None:
        """Write what is queued, and rotate the partial segment if it is old enough (the
        writer thread calls this every ``flush_interval``)."""
        with self._lock:
            self._write_locked()
            if self._fd is not None and self._clock() - self._opened_at >= self.rotate_interval:
                self._complete_locked()

    def _run(self) -> None:
        while True:
            timeout = self.flush_interval
            if self._fd is not None:  # wake when the open segment is due for rotation
                due = self._opened_at + self.rotate_interval - self._clock()
                timeout = max(0.0, min(timeout, due))
            if self._stop.wait(timeout):
                return
            try:
                self.poll()
            except Exception as exc:  # a full disk, a removed directory: reported by append
                log.error("trace sink %s failed", self._path, exc_info=exc)
                self.failure = exc
                return

    def _write_pending(self) -> None:
        with self._lock:
            self._write_locked()

    def _write_locked(self) -> None:
        pending = self._pending
        if self._path is None:
            if len(pending) >= self.max_pending:
                raise StateError(f"trace sink holds {len(pending)} rows and has no file name")
            return
        while pending:
            count = min(len(pending), self.batch_rows)
            rows = [pending.popleft() for _ in range(count)]
            columns = list(zip(*rows, strict=True))
            batch = pa.record_batch(
                [pa.array(column, type=field.type) for column, field in zip(
                    columns, SCHEMA, strict=True)], schema=SCHEMA)
            if self._fd is None:
                self._open_locked()
            assert self._fd is not None
            _write_all(self._fd, batch.serialize())
            self.rows_written += count

    def _open_locked(self) -> None:
        assert self._path is not None
        if self._lock_fd is None:
            fd = try_lock(_sibling(self._path, LOCK_SUFFIX))
            if fd is None:
                raise StateError(f"another live process writes the trace part {self._path}")
            self._lock_fd = fd
            # a partial segment left by a killed writer of this part becomes a completed one
            part = _seal_partial(_segments_of(self._path))
            self._next_index = 1 + max([index for index, _ in part.completed]
                                       + [_compacted_through(self._path)])
        partial = _sibling(self._path, PARTIAL_SUFFIX)
        self._fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        _write_all(self._fd, SCHEMA.serialize())
        self._opened_at = self._clock()

    def _complete_locked(self) -> None:
        if self._fd is None:
            return
        assert self._path is not None
        _write_all(self._fd, _EOS)
        os.close(self._fd)
        self._fd = None
        os.rename(_sibling(self._path, PARTIAL_SUFFIX),
                  _segment_path(self._path, self._next_index))
        self._next_index += 1
        self.segments_completed += 1


def _write_all(fd: int, data: bytes | pa.Buffer) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]
