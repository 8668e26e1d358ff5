"""The atomic multicast service (seed 004): every member of the sender's snapshot delivers a
message, or none does."""

from .api import AtomicGroup, Delivered, Sent
from .check import AtomicVerdict, judge_atomicity
from .experiment import AtomicRunOptions, AtomicRunResult, run_atomic_experiment, run_atomic_sim

__all__ = ["AtomicGroup", "AtomicRunOptions", "AtomicRunResult", "AtomicVerdict", "Delivered",
           "Sent", "judge_atomicity", "run_atomic_experiment", "run_atomic_sim"]
