"""Live checking: FIFO, duplicates, causal order and reliability as Spark Structured Streaming
over the completed trace segments a deployment writes (``gossamer analyze --follow DIR``).

The source is Spark's file stream source (``binaryFile``) over the completed segments
(``PART-NNNNNN.seg``, renamed into place whole: ``gossamer.core.segments``), decoded from Arrow
IPC into trace rows. One stateful operator (``applyInPandasWithState``) keeps, per node, what
each origin's deliveries need to be judged (highest seq, the seqs still missing below it, the
latest membership changes) and, per message, who delivered it until a grace period after its
publish has passed (a processing-time timeout). A micro-batch sees only its new rows and that
state; nothing is checked twice. The driver judges who was owed a message (membership and
subscriptions, learnt from the operator's small records) and prints each violation.

What a violation is follows the batch checks (``checks``: the same rules, the same detail
texts); docs/live-checking.md lists where live checking is narrower.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ..core.segments import SEGMENT_NAME, decode_segment
from ..core.traceio import SCHEMA
from .check_rows import CAUSAL_PREFIX, FIFO_AGAIN, FIFO_GAP, FIFO_REORDERED, OWED_DETAIL
from .checks import CheckConfig
from .errors import PipelineError
from .schema import (
    MEMBERSHIP_EVENTS,
    ROW,
    RUNTIME_LAYERS,
    SUBSCRIPTION_EVENTS,
    TOPIC_LAYERS,
    UP_EVENTS,
)
from .settings import read_run_settings

__all__ = ["LIVE_CHECKS", "LiveCheck", "LiveJudge", "LiveViolation", "follow", "segment_rows"]

#: the checks that run live (the others need the whole run: ``gossamer analyze``)
LIVE_CHECKS = ("reliability", "duplicates", "fifo", "causal")
#: per node and layer: message ids without origin and seq remembered for the duplicates check
RECENT_MESSAGES = 10_000
#: per node, layer and origin: the message ids of the latest seqs delivered (a seq delivered
#: again as another message breaks FIFO; as the same message it is a duplicate)
SEQ_MESSAGES = 1_000
#: per node, layer and origin: ranges of seqs still missing below the highest one
MISSING_RANGES = 4_096
#: per shard: messages waiting for their grace period to end
PENDING_MESSAGES = 100_000
#: the messages of a layer are judged in this many groups (a Python call per group and batch)
MESSAGE_SHARDS = 8
_ROW_SCHEMA = pa.schema([*SCHEMA, pa.field(ROW, pa.int64())])
_SEGMENT_BITS = 32  # row = segment index << 32 | position in the segment

_INPUT = ("layer", "node", "event", "msg", "origin", "seq", "key", "t", "at", ROW, "info")
OUTPUT = T.StructType([
    T.StructField("check", T.StringType()),
    T.StructField("run", T.StringType()),
    T.StructField("layer", T.StringType()),
    T.StructField("node", T.StringType()),
    T.StructField("msg", T.StringType()),
    T.StructField("origin", T.StringType()),
    T.StructField("seq", T.LongType()),
    T.StructField("key", T.StringType()),
    T.StructField("t", T.DoubleType()),
    T.StructField("at", T.DoubleType()),
    T.StructField("detail", T.StringType()),
    T.StructField("nodes", T.ArrayType(T.StringType())),
    T.StructField("context", T.StringType()),
])
#: what Spark's binaryFile source yields (a stream must name it)
_BINARY_FILE = T.StructType([
    T.StructField("path", T.StringType(), False),
    T.StructField("modificationTime", T.TimestampType(), False),
    T.StructField("length", T.LongType(), False),
    T.StructField("content", T.BinaryType(), True),
])
_STATE = T.StructType([T.StructField("blob", T.BinaryType())])
_COLUMNS = [field.name for field in OUTPUT]


# -- the source: completed segments as trace rows ------------------------------------------


def _decode(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Rows of ``binaryFile`` records (path, content) of completed segments, with ``row``:
    the segment's index and the row's position in it, so a part's rows sort in file order."""
    for batch in batches:
        for path, content in zip(batch.column("path").to_pylist(),
                                 batch.column("content").to_pylist(), strict=True):
            match = SEGMENT_NAME.match(path.rsplit("/", 1)[-1])
            if match is None or content is None:
                continue
            table, _torn = decode_segment(content)  # a sealed torn tail: its whole records
            if not table.num_rows:
                continue
            base = int(match["index"]) << _SEGMENT_BITS
            rows = pa.array(range(base, base + table.num_rows), pa.int64())
            yield from table.append_column(ROW, rows).to_batches()


