"""Live checking (``gossamer analyze --follow``): a real loopback trace written as segments
while the checker runs, with faults planted in its second half (the planted-fault library's
plants); live checking finds what the batch checks find in them, nothing more.

The test waits on the violations (an event, a generous timeout), never a fixed time, and
asserts nothing about how long they took (``scripts/follow_latency_acceptance.py`` measures
that)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gossamer.core.segments import SegmentSink
from gossamer.core.trace import COLUMNS
from gossamer.core.traceio import trace_path
from gossamer.pipeline import PipelineError
from gossamer.pipeline.live import LiveCheck, LiveViolation, follow
from test_pipeline_planted import (
    TRACES,
    Rows,
    drop_delivery,
    duplicate_delivery,
    recorded,
    reorder_deliveries,
)

pytestmark = pytest.mark.spark

WAIT = 240.0  # seconds: generous, for a loaded machine; the usual is a few seconds


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def write_segments(run_dir: Path, rows: Rows, sinks: dict[str, tuple[SegmentSink, Clock]],
                   *, per_node: int = 2) -> None:
    """Each node's rows as ``per_node`` completed segments, renamed into place as a live
    writer does (the sink's clock is stepped by hand to rotate); the sinks stay open, as a
    live process's do."""
    for node in sorted({r["node"] for r in rows}):
        mine = [tuple(r[c] for c in COLUMNS) for r in rows if r["node"] == node]
        if node not in sinks:
            clock = Clock()
            sinks[node] = (SegmentSink(trace_path(run_dir, mine[0][0], node), clock=clock,
                                       background=False), clock)
        sink, clock = sinks[node]
        size = max(1, -(-len(mine) // per_node))
        for start in range(0, len(mine), size):
            for row in mine[start:start + size]:
                sink.append(row)
            sink.poll()  # written to the partial segment
            clock.now += sink.rotate_interval
            sink.poll()  # rotated: a completed segment


def wait_for(changed: threading.Condition, ready: Callable[[], bool], live: LiveCheck) -> bool:
    """Wait until ``ready()`` (re-checked at each batch or violation) or the query stopped."""
    deadline = time.monotonic() + WAIT
    with changed:
        while not ready() and live.query.isActive and time.monotonic() < deadline:
            changed.wait(1.0)  # wakes at once on a notify; the timeout notices a dead query
        return ready()


def gaps(rows: Rows, dropped: set[tuple[str, str]]) -> set[tuple[str, str]]:
    """The delivery of seq s + 1 at a node whose delivery of s was dropped."""
    found = set()
    for node, msg in dropped:
        origin, seq = next((r["origin"], r["seq"]) for r in rows if r["msg"] == msg)
        found |= {(node, r["msg"]) for r in rows if r["event"] == "deliver"
                  and r["node"] == node and r["origin"] == origin and r["seq"] == seq + 1}
    return found


def test_follow_catches_faults_planted_while_it_runs(spark: Any, tmp_path: Path) -> None:
    rows, _ = recorded("fifo")
    run = rows[0]["run"]
    (tmp_path / "trace" / run).mkdir(parents=True)
    shutil.copy(TRACES / "fifo" / "trace" / run / "analysis.json", tmp_path / "trace" / run)
    middle = sorted(r["wall"] for r in rows)[len(rows) // 2]
    first = [r for r in rows if r["wall"] < middle]
    second = [r for r in rows if r["wall"] >= middle]
    second, dropped = drop_delivery("fifo")(second)
    second, reordered = reorder_deliveries("fifo")(second)
    second, repeated = duplicate_delivery("fifo")(second)
    # what the batch checks find in these plants (tests/test_pipeline_planted.py), and the
    # gap the dropped delivery leaves at the node's next delivery from that origin
    expected = ({("reliability", *k) for k in dropped} | {("duplicates", *k) for k in repeated}
                | {("fifo", *k) for k in reordered} | {("fifo", *k) for k in gaps(second,
                                                                                dropped)})
    assert len(expected) == 5, expected

    seen: list[LiveViolation] = []
    changed = threading.Condition()
    batches = [0]

    def on_violation(violation: LiveViolation) -> None:
        with changed:
            seen.append(violation)
            changed.notify_all()

    def on_batch(_epoch: int) -> None:
        with changed:
            batches[0] += 1
            changed.notify_all()

    live = follow(spark, tmp_path, grace=1.0, trigger=0.2, on_violation=on_violation,
                  on_batch=on_batch)
    sinks: dict[str, tuple[SegmentSink, Clock]] = {}
    try:
        write_segments(tmp_path, first, sinks)
        # the clean half is checked before the faults are written
        assert wait_for(changed, lambda: batches[0] >= 1, live)
        assert live.query.exception() is None
        assert seen == [], [v.line() for v in seen]
        write_segments(tmp_path, second, sinks)
        done = wait_for(changed, lambda: len(seen) >= len(expected), live)
        assert live.query.exception() is None
        assert done, f"live found {[v.line() for v in seen]}, batch {sorted(expected)}"
    finally:
        live.stop()
        for sink, _ in sinks.values():
            sink.close()
    assert {(v.check, v.node, v.msg) for v in seen} == expected
    assert len(seen) == len(expected)
    for violation in seen:
        assert violation.run == run and violation.msg and violation.node in violation.line()


def test_follow_refuses_a_missing_directory(spark: Any, tmp_path: Path) -> None:
    with pytest.raises(PipelineError, match="no such directory"):
        follow(spark, tmp_path / "nowhere")


def test_ctrl_c_stops_the_follow_command_with_its_closing_line_alone(tmp_path: Path) -> None:
    # the command in its own process (its own JVM): pyspark's SIGINT handler cancelled the
    # jobs in the middle of a py4j call and printed three tracebacks; its Python workers
    # printed a pandas FutureWarning per batch
    rows, _ = recorded("fifo")
    run = rows[0]["run"]
    (tmp_path / "trace" / run).mkdir(parents=True)
    shutil.copy(TRACES / "fifo" / "trace" / run / "analysis.json", tmp_path / "trace" / run)
    middle = sorted(r["wall"] for r in rows)[len(rows) // 2]
    second, repeated = duplicate_delivery("fifo")([r for r in rows if r["wall"] >= middle])
    sinks: dict[str, tuple[SegmentSink, Clock]] = {}
    write_segments(tmp_path, [r for r in rows if r["wall"] < middle], sinks)
    command = [sys.executable, "-m", "gossamer.cli.main", "analyze", "--follow", str(tmp_path),
               "--grace", "1"]
    checker = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, env={**os.environ, "COLUMNS": "400"},
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    lines: list[str] = []
    changed = threading.Condition()

    def read() -> None:
        assert checker.stdout is not None
        for line in checker.stdout:
            with changed:
                lines.append(line.rstrip("\n"))
                changed.notify_all()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        with changed:
            assert changed.wait_for(lambda: any("following new ones" in x for x in lines)
                                    or checker.poll() is not None, WAIT), lines
        write_segments(tmp_path, second, sinks)
        with changed:
            assert changed.wait_for(lambda: any("duplicates violated" in x for x in lines)
                                    or checker.poll() is not None, WAIT), lines
        checker.send_signal(signal.SIGINT)
        assert checker.wait(WAIT) == 1, lines
    finally:
        if checker.poll() is None:
            checker.kill()
            checker.wait(WAIT)
        reader.join(WAIT)  # the end of its output: read whole
        assert checker.stdout is not None
        checker.stdout.close()
        for sink, _ in sinks.values():
            sink.close()
    with changed:
        output = "\n".join(lines)
    assert repeated and lines[-1].startswith("stopped: "), output
    for noise in ("Traceback", "FutureWarning", "KeyboardInterrupt", "ERROR", "\tat java."):
        assert noise not in output, output
