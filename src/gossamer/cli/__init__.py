"""cli: the ``gossamer`` command (sim, trace, bench; more verbs arrive with their services)."""

from __future__ import annotations

__all__ = ["run"]


def run() -> int:
    """The console script: ``main`` of ``cli.main``, imported here so that a Ctrl-C while its
    modules load (Spark's, a second or more) exits 130 like one later, without a traceback."""
    try:
        from .main import main
    except KeyboardInterrupt:
        return 130
    return main()
