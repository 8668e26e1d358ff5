"""The pipeline's own error: a bad experiment file, an empty trace directory, a missing piece.

It subclasses nothing from the rest of gossamer so that the pipeline depends on the trace
schema only; the command line catches it next to ``GossamerError``.
"""

from __future__ import annotations

__all__ = ["PipelineError", "TraceInputError", "cut_at_word"]


class PipelineError(Exception):
    """The pipeline cannot do what was asked (the message says why and what to change)."""


class TraceInputError(PipelineError):
    """The trace cannot be analysed as it is: a file missing, truncated, corrupt or not a
    trace (the message names it and the problem, in one line)."""


def cut_at_word(text: str, limit: int) -> str:
    """``text`` as it is up to ``limit`` characters, else cut at a word and marked " ..."."""
    return text if len(text) <= limit else text[:limit].rsplit(" ", 1)[0] + " ..."
