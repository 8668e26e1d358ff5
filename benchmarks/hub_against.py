"""The seed-000 hub of several checkouts side by side, in one run: deliveries/s at peak.

    .venv/bin/python benchmarks/hub_against.py --clients 50 --rounds 4 \\
        base=/tmp/base/src head=src change=/tmp/exp/src

Each ``NAME=SRC`` serves ``HubServer`` (with its keeper, on a temporary data directory) from
the ``src`` folder of one checkout (``git worktree add /tmp/base 904a816``), each in its own
process, with the clients, windows and rounds of ``hub_fanout.py`` (its ``measure``: the
servers interleaved round by round, the best round counts; then the latency at half of each
one's own peak). It prints each hub's best deliveries/s, its CPU, deliveries per server
CPU-second, the half-load p50/p99 and every round, and each figure as a ratio of the first
hub's. Use it to compare a change, its parent and 904a816 in the same minutes on a shared
machine (``--loop NAME=LOOP`` serves one of them with ``GOSSAMER_LOOP=LOOP``: one checkout on
two event loops is ``asyncio=src uvloop=src --loop uvloop=uvloop``); ``hub_fanout.py
--against`` compares two hubs only (beside the bare servers and python-socketio, which it
measures too).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from typing import Any

import hub_fanout as fanout


def _served_from(sources: dict[str, str]) -> None:
    """Each ``NAME`` a server kind of ``hub_fanout``: the hub, served from its SRC."""
    for name, src in sources.items():
        fanout.DIALECTS[name] = fanout.DIALECTS["hub"]
        fanout.SOURCES[name] = src


async def _measure(sources: dict[str, str], clients: int,
                   sizes: fanout.Sizes) -> dict[str, Any]:
    fanout.raise_file_limit(len(sources) * clients + 256)
    frame_bytes = fanout.check_payloads()
    return await fanout.measure(
        clients, sizes, list(sources),
        lambda step: print(f"  {clients} clients, {step}", file=sys.stderr, flush=True),
        frame_bytes)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("hubs", nargs="+", metavar="NAME=SRC",
                        help="a name and the src folder of a checkout (at least two)")
    parser.add_argument("--clients", type=int, nargs="+", default=[50])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--window", type=float, default=3.0)
    parser.add_argument("--loop", action="append", default=[], metavar="NAME=LOOP",
                        help="serve hub NAME with GOSSAMER_LOOP=LOOP (repeatable)")
    args = parser.parse_args(argv)
    sources: dict[str, str] = {}
    for item in args.hubs:
        name, sep, src = item.partition("=")
        if not sep or not name or name in fanout.DIALECTS or name in sources:
            parser.error(f"{item!r}: want NAME=SRC with a new name (not a server kind)")
        if not os.path.isdir(os.path.join(src, "gossamer")):
            parser.error(f"{item!r}: no gossamer package in {src}")
        sources[name] = os.path.abspath(src)
    if len(sources) < 2:
        parser.error("give at least two hubs to compare")
    for item in args.loop:
        name, sep, loop = item.partition("=")
        if not sep or name not in sources or loop not in ("asyncio", "uvloop"):
            parser.error(f"--loop {item!r}: want NAME=asyncio or NAME=uvloop for a hub given")
        fanout.ENVIRONS[name] = {"GOSSAMER_LOOP": loop}
    _served_from(sources)
    for clients in args.clients:
        sizes = fanout.Sizes(clients=(clients,), rounds=args.rounds, warmup=1.0,
                             window=args.window, latency_window=2.0)
        servers = asyncio.run(_measure(sources, clients, sizes))
        first = servers[next(iter(sources))]
        print(f"{clients} clients, {args.rounds} rounds, ratios against {next(iter(sources))}:")
        for name, row in servers.items():
            per_cpu = row["deliveries_per_s"] / max(row["server_cpu"], 1e-9)
            first_per_cpu = first["deliveries_per_s"] / max(first["server_cpu"], 1e-9)
            rounds = ", ".join(f"{p['deliveries_per_s'] / 1e3:,.0f}k" for p in row["peak_rounds"])
            print(f"  {name:>10}: {row['deliveries_per_s']:>11,.0f} deliveries/s "
                  f"({row['deliveries_per_s'] / first['deliveries_per_s']:.2f}x), CPU "
                  f"{row['server_cpu']:.2f}, {per_cpu:,.0f} per CPU-s "
                  f"({per_cpu / first_per_cpu:.2f}x), half load p50 "
                  f"{row['latency']['p50_ms']:.1f} ms p99 {row['latency']['p99_ms']:.1f} ms; "
                  f"rounds {rounds}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
