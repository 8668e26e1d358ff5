"""ordering: delivery-order layers (FIFO, causal, per-object order) and the ``Orderer`` part.

``fifo`` is reliable FIFO broadcast per origin. ``causal`` (causal delivery with vector clocks)
and ``per_object`` (which concurrent write to an object wins) are seed 000's, on that seed's wire
format (``gossamer.protocols.replica.wire``). ``orderer``: the part a service that orders (Scribe's
topic root, the hub) is given at construction; it accepts (at a position), redirects or refuses,
possibly later; ``ImmediateOrderer`` is the default, ``DeferredOrderer`` the one tests drive.
``paxos`` (a subpackage, imported on its own): the Multi-Paxos replica of seed 001
(``docs/paxos.md``).
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
from .orderer import (
    Accepted,
    Decision,
    DecisionFn,
    DeferredOrderer,
    ImmediateOrderer,
    Orderer,
    Proposal,
    ProposalState,
    Redirected,
    Refused,
)
from .per_object import Verdict, WinningPaths, Write, judge

__all__ = [
    "Accepted",
    "CausalConfig",
    "CausalDelivery",
    "Decision",
    "DecisionFn",
    "DeferredOrderer",
    "FifoAck",
    "FifoBroadcast",
    "FifoConfig",
    "FifoData",
    "FifoGone",
    "FifoNack",
    "FifoStatus",
    "FifoSync",
    "ImmediateOrderer",
    "Orderer",
    "Proposal",
    "ProposalState",
    "Redirected",
    "Refused",
    "Verdict",
    "WinningPaths",
    "Write",
    "judge",
]
