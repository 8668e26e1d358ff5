"""The one place that builds the SparkSession, for local runs and clusters alike.

Local masters get small shuffle partitions, the venv's Python for workers and quiet JVM logs;
on a cluster only what the caller passes (``--conf``) is added to the session timezone.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path

from pyspark.sql import SparkSession

from . import classes
from .errors import PipelineError

__all__ = ["DEFAULT_MASTER", "SMALL_TRACE_ROWS", "default_master", "get_spark", "parse_conf",
           "tuned_for"]

DEFAULT_MASTER = "local[*]"

# Spark's WARN lines would bury the summary; errors still show (or, quiet, nothing: the
# caller reports a failure in one line). The repl logger line keeps Spark from announcing its
# own default level on startup.
_LOG4J2 = """\
rootLogger.level = {level}
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
logger.repl.name = org.apache.spark.repl.Main
logger.repl.level = {level}
logger.submit.name = org.apache.spark.deploy.SparkSubmit
logger.submit.level = {level}
logger.gateway.name = org.apache.spark.api.python.PythonGatewayServer
logger.gateway.level = {level}
"""


def _log_config(level: str) -> Path:
    text = _LOG4J2.replace("{level}", level)
    path = Path(tempfile.gettempdir()) / f"gossamer-spark-log4j2-{level}.properties"
    if not path.is_file() or path.read_text() != text:
        path.write_text(text)
    return path


def _local_cores(master: str) -> int:
    inside = master[len("local["):-1] if master.startswith("local[") else "1"
    if inside.startswith("*") or not inside.split(",")[0].isdigit():
        return os.cpu_count() or 2
    return max(1, int(inside.split(",")[0]))


def default_master() -> str | None:
    """``local[*]``, unless spark-submit started this driver: then None, its ``--master``."""
    return None if "PYSPARK_GATEWAY_PORT" in os.environ else DEFAULT_MASTER


#: overrides the local JVM's heap ceiling (``2g``, ``1536m``): for a machine that runs
#: several analyses at once (the test suite sets it)
DRIVER_MEMORY_ENV = "GOSSAMER_SPARK_DRIVER_MEMORY"


def _local_driver_memory() -> str:
    """The local JVM's heap ceiling (not an allocation): ``$GOSSAMER_SPARK_DRIVER_MEMORY``, else
    a third of this machine's memory, between 1 and 16 GiB (Spark's 1g default runs out on
    1,000-node experiments' traces)."""
    chosen = os.environ.get(DRIVER_MEMORY_ENV, "").strip()
    if chosen:
        if not re.fullmatch(r"[1-9][0-9]*[mg]", chosen):
            raise PipelineError(f"${DRIVER_MEMORY_ENV} must be like 2g or 1536m, got {chosen!r}")
        return chosen
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return "2g"
    return f"{max(1024, min(total // 3 >> 20, 16 << 10))}m"


def parse_conf(pairs: list[str] | None) -> dict[str, str]:
    """``["k=v", ...]`` from the command line into a dict; a pair without ``=`` is an error."""
    conf: dict[str, str] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise PipelineError(f"--conf expects KEY=VALUE, got {pair!r}")
        conf[key.strip()] = value
    return conf


def get_spark(
    master: str | None = DEFAULT_MASTER,
    conf: Mapping[str, str] | None = None,
    *,
    app_name: str = "gossamer",
    quiet: bool = False,
    java_options: str = "",
    map_classes: bool = True,
) -> SparkSession:
    """The SparkSession for a job (an existing one is reused, as ``getOrCreate`` does).

    ``master`` None keeps the master spark-submit chose. Everything runs in UTC. For
    ``local`` masters: shuffle partitions scale with the cores (Spark's 200 would be 200 tiny
    tasks per shuffle), workers run this interpreter, and the JVM logs only errors; ``quiet``:
    nothing at all, from its start on (a JVM that cannot start included: the caller reports
    the failure in one line). ``conf`` wins over every default here. A local driver's JVM
    maps this environment's class archive when it was built (``classes``; not with
    ``map_classes`` False) and takes ``java_options`` too.
    """
    if master is not None and not master.strip():
        raise PipelineError("the Spark master must be non-empty (e.g. local[*] or spark://h:7077)")
    settings: dict[str, str] = {
        "spark.sql.session.timeZone": "UTC",
        # every query's plan is rendered as a string (the SQL listener's description); an
        # analysis's plans over many layer groups render to gigabytes of text, which ran a
        # 3 GiB heap out of memory: past this length the text is cut, the plan is not
        "spark.sql.maxPlanStringLength": str(256 << 10),
        # pyspark's Python worker concatenates pandas frames in a way pandas deprecates: a
        # warning per batch of applyInPandasWithState (``analyze --follow``), about pyspark's
        # code, not ours; unless asked for (--debug), the workers do not print them
        **({} if not quiet else {"spark.executorEnv.PYTHONWARNINGS": "ignore::FutureWarning"}),
    }
    if master is not None and master.startswith("local"):
        cores = _local_cores(master)
        settings.update({
            "spark.sql.shuffle.partitions": str(max(2, 2 * cores)),
            "spark.default.parallelism": str(max(2, cores)),
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.driver.extraJavaOptions": " ".join(filter(None, (
                f"-Dlog4j2.configurationFile=file:{_log_config('off' if quiet else 'error')}",
                classes.java_options() if map_classes else "", java_options))),
            # local mode runs everything in the driver's JVM (see _local_driver_memory)
            "spark.driver.memory": _local_driver_memory(),
            # and smaller input splits keep each cached block well under the heap
            "spark.sql.files.maxPartitionBytes": str(32 << 20),
        })
        # workers must import gossamer: the interpreter running this code has it installed
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    settings.update(conf or {})
    # what the caller chose is never re-tuned by ``tuned_for``
    settings[_GIVEN] = ",".join(sorted(conf or {}))
    builder = SparkSession.builder.appName(app_name)
    if master is not None:
        builder = builder.master(master)
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("OFF" if quiet else "ERROR")
    return spark


