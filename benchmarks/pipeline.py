"""Pipeline benchmark: every check and metric (``gossamer analyze``) over synthetic FIFO traces of
growing size on ``local[2]``: rows per second, and how the time grows with the rows (the
smallest size is the baseline measured in the same run; target: 10x the rows in at most 12x the
time).

Run ``python benchmarks/pipeline.py [--quick] [--rows 1000000 10000000] [--json OUT]``.
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from rich.console import Console
from rich.table import Table

from gossamer.core.traceio import SCHEMA
from gossamer.pipeline import AnalysisConfig, CheckConfig, Status, analyze, get_spark

__all__ = ["main", "render", "run", "synthetic_trace"]

TARGET_GROWTH_PER_10X = 12.0  # 10x the rows in at most 12x the time
FULL_ROWS = (1_000_000, 10_000_000)
QUICK_ROWS = (20_000, 200_000)
NODES = 50
ROWS_PER_FILE = 1_000_000


def _chunk(first: int, count: int, nodes: int, rng: np.random.Generator) -> pa.Table:
    """Messages ``first .. first+count-1`` of a FIFO group: each is published and delivered at
    home, sent to every other node, received and delivered there."""
    names = pa.array([f"n{i:03d}" for i in range(nodes)])
    message = np.arange(first, first + count)
    origin = message % nodes
    seq = message // nodes + 1
    t_publish = message * 0.001  # one origin publishes every nodes * 1 ms > the 45 ms jitter
    peers = np.array([[p for p in range(nodes) if p != o] for o in range(nodes)])
    peer = peers[origin].reshape(-1)  # (count * (nodes - 1),) receivers
    fan = np.repeat(np.arange(count), nodes - 1)
    arrive = t_publish[fan] + rng.uniform(0.005, 0.05, fan.size)

    def column(values: np.ndarray, kind: pa.DataType) -> pa.Array:
        return pa.array(values, type=kind)

    def names_of(index: np.ndarray) -> pa.Array:
        return pc.take(names, pa.array(index))

    msg_of = pc.binary_join_element_wise(names_of(origin), pc.cast(pa.array(seq), pa.string()),
                                         ":")
    parts = []

    def rows(t: np.ndarray, node: np.ndarray, event: str, which: np.ndarray,
             peer_of: np.ndarray | None, size: int | None) -> None:
        n = t.size
        parts.append(pa.Table.from_arrays([
            pa.array(["bench"] * n, pa.string()), column(t, pa.float64()), names_of(node),
            pa.array(["fifo"] * n, pa.string()), pa.array([event] * n, pa.string()),
            pc.take(msg_of, pa.array(which)), names_of(origin[which]),
            names_of(peer_of) if peer_of is not None else pa.nulls(n, pa.string()),
            pa.nulls(n, pa.string()), column(seq[which], pa.int64()),
            pa.array([size] * n, pa.int32()), pa.nulls(n, pa.string()),
            column(t, pa.float64()),  # wall: one clock, as in a simulation
        ], schema=SCHEMA))

    every = np.arange(count)
    rows(t_publish, origin, "publish", every, None, None)
    rows(t_publish, origin, "deliver", every, None, None)
    rows(t_publish[fan], origin[fan], "send", fan, peer, 64)
    rows(arrive, peer, "recv", fan, origin[fan], 64)
    rows(arrive, peer, "deliver", fan, None, None)
    return pa.concat_tables(parts)


def synthetic_trace(run_dir: Path, rows: int, *, nodes: int = NODES, seed: int = 1) -> int:
    """Write about ``rows`` trace rows under ``RUN_DIR/trace/bench/``; returns the exact count."""
    rng = np.random.default_rng(seed)
    per_message = 3 * nodes - 1
    messages = max(1, rows // per_message)
    per_file = max(1, ROWS_PER_FILE // per_message)
    folder = run_dir / "trace" / "bench"
    folder.mkdir(parents=True, exist_ok=True)
    written = 0
    for index, first in enumerate(range(0, messages, per_file)):
        table = _chunk(first, min(per_file, messages - first), nodes, rng)
        pq.write_table(table, folder / f"part-{index:04d}.parquet", compression="zstd",
                       row_group_size=131_072)
        written += table.num_rows
    return written


def run(*, quick: bool = False, sizes: tuple[int, ...] | None = None,
        master: str = "local[2]") -> dict[str, Any]:
    sizes = sizes or (QUICK_ROWS if quick else FULL_ROWS)
    if len(sizes) < 2 or sorted(sizes) != list(sizes):
        raise ValueError("need at least two sizes, smallest first")
    spark = get_spark(master, {"spark.driver.memory": "4g"}, app_name="gossamer-bench")
    config = AnalysisConfig(checks=CheckConfig(layers=("fifo",)))
    root = Path(tempfile.mkdtemp(prefix="gossamer-bench-pipeline-"))
    results = []
    try:
        warm = root / "warm"  # JIT and code generation happen here, not in a timed run
        synthetic_trace(warm, 20_000)
        analyze(spark, warm, out_dir=warm / "analysis", config=config)
        for size in sizes:
            run_dir = root / f"rows{size}"
            rows = synthetic_trace(run_dir, size)
            started = time.perf_counter()
            analysis = analyze(spark, run_dir, out_dir=run_dir / "analysis", config=config)
            seconds = time.perf_counter() - started
            verdicts = {c.name: c.status.value for c in analysis.checks}
            assert analysis.rows == rows
            # a clean trace: both checks that apply must pass (a wrong verdict is a bug)
            assert verdicts["fifo"] == verdicts["reliability"] == Status.PASS.value, verdicts
            results.append({"rows": rows, "seconds": seconds, "rows_per_s": rows / seconds,
                            "verdicts": verdicts})
            shutil.rmtree(run_dir, ignore_errors=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    base = results[0]
    for result in results:
        scale = result["rows"] / base["rows"]
        result["time_ratio"] = result["seconds"] / base["seconds"]
        result["row_ratio"] = scale
        # the target, 12x the time for 10x the rows, at this size ratio
        result["allowed_ratio"] = TARGET_GROWTH_PER_10X * scale / 10
    last = results[-1]
    return {
        "machine": {"python": platform.python_version(), "platform": platform.platform(),
                    "master": master, "spark": spark.version},
        "sizes": results,
        "target": {"name": "time growth vs rows", "ratio": last["time_ratio"],
                   "allowed": last["allowed_ratio"],
                   "met": last["time_ratio"] <= last["allowed_ratio"]},
    }


def render(result: dict[str, Any], console: Console) -> None:
    table = Table(title=f"gossamer analyze on {result['machine']['master']}")
    for column in ("rows", "seconds", "rows/s", "rows vs first", "time vs first"):
        table.add_column(column, justify="right")
    for size in result["sizes"]:
        table.add_row(f"{size['rows']:,}", f"{size['seconds']:.1f}",
                      f"{size['rows_per_s']:,.0f}", f"{size['row_ratio']:.1f}x",
                      f"{size['time_ratio']:.2f}x")
    console.print(table)
    target = result["target"]
    verdict = "[green]met[/]" if target["met"] else "[red]not met[/]"
    console.print(f"time growth {target['ratio']:.2f}x for the rows' growth (allowed "
                  f"{target['allowed']:.1f}x): {verdict}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="20k and 200k rows (smoke test)")
    parser.add_argument("--rows", type=int, nargs="+", default=None,
                        help="trace sizes, smallest first (default 1M 10M)")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--json", default=None, help="also write the figures here")
    args = parser.parse_args(argv)
    result = run(quick=args.quick, sizes=tuple(args.rows) if args.rows else None,
                 master=args.master)
    render(result, Console())
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
