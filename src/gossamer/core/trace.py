"""The trace: one flat schema shared by every runtime and the pipeline, defined here once.

A row is a plain tuple in ``COLUMNS`` order (cheap to make at 10,000 nodes); ``TraceRow`` is the
named view for readers. Sinks receive rows; the Parquet sink lives in ``gossamer.core.traceio``,
the segment sink of real processes in ``gossamer.core.segments``.

Two clocks stamp each row. ``t`` is run time: seconds since the run (simulator) or the writing
process (network) started, good for durations inside one process. ``wall`` is seconds since the
Unix epoch, the one clock that rows of different processes share: on a network it is
``time.time()`` when the row was made; in the simulator it is the run's fixed ``wall_epoch``
(0.0 unless chosen) plus virtual time, so a simulated trace stays the same for the same seed and
a latency measured on ``wall`` equals the one measured on ``t``. ``wall`` is last in the row
(added after the others: older trace files lack it, and readers fill it with null).
"""

from __future__ import annotations

import abc
from collections.abc import Iterable
from typing import Any, NamedTuple

import orjson

__all__ = [
    "COLUMNS",
    "COLUMN_TYPES",
    "SCHEMA_VERSION",
    "MemorySink",
    "NullSink",
    "Row",
    "TraceRow",
    "TraceSink",
    "encode_info",
]


class TraceRow(NamedTuple):
    run: str
    t: float
    node: str
    layer: str
    event: str
    msg: str | None = None
    origin: str | None = None
    peer: str | None = None
    key: str | None = None
    seq: int | None = None
    size: int | None = None
    info: str | None = None
    wall: float | None = None


#: column name -> Arrow/Spark type name, in row order (ARCHITECTURE.md "Trace")
COLUMN_TYPES: dict[str, str] = {
    "run": "string",
    "t": "float64",
    "node": "string",
    "layer": "string",
    "event": "string",
    "msg": "string",
    "origin": "string",
    "peer": "string",
    "key": "string",
    "seq": "int64",
    "size": "int32",
    "info": "string",
    "wall": "float64",
}
COLUMNS: tuple[str, ...] = tuple(COLUMN_TYPES)
#: the version of ``COLUMN_TYPES``, stored with analysis settings: 1 before ``wall``, 2 with it
SCHEMA_VERSION = 2
assert TraceRow._fields == COLUMNS, "TraceRow and COLUMN_TYPES must list the same columns"

Row = tuple[Any, ...]


def encode_info(info: dict[str, Any]) -> str | None:
    """The ``info`` column: small JSON with sorted keys, or None when empty."""
    if not info:
        return None
    return orjson.dumps(info, option=orjson.OPT_SORT_KEYS).decode()


class TraceSink(abc.ABC):
    """Where rows go. ``flush`` makes buffered rows durable; ``close`` flushes and ends."""

    @abc.abstractmethod
    def append(self, row: Row) -> None:
        """Take one row (a tuple in ``COLUMNS`` order)."""

    def extend(self, rows: Iterable[Row]) -> None:
        for row in rows:
            self.append(row)

    @abc.abstractmethod
    def flush(self) -> None:
        """Make everything appended so far durable."""

    def close(self) -> None:
        self.flush()

    @property
    def enabled(self) -> bool:
        """False for sinks that keep nothing, so callers can skip building rows."""
        return True


class MemorySink(TraceSink):
    """Keeps rows in a list (tests, determinism checks, small runs)."""

    def __init__(self) -> None:
        self.rows: list[Row] = []

    def append(self, row: Row) -> None:
        self.rows.append(row)

    def flush(self) -> None:
        """Rows are already in memory; nothing is buffered elsewhere."""

    def named(self) -> list[TraceRow]:
        return [TraceRow(*row) for row in self.rows]


class NullSink(TraceSink):
    """Drops every row (benchmarks)."""

    def append(self, row: Row) -> None:
        """Rows are discarded by design."""

    def flush(self) -> None:
        """Nothing is kept, so nothing to flush."""

    @property
    def enabled(self) -> bool:
        return False
