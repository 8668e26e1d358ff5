"""``Overlap``: an analysis's independent Spark actions started from two driver threads (a
small trace) or in the caller's thread, in order (a large one); ``shared`` builds an
intermediate once when two threads need it. Evaluating checks with and without overlap gives
the same verdicts."""

from __future__ import annotations

import contextvars
import threading
from typing import Any

import pytest

from gossamer.pipeline.overlap import Overlap
from gossamer.pipeline.spark import SMALL_TRACE_ROWS, overlap_workers, tuned_for

WHO: contextvars.ContextVar[str] = contextvars.ContextVar("who", default="nobody")


def test_one_worker_runs_each_thunk_at_once_in_the_callers_thread() -> None:
    ran: list[str] = []
    with Overlap(1) as overlap:
        first = overlap.submit(lambda: ran.append(threading.current_thread().name) or 1)
        assert ran == [threading.current_thread().name]  # already ran, here
        assert first.result() == 1
        with pytest.raises(ZeroDivisionError):  # raised by submit, as a plain call would
            overlap.submit(lambda: 1 // 0)


def test_two_workers_run_in_threads_that_see_the_submitters_context() -> None:
    both_running = threading.Barrier(2, timeout=30)

    def meet() -> str:
        both_running.wait()  # both thunks at once: two threads, or this times out
        return f"{WHO.get()} on {threading.current_thread().name}"

    token = WHO.set("the analysis")
    try:
        with Overlap(2) as overlap:
            futures = [overlap.submit(meet) for _ in range(2)]
            failed = overlap.submit(lambda: 1 // 0)
        answers = [f.result() for f in futures]
    finally:
        WHO.reset(token)
    assert all(a.startswith("the analysis on gossamer-analysis") for a in answers), answers
    assert len(set(answers)) == 2
    with pytest.raises(ZeroDivisionError):
        failed.result()


def test_workers_follow_the_trace_size() -> None:
    assert overlap_workers(SMALL_TRACE_ROWS) == 2
    assert overlap_workers(SMALL_TRACE_ROWS + 1) == 1
    with pytest.raises(ValueError):
        Overlap(0)


@pytest.mark.spark
def test_an_intermediate_two_threads_need_is_built_once(spark: Any) -> None:
    from gossamer.pipeline.schema import is_held, shared, sharing_intermediates

    trace = spark.range(10)
    builds: list[int] = []
    both_asking = threading.Barrier(2, timeout=60)

    def build() -> Any:
        builds.append(1)
        return trace.filter("id % 2 = 0")

    def ask() -> Any:
        both_asking.wait()
        return shared("evens", trace, (), build)

    with sharing_intermediates(release_at_end=True), Overlap(2) as overlap:
        first, second = (overlap.submit(ask) for _ in range(2))
        evens = first.result()
        assert second.result() is evens and is_held(evens)
        assert len(builds) == 1 and evens.count() == 5


@pytest.mark.spark
def test_checks_judged_on_two_threads_give_the_same_verdicts(spark: Any) -> None:
    from pathlib import Path

    from pyspark.sql import functions as F

    from gossamer.pipeline import CheckConfig, default_checks, evaluate, load_trace
    from gossamer.pipeline.schema import checkpoint

    clean = load_trace(spark, Path(__file__).parent / "fixtures" / "traces" / "fifo")
    delivered = clean.filter(F.col("event") == "deliver")
    lost = delivered.filter(F.col("node") != F.col("origin")).orderBy("t").first()
    twice = delivered.orderBy("t").limit(3)
    # planted: one delivery lost, three delivered twice
    planted = clean.filter(~((F.col("event") == "deliver") & (F.col("msg") == lost["msg"])
                             & (F.col("node") == lost["node"]))).unionByName(twice)
    planted = checkpoint(planted)  # as analyze reads a trace: computed once, lineage cut

    checks = [c for c in default_checks(CheckConfig())
              if c.name in ("reliability", "duplicates", "fifo", "validity")]

    def verdicts(workers: int) -> list[tuple[str, str, int]]:
        with tuned_for(spark, 1000), Overlap(workers) as overlap:
            results = evaluate(planted, checks, overlap=overlap)
        return [(r.name, r.status.value, r.violation_count) for r in results]

    alone, overlapped = verdicts(1), verdicts(2)
    assert overlapped == alone
    found = {name: count for name, status, count in alone if status == "fail"}
    assert found.get("reliability", 0) >= 1 and found.get("duplicates", 0) >= 1, alone
