"""Simulator kernel benchmark: events/s of gossamer's ``Simulation.run`` on a null protocol,
side by side with a bare ``heapq`` loop and SimPy in the same run, plus kernel bytes per idle node.

Run ``python benchmarks/sim_kernel.py [--quick] [--events N] [--json OUT]``.
"""

from __future__ import annotations

import argparse
import gc
import heapq
import itertools
import json
import os
import platform
import random
import sys
import time
import tracemalloc
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from gossamer.core.env import Env
from gossamer.core.ids import NodeId, node_ids
from gossamer.core.messages import Codec, Message, message
from gossamer.core.trace import NullSink
from gossamer.runtimes.sim import Simulation

__all__ = ["main", "render", "run"]

TARGET_VS_HEAPQ = 0.5  # gossamer events/s at least half of the bare heapq loop's
TARGET_VS_SIMPY = 1.5  # and at least 1.5 times SimPy's
TARGET_KERNEL_BYTES_PER_NODE = 2048

LATENCY = 0.01  # the default LinkModel is Constant(0.01) with no loss: baselines use the same
TABLE_SIZE = 4096  # precomputed delays and send decisions, indexed by a per-node cursor
MASK = TABLE_SIZE - 1
SEND_FRACTION = 0.1  # share of timer fires that also send one message
MIN_DELAY, MAX_DELAY = 0.5, 1.5
REPEATS = 3


@dataclass(frozen=True)
class Sizes:
    """How big a run is: ``FULL`` by default, ``QUICK`` for ``--quick`` (a smoke test)."""

    nodes: int
    events: int  # about this many per timed run
    memory_nodes: tuple[int, ...]


FULL = Sizes(nodes=1_000, events=1_000_000, memory_nodes=(10_000, 100_000))
QUICK = Sizes(nodes=200, events=20_000, memory_nodes=(1_000, 5_000))

# a private codec: the benchmark's message type never leaks into the default registry
bench_codec = Codec()


@message("bench.null", codec=bench_codec)
class NullMessage(Message):
    """No fields: the cheapest message there is."""


NULL = NullMessage()


@dataclass(frozen=True)
class Workload:
    """What every runner does; identical work, so events/s compare kernels only."""

    nodes: int
    horizon: float  # virtual seconds to run
    delays: list[float]  # timer delays, by cursor
    offsets: list[int]  # 0: no send; else send to node (index + offset) % nodes, by cursor

    def start_cursor(self, index: int) -> int:
        # spread nodes over the tables so they do not fire in lockstep
        return (index * 613) & MASK


def make_workload(nodes: int, events: int) -> Workload:
    if nodes < 2:
        raise ValueError(f"need at least 2 nodes, got {nodes}")
    if events <= 0:
        raise ValueError(f"events must be > 0, got {events}")
    rng = random.Random(20240601)
    delays = [MIN_DELAY + (MAX_DELAY - MIN_DELAY) * rng.random() for _ in range(TABLE_SIZE)]
    offsets = [
        rng.randrange(1, nodes) if rng.random() < SEND_FRACTION else 0 for _ in range(TABLE_SIZE)
    ]
    # each fire is one event, and each send one more (its delivery)
    fires_per_second = nodes / ((MIN_DELAY + MAX_DELAY) / 2)
    horizon = events / (fires_per_second * (1 + SEND_FRACTION))
    return Workload(nodes, horizon, delays, offsets)


# -- gossamer ---------------------------------------------------------------------------------


class NullProcess:
    """Re-arms its timer from the table and now and then sends ``NULL`` to another node."""

    __slots__ = ("_fire", "cursor", "delays", "env", "fires", "index", "offsets", "peers",
                 "received")

    def __init__(self, env: Env, index: int, work: Workload, peers: list[NodeId]) -> None:
        self.env = env
        self.index = index
        self.cursor = work.start_cursor(index)
        self.delays = work.delays
        self.offsets = work.offsets
        self.peers = peers
        self.fires = 0
        self.received = 0
        self._fire = self.fire  # one bound method, not one per timer (same in every runner)

    def start(self) -> None:
        self.env.set_timer(self.delays[self.cursor], self._fire)

    def fire(self) -> None:
        self.fires += 1
        cursor = self.cursor = (self.cursor + 1) & MASK
        self.env.set_timer(self.delays[cursor], self._fire)
        offset = self.offsets[cursor]
        if offset:
            peers = self.peers
            self.env.send(peers[(self.index + offset) % len(peers)], NULL)

    def on_message(self, src: NodeId, msg: Message) -> None:
        self.received += 1

    def stop(self) -> None:
        """Nothing to release."""