def segment_rows(spark: SparkSession, directory: str | Path) -> DataFrame:
    """A streaming DataFrame of the trace rows in the completed segments under
    ``directory`` (any depth): those present now, then each one as it is renamed into place.
    A segment compacted away before it was listed is skipped."""
    files = (spark.readStream.format("binaryFile").schema(_BINARY_FILE)
             .option("pathGlobFilter", "*.seg")
             .option("recursiveFileLookup", "true")
             .option("ignoreMissingFiles", "true")
             .load(str(Path(directory).absolute())))
    # a few segments a second: one task decodes them (Spark would pack four to eight small
    # files in a task and start a task, a Python worker round trip, per pack)
    return files.select("path", "content").coalesce(1).mapInArrow(
        _decode, T.StructType.fromJson(_spark_schema_json()))


@functools.cache
def _spark_schema_json() -> dict[str, Any]:
    from pyspark.sql.pandas.types import from_arrow_schema

    schema: dict[str, Any] = from_arrow_schema(_ROW_SCHEMA).jsonValue()
    return schema


# -- the stateful operator -----------------------------------------------------------------


def _record(check: str, run: str, **fields: Any) -> dict[str, Any]:
    """One output row (every column present: pandas would make a missing one NaN)."""
    return {**dict.fromkeys(_COLUMNS), "check": check, "run": run, **fields}


def _holds(origin: dict[str, Any], seq: int) -> bool:
    """The node delivered ``seq`` of this origin before (below the highest, not missing)."""
    if seq > origin["high"]:
        return False
    return not any(lo <= seq <= hi for lo, hi in origin["missing"])


def _judged_seq(origin: dict[str, Any], seq: int) -> bool:
    """False for a seq below what the bounded state still remembers (see MISSING_RANGES)."""
    floor: int = origin["floor"]
    return seq > floor


def _take(origin: dict[str, Any], seq: int) -> None:
    """Record the first delivery of ``seq``."""
    if seq > origin["high"]:
        if seq > origin["high"] + 1:
            origin["missing"].append([origin["high"] + 1, seq - 1])
            if len(origin["missing"]) > MISSING_RANGES:
                origin["floor"] = origin["missing"].pop(0)[1]
        origin["high"] = seq
        return
    kept: list[list[int]] = []
    for lo, hi in origin["missing"]:
        if lo <= seq <= hi:
            kept.extend(r for r in ([lo, seq - 1], [seq + 1, hi]) if r[0] <= r[1])
        else:
            kept.append([lo, hi])
    origin["missing"] = kept


