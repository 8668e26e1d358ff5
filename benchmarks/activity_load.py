"""Seed 003 under load: one `gossamer activity server` process, 20 anonymous clients, each
sending activities as fast as 500 of its own in flight allow; the server's CPU per delivery
and deliveries/s, beside another checkout's server measured in the same run.

    .venv/bin/python benchmarks/activity_load.py                       # this checkout only
    .venv/bin/python benchmarks/activity_load.py --against /tmp/base/src --rounds 3
    .venv/bin/python benchmarks/activity_load.py --minutes 10 --sample 60   # a soak: RSS per minute

The server runs in a process of its own (``python -m gossamer.cli.main activity server``,
``PYTHONPATH`` set to the checkout's ``src``); its CPU time and RSS are read from
``/proc/PID``. The clients share this process's event loop and speak raw JSON lines (no
parsing beyond finding the sender's number), so that the load generator stays cheap. An
activity is in flight from its send until the next client (in a ring) has received it. With
``--against`` the two servers are measured in turn (base, this, base, this, ...) and the
medians compared: ``server CPU per delivery, this / base`` is the figure issue 18 sets a
target on (at most 0.6x of commit 904a816).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

HERE = Path(__file__).resolve().parent.parent
CLIENTS = 20
IN_FLIGHT = 500
SECRET = "bench-secret"
START_TIMEOUT = 60.0
TICKS = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime + stime


def rss_kib(pid: int) -> int:
    return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE // 1024


class Client:
    """One anonymous client: logs in, then sends while fewer than IN_FLIGHT of its own
    activities are unseen by the next client in the ring."""

    def __init__(self, index: int, ring: list[Client]) -> None:
        self.index = index
        self.ring = ring
        self.tag = f'"c":"{index:02d}"'.encode()
        self.sent = 0
        self.received = 0  # lines of activities from others
        self.seen_from: list[int] = [0] * CLIENTS
        self.can_send = asyncio.Event()
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def connect(self, port: int) -> None:
        self.reader, self.writer = await asyncio.open_connection("127.0.0.1", port,
                                                                 limit=1 << 20)
        self.writer.write(b'{"command":"LOGIN","username":"anonymous"}\n')
        line = await self.reader.readline()
        if b"LOGIN_SUCCESS" not in line:
            raise RuntimeError(f"client {self.index}: login failed: {line[:200]!r}")

    def in_flight(self) -> int:
        follower = self.ring[(self.index + 1) % len(self.ring)]
        return self.sent - follower.seen_from[self.index]

    async def send_loop(self, stop: asyncio.Event) -> None:
        assert self.writer is not None
        head = (b'{"command":"ACTIVITY_MESSAGE","username":"anonymous","activity":{' + self.tag
                + b',"k":')
        while not stop.is_set():
            room = IN_FLIGHT - self.in_flight()
            if room <= 0:
                self.can_send.clear()
                await self.can_send.wait()
                continue
            batch = bytearray()
            for _ in range(min(room, 100)):
                self.sent += 1
                batch += head + str(self.sent).encode() + b"}}\n"
            self.writer.write(bytes(batch))
            await self.writer.drain()

    async def read_loop(self) -> None:
        assert self.reader is not None
        marker = b'"c":"'
        while True:
            line = await self.reader.readline()
            if not line:
                return
            at = line.find(marker)
            if at < 0:
                continue
            sender = int(line[at + 5:at + 7])
            self.received += 1
            self.seen_from[sender] += 1
            if sender == (self.index - 1) % len(self.ring):
                self.ring[sender].can_send.set()


async def measure(src: Path, seconds: float, warmup: float,
                  sample: float | None = None) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=str(src), PYTHONUNBUFFERED="1")
    server = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gossamer.cli.main", "activity", "server", "-lp", "0",
        "-s", SECRET, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
        stdin=asyncio.subprocess.DEVNULL, env=env)
    assert server.stdout is not None
    try:
        async with asyncio.timeout(START_TIMEOUT):
            while True:
                line = (await server.stdout.readline()).decode()
                if not line:
                    raise RuntimeError(f"the server from {src} ended before listening")
                if " listening on " in line:
                    port = int(line.rsplit(":", 1)[1])
                    break
        ring: list[Client] = []
        ring.extend(Client(i, ring) for i in range(CLIENTS))
        await asyncio.gather(*(c.connect(port) for c in ring))
        stop = asyncio.Event()
        tasks = [asyncio.create_task(c.read_loop()) for c in ring]
        tasks += [asyncio.create_task(c.send_loop(stop)) for c in ring]
        await asyncio.sleep(warmup)  # the benchmark's measuring window, not a wait for an event
        cpu0, delivered0, t0 = cpu_seconds(server.pid), sum(c.received for c in ring), \
            time.perf_counter()
        rss_samples: list[tuple[float, int]] = []
        if sample:
            end = t0 + seconds
            while time.perf_counter() < end:
                await asyncio.sleep(min(sample, end - time.perf_counter()))
                rss_samples.append((time.perf_counter() - t0, rss_kib(server.pid)))
        else:
            await asyncio.sleep(seconds)
        cpu1, delivered1, t1 = cpu_seconds(server.pid), sum(c.received for c in ring), \
            time.perf_counter()
        rss = rss_kib(server.pid)
        stop.set()
        for c in ring:
            c.can_send.set()
            assert c.writer is not None
            c.writer.close()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        if server.returncode is None:
            server.terminate()
            await server.wait()
    deliveries = delivered1 - delivered0
    cpu = cpu1 - cpu0
    return {"deliveries": deliveries, "seconds": t1 - t0,
            "deliveries_per_s": deliveries / (t1 - t0), "server_cpu_s": cpu,
            "server_cpu_us_per_delivery": 1e6 * cpu / max(1, deliveries),
            "server_rss_kib": rss, "rss_samples": rss_samples}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="measuring window")
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--against", type=Path, help="another checkout's src (the base)")
    parser.add_argument("--minutes", type=float, help="one long run (a soak) of this checkout")
    parser.add_argument("--sample", type=float, default=60.0,
                        help="with --minutes: seconds between RSS samples")
    parser.add_argument("--json", type=Path, help="also write the figures as JSON here")
    args = parser.parse_args()
    console = Console()
    this = HERE / "src"
    report: dict[str, Any] = {"clients": CLIENTS, "in_flight": IN_FLIGHT}
    if args.minutes:
        console.log(f"soak: {args.minutes} min, RSS every {args.sample} s")
        result = asyncio.run(measure(this, args.minutes * 60, args.warmup, args.sample))
        for at, kib in result["rss_samples"]:
            console.log(f"  t={at / 60:5.1f} min  server RSS {kib:,} KiB")
        report["soak"] = result
    else:
        sides = {"this": this} if args.against is None else {"base": args.against,
                                                               "this": this}
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name in sides}
        for round_ in range(args.rounds):
            for name, src in sides.items():
                result = asyncio.run(measure(src, args.seconds, args.warmup))
                runs[name].append(result)
                console.log(f"round {round_ + 1}/{args.rounds} {name}: "
                            f"{result['deliveries_per_s']:,.0f} deliveries/s, "
                            f"{result['server_cpu_us_per_delivery']:.2f} us server CPU "
                            f"per delivery")
        table = Table(title=f"activity server: {CLIENTS} clients, {IN_FLIGHT} in flight each "
                            f"(median of {args.rounds})")
        table.add_column("server")
        for column in ("deliveries/s", "server CPU us/delivery", "server CPU (cores)",
                       "RSS KiB"):
            table.add_column(column, justify="right")
        medians: dict[str, dict[str, float]] = {}
        for name, results in runs.items():
            med = {key: statistics.median(r[key] for r in results)
                   for key in ("deliveries_per_s", "server_cpu_us_per_delivery",
                               "server_cpu_s", "seconds", "server_rss_kib")}
            medians[name] = med
            table.add_row(name, f"{med['deliveries_per_s']:,.0f}",
                          f"{med['server_cpu_us_per_delivery']:.2f}",
                          f"{med['server_cpu_s'] / med['seconds']:.2f}",
                          f"{med['server_rss_kib']:,.0f}")
        console.print(table)
        report["runs"] = runs
        report["medians"] = medians
        if "base" in medians:
            cpu_ratio = (medians["this"]["server_cpu_us_per_delivery"]
                         / medians["base"]["server_cpu_us_per_delivery"])
            rate_ratio = medians["this"]["deliveries_per_s"] / medians["base"]["deliveries_per_s"]
            report["ratios"] = {"cpu_per_delivery": cpu_ratio, "deliveries_per_s": rate_ratio}
            verdict = "met" if cpu_ratio <= 0.6 else "NOT met"
            console.print(f"server CPU per delivery, this / base: {cpu_ratio:.2f}x "
                          f"(target <= 0.6x: {verdict}); deliveries/s this / base: "
                          f"{rate_ratio:.2f}x")
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
