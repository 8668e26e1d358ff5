"""Warming up this environment for analyses: the class-data archive of the Spark driver's JVM
(``classes``), built once by ``scripts/setup.sh``."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from pyspark import SparkContext

from ..core.traceio import ParquetSink, trace_path
from ..services.pubsub.experiment import PubSubRunOptions, run_pubsub_sim
from .analysis import analyze
from .classes import archive_path, record_size
from .spark import get_spark

__all__ = ["build_class_archive"]

#: how long the archiving JVM may take to write its archive once the analysis is done
_EXIT_WAIT = 600.0


def build_class_archive() -> Path:
    """Analyse a small simulated run in a JVM that writes the classes it loaded at its exit,
    then move the archive in place and record its size. Returns the archive's path."""
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
    record_size(archive)
    return archive

