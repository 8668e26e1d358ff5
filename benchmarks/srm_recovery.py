"""SRM loss recovery in the simulator (the paper's figures, Floyd et al. 1997): requests and
repairs per loss and the recovery delay in round trips to the source, with adaptive timers
beside fixed ones (C1=C2=2, D1=D2=1) in the same run.

Two topologies of ``--members`` members: a router tree whose link next to the source drops
``--lossy`` of the packets (everything behind it misses them together), and the same tree with
independent loss ``--link-loss`` on every link. One source sends ``--items`` items, 10 a
second. A loss is one item a member missed (counted once per item, however many members behind
a link missed it); the delay of a recovery is from the member detecting the loss to the repair,
divided by that member's round trip to the source.

Run ``python benchmarks/srm_recovery.py [--quick] [--members 100] [--seeds 3] [--json OUT]``.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any

import orjson
from rich.console import Console
from rich.table import Table

from gossamer.core.env import Env
from gossamer.core.ids import NodeId
from gossamer.core.messages import Message
from gossamer.core.trace import MemorySink
from gossamer.protocols.dissemination.srm import Srm, SrmConfig, SrmTimerConfig
from gossamer.runtimes.sim import LinkModel, RouterTree, Simulation, TreeLink

GROUP = "g"
SOURCE = "m000"


class Member:
    def __init__(self, env: Env, *, adaptive: bool, period: float) -> None:
        self.srm = Srm(env, SrmConfig(group=GROUP, session_period=period,
                                      timers=SrmTimerConfig(adaptive=adaptive)))

    def start(self) -> None:
        self.srm.start()

    def stop(self) -> None:
        self.srm.stop()

    def on_message(self, src: NodeId, msg: Message) -> None:
        self.srm.on_message(src, msg)


def _tree(members: list[str], *, lossy: float, link_loss: float) -> RouterTree:
    base = RouterTree.two_level(SOURCE, members, fanout=5, delay=0.01, loss=link_loss,
                                lossy_link_loss=lossy if lossy else link_loss)
    return RouterTree([TreeLink(link.a, link.b, link.delay, link.loss) for link in base.links])


def run(seed: int, *, members: int, items: int, adaptive: bool, lossy: float,
        link_loss: float, period: float) -> dict[str, float]:
    names = [f"m{i:03d}" for i in range(members)]
    sink = MemorySink()
    sim = Simulation(seed=seed, link=LinkModel(), trace=sink, trace_messages=False)
    tree = _tree(names, lossy=lossy, link_loss=link_loss)
    sim.add_multicast_group(GROUP, names, tree=tree)
    nodes: dict[str, Member] = {}

    def factory(env: Env) -> Member:
        nodes[env.node] = Member(env, adaptive=adaptive, period=period)
        return nodes[env.node]

    sim.add_nodes(names, factory)
    start = 3 * period
    for i in range(items):
        sim.schedule(start + 0.1 * i, lambda: nodes[SOURCE].srm.multicast("x" * 200))
    sim.run(until=start + 0.1 * items + 10 * period)
    one_way = tree.spread(SOURCE, _NoLoss())
    rows = sink.named()
    lost = {r.msg for r in rows if r.event == "loss"}
    delays = [orjson.loads(r.info or "{}")["delay"] / (2 * one_way[r.node])
              for r in rows if r.event == "recovered"]
    missing = sum(1 for r in rows if r.event == "gave_up")
    requests = sum(n.srm.stats["requests"] for n in nodes.values())
    repairs = sum(n.srm.stats["repairs"] for n in nodes.values())
    return {"losses": len(lost), "requests_per_loss": requests / max(len(lost), 1),
            "repairs_per_loss": repairs / max(len(lost), 1),
            "delay_rtt": statistics.fmean(delays) if delays else 0.0, "gave_up": missing}


class _NoLoss(random.Random):
    """An rng whose draws never fall under a loss probability (for the path delays)."""

    def random(self) -> float:
        return 1.0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="20 members, 40 items, 1 seed")
    parser.add_argument("--members", type=int, default=100)
    parser.add_argument("--items", type=int, default=200)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--lossy", type=float, default=0.1)
    parser.add_argument("--link-loss", type=float, default=0.01)
    parser.add_argument("--period", type=float, default=1.0, help="session period (s)")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    if args.quick:
        args.members, args.items, args.seeds = 20, 40, 1
    console = Console()
    table = Table(title=f"SRM loss recovery, {args.members} members, {args.items} items, "
                        f"{args.seeds} seed(s)")
    for column in ("topology", "timers", "losses", "requests/loss", "repairs/loss",
                   "delay (RTT)", "given up"):
        table.add_column(column, justify="right" if column not in ("topology", "timers")
                         else "left")
    out: list[dict[str, Any]] = []
    started = time.monotonic()
    for topology, lossy, link_loss in (("lossy link near source", args.lossy, 0.0),
                                       ("loss on every link", 0.0, args.link_loss)):
        for adaptive in (False, True):
            runs = [run(seed, members=args.members, items=args.items, adaptive=adaptive,
                        lossy=lossy, link_loss=link_loss, period=args.period)
                    for seed in range(1, args.seeds + 1)]
            row: dict[str, Any] = {key: statistics.fmean(r[key] for r in runs)
                                   for key in runs[0]}
            row.update(topology=topology, timers="adaptive" if adaptive else "fixed")
            out.append(row)
            table.add_row(topology, str(row["timers"]), f"{row['losses']:.0f}",
                          f"{row['requests_per_loss']:.2f}", f"{row['repairs_per_loss']:.2f}",
                          f"{row['delay_rtt']:.2f}", f"{row['gave_up']:.0f}")
    console.print(table)
    console.print(f"{time.monotonic() - started:.1f} s")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
