"""A process that writes trace rows through a ``SegmentSink`` until it is killed.

``python segment_writer_child.py RUN_DIR``: appends one row about every millisecond (``seq`` =
0, 1, 2, ...) to the part ``writer`` of run ``killed``, and after every 20th row prints
``APPENDED N`` (rows 0 .. N-1 are appended) on a line of its own. It never exits by itself:
``tests/test_core_segments.py`` kills it with SIGKILL.
"""

from __future__ import annotations

import sys
import time

from gossamer.core.segments import SegmentSink
from gossamer.core.traceio import trace_path

RUN = "killed"
PART = "writer"


def main(run_dir: str) -> None:
    sink = SegmentSink(trace_path(run_dir, RUN, PART))
    started = time.monotonic()
    seq = 0
    while True:
        sink.append((RUN, time.monotonic() - started, PART, "test", "tick", f"{PART}:{seq}",
                     PART, None, None, seq, None, None, time.time()))
        seq += 1
        if seq % 20 == 0:
            print(f"APPENDED {seq}", flush=True)
        time.sleep(0.001)


if __name__ == "__main__":
    main(sys.argv[1])
