"""Soak test: one service at a sustained rate on loopback for minutes, its server's memory
sampled throughout; memory must be flat once warm (issue 18: RSS at the end within 10% of
RSS at minute 2, after the hub's per-origin logs have filled).

Run ``python benchmarks/soak.py SERVICE [--minutes M] [--clients N] [--rate R] [--warm W]
[--json OUT] [--plot OUT.png]``; SERVICE is ``replica`` (``gossamer hub --data-dir``, clients
``Replica`` writing a bounded set of keys each), ``activity`` (``gossamer activity server``,
anonymous clients sending activities, every client receiving every other's) or ``pubsub``
(``benchmarks/pubsub.py``'s five ``gossamer pubsub node`` processes in Scribe mode, one
publisher and four subscribers on their command ports; ``--clients`` does not apply). The
servers run in processes of their own; their RSS (``/proc/PID/status``, summed over the nodes
for ``pubsub``) is read every ``--sample`` seconds and a line is printed each time. The
verdict compares the RSS at the end with the RSS at ``--warm`` minutes
(default 2), and says whether every client got what it should (replica: converged after the
load; activity: every broadcast delivered).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from rich.console import Console

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import free_port, until_listening

ROOT = Path(__file__).resolve().parent.parent
WAIT = 60.0  # seconds: the bound on start-up and on the final convergence
# the replica workload writes these keys again and again: few enough that every bounded
# structure of the hub is full before the warm mark (each key's history keeps 256 writes: at the
# default 20 writes/s per client, 5 keys fill in about a minute, as the per-origin logs of 1,000
# do; with 50 keys the histories were still filling at minute 10, and RSS grew with them)
KEYS_PER_CLIENT = 5
TARGET = 0.10  # RSS at the end at most 10% above (or below) RSS once warm

console = Console(stderr=True)


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")


def start_server(service: str, port: int, data_dir: Path) -> subprocess.Popen[bytes]:
    if service == "replica":
        args = ["hub", "--host", "127.0.0.1", "--port", str(port), "--data-dir",
                str(data_dir), "--log-level", "WARNING"]
    else:
        args = ["activity", "server", "-lh", "127.0.0.1", "-lp", str(port), "-s", "soak",
                "--data-dir", str(data_dir)]
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    return subprocess.Popen([sys.executable, "-m", "gossamer.cli.main", *args],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)


class Load:
    """A workload: ``start`` connects the clients, ``tick(n)`` sends operation ``n``,
    ``finish`` says whether every client got what it should; ``pids`` are the processes whose
    memory is measured (set by ``start`` where the load starts them)."""

    pids: list[int]

    start: Callable[[], Awaitable[None]]
    tick: Callable[[int], None]
    finish: Callable[[], Awaitable[dict[str, Any]]]
    close: Callable[[], Awaitable[None]]


class ReplicaLoad(Load):
    def __init__(self, port: int, clients: int, work: Path) -> None:
        from gossamer.services.replica.client import Replica

        self.replicas = [Replica(f"ws://127.0.0.1:{port}/ws", client_id=f"c{i:03d}",
                                 db_path=work / f"c{i:03d}.sqlite") for i in range(clients)]

    async def start(self) -> None:
        for replica in self.replicas:
            await replica.start()

    def tick(self, n: int) -> None:
        writer = self.replicas[n % len(self.replicas)]
        writer.set(f"k-{writer.client_id}-{(n // len(self.replicas)) % KEYS_PER_CLIENT}",
                   {"n": n})

    async def finish(self) -> dict[str, Any]:
        for replica in self.replicas:
            await replica.synced(timeout=WAIT)
        states = [replica.items() for replica in self.replicas]
        return {"converged": all(state == states[0] for state in states),
                "keys": len(states[0])}

    async def close(self) -> None:
        for replica in self.replicas:
            await replica.close()


class ActivityLoad(Load):
    def __init__(self, port: int, clients: int) -> None:
        self.port = port
        self.clients = clients
        self.streams: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
        self.received = [0] * clients
        self.sent = [0] * clients
        self.readers: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        for index in range(self.clients):
            reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
            writer.write(b'{"command": "LOGIN", "username": "anonymous"}\n')
            line = await asyncio.wait_for(reader.readline(), WAIT)
            if b"LOGIN_SUCCESS" not in line:
                raise RuntimeError(f"client {index} not logged in: {line!r}")
            self.streams.append((reader, writer))
            self.readers.append(asyncio.get_running_loop().create_task(self._read(index)))

    async def _read(self, index: int) -> None:
        reader = self.streams[index][0]
        while line := await reader.readline():
            if b"ACTIVITY_BROADCAST" in line:
                self.received[index] += 1

    def tick(self, n: int) -> None:
        index = n % self.clients
        self.sent[index] += 1
        self.streams[index][1].write(json.dumps({
            "command": "ACTIVITY_MESSAGE", "username": "anonymous",
            "activity": {"n": n}}).encode() + b"\n")

    async def finish(self) -> dict[str, Any]:
        total = sum(self.sent)
        owed = [total - self.sent[i] for i in range(self.clients)]  # not its own
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(WAIT):
                while not all(r >= o for r, o in zip(self.received, owed, strict=True)):
                    await asyncio.sleep(0.1)  # the last broadcasts; bounded above
        return {"sent": total, "owed": sum(owed), "received": sum(self.received),
                "all_delivered": all(r >= o for r, o in zip(self.received, owed, strict=True))}

    async def close(self) -> None:
        for task in self.readers:
            task.cancel()
        for _, writer in self.streams:
            writer.close()


class PubSubLoad(Load):
    """``benchmarks/pubsub.py``'s cluster: node 0's client publishes, four subscribe."""

    def __init__(self, work: Path) -> None:
        from pubsub import GossamerCluster

        self.cluster = GossamerCluster("scribe", work)
        self.delivered: list[set[int]] = []
        self.sent = 0

    async def start(self) -> None:
        self.delivered = [set() for _ in range(4)]
        await self.cluster.start(lambda sub, seq: self.delivered[sub].add(seq))
        self.pids = list(self.cluster.pids)
        await asyncio.sleep(2.0)  # the subscriptions reach the topic's root (then publish)

    def tick(self, n: int) -> None:
        self.sent += 1
        self.cluster.clients[0][1].write(f"publish bench m{n}\n".encode())

    async def finish(self) -> dict[str, Any]:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(WAIT):
                while any(len(got) < self.sent for got in self.delivered):
                    await asyncio.sleep(0.1)  # the last deliveries; bounded above
        return {"sent": self.sent, "accepted": self.cluster.accepted,
                "refused": len(self.cluster.refused),
                "delivered": [len(got) for got in self.delivered],
                "all_delivered": all(len(got) == self.sent for got in self.delivered)}

    async def close(self) -> None:
        await self.cluster.close()


async def soak(service: str, *, minutes: float, clients: int, rate: float, sample: float,
               warm: float) -> dict[str, Any]:
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="gossamer-soak-") as tmp:
        work = Path(tmp)
        server = None if service == "pubsub" else start_server(service, port, work / "server")
        load: Load = (ReplicaLoad(port, clients, work) if service == "replica"
                      else ActivityLoad(port, clients) if service == "activity"
                      else PubSubLoad(work))
        samples: list[tuple[float, int]] = []
        try:
            if server is not None:
                await until_listening(port, timeout=WAIT)
                load.pids = [server.pid]
            await load.start()
            started = time.perf_counter()
            next_sample = 0.0
            sent = 0
            while (elapsed := time.perf_counter() - started) < minutes * 60:
                due = int(elapsed * rate)
                while sent < due:
                    load.tick(sent)
                    sent += 1
                if elapsed >= next_sample:
                    samples.append((elapsed, sum(rss_kib(pid) for pid in load.pids)))
                    console.log(f"{service}: {elapsed / 60:5.2f} min, {sent:,} operations, "
                                f"server RSS {samples[-1][1] / 1024:,.1f} MiB")
                    next_sample += sample
                await asyncio.sleep(0.01)  # pacing: what is due is sent at the next wake-up
            samples.append((time.perf_counter() - started,
                            sum(rss_kib(pid) for pid in load.pids)))
            outcome = await load.finish()
        finally:
            await load.close()
            if server is not None:
                server.send_signal(signal.SIGTERM)
                try:
                    server.wait(timeout=WAIT)
                except subprocess.TimeoutExpired:
                    server.kill()
    warm_rss = next((kib for at, kib in samples if at >= warm * 60), samples[-1][1])
    end_rss = samples[-1][1]
    drift = end_rss / warm_rss - 1
    return {"service": service, "minutes": minutes, "clients": clients, "rate": rate,
            "operations": sent, "samples": samples, "warm_minutes": warm,
            "rss_warm_kib": warm_rss, "rss_end_kib": end_rss, "drift": drift,
            "flat": abs(drift) <= TARGET, "outcome": outcome}


def plot(result: dict[str, Any], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    at = [t / 60 for t, _ in result["samples"]]
    mib = [kib / 1024 for _, kib in result["samples"]]
    fig, ax = plt.subplots(figsize=(7, 3.5))
    ax.plot(at, mib, marker=".")
    ax.axvline(result["warm_minutes"], color="grey", linestyle="--", label="warm")
    ax.set_xlabel("minutes")
    ax.set_ylabel("server RSS (MiB)")
    ax.set_title(f"{result['service']} soak: {result['clients']} clients, "
                 f"{result['rate']:g} operations/s")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("service", choices=("replica", "activity", "pubsub"))
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--rate", type=float, default=200.0, help="operations per second")
    parser.add_argument("--sample", type=float, default=10.0, help="seconds between samples")
    parser.add_argument("--warm", type=float, default=2.0,
                        help="minutes after which memory must stay flat")
    parser.add_argument("--json", default=None)
    parser.add_argument("--plot", default=None, help="PNG of the server's RSS over time")
    args = parser.parse_args(argv)
    if args.minutes <= 0 or args.clients < 2 or args.rate <= 0 or args.sample <= 0:
        parser.error("need --minutes > 0, --clients >= 2, --rate > 0, --sample > 0")
    result = asyncio.run(soak(args.service, minutes=args.minutes, clients=args.clients,
                              rate=args.rate, sample=args.sample,
                              warm=min(args.warm, args.minutes)))
    print(f"{args.service}: {result['operations']:,} operations in {args.minutes:g} min; "
          f"server RSS {result['rss_warm_kib'] / 1024:.1f} MiB at {result['warm_minutes']:g} "
          f"min, {result['rss_end_kib'] / 1024:.1f} MiB at the end ({result['drift']:+.1%}: "
          f"{'flat' if result['flat'] else 'NOT flat'}, target within {TARGET:.0%}); "
          f"{json.dumps(result['outcome'])}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    if args.plot:
        plot(result, args.plot)
    ok = result["flat"] and (result["outcome"].get("converged", True)
                             and result["outcome"].get("all_delivered", True))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
