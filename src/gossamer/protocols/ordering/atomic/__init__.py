"""Atomic multicast (seed 004): two-phase commit over SRM, all of a snapshot or none."""

from .commit import LAYER, AtomicConfig, AtomicMember
from .node import CODEC, AtomicProcess, AtomicProcessConfig
from .records import Data, Outcome, OutcomeAnswer, OutcomeQuery, Vote

__all__ = ["CODEC", "LAYER", "AtomicConfig", "AtomicMember", "AtomicProcess",
           "AtomicProcessConfig", "Data", "Outcome", "OutcomeAnswer", "OutcomeQuery", "Vote"]
