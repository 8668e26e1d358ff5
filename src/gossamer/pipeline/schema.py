"""Extract: the trace schema as Spark sees it, and trace files read into one DataFrame.

The schema comes from ``gossamer.core.trace.COLUMN_TYPES`` (defined once); ``ROW`` is the extra
column the pipeline adds: each row's position in its file, for "by t, then row order".
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import threading
from collections.abc import Callable, Hashable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ..core.trace import COLUMN_TYPES, COLUMNS
from ..core.traceio import SCHEMA as TRACE_SCHEMA
from .errors import PipelineError, cut_at_word

__all__ = [
    "MEMBERSHIP_EVENTS",
    "ROW",
    "RUNTIME_LAYERS",
    "UP_EVENTS",
    "TraceFiles",
    "checkpoint",
    "clock",
    "closed_trace_files",
    "continuous_lives",
    "inspect_trace_files",
    "is_closed_parquet",
    "is_held",
    "load_trace",
    "members_of",
    "membership_changes",
    "node_events",
    "read_trace",
    "release",
    "restored_deliveries",
    "shared",
    "sharing_intermediates",
    "trace_schema",
    "unreadable_files",
    "with_row_order",
]

ROW = "row"
#: events that change whether a node is up, and so who is expected to deliver
MEMBERSHIP_EVENTS = ("join", "leave", "crash", "recover")
#: the layers whose membership rows are a node's process starting and stopping: the simulator
#: (``sim``: join, leave, crash, recover) and the network runtime (``net``: join at start,
#: leave at a clean exit; a killed process writes nothing). A protocol's own ``join``/``leave``
#: (a topic tree's, a session's) is no membership change unless it is a session layer.
RUNTIME_LAYERS = ("sim", "net")
#: membership events after which a node is up
UP_EVENTS = ("join", "recover")
#: a node's subscription to a topic (the row's ``key``) starts and ends with these events
SUBSCRIPTION_EVENTS = ("subscribe", "unsubscribe")
#: a run with a row in one of these layers delivers keyed messages by topic, to the subscribers
#: only, even when nobody subscribed in it (then nobody owes its publishes)
TOPIC_LAYERS = ("pubsub",)

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


_DECLARED_TYPES = {"string": T.StringType(), "long": T.LongType(), "double": T.DoubleType()}


def table_schema(columns: str) -> T.StructType:
    """A table's schema written out (``"run string, rounds long, p50 double"``; nullable
    columns): what a metric table has, known without building its plan."""
    fields = []
    for column in columns.split(","):
        name, kind = column.split()
        fields.append(T.StructField(name, _DECLARED_TYPES[kind], True))
    return T.StructType(fields)


# -- intermediates that several checks and metrics need ------------------------------------------

#: (what, id(trace), arguments) -> (trace, its persisted result), while a job shares them
_SHARED: contextvars.ContextVar[dict[tuple[Hashable, ...], tuple[DataFrame, DataFrame]] | None] = (
    contextvars.ContextVar("gossamer_shared_intermediates", default=None))


@contextlib.contextmanager
def sharing_intermediates(*, release_at_end: bool = False) -> Iterator[None]:
    """Within this block, what ``shared`` builds (the membership timeline, who owed what) is
    built once per trace and arguments and checkpointed locally (computed, kept by the
    executors, its lineage cut), so the checks and metrics that need the same one compute it
    once and plan only a scan of it: cached plans that keep their lineage made every later
    plan grow with it, and planning took more time than running.

    A checkpoint cannot be recomputed once freed, so what was built in the block is freed
    when the outermost block ends only with ``release_at_end`` (the caller uses nothing built
    in it afterwards: ``analyze`` keeps plain rows); otherwise Spark frees it once no
    DataFrame refers to it (``evaluate``'s violations may be counted after its block)."""
    if _SHARED.get() is not None:
        yield
        return
    cache: dict[tuple[Hashable, ...], tuple[DataFrame, DataFrame]] = {}
    token = _SHARED.set(cache)
    try:
        yield
    finally:
        _SHARED.reset(token)
        if release_at_end:
            for _trace, result in cache.values():
                release(result)


def shared(what: str, trace: DataFrame, arguments: tuple[Hashable, ...],
           build: Callable[[], DataFrame]) -> DataFrame:
    """``build()``, or within ``sharing_intermediates`` the one built before for the same
    ``trace`` (the same DataFrame object: it is kept, so its id stays its own) and
    ``arguments``."""
    cache = _SHARED.get()
    if cache is None:
        return build()
    key = (what, id(trace), *arguments)
    with _SHARED_BUILD:  # built once when two threads of one analysis need it (``Overlap``)
        if key not in cache:
            cache[key] = (trace, checkpoint(build()))
        return cache[key][1]


#: held while an intermediate is built (reentrant: one may be built of another)
_SHARED_BUILD = threading.RLock()


def checkpoint(frame: DataFrame) -> DataFrame:
    """``frame`` computed now and kept by the executors, as a scan of what it computed: later
    plans over it do not carry (and re-plan) its lineage. Local: a lost executor loses it, and
    a job that needs it again then fails (an analysis is one driver's short life)."""
    return frame.localCheckpoint(eager=True)


def _checkpointed_rdd(frame: DataFrame) -> Any:
    plan = frame._jdf.queryExecution().analyzed()
    return plan.rdd() if plan.nodeName() == "LogicalRDD" else None


def is_held(frame: DataFrame) -> bool:
    """Whether ``frame`` is a ``checkpoint`` whose data the executors still keep."""
    rdd = _checkpointed_rdd(frame)
    return rdd is not None and bool(rdd.getStorageLevel().isValid())


def release(frame: DataFrame) -> None:
    """Free what ``checkpoint(frame)`` (or ``persist``) keeps; ``frame`` must not be used
    after."""
    rdd = _checkpointed_rdd(frame)
    if rdd is not None:
        rdd.unpersist(False)
    frame.unpersist()


def with_row_order(trace: DataFrame) -> DataFrame:
    """Add ``row`` (increasing in file order) unless the trace already has it.

    ``monotonically_increasing_id`` grows with the partition index and with the position in a
    partition; Spark keeps a file's splits in offset order, so within one file (one node, or
    one simulated run) larger means later.
    """
    if ROW in trace.columns:
        return trace
    return trace.withColumn(ROW, F.monotonically_increasing_id())


#: a node whose process start (``wall - t``) moves forward by more than this, between two of
#: its rows in wall order, was restarted there: the second row begins a new life
RESTART_GAP = 0.5


def continuous_lives(trace: DataFrame) -> DataFrame:
    """``t`` made one clock per node across its process lives.

    A real process's ``t`` counts from its own start, so a node killed and restarted writes
    ``t`` from 0 again and a check that orders a node's rows "by t, then row" would interleave
    its two lives. A row's process start is ``wall - t``: constant through one life (up to
    clock drift), and larger by at least the previous life's length after a restart. Rows of
    a node whose start moved by more than ``RESTART_GAP`` are split into lives in wall order
    (lives never overlap in time) and each later life's ``t`` is shifted by how much later it
    started than the node's first life, so ``t`` keeps counting from the first start. Nodes
    with one life, rows without ``wall`` and simulated runs (``wall`` is the run's epoch plus
    ``t``) are unchanged; ``wall`` is never changed.
    """
    if "wall" not in trace.columns:
        return trace
    started = _process_start()
    timed = F.col("wall").isNotNull() & F.col("node").isNotNull()
    restarted = F.broadcast(
        trace.filter(timed).groupBy("run", "node").agg(_start_spread().alias("spread"))
        .filter(F.col("spread") > RESTART_GAP).select("run", "node"))
    theirs = trace.join(restarted, ["run", "node"], "left_semi")
    others = trace.join(restarted, ["run", "node"], "left_anti")
    in_order = Window.partitionBy("run", "node").orderBy("wall", ROW)
    before = F.lag(started).over(in_order)
    life_start = theirs.withColumn(
        "_life", F.when(F.col("wall").isNotNull()
                        & (before.isNull() | (started - before > RESTART_GAP)), started))
    life = F.max("_life").over(in_order.rowsBetween(Window.unboundedPreceding, 0))
    first = F.min("_life").over(Window.partitionBy("run", "node"))
    shifted = life_start.withColumn(
        "t", F.when(F.col("wall").isNotNull(), F.col("t") + (life - first))
        .otherwise(F.col("t"))).drop("_life")
    return others.unionByName(shifted.select(*trace.columns))


def _process_start() -> Column:
    """When a row's process started, on the wall clock (``wall - t``; null without ``wall``)."""
    return F.col("wall") - F.col("t")


def _start_spread() -> Column:
    """Over a node's rows: how far its process start moved; by more than ``RESTART_GAP``, the
    node was restarted (rows without ``wall`` do not count)."""
    return F.max(_process_start()) - F.min(_process_start())


#: the event of a delivery a restarted node's store held at its start (``CausalDelivery``'s
#: ``trace_restored``): its ``deliver`` row may have died with the killed process
RESTORED = "restored"
_DELIVERY_KEY = ["run", "node", "layer", "msg"]


def restored_deliveries(trace: DataFrame) -> DataFrame:
    """``restored`` rows read as deliveries where the trace lacks them: a ``restored`` row
    becomes the ``deliver`` row of its (run, node, layer, msg) when there is none (the first
    such row, by t then row, if several restarts restored it); the others are dropped."""
    restored = trace.filter(F.col("event") == RESTORED)
    traced = (trace.filter(F.col("event") == "deliver").select(*_DELIVERY_KEY)
              .join(F.broadcast(restored.select(*_DELIVERY_KEY)), _DELIVERY_KEY, "left_semi"))
    first = Window.partitionBy(*_DELIVERY_KEY).orderBy("t", ROW)
    untraced = (restored.join(traced, _DELIVERY_KEY, "left_anti")
                .withColumn("_nth", F.row_number().over(first)).filter(F.col("_nth") == 1)
                .withColumn("event", F.lit("deliver")).select(*trace.columns))
    return trace.filter(F.col("event") != RESTORED).unionByName(untraced)


def clock() -> Column:
    """The clock every node of a run shares: ``wall`` (a real process's ``t`` starts when the
    process does), else ``t`` (a row of a file older than ``wall``). In a simulation ``wall``
    is ``t`` plus a constant, so comparisons come out the same."""
    return F.coalesce(F.col("wall"), F.col("t"))


def node_events(trace: DataFrame) -> DataFrame:
    """Per (run, node, layer, event): ``rows``, ``size_sum`` (of ``size``), ``t_min``,
    ``t_max``, ``at_max`` (the latest on the shared clock, see ``clock``) and ``no_wall``
    (rows without ``wall``).

    One pass over the trace, a few rows per node: the per-node and per-run counts (members,
    node load, messages per operation, the run overview, a run's end) are read from it
    instead of each scanning the trace (``shared``: within an analysis it is built once).
    Its aggregates are all of fixed width, so Spark aggregates by hashing (a ``max`` of a
    struct would sort every row)."""
    return shared("node_events", trace, (), lambda: _node_events(trace))


def _node_events(trace: DataFrame) -> DataFrame:
    return trace.groupBy("run", "node", "layer", "event").agg(
        F.count(F.lit(1)).alias("rows"),
        F.sum("size").alias("size_sum"),
        F.min("t").alias("t_min"), F.max("t").alias("t_max"),
        F.max(clock()).alias("at_max"),
        F.count(F.when(F.col("wall").isNull(), 1)).alias("no_wall"),
    )


def members_of(trace: DataFrame, *, session_layers: Sequence[str] = ()) -> DataFrame:
    """(run, node): every node of the trace: each node with a row outside layer ``sim`` (the
    simulator's own rows name node ``sim``) or a membership row (of ``RUNTIME_LAYERS`` and
    ``session_layers``)."""
    membership = (F.col("event").isin(list(MEMBERSHIP_EVENTS))
                  & F.col("layer").isin(*RUNTIME_LAYERS, *session_layers))
    return (node_events(trace).filter(F.col("node").isNotNull()
                                      & (membership | (F.col("layer") != "sim")))
            .select("run", "node").distinct())


def membership_changes(trace: DataFrame, *, session_layers: Sequence[str] = ()) -> DataFrame:
    """(run, node, layer, event, at, row): the membership changes of each node, on the shared
    clock (``at``, see ``clock``); its downs up to the run's end.

    Membership rows are those of ``RUNTIME_LAYERS`` and of ``session_layers`` (a session that
    begins and ends, like seed 003's logins). The end of a run is its latest row that is not a
    membership change: later ``leave`` and ``crash`` rows, like the ``leave`` the last process
    of a real deployment records when it shuts down, happen after everything there was to
    deliver and do not make a node "down at the end". Later ``join`` and ``recover`` rows
    still count: a node that first joins then owes nothing, and a session that starts then
    ends the one before it (seed 003's workload marks a healed tree so, maybe after every
    other row).

    A real process killed with SIGKILL records no ``crash``, so one is inferred (layer ``net``,
    right after its last row: that row, a delivery say, was made while it was up): for a node
    of the network runtime that ``join``s again while up (restarted), and for one whose rows
    stop without a ``leave`` while another node of its run still leaves cleanly later (the run
    was stopped, and this process had died before).
    """
    return shared("membership_changes", trace, (tuple(session_layers),),
                  lambda: _membership_changes(with_row_order(trace), tuple(session_layers)))


def _membership_changes(trace: DataFrame, session_layers: Sequence[str]) -> DataFrame:
    at = clock()
    event, layer = F.col("event"), F.col("layer")
    membership = (event.isin(list(MEMBERSHIP_EVENTS)) & F.col("node").isNotNull()
                  & layer.isin(*RUNTIME_LAYERS, *session_layers))
    changes = trace.filter(membership).select(
        "run", "node", "layer", "event", at.alias("at"), ROW)
    activity = ~event.isin(list(MEMBERSHIP_EVENTS)) & F.col("node").isNotNull() & (layer != "sim")
    ends = (node_events(trace).filter(activity).groupBy("run")
            .agg(F.max("at_max").alias("run_end")))

    runtime = changes.filter(F.col("layer").isin(*RUNTIME_LAYERS))
    in_order = Window.partitionBy("run", "node").orderBy("at", ROW)
    # restarted: a net join while up (the previous runtime change brought the node up)
    rejoins = (runtime.select("*", F.lag("event").over(in_order).alias("before"))
               .filter((F.col("layer") == "net") & (F.col("event") == "join")
                       & F.col("before").isin(*UP_EVENTS))
               .select("run", "node", F.col("at").alias("rejoin_at"),
                       F.col(ROW).alias("rejoin_row")))
    node_rows = trace.filter(F.col("node").isNotNull()).select(
        "run", "node", at.alias("at"), ROW)
    died = (node_rows.join(F.broadcast(rejoins), ["run", "node"])
            .filter(F.col("at") < F.col("rejoin_at"))
            .groupBy("run", "node", "rejoin_at", "rejoin_row")
            .agg(F.max(F.struct("at", ROW)).alias("last"))
            .select("run", "node", F.lit("net").alias("layer"), F.lit("crash").alias("event"),
                    F.col("last.at").alias("at"), _just_after(F.col(f"last.{ROW}"))))
    # stopped without leaving: the last runtime change brought a net node up, and a clean
    # leave of its run came after its last row
    final = runtime.groupBy("run", "node").agg(
        F.max_by("event", F.struct("at", ROW)).alias("final"),
        F.max(F.when(F.col("layer") == "net", 1).otherwise(0)).alias("net"))
    leaves = runtime.filter(F.col("event") == "leave").groupBy("run").agg(
        F.max("at").alias("last_leave"))
    up_on_net = final.filter((F.col("net") == 1) & F.col("final").isin(*UP_EVENTS)).select(
        "run", "node")
    # each such node's last row that is no membership change (only theirs are aggregated)
    active = (trace.filter(activity).join(F.broadcast(up_on_net), ["run", "node"], "left_semi")
              .groupBy("run", "node").agg(F.max(F.struct(at.alias("at"), F.col(ROW)))
                                          .alias("last")))
    vanished = (up_on_net.join(active, ["run", "node"]).join(leaves, "run")
                .filter(F.col("last.at") < F.col("last_leave"))
                .select("run", "node", F.lit("net").alias("layer"),
                        F.lit("crash").alias("event"), F.col("last.at").alias("at"),
                        _just_after(F.col(f"last.{ROW}"))))
    return (changes.unionByName(died).unionByName(vanished)
            .join(F.broadcast(ends), "run", "left")
            .filter(F.col("run_end").isNull() | (F.col("at") <= F.col("run_end"))
                    | F.col("event").isin(*UP_EVENTS))
            .drop("run_end"))


def _just_after(row: Column) -> Column:
    """The row order of an inferred change right after ``row`` (rows of one file are numbered
    in order, so at the same instant nothing of that node comes between)."""
    return (row + F.lit(1)).alias(ROW)


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


@dataclasses.dataclass(frozen=True)
class TraceFiles:
    """The trace files of a run directory: those that can be read, those that cannot (and
    why), and the trace columns some readable files lack (column -> those files)."""

    good: list[Path]
    problems: list[tuple[Path, str]]
    absent_columns: dict[str, list[Path]]
    rows: int = 0  # in the readable files, from their footers


def _file_problem(path: Path) -> str | None:
    """Why ``path`` is not a readable Parquet file, from its bytes and footer (cheap)."""
    try:
        size = path.stat().st_size
        with path.open("rb") as handle:
            head = handle.read(4)
            if size >= 8:
                handle.seek(-4, 2)
            tail = handle.read(4) if size >= 8 else b""
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    if size == 0:
        return "empty file (0 bytes)"
    if head != _PARQUET_MAGIC:
        return "not a Parquet file (it does not start with PAR1)"
    if tail != _PARQUET_MAGIC:
        return (f"truncated or damaged at its end: {size:,} bytes and no Parquet footer "
                "(its writer did not finish it, or it was cut short)")
    try:
        pq.read_metadata(path)
    except (pa.ArrowException, OSError) as exc:
        return f"corrupt Parquet footer ({_one_line(exc)})"
    return None


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    if not text:
        return type(exc).__name__
    return cut_at_word(text[0], 200)


_TRACE_TYPES = {field.name: field.type for field in TRACE_SCHEMA}


def _kind(kind: pa.DataType) -> str:
    """What a column holds, as far as reading it as a trace column goes (an int32 column
    reads as a long, a dictionary of strings as strings)."""
    if pa.types.is_dictionary(kind):
        kind = kind.value_type
    if pa.types.is_integer(kind):
        return "integer"
    if pa.types.is_floating(kind):
        return "float"
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return "string"
    if pa.types.is_null(kind):
        return "null"
    return str(kind)


def inspect_trace_files(run_dir: str | Path) -> TraceFiles:
    """Check every ``RUN_DIR/trace/<run>/*.parquet`` before Spark reads it: its footer, its
    metadata, and which trace columns it has (``wall`` may be missing: files older than it)."""
    root = Path(run_dir) / "trace"
    files = sorted(root.glob("*/*.parquet")) if root.is_dir() else []
    good: list[Path] = []
    rows = 0
    problems: list[tuple[Path, str]] = []
    absent: dict[str, list[Path]] = {}
    for path in files:
        problem = _file_problem(path)
        if problem is not None:
            problems.append((path, problem))
            continue
        try:
            footer = pq.read_metadata(path)
            arrow = footer.schema.to_arrow_schema()
            names = set(arrow.names)
        except (pa.ArrowException, OSError) as exc:
            problems.append((path, f"corrupt Parquet schema ({_one_line(exc)})"))
            continue
        if not names & set(COLUMNS):
            problems.append((path, "not a trace file: none of its columns is a trace column"))
            continue
        wrong = [f"{name} is {arrow.field(name).type}, not {_TRACE_TYPES[name]}"
                 for name in COLUMNS if name in names and _kind(arrow.field(name).type)
                 not in (_kind(_TRACE_TYPES[name]), "null")]
        if wrong:
            problems.append((path, f"not the trace schema: column {'; '.join(wrong)}"))
            continue
        good.append(path)
        rows += footer.num_rows
        for column in COLUMNS:
            if column not in names:
                absent.setdefault(column, []).append(path)
    return TraceFiles(good, problems, absent, rows)


def unreadable_files(files: Sequence[Path]) -> list[tuple[Path, str]]:
    """The files pyarrow cannot read whole (corrupt pages behind a sound footer), and why:
    looked for only after Spark failed to read the trace."""
    problems = []
    for path in files:
        try:
            pq.read_table(path)
        except (pa.ArrowException, OSError) as exc:
            problems.append((path, f"corrupt Parquet data ({_one_line(exc)})"))
    return problems


def _trace_sources(source: str | Path | Sequence[Path]) -> list[Path]:
    """The files to read: the given ones, or every closed trace file under
    ``RUN_DIR/trace``."""
    if isinstance(source, str | Path):
        closed, _unfinished = closed_trace_files(source)
        where = Path(source) / "trace"
    else:
        closed, where = list(source), Path("the given files")
    if not closed:
        raise PipelineError(f"no finished trace files (*.parquet) under {where}")
    return closed


def _scan(spark: SparkSession, files: Sequence[Path]) -> DataFrame:
    """The files as one DataFrame of the trace columns, with ``row``."""
    frame = spark.read.schema(trace_schema()).parquet(*(str(Path(f).absolute()) for f in files))
    return with_row_order(frame.select(*COLUMNS))


def _lives_and_restored(scanned: DataFrame) -> DataFrame:
    """``continuous_lives`` and ``restored_deliveries`` of a scan, its columns in the scan's
    order (the joins inside put their keys first)."""
    return restored_deliveries(continuous_lives(scanned)).select(*scanned.columns)


def _partitions(files: Sequence[Path]) -> int:
    return max(1, -(-_trace_bytes(files) // PARTITION_BYTES))


def load_trace(spark: SparkSession, source: str | Path | Sequence[Path]) -> DataFrame:
    """Trace files as one DataFrame, with ``row``: the given files, or every closed trace
    file under ``RUN_DIR/trace``. A column a file lacks reads as null. A restarted process's
    ``t`` is made to continue its first life's (``continuous_lives``), and the deliveries it
    restored from its store stand in for ``deliver`` rows its kill lost
    (``restored_deliveries``). ``read_trace`` is the same, computed once."""
    files = _trace_sources(source)
    trace = _lives_and_restored(_scan(spark, files))
    # the unions above add up their inputs' partitions (one per file, plus a shuffle's): on a
    # small trace every later stage would run that many near-empty tasks, and a task's fixed
    # cost, not its rows, would be the analysis's time
    return trace.coalesce(_partitions(files))


def read_trace(spark: SparkSession, source: str | Path | Sequence[Path]) -> DataFrame:
    """``load_trace``'s rows, computed once (a ``checkpoint``: ``release`` it when done).

    The files are scanned once: the scan is checkpointed, one aggregate over it says whether
    any node was restarted or any delivery restored, and only then are ``continuous_lives``
    and ``restored_deliveries`` applied (to the checkpoint, not the files) and checkpointed
    in its place; a trace with neither is the scan itself."""
    files = _trace_sources(source)
    partitions = _partitions(files)
    scanned = checkpoint(_scan(spark, files).coalesce(partitions))
    per_node = scanned.groupBy("run", "node").agg(
        _start_spread().alias("spread"),
        F.max(F.when(F.col("event") == RESTORED, 1).otherwise(0)).alias("restored"))
    facts = per_node.agg(
        F.max(F.when(F.col("node").isNotNull() & (F.col("spread") > RESTART_GAP), 1)
              .otherwise(0)).alias("restarted"),
        F.max("restored").alias("restored")).first()
    if facts is None or not (facts["restarted"] or facts["restored"]):
        return scanned
    try:
        return checkpoint(_lives_and_restored(scanned).coalesce(partitions))
    finally:
        release(scanned)


#: Parquet bytes of trace per partition of the loaded trace (about 300,000 rows)
PARTITION_BYTES = 8 << 20


def trace_dir_bytes(run_dir: str | Path) -> int:
    """How many bytes every file under ``RUN_DIR/trace`` takes (segments included; 0 when
    there is no such directory)."""
    root = Path(run_dir) / "trace"
    return _trace_bytes([path for path in root.rglob("*") if path.is_file()])


def _trace_bytes(files: Sequence[Path]) -> int:
    """How many bytes ``files`` take on disk (a file that vanished counts 0)."""
    total = 0
    for path in files:
        with contextlib.suppress(OSError):
            total += path.stat().st_size
    return total
