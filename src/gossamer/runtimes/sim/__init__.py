"""sim: the deterministic simulator (virtual time, seeded network faults, crash-aware storage).

One seed fixes every random choice, so a failing run replays exactly.
"""

from .kernel import OWN_CODECS, STORE_LAYER, NodeStatus, SimEnv, Simulation, SimulationError
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
    "Network",
    "NodeStatus",
    "Scenario",
    "SimEnv",
    "Simulation",
    "SimulationError",
    "Uniform",
    "parse_latency",
]
