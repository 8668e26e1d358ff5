"""What every Spark verb of the CLI shares: its ``--master``, ``--conf`` and ``--debug`` options,
and one line for a failure of Spark or its JVM instead of a Java stack."""

from __future__ import annotations

import argparse
import contextlib
import traceback

from rich.console import Console
from rich.markup import escape

from ..pipeline import DEFAULT_MASTER
from ..pipeline.errors import cut_at_word

__all__ = ["error_line", "is_spark_failure", "refused", "spark_arguments", "spark_failure"]


def spark_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--master", default=None,
                        help=f"Spark master (default {DEFAULT_MASTER}, or spark-submit's)")
    parser.add_argument("--conf", action="append", default=None, metavar="KEY=VALUE",
                        help="Spark configuration (repeatable)")
    parser.add_argument("--debug", action="store_true",
                        help="on an error, show the traceback and Spark's own logs")


def error_line(console: Console, message: str) -> None:
    """One line, never wrapped (a path in it stays whole)."""
    console.print(f"[red]error:[/] {escape(message)}", soft_wrap=True, highlight=False)


def refused(console: Console, args: argparse.Namespace, message: str) -> int:
    """The exit code 2 of a run that could not be done, with its one error line; under
    ``--debug`` the traceback of the exception being handled comes first (the code stays 2:
    ``--debug`` shows more, it does not change the outcome)."""
    if getattr(args, "debug", False):
        traceback.print_exc()
    error_line(console, message)
    return 2


def is_spark_failure(exc: BaseException) -> bool:
    return type(exc).__module__.split(".")[0] in ("py4j", "pyspark")


def spark_failure(exc: BaseException, what: str = "the analysis") -> str:
    """The first line of what Spark (or its JVM) said, without the Java stack."""
    text = getattr(exc, "desc", None) or str(exc)
    java = getattr(exc, "java_exception", None)  # py4j's: the JVM's own exception says why
    if java is not None:
        with contextlib.suppress(Exception):  # the JVM may be gone
            text = str(java.toString())
    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    first = cut_at_word(lines[0], 300) if lines else type(exc).__name__
    return f"Spark could not run {what}: {first} (--debug shows the traceback)"
