"""activity (seed 003): the activity stream network's servers and clients over TCP JSON lines,
plus ``MemNet``, a deterministic in-memory network of the same server core for tests."""

from .memnet import MemClient, MemNet

__all__ = ["MemClient", "MemNet"]