def run_gossamer(work: Workload) -> tuple[float, int]:
    ids = node_ids(work.nodes)
    index_of = {node: i for i, node in enumerate(ids)}
    processes: list[NullProcess] = []

    def factory(env: Env) -> NullProcess:
        process = NullProcess(env, index_of[env.node], work, ids)
        processes.append(process)
        return process

    sim = Simulation(seed=1, codec=None, trace=NullSink())
    sim.add_nodes(ids, factory)  # start() arms the first timers, outside the timed part
    gc.collect()
    started = time.perf_counter()
    ran = sim.run(until=work.horizon)
    elapsed = time.perf_counter() - started
    counted = sum(p.fires + p.received for p in processes)
    if counted != ran:
        raise RuntimeError(f"gossamer ran {ran} events but the processes saw {counted}")
    return elapsed, ran


# -- bare heapq -------------------------------------------------------------------------------


class HeapLoop:
    __slots__ = ("heap", "now", "sequence")

    def __init__(self) -> None:
        self.heap: list[tuple[float, int, Callable[[], None]]] = []
        self.now = 0.0
        self.sequence = itertools.count()


class HeapNode:
    """``NullProcess`` with the loop inlined: the same table reads, pushes and counters."""

    __slots__ = ("_fire", "cursor", "delays", "fires", "index", "loop", "name", "offsets",
                 "peers", "received")

    def __init__(self, loop: HeapLoop, index: int, name: NodeId, work: Workload) -> None:
        self.loop = loop
        self.index = index
        self.name = name
        self.cursor = work.start_cursor(index)
        self.delays = work.delays
        self.offsets = work.offsets
        self.peers: list[HeapNode] = []
        self.fires = 0
        self.received = 0
        self._fire = self.fire

    def start(self) -> None:
        loop = self.loop
        heapq.heappush(loop.heap, (loop.now + self.delays[self.cursor], next(loop.sequence),
                                   self._fire))

    def fire(self) -> None:
        self.fires += 1
        cursor = self.cursor = (self.cursor + 1) & MASK
        loop = self.loop
        heapq.heappush(loop.heap, (loop.now + self.delays[cursor], next(loop.sequence),
                                   self._fire))
        offset = self.offsets[cursor]
        if offset:
            peers = self.peers
            dst = peers[(self.index + offset) % len(peers)]
            delivery: Callable[[], None] = partial(dst.on_message, self.name, NULL)
            heapq.heappush(loop.heap, (loop.now + LATENCY, next(loop.sequence), delivery))

    def on_message(self, src: NodeId, msg: Message) -> None:
        self.received += 1


def heap_run(loop: HeapLoop, until: float) -> int:
    """The minimum event loop: pop, set the clock, call."""
    heap = loop.heap
    pop = heapq.heappop
    ran = 0
    while heap and heap[0][0] <= until:
        when, _, fn = pop(heap)
        loop.now = when
        fn()
        ran += 1
    return ran


def run_heapq(work: Workload) -> tuple[float, int]:
    loop = HeapLoop()
    nodes = [HeapNode(loop, i, name, work) for i, name in enumerate(node_ids(work.nodes))]
    for node in nodes:
        node.peers = nodes
        node.start()
    gc.collect()
    started = time.perf_counter()
    ran = heap_run(loop, work.horizon)
    elapsed = time.perf_counter() - started
    counted = sum(n.fires + n.received for n in nodes)
    if counted != ran:
        raise RuntimeError(f"heapq ran {ran} events but the nodes saw {counted}")
    return elapsed, ran


# -- SimPy ------------------------------------------------------------------------------------


class SimpyNode:
    """``NullProcess`` as a SimPy process: one generator per node, ``yield env.timeout(d)``.

    A send is one ``env.timeout(LATENCY, value=(src, msg))`` whose callback delivers: one heap
    entry and one callback per message, as in gossamer's kernel. (A ``Store`` per node would
    cost a put and a get event per message, which would flatter gossamer.)
    """

    __slots__ = ("cursor", "delays", "env", "fires", "index", "name", "offsets", "peers",
                 "received")

    def __init__(self, env: Any, index: int, name: NodeId, work: Workload) -> None:
        self.env = env
        self.index = index
        self.name = name
        self.cursor = work.start_cursor(index)
        self.delays = work.delays
        self.offsets = work.offsets
        self.peers: list[SimpyNode] = []
        self.fires = 0
        self.received = 0

    def process(self) -> Generator[Any, Any, None]:
        timeout = self.env.timeout
        while True:
            yield timeout(self.delays[self.cursor])
            self.fires += 1
            cursor = self.cursor = (self.cursor + 1) & MASK
            offset = self.offsets[cursor]
            if offset:
                peers = self.peers
                dst = peers[(self.index + offset) % len(peers)]
                timeout(LATENCY, (self.name, NULL)).callbacks.append(dst.deliver)

    def deliver(self, event: Any) -> None:
        src, msg = event.value
        self.on_message(src, msg)

    def on_message(self, src: NodeId, msg: Message) -> None:
        self.received += 1


