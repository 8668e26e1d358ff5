"""Run one benchmark of this checkout and of another commit side by side, and print the ratio
of every figure they both report.

``python benchmarks/against.py --base DIR BENCH [ARGS ...]`` runs ``DIR/benchmarks/BENCH.py
ARGS --json OUT`` with ``DIR/src`` first on the path and this checkout's ``benchmarks/BENCH.py
ARGS --json OUT`` with this ``src``, in turn (base, this, base, this, ... ``--rounds`` times),
then flattens each JSON report into ``path = number`` figures and prints, for every figure both
have, the median of each side over the rounds and ``this / base``. Make DIR with ``git worktree
add /tmp/base <commit>``. Whether higher is better depends on the figure (rates: yes; seconds,
bytes: no): the table says which it guessed from the name, the reader judges.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

HERE = Path(__file__).resolve().parent.parent
LOWER_IS_BETTER = ("seconds", "_s", "latency", "p50", "p99", "p95", "bytes", "kib", "rss",
                   "cpu", "ms", "time", "wall", "hops", "messages_per", "rmr")


def flatten(value: Any, prefix: str = "") -> dict[str, float]:
    out: dict[str, float] = {}
    if isinstance(value, dict):
        for key, item in value.items():
            out.update(flatten(item, f"{prefix}.{key}" if prefix else str(key)))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            label = index
            if isinstance(item, dict):  # name list entries by what identifies them
                for name in ("servers", "clients", "kind", "name", "n", "rows", "nodes"):
                    if name in item and not isinstance(item[name], dict | list):
                        label = f"{name}={item[name]}"  # type: ignore[assignment]
                        break
            out.update(flatten(item, f"{prefix}[{label}]"))
    elif isinstance(value, int | float) and not isinstance(value, bool):
        out[prefix] = float(value)
    return out


def run_once(root: Path, bench: str, args: list[str]) -> dict[str, float]:
    """One run; its figures. A benchmark writes them with ``--json OUT``, or (the older
    style, ``--json`` alone) prints them as its last line."""
    script = root / "benchmarks" / f"{bench}.py"
    to_stdout = '"--json", action="store_true"' in script.read_text()
    with tempfile.TemporaryDirectory(prefix="against-") as tmp:
        out = Path(tmp) / "out.json"
        env = dict(os.environ, PYTHONPATH=str(root / "src"))
        json_args = ["--json"] if to_stdout else ["--json", str(out)]
        done = subprocess.run([sys.executable, str(script), *args, *json_args],
                              env=env, cwd=root, capture_output=True, text=True, check=False)
        if done.returncode != 0 or not (to_stdout or out.exists()):
            raise SystemExit(f"{script} failed ({done.returncode}):\n{done.stderr[-2000:]}")
        text = done.stdout.strip().splitlines()[-1] if to_stdout else out.read_text()
        return flatten(json.loads(text))


def attempts(root: Path, bench: str, args: list[str], console: Console,
             tries: int = 3) -> dict[str, float]:
    """``run_once``, again after a failed run (said), at most ``tries`` times."""
    for attempt in range(1, tries + 1):
        try:
            return run_once(root, bench, args)
        except SystemExit as failed:
            console.print(f"[yellow]attempt {attempt} of {root} failed[/]: "
                          f"{str(failed).splitlines()[-1]}")
            if attempt == tries:
                raise
    raise AssertionError("unreachable")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--base", required=True, type=Path,
                        help="a checkout of the other commit (with src/ and benchmarks/)")
    parser.add_argument("--rounds", type=int, default=2, help="runs of each side (default 2)")
    parser.add_argument("bench", help="the benchmark's name: benchmarks/BENCH.py")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="its arguments")
    options = parser.parse_args(argv)
    base: list[dict[str, float]] = []
    this: list[dict[str, float]] = []
    console = Console()
    for round_ in range(options.rounds):
        console.print(f"round {round_ + 1}/{options.rounds}: base, then this checkout")
        base.append(attempts(options.base.resolve(), options.bench, options.args, console))
        this.append(attempts(HERE, options.bench, options.args, console))
    common = sorted(set.intersection(*(set(r) for r in base + this)))
    table = Table(title=f"{options.bench} {' '.join(options.args)}: this checkout against "
                        f"{options.base} (median of {options.rounds} runs each)")
    for column in ("figure", "base", "this", "this / base", "better is"):
        table.add_column(column, justify="left" if column == "figure" else "right")
    for name in common:
        b = statistics.median(r[name] for r in base)
        t = statistics.median(r[name] for r in this)
        ratio = f"{t / b:.2f}x" if b else "-"
        lower = any(word in name.lower() for word in LOWER_IS_BETTER)
        table.add_row(name, f"{b:,.4g}", f"{t:,.4g}", ratio, "lower" if lower else "higher")
    console.print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
