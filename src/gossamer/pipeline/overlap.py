"""Spark actions of one analysis started from more than one driver thread.

A small trace's analysis is bound by the driver planning one query after another (Catalyst
runs in the calling thread), not by the executors: with a JVM that compiles with C1 only it
kept less than one of two cores busy. Independent actions (the checks' counts, the metric
tables) started from two threads overlap their planning and their tiny jobs. A large trace's
actions already fill the cores with tasks, so it gets one worker: everything in the caller's
thread, in order, as before."""

from __future__ import annotations

import contextvars
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from types import TracebackType
from typing import TypeVar

R = TypeVar("R")


class Overlap:
    """Runs thunks on ``workers`` threads, each in a copy of the submitter's context (so
    ``sharing_intermediates`` holds in them), or at once in the caller's thread with one
    worker. Leaving the block waits for what was submitted (and cancels what has not started
    when the block raised)."""

    def __init__(self, workers: int) -> None:
        if workers < 1:
            raise ValueError(f"workers must be at least 1, got {workers}")
        self._pool = (ThreadPoolExecutor(workers, thread_name_prefix="gossamer-analysis")
                      if workers > 1 else None)

    def submit(self, fn: Callable[[], R]) -> Future[R]:
        if self._pool is None:
            done: Future[R] = Future()
            done.set_result(fn())  # an exception is raised here, as a plain call's would be
            return done
        return self._pool.submit(contextvars.copy_context().run, fn)

    def __enter__(self) -> Overlap:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=exc is not None)
