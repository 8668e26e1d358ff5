"""pubsub (seed 001): topic publish/subscribe over gossip (HyParView) or Scribe trees (Chord)."""

from .net import AutoOptions, NodeOptions, PubSubNetNode, run_node
from .node import LAYER, MessageFn, PubSubNode

__all__ = ["LAYER", "AutoOptions", "MessageFn", "NodeOptions", "PubSubNetNode", "PubSubNode",
           "run_node"]
