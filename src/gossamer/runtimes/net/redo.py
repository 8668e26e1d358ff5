"""A store's redo log: each group commit appended as one checksummed record and synced, so a
group is durable after one small ``write`` and ``fdatasync`` instead of a sqlite transaction.

``WriteBehindStore`` writes a group here first (the group is durable, its callbacks may run),
then into an open sqlite transaction that it commits only now and then (a checkpoint: one
``COMMIT``, fsync'd, then the log is emptied). Many groups then share sqlite's page writes,
which is most of what a sqlite commit costs in CPU. Whoever opens the store next replays what
the log holds into sqlite first: records are applied in order and each is a set of
last-writer-wins puts and deletes, so replaying one that sqlite already holds changes nothing.

Record: ``<length u32><crc32 u32>`` over the payload, then the payload: a kind byte and the
group's changes (``J``: the two JSON arrays of ``SqliteStore.apply_json``, puts then deletes,
the first one's length in front; ``B``: one JSON array ``[table, key, base64 or null]`` for a
group with a value that is not text). Only the last record can be torn by a crash (each is
synced before the next is written, and one that was not synced was never acknowledged): a bad
record that reaches the end of the file is cut off; a bad record followed by more data is
damage, refused with an error naming the file and offset, never skipped.
"""

from __future__ import annotations

import base64
import contextlib
import logging
import os
import struct
import zlib
from collections.abc import Mapping
from pathlib import Path

import orjson

from ...core.errors import StateError
from ...core.filelock import try_lock

__all__ = ["RedoLog", "base64_changes", "encode_changes", "merge", "read_redo", "redo_path"]

log = logging.getLogger("gossamer.store")

Changes = dict[tuple[str, str], bytes | None]

_HEADER = struct.Struct("<II")  # payload length, crc32 of the payload
_JSON = b"J"
_BASE64 = b"B"


def redo_path(store_path: str | Path) -> Path:
    """Where the redo log of the sqlite file ``store_path`` lives (beside it)."""
    return Path(f"{store_path}-redo")


def encode_changes(changes: Mapping[tuple[str, str], bytes | None]) -> tuple[bytes, bytes] | None:
    """The changes as ``SqliteStore.apply_json``'s two arrays, or None when a value is not text
    that sqlite keeps whole (not UTF-8, or with a NUL)."""
    try:
        puts = orjson.dumps([(table, key, _text(value)) for (table, key), value
                             in changes.items() if value is not None])
    except ValueError:
        return None
    deletes = orjson.dumps([row for row, value in changes.items() if value is None])
    return puts, deletes


