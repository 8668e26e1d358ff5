"""The VOPR's plan for the replicated log (``gossamer vopr paxos``): how a seed draws the
faults of the ``paxos`` workload (``services/paxos/experiment.py``) and how they read. The
knobs and their documented ranges are in ``vopr`` (``_PAXOS_KNOBS``), beside the other plans.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from .experiment import Scalar

if TYPE_CHECKING:
    from .vopr_knobs import _Draw

__all__ = ["PAXOS_GUARANTEE", "PAXOS_SLOWEST", "draw_paxos", "paxos_faults"]

PAXOS_SLOWEST = 0.05  # the latency knob's ceiling: well below the 0.2 s NOOP period
PAXOS_GUARANTEE = (
    "Seed 001 Multi-Paxos replicated log (services/paxos/experiment.py), 3 or 5 replicas: no "
    "two replicas decide different values for a slot, every replica applies one order, and no "
    "acknowledged operation is lost, under loss up to 10%, duplication, reordering, a "
    "minority cut off for a while and the leader's crash and recovery (a crash in the "
    "simulator is a power loss: uncommitted writes are gone).")


def draw_paxos(d: _Draw) -> None:
    d.choice("replicas")
    ops = d.integer("ops")
    rate = d.uniform("rate")
    span = ops / rate
    d.latency(slowest=PAXOS_SLOWEST)
    d.maybe(0.6, "loss")
    d.maybe(1 / 3, "duplicate")
    d.maybe(1 / 3, "reorder")
    if d.flag(0.4, "partition"):
        d.uniform("partition_at", high=span)
        d.uniform("partition_for")
    if d.flag(0.6, "leader_crash"):
        d.uniform("crash_at", high=span)
        d.uniform("recover_after")
    d.set("settle", 10.0)


def paxos_faults(o: Mapping[str, Scalar]) -> list[str]:
    out = [f"{o.get('replicas')} replicas"]
    out += [f"{name} {o[option]}" for option, name in
            (("loss", "loss"), ("duplicate", "dup"), ("reorder", "reorder")) if o.get(option)]
    if o.get("partition"):
        out.append(f"minority cut off @{o.get('partition_at')}s +{o.get('partition_for')}s")
    if o.get("leader_crash"):
        out.append(f"leader power loss @{o.get('crash_at')}s +{o.get('recover_after')}s")
    return out
