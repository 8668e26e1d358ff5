"""paxos: the replicated log on its own (issue 19, point 3): ``ReplicatedLog``, an asyncio API
over one ``PaxosReplica`` on a network node, and ``gossamer paxos node`` (a replicated key/value
demo). The consensus itself is ``gossamer.protocols.ordering.paxos``."""

from .api import KeyValue, ReplicatedLog

__all__ = ["KeyValue", "ReplicatedLog"]
