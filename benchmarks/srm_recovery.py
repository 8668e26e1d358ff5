"""SRM loss recovery in the simulator (the paper's figures, Floyd et al. 1997): requests and
repairs per loss and the recovery delay in round trips to the source, with adaptive timers
beside fixed ones (C1=C2=2, D1=D2=1) in the same run.

Two topologies of ``--members`` members, each with a lossy link next to the source (it drops
``--lossy`` of the packets, everything behind it misses them together) or independent loss
``--link-loss`` on every link:
- ``paper``: the paper's kind of tree, ``--vertices`` vertices of degree at most 4, the source
  at the root and the other members on random vertices, so members sit at every depth;
- ``two-level``: the source under a router ``r0`` with five routers below it and the members
  spread over those, every member equally far from every other: the worst case for
  suppression (every timer of a kind falls in the same window).

``--drops all`` (the default) applies the loss to every packet on the links, the source's
data and every request, repair and session message alike; ``--drops data`` to the source's
data packets only, as the paper's simulations do (a data packet dropped on a link, the
recovery's own packets delivered): the figure the issue's targets take from the paper.

One source sends ``--items`` items, ``--rate`` a second. A loss is one packet dropped on one
link with members behind it (an item dropped on two links is two losses, however many members
behind each missed it); the delay of a recovery is from the member detecting the loss to the
repair, divided by that member's round trip to the source. "adapted" is the same figures over
the second half of the run (the timers have adapted by then; the paper's figures are per
loss round as it goes on).

Run ``python benchmarks/srm_recovery.py [--quick] [--members 100] [--seeds 2] [--json OUT]``.
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
from gossamer.runtimes.sim import LinkModel, RouterTree, Simulation

GROUP = "g"
SOURCE = "m000"
TOPOLOGIES = ("paper", "two-level")
LOSS_MODES = (("lossy link near source", "lossy"), ("loss on every link", "every"))


class Member:
    def __init__(self, env: Env, *, timers: SrmTimerConfig, period: float) -> None:
        self.srm = Srm(env, SrmConfig(group=GROUP, session_period=period, timers=timers))

    def start(self) -> None:
        self.srm.start()

    def stop(self) -> None:
        self.srm.stop()

    def on_message(self, src: NodeId, msg: Message) -> None:
        self.srm.on_message(src, msg)


class DropCounter(RouterTree):
    """The same tree, counting the losses of the packets sent while ``counting``: each link
    that dropped one with members behind it (nothing behind a dropped link is reached, so
    no loss is counted twice)."""

    def __init__(self, tree: RouterTree, source: str, members: Sequence[str], *,
                 data_only: bool = False) -> None:
        super().__init__(tree.links)
        self.data_only = data_only
        self.members = tuple(m for m in members if m != source)
        self.source = source
        self.counting = False
        self.drops = 0
        self.parent: dict[str, str] = {}
        todo = [source]
        seen = {source}
        while todo:
            vertex = todo.pop()
            for link in self._adjacent[vertex]:
                other = link.b if link.a == vertex else link.a
                if other not in seen:
                    seen.add(other)
                    self.parent[other] = vertex
                    todo.append(other)

    def spread(self, source: str, rng: random.Random) -> dict[str, float]:
        if self.data_only and not self.counting:  # a request, repair or session message
            return super().spread(source, _NoLoss())
        reached = super().spread(source, rng)
        if self.counting:
            dropped_at: set[str] = set()
            for member in self.members:
                if member in reached:
                    continue
                vertex = member
                while self.parent[vertex] != self.source and self.parent[vertex] not in reached:
                    vertex = self.parent[vertex]
                dropped_at.add(vertex)
            self.drops += len(dropped_at)
        return reached


def make_tree(topology: str, members: list[str], *, lossy: float, link_loss: float,
              vertices: int, seed: int) -> RouterTree:
    if topology == "paper":
        return RouterTree.bounded_degree(SOURCE, members, vertices=vertices, degree=4,
                                         delay=0.01, loss=link_loss, lossy_link_loss=lossy,
                                         rng=random.Random(seed))
    return RouterTree.two_level(SOURCE, members, fanout=5, delay=0.01, loss=link_loss,
                                lossy_link_loss=lossy if lossy else link_loss)


def run(seed: int, *, topology: str, members: int, items: int, timers: SrmTimerConfig,
        lossy: float, link_loss: float, period: float, rate: float, vertices: int,
        data_only: bool = False) -> dict[str, float]:
    names = [f"m{i:03d}" for i in range(members)]
    sink = MemorySink()
    sim = Simulation(seed=seed, link=LinkModel(), trace=sink, trace_messages=False)
    tree = DropCounter(make_tree(topology, names, lossy=lossy, link_loss=link_loss,
                                 vertices=vertices, seed=seed), SOURCE, names,
                       data_only=data_only)
    sim.add_multicast_group(GROUP, names, tree=tree)
    nodes: dict[str, Member] = {}

    def factory(env: Env) -> Member:
        nodes[env.node] = Member(env, timers=timers, period=period)
        return nodes[env.node]

    def send() -> None:
        tree.counting = True
        nodes[SOURCE].srm.multicast("x" * 200)
        tree.counting = False

    def totals() -> tuple[int, int, int]:
        return (tree.drops, sum(n.srm.stats["requests"] for n in nodes.values()),
                sum(n.srm.stats["repairs"] for n in nodes.values()))

    sim.add_nodes(names, factory)
    start = 3 * period
    half = start + items / rate / 2
    at_half: list[tuple[int, int, int]] = []
    for i in range(items):
        sim.schedule(start + i / rate, send)
    sim.schedule(half, lambda: at_half.append(totals()))
    sim.run(until=start + items / rate + 10 * period)
    one_way = tree.spread(SOURCE, _NoLoss())
    rows = sink.named()
    delays = [(r.t, orjson.loads(r.info or "{}")["delay"] / (2 * one_way[r.node]))
              for r in rows if r.event == "recovered"]
    end = totals()
    out = _figures(end, delays)
    out["gave_up"] = sum(1 for r in rows if r.event == "gave_up")
    later = tuple(e - h for e, h in zip(end, at_half[0], strict=True))
    out.update({f"adapted_{k}": v for k, v in _figures(
        (later[0], later[1], later[2]), [d for d in delays if d[0] >= half]).items()})
    return out


def _figures(counts: tuple[int, int, int], delays: list[tuple[float, float]]
             ) -> dict[str, float]:
    losses, requests, repairs = counts
    return {"losses": losses, "requests_per_loss": requests / max(losses, 1),
            "repairs_per_loss": repairs / max(losses, 1),
            "delay_rtt": statistics.fmean(d for _, d in delays) if delays else 0.0}


def _both(row: dict[str, Any], key: str, fmt: str) -> str:
    """A figure over the whole run and over its adapted second half."""
    return f"{row[key]:{fmt}} | {row['adapted_' + key]:{fmt}}"


class _NoLoss(random.Random):
    """An rng whose draws never fall under a loss probability (for the path delays)."""

    def random(self) -> float:
        return 1.0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help="20 members on 200 vertices, 100 items, 1 seed")
    parser.add_argument("--members", type=int, default=100)
    parser.add_argument("--vertices", type=int, default=1000, help="of the paper tree")
    parser.add_argument("--items", type=int, default=2000)
    parser.add_argument("--rate", type=float, default=50.0, help="items a second")
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--topology", choices=TOPOLOGIES, action="append",
                        help="repeatable; default both")
    parser.add_argument("--lossy", type=float, default=0.1)
    parser.add_argument("--link-loss", type=float, default=0.01)
    parser.add_argument("--period", type=float, default=1.0, help="session period (s)")
    parser.add_argument("--ave-dups", type=float, default=SrmTimerConfig().ave_dups,
                        help="the adaptive timers' target of duplicates per loss (AveDups)")
    parser.add_argument("--drops", choices=("all", "data"), default="all",
                        help="what the links drop: every packet (default) or the source's "
                             "data only, as in the paper's simulations")
    parser.add_argument("--json", default=None)
    parser.add_argument("--plot", default=None, metavar="PNG",
                        help="draw requests, repairs and delay per case (adapted half)")
    args = parser.parse_args(argv)
    if args.quick:
        args.members, args.vertices, args.items, args.seeds = 20, 200, 100, 1
    topologies = args.topology or list(TOPOLOGIES)
    console = Console(width=150)
    table = Table(title=f"SRM loss recovery, {args.members} members, {args.items} items at "
                        f"{args.rate:g}/s, {args.seeds} seed(s), links drop "
                        f"{'every packet' if args.drops == 'all' else 'data only'}: whole run "
                        "| adapted (second half)")
    for column in ("topology", "loss", "timers", "losses", "requests/loss", "repairs/loss",
                   "delay (RTT)", "given up"):
        table.add_column(column, justify="left" if column in ("topology", "loss", "timers")
                         else "right")
    out: list[dict[str, Any]] = []
    started = time.monotonic()
    cases = [(t, name, mode, adaptive) for t in topologies for name, mode in LOSS_MODES
             for adaptive in (False, True)]
    step = 0
    for topology, loss_name, mode, adaptive in cases:
        runs = []
        for seed in range(1, args.seeds + 1):
            step += 1
            console.print(f"[{step}/{len(cases) * args.seeds}] {topology}, {loss_name}, "
                          f"{'adaptive' if adaptive else 'fixed'} timers, seed {seed} "
                          f"({time.monotonic() - started:.0f} s)")
            runs.append(run(seed, topology=topology, members=args.members, items=args.items,
                            timers=SrmTimerConfig(adaptive=adaptive,
                                                  ave_dups=args.ave_dups),
                            lossy=args.lossy if mode == "lossy" else 0.0,
                            link_loss=args.link_loss if mode == "every" else 0.0,
                            period=args.period, rate=args.rate, vertices=args.vertices,
                            data_only=args.drops == "data"))
        row: dict[str, Any] = {key: statistics.fmean(r[key] for r in runs) for key in runs[0]}
        row.update(topology=topology, loss=loss_name, drops=args.drops,
                   timers="adaptive" if adaptive else "fixed")
        out.append(row)
        table.add_row(topology, loss_name, str(row["timers"]), _both(row, "losses", ".0f"),
                      _both(row, "requests_per_loss", ".2f"),
                      _both(row, "repairs_per_loss", ".2f"), _both(row, "delay_rtt", ".2f"),
                      f"{row['gave_up']:.0f}")
    console.print(table)
    console.print(f"{time.monotonic() - started:.1f} s")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=1)
    if args.plot:
        plot(out, args.plot)
    return 0


def plot(rows: Sequence[dict[str, Any]], path: str) -> None:
    """Requests and repairs per loss and the delay, fixed beside adaptive timers, for each
    topology and loss: bars for the whole run, a black tick for its adapted second half, the
    1.5 target marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cases = list(dict.fromkeys((r["topology"], r["loss"]) for r in rows))
    figure, axes = plt.subplots(1, 3, figsize=(13, 4))
    for ax, key, title in zip(axes, ("requests_per_loss", "repairs_per_loss", "delay_rtt"),
                              ("requests per loss", "repairs per loss",
                               "recovery delay (round trips)"), strict=True):
        highest = 0.0
        for offset, timers in ((-0.2, "fixed"), (0.2, "adaptive")):
            chosen = [next(r for r in rows if (r["topology"], r["loss"]) == case
                           and r["timers"] == timers) for case in cases]
            xs = [i + offset for i in range(len(cases))]
            whole = [r[key] for r in chosen]
            ax.bar(xs, whole, width=0.4, label=f"{timers}, whole run")
            ax.scatter(xs, [r["adapted_" + key] for r in chosen], marker="_", s=300,
                       color="black", zorder=3, label="second half" if timers == "fixed" else None)
            highest = max(highest, *whole)
        if key != "delay_rtt":
            ax.axhline(1.5, color="grey", linestyle="--", linewidth=1, label="target 1.5")
        ax.set_yscale("log" if highest > 10 else "linear")
        ax.set_xticks(range(len(cases)))
        ax.set_xticklabels([f"{t}\n{loss.replace('loss on ', '').replace(' near source', '')}"
                            for t, loss in cases], fontsize=8)
        ax.set_title(title)
        ax.legend(fontsize=7)
    drops = {r.get("drops", "all") for r in rows}
    what = "the links drop the data only" if drops == {"data"} else "the links drop every packet"
    figure.suptitle(f"SRM loss recovery, fixed against adaptive timers ({what})")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


if __name__ == "__main__":
    sys.exit(main())