def _node_step(run: str, node: str, rows: list[dict[str, Any]], blob: dict[str, Any] | None,
               ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Judge one node's new rows against its state: FIFO per origin, duplicates, causal order;
    pass on its membership and subscription changes (the driver needs them)."""
    state = blob or {"origins": {}, "recent": {}, "changes": {}}
    out: list[dict[str, Any]] = []
    if blob is None:
        out.append(_record("seen", run, node=node, at=min(r["at"] for r in rows)))
    for row in sorted(rows, key=lambda r: (r["t"], r[ROW])):
        event, layer, at = row["event"], row["layer"], row["at"]
        if event in MEMBERSHIP_EVENTS:
            state["changes"][layer] = [at, row[ROW], event]
            out.append(_record("member", run, node=node, layer=layer, at=at, detail=event))
            continue
        if event in SUBSCRIPTION_EVENTS and row["key"] is not None:
            out.append(_record("subscription", run, node=node, key=row["key"], at=at,
                               detail=event))
            continue
        if event != "deliver":
            continue
        found = dict(run=run, node=node, layer=layer, msg=row["msg"], origin=row["origin"],
                     seq=row["seq"], t=row["t"], at=at)
        origin, seq = row["origin"], row["seq"]
        if origin is None or seq is None:
            if row["msg"] is not None:
                recent = state["recent"].setdefault(layer, [])
                if row["msg"] in recent:
                    out.append(_record("duplicates", detail=f"delivered again in layer {layer}",
                                       **found))
                else:
                    recent.append(row["msg"])
                    del recent[:-RECENT_MESSAGES]
            continue
        seq = int(seq)
        per_layer = state["origins"].setdefault(layer, {})
        past = _causal_past(row, per_layer, node)
        if past:
            out.append(_record("causal", detail=CAUSAL_PREFIX + "; ".join(past), **found))
        mine = per_layer.setdefault(origin, {"high": 0, "missing": [], "floor": 0,
                                             "previous": None, "msgs": {}})
        if not _judged_seq(mine, seq):
            continue
        if _holds(mine, seq):
            first = mine["msgs"].get(str(seq))
            if first is not None and row["msg"] is not None and first != row["msg"]:
                out.append(_record("fifo", detail=FIFO_AGAIN % seq, **found))
            elif row["msg"] is not None:
                out.append(_record("duplicates", detail=f"delivered again in layer {layer}",
                                   **found))
            continue
        if seq != mine["high"] + 1:
            gap = seq > mine["high"]
            detail = (FIFO_GAP % (seq, mine["high"] + 1) if gap
                      else FIFO_REORDERED % (seq, mine["high"]))
            context = {"gap": gap, "previous": mine["previous"],
                       "changes": {k: v for k, v in state["changes"].items()
                                   if (v[0], v[1]) < (at, row[ROW])}}
            out.append(_record("fifo", detail=detail, context=orjson.dumps(context).decode(),
                               **found))
        _take(mine, seq)
        mine["previous"] = [at, row[ROW]]
        if row["msg"] is not None:
            mine["msgs"][str(seq)] = row["msg"]
            if len(mine["msgs"]) > SEQ_MESSAGES:
                del mine["msgs"][next(iter(mine["msgs"]))]
    return out, state


def _causal_past(row: dict[str, Any], per_layer: dict[str, Any], node: str) -> list[str]:
    """What of the delivery's causal past (``info.vector``) the node had not delivered before
    it, as in ``checks.causal_violations`` (a node's own messages are its own past)."""
    info = row["info"]
    if not info or '"vector"' not in info:
        return []
    try:
        vector = orjson.loads(info).get("vector")
    except orjson.JSONDecodeError:
        return []
    if not isinstance(vector, dict):
        return []
    missing = []
    for past_origin, count in vector.items():
        needed = count - 1 if past_origin == row["origin"] else count
        if not isinstance(needed, int) or needed < 1 or past_origin == node:
            continue
        past = per_layer.get(past_origin)
        if past is None or not _holds(past, needed):
            missing.append(f"{past_origin}:{needed} not delivered before it")
    return sorted(missing)


def _messages_step(run: str, layer: str, rows: list[dict[str, Any]],
                   blob: dict[str, Any] | None, now_ms: int, grace_ms: int,
                   ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Who delivered each pending message of one shard so far; the messages whose grace
    period is over (``grace_ms`` after their publish was seen) go to the judge. A message
    whose publish never shows is forgotten after four grace periods; past
    ``PENDING_MESSAGES`` the earliest due are judged at once (memory stays bounded)."""
    pending: dict[str, dict[str, Any]] = blob["pending"] if blob else {}
    for row in rows:
        entry = pending.setdefault(row["msg"], {"publish": None, "nodes": [],
                                                "due": now_ms + 4 * grace_ms})
        if row["event"] == "publish" and entry["publish"] is None:
            entry["publish"] = [row["node"], row["origin"], row["seq"], row["key"], row["t"],
                                row["at"]]
            entry["due"] = now_ms + grace_ms
        elif row["event"] == "deliver" and row["node"] not in entry["nodes"]:
            entry["nodes"].append(row["node"])
    by_due = sorted(pending, key=lambda m: pending[m]["due"])
    overflow = max(0, len(pending) - PENDING_MESSAGES)
    out = []
    for index, msg in enumerate(by_due):
        entry = pending[msg]
        if entry["due"] > now_ms and index >= overflow:
            break
        del pending[msg]
        if entry["publish"] is not None:
            publisher, origin, seq, key, t, at = entry["publish"]
            out.append(_record("reliability", run, layer=layer, node=publisher, msg=msg,
                               origin=origin, seq=seq, key=key, t=t, at=at,
                               nodes=entry["nodes"]))
    return out, {"pending": pending}


def _step(key: tuple[Any, ...], frames: Iterator[Any], group_state: Any, *,
          grace_ms: int) -> Iterator[Any]:
    """The operator's function for one group: a node's rows, or a shard of messages."""
    import pandas as pd  # type: ignore[import-untyped]

    kind, run, layer, name = key
    blob = orjson.loads(group_state.get[0]) if group_state.exists else None
    rows = [] if group_state.hasTimedOut else [
        r for frame in frames for r in frame.to_dict("records")]
    for row in rows:
        for column in ("msg", "origin", "key", "info", "seq"):
            if pd.isna(row[column]):
                row[column] = None
        if row["seq"] is not None:
            row["seq"] = int(row["seq"])
    if kind == "node":
        out, state = _node_step(run, name, rows, blob)
        group_state.update((orjson.dumps(state),))
    else:
        now = group_state.getCurrentProcessingTimeMs()
        out, state = _messages_step(run, layer, rows, blob, now, grace_ms)
        if state["pending"]:
            group_state.update((orjson.dumps(state),))
            due = min(entry["due"] for entry in state["pending"].values())
            group_state.setTimeoutDuration(max(1, due - now))
        else:
            group_state.remove()
    if out:
        yield pd.DataFrame(out, columns=_COLUMNS)


def live_findings(rows: DataFrame, *, grace: float) -> DataFrame:
    """The operator's output over streaming trace ``rows``: candidate violations per node,
    membership records, and messages whose grace period is over (``check`` says which)."""
    at = F.coalesce(F.col("wall"), F.col("t"))
    event = F.col("event")
    by_node = F.struct(F.lit("node").alias("kind"), F.lit("").alias("glayer"),
                       F.col("node").alias("name"))
    shard = F.pmod(F.xxhash64("msg"), F.lit(MESSAGE_SHARDS)).cast("string")
    by_message = F.when(event.isin("publish", "deliver") & F.col("msg").isNotNull(), F.struct(
        F.lit("messages").alias("kind"), F.col("layer").alias("glayer"), shard.alias("name")))
    keyed = rows.filter(F.col("node").isNotNull() & F.col("run").isNotNull()).select(
        "*", at.alias("at"), F.explode(F.filter(F.array(by_node, by_message),
                                                lambda k: k.isNotNull())).alias("k"))
    keyed = keyed.select("k.kind", "run", "k.glayer", "k.name", *_INPUT[:-1], F.when(
        event == "deliver", F.col("info")).alias("info"))
    return keyed.groupBy("kind", "run", "glayer", "name").applyInPandasWithState(
        functools.partial(_step, grace_ms=int(grace * 1000)), OUTPUT, _STATE, "append",
        "ProcessingTimeTimeout")


# -- the driver: who owed what, and the verdicts -------------------------------------------


@dataclasses.dataclass(frozen=True)
class LiveViolation:
    check: str
    run: str
    node: str
    msg: str | None
    origin: str | None
    seq: int | None
    detail: str
    #: the nodes a message was delivered at (reliability), else empty
    delivered: tuple[str, ...] = ()

    def line(self) -> str:
        what = f"msg {self.msg}" if self.msg is not None else "no msg id"
        if self.origin is not None:
            what += f" (origin {self.origin}" + (f", seq {self.seq})" if self.seq is not None
                                                 else ")")
        return f"{self.check} violated: run {self.run}, node {self.node}, {what}: {self.detail}"


class LiveJudge:
    """Turns the operator's records into violations, by each run's check settings
    (``config_for``). Holds per run the membership changes and subscriptions of its nodes."""

    def __init__(self, config_for: Callable[[str], CheckConfig], *, grace: float) -> None:
        self._config_for = config_for
        self.grace = grace
        self._changes: dict[tuple[str, str], list[tuple[float, str, str]]] = {}
        self._subscriptions: dict[tuple[str, str, str], list[tuple[float, str]]] = {}
        self._topic_runs: set[str] = set()

    def take(self, records: Sequence[Mapping[str, Any]]) -> list[LiveViolation]:
        """The violations among one micro-batch's records (membership first)."""
        found: list[LiveViolation] = []
        order = {"seen": 0, "member": 1, "subscription": 1}
        self._topic_runs.update(r["run"] for r in records if r.get("layer") in TOPIC_LAYERS)
        for record in sorted(records, key=lambda r: (order.get(r["check"], 2), r["at"] or 0)):
            check, run = record["check"], record["run"]
            if check == "seen":
                self._changes.setdefault((run, record["node"]), [])
            elif check == "member":
                self._changes.setdefault((run, record["node"]), []).append(
                    (record["at"], record["layer"], record["detail"]))
            elif check == "subscription":
                self._topic_runs.add(run)
                self._subscriptions.setdefault((run, record["key"], record["node"]), []).append(
                    (record["at"], record["detail"]))
            elif check == "reliability":
                found.extend(self._missing(record))
            elif self._applies(record):
                found.append(_violation(record))
        return found

    def _applies(self, record: Mapping[str, Any]) -> bool:
        config = self._config_for(record["run"])
        layer, check = record["layer"], record["check"]
        if config.layers is not None and layer not in config.layers:
            return False
        if check == "fifo":
            fifo = config.layers if config.fifo_layers is None else config.fifo_layers
            if fifo is not None and layer not in fifo:
                return False
            return not self._away_explains(record, config)
        if check == "causal":
            causal = config.causal_layers
            return causal is None or layer in causal
        return True

    def _away_explains(self, record: Mapping[str, Any], config: CheckConfig) -> bool:
        """A gap in a session layer after the node's membership changed since its previous
        delivery from the origin, or while it is away (``checks._without_session_gaps``)."""
        context = orjson.loads(record["context"] or "{}")
        if record["layer"] not in config.session_layers or not context.get("gap"):
            return False
        relevant = (*RUNTIME_LAYERS, *config.session_layers)
        changes = [tuple(v) for k, v in context["changes"].items() if k in relevant]
        if not changes:
            return False
        last = max(changes)
        previous = context["previous"]
        return previous is None or tuple(previous) < last[:2] or last[2] not in UP_EVENTS

    def _status(self, run: str, node: str, layers: Sequence[str]) -> list[tuple[float, str, str]]:
        return sorted(c for c in self._changes.get((run, node), []) if c[1] in layers)

    def _missing(self, record: Mapping[str, Any]) -> list[LiveViolation]:
        run, layer, at = record["run"], record["layer"], record["at"]
        config = self._config_for(run)
        if config.layers is not None and layer not in config.layers:
            return []
        publisher, origin = record["node"], record["origin"]
        membership = (*RUNTIME_LAYERS, *config.session_layers)
        if config.exempt_crashed_origins and not _judged(self._status(run, publisher,
                                                                      membership)):
            return []
        delivered = set(record["nodes"] or ())
        found = []
        for (node_run, node), _ in sorted(self._changes.items()):
            if node_run != run or node in delivered or node in (origin, publisher):
                continue
            changes = self._status(run, node, membership)
            if not _judged(changes) or not _up_at(changes, at):
                continue
            if layer in config.session_layers and any(
                    c[0] > at and c[2] in UP_EVENTS for c in changes):
                continue  # a later session: what was published before is not owed
            if (run in self._topic_runs and record["key"] is not None
                    and not self._subscribed(run, record["key"], node, at)):
                continue
            ending = "left cleanly later" if changes and changes[-1][2] == "leave" \
                else "is up"
            detail = OWED_DETAIL % (f"not delivered within {self.grace:g} s", publisher,
                                    record["t"], ending)
            found.append(LiveViolation("reliability", run, node, record["msg"], origin,
                                       record["seq"], detail, tuple(sorted(delivered))))
        return found

    def _subscribed(self, run: str, key: str, node: str, at: float) -> bool:
        before = [e for e in sorted(self._subscriptions.get((run, key, node), [])) if e[0] < at]
        return bool(before) and before[-1][1] == "subscribe"


def _judged(changes: Sequence[tuple[float, str, str]]) -> bool:
    """Up now, or left cleanly (``checks.member_status``): a crashed node owes nothing."""
    if not changes:
        return True
    _, layer, event = changes[-1]
    return event in UP_EVENTS or (event == "leave" and layer in RUNTIME_LAYERS)


def _up_at(changes: Sequence[tuple[float, str, str]], at: float) -> bool:
    """Up at ``at``: up from the start unless its first change is a join."""
    before = [c for c in changes if c[0] < at]
    if before:
        return before[-1][2] in UP_EVENTS
    return not changes or changes[0][2] != "join"


def _violation(record: Mapping[str, Any]) -> LiveViolation:
    seq = record["seq"]
    return LiveViolation(record["check"], record["run"], record["node"], record["msg"],
                         record["origin"], None if seq is None else int(seq), record["detail"])


# -- running it ----------------------------------------------------------------------------


@dataclasses.dataclass
class LiveCheck:
    """A running live check: its streaming query and the violations printed so far."""

    query: Any
    checkpoint: Path
    violations: list[LiveViolation]
    batches: int = 0
    stopping: bool = False

    def stop(self) -> None:
        """Stop the query and remove its checkpoint (state is not kept across runs)."""
        self.stopping = True
        try:
            self.query.stop()
        finally:
            shutil.rmtree(self.checkpoint, ignore_errors=True)


def follow(
    spark: SparkSession,
    directory: str | Path,
    *,
    overrides: Mapping[str, Any] | None = None,
    use_stored_settings: bool = True,
    grace: float = 10.0,
    trigger: float = 0.5,
    on_violation: Callable[[LiveViolation], None] | None = None,
    on_batch: Callable[[int], None] | None = None,
) -> LiveCheck:
    """Start checking the segments under ``directory`` (a run directory) live: each
    violation goes to ``on_violation`` as soon as its micro-batch ends (one every ``trigger``
    seconds at most). Each run is judged by its stored settings (re-read when a new run
    shows up) with ``overrides`` on top. Returns at once; ``LiveCheck.stop()`` ends it."""
    directory = Path(directory)
    if not directory.is_dir():
        raise PipelineError(f"--follow {directory}: no such directory (give the run directory "
                            "the deployment writes its trace segments to)")
    for name, value in (("grace period", grace), ("trigger interval", trigger)):
        if not 0 < value < 86_400:
            raise PipelineError(f"the {name} must be between 0 and 86,400 seconds, got "
                                f"{value:g}")
    fields = {f.name for f in dataclasses.fields(CheckConfig)}
    unknown = set(overrides or {}) - fields
    if unknown:
        raise PipelineError(f"unknown check settings {sorted(unknown)}")
    stored: dict[str, CheckConfig] = {}

    def config_for(run: str) -> CheckConfig:
        if run not in stored:
            settings = read_run_settings(directory) if use_stored_settings else {}
            for name, found in settings.items():
                stored.setdefault(name, found.checks)
            base = stored.get(run, CheckConfig())
            stored[run] = dataclasses.replace(base, **(overrides or {}))
        return stored[run]

    judge = LiveJudge(config_for, grace=grace)
    checkpoint = Path(tempfile.mkdtemp(prefix="gossamer-follow-"))
    live = LiveCheck(query=None, checkpoint=checkpoint, violations=[])

    def each_batch(batch: DataFrame, epoch: int) -> None:
        try:
            records = [row.asDict() for row in batch.collect()]
        except Exception:
            if live.stopping:
                # the stop interrupted this batch's job: nothing to report. Raised, the
                # error (a Java stack inside a Python one) reaches Spark's stream thread,
                # whose pattern for it recurses once per character: a StackOverflowError
                return
            raise
        for violation in judge.take(records):
            live.violations.append(violation)
            if on_violation is not None:
                on_violation(violation)
        live.batches += 1
        if on_batch is not None:
            on_batch(epoch)

    findings = live_findings(segment_rows(spark, directory), grace=grace)
    # the state's partitions are fixed when the query starts: one per core (each is a task
    # and a Python call in every micro-batch, data or not), not the batch jobs' shuffle size
    shuffle = spark.conf.get("spark.sql.shuffle.partitions") or "200"
    spark.conf.set("spark.sql.shuffle.partitions", str(min(
        int(shuffle), max(1, spark.sparkContext.defaultParallelism))))
    try:
        live.query = (findings.writeStream.foreachBatch(each_batch)
                      .option("checkpointLocation", str(checkpoint))
                      .trigger(processingTime=f"{int(trigger * 1000)} milliseconds")
                      .queryName(f"gossamer-follow-{_slug(directory)}-{int(time.time())}")
                      .start())
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", shuffle)
    return live


def _slug(directory: Path) -> str:
    return re.sub(r"[^a-z0-9]+", "-", directory.name.lower()).strip("-") or "dir"
