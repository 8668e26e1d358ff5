"""The VOPR's plan for seed 002 (``gossamer vopr appsync``): how a seed draws the faults of the
``appsync`` workload (``services/appsync/experiment.py``) and how they read. The knobs and
their documented ranges are in ``vopr`` (``_APPSYNC_KNOBS``), beside the other plans.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from .experiment import Scalar

if TYPE_CHECKING:
    from .vopr_knobs import _Draw

__all__ = ["APPSYNC_GUARANTEE", "APPSYNC_SLOWEST", "appsync_faults", "draw_appsync"]

APPSYNC_SLOWEST = 0.05  # the latency knob's ceiling: below the 20 ms .. 200 ms rounds
APPSYNC_GUARANTEE = (
    "Seed 002 APSYN (services/appsync/experiment.py): every peer applies the same updates to "
    "each object it sees in the same round order as the sync server, and every "
    "acknowledgement matches what was applied, under connection cuts, peers leaving and "
    "rejoining, a server restart and loss on the connections (resent by TCP: late, never "
    "lost); with two zones, the member zone's CTRL holds the master's G objects in the "
    "master's order; in peer-to-peer mode, every participant agrees on the CTRL and its "
    "decided rounds through the log, across CTRL crashes.")


def draw_appsync(d: _Draw) -> None:
    d.integer("peers")
    d.uniform("request_chance")
    d.integer("max_ms")
    d.latency(slowest=APPSYNC_SLOWEST)
    d.set("cuts", d.integer("cuts") if d.rng.random() < 0.7 else 0)
    d.set("leaves", d.integer("leaves") if d.rng.random() < 0.5 else 0)
    d.flag(0.4, "server_restart")
    d.uniform("workload")
    d.uniform("settle")
    d.set("loss", d.uniform("loss") if d.rng.random() < 0.5 else 0.0)
    zones = 2 if d.rng.random() < 0.4 else 1  # drawn last: earlier seeds keep their draws
    d.set("zones", zones)
    d.set("zone_faults", d.integer("zone_faults") if zones > 1 else 0)
    p2p = zones == 1 and d.rng.random() < 0.4  # drawn after the zones, for the same reason
    d.set("p2p", p2p)
    d.set("ctrl_crashes", d.integer("ctrl_crashes") if p2p else 0)
    d.set("partitions", d.integer("partitions") if p2p else 0)  # drawn last, as above
    if p2p:  # participants: a Paxos group of 3..7; TCP-like loss is the plain mode's knob
        d.set("peers", max(3, min(7, int(d.options["peers"]))))
        d.set("loss", 0.0)
        d.set("server_restart", False)
    d.flag(0.3, "eager")  # drawn last, as above
    d.flag(0.25, "quiet")  # drawn last, as above


def appsync_faults(o: Mapping[str, Scalar]) -> list[str]:
    out = [f"{o[name]} {name}" for name in ("cuts", "leaves") if o.get(name)]
    if o.get("loss"):
        out.append(f"loss {float(o['loss']):.3f} (connections: resent)")
    if o.get("server_restart"):
        out.append("server restart")
    if o.get("p2p"):
        out.append(f"peer-to-peer, {o.get('ctrl_crashes', 0)} CTRL crashes, "
                   f"{o.get('partitions', 0)} CTRL cut off")
    if o.get("quiet"):
        out.append("quiet peers (fixed rounds)")
    elif o.get("eager"):
        out.append("eager peers")
    if o.get("zones", 1) != 1:
        out.append(f"{o['zones']} zones, {o.get('zone_faults', 0)} link cuts / member "
                   f"restarts")
    return out
