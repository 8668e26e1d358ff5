"""ordering: delivery-order layers (FIFO, causal, per-object order).

``fifo`` is reliable FIFO broadcast per origin; ``causal`` is seed 000's causal delivery with
vector clocks, on that seed's wire format (``gossamer.protocols.replica.wire``).
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
]
