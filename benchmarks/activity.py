"""Seed 003 on loopback: activities delivered per second with 1, 3 and 7 in-process asyncio
servers and 100 clients (1 server is the baseline, ratios printed), and how evenly REDIRECT
spreads 100 clients over 7 servers (max load / min load).

    .venv/bin/python benchmarks/activity.py            # full run
    .venv/bin/python benchmarks/activity.py --quick    # < 30 s
    .venv/bin/python benchmarks/activity.py --json     # figures as JSON on the last line

One process, one event loop: servers and clients share a core, so the figures compare
topologies, not machines. Each client sends ``--messages`` activities; a run ends when every
other client has them all.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import time
from typing import Any

from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from gossamer.services.activity.client import ActivityClient
from gossamer.services.activity.server import ActivityTcpServer

SECRET = "bench"
TIMEOUT = 120.0


@dataclasses.dataclass
class Result:
    servers: int
    clients: int
    activities: int
    deliveries: int
    seconds: float

    @property
    def rate(self) -> float:
        return self.deliveries / self.seconds if self.seconds else 0.0


async def start_servers(count: int, interval: float) -> list[ActivityTcpServer]:
    """A root, then children of the root (or of the first children: a tree of depth 2)."""
    servers: list[ActivityTcpServer] = []
    for i in range(count):
        parent = None if i == 0 else servers[(i - 1) // 3].address
        server = ActivityTcpServer(secret=SECRET, port=0, announce_interval=interval,
                                   remote=parent, hash_iterations=10, server_id=f"s{i}")
        await server.start()
        servers.append(server)
    deadline = time.monotonic() + TIMEOUT
    while any(s.core is None or (s.core.parent is not None and s.core.state.value != "attached")
              for s in servers[1:]):
        if time.monotonic() > deadline:
            raise TimeoutError("servers did not attach")
        await asyncio.sleep(0.01)
    return servers


async def throughput(servers: int, clients: int, messages: int) -> Result:
    network = await start_servers(servers, interval=5.0)  # no REDIRECT: clients placed by hand
    conns: list[ActivityClient] = []
    try:
        for i in range(clients):
            client = ActivityClient(*network[i % servers].address, node=f"c{i}",
                                    max_pending=10**7)
            await client.connect()
            conns.append(client)
        await asyncio.sleep(0.05)
        expected = (clients - 1) * messages

        async def drain(client: ActivityClient) -> None:
            for _ in range(expected):
                await client.receive(TIMEOUT)

        start = time.perf_counter()
        readers = [asyncio.create_task(drain(c)) for c in conns]
        for n in range(messages):
            for client in conns:
                await client.send({"n": n})
        await asyncio.gather(*readers)
        seconds = time.perf_counter() - start
        return Result(servers, clients, clients * messages, clients * expected, seconds)
    finally:
        for client in conns:
            await client.close()
        for server in reversed(network):
            await server.stop()


async def redirect_spread(servers: int, clients: int) -> dict[str, Any]:
    """Clients all dial the root, one after another; REDIRECT sends them elsewhere."""
    network = await start_servers(servers, interval=0.1)
    conns: list[ActivityClient] = []
    try:
        await asyncio.sleep(0.5)  # announcements have made every load known everywhere
        for i in range(clients):
            client = ActivityClient(*network[0].address, node=f"c{i}")
            await client.connect()
            conns.append(client)
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.5)
        loads = [s.core.load if s.core is not None else 0 for s in network]
        return {"loads": loads, "max_over_min": max(loads) / max(1, min(loads)),
                "redirects": sum(c.redirects for c in conns), "placed": sum(loads),
                "gave_up": sum(1 for c in conns if c.error is not None)}
    finally:
        for client in conns:
            await client.close()
        for server in reversed(network):
            await server.stop()


async def run(quick: bool, console: Console) -> dict[str, Any]:
    clients = 100
    messages = 3 if quick else 20
    figures: dict[str, Any] = {"clients": clients, "messages_per_client": messages,
                               "throughput": [], "spread": None}
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("activity benchmark", total=4)
        for servers in (1, 3, 7):
            progress.update(task, description=f"{servers} server(s), {clients} clients")
            result = await throughput(servers, clients, messages)
            figures["throughput"].append(dataclasses.asdict(result) | {"rate": result.rate})
            progress.advance(task)
        progress.update(task, description="REDIRECT spread over 7 servers")
        figures["spread"] = await redirect_spread(7, clients)
        progress.advance(task)
    return figures


def report(figures: dict[str, Any], console: Console) -> None:
    base = figures["throughput"][0]["rate"]
    table = Table(title=f"activities on loopback: {figures['clients']} clients, "
                        f"{figures['messages_per_client']} each")
    for column in ("servers", "activities", "deliveries", "seconds", "deliveries/s",
                   "vs 1 server"):
        table.add_column(column, justify="right")
    for row in figures["throughput"]:
        table.add_row(str(row["servers"]), f"{row['activities']:,}", f"{row['deliveries']:,}",
                      f"{row['seconds']:.2f}", f"{row['rate']:,.0f}",
                      f"{row['rate'] / base:.2f}x" if base else "-")
    console.print(table)
    spread = figures["spread"]
    console.print(f"REDIRECT spread, 100 clients over 7 servers: loads {spread['loads']}, "
                  f"max/min = {spread['max_over_min']:.2f}, {spread['redirects']} redirects, "
                  f"{spread['placed']} placed, {spread['gave_up']} gave up (> 10 redirects)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (< 30 s)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON last")
    args = parser.parse_args()
    console = Console()
    figures = asyncio.run(run(args.quick, console))
    report(figures, console)
    if args.json:
        print(json.dumps(figures))


if __name__ == "__main__":
    main()
