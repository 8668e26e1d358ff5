"""ordering: delivery-order layers (FIFO per origin; causal, per-object and total order later)."""

from .fifo import FifoBroadcast, FifoConfig, FifoData, FifoGone, FifoNack, FifoStatus, FifoSync

__all__ = ["FifoBroadcast", "FifoConfig", "FifoData", "FifoGone", "FifoNack", "FifoStatus",
           "FifoSync"]
