"""Replicated log benchmark: three ``ReplicatedLog`` replicas on loopback in one process, every
replica a client, 10-byte commands with a bounded number in flight: decided operations/s and
propose-to-decide latency (p50, p99), in memory, durable with group commit (``WriteBehindStore``:
one fsync for many writes, the default) and durable with one commit per write (``SqliteStore``),
with the ratios against the last, measured in the same run.

Run ``python benchmarks/paxos_loopback.py [--quick] [--ops N] [--inflight K] [--dir DIR]
[--json OUT]``. One process hosts all three replicas, so they share one core: this measures
the protocol's cost per decision, not a deployment (issue 19's ``benchmarks/paxos.py`` against
PySyncObj is still to build).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import free_port
from gossamer.services.paxos import ReplicatedLog

MODES = ("memory", "group commit", "commit per write")


async def one_mode(mode: str, ops: int, inflight: int, base: Path) -> dict[str, Any]:
    members = [f"127.0.0.1:{free_port()}" for _ in range(3)]
    logs = [ReplicatedLog(m, members,
                          data_dir=None if mode == "memory" else base / m.replace(":", "_"),
                          group_commit=mode != "commit per write") for m in members]
    try:
        for log in logs:
            await log.start()
        await logs[0].wait_leader(30.0)
        latencies: list[float] = []
        gate = asyncio.Semaphore(inflight)

        async def propose(i: int) -> None:
            async with gate:
                began = time.perf_counter()
                await logs[i % 3].propose("x" * 10, timeout=120.0)
                latencies.append(time.perf_counter() - began)

        began = time.perf_counter()
        await asyncio.gather(*(propose(i) for i in range(ops)))
        elapsed = time.perf_counter() - began
    finally:
        for log in logs:
            await log.stop()
    latencies.sort()
    return {"mode": mode, "ops": ops, "ops_per_s": ops / elapsed,
            "p50_ms": 1000 * latencies[len(latencies) // 2],
            "p99_ms": 1000 * latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]}


def run(*, quick: bool = False, ops: int | None = None, inflight: int = 300,
        directory: str | None = None) -> dict[str, Any]:
    count = ops if ops is not None else (300 if quick else 5000)
    with tempfile.TemporaryDirectory(dir=directory) as tmp:
        rows = [asyncio.run(one_mode(mode, count, inflight, Path(tmp) / str(i)))
                for i, mode in enumerate(MODES)]
    baseline = rows[-1]["ops_per_s"]
    for row in rows:
        row["ratio"] = row["ops_per_s"] / baseline
    return {"ops": count, "inflight": inflight, "modes": rows}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--ops", type=int, default=None)
    parser.add_argument("--inflight", type=int, default=300)
    parser.add_argument("--dir", default=None)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    result = run(quick=args.quick, ops=args.ops, inflight=args.inflight, directory=args.dir)
    print(f"{result['ops']} ops, {result['inflight']} in flight, 3 replicas on loopback")
    for row in result["modes"]:
        print(f"  {row['mode']:<17} {row['ops_per_s']:8.0f} ops/s  p50 {row['p50_ms']:6.1f} ms"
              f"  p99 {row['p99_ms']:6.1f} ms  {row['ratio']:.2f}x commit per write")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
