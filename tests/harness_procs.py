"""A child process of a process test whose stdout lines are read on demand: ``expect`` waits
for the next line that satisfies a predicate (with a timeout, never a fixed sleep), and
``write`` feeds its stdin."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

WAIT = 60.0  # wall seconds: upper bounds only, every wait ends as soon as its line shows up


class LineProc:
    """A child process; ``lines`` holds what it printed so far, ``pos`` how much of that
    ``expect`` consumed."""

    def __init__(self, name: str, proc: asyncio.subprocess.Process) -> None:
        self.name = name
        self.proc = proc
        self.lines: list[str] = []
        self.pos = 0  # lines before it were consumed by ``expect``

    async def expect(self, pred: Callable[[str], bool], what: str,
                     timeout: float = WAIT) -> str:
        """The next unconsumed line satisfying ``pred`` (earlier lines are consumed too); a
        ``TimeoutError`` after ``timeout`` seconds, an ``AssertionError`` if the process ends
        first."""
        assert self.proc.stdout is not None
        async with asyncio.timeout(timeout):
            while True:
                while self.pos < len(self.lines):
                    line = self.lines[self.pos]
                    self.pos += 1
                    if pred(line):
                        return line
                raw = await self.proc.stdout.readline()
                if not raw:
                    raise AssertionError(f"{self.name} ended (rc={self.proc.returncode}) "
                                         f"before {what}; output: {self.lines}")
                self.lines.append(raw.decode().rstrip("\n"))

    def write(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line.encode() + b"\n")


def analyze_in_process_of_its_own(run_dir: Path, out: Path) -> subprocess.CompletedProcess[str]:
    """``gossamer analyze RUN_DIR --out OUT`` on ``local[2]`` in a process (and JVM) of its own,
    as a user runs it after a real-process test; the caller asserts on its exit code."""
    return subprocess.run(
        [sys.executable, "-m", "gossamer.cli.main", "analyze", str(run_dir), "--out", str(out),
         "--master", "local[2]"],
        capture_output=True, text=True, timeout=900)


def why_analysis_failed(analysis: subprocess.CompletedProcess[str], out: Path) -> str:
    """What a failing analysis found, for an assertion message: the checks that did not pass
    and their first violations (read from the tables under ``out``), then the ends of the
    process's output (the terminal table's head is cut otherwise)."""
    import pyarrow.parquet as pq

    lines: list[str] = []
    if (out / "checks").exists():
        lines += [f"check {row}" for row in pq.read_table(out / "checks").to_pylist()
                  if row["status"] not in ("pass", "not applicable")]
    for part in sorted((out / "violations").glob("**/*.parquet"))[:20]:
        lines += [f"violation {part.parent.relative_to(out)}: {row}"
                  for row in pq.read_table(part).to_pylist()[:10]]
    return "\n".join([*lines, analysis.stdout[-2000:], analysis.stderr[-2000:]])
