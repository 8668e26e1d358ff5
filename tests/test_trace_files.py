"""``inspect_trace_files``: what is wrong with a trace file is found from its footer, before
Spark reads it, so ``--allow-partial`` can leave it out and the error names it."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from gossamer.core.traceio import SCHEMA, trace_path
from gossamer.pipeline.schema import inspect_trace_files

ROW = {"run": "r", "t": 1.0, "node": "a", "layer": "fifo", "event": "publish", "msg": "a:1",
       "origin": "a", "peer": None, "key": None, "seq": 1, "size": 10, "info": None,
       "wall": 1.0}


def write(path: Path, schema: pa.Schema, row: dict[str, object]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist([row], schema=schema), path)
    return path


def test_a_column_of_the_wrong_type_is_a_problem_named_with_its_file(tmp_path: Path) -> None:
    good = write(trace_path(tmp_path, "r", "a"), SCHEMA, ROW)
    # a narrower integer reads as the trace's long: no problem
    narrow = SCHEMA.set(SCHEMA.get_field_index("seq"), pa.field("seq", pa.int32()))
    fine = write(trace_path(tmp_path, "r", "b"), narrow, ROW)
    # seq as text: Spark would fail on the whole trace, or cast it to nulls
    text = SCHEMA.set(SCHEMA.get_field_index("seq"), pa.field("seq", pa.string()))
    bad = write(trace_path(tmp_path, "r", "c"), text, {**ROW, "seq": "1"})
    files = inspect_trace_files(tmp_path)
    assert files.good == [good, fine]
    [(path, problem)] = files.problems
    assert path == bad
    assert problem == "not the trace schema: column seq is string, not int64"
