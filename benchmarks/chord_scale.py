"""Chord at scale: mean lookup hops for N = 2^4 .. 2^14 against Chord's 1/2 log2 N, and keys per
host with 1, 5 and 20 virtual nodes (99th percentile over mean).

Lookups run the real protocol code in the simulator. Rings up to ``--join-max`` nodes (2^10; 2^8
with ``--quick``) are built twice: by real joins (first node creates, the others join through
contacts, stabilize and fix_fingers converge) and with ``bootstrap`` (ideal tables written
directly), so the two can be compared in the same run; larger rings are bootstrapped only.
Key load is a pure computation over the ideal ring (no simulation). The bootstrapped rings and
the lookups are those of ``gossamer.services.pubsub.chordrun``, the ``chord`` workload that
``experiments/chord_scale.toml`` runs for the PySpark pipeline.

Run ``python benchmarks/chord_scale.py [--quick] [--plot chord.png] [--json OUT]``.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import random
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.table import Table

from gossamer.core import Env, node_ids
from gossamer.protocols.membership.chord import (
    Chord,
    ChordConfig,
    ChordHost,
    ChordState,
    key_load,
)
from gossamer.runtimes.sim import Scenario, Simulation
from gossamer.services.pubsub.chordrun import (
    LINK,
    IdealRing,
    LookupTap,
    bootstrap_ring,
    quiet_config,
    run_lookups,
)

__all__ = ["main", "render", "run"]

BITS = 64  # 2^14 nodes on 32 bits would collide with a few percent chance
TARGET_HOPS_FACTOR = 0.55  # mean hops at most 0.55 log2 N (Chord: 1/2 log2 N)
TARGET_LOAD_SPREAD = 2.0  # with 20 virtual nodes, p99 keys per host at most twice the mean
VNODES = (1, 5, 20)
JOIN_SPACING = 0.01  # seconds between joins
SETTLE = 8.0  # seconds of stabilization after the last join


@dataclass(frozen=True)
class Sizes:
    exponents: tuple[int, ...]  # N = 2**e
    join_max: int  # rings up to this size are also built by joins
    lookups: int  # per ring
    hosts: int  # for key load
    keys: int


FULL = Sizes(exponents=tuple(range(4, 15)), join_max=1 << 10, lookups=2000, hosts=1000,
             keys=100_000)
QUICK = Sizes(exponents=(4, 6, 8, 10), join_max=1 << 8, lookups=300, hosts=200, keys=20_000)


def _lookup_hops(sim: Simulation, nodes: Sequence[str], tap: LookupTap, count: int,
                 seed: int) -> tuple[list[int], int]:
    """Route ``count`` random keys from random nodes; returns their hops and how many of them
    ended at the ideal root."""
    found = run_lookups(sim, nodes, tap, count, rng=random.Random(f"{seed}/lookups"),
                        prefix=f"bench-{seed}-")
    ring = IdealRing(nodes, vnodes=1, bits=BITS)
    return [f.hops for f in found], sum(ring.owner(f.key) == f.root for f in found)


def bootstrapped(count: int, seed: int, lookups: int) -> dict[str, Any]:
    """Ideal tables written directly; maintenance slowed down so only the lookups run."""
    began = time.perf_counter()
    tap = LookupTap()
    sim = Simulation(seed=seed, link=LINK, trace=tap, codec=None, trace_messages=False)
    nodes = node_ids(count)
    bootstrap_ring(sim, nodes, quiet_config(BITS))
    hops, right = _lookup_hops(sim, nodes, tap, lookups, seed)
    return _figures("bootstrap", count, hops, right, began)


def joined(count: int, seed: int, lookups: int) -> dict[str, Any]:
    """The first node creates the ring, the others join through three contacts; lookups start
    once the last join has had ``SETTLE`` seconds of stabilization."""
    began = time.perf_counter()
    config = ChordConfig(bits=BITS, check_predecessor_interval=2.0, fix_fingers_interval=1.0)
    nodes = node_ids(count)
    scenario = Scenario(seed=seed, nodes=[nodes[0]], link=LINK)
    for i, node in enumerate(nodes[1:]):
        scenario.join(0.1 + i * JOIN_SPACING, node)
    hosts: dict[str, ChordHost] = {}

    def factory(env: Env) -> Chord:
        host = Chord(env, contacts=nodes[:3], create=env.node == nodes[0], config=config)
        hosts[env.node] = host
        return host

    tap = LookupTap()
    sim = scenario.build(factory, trace=tap, codec=None, trace_messages=False)
    sim.run(until=0.1 + count * JOIN_SPACING + SETTLE)
    figures = _figures("joins", count, *_lookup_hops(sim, nodes, tap, lookups, seed), began)
    figures["wrong_successors"] = _wrong_successors(list(hosts.values()))
    return figures


def _wrong_successors(hosts: list[ChordHost]) -> int:
    views = [view for host in hosts for view in host.views()]
    ring = sorted(view.me for view in views)
    after = {peer: ring[(k + 1) % len(ring)] for k, peer in enumerate(ring)}
    return sum(view.state is not ChordState.ACTIVE or not view.successors
               or view.successors[0] != after[view.me] for view in views)


def _figures(build: str, count: int, hops: list[int], right: int,
             began: float) -> dict[str, Any]:
    half_log = 0.5 * math.log2(count)
    mean = statistics.mean(hops) if hops else float("nan")
    ordered = sorted(hops)
    return {
        "build": build,
        "nodes": count,
        "lookups": len(hops),
        "right_root": right,
        "hops_mean": mean,
        "hops_p99": ordered[min(len(ordered) - 1, math.ceil(0.99 * len(ordered)) - 1)]
        if ordered else None,
        "hops_max": max(hops) if hops else None,
        "half_log2_n": half_log,
        "ratio": mean / half_log,
        "seconds": time.perf_counter() - began,
    }


def load_spread(hosts: int, keys: int) -> list[dict[str, Any]]:
    names = [f"10.{i // 65536}.{i // 256 % 256}.{i % 256}:7000" for i in range(hosts)]
    topics = [f"topic/{i}" for i in range(keys)]
    rows = []
    for vnodes in VNODES:
        counts = sorted(key_load(names, topics, vnodes=vnodes, bits=BITS).values())
        mean = statistics.mean(counts)
        p99 = counts[min(len(counts) - 1, math.ceil(0.99 * len(counts)) - 1)]
        rows.append({"vnodes": vnodes, "hosts": hosts, "keys": keys, "mean": mean,
                     "p99": p99, "max": counts[-1], "min": counts[0],
                     "p99_over_mean": p99 / mean, "max_over_mean": counts[-1] / mean,
                     "counts": counts})
    return rows


def run(quick: bool = False, *, seed: int = 1, join_max: int | None = None,
        progress: Console | None = None) -> dict[str, Any]:
    sizes = QUICK if quick else FULL
    limit = sizes.join_max if join_max is None else join_max
    hops: list[dict[str, Any]] = []
    for exponent in sizes.exponents:
        count = 1 << exponent
        hops.append(bootstrapped(count, seed, sizes.lookups))
        if count <= limit:
            hops.append(joined(count, seed, sizes.lookups))
        if progress is not None:
            progress.log(f"N={count}: " + ", ".join(
                f"{h['build']} {h['hops_mean']:.2f} hops ({h['seconds']:.1f}s)"
                for h in hops if h["nodes"] == count))
    load = load_spread(sizes.hosts, sizes.keys)
    targets = [
        {"name": f"mean hops <= {TARGET_HOPS_FACTOR} log2 N, N={h['nodes']} ({h['build']})",
         "value": h["hops_mean"], "target": TARGET_HOPS_FACTOR * math.log2(h["nodes"]),
         "met": h["hops_mean"] <= TARGET_HOPS_FACTOR * math.log2(h["nodes"])}
        for h in hops if h["nodes"] >= 1 << 10
    ]
    twenty = next(row for row in load if row["vnodes"] == 20)
    targets.append({"name": "p99/mean keys per host, 20 virtual nodes",
                    "value": twenty["p99_over_mean"], "target": TARGET_LOAD_SPREAD,
                    "met": twenty["p99_over_mean"] <= TARGET_LOAD_SPREAD})
    return {
        "quick": quick,
        "seed": seed,
        "bits": BITS,
        "python": platform.python_version(),
        "join_max": limit,
        "hops": hops,
        "load": load,
        "targets": targets,
    }


def render(result: dict[str, Any], console: Console) -> None:
    hops = Table(title="Lookup hops against 1/2 log2 N",
                 caption=f"rings above {result['join_max']:,} nodes are bootstrapped with ideal "
                         "tables, not built by joins")
    for column in ("N", "build", "lookups", "at root", "mean", "p99", "max", "½log2N", "ratio",
                   "s"):
        hops.add_column(column, justify="right")
    for h in result["hops"]:
        hops.add_row(f"{h['nodes']:,}", h["build"], str(h["lookups"]),
                     f"{h['right_root']}/{h['lookups']}", f"{h['hops_mean']:.2f}",
                     str(h["hops_p99"]), str(h["hops_max"]), f"{h['half_log2_n']:.1f}",
                     f"{h['ratio']:.2f}", f"{h['seconds']:.1f}")
    console.print(hops)

    load = Table(title="Keys per host on the ideal ring")
    for column in ("vnodes", "hosts", "keys", "mean", "p99", "max", "p99/mean", "max/mean"):
        load.add_column(column, justify="right")
    for row in result["load"]:
        load.add_row(str(row["vnodes"]), f"{row['hosts']:,}", f"{row['keys']:,}",
                     f"{row['mean']:.0f}", str(row["p99"]), str(row["max"]),
                     f"{row['p99_over_mean']:.2f}", f"{row['max_over_mean']:.2f}")
    console.print(load)

    verdicts = Table(title="Targets")
    for column in ("measure", "measured", "target", "result"):
        verdicts.add_column(column)
    for t in result["targets"]:
        verdicts.add_row(t["name"], f"{t['value']:.2f}", f"<= {t['target']:.2f}",
                         "[green]PASS[/green]" if t["met"] else "[red]MISS[/red]")
    console.print(verdicts)


def plot(result: dict[str, Any], path: str) -> None:
    """Mean hops against log2 N with the 1/2 log2 N line, and the load spread per vnodes."""
    from matplotlib.figure import Figure  # no pyplot: no display, no global state

    figure = Figure(figsize=(11, 4.5))
    left, right = figure.subplots(1, 2)
    # joins as hollow squares over the bootstrap line: the two means agree where both exist
    styles: dict[str, dict[str, Any]] = {
        "bootstrap": {"marker": "o"},
        "joins": {"marker": "s", "markersize": 10, "markerfacecolor": "none", "linestyle": "none"},
    }
    for build, style in styles.items():
        points = [h for h in result["hops"] if h["build"] == build]
        if points:
            left.plot([math.log2(h["nodes"]) for h in points],
                      [h["hops_mean"] for h in points], label=f"mean ({build})", **style)
    exponents = sorted({math.log2(h["nodes"]) for h in result["hops"]})
    left.plot(exponents, [e / 2 for e in exponents], "k--", label="1/2 log2 N")
    left.plot(exponents, [TARGET_HOPS_FACTOR * e for e in exponents], ":", color="grey",
              label=f"{TARGET_HOPS_FACTOR} log2 N")
    left.set_xlabel("log2 N")
    left.set_ylabel("hops to the root")
    left.set_title("Chord lookup hops")
    left.legend()
    for row in result["load"]:
        counts = row["counts"]
        mean = row["mean"]
        fractions = [(i + 1) / len(counts) for i in range(len(counts))]
        right.plot([c / mean for c in counts], fractions,
                   label=f"{row['vnodes']} virtual node(s): p99/mean {row['p99_over_mean']:.2f}")
    right.axvline(TARGET_LOAD_SPREAD, color="grey", linestyle=":")
    right.set_xlabel("keys per host / mean")
    right.set_ylabel("fraction of hosts")
    right.set_title("Key load per host (CDF)")
    right.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true",
                        help="N up to 2^10, joins up to 2^8, fewer lookups and keys")
    parser.add_argument("--join-max", type=int, help="largest ring also built by joins")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--plot", metavar="PNG", help="save the two plots to this path")
    parser.add_argument("--json", metavar="OUT", help="also write the figures as JSON to OUT")
    args = parser.parse_args(argv)
    console = Console()
    result = run(args.quick, seed=args.seed, join_max=args.join_max, progress=console)
    render(result, console)
    if args.plot:
        plot(result, args.plot)
        console.print(f"plot saved to {args.plot}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(result, out, indent=2)
    return 0 if all(t["met"] for t in result["targets"]) else 1


if __name__ == "__main__":
    sys.exit(main())
