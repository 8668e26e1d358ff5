"""sim: the deterministic simulator (virtual time, seeded network faults, crash-aware storage).

One seed fixes every random choice, so a failing run replays exactly.
"""

from .kernel import OWN_CODECS, STORE_LAYER, NodeStatus, SimEnv, Simulation, SimulationError
from .multicast import MulticastGroup, RouterTree, TreeLink
from .network import (
    Constant,
    Exponential,
    Latency,
    LinkModel,
    LogNormal,
    Network,
    Uniform,
    parse_latency,
)
from .scenario import Fault, FaultKind, Scenario
from .store import MemoryStore

__all__ = [
    "OWN_CODECS",
    "STORE_LAYER",
    "Constant",
    "Exponential",
    "Fault",
    "FaultKind",
    "Latency",
    "LinkModel",
    "LogNormal",
    "MemoryStore",
    "MulticastGroup",
    "Network",
    "NodeStatus",
    "RouterTree",
    "Scenario",
    "SimEnv",
    "Simulation",
    "SimulationError",
    "TreeLink",
    "Uniform",
    "parse_latency",
]
