"""Pipeline benchmark: ``gossamer analyze`` over synthetic FIFO traces of growing size on
``local[2]``, side by side with the same checks in DuckDB on the same trace files.

For each size, in one run: the five checks that apply to a FIFO trace (reliability, own
delivery, duplicates, validity, FIFO per origin) in DuckDB SQL straight from the Parquet files
and in Spark (``read_trace`` + ``evaluate``, nothing else), the whole analysis (``analyze()``:
every check and metric, all tables written), and the ratio Spark/DuckDB. The trace carries a
few planted violations of each check, and every violation count of DuckDB must equal Spark's
(and be non-zero), so a wrong query cannot give a fast figure. The Spark session's start (the
fixed cost, JVM included) is timed on its own. ``--against SRC`` also times the whole
``gossamer analyze`` CLI of the same trace from another checkout's ``src`` (``git worktree add
/tmp/base 904a816``, then ``--against /tmp/base/src``) and from this one, each in its own
process (session start included), and prints the speed-up. Growth target: 10x the rows in at
most 12x the time (the smallest size is the baseline).

Run ``python benchmarks/pipeline.py [--quick] [--rows 1000000 10000000] [--against SRC]
[--json OUT]`` (DuckDB: the ``bench`` extra).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
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
from gossamer.pipeline import (
    AnalysisConfig,
    CheckConfig,
    Status,
    analyze,
    default_checks,
    evaluate,
    get_spark,
    inspect_trace_files,
)
from gossamer.pipeline.schema import read_trace, release
from gossamer.pipeline.spark import LARGE_ANALYSIS_JVM_OPTIONS

__all__ = ["PLANTED", "duckdb_checks", "main", "render", "run", "spark_checks",
           "synthetic_trace"]

TARGET_GROWTH_PER_10X = 12.0  # 10x the rows in at most 12x the time
FULL_ROWS = (1_000_000, 10_000_000)
QUICK_ROWS = (20_000, 200_000)
MIN_ROWS = 20_000  # the planted faults need three messages of one origin
NODES = 50
ROWS_PER_FILE = 1_000_000
LAYER = "fifo"
#: the checks that apply to the FIFO trace, computed by both engines
CHECKS = ("reliability", "own delivery", "duplicates", "validity", "fifo")
#: what ``_plant`` puts in the first file (check: the violations it makes, in Spark's terms)
PLANTED = {"reliability": 1, "own delivery": 1, "duplicates": 1, "validity": 1, "fifo": 4}


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


def _plant(table: pa.Table) -> pa.Table:
    """A few violations of each check in the first chunk (``PLANTED``): n001 never delivers
    n000:1 (reliability, and a FIFO gap at n000:2), n002 not its own n002:1 (own delivery, a
    gap), n004 delivers n003:1 twice (duplicates), n006 delivers n005:1 after n005:2 (FIFO: a
    gap, then a reordering), n008 delivers ghost:1, never published (validity)."""
    event, msg, node = (table.column(name) for name in ("event", "msg", "node"))
    is_deliver = pc.equal(event, "deliver")

    def index(message: str, at: str) -> int:
        mask = pc.and_(is_deliver, pc.and_(pc.equal(msg, message), pc.equal(node, at)))
        (found,) = np.flatnonzero(mask.to_numpy(zero_copy_only=False))
        return int(found)

    dropped = {index("n000:1", "n001"), index("n002:1", "n002")}
    twice, late, later = index("n003:1", "n004"), index("n005:1", "n006"), index("n005:2", "n006")
    rows = table.to_pylist()
    rows[late]["t"] = rows[late]["wall"] = rows[later]["t"] + 0.001
    again = dict(rows[twice], t=rows[twice]["t"] + 0.0001, wall=rows[twice]["t"] + 0.0001)
    ghost = dict(rows[twice], msg="ghost:1", origin="n007", node="n008", seq=None)
    kept = [row for i, row in enumerate(rows) if i not in dropped]
    return pa.Table.from_pylist([*kept, again, ghost], schema=SCHEMA)


def synthetic_trace(run_dir: Path, rows: int, *, nodes: int = NODES, seed: int = 1,
                    planted: bool = True) -> int:
    """Write about ``rows`` trace rows under ``RUN_DIR/trace/bench/`` (with ``planted``, the
    violations of ``PLANTED`` in the first file); returns the exact count."""
    if planted and (nodes != NODES or rows < MIN_ROWS):
        raise ValueError(f"planted faults need {NODES} nodes and at least {MIN_ROWS:,} rows")
    rng = np.random.default_rng(seed)
    per_message = 3 * nodes - 1
    messages = max(1, rows // per_message)
    per_file = max(1, ROWS_PER_FILE // per_message)
    folder = run_dir / "trace" / "bench"
    folder.mkdir(parents=True, exist_ok=True)
    written = 0
    for index, first in enumerate(range(0, messages, per_file)):
        table = _chunk(first, min(per_file, messages - first), nodes, rng)
        if planted and index == 0:
            table = _plant(table)
        pq.write_table(table, folder / f"part-{index:04d}.parquet", compression="zstd",
                       row_group_size=131_072)
        written += table.num_rows
    return written


# -- the checks in DuckDB ----------------------------------------------------------------------

#: the checks of ``gossamer.pipeline`` for a trace without membership changes or topics (every
#: node is up from start to end and owes every message of its layer), over table ``trace``
#: (``file``, ``rn``: the row's file and position in it, for "by t, then row order")
_DUCK_SQL = {
    "reliability": """
        WITH members AS (SELECT DISTINCT run, node FROM trace
                         WHERE node IS NOT NULL AND layer <> 'sim'),
             published AS (SELECT run, layer, msg, origin, node AS publisher FROM trace
                           WHERE event = 'publish' AND layer = $layer),
             delivered AS (SELECT DISTINCT run, layer, msg, node FROM trace
                           WHERE event = 'deliver' AND layer = $layer)
        SELECT count(*) FROM published p JOIN members m ON m.run = p.run
        WHERE m.node IS DISTINCT FROM p.origin AND m.node <> p.publisher
          AND NOT EXISTS (SELECT 1 FROM delivered d WHERE d.run = p.run AND d.layer = p.layer
                          AND d.msg = p.msg AND d.node = m.node)""",
    "own delivery": """
        WITH members AS (SELECT DISTINCT run, node FROM trace
                         WHERE node IS NOT NULL AND layer <> 'sim'),
             promising AS (SELECT DISTINCT layer FROM trace
                           WHERE event = 'deliver' AND layer = $layer AND node = origin),
             published AS (SELECT run, layer, msg, origin FROM trace
                           WHERE event = 'publish' AND layer IN (SELECT layer FROM promising)),
             delivered AS (SELECT DISTINCT run, layer, msg, node FROM trace
                           WHERE event = 'deliver' AND layer = $layer)
        SELECT count(*) FROM published p JOIN members m ON m.run = p.run AND m.node = p.origin
        WHERE NOT EXISTS (SELECT 1 FROM delivered d WHERE d.run = p.run AND d.layer = p.layer
                          AND d.msg = p.msg AND d.node = m.node)""",
    "duplicates": """
        SELECT coalesce(sum(n - 1), 0) FROM (
            SELECT count(*) AS n FROM trace
            WHERE event = 'deliver' AND layer = $layer AND msg IS NOT NULL
            GROUP BY run, layer, node, msg)""",
    "validity": """
        SELECT count(*) FROM trace d
        WHERE d.event = 'deliver' AND d.layer = $layer AND d.msg IS NOT NULL
          AND NOT EXISTS (SELECT 1 FROM trace p WHERE p.event = 'publish' AND p.run = d.run
                          AND p.msg = d.msg)""",
    "fifo": """
        WITH firsts AS (
            SELECT run, layer, node, origin, seq, t, file, rn FROM trace
            WHERE event = 'deliver' AND layer = $layer AND origin IS NOT NULL
              AND seq IS NOT NULL
            QUALIFY row_number() OVER (PARTITION BY run, layer, node, origin, seq, msg
                                       ORDER BY t, file, rn) = 1),
        judged AS (
            SELECT seq, coalesce(max(seq) OVER (
                PARTITION BY run, layer, node, origin ORDER BY t, file, rn
                ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) AS highest_before
            FROM firsts)
        SELECT count(*) FROM judged WHERE seq <> highest_before + 1""",
}


def duckdb_checks(run_dir: Path, *, threads: int = 2) -> dict[str, Any]:
    """The violation counts of ``CHECKS`` in DuckDB, read straight from the trace's Parquet
    files (once, only the columns the checks use), and the seconds it took."""
    import duckdb  # the "bench" extra; a benchmark-only dependency

    files = [str(f) for f in sorted((run_dir / "trace").glob("*/*.parquet"))]
    started = time.perf_counter()
    con = duckdb.connect(config={"threads": threads})
    try:
        con.execute("""
            CREATE TEMP TABLE trace AS
            SELECT run, t, node, layer, event, msg, origin, seq, filename AS file,
                   file_row_number AS rn
            FROM read_parquet($files, filename = true, file_row_number = true)""",
                    {"files": files})
        changes = con.execute(
            "SELECT count(*) FROM trace WHERE event IN ('join', 'leave', 'crash', 'recover', "
            "'subscribe', 'unsubscribe')").fetchone()
        if changes is None or changes[0]:
            raise ValueError("the DuckDB checks assume no membership or subscription rows")
        counts = {}
        for name in CHECKS:
            row = con.execute(_DUCK_SQL[name], {"layer": LAYER}).fetchone()
            assert row is not None
            counts[name] = int(row[0])
    finally:
        con.close()
    return {"seconds": time.perf_counter() - started, "violations": counts}


def spark_checks(spark: Any, run_dir: Path) -> dict[str, Any]:
    """The same checks in Spark and nothing else: read the files once (a local checkpoint, as
    ``analyze`` does, and as the DuckDB side loads one table), judge, count."""
    started = time.perf_counter()
    trace = read_trace(spark, inspect_trace_files(run_dir).good)
    try:
        checks = [c for c in default_checks(CheckConfig(layers=(LAYER,))) if c.name in CHECKS]
        violations = {r.name: r.violation_count for r in evaluate(trace, checks)}
    finally:
        release(trace)
    return {"seconds": time.perf_counter() - started, "violations": violations}


# -- the CLI, this checkout's and another's (--against) -----------------------------------------

_CLI = "import sys; from gossamer.cli.main import main; sys.argv[0] = 'gossamer'; sys.exit(main())"


def _check_source(src: Path) -> None:
    """``src`` must be what a subprocess with it on PYTHONPATH imports (an editable install of
    another checkout must not win)."""
    done = subprocess.run([sys.executable, "-c", "import gossamer; print(gossamer.__file__)"],
                          env=dict(os.environ, PYTHONPATH=str(src)), capture_output=True,
                          text=True, check=True)
    imported = Path(done.stdout.strip()).resolve()
    if not imported.is_relative_to(src.resolve()):
        raise RuntimeError(f"PYTHONPATH={src} imports gossamer from {imported}")


def cli_analyze(src: Path, run_dir: Path, out: Path, master: str) -> float:
    """Seconds of ``gossamer analyze RUN_DIR --out OUT --master M`` run from ``src`` in a new
    process (the session start included); exit 0 or 1 (the planted violations) only."""
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", _CLI, "analyze", str(run_dir), "--out",
                           str(out), "--master", master],
                          env=dict(os.environ, PYTHONPATH=str(src)), capture_output=True,
                          text=True, check=False)
    seconds = time.perf_counter() - started
    if done.returncode not in (0, 1):
        raise RuntimeError(f"gossamer analyze from {src} exited {done.returncode}: "
                           f"{(done.stderr or done.stdout)[-2000:]}")
    return seconds


# -- the run ------------------------------------------------------------------------------------


def _say(what: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {what}", file=sys.stderr, flush=True)


def run(*, quick: bool = False, sizes: tuple[int, ...] | None = None,
        master: str = "local[2]", against: Path | None = None,
        warm_up: bool = True) -> dict[str, Any]:
    sizes = sizes or (QUICK_ROWS if quick else FULL_ROWS)
    if len(sizes) < 2 or sorted(sizes) != list(sizes):
        raise ValueError("need at least two sizes, smallest first")
    if sizes[0] < MIN_ROWS:
        raise ValueError(f"the smallest size must be at least {MIN_ROWS:,} rows")
    here = Path(__file__).resolve().parent.parent / "src"
    if against is not None:
        _check_source(here)
        _check_source(against)
    started = time.perf_counter()
    # the JVM `gossamer analyze` starts for a trace over 16 MiB (this one analyses several)
    spark = get_spark(master, {"spark.driver.memory": "4g"}, app_name="gossamer-bench",
                      java_options=LARGE_ANALYSIS_JVM_OPTIONS)
    spark.range(1).count()  # the JVM and the first job's planning and scheduling
    session_start = time.perf_counter() - started
    config = AnalysisConfig(checks=CheckConfig(layers=(LAYER,)))
    root = Path(tempfile.mkdtemp(prefix="gossamer-bench-pipeline-"))
    results = []
    try:
        _say(f"session started in {session_start:.1f} s")
        if warm_up:  # JIT and code generation happen here, not in a timed run
            warm = root / "warm"
            synthetic_trace(warm, MIN_ROWS)
            analyze(spark, warm, out_dir=warm / "analysis", config=config)
            spark_checks(spark, warm)
            duckdb_checks(warm)
        for size in sizes:
            run_dir = root / f"rows{size}"
            rows = synthetic_trace(run_dir, size)
            _say(f"{rows:,} rows: DuckDB")
            duck = duckdb_checks(run_dir)
            _say(f"{rows:,} rows: Spark, the checks alone")
            checks = spark_checks(spark, run_dir)
            _say(f"{rows:,} rows: Spark, the whole analysis")
            started = time.perf_counter()
            analysis = analyze(spark, run_dir, out_dir=run_dir / "analysis", config=config)
            seconds = time.perf_counter() - started
            assert analysis.rows == rows
            whole = {c.name: c.violations for c in analysis.checks if c.name in CHECKS}
            verdicts = {c.name: c.status.value for c in analysis.checks}
            # the same verdicts three ways, each check caught (a wrong query is no figure)
            assert duck["violations"] == checks["violations"] == whole, (
                duck["violations"], checks["violations"], whole)
            assert whole == PLANTED, whole  # exactly what was planted, at every size
            assert all(verdicts[name] == Status.FAIL.value for name in CHECKS), verdicts
            result: dict[str, Any] = {
                "rows": rows, "seconds": seconds, "rows_per_s": rows / seconds,
                "verdicts": verdicts, "violations": whole,
                "duckdb_checks_s": duck["seconds"], "spark_checks_s": checks["seconds"],
                "checks_ratio": checks["seconds"] / duck["seconds"],
                "whole_ratio": seconds / duck["seconds"],
            }
            if against is not None:
                _say(f"{rows:,} rows: gossamer analyze from {here} and from {against}")
                result["cli_s"] = cli_analyze(here, run_dir, run_dir / "cli-here", master)
                result["cli_base_s"] = cli_analyze(against, run_dir, run_dir / "cli-base",
                                                   master)
                result["speedup"] = result["cli_base_s"] / result["cli_s"]
            _say(f"{rows:,} rows: " + ", ".join(
                f"{key} {value:.2f}" for key, value in result.items()
                if key.endswith(("_s", "ratio", "speedup")) or key == "seconds"))
            results.append(result)
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
                    "master": master, "spark": spark.version, "load": os.getloadavg(),
                    "against": str(against) if against is not None else None},
        "session_start_s": session_start,
        "warm_up": warm_up,
        "sizes": results,
        "target": {"name": "time growth vs rows", "ratio": last["time_ratio"],
                   "allowed": last["allowed_ratio"],
                   "met": last["time_ratio"] <= last["allowed_ratio"]},
    }


def render(result: dict[str, Any], console: Console) -> None:
    machine = result["machine"]
    load = ", ".join(f"{x:.2f}" for x in machine["load"])
    console.print(f"Spark session start (fixed cost, not in the figures below): "
                  f"{result['session_start_s']:.1f} s; load average at the end: {load}")
    table = Table(title=f"The checks ({', '.join(CHECKS)}), DuckDB and Spark "
                        f"{machine['master']}, same trace files")
    for column in ("rows", "violations", "DuckDB s", "Spark checks s", "Spark/DuckDB",
                   "whole analysis s", "whole/DuckDB"):
        table.add_column(column, justify="right")
    for size in result["sizes"]:
        table.add_row(f"{size['rows']:,}", f"{sum(size['violations'].values()):,}",
                      f"{size['duckdb_checks_s']:.2f}", f"{size['spark_checks_s']:.1f}",
                      f"{size['checks_ratio']:.1f}x", f"{size['seconds']:.1f}",
                      f"{size['whole_ratio']:.1f}x")
    console.print(table)
    table = Table(title=f"gossamer analyze on {machine['master']}")
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
    if machine["against"] is not None:
        table = Table(title=f"gossamer analyze CLI (own process, session start included): "
                            f"this checkout against {machine['against']}")
        for column in ("rows", "this checkout s", "against s", "speed-up"):
            table.add_column(column, justify="right")
        for size in result["sizes"]:
            table.add_row(f"{size['rows']:,}", f"{size['cli_s']:.1f}",
                          f"{size['cli_base_s']:.1f}", f"{size['speedup']:.2f}x")
        console.print(table)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="20k and 200k rows (smoke test)")
    parser.add_argument("--rows", type=int, nargs="+", default=None,
                        help="trace sizes, smallest first (default 1M 10M)")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--against", metavar="SRC", default=None,
                        help="also time gossamer analyze from another checkout's src")
    parser.add_argument("--no-warm-up", action="store_true",
                        help="no untimed warm-up analysis (the smoke test's figures only)")
    parser.add_argument("--json", default=None, help="also write the figures here")
    args = parser.parse_args(argv)
    against = None
    if args.against:
        against = Path(args.against).resolve()
        if not (against / "gossamer").is_dir():
            parser.error(f"--against {args.against}: no gossamer package there")
    result = run(quick=args.quick, sizes=tuple(args.rows) if args.rows else None,
                 master=args.master, against=against, warm_up=not args.no_warm_up)
    render(result, Console())
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
