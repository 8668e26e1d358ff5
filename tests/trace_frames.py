"""Inline trace DataFrames for the pipeline tests: rows written by hand, in the trace schema."""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from typing import Any

import orjson
from pyspark.sql import Row

from gossamer.core import TraceRow
from gossamer.pipeline import VIOLATION_COLUMNS, trace_schema, with_row_order


class _SameAsT(enum.Enum):
    SAME_AS_T = "same as t"


#: ``row(wall=SAME_AS_T)`` (the default): ``wall`` equals ``t``, as in a simulation
SAME_AS_T = _SameAsT.SAME_AS_T


def row(
    t: float,
    node: str,
    event: str,
    *,
    layer: str = "fifo",
    msg: str | None = None,
    origin: str | None = None,
    peer: str | None = None,
    key: str | None = None,
    seq: int | None = None,
    size: int | None = None,
    info: dict[str, Any] | None = None,
    run: str = "r1",
    wall: float | _SameAsT | None = SAME_AS_T,
) -> TraceRow:
    """One row; ``wall`` is ``t`` unless given (None: a row of a file without the column)."""
    encoded = orjson.dumps(info, option=orjson.OPT_SORT_KEYS).decode() if info else None
    stamped = float(t) if wall is SAME_AS_T else wall
    return TraceRow(run, float(t), node, layer, event, msg, origin, peer, key, seq, size, encoded,
                    stamped)


def publish(t: float, origin: str, seq: int, **kw: Any) -> TraceRow:
    return row(t, origin, "publish", msg=f"{origin}:{seq}", origin=origin, seq=seq, **kw)


def deliver(t: float, node: str, origin: str, seq: int, **kw: Any) -> TraceRow:
    return row(t, node, "deliver", msg=f"{origin}:{seq}", origin=origin, seq=seq, **kw)


def frame(spark: Any, rows: Iterable[Sequence[Any]]) -> Any:
    """A cached trace DataFrame with ``row`` in list order (every check scans it several
    times; cached, the rows leave Python once)."""
    trace = spark.createDataFrame([tuple(r) for r in rows], trace_schema())
    return with_row_order(trace).cache()


def violations(rows: Iterable[tuple[Any, ...]]) -> list[Row]:
    """Expected violation rows (run, node, msg, origin, seq, detail), for assertDataFrameEqual
    (a list, so the expectation costs no Spark job)."""
    return [Row(**dict(zip(VIOLATION_COLUMNS, values, strict=True))) for values in rows]
