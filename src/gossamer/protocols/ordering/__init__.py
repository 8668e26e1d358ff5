"""ordering: delivery-order layers (FIFO per origin; causal, per-object and total order later)."""

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

__all__ = [
    "FifoAck",
    "FifoBroadcast",
    "FifoConfig",
    "FifoData",
    "FifoGone",
    "FifoNack",
    "FifoStatus",
    "FifoSync",
]