def run_simpy(work: Workload) -> tuple[float, int]:
    import simpy  # the "bench" extra; imported here so the module loads without it

    env = simpy.Environment()
    nodes = [SimpyNode(env, i, name, work) for i, name in enumerate(node_ids(work.nodes))]
    for node in nodes:
        node.peers = nodes
        env.process(node.process())
    # run each process to its first yield (arming its first timer) outside the timed part, as
    # gossamer's add_nodes does; no timer fires before MIN_DELAY
    env.run(until=MIN_DELAY / 2)
    gc.collect()
    started = time.perf_counter()
    env.run(until=work.horizon)
    elapsed = time.perf_counter() - started
    return elapsed, sum(n.fires + n.received for n in nodes)


RUNNERS: dict[str, Callable[[Workload], tuple[float, int]]] = {
    "gossamer": run_gossamer,
    "heapq": run_heapq,
    "simpy": run_simpy,
}


# -- memory -----------------------------------------------------------------------------------


class IdleProcess:
    """Arms nothing, sends nothing: what an idle node costs is the kernel's alone."""

    __slots__ = ("env",)

    def __init__(self, env: Env | None) -> None:
        self.env = env

    def start(self) -> None:
        """Idle."""

    def on_message(self, src: NodeId, msg: Message) -> None:
        """Idle."""

    def stop(self) -> None:
        """Idle."""


@contextmanager
def traced_bytes() -> Iterator[list[int]]:
    """Bytes allocated and still alive across the block (tracemalloc snapshot difference)."""
    out: list[int] = []
    ignore = [tracemalloc.Filter(False, tracemalloc.__file__)]  # the snapshots themselves
    gc.collect()
    before = tracemalloc.take_snapshot().filter_traces(ignore)
    yield out
    gc.collect()
    after = tracemalloc.take_snapshot().filter_traces(ignore)
    out.append(sum(stat.size_diff for stat in after.compare_to(before, "filename")))


def measure_memory(nodes: int) -> dict[str, float]:
    ids = node_ids(nodes)  # the caller's strings, made before measuring: not the kernel's
    holder: list[IdleProcess | None] = [None] * nodes  # preallocated: adds nothing per node
    tracemalloc.start()
    try:
        with traced_bytes() as bare:
            for i in range(nodes):
                holder[i] = IdleProcess(None)
        del holder
        sim = Simulation(seed=1, codec=None, trace=NullSink())
        with traced_bytes() as total:
            sim.add_nodes(ids, IdleProcess)
    finally:
        tracemalloc.stop()
    if sim.pending_events:
        raise RuntimeError("idle nodes armed timers")
    return {
        "nodes": nodes,
        "total_bytes_per_node": total[0] / nodes,
        "process_bytes_per_node": bare[0] / nodes,
        "kernel_bytes_per_node": (total[0] - bare[0]) / nodes,
    }


# -- driver -----------------------------------------------------------------------------------


