"""pubsub (seed 001): topic publish/subscribe over gossip (HyParView) or Scribe trees (Chord)."""

from .node import LAYER, MessageFn, PubSubNode

__all__ = ["LAYER", "MessageFn", "PubSubNode"]
