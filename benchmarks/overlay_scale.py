"""Overlay scale benchmark: gossip broadcast over HyParView in the simulator at 10,000 nodes.

Three figures, all from the same protocol code the tests run:

- reliability without failures, and messages per broadcast, flood vs tree (Plumtree-style);
  the tree's payload messages are printed as a ratio of flooding's, measured in the same run;
- reliability against the fraction of nodes crashed at once (0..80 %, flood mode): the share
  of live nodes the first broadcast after the crash reaches within 1 s and in the end (with
  recovery), and the worst share of the broadcasts made once views have healed; each fraction
  twice, with failures found only by HyParView's keepalive and with ``connection_refused``
  (a send to a dead node fails at once, as over TCP, and HyParView repairs right away).

Run ``python benchmarks/overlay_scale.py [--quick] [--nodes N] [--seed S] [--json OUT]``.
Nodes join one by one (each through a random earlier node) over ``nodes / 1000`` seconds of
virtual time, then the overlay settles for 4 s before anything is measured. Links: uniform
5-50 ms latency, no loss.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from rich.console import Console
from rich.table import Table

from gossamer.core.env import Env
from gossamer.core.ids import node_ids
from gossamer.core.trace import Row, TraceSink
from gossamer.protocols.dissemination import GossipBroadcast, GossipConfig
from gossamer.protocols.membership import HyParView
from gossamer.runtimes.sim import LinkModel, Simulation, Uniform

__all__ = ["main", "render", "run"]

LINK = LinkModel(latency=Uniform(0.005, 0.05))
SETTLE = 4.0  # virtual seconds between the last join and the first measurement
HEAL = 10.0  # virtual seconds after a crash before the "healed" broadcasts
SPACING = 0.5  # virtual seconds between two measured broadcasts
DRAIN = 5.0  # virtual seconds after the last broadcast for deliveries and repairs


@dataclass(frozen=True)
class Sizes:
    nodes: int
    fractions: tuple[float, ...]
    broadcasts: int  # measured broadcasts per run


FULL = Sizes(nodes=10_000, fractions=(0.2, 0.4, 0.5, 0.6, 0.8), broadcasts=10)
QUICK = Sizes(nodes=500, fractions=(0.5, 0.8), broadcasts=4)


class CountingSink(TraceSink):
    """Keeps only what the figures need: sends per type, payload receipts and deliveries."""

    def __init__(self) -> None:
        self.sent: dict[str, int] = defaultdict(int)  # info JSON of send rows -> count
        self.receipts: dict[str, int] = defaultdict(int)  # msg id -> payload receipts
        self.published: dict[str, float] = {}  # msg id -> publish time
        self.delivered: dict[str, list[tuple[float, str]]] = defaultdict(list)
        self.last_hop: dict[str, int] = defaultdict(int)

    def append(self, row: Row) -> None:
        event = row[4]
        if event == "send":
            self.sent[row[11]] += 1
        elif event == "recv":
            if row[5] is not None and row[3] == "gossip":
                self.receipts[row[5]] += 1
        elif event == "deliver":
            mid = row[5]
            self.delivered[mid].append((row[1], row[2]))
            hop = orjson.loads(row[11])["hop"]
            if hop > self.last_hop[mid]:
                self.last_hop[mid] = hop
        elif event == "publish":
            self.published[row[5]] = row[1]

    def flush(self) -> None:
        """Counts live in memory."""

    def sends_by_type(self) -> dict[str, int]:
        out: dict[str, int] = defaultdict(int)
        for info, times in self.sent.items():
            out[orjson.loads(info)["type"]] += times
        return out

    def reach(self, mid: str, alive: set[str], *, within: float | None = None) -> float:
        start = self.published[mid]
        got = {node for t, node in self.delivered[mid]
               if node in alive and (within is None or t - start <= within)}
        return len(got) / len(alive)


@dataclass
class Overlay:
    sim: Simulation
    sink: CountingSink
    apps: dict[str, GossipBroadcast]
    ready_at: float  # virtual time when the overlay has settled


def build(nodes: int, *, seed: int, mode: str, refused: bool = False) -> Overlay:
    ids = node_ids(nodes)
    contacts = random.Random(f"{seed}/contacts")
    first = {node: [ids[contacts.randrange(i)]] if i else [] for i, node in enumerate(ids)}
    sink = CountingSink()
    sim = Simulation(seed=seed, link=LINK, trace=sink, connection_refused=refused)
    apps: dict[str, GossipBroadcast] = {}
    config = GossipConfig(mode=mode)  # type: ignore[arg-type]

    def factory(env: Env) -> GossipBroadcast:
        again = env.node in apps
        view = HyParView(env, contacts=ids if again else first[env.node])
        app = apps[env.node] = GossipBroadcast(env, view, config=config)
        return app

    join_every = 0.001
    for i, node in enumerate(ids):
        sim.add_node(node, factory, at=i * join_every if i else None)
    return Overlay(sim, sink, apps, ready_at=nodes * join_every + SETTLE)


def broadcast_from_random(overlay: Overlay, rng: random.Random, out: list[str]) -> None:
    sim = overlay.sim
    origin = rng.choice(sorted(sim.alive()))
    sim.call(origin, lambda _p: out.append(overlay.apps[origin].broadcast({"n": len(out)})))


def steady(nodes: int, *, seed: int, mode: str, broadcasts: int) -> dict[str, Any]:
    """Broadcasts without failures: reliability and messages per broadcast."""
    started = time.perf_counter()
    overlay = build(nodes, seed=seed, mode=mode)
    sim, sink = overlay.sim, overlay.sink
    rng = random.Random(f"{seed}/origins")
    warmup: list[str] = []
    for _ in range(2):  # in tree mode the first broadcasts prune the overlay into a tree
        sim.run(until=sim.now + SPACING if warmup else overlay.ready_at)
        broadcast_from_random(overlay, rng, warmup)
    sim.run(until=sim.now + 2.0)
    before = dict(sink.sends_by_type())
    measured: list[str] = []
    for _ in range(broadcasts):
        broadcast_from_random(overlay, rng, measured)
        sim.run(until=sim.now + SPACING)
    sim.run(until=sim.now + DRAIN)
    after = sink.sends_by_type()
    sent = {kind: after[kind] - before.get(kind, 0) for kind in after}
    alive = set(sim.alive())
    payload = sent.get("gossip.data", 0) / broadcasts
    control = sum(v for k, v in sent.items() if k.startswith("gossip.") and k != "gossip.data")
    rmr = [sink.receipts[m] / (len(sink.delivered[m]) - 1) - 1 for m in measured]
    return {
        "mode": mode, "nodes": nodes,
        "reliability": min(sink.reach(m, alive) for m in measured),
        "payload_per_broadcast": payload,
        "control_per_broadcast": control / broadcasts,
        "membership_per_second": sum(v for k, v in sent.items() if k.startswith("hyparview."))
        / (broadcasts * SPACING + DRAIN),
        "rmr": sum(rmr) / len(rmr),
        "last_hop": max(sink.last_hop[m] for m in measured),
        "wall_s": time.perf_counter() - started,
        "events": sim.events,
    }


def crashed(nodes: int, fraction: float, *, seed: int, broadcasts: int,
            refused: bool) -> dict[str, Any]:
    """Flood mode: crash ``fraction`` of the nodes at once, broadcast at once, and later."""
    started = time.perf_counter()
    overlay = build(nodes, seed=seed, mode="flood", refused=refused)
    sim, sink = overlay.sim, overlay.sink
    sim.run(until=overlay.ready_at)
    victims = random.Random(f"{seed}/victims").sample(sorted(sim.alive()), round(nodes * fraction))
    for node in victims:
        sim.crash(node)
    rng = random.Random(f"{seed}/origins")
    first: list[str] = []
    sim.run(until=sim.now + 0.01)
    broadcast_from_random(overlay, rng, first)
    sim.run(until=sim.now + HEAL)
    healed: list[str] = []
    for _ in range(broadcasts):
        broadcast_from_random(overlay, rng, healed)
        sim.run(until=sim.now + SPACING)
    sim.run(until=sim.now + DRAIN)
    alive = set(sim.alive())
    return {
        "fraction": fraction, "nodes": nodes, "live": len(alive),
        "detection": "refused" if refused else "keepalive",
        "first_eager": sink.reach(first[0], alive, within=1.0),
        "first_final": sink.reach(first[0], alive),
        "healed_min": min(sink.reach(m, alive) for m in healed),
        "wall_s": time.perf_counter() - started,
        "events": sim.events,
    }


def run(sizes: Sizes, *, seed: int = 1, console: Console | None = None) -> dict[str, Any]:
    console = console or Console(stderr=True)
    result: dict[str, Any] = {"nodes": sizes.nodes, "seed": seed, "steady": [], "crashes": []}
    for mode in ("flood", "tree"):
        console.log(f"{sizes.nodes} nodes, {mode}, no failures")
        result["steady"].append(steady(sizes.nodes, seed=seed, mode=mode,
                                       broadcasts=sizes.broadcasts))
    flood, tree = result["steady"]
    result["ratios"] = {
        "tree_vs_flood_payload": tree["payload_per_broadcast"] / flood["payload_per_broadcast"],
        "tree_vs_flood_all_gossip": (
            (tree["payload_per_broadcast"] + tree["control_per_broadcast"])
            / (flood["payload_per_broadcast"] + flood["control_per_broadcast"])),
    }
    result["crashes"].append({
        "fraction": 0.0, "nodes": sizes.nodes, "live": sizes.nodes, "detection": "-",
        "first_eager": flood["reliability"], "first_final": flood["reliability"],
        "healed_min": flood["reliability"], "wall_s": flood["wall_s"], "events": flood["events"],
    })
    for fraction in sizes.fractions:
        for refused in (False, True):
            console.log(f"{sizes.nodes} nodes, flood, {fraction:.0%} crashed, "
                        f"{'refused' if refused else 'keepalive'}")
            result["crashes"].append(crashed(sizes.nodes, fraction, seed=seed,
                                             broadcasts=sizes.broadcasts, refused=refused))
    return result


def render(result: dict[str, Any], console: Console) -> None:
    steady_table = Table(title=f"Gossip over HyParView, {result['nodes']:,} nodes, no failures")
    for column in ("mode", "reliability", "payload/bcast", "control/bcast", "RMR", "last hop",
                   "hyparview/s", "wall s"):
        steady_table.add_column(column, justify="left" if column == "mode" else "right")
    for row in result["steady"]:
        steady_table.add_row(
            row["mode"], f"{row['reliability']:.2%}", f"{row['payload_per_broadcast']:,.0f}",
            f"{row['control_per_broadcast']:,.0f}", f"{row['rmr']:.3f}", str(row["last_hop"]),
            f"{row['membership_per_second']:,.0f}", f"{row['wall_s']:.1f}")
    console.print(steady_table)
    ratios = result["ratios"]
    console.print(f"tree / flood payload messages per broadcast: "
                  f"{ratios['tree_vs_flood_payload']:.2f}x; all gossip messages: "
                  f"{ratios['tree_vs_flood_all_gossip']:.2f}x")
    crash_table = Table(title="Reliability vs nodes crashed at once (flood)")
    for column in ("crashed", "detection", "live", "1st: within 1 s", "1st: final",
                   "healed: min", "wall s"):
        crash_table.add_column(column, justify="right")
    for row in result["crashes"]:
        crash_table.add_row(
            f"{row['fraction']:.0%}", row["detection"], f"{row['live']:,}",
            f"{row['first_eager']:.2%}",
            f"{row['first_final']:.2%}", f"{row['healed_min']:.2%}", f"{row['wall_s']:.1f}")
    console.print(crash_table)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help=f"{QUICK.nodes} nodes, fewer fractions (a smoke run)")
    parser.add_argument("--nodes", type=int, help=f"node count (default {FULL.nodes:,})")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", metavar="OUT", help="also write the figures as JSON to OUT")
    args = parser.parse_args(argv)
    sizes = QUICK if args.quick else FULL
    if args.nodes is not None:
        if args.nodes < 10:
            parser.error("--nodes must be >= 10")
        sizes = Sizes(args.nodes, sizes.fractions, sizes.broadcasts)
    result = run(sizes, seed=args.seed)
    result["quick"] = bool(args.quick)
    render(result, Console(width=None if sys.stdout.isatty() else 120))
    if args.json:
        with open(args.json, "w") as out:
            json.dump(result, out, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