def run(
    quick: bool = False,
    *,
    events: int | None = None,
    nodes: int | None = None,
    console: Console | None = None,
) -> dict[str, Any]:
    """Measure everything once; a JSON-ready dict. Progress goes to ``console`` (stderr)."""
    sizes = QUICK if quick else FULL
    work = make_workload(nodes if nodes is not None else sizes.nodes,
                         events if events is not None else sizes.events)
    memory_nodes = sizes.memory_nodes
    best: dict[str, float] = {}
    counts: dict[str, int] = {}
    memory: list[dict[str, float]] = []

    progress = Progress(
        TextColumn("{task.description:<32}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        console=console or Console(stderr=True),
        transient=True,
    )
    with progress:
        timing = progress.add_task(
            f"events/s (warm-up + best of {REPEATS})", total=(1 + REPEATS) * len(RUNNERS)
        )
        # rounds interleave the runners so drift in the machine's speed hits all of them alike
        for round_number in range(1 + REPEATS):
            for name, runner in RUNNERS.items():
                elapsed, ran = runner(work)
                if round_number > 0:  # round 0 is the warm-up
                    best[name] = min(best.get(name, float("inf")), elapsed)
                    counts[name] = ran
                progress.advance(timing)
        sizing = progress.add_task("bytes per idle node", total=len(memory_nodes))
        for count in memory_nodes:
            memory.append(measure_memory(count))
            progress.advance(sizing)

    if len(set(counts.values())) != 1:
        raise RuntimeError(f"runners did different work: {counts}")
    runners = {
        name: {
            "events": counts[name],
            "best_s": best[name],
            "events_per_s": counts[name] / best[name],
        }
        for name in RUNNERS
    }
    rate = {name: r["events_per_s"] for name, r in runners.items()}
    ratios = {
        "gossamer/heapq": rate["gossamer"] / rate["heapq"],
        "gossamer/simpy": rate["gossamer"] / rate["simpy"],
    }
    worst_kernel = max(m["kernel_bytes_per_node"] for m in memory)
    targets = [
        {"name": "gossamer/heapq", "value": ratios["gossamer/heapq"], "target": TARGET_VS_HEAPQ,
         "unit": "x", "met": ratios["gossamer/heapq"] >= TARGET_VS_HEAPQ},
        {"name": "gossamer/simpy", "value": ratios["gossamer/simpy"], "target": TARGET_VS_SIMPY,
         "unit": "x", "met": ratios["gossamer/simpy"] >= TARGET_VS_SIMPY},
        {"name": "kernel bytes per idle node", "value": worst_kernel,
         "target": TARGET_KERNEL_BYTES_PER_NODE, "unit": "B", "met":
         worst_kernel <= TARGET_KERNEL_BYTES_PER_NODE},
    ]
    return {
        "quick": quick,
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "workload": {"nodes": work.nodes, "horizon_s": work.horizon, "send_fraction": SEND_FRACTION,
                     "latency_s": LATENCY, "repeats": REPEATS},
        "runners": runners,
        "ratios": ratios,
        "memory": memory,
        "targets": targets,
    }


def render(result: dict[str, Any], console: Console) -> None:
    work = result["workload"]
    runners = result["runners"]
    speed = Table(
        title=f"Null protocol: {work['nodes']:,} nodes, {work['send_fraction']:.0%} of fires send",
        caption=f"best of {work['repeats']}, Python {result['python']}, {result['cpus']} CPUs",
    )
    speed.add_column("runner")
    speed.add_column("events", justify="right")
    speed.add_column("best s", justify="right")
    speed.add_column("events/s", justify="right")
    speed.add_column("gossamer / runner", justify="right")
    goss = runners["gossamer"]["events_per_s"]
    for name, r in runners.items():
        speed.add_row(name, f"{r['events']:,}", f"{r['best_s']:.3f}", f"{r['events_per_s']:,.0f}",
                      f"{goss / r['events_per_s']:.2f}x")
    console.print(speed)

    memory = Table(title="Memory per idle node (tracemalloc)")
    memory.add_column("nodes", justify="right")
    memory.add_column("total B/node", justify="right")
    memory.add_column("process B/node", justify="right")
    memory.add_column("kernel B/node", justify="right")
    for m in result["memory"]:
        memory.add_row(f"{m['nodes']:,}", f"{m['total_bytes_per_node']:.0f}",
                       f"{m['process_bytes_per_node']:.0f}", f"{m['kernel_bytes_per_node']:.0f}")
    console.print(memory)

    verdicts = Table(title="Targets")
    verdicts.add_column("measure")
    verdicts.add_column("measured", justify="right")
    verdicts.add_column("target", justify="right")
    verdicts.add_column("result")
    for t in result["targets"]:
        if t["unit"] == "x":
            measured, target = f"{t['value']:.2f}x", f">= {t['target']}x"
        else:
            measured, target = f"{t['value']:.0f} B", f"<= {t['target']} B"
        verdicts.add_row(t["name"], measured, target,
                         "[green]PASS[/green]" if t["met"] else "[red]MISS[/red]")
    console.print(verdicts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="small sizes, a few seconds")
    parser.add_argument("--events", type=int, help="events per timed run (about)")
    parser.add_argument("--nodes", type=int, help="nodes in the null protocol")
    parser.add_argument("--json", metavar="OUT", help="also write the figures as JSON to OUT")
    args = parser.parse_args(argv)
    result = run(args.quick, events=args.events, nodes=args.nodes)
    render(result, Console())
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(result, out, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
