"""The Parquet trace sink and reader: schema, row groups, buffering, summaries."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gossamer.core import COLUMN_TYPES, COLUMNS, ConfigError, TraceRow
from gossamer.core.traceio import (
    SCHEMA,
    ParquetSink,
    read_trace,
    summarize,
    trace_files,
    trace_path,
)

W = 1_700_000_000.0
ROWS: list[tuple[object, ...]] = [
    ("r1", 0.0, "n000", "sim", "join", None, None, None, None, None, None, None, W),
    ("r1", 0.25, "n000", "fifo", "send", "n000:1", "n000", "n001", None, 1, 42, '{"type":"x"}',
     W + 0.25),
    ("r1", 0.5, "n001", "fifo", "recv", "n000:1", "n000", "n000", None, 1, 42, '{"type":"x"}',
     W + 0.5),
    ("r1", 0.5, "n001", "fifo", "deliver", "n000:1", "n000", None, "topic", 2**40, None, None,
     W + 0.5),
    ("r1", 1.75, "n001", "fifo", "send", "n001:1", "n001", "n000", None, 1, 7, None, W + 1.75),
]


def write(path: Path, rows: list[tuple[object, ...]], **kwargs: int) -> ParquetSink:
    sink = ParquetSink(path, **kwargs)
    sink.extend(rows)
    sink.close()
    return sink


def test_trace_path_layout_and_sanitizing(tmp_path: Path) -> None:
    assert trace_path(tmp_path, "run-1", "n000") == tmp_path / "trace" / "run-1" / "n000.parquet"
    assert trace_path(tmp_path, "a/b c", "x:y") == tmp_path / "trace" / "a_b_c" / "x_y.parquet"
    with pytest.raises(ConfigError):
        trace_path(tmp_path, "", "n0")
    with pytest.raises(ConfigError):
        trace_path(tmp_path, "r", "")


def test_read_trace_has_exact_schema_and_rows(tmp_path: Path) -> None:
    sink = write(trace_path(tmp_path, "r1", "sim"), ROWS)
    assert sink.rows_written == len(ROWS)
    table = read_trace(tmp_path)
    expected_types = [(name, pa.type_for_alias(kind)) for name, kind in COLUMN_TYPES.items()]
    assert [(field.name, field.type) for field in table.schema] == expected_types
    assert tuple(table.column_names) == COLUMNS
    assert [tuple(row.values()) for row in table.to_pylist()] == ROWS
    assert [TraceRow(**row) for row in table.to_pylist()] == [TraceRow(*r) for r in ROWS]


def test_flush_writes_row_groups_before_close(tmp_path: Path) -> None:
    path = tmp_path / "trace" / "r1" / "sim.parquet"
    sink = ParquetSink(path)
    sink.extend(ROWS[:2])
    assert sink.rows_written == 0
    assert not path.exists()
    sink.flush()
    assert sink.rows_written == 2
    assert path.exists()
    assert path.stat().st_size > 0
    sink.flush()  # nothing buffered: no empty row group
    sink.extend(ROWS[2:])
    sink.flush()
    assert sink.rows_written == len(ROWS)
    sink.close()
    metadata = pq.ParquetFile(path).metadata
    assert metadata.num_row_groups == 2
    assert [metadata.row_group(i).num_rows for i in range(2)] == [2, 3]
    assert [tuple(r.values()) for r in read_trace(tmp_path).to_pylist()] == ROWS


def test_buffer_rows_triggers_automatic_flushes(tmp_path: Path) -> None:
    path = tmp_path / "trace" / "r1" / "sim.parquet"
    sink = ParquetSink(path, buffer_rows=2)
    sink.append(ROWS[0])
    assert sink.rows_written == 0
    sink.append(ROWS[1])
    assert sink.rows_written == 2
    sink.extend(ROWS[2:])
    assert sink.rows_written == 4
    sink.close()
    assert sink.rows_written == 5
    metadata = pq.ParquetFile(path).metadata
    assert [metadata.row_group(i).num_rows for i in range(metadata.num_row_groups)] == [2, 2, 1]


def test_append_after_close_raises(tmp_path: Path) -> None:
    sink = write(tmp_path / "trace" / "r" / "sim.parquet", ROWS[:1])
    with pytest.raises(ConfigError):
        sink.append(ROWS[1])
    sink.close()  # closing twice is harmless
    assert read_trace(tmp_path).num_rows == 1


def test_close_without_rows_leaves_an_empty_valid_file(tmp_path: Path) -> None:
    ParquetSink(tmp_path / "trace" / "r" / "sim.parquet").close()
    table = read_trace(tmp_path)
    assert table.num_rows == 0
    assert tuple(table.column_names) == COLUMNS


def test_bad_buffer_rows(tmp_path: Path) -> None:
    with pytest.raises(ConfigError):
        ParquetSink(tmp_path / "x.parquet", buffer_rows=0)


def test_read_trace_without_files_raises(tmp_path: Path) -> None:
    assert trace_files(tmp_path) == []
    with pytest.raises(ConfigError):
        read_trace(tmp_path)


def test_read_trace_concatenates_parts_and_runs(tmp_path: Path) -> None:
    write(trace_path(tmp_path, "r1", "n000"), ROWS[:2])
    write(trace_path(tmp_path, "r1", "n001"), ROWS[2:])
    other = [("r2", 3.0, "n009", "sim", "crash", *([None] * 7), 3.0)]
    write(trace_path(tmp_path, "r2", "sim"), other)
    assert len(trace_files(tmp_path)) == 3
    rows = [tuple(r.values()) for r in read_trace(tmp_path).to_pylist()]
    assert sorted(rows, key=repr) == sorted([*ROWS, *other], key=repr)


def test_summarize(tmp_path: Path) -> None:
    write(trace_path(tmp_path, "r1", "sim"), ROWS)
    write(trace_path(tmp_path, "r2", "sim"), [("r2", 9.0, "n005", "sim", "crash",
                                               *([None] * 7), 9.0)])
    summary = summarize(read_trace(tmp_path))
    assert summary == {
        "rows": 6,
        "runs": ["r1", "r2"],
        "nodes": 3,
        "t_min": 0.0,
        "t_max": 9.0,
        "by_event": [
            ("fifo", "deliver", 1),
            ("fifo", "recv", 1),
            ("fifo", "send", 2),
            ("sim", "crash", 1),
            ("sim", "join", 1),
        ],
    }


def test_summarize_empty(tmp_path: Path) -> None:
    ParquetSink(tmp_path / "trace" / "r" / "sim.parquet").close()
    summary = summarize(read_trace(tmp_path))
    assert summary["rows"] == 0
    assert summary["by_event"] == []
    assert summary["t_min"] is None


def test_a_file_without_wall_reads_with_null_wall(tmp_path: Path) -> None:
    # a trace file written before the wall column existed
    old_schema = pa.schema([f for f in SCHEMA if f.name != "wall"])
    path = trace_path(tmp_path, "r0", "n000")
    path.parent.mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist([dict(zip(old_schema.names, r[:-1], strict=True))
                                         for r in ROWS[:2]], schema=old_schema), path)
    table = read_trace(tmp_path)
    assert table.schema == SCHEMA
    assert table["wall"].to_pylist() == [None, None]
    assert table["t"].to_pylist() == [0.0, 0.25]


def test_a_row_without_wall_is_refused(tmp_path: Path) -> None:
    sink = ParquetSink(tmp_path / "x.parquet")
    sink.append(ROWS[0][:-1])  # 12 values: a row builder that missed the column
    with pytest.raises(ValueError):
        sink.close()
