"""Extract: the trace schema as Spark sees it, and trace files read into one DataFrame.

The schema comes from ``gossamer.core.trace.COLUMN_TYPES`` (defined once); ``ROW`` is the extra
column the pipeline adds: each row's position in its file, for "by t, then row order".
"""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ..core.trace import COLUMN_TYPES, COLUMNS
from .errors import PipelineError

__all__ = [
    "MEMBERSHIP_EVENTS",
    "ROW",
    "closed_trace_files",
    "is_closed_parquet",
    "load_trace",
    "membership_changes",
    "trace_schema",
    "with_row_order",
]

ROW = "row"
#: events that change whether a node is up, and so who is expected to deliver
MEMBERSHIP_EVENTS = ("join", "leave", "crash", "recover")

_SPARK_TYPES: dict[str, T.DataType] = {
    "string": T.StringType(),
    "float64": T.DoubleType(),
    "int64": T.LongType(),
    "int32": T.IntegerType(),
}
_PARQUET_MAGIC = b"PAR1"


def trace_schema() -> T.StructType:
    """``COLUMN_TYPES`` as a Spark schema, every column nullable like the Arrow one."""
    return T.StructType([T.StructField(name, _SPARK_TYPES[kind], True)
                         for name, kind in COLUMN_TYPES.items()])


def with_row_order(trace: DataFrame) -> DataFrame:
    """Add ``row`` (increasing in file order) unless the trace already has it.

    ``monotonically_increasing_id`` grows with the partition index and with the position in a
    partition; Spark keeps a file's splits in offset order, so within one file (one node, or
    one simulated run) larger means later.
    """
    if ROW in trace.columns:
        return trace
    return trace.withColumn(ROW, F.monotonically_increasing_id())


def membership_changes(trace: DataFrame) -> DataFrame:
    """(run, node, t, row, event): join/leave/crash/recover rows, the downs up to the run's end.

    The end of a run is its last row that is not a membership change. Later ``leave`` and
    ``crash`` rows, like the ``leave`` every node of a real deployment records when it shuts
    down, happen after everything there was to deliver and do not make a node "down at the
    end". Later ``join`` and ``recover`` rows still count: a node that first joins then owes
    nothing, and a session that starts then ends the one before it (seed 003's workload marks
    a healed tree so, maybe after every other row).
    """
    trace = with_row_order(trace)
    membership = F.col("event").isin(list(MEMBERSHIP_EVENTS))
    ends = trace.filter(~membership).groupBy("run").agg(F.max("t").alias("run_end"))
    changes = trace.filter(membership & F.col("node").isNotNull())
    return (changes.join(ends, "run", "left")
            .filter(F.col("run_end").isNull() | (F.col("t") <= F.col("run_end"))
                    | F.col("event").isin("join", "recover"))
            .select("run", "node", "t", ROW, "event"))


def is_closed_parquet(path: Path) -> bool:
    """True once a Parquet file has its footer: a writer that died mid-run leaves none."""
    try:
        size = path.stat().st_size
        if size < 12:
            return False
        with path.open("rb") as handle:
            head = handle.read(4)
            handle.seek(-4, 2)
            return head == _PARQUET_MAGIC and handle.read(4) == _PARQUET_MAGIC
    except OSError:
        return False


def closed_trace_files(run_dir: str | Path) -> tuple[list[Path], list[Path]]:
    """(closed, unfinished) Parquet files under ``RUN_DIR/trace/<run>/``."""
    root = Path(run_dir) / "trace"
    files = sorted(root.glob("*/*.parquet")) if root.is_dir() else []
    closed = [f for f in files if is_closed_parquet(f)]
    return closed, [f for f in files if f not in set(closed)]


def load_trace(spark: SparkSession, run_dir: str | Path) -> DataFrame:
    """Every closed trace file under ``RUN_DIR/trace`` as one DataFrame, with ``row``."""
    closed, _unfinished = closed_trace_files(run_dir)
    if not closed:
        raise PipelineError(f"no finished trace files (*.parquet) under {Path(run_dir) / 'trace'}")
    frame = spark.read.schema(trace_schema()).parquet(*(str(f) for f in closed))
    return with_row_order(frame.select(*COLUMNS))
