"""Trace rows on disk: a buffered Parquet writer and a reader.

Layout: ``RUN_DIR/trace/<run>/<part>.parquet``, one directory per run (the partition) and one
file per node (network runtime) or per run (simulator); beside them
``RUN_DIR/trace/<run>/analysis.json``, the analysis settings the run was made for (which
layers promise what), written by whoever makes the run and read by ``gossamer analyze``.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .errors import ConfigError
from .trace import COLUMN_TYPES, SCHEMA_VERSION, Row, TraceSink

__all__ = [
    "SCHEMA",
    "SETTINGS_FILE",
    "ParquetSink",
    "read_trace",
    "settings_path",
    "summarize",
    "trace_files",
    "trace_path",
    "write_settings",
]

#: the analysis settings of a run, beside its trace files
SETTINGS_FILE = "analysis.json"

_ARROW_TYPES = {"string": pa.string(), "float64": pa.float64(), "int64": pa.int64(),
                "int32": pa.int32()}
SCHEMA = pa.schema([pa.field(name, _ARROW_TYPES[kind]) for name, kind in COLUMN_TYPES.items()])
_SAFE = re.compile(r"[^A-Za-z0-9_.\-]")


def trace_path(run_dir: str | Path, run: str, part: str) -> Path:
    """Where the trace file of ``part`` (a node id or "sim") of ``run`` lives."""
    if not run or not part:
        raise ConfigError("run and part must be non-empty")
    return Path(run_dir) / "trace" / _SAFE.sub("_", run) / f"{_SAFE.sub('_', part)}.parquet"


def settings_path(run_dir: str | Path, run: str) -> Path:
    """Where the analysis settings of ``run`` live: beside its trace files."""
    return trace_path(run_dir, run, "x").with_name(SETTINGS_FILE)


def write_settings(run_dir: str | Path, run: str, settings: Mapping[str, Any]) -> Path:
    """Store the analysis settings a run was made for (``checks``: the check settings, see
    ``gossamer.pipeline.CheckConfig``; ``services``; ``replay``: the command that makes the
    run again), with the trace schema version. Written whole or not at all (several processes
    of one run may write the same settings)."""
    path = settings_path(run_dir, run)
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {"run": run, "schema_version": SCHEMA_VERSION, **settings}
    scratch = path.with_name(f".{SETTINGS_FILE}.{os.getpid()}.tmp")
    scratch.write_text(json.dumps(record, sort_keys=True, indent=1) + "\n", encoding="utf-8")
    os.replace(scratch, path)
    return path


class ParquetSink(TraceSink):
    """Buffers rows and writes them as row groups of one Parquet file.

    ``flush()`` writes the buffer as a row group (the simulator calls it when a node crashes,
    the network host on shutdown); ``close()`` flushes and finishes the file, which is only a
    valid Parquet file after ``close()``.
    """

    def __init__(self, path: str | Path, *, buffer_rows: int = 65_536) -> None:
        if buffer_rows < 1:
            raise ConfigError(f"buffer_rows must be >= 1, got {buffer_rows}")
        self.path = Path(path)
        self.buffer_rows = buffer_rows
        self._buffer: list[Row] = []
        self._writer: pq.ParquetWriter | None = None
        self._closed = False
        self.rows_written = 0

    def append(self, row: Row) -> None:
        if self._closed:
            raise ConfigError(f"trace sink {self.path} is closed")
        self._buffer.append(row)
        if len(self._buffer) >= self.buffer_rows:
            self.flush()

    def _open(self) -> pq.ParquetWriter:
        if self._writer is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._writer = pq.ParquetWriter(self.path, SCHEMA, compression="zstd")
        return self._writer

    def flush(self) -> None:
        if not self._buffer or self._closed:
            return
        rows, self._buffer = self._buffer, []
        columns = list(zip(*rows, strict=True))
        arrays = [pa.array(col, type=SCHEMA.field(i).type) for i, col in enumerate(columns)]
        self._open().write_table(pa.Table.from_arrays(arrays, schema=SCHEMA))
        self.rows_written += len(rows)

    def close(self) -> None:
        if self._closed:
            return
        self.flush()
        self._open().close()
        self._closed = True


def trace_files(run_dir: str | Path) -> list[Path]:
    root = Path(run_dir) / "trace"
    return sorted(root.rglob("*.parquet")) if root.is_dir() else []


def read_trace(run_dir: str | Path) -> pa.Table:
    """All trace rows under ``RUN_DIR/trace`` as one Arrow table with the trace schema."""
    files = trace_files(run_dir)
    if not files:
        raise ConfigError(f"no trace files under {Path(run_dir) / 'trace'}")
    return pa.concat_tables([read_trace_file(f) for f in files])


def read_trace_file(path: Path) -> pa.Table:
    """One trace file's rows; ``ConfigError`` naming it when it is damaged or not a trace."""
    try:
        return pq.read_table(path, schema=SCHEMA)
    except (pa.ArrowException, OSError) as exc:
        raise ConfigError(f"{path}: not a readable trace file ({exc})") from None


def summarize(table: pa.Table) -> dict[str, Any]:
    """Rows by (layer, event), runs, nodes and the time span of a trace table."""
    if table.num_rows == 0:
        return {"rows": 0, "runs": [], "nodes": 0, "t_min": None, "t_max": None, "by_event": []}
    grouped = table.group_by(["layer", "event"]).aggregate([("t", "count")])
    by_event = sorted(
        zip(grouped["layer"].to_pylist(), grouped["event"].to_pylist(),
            grouped["t_count"].to_pylist(), strict=True)
    )
    t = table["t"]
    return {
        "rows": table.num_rows,
        "runs": sorted(set(table["run"].to_pylist())),
        "nodes": len(set(table["node"].to_pylist())),
        "t_min": pc.min(t).as_py(),
        "t_max": pc.max(t).as_py(),
        "by_event": by_event,
    }
