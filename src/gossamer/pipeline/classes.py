"""A class-data archive for the Spark driver's JVM (AppCDS, JDK 13 and later): the classes that
an analysis loads (Spark, Catalyst, Parquet, ...), written once by a JVM that ran one and mapped
by every later driver at its start instead of being found, loaded and verified again. It cuts
the fixed cost of ``gossamer analyze`` on a small trace (the JVM's start and its first queries:
``BENCHMARKS.md``, "Where a small analysis spends its time").

``scripts/setup.sh`` builds it (``warmup.build_class_archive()``: a small simulated run
analysed in a JVM started with ``-XX:ArchiveClassesAtExit``) into this environment
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
from pathlib import Path

__all__ = ["ARCHIVE_ENV", "archive_path", "java_options", "record_size"]

ARCHIVE_ENV = "GOSSAMER_SPARK_CLASSES"


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


def record_size(archive: Path) -> None:
    """Record ``archive``'s size once it is in place: from then on it is mapped."""
    size = _size_path(archive)
    scratch = size.with_name(f".{size.name}.{os.getpid()}.tmp")
    scratch.write_text(str(archive.stat().st_size))
    os.replace(scratch, size)