class RedoLog:
    """The redo log at ``path``, held by this process (an exclusive ``flock``: one writer)."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd: int | None = fd
        self.size = os.fstat(fd).st_size

    @classmethod
    def open(cls, path: str | Path) -> RedoLog:
        """Open (create) and lock the log; ``StateError`` when another live process holds it."""
        redo = cls.try_open(path)
        if redo is None:
            raise StateError(f"store {path}: another live process writes this store (its redo "
                             f"log is locked); one process per store")
        return redo

    @classmethod
    def try_open(cls, path: str | Path) -> RedoLog | None:
        """Open (create) and lock the log, or None when another live process holds it."""
        path = Path(path)
        existed = path.exists()
        fd = try_lock(path)
        if fd is None:
            return None
        if not existed:  # the new name must survive a power loss too
            _sync_dir(path.parent)
        return cls(path, fd)

    def _open_fd(self) -> int:
        if self._fd is None:
            raise StateError(f"redo log {self.path}: closed")
        return self._fd

    def read(self) -> list[Changes]:
        """Every whole record, oldest first; a torn last one is cut off the file."""
        fd = self._open_fd()
        data = os.pread(fd, self.size, 0)
        records, good = _parse(data, self.path)
        if good < len(data):
            log.warning("store %s: the redo log's last record was torn by a crash (%d bytes, "
                        "never acknowledged); cut off", self.path, len(data) - good)
            os.ftruncate(fd, good)
            os.fsync(fd)
            self.size = good
        return records

    def append(self, puts: bytes, deletes: bytes, *, base64_rows: bytes | None = None) -> None:
        """One group, durable when this returns: the two ``apply_json`` arrays, or (for a group
        with a value that is not text) ``base64_rows`` from ``base64_changes``."""
        fd = self._open_fd()
        if base64_rows is not None:
            payload = _BASE64 + base64_rows
        else:
            payload = b"".join((_JSON, len(puts).to_bytes(4, "little"), puts, deletes))
        record = _HEADER.pack(len(payload), zlib.crc32(payload)) + payload
        try:
            written = os.pwrite(fd, record, self.size)
            if written != len(record):
                raise OSError(f"redo log {self.path}: short write ({written} of "
                              f"{len(record)} bytes)")
            os.fdatasync(fd)
        except BaseException:  # not acknowledged: do not let a later open replay it
            with contextlib.suppress(OSError):
                os.ftruncate(fd, self.size)
            raise
        self.size += len(record)

    def reset(self) -> None:
        """Empty the log (what it held is durable elsewhere: the caller's checkpoint)."""
        fd = self._open_fd()
        os.ftruncate(fd, 0)
        os.fsync(fd)
        self.size = 0

    @property
    def closed(self) -> bool:
        return self._fd is None

    def close(self) -> None:
        """Close and release the lock (the file stays: what it holds is replayed next time)."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)


def base64_changes(changes: Mapping[tuple[str, str], bytes | None]) -> bytes:
    """A group with values that are not text, for ``RedoLog.append(base64_rows=...)``."""
    return orjson.dumps([(table, key, None if value is None else base64.b64encode(value).decode())
                         for (table, key), value in changes.items()])


def merge(records: list[Changes]) -> Changes:
    """The records as one set of changes: the last writer of each row wins, as applying them
    one by one would."""
    merged: Changes = {}
    for record in records:
        merged.update(record)
    return merged


def read_redo(path: str | Path) -> list[Changes]:
    """The whole records of the redo log at ``path`` (none if there is no file), without
    locking or changing it: a reader beside a live writer."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        return []
    return _parse(data, Path(path))[0]


def _parse(data: bytes, path: Path) -> tuple[list[Changes], int]:
    records: list[Changes] = []
    at = 0
    end = len(data)
    while at < end:
        if end - at < _HEADER.size:
            break  # a torn header
        length, crc = _HEADER.unpack_from(data, at)
        stop = at + _HEADER.size + length
        if stop > end:
            break  # torn: the record runs past the end of the file
        payload = data[at + _HEADER.size:stop]
        if zlib.crc32(payload) != crc or not payload:
            if stop == end:
                break  # the last record, torn (its pages reached the disk only in part)
            raise StateError(f"store {path}: the redo log is damaged at byte {at} (a record "
                             f"whose checksum fails, followed by more records); refusing to "
                             f"start rather than lose or skip acknowledged writes")
        try:
            records.append(_decode(payload))
        except (ValueError, TypeError, IndexError) as exc:
            raise StateError(f"store {path}: the redo log's record at byte {at} does not "
                             f"decode ({exc}); refusing to start") from exc
        at = stop
    return records, at


def _decode(payload: bytes) -> Changes:
    kind = payload[:1]
    changes: Changes = {}
    if kind == _JSON:
        split = 5 + int.from_bytes(payload[1:5], "little")
        for table, key, text in orjson.loads(payload[5:split]):
            changes[(table, key)] = text.encode()
        for table, key in orjson.loads(payload[split:]):
            changes[(table, key)] = None
    elif kind == _BASE64:
        for table, key, value in orjson.loads(payload[1:]):
            changes[(table, key)] = None if value is None else base64.b64decode(value)
    else:
        raise ValueError(f"unknown record kind {kind!r}")
    return changes


def _text(value: bytes) -> str:
    """``value`` as text that sqlite turns back into the same bytes: UTF-8 without NUL (sqlite's
    text functions stop at a NUL); ``ValueError`` (``UnicodeDecodeError`` is one) otherwise."""
    if b"\x00" in value:
        raise ValueError("a NUL byte")
    return value.decode()


def _sync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
