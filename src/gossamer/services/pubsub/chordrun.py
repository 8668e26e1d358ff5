"""Chord at scale as a simulated workload for ``gossamer experiment``: lookup hops against the
node count, and keys owned per host with virtual nodes (seed 001's overlay, issue 5).

A run builds the ring of ``nodes`` hosts (``n000``, ``n001``, ...; ``vnodes`` virtual nodes
each) with ``bootstrap``: ideal tables written directly, maintenance slowed down so only the
lookups run, the only way to reach N = 2^14 in seconds. It then routes ``lookups`` random keys
from random hosts through the real protocol code; each lookup that reaches its root is traced by
Chord itself (layer ``chord``, event ``lookup``, ``info.hops`` and ``info.root``), which the
pipeline groups by the run's ``nodes`` option. Last it writes, for ``keys`` random keys, an
``owner`` row (layer ``pubsub``, key = the key, node = the host whose virtual node is the key's
root on the ideal ring) for the pipeline's topic-balance metric, and one ``stored`` row per host
so that hosts owning no key still count as members.

The helpers here (quiet config, bootstrapped ring, lookups through a trace tap, the ideal ring's
owner of a key) are also what ``benchmarks/chord_scale.py`` runs.
"""

from __future__ import annotations

import bisect
import dataclasses
import json
import random
import statistics
import time
from collections.abc import Callable, Iterable, Sequence
from typing import NamedTuple

from ...core.env import Env
from ...core.errors import ConfigError
from ...core.ids import NodeId, node_ids
from ...core.trace import Row, TraceSink, encode_info
from ...protocols.membership.chord import (
    Chord,
    ChordConfig,
    ChordHost,
    bootstrap,
    chord_id,
    vnode_name,
)
from ...runtimes.sim import LinkModel, Simulation, Uniform
from .node import LAYER

__all__ = [
    "LINK",
    "LOOKUP_DRAIN",
    "ChordRunOptions",
    "ChordRunResult",
    "IdealRing",
    "Lookup",
    "LookupTap",
    "bootstrap_ring",
    "quiet_config",
    "run_chord_sim",
    "run_lookups",
]

LINK = LinkModel(latency=Uniform(0.005, 0.05))
LOOKUP_DRAIN = 5.0  # virtual seconds for the lookups in flight to reach their roots
_QUIET = 600.0  # maintenance intervals on a bootstrapped ring: nothing to repair
_CHORD_LAYER = "chord"
_DEFAULT_BITS = ChordConfig().bits


# -- shared with benchmarks/chord_scale.py -----------------------------------------------------


def quiet_config(bits: int, vnodes: int = 1) -> ChordConfig:
    """Chord for a bootstrapped ring: its tables are ideal, so maintenance is slowed down and
    only the lookups run."""
    return ChordConfig(bits=bits, vnodes=vnodes, stabilize_interval=_QUIET,
                       fix_fingers_interval=_QUIET, check_predecessor_interval=_QUIET,
                       probe_interval=_QUIET)


def bootstrap_ring(sim: Simulation, nodes: Sequence[NodeId],
                   config: ChordConfig) -> list[ChordHost]:
    """Add ``nodes`` to ``sim`` as Chord hosts and give them the ideal tables (``bootstrap``)."""
    hosts: list[ChordHost] = []

    def factory(env: Env) -> ChordHost:
        host = Chord(env, config=config) if config.vnodes == 1 else ChordHost(env, config=config)
        hosts.append(host)
        return host

    sim.add_nodes(nodes, factory)
    bootstrap(hosts)
    return hosts


class Lookup(NamedTuple):
    """One lookup as Chord traced it at its root."""

    key: str
    hops: int
    root: NodeId


class LookupTap(TraceSink):
    """Keeps the ``lookup`` rows of layer ``chord`` and passes every row on (to ``inner``)."""

    def __init__(self, inner: TraceSink | None = None) -> None:
        self.inner = inner
        self.lookups: list[Lookup] = []

    def append(self, row: Row) -> None:
        if row[4] == "lookup" and row[3] == _CHORD_LAYER and row[11] is not None:
            info = json.loads(str(row[11]))
            self.lookups.append(Lookup(str(row[8]), int(info["hops"]), str(info["root"])))
        if self.inner is not None:
            self.inner.append(row)

    def flush(self) -> None:
        if self.inner is not None:
            self.inner.flush()


def _router(key: str) -> Callable[[object], object]:
    def route(process: object) -> object:
        assert isinstance(process, ChordHost)
        return process.route(key)

    return route


