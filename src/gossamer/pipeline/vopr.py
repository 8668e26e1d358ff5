"""VOPR: random fault schedules for a service's simulated workload, one seed each, every run
judged by the same checks as ``gossamer analyze``; a failing seed replays exactly.

A seed alone decides a run: ``random.Random(f"vopr/{service}/{seed}")`` draws which faults are
on and how strong, within each service's documented ranges (``PLANS``: the ranges in which the
service's guarantee must hold, so any violation is a bug), and the workload's own randomness
(network, nodes, scenario) is seeded with the same seed. The pipeline knows workloads by name
only: a schedule is the workload's options as plain values, run through ``run_experiment``
with the caller's ``run_fn`` and then analysed once, with the ``CheckConfig`` of
``experiments/quickstart.toml`` (``VOPR_CHECKS``).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import random
import shutil
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession, Window
from pyspark.sql import functions as F

from .analysis import Analysis, AnalysisConfig, CheckSummary, analyze
from .checks import VIOLATION_COLUMNS, CheckConfig, Status
from .errors import PipelineError
from .experiment import RunFunction, RunOutcome, RunSpec, Scalar, run_experiment
from .settings import RunSettings, write_run_settings
from .vopr_appsync import APPSYNC_GUARANTEE, APPSYNC_SLOWEST, appsync_faults, draw_appsync
from .vopr_knobs import _LATENCY, Knob, Plan, _Draw, latency_within
from .vopr_paxos import PAXOS_GUARANTEE, PAXOS_SLOWEST, draw_paxos, paxos_faults

__all__ = [
    "PLANS",
    "SERVICES",
    "VOPR_CHECKS",
    "Campaign",
    "Knob",
    "Plan",
    "Schedule",
    "SeedVerdict",
    "check_out_dir",
    "draw_schedule",
    "fifo_repair_time",
    "latency_within",
    "parse_overrides",
    "run_campaign",
    "sort_checks",
    "unproven_checks",
]

#: the [analysis] of experiments/quickstart.toml: which layers promise what (a test keeps the
#: two equal); each campaign holds one service, so the other layers are simply absent
VOPR_CHECKS = CheckConfig(
    layers=("fifo", "replica", "activity", "pubsub"),
    fifo_layers=("fifo", "replica", "activity"),
    session_layers=("activity",),
    causal_layers=("replica",),
    total_order_layers=("replica",),
    total_order_per_key=True,
    own_delivery_layers=("fifo", "pubsub"),
    round_layers=("appsync",),
)
_MARKER = "vopr.json"  # in OUT: this directory belongs to a VOPR campaign (may be cleared)
_OWNED = ("trace", "runs", "analysis")  # what a campaign rewrites in OUT


# -- fifo --------------------------------------------------------------------------------------

_FIFO_RETRY_CAP = 2.0  # FifoConfig's nack_retry_cap and status_retry_cap (seconds)
_FIFO_SETTLE_FLOOR = 10.0
_FALSE_ALARM = 1e-6  # the chance a run with the drawn settle is judged too early


def fifo_repair_time(loss: float, nodes: int, messages: int) -> float:
    """Virtual seconds that repair needs after the last fault so that, at datagram ``loss``,
    every (message, node) pair is repaired except with chance ``_FALSE_ALARM``.

    One repair attempt per pair every ``_FIFO_RETRY_CAP`` seconds at worst (NACKs and STATUS
    retries back off to that cap), plus half a second of latency; an attempt needs a STATUS,
    a NACK and the resent message to cross, each lost with ``loss``, so it succeeds with at
    least (1 - loss)^3."""
    if loss <= 0:
        return _FIFO_SETTLE_FLOOR
    pairs = max(1, nodes * messages)
    success = (1.0 - loss) ** 3
    attempts = math.ceil(math.log(_FALSE_ALARM / pairs) / math.log(1.0 - success))
    return _FIFO_SETTLE_FLOOR + attempts * (_FIFO_RETRY_CAP + 0.5)


_FIFO_KNOBS = (
    Knob("nodes", 3, 12, note="small groups: every pair of nodes is a link"),
    Knob("messages", 20, 150),
    Knob("rate", 20.0, 100.0, note="broadcasts per virtual second, round-robin origins"),
    _LATENCY,
    Knob("loss", 0.0, 0.6, note="datagram loss on every link (70% of the seeds): reliability "
                                "holds at any loss below 1 given the settle below"),
    Knob("duplicate", 0.0, 0.3, note="half of the seeds"),
    Knob("reorder", 0.0, 0.5, note="held back up to 0.1 s; half of the seeds"),
    Knob("crash", 0.0, 1.0, note="fraction of the nodes crashing at once (half of the "
                                 "seeds); each recovers: crash-recover on its committed store "
                                 "(a power loss drops what was not committed)"),
    Knob("crash_at", 0.0, 7.5, note="virtual seconds from the start, within the workload"),
    Knob("recover_after", 0.1, 5.0),
    Knob("partition", choices=(False, True), note="two random halves (40% of the seeds)"),
    Knob("partition_at", 0.0, 7.5, note="within the workload"),
    Knob("partition_for", 0.2, 5.0, note="then it heals"),
    Knob("settle", _FIFO_SETTLE_FLOOR, 900.0,
         note="derived: the last fault's end past the workload plus fifo_repair_time(loss)"),
)


def _draw_fifo(d: _Draw) -> None:
    nodes = d.integer("nodes")
    messages = d.integer("messages")
    rate = d.uniform("rate")
    workload = messages / rate
    d.latency(slowest=_FIFO.slowest)
    loss = d.maybe(0.7, "loss")
    d.maybe(0.5, "duplicate")
    d.maybe(0.5, "reorder")
    ends = [workload]
    if d.rng.random() < 0.5:
        d.uniform("crash", low=_at_least_one(nodes))
        at = d.uniform("crash_at", high=workload)
        ends.append(at + d.uniform("recover_after"))
    else:
        d.set("crash", 0.0)
    if d.flag(0.4, "partition"):
        at = d.uniform("partition_at", high=workload)
        ends.append(at + d.uniform("partition_for"))
    d.set("settle", round(max(ends) - workload + fifo_repair_time(loss, nodes, messages), 1))


def _fifo_faults(o: Mapping[str, Scalar]) -> list[str]:
    out = _link_faults(o)
    if o.get("crash"):
        out.append(f"crash {_share(o['crash'], o['nodes'])} @{_s(o.get('crash_at'))} "
                   f"+{_s(o.get('recover_after'))}")
    if o.get("partition"):
        out.append(f"partition @{_s(o.get('partition_at'))} +{_s(o.get('partition_for'))}")
    return out


# -- replica (seed 000) ------------------------------------------------------------------------

_REPLICA_KNOBS = (
    Knob("clients", 3, 10),
    Knob("keys", 1, 4, note="few keys: concurrent writes conflict and rebase"),
    Knob("writes_per_client", 3, 10),
    Knob("rate", 5.0, 20.0),
    Knob("delete_rate", 0.0, 0.3),
    _LATENCY,
    Knob("cuts", 0.0, 2.0, note="connection resets per client per second during the "
                                "workload (60% of the seeds): the connections are TCP-like, "
                                "so a cut, not datagram loss, is what loses data in flight"),
    Knob("crash", 0.0, 0.5, note="fraction of the clients crashing, staggered (half of the "
                                 "seeds); a crash drops what the store had not committed"),
    Knob("recover_after", 0.2, 3.0, note="crashed clients (and the hub) come back"),
    Knob("offline", 0.0, 0.5, note="fraction of the others working offline (half of the seeds)"),
    Knob("offline_for", 0.5, 4.0),
    Knob("hub_crash", choices=(False, True), note="the hub loses power mid-workload (a quarter "
                                                  "of the seeds): its keeper's last group "
                                                  "commit is lost and repaired from the "
                                                  "clients' send logs"),
    Knob("partition", choices=(False, True), note="half of the clients cut off from the hub "
                                                  "(30% of the seeds): their connections "
                                                  "hold frames until the heal"),
    Knob("partition_at", 0.0, 20.0, note="seconds after the first write, within the workload"),
    Knob("partition_for", 0.5, 4.0, note="then it heals"),
    Knob("settle", 30.0, 30.0, note="fixed: everyone is back and online well before the end"),
)


def _draw_replica(d: _Draw) -> None:
    clients = d.integer("clients")
    d.integer("keys")
    writes = clients * d.integer("writes_per_client")
    rate = d.uniform("rate")
    d.uniform("delete_rate")
    d.latency(slowest=_REPLICA.slowest)
    if d.rng.random() < 0.6:
        d.uniform("cuts", low=0.1)
    else:
        d.set("cuts", 0.0)
    if d.rng.random() < 0.5:
        d.uniform("crash", low=_at_least_one(clients))
    else:
        d.set("crash", 0.0)
    d.uniform("recover_after")
    if d.rng.random() < 0.5:
        d.uniform("offline", low=_at_least_one(clients))
    else:
        d.set("offline", 0.0)
    d.uniform("offline_for")
    d.flag(0.25, "hub_crash")
    if d.flag(0.3, "partition"):
        d.uniform("partition_at", high=writes / rate)
        d.uniform("partition_for")
    d.set("settle", 30.0)


def _replica_faults(o: Mapping[str, Scalar]) -> list[str]:
    out = []
    if o.get("cuts"):
        out.append(f"cuts {o['cuts']}/s")
    if o.get("crash"):
        out.append(f"crash {_share(o['crash'], o['clients'])} +{_s(o.get('recover_after'))}")
    if o.get("offline"):
        out.append(f"offline {_share(o['offline'], o['clients'])} +{_s(o.get('offline_for'))}")
    if o.get("hub_crash"):
        out.append(f"hub power loss +{_s(o.get('recover_after'))}")
    if o.get("partition"):
        out.append(f"partition {max(1, int(o['clients']) // 2)}/{o['clients']} from the hub "
                   f"@{_s(o.get('partition_at'))} +{_s(o.get('partition_for'))}")
    return out


# -- pubsub (seed 001) -------------------------------------------------------------------------

_PUBSUB_KNOBS = (
    Knob("mode", choices=("gossip", "gossip-tree", "scribe")),
    Knob("nodes", 8, 24),
    Knob("topics", 1, 3),
    Knob("subscribe_probability", 0.3, 1.0),
    Knob("publishes_per_node", 2, 5),
    Knob("rate", 10.0, 50.0),
    _LATENCY,
    Knob("loss", 0.0, 0.1, note="datagram loss (60% of the seeds); Scribe's repair is "
                                "documented for 10% (README: limits)"),
    Knob("duplicate", 0.0, 0.2, note="a third of the seeds"),
    Knob("reorder", 0.0, 0.3, note="a third of the seeds"),
    Knob("spares", choices=(0, 2),
         note="Scribe only (half its seeds): the seed's placement, each ring node with two "
              "spare processes outside the ring that replicate its topics through "
              "Multi-Paxos and take its place when it dies"),
    Knob("crash", 0.0, 0.3, note="a fraction of the nodes crashing at once, for good (40% of "
                                 "the gossip seeds and of the Scribe seeds with spares; never "
                                 "the ring's three contacts). "
                                 "Not for Scribe without spares: a crashed topic root loses "
                                 "what it accepted"),
    Knob("crash_at", 0.0, 12.0, note="seconds into the publishing, within it"),
    Knob("crash_publishers", choices=(False,),
         note="the crashing nodes publish nothing: a publish is acknowledged to no one, so "
              "a publisher crashing for good may take its last ones with it (pubsub_scale.toml "
              "measures that); what the survivors publish must reach every live subscriber"),
    Knob("partition", choices=(False, True),
         note="gossip modes only: two halves (30% of their seeds). Not for Scribe: each half "
              "elects its own roots, and what a replaced root's stream missed is not repaired "
              "(README: limits)"),
    Knob("partition_at", 0.0, 12.0, note="seconds into the publishing, within it"),
    Knob("partition_for", 0.5, 3.0, note="then it heals"),
    Knob("grow", choices=(0, 1),
         note="Scribe with spares only (half those seeds): a new active node and its spares "
              "join the running placement, named so that they take a topic from its owner; "
              "the range moves through both groups' logs"),
    Knob("grow_at", 0.0, 12.0, note="seconds into the publishing, within it"),
    Knob("warmup", 2.0, 6.0, note="fixed per mode: 6 s for Scribe's ring, as in quickstart"),
    Knob("settle", 15.0, 15.0, note="fixed: after the last publish or fault"),
)


def _draw_pubsub(d: _Draw) -> None:
    mode = d.choice("mode")
    nodes = d.integer("nodes")
    d.integer("topics")
    d.uniform("subscribe_probability")
    publishes = d.integer("publishes_per_node")
    rate = d.uniform("rate")
    span = publishes * nodes / rate  # seconds of publishing
    d.latency(slowest=_PUBSUB.slowest)
    d.maybe(0.6, "loss")
    d.maybe(1 / 3, "duplicate")
    d.maybe(1 / 3, "reorder")
    gossip = mode != "scribe"
    spares = 2 if not gossip and d.rng.random() < 0.5 else 0
    d.set("spares", spares)
    if (gossip or spares) and d.rng.random() < 0.4:
        d.uniform("crash", low=_at_least_one(nodes))
        d.uniform("crash_at", high=span)
        d.set("crash_publishers", False)
    else:
        d.set("crash", 0.0)
    if gossip and d.flag(0.3, "partition"):
        d.uniform("partition_at", high=span)
        d.uniform("partition_for")
    else:
        d.set("partition", False)
    if spares and d.rng.random() < 0.5:  # drawn last: the other draws of a seed stay as were
        d.set("grow", 1)
        d.uniform("grow_at", high=span)
    else:
        d.set("grow", 0)
    d.set("warmup", 6.0 if mode == "scribe" else 2.0)
    d.set("settle", 15.0)


def _pubsub_faults(o: Mapping[str, Scalar]) -> list[str]:
    out = [str(o.get("mode")) + (f" +{o['spares']} spares" if o.get("spares") else ""),
           *_link_faults(o)]
    if o.get("crash"):
        out.append(f"crash-stop {_share(o['crash'], o['nodes'])} @{_s(o.get('crash_at'))}")
    if o.get("partition"):
        out.append(f"partition @{_s(o.get('partition_at'))} +{_s(o.get('partition_for'))}")
    if o.get("grow"):
        out.append(f"a group joins @{_s(o.get('grow_at'))}")
    return out


# -- activity (seed 003) -----------------------------------------------------------------------

_ACTIVITY_KNOBS = (
    Knob("servers", 2, 7, note="a binary tree, s0 the root"),
    Knob("clients", 4, 16),
    Knob("activities_per_client", 3, 8),
    Knob("rate", 2.0, 10.0),
    _LATENCY,
    Knob("crash", 0.0, 1.0, note="fraction of the servers (never the root) crashing one after "
                                 "another, each back after recover_after (60% of the seeds); "
                                 "seed 003 promises delivery within a session, so sessions "
                                 "end before and start after each crash"),
    Knob("recover_after", 0.5, 4.0),
    Knob("registered", 0.0, 0.5, note="clients that register a username first"),
    Knob("settle", 5.0, 10.0),
)


def _draw_activity(d: _Draw) -> None:
    servers = d.integer("servers")
    d.integer("clients")
    d.integer("activities_per_client")
    d.uniform("rate")
    d.latency(slowest=_ACTIVITY.slowest)
    if d.rng.random() < 0.6:
        d.uniform("crash", low=_at_least_one(servers))
    else:
        d.set("crash", 0.0)
    d.uniform("recover_after")
    d.uniform("registered")
    d.uniform("settle")


def _activity_faults(o: Mapping[str, Scalar]) -> list[str]:
    if not o.get("crash"):
        return []
    crashing = min(int(o["servers"]) - 1, round(int(o["servers"]) * float(o["crash"])))
    return [f"crash {crashing}/{o['servers']} servers +{_s(o.get('recover_after'))}"]


# -- atomic ------------------------------------------------------------------------------------

_ATOMIC_KNOBS = (
    Knob("members", 3, 8),
    Knob("senders", 1, 3),
    Knob("messages", 4, 15),
    Knob("loss", 0.0, 0.3, note="independent per member and copy; SRM repairs it"),
    Knob("duplicate", 0.0, 0.2),
    Knob("reorder", 0.0, 0.3),
    Knob("member_crashes", 0, 3, note="before or after the member's YES, as the draw falls"),
    Knob("sender_crashes", 0, 2, note="at a random step between the sender's two phases"),
    Knob("down_for", 4.0, 12.0, note="session periods a crashed member stays down"),
    Knob("tree", choices=(False, True), note="a router tree (a loss drops for a subtree)"),
    Knob("inbox", choices=(False, True),
         note="members keep a durable inbox, an application handles and acknowledges it"),
)


def _draw_atomic(d: _Draw) -> None:
    members = d.integer("members")
    d.integer("senders", high=members)
    d.integer("messages")
    d.maybe(0.7, "loss")
    d.maybe(0.4, "duplicate")
    d.maybe(0.4, "reorder")
    d.integer("member_crashes")
    d.integer("sender_crashes")
    d.uniform("down_for")
    d.choice("tree")
    d.choice("inbox")


def _atomic_faults(o: Mapping[str, Scalar]) -> list[str]:
    faults = _link_faults(o)
    if o.get("member_crashes"):
        faults.append(f"{o['member_crashes']} member crashes +{o.get('down_for')} periods")
    if o.get("sender_crashes"):
        faults.append(f"{o['sender_crashes']} sender crashes between phases")
    if o.get("tree"):
        faults.append("router tree")
    if o.get("inbox"):
        faults.append("inbox application")
    return faults


_ATOMIC = Plan(
    "atomic",
    "Seed 004 atomic multicast over SRM (services/atomic/experiment.py): a committed message is "
    "delivered exactly once by every member of the sender's snapshot (crashed members after "
    "they recover) and by no one else, an aborted one by no one, under loss up to 30%, "
    "duplication, reordering, members crashing before or after their YES and senders "
    "crashing between the phases, everyone recovering.",
    _ATOMIC_KNOBS, 0.02, _draw_atomic, _atomic_faults, checks=("atomicity",))


# -- the plans ---------------------------------------------------------------------------------


def _at_least_one(count: int) -> float:
    """The smallest fraction of ``count`` nodes that the workloads round to one node."""
    return round(0.5 / count + 0.001, 3)


def _link_faults(o: Mapping[str, Scalar]) -> list[str]:
    return [f"{name} {o[option]}" for option, name in
            (("loss", "loss"), ("duplicate", "dup"), ("reorder", "reorder")) if o.get(option)]


def _share(fraction: Scalar, of: Scalar) -> str:
    """How many of ``of`` nodes a fraction picks (as the workloads round it)."""
    return f"{round(int(of) * float(fraction))}/{of}"


def _s(value: Scalar | None) -> str:
    return "?" if value is None else f"{float(value):g}s"


_FIFO = Plan(
    "fifo",
    "FIFO broadcast (services/broadcast.py): every node up at the end delivers every message "
    "published while it was up, once, in order per origin, at any loss below 1 given time to "
    "settle, under duplication, reordering, a healed partition and crash-recover of any "
    "fraction of the nodes.",
    _FIFO_KNOBS, 0.1, _draw_fifo, _fifo_faults,
    checks=("reliability", "own delivery", "duplicates", "validity", "fifo"))
_REPLICA = Plan(
    "replica",
    "Seed 000 replicated objects (services/replica/experiment.py): causal delivery, FIFO per "
    "writer and one final state per object at every replica and the hub's keeper, under "
    "connection cuts, crash-recover of clients and of the hub (power loss of uncommitted "
    "writes), clients working offline and a healed partition from the hub.",
    _REPLICA_KNOBS, 0.1, _draw_replica, _replica_faults,
    checks=("reliability", "duplicates", "validity", "fifo", "causal", "total order",
            "convergence"))
_PUBSUB = Plan(
    "pubsub",
    "Seed 001 topic pub/sub (services/pubsub/experiment.py), gossip, gossip-tree or Scribe: "
    "every node subscribed when a message was published and up at the end delivers it, under "
    "loss up to 10%, duplication and reordering; in the gossip modes, and in Scribe with the "
    "seed's spares, also while up to 30% of the nodes crash for good (they publish nothing); "
    "in the gossip modes across a healed partition.",
    _PUBSUB_KNOBS, 0.1, _draw_pubsub, _pubsub_faults,
    checks=("reliability", "duplicates", "validity"))
_ACTIVITY = Plan(
    "activity",
    "Seed 003 activity network (services/activity/experiment.py): every client gets what was "
    "published in its session, in FIFO order per sender, while servers crash and recover.",
    _ACTIVITY_KNOBS, 0.06, _draw_activity, _activity_faults,
    checks=("reliability", "duplicates", "validity", "fifo"))

_PAXOS_KNOBS = (
    Knob("replicas", choices=(3, 5)), Knob("ops", 30, 80), Knob("rate", 10.0, 40.0), _LATENCY,
    Knob("loss", 0.0, 0.1, note="60% of the seeds"),
    Knob("duplicate", 0.0, 0.2, note="a third of the seeds"),
    Knob("reorder", 0.0, 0.3, note="a third of the seeds"),
    Knob("partition", choices=(False, True), note="a minority cut off (40% of the seeds)"),
    Knob("partition_at", 0.0, 8.0, note="seconds into the proposing, within it"),
    Knob("partition_for", 0.5, 3.0, note="then it heals"),
    Knob("leader_crash", choices=(False, True), note="60% of the seeds; a power loss"),
    Knob("crash_at", 0.0, 8.0, note="seconds into the proposing, within it"),
    Knob("recover_after", 0.5, 3.0),
    Knob("settle", 10.0, 10.0, note="fixed: after the last proposal or fault"),
)
_PAXOS = Plan("paxos", PAXOS_GUARANTEE, _PAXOS_KNOBS, PAXOS_SLOWEST, draw_paxos, paxos_faults,
              checks=("paxos agreement", "decided order", "acknowledged kept"))
_APPSYNC_KNOBS = (
    Knob("peers", 2, 12),
    Knob("request_chance", 0.2, 1.0, note="per peer per round: its C object, its property of "
                                          "the board and the board's contended property"),
    Knob("max_ms", 40, 200, note="max round time (min 20 ms)"), _LATENCY,
    Knob("cuts", 0, 6, note="peer-server connection resets (70% of the seeds)"),
    Knob("leaves", 0, 4, note="peers crashing and rejoining (half of the seeds)"),
    Knob("server_restart", choices=(False, True), note="on its store (40% of the seeds)"),
    Knob("workload", 2.0, 4.0, note="virtual seconds of requests; the faults fall within"),
    Knob("settle", 3.0, 3.0, note="fixed: the last syncs arrive well before the end"),
    Knob("loss", 0.0, 0.05, note="each try of a frame on a connection lost; TCP sends it "
                                 "again 0.2 s later, doubling (half of the seeds)"),
    Knob("zones", 1, 2, note="2: a member zone's CTRL joins the master's (40% of the seeds; "
                             "docs/appsync-zones.md)"),
    Knob("zone_faults", 0, 3, note="with two zones: cuts of the link between the CTRLs and "
                                   "restarts of the member CTRL, alternately"),
    Knob("p2p", choices=(False, True), note="peer-to-peer mode: the participants (3-7) choose "
                                            "the CTRL through Multi-Paxos (4 in 10 of the "
                                            "one-zone seeds; no loss knob, no server restart)"),
    Knob("ctrl_crashes", 0, 3, note="p2p: crashes of whoever is CTRL, each recovering within "
                                    "2 s (a majority stays up)"),
    Knob("partitions", 0, 2, note="p2p: whoever is CTRL cut off from the others for "
                                  "0.5-2.5 s"),
    Knob("eager", choices=(False, True), note="eager peers (PeerConfig.eager, gather 0.5) "
                                              "requesting at a random moment of the round "
                                              "(3 in 10 of the seeds)"),
    Knob("quiet", choices=(False, True), note="quiet peers (PeerConfig.quiet: a rqst only "
                                              "with requests, or every tout / 2 rounds) in "
                                              "fixed rounds of max_ms (1 in 4 of the seeds)"),
)
_APPSYNC = Plan("appsync", APPSYNC_GUARANTEE, _APPSYNC_KNOBS, APPSYNC_SLOWEST, draw_appsync,
                appsync_faults, checks=("round consistency",))

PLANS: Mapping[str, Plan] = {p.service: p for p in (_FIFO, _REPLICA, _PUBSUB, _ACTIVITY,
                                                    _PAXOS, _ATOMIC, _APPSYNC)}
SERVICES = tuple(PLANS)


# -- schedules ---------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Schedule:
    """One seed's run: the workload's options, the faults they encode, the analysis settings.
    ``overrides`` are options set by hand on top of the draw (a planted bug, a replay)."""

    service: str
    seed: int
    options: Mapping[str, Scalar]
    faults: tuple[str, ...]
    checks: CheckConfig
    overrides: Mapping[str, Scalar] = dataclasses.field(default_factory=dict)

    @property
    def run(self) -> str:
        return f"vopr-{self.service}-s{self.seed}"

    def spec(self) -> RunSpec:
        return RunSpec(self.run, self.service, "sim", self.seed, dict(self.options))

    def replay_command(self) -> str:
        """The one command that replays this run exactly, into a directory of its own (the
        campaign's stays as it was)."""
        extra = "".join(f" --override {key}={_literal(value)}"
                        for key, value in sorted(self.overrides.items()))
        return f"gossamer vopr {self.service} --seed {self.seed}{extra} --out {self.replay_dir}"

    @property
    def replay_dir(self) -> Path:
        """Where a replay of this seed goes by default: a directory of its own."""
        return Path("runs") / "vopr" / "replay" / self.run

    def record(self) -> dict[str, Any]:
        return {"service": self.service, "seed": self.seed, "run": self.run,
                "options": dict(self.options), "faults": list(self.faults),
                "overrides": dict(self.overrides), "replay": self.replay_command()}


def _literal(value: Scalar) -> str:
    return json.dumps(value) if isinstance(value, bool) else str(value)


def draw_schedule(service: str, seed: int, *,
                  overrides: Mapping[str, Scalar] | None = None) -> Schedule:
    """The schedule of ``seed`` for ``service``: a pure function of the two (and of
    ``overrides``, applied on top)."""
    plan = PLANS.get(service)
    if plan is None:
        raise PipelineError(f"unknown service {service!r}; the VOPR knows {', '.join(SERVICES)}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise PipelineError(f"a seed is an integer >= 0, got {seed!r}")
    draw = _Draw(random.Random(f"vopr/{service}/{seed}"), {k.option: k for k in plan.knobs})
    plan.draw(draw)
    options = dict(draw.options)
    extra = dict(overrides or {})
    for key in ("seed", "run"):
        if key in extra:
            raise PipelineError(f"{key!r} is set by the VOPR itself")
    options.update(extra)
    faults = plan.faults(options)
    faults += [f"override {key}={_literal(value)}" for key, value in sorted(extra.items())]
    return Schedule(service, seed, options, tuple(faults), VOPR_CHECKS, extra)


def parse_overrides(pairs: Sequence[str]) -> dict[str, Scalar]:
    """``["retransmit=false", "loss=0.3"]`` into options (JSON values; anything else a
    string)."""
    out: dict[str, Scalar] = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        if not sep or not key.strip():
            raise PipelineError(f"--override expects KEY=VALUE, got {pair!r}")
        try:
            value = json.loads(text)
        except ValueError:
            value = text
        if not isinstance(value, str | int | float | bool):
            raise PipelineError(f"--override {key}: a string, number or boolean, got {text!r}")
        out[key.strip()] = value
    return out


# -- a campaign --------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class SeedVerdict:
    """One seed's outcome: ``violations`` per failing check; ``error`` if the run itself
    raised (a crash of the simulation is a finding too)."""

    schedule: Schedule
    violations: Mapping[str, int]
    error: str = ""
    examples: Mapping[str, list[dict[str, Any]]] = dataclasses.field(default_factory=dict)

    @property
    def failed(self) -> bool:
        return bool(self.error) or any(self.violations.values())

    @property
    def violation_count(self) -> int:
        return sum(self.violations.values())


@dataclasses.dataclass
class Campaign:
    service: str
    out_dir: Path
    verdicts: list[SeedVerdict]
    #: checks that applied to the campaign's trace (the others: not applicable, with why)
    applied: list[str]
    not_applicable: dict[str, str]
    analysis: Analysis | None
    #: checks the service's guarantee rests on (``Plan.checks``) that did not apply, with why:
    #: whatever the seeds' verdicts, the campaign has not proven the guarantee
    unproven: dict[str, str] = dataclasses.field(default_factory=dict)

    @property
    def failed(self) -> list[SeedVerdict]:
        return [v for v in self.verdicts if v.failed]


def sort_checks(plan: Plan, checks: Sequence[CheckSummary]
                ) -> tuple[list[str], dict[str, str], dict[str, str]]:
    """A campaign's analysis sorted: the checks that applied (those that could not run, a
    column missing, too: the table shows them), the others with why, and the checks of
    ``plan`` left unproven (not applicable, or could not run)."""
    applied = [c.name for c in checks if c.status is not Status.NOT_APPLICABLE]
    not_applicable = {c.name: c.reason for c in checks if c.status is Status.NOT_APPLICABLE}
    could_not_run = {c.name: f"it could not run: {c.reason}" for c in checks
                     if c.status is Status.ERROR}
    ran = [name for name in applied if name not in could_not_run]
    return applied, not_applicable, unproven_checks(plan, ran,
                                                    {**not_applicable, **could_not_run})


def unproven_checks(plan: Plan, applied: Sequence[str],
                    not_applicable: Mapping[str, str]) -> dict[str, str]:
    """The checks of ``plan`` that did not apply to a campaign's trace, with why (a check the
    analysis does not have at all is named so: a renamed check must not pass unnoticed)."""
    return {name: not_applicable.get(name, "the analysis has no such check")
            for name in plan.checks if name not in applied}


def check_out_dir(out: str | Path) -> None:
    """Raise ``PipelineError`` unless ``out`` is new, empty or an earlier campaign's (a
    campaign rewrites it)."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise PipelineError(f"{out} is not a directory")
    if out.exists() and any(out.iterdir()) and not (out / _MARKER).is_file():
        raise PipelineError(f"{out} holds something else than a VOPR campaign (no {_MARKER}); "
                            "give a new or empty --out")


def _prepare(out: Path, service: str, schedules: Sequence[Schedule]) -> None:
    """Make ``out`` this campaign's: clear what an earlier campaign left (a done run is not
    skipped, as ``gossamer experiment`` would: the code may have changed since)."""
    check_out_dir(out)
    for name in _OWNED:
        shutil.rmtree(out / name, ignore_errors=True)
    out.mkdir(parents=True, exist_ok=True)
    (out / _MARKER).write_text(json.dumps(
        {"service": service, "schedules": [s.record() for s in schedules]}, indent=1,
        sort_keys=True))


def run_campaign(
    spark: SparkSession,
    schedules: Sequence[Schedule],
    out_dir: str | Path,
    run_fn: RunFunction,
    *,
    progress: Callable[[int, int], None] | None = None,
    analysis_progress: Callable[[str, int, int], None] | None = None,
    examples: int = 0,
) -> Campaign:
    """Run every schedule as one Spark task (``run_experiment``), analyse all runs at once
    with ``VOPR_CHECKS`` (``analyze``, as ``gossamer analyze`` does), and judge each seed by
    the violations found in its run. ``examples``: violations kept per check and seed."""
    if not schedules:
        raise PipelineError("no seeds to run")
    services = {s.service for s in schedules}
    if len(services) != 1:
        raise PipelineError(f"one service per campaign, got {sorted(services)}")
    service = services.pop()
    out = Path(out_dir)
    _prepare(out, service, schedules)
    outcomes = run_experiment(spark, [s.spec() for s in schedules], out, run_fn,
                              progress=progress)
    by_run: dict[str, RunOutcome] = {o.run: o for o in outcomes}
    for schedule in schedules:  # so `gossamer analyze OUT` judges each seed the same way
        if by_run[schedule.run].status != "failed":
            write_run_settings(out, schedule.run, RunSettings(
                checks=schedule.checks, services=(service,),
                replay=schedule.replay_command()))
    counts: dict[str, dict[str, int]] = {}
    found: dict[str, dict[str, list[dict[str, Any]]]] = {}
    analysis: Analysis | None = None
    applied: list[str] = []
    not_applicable: dict[str, str] = {}
    unproven: dict[str, str] = {}
    if any(o.status != "failed" for o in outcomes):
        analysis = analyze(spark, out, config=AnalysisConfig(checks=VOPR_CHECKS),
                           progress=analysis_progress)
        applied, not_applicable, unproven = sort_checks(PLANS[service], analysis.checks)
        if analysis.failed:
            counts, found = _violations_by_run(spark, analysis.out_dir, examples)
    verdicts = []
    for schedule in schedules:
        outcome = by_run[schedule.run]
        error = outcome.detail if outcome.status == "failed" else ""
        verdicts.append(SeedVerdict(schedule, counts.get(schedule.run, {}), error,
                                    found.get(schedule.run, {})))
    return Campaign(service, out, verdicts, applied, not_applicable, analysis, unproven)


def _violations_by_run(
    spark: SparkSession, analysis_dir: Path, examples: int
) -> tuple[dict[str, dict[str, int]], dict[str, dict[str, list[dict[str, Any]]]]]:
    """run -> check -> violations, from the tables ``analyze`` wrote (one per failing check,
    each row naming its check); and the first ``examples`` violations of each run and check."""
    tables = sorted(str(p.absolute()) for p in (analysis_dir / "violations").iterdir()
                    if p.is_dir()) \
        if (analysis_dir / "violations").is_dir() else []
    if not tables:
        raise PipelineError(f"the analysis under {analysis_dir} found violations but wrote no "
                            "violations table")
    frames = [spark.read.parquet(table) for table in tables]
    frame = functools.reduce(
        lambda left, right: left.unionByName(right, allowMissingColumns=True), frames)
    counts: dict[str, dict[str, int]] = {}
    for row in frame.groupBy("run", "check").count().collect():
        counts.setdefault(row["run"], {})[row["check"]] = int(row["count"])
    found: dict[str, dict[str, list[dict[str, Any]]]] = {}
    if examples > 0:
        order = Window.partitionBy("run", "check").orderBy("node", "origin", "seq", "msg")
        first = (frame.withColumn("nth", F.row_number().over(order))
                 .filter(F.col("nth") <= examples).orderBy("run", "check", "nth"))
        for row in first.collect():
            found.setdefault(row["run"], {}).setdefault(row["check"], []).append(
                {key: row[key] for key in VIOLATION_COLUMNS})
    return counts, found