#: a local analysis of at most this many bytes of trace files is "small" to its JVM
#: (``analysis_jvm_options``)
SMALL_ANALYSIS_BYTES = 16 << 20

#: a small analysis's driver plans small queries for a few seconds: C2's compiling costs more
#: on a 2-core machine than its code saves, so C1 only, with the serial collector (2,452
#: rows: 10.9-11.6 s in all, against 13.9-14.1 s with C2 and the parallel collector; 1M
#: rows, 12 MB: 28.0 s against 30.0 s)
SMALL_ANALYSIS_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"

#: a larger one is throughput: C2, and the parallel collector instead of G1, whose
#: concurrent work took CPU from the tasks (2.5M rows, 30 MB: 40.5 s against 51 s with G1
#: and 45.4 s with C1 only; 10M rows, 116 MB: 74.7-75.2 s against 87.9-93.2 s with G1)
LARGE_ANALYSIS_JVM_OPTIONS = "-XX:+UseParallelGC"


def analysis_jvm_options(trace_bytes: int) -> str:
    """``get_spark``'s ``java_options`` for a local analysis of ``trace_bytes`` bytes of trace
    files (BENCHMARKS.md, *Pipeline*)."""
    return (SMALL_ANALYSIS_JVM_OPTIONS if trace_bytes <= SMALL_ANALYSIS_BYTES
            else LARGE_ANALYSIS_JVM_OPTIONS)


_GIVEN = "spark.gossamer.given"  # the keys the caller set (``conf``), comma-separated

#: a trace of at most this many rows is analysed "small": see ``tuned_for``
SMALL_TRACE_ROWS = 500_000

#: for a small trace a query's fixed costs, not its rows, are its time: compiling generated
#: code for every stage (Janino, tens to hundreds of ms each), re-planning every stage
#: adaptively (AQE: a job per shuffle), one task per shuffle partition. Interpreted operators
#: and fixed plans do the same work on a few thousand rows in a fraction of the time (a
#: 2,000-row trace: 2.5x less wall time, with the lineage cuts of the analysis)
_SMALL_TRACE_SQL = {
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
    "spark.sql.adaptive.enabled": "false",
    "spark.sql.shuffle.partitions": "1",
}


def overlap_workers(trace_rows: int) -> int:
    """How many driver threads start an analysis's independent actions (``Overlap``): two for
    a trace of at most ``SMALL_TRACE_ROWS`` rows (planning-bound), else one."""
    return 2 if trace_rows <= SMALL_TRACE_ROWS else 1


@contextlib.contextmanager
def tuned_for(spark: SparkSession, trace_rows: int) -> Iterator[None]:
    """Within this block the session's SQL settings suit a trace of ``trace_rows`` rows: for
    one up to ``SMALL_TRACE_ROWS``, ``_SMALL_TRACE_SQL`` (except what the caller of
    ``get_spark`` set); larger ones keep the session's. The previous values come back after
    it."""
    if trace_rows > SMALL_TRACE_ROWS:
        yield
        return
    given = set(filter(None, spark.sparkContext.getConf().get(_GIVEN, "").split(",")))
    changed = {key: value for key, value in _SMALL_TRACE_SQL.items() if key not in given}
    before: dict[str, str | None] = {key: spark.conf.get(key, None) for key in changed}
    for key, value in changed.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, old in before.items():
            if old is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, old)