def run_lookups(sim: Simulation, nodes: Sequence[NodeId], tap: LookupTap, count: int, *,
                rng: random.Random, prefix: str) -> list[Lookup]:
    """Route keys ``PREFIX0`` .. ``PREFIX{count-1}`` from nodes drawn with ``rng``, all at once,
    and run ``LOOKUP_DRAIN`` seconds; returns the lookups that reached a root (``sim`` must
    trace into ``tap``)."""
    first = len(tap.lookups)
    for i in range(count):
        sim.call(rng.choice(nodes), _router(f"{prefix}{i}"))
    sim.run(until=sim.now + LOOKUP_DRAIN)
    return tap.lookups[first:]


class IdealRing:
    """The ring ``hosts`` form with ``vnodes`` virtual nodes each: who is the root of a key."""

    def __init__(self, hosts: Iterable[NodeId], *, vnodes: int, bits: int) -> None:
        self.bits = bits
        ring = sorted((chord_id(vnode_name(h, i, vnodes), bits), h)
                      for h in hosts for i in range(vnodes))
        self._idents = [ident for ident, _ in ring]
        self._hosts = [host for _, host in ring]

    def owner(self, key: str) -> NodeId:
        """The host whose virtual node follows ``key`` on the ring."""
        at = bisect.bisect_left(self._idents, chord_id(key, self.bits)) % len(self._idents)
        return self._hosts[at]


# -- the workload ------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class ChordRunOptions:
    """One bootstrapped Chord ring; the fields are what an experiment's [options] set."""

    nodes: int = 64  # hosts
    vnodes: int = 1  # virtual nodes per host
    bits: int = _DEFAULT_BITS  # identifier bits (use 64 for rings in the thousands)
    lookups: int = 1000  # in all, from random hosts for random keys
    keys: int = 1000  # random keys whose owner is traced (topic-balance metric)
    seed: int = 1
    run: str | None = None

    def __post_init__(self) -> None:
        if self.nodes < 1 or self.lookups < 0 or self.keys < 0:
            raise ConfigError("need nodes >= 1, lookups >= 0 and keys >= 0")
        quiet_config(self.bits, self.vnodes)  # bits and vnodes in range, or ConfigError
        if self.nodes * self.vnodes > 1 << self.bits:
            raise ConfigError(f"{self.nodes} x {self.vnodes} virtual nodes do not fit in "
                              f"{self.bits} bits")


@dataclasses.dataclass
class ChordRunResult:
    run: str
    nodes: int
    vnodes: int
    lookups: int  # asked for
    completed: int  # reached a root (traced lookup rows)
    right_root: int  # of those, at the ideal ring's root of the key
    hops: list[int]
    keys: int
    owned: dict[NodeId, int]  # keys owned per host (every host, 0 included)
    events: int
    virtual_seconds: float
    wall_seconds: float

    @property
    def hops_mean(self) -> float:
        return statistics.mean(self.hops) if self.hops else 0.0


def run_chord_sim(options: ChordRunOptions, trace_sink: TraceSink | None = None) -> ChordRunResult:
    """Build the ring, run the lookups, trace the owners; every row goes to ``trace_sink``."""
    seed = options.seed
    run_id = options.run or f"chord-n{options.nodes}-v{options.vnodes}-s{seed}"
    tap = LookupTap(trace_sink)
    sim = Simulation(seed=seed, link=LINK, run=run_id, trace=tap, codec=None,
                     trace_messages=False)
    started = time.perf_counter()
    nodes = node_ids(options.nodes)
    bootstrap_ring(sim, nodes, quiet_config(options.bits, options.vnodes))
    found = run_lookups(sim, nodes, tap, options.lookups,
                        rng=random.Random(f"{seed}/chord-lookups"), prefix=f"lookup-{seed}-")
    ring = IdealRing(nodes, vnodes=options.vnodes, bits=options.bits)
    owned = dict.fromkeys(nodes, 0)
    for i in range(options.keys):
        key = f"key-{seed}-{i}"
        owner = ring.owner(key)
        owned[owner] += 1
        tap.append((run_id, sim.now, owner, LAYER, "owner", None, None, None, key, None, None,
                    encode_info({"how": "ring"}), sim.wall))
    sim.trace_storage()  # one row per host: hosts that own nothing are members too
    tap.flush()
    return ChordRunResult(
        run=run_id, nodes=options.nodes, vnodes=options.vnodes, lookups=options.lookups,
        completed=len(found), right_root=sum(ring.owner(f.key) == f.root for f in found),
        hops=[f.hops for f in found], keys=options.keys, owned=owned, events=sim.events,
        virtual_seconds=sim.now, wall_seconds=time.perf_counter() - started)
