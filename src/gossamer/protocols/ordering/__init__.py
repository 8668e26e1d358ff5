"""ordering: delivery-order layers (FIFO, causal, per-object order).

``fifo`` is reliable FIFO broadcast per origin. ``causal`` (causal delivery with vector clocks)
and ``per_object`` (which concurrent write to an object wins) are seed 000's, on that seed's wire
format (``gossamer.protocols.replica.wire``).
"""

from .causal import CausalConfig, CausalDelivery
from .fifo import (
    FifoAck,
    FifoBroadcast,
    FifoConfig,
    FifoData,
    FifoGone,
    FifoNack,
    FifoStatus,
    FifoSync,
)
from .per_object import Verdict, WinningPaths, Write, judge

__all__ = [
    "CausalConfig",
    "CausalDelivery",
    "FifoAck",
    "FifoBroadcast",
    "FifoConfig",
    "FifoData",
    "FifoGone",
    "FifoNack",
    "FifoStatus",
    "FifoSync",
    "Verdict",
    "WinningPaths",
    "Write",
    "judge",
]
