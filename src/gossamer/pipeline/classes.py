"""A class-data archive for the Spark driver's JVM (AppCDS, JDK 13 and later): the classes that
an analysis loads (Spark, Catalyst, Parquet, ...), written once by a JVM that ran one and mapped
by every later driver at its start instead of being found, loaded and verified again. It cuts
the fixed cost of ``gossamer analyze`` on a small trace (the JVM's start and its first queries:
``BENCHMARKS.md``, "Where a small analysis spends its time").

``scripts/setup.sh`` builds it (``build()``: a small simulated run analysed in a JVM started
with ``-XX:ArchiveClassesAtExit``) into this environment
(``sys.prefix``/share/gossamer), named after the pyspark version, its jars and the Java binary,
so another Spark or Java never maps it. ``get_spark`` maps it for local masters when it is there
whole: its size is recorded after it was moved in place, and a file of another size is not
used (a JVM that maps a truncated archive dies). ``$GOSSAMER_SPARK_CLASSES=off`` turns it off.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import tempfile
from pathlib import Path

__all__ = ["ARCHIVE_ENV", "archive_path", "build", "java_options"]

ARCHIVE_ENV = "GOSSAMER_SPARK_CLASSES"
#: how long the archiving JVM may take to write its archive once the analysis is done
_EXIT_WAIT = 600.0


def _java_binary() -> str:
    home = os.environ.get("JAVA_HOME")
    found = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    return os.path.realpath(found) if found else ""


def archive_path() -> Path:
    """Where this environment's archive lives (named after pyspark and Java)."""
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    key = hashlib.sha256(f"{pyspark.__version__}|{os.path.realpath(jars)}|"
                         f"{_java_binary()}".encode()).hexdigest()[:16]
    return Path(sys.prefix) / "share" / "gossamer" / f"spark-classes-{key}.jsa"


def _size_path(archive: Path) -> Path:
    return archive.with_suffix(".size")


def java_options() -> str:
    """The driver's JVM options that map the archive, or "" (none built, turned off, or not
    the size recorded when it was built)."""
    if os.environ.get(ARCHIVE_ENV, "").strip().lower() == "off":
        return ""
    archive = archive_path()
    try:
        whole = int(_size_path(archive).read_text()) == archive.stat().st_size
    except (OSError, ValueError):
        return ""
    # an archive the JVM cannot use (another classpath, say) is left aside without a word
    return f"-XX:SharedArchiveFile={archive} -Xshare:auto -Xlog:cds*=off" if whole else ""


def build() -> Path:
    """Analyse a small simulated run in a JVM that writes the classes it loaded at its exit,
    then move the archive in place and record its size. Returns the archive's path."""
    from pyspark import SparkContext

    from ..core.traceio import ParquetSink, trace_path
    from ..services.pubsub.experiment import PubSubRunOptions, run_pubsub_sim
    from .analysis import analyze
    from .spark import get_spark

    archive = archive_path()
    archive.parent.mkdir(parents=True, exist_ok=True)
    scratch = archive.with_name(f".{archive.name}.{os.getpid()}.tmp")
    with tempfile.TemporaryDirectory(prefix="gossamer-classes-") as tmp:
        options = PubSubRunOptions(nodes=6, mode="scribe", publishes_per_node=3, seed=1,
                                   run="classes")
        sink = ParquetSink(trace_path(tmp, "classes", "sim"))
        run_pubsub_sim(options, sink)
        sink.close()
        # (the JVM lists every class it cannot archive: signed jars, old class files)
        spark = get_spark(quiet=True, map_classes=False,
                          java_options=f"-XX:ArchiveClassesAtExit={scratch} -Xlog:cds*=off")
        analyze(spark, tmp, out_dir=Path(tmp) / "analysis")
        spark.stop()
        gateway = SparkContext._gateway
        proc = getattr(gateway, "proc", None)
        if gateway is not None:
            gateway.shutdown()
        SparkContext._gateway = None
        SparkContext._jvm = None
        if proc is not None:  # the JVM exits on its stdin's end, and writes the archive then
            if proc.stdin is not None:
                proc.stdin.close()
            proc.wait(timeout=_EXIT_WAIT)
    if not scratch.is_file() or scratch.stat().st_size == 0:
        scratch.unlink(missing_ok=True)
        raise RuntimeError(f"the JVM wrote no class archive at {scratch}")
    os.replace(scratch, archive)
    size = _size_path(archive)
    size_scratch = size.with_name(f".{size.name}.{os.getpid()}.tmp")
    size_scratch.write_text(str(archive.stat().st_size))
    os.replace(size_scratch, size)
    return archive

