"""Segment files of live processes: rotation, torn tails, kill -9, compaction to Parquet.

The sink's clock is injected: rotation is asserted on a fake clock stepped by hand
(``background=False``, the test calls ``poll``). Only the kill test runs a real writer thread
in a child process, and it waits real time for the flush bound it checks.
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from gossamer.core import ConfigError, StateError
from gossamer.core.segments import (
    COMPACTED_KEY,
    SegmentSink,
    compact,
    find_parts,
    read_segment,
    recover_segments,
)
from gossamer.core.traceio import SCHEMA, read_trace, trace_path

HERE = Path(__file__).parent
W = 1_700_000_000.0


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def tick(seq: int, t: float = 0.0, part: str = "n1") -> tuple[object, ...]:
    return ("r", t, part, "test", "tick", f"{part}:{seq}", part, None, None, seq, 8, None, W + t)


def sink_at(tmp_path: Path, clock: FakeClock, part: str = "n1", **options: object) -> SegmentSink:
    return SegmentSink(trace_path(tmp_path, "r", part), clock=clock, background=False,
                       **options)  # type: ignore[arg-type]


def files(tmp_path: Path) -> list[str]:
    folder = tmp_path / "trace" / "r"
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


def completed(tmp_path: Path, part: str = "n1") -> list[Path]:
    return sorted((tmp_path / "trace" / "r").glob(f"{part}-*.seg"))


def seqs(paths: list[Path]) -> list[int]:
    return [s for path in paths for s in read_segment(path).table["seq"].to_pylist()]


# -- rotation and flushing ------------------------------------------------------------------------


def test_a_segment_is_completed_at_least_every_second_of_appends(tmp_path: Path) -> None:
    clock = FakeClock()
    sink = sink_at(tmp_path, clock)
    step = 0.125  # 8 appends and polls a second, exact in binary
    seconds = 6
    for i in range(int(seconds / step)):
        sink.append(tick(i, clock.now))
        clock.now += step
        sink.poll()
    # the first segment opened at the first poll (0.125 s) and one completes every 1 s after
    assert sink.segments_completed == seconds - 1
    segments = completed(tmp_path)
    assert [p.name for p in segments] == [f"n1-{i:06d}.seg" for i in range(1, seconds)]
    for path in segments:  # each holds at most one second of rows
        times = read_segment(path).table["t"].to_pylist()
        assert max(times) - min(times) <= 1.0
    # every row so far is on disk, in a completed segment or the partial one
    partial = tmp_path / "trace" / "r" / "n1.seg.partial"
    assert seqs([*segments, partial]) == list(range(int(seconds / step)))
    assert not read_segment(partial).torn
    sink.close()


def test_an_idle_partial_segment_is_still_rotated_on_time(tmp_path: Path) -> None:
    clock = FakeClock()
    sink = sink_at(tmp_path, clock)
    sink.append(tick(0))
    sink.poll()
    clock.now = 0.999
    sink.poll()
    assert completed(tmp_path) == []
    clock.now = 1.0
    sink.poll()  # no new rows, but the segment is a second old
    assert [p.name for p in completed(tmp_path)] == ["n1-000001.seg"]
    clock.now = 5.0
    sink.poll()  # nothing open, nothing written: no empty segments
    assert files(tmp_path) == ["n1-000001.seg", "n1.seg.lock"]
    sink.close()


def test_pending_rows_are_bounded_by_writing_them_at_once(tmp_path: Path) -> None:
    sink = sink_at(tmp_path, FakeClock(), max_pending=3)
    sink.append(tick(0))
    sink.append(tick(1))
    assert sink.rows_written == 0
    sink.append(tick(2))  # the third reaches the bound: written by the appending caller
    assert sink.rows_written == 3
    sink.close()


def test_rows_wait_for_the_part_name(tmp_path: Path) -> None:
    clock = FakeClock()
    sink = SegmentSink(None, clock=clock, background=False)
    sink.append(tick(0))
    sink.poll()
    assert sink.rows_written == 0 and files(tmp_path) == []
    sink.path = trace_path(tmp_path, "r", "n1")
    sink.poll()
    assert sink.rows_written == 1
    with pytest.raises(StateError, match="too late"):
        sink.path = trace_path(tmp_path, "r", "n2")
    sink.close()
    assert files(tmp_path) == ["n1.parquet"]


def test_bad_options_are_refused(tmp_path: Path) -> None:
    path = trace_path(tmp_path, "r", "n1")
    with pytest.raises(ConfigError, match="flush_interval"):
        SegmentSink(path, flush_interval=0.5, background=False)
    with pytest.raises(ConfigError, match="rotate_interval"):
        SegmentSink(path, rotate_interval=2.0, background=False)
    with pytest.raises(ConfigError):
        SegmentSink(path, max_pending=0, background=False)


# -- close and compaction ------------------------------------------------------------------------


def test_a_clean_close_leaves_one_parquet_file_and_no_segments(tmp_path: Path) -> None:
    clock = FakeClock()
    sink = sink_at(tmp_path, clock)
    for i in range(30):
        sink.append(tick(i, clock.now))
        clock.now += 0.25
        sink.poll()
    assert len(completed(tmp_path)) >= 6
    sink.close()
    assert files(tmp_path) == ["n1.parquet"]
    table = pq.read_table(trace_path(tmp_path, "r", "n1"))
    assert table.schema.equals(SCHEMA)  # metadata aside
    assert table["seq"].to_pylist() == list(range(30))
    assert sink.recovery is not None and sink.recovery.rows == 30
    with pytest.raises(StateError):
        sink.append(tick(99))
    sink.close()  # twice is harmless


def test_a_close_without_rows_leaves_an_empty_parquet_file(tmp_path: Path) -> None:
    sink_at(tmp_path, FakeClock()).close()
    assert files(tmp_path) == ["n1.parquet"]
    assert read_trace(tmp_path).num_rows == 0


def test_a_second_live_writer_of_one_part_is_refused(tmp_path: Path) -> None:
    first = sink_at(tmp_path, FakeClock())
    first.append(tick(0))
    first.flush()
    second = sink_at(tmp_path, FakeClock())
    second.append(tick(1))
    with pytest.raises(StateError, match="another live process"):
        second.flush()
    # and a recovery leaves the live part alone
    assert [r.live for r in recover_segments(tmp_path)] == [True]
    first.close()
    assert read_trace(tmp_path)["seq"].to_pylist() == [0]


def test_a_restarted_writer_keeps_its_dead_predecessors_rows(tmp_path: Path) -> None:
    clock = FakeClock()
    dead = sink_at(tmp_path, clock)
    for i in range(5):
        dead.append(tick(i))
        clock.now += 0.5
        dead.poll()
    # the process dies here: its lock goes with it, its partial segment stays
    assert dead._lock_fd is not None
    os.close(dead._lock_fd)
    os.close(dead._fd)  # type: ignore[arg-type]
    restarted = sink_at(tmp_path, FakeClock())
    restarted.append(tick(100))
    restarted.close()
    assert files(tmp_path) == ["n1.parquet"]
    assert read_trace(tmp_path)["seq"].to_pylist() == [0, 1, 2, 3, 4, 100]


def test_an_interrupted_compaction_never_counts_a_row_twice(tmp_path: Path) -> None:
    clock = FakeClock()
    sink = sink_at(tmp_path, clock)
    for i in range(8):  # a segment opens at one poll and completes at the next
        sink.append(tick(i))
        clock.now += 1.0
        sink.poll()
    assert sink.segments_completed == 4
    sink.close()
    parquet = trace_path(tmp_path, "r", "n1")
    assert pq.read_schema(parquet).metadata[COMPACTED_KEY] == b"4"
    # a compaction that renamed its Parquet file into place but died before removing the
    # segments: one of them is still there
    (tmp_path / "trace" / "r" / "n1-000003.seg").write_bytes(b"not read again")
    recovered = recover_segments(tmp_path)
    assert [(r.segments, r.rows) for r in recovered] == [(0, 0)]
    assert files(tmp_path) == ["n1.parquet"]
    assert read_trace(tmp_path)["seq"].to_pylist() == list(range(8))


# -- torn tails and kill -9 ----------------------------------------------------------------------


def test_a_torn_tail_is_skipped_reported_and_the_rest_recovered(tmp_path: Path) -> None:
    clock = FakeClock()
    sink = sink_at(tmp_path, clock)
    for i in range(3):  # three flushes: three record batches in the partial segment
        sink.append(tick(i))
        sink.poll()
    partial = tmp_path / "trace" / "r" / "n1.seg.partial"
    whole = partial.stat().st_size
    os.truncate(partial, whole - 10)  # the last record cut short
    read = read_segment(partial)
    assert read.table["seq"].to_pylist() == [0, 1]
    last_record = whole - (read.torn_bytes + 10)
    assert read.torn and 0 < last_record < whole
    os.close(sink._lock_fd)  # type: ignore[arg-type]  # the writer dies
    os.close(sink._fd)  # type: ignore[arg-type]
    [recovery] = recover_segments(tmp_path)
    assert (recovery.segments, recovery.rows) == (1, 2)
    assert recovery.torn == ((tmp_path / "trace" / "r" / "n1-000001.seg", read.torn_bytes),)
    assert files(tmp_path) == ["n1.parquet"]
    assert read_trace(tmp_path)["seq"].to_pylist() == [0, 1]


def test_segments_of_several_parts_are_found_per_part(tmp_path: Path) -> None:
    sinks = [sink_at(tmp_path, FakeClock(), part) for part in ("a", "a-000001", "b")]
    for n, sink in enumerate(sinks):
        sink.append(tick(n))
        sink.flush()
    assert [p.parquet.name for p in find_parts(tmp_path)] == ["a-000001.parquet", "a.parquet",
                                                               "b.parquet"]
    for sink in sinks:
        sink.close()
    assert read_trace(tmp_path).num_rows == 3


def test_compact_without_segments_changes_nothing(tmp_path: Path) -> None:
    assert compact(trace_path(tmp_path, "r", "n1")).segments == 0
    assert files(tmp_path) == []


class Lines:
    """The child's stdout, line by line, with a deadline."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        self.fd = proc.stdout.fileno()
        self.buffer = b""
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.fd, selectors.EVENT_READ)

    def next(self, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not self.selector.select(remaining):
                raise TimeoutError(f"the child printed nothing in {timeout} s")
            chunk = os.read(self.fd, 65536)
            if not chunk:
                raise EOFError("the child exited")
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return line.decode()

    def close(self) -> None:
        self.selector.close()


FLUSH_BOUND = 0.2  # what a kill may cost: the rows of the last 200 ms
MARGIN = 0.5  # for a busy machine: scheduling delays of the child's writer thread


@pytest.mark.processes
def test_sigkill_costs_at_most_the_last_flush_interval(tmp_path: Path) -> None:
    errors = tmp_path / "stderr.txt"
    with errors.open("wb") as stderr, subprocess.Popen(
        [sys.executable, str(HERE / "segment_writer_child.py"), str(tmp_path)],
        stdout=subprocess.PIPE, stderr=stderr,
    ) as proc:
        lines = Lines(proc)
        try:
            # run until at least two segments were completed (rotation happened)
            folder = tmp_path / "trace" / "killed"
            deadline = time.monotonic() + 30
            while not (folder / "writer-000002.seg").exists():
                assert time.monotonic() < deadline, errors.read_text()
                lines.next(30)
            appended = int(lines.next(30).split()[1])
            # rows 0 .. appended-1 are now at least FLUSH_BOUND + MARGIN old at the kill
            time.sleep(FLUSH_BOUND + MARGIN)
            proc.send_signal(signal.SIGKILL)
            assert proc.wait(timeout=30) == -signal.SIGKILL
        finally:
            lines.close()
            if proc.poll() is None:
                proc.kill()
    part = find_parts(tmp_path)
    assert len(part) == 1 and len(part[0].completed) >= 2
    on_disk = [s for _, path in part[0].completed for s in
               read_segment(path).table["seq"].to_pylist()]
    partial = part[0].partial
    if partial is not None:
        on_disk += read_segment(partial).table["seq"].to_pylist()
    assert on_disk == list(range(len(on_disk)))  # in order, no gap, no duplicate
    assert len(on_disk) >= appended  # every row older than the bound
    # plant a torn tail: cut the last record of the newest file short
    newest = partial if partial is not None else part[0].completed[-1][1]
    before = read_segment(newest).table.num_rows
    os.truncate(newest, newest.stat().st_size - 10)
    torn = read_segment(newest)
    assert torn.torn and torn.table.num_rows < before
    lost = before - torn.table.num_rows
    [recovery] = recover_segments(tmp_path)
    assert recovery.rows == len(on_disk) - lost
    assert [size for _, size in recovery.torn] == [torn.torn_bytes]
    assert [p.name for p in folder.iterdir()] == ["writer.parquet"]
    table = read_trace(tmp_path)
    assert table["seq"].to_pylist() == list(range(len(on_disk) - lost))
    assert all(wall is not None for wall in table["wall"].to_pylist())
