"""Several Multi-Paxos groups on one node, so a node can be a replica of its ring neighbours'
groups as well as its own (Scribe's replicated topic owners, ``scribe.owners``).

Each replica sees the node through a ``GroupView``: what it sends travels in a ``GroupMessage``
envelope naming its group, and its durable tables are the node's, prefixed with the group. The
view is not a runtime: it hands every call to the node's own ``Env`` (same clock, timers, rng,
trace and store; only the message and the table names are wrapped).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import orjson

from ....core.conn import CloseCode, Conn, ConnGroup, Framing
from ....core.env import Env, Store, TimerHandle
from ....core.errors import ConfigError, ProtocolError, StateError
from ....core.ids import NodeId
from ....core.messages import Codec, Message, message
from .messages import CODEC as PAXOS_CODEC
from .replica import PaxosReplica

__all__ = ["GROUP_CODEC", "MAX_GROUP", "GroupMessage", "GroupView", "PaxosGroups",
           "PrefixedStore"]

GROUP_CODEC = Codec()
MAX_GROUP = 200  # characters of a group's name


def check_group(name: object) -> str:
    if not isinstance(name, str) or not 1 <= len(name) <= MAX_GROUP or "/" in name:
        raise ValueError(f"a group name has 1-{MAX_GROUP} characters and no '/', got {name!r}")
    return name


@message("paxos.group", codec=GROUP_CODEC)
class GroupMessage(Message):
    """A Paxos message (``body``: its JSON value) for the replica of ``group``."""

    group: str
    body: Any

    def __post_init__(self) -> None:
        check_group(self.group)
        if not isinstance(self.body, dict):
            raise ValueError("a group message's body is a Paxos message (a JSON object)")


class PrefixedStore(Store):
    """The node's store with every table name prefixed by ``prefix/``: commits are the node's."""

    def __init__(self, store: Store, prefix: str) -> None:
        self._store = store
        self._prefix = check_group(prefix) + "/"

    def get(self, table: str, key: str) -> bytes | None:
        return self._store.get(self._prefix + table, key)

    def put(self, table: str, key: str, value: bytes) -> None:
        self._store.put(self._prefix + table, key, value)

    def delete(self, table: str, key: str) -> None:
        self._store.delete(self._prefix + table, key)

    def scan(self, table: str) -> Iterator[tuple[str, bytes]]:
        return self._store.scan(self._prefix + table)

    def commit(self) -> None:
        self._store.commit()

    def commit_then(self, fn: Callable[[], None]) -> None:
        self._store.commit_then(fn)

    def apply(self, changes: Mapping[tuple[str, str], bytes | None]) -> None:
        self._store.apply({(self._prefix + table, key): value
                           for (table, key), value in changes.items()})


class GroupView:
    """What one group's replica sees of the node's ``env`` (see the module docstring)."""

    def __init__(self, env: Env, group: str) -> None:
        self._env = env
        self.group_name = check_group(group)
        self._store = PrefixedStore(env.store, group)

    @property
    def node(self) -> NodeId:
        return self._env.node

    def now(self) -> float:
        return self._env.now()

    def send(self, dst: NodeId, msg: Message) -> None:
        body = orjson.loads(PAXOS_CODEC.encode(msg))
        self._env.send(dst, GroupMessage(group=self.group_name, body=body))

    def backlog(self, dst: NodeId) -> int:
        return self._env.backlog(dst)

    def multicast(self, group: str, msg: Message) -> None:
        raise StateError(f"group {self.group_name!r}: a Paxos replica sends by send only, "
                         f"never multicast")

    def set_timer(self, delay: float, fn: Callable[[], None]) -> TimerHandle:
        return self._env.set_timer(delay, fn)

    def cancel(self, handle: TimerHandle) -> None:
        self._env.cancel(handle)

    @property
    def rng(self) -> random.Random:
        return self._env.rng

    def trace(self, event: str, *, layer: str, msg: str | None = None,
              origin: str | None = None, peer: str | None = None, key: str | None = None,
              seq: int | None = None, size: int | None = None, **info: Any) -> None:
        self._env.trace(event, layer=layer, msg=msg, origin=origin, peer=peer, key=key,
                        seq=seq, size=size, **info)

    @property
    def store(self) -> Store:
        return self._store

    @property
    def tracing(self) -> bool:
        return self._env.tracing

    @property
    def incarnation(self) -> int:
        return self._env.incarnation

    # a replica talks to its peers by ``send`` only: the connection contract is not part of
    # what a group's view offers
    def connect(self, address: str, *, framing: Framing = Framing.LINES,
                max_frame: int = 64 * 1024) -> Conn:
        raise StateError(f"group {self.group_name!r}: a Paxos replica opens no connections")

    def write(self, conn: Conn, frame: bytes) -> None:
        raise StateError(f"group {self.group_name!r}: a Paxos replica writes to no connection")

    def write_many(self, conns: ConnGroup | Iterable[Conn], frame: bytes, *,
                   exclude: Conn | None = None) -> None:
        raise StateError(f"group {self.group_name!r}: a Paxos replica writes to no connection")

    def write_each(self, frames: Iterable[tuple[Conn, bytes]]) -> None:
        raise StateError(f"group {self.group_name!r}: a Paxos replica writes to no connection")

    def close(self, conn: Conn, code: int = CloseCode.NORMAL, reason: str = "") -> None:
        raise StateError(f"group {self.group_name!r}: a Paxos replica holds no connection")

    def promote(self, conn: Conn) -> None:
        raise StateError(f"group {self.group_name!r}: a Paxos replica holds no connection")

    def group(self) -> ConnGroup:
        raise StateError(f"group {self.group_name!r}: a Paxos replica holds no connection")


class PaxosGroups:
    """The replicas of the groups this node is a member of, by group name; ``on_message``
    hands each ``GroupMessage`` to its group's replica (an unknown group or a body that is no
    Paxos message is dropped with a traced reason)."""

    LAYER = PaxosReplica.LAYER

    def __init__(self, env: Env) -> None:
        self.env = env
        self.replicas: dict[str, PaxosReplica] = {}

    def view(self, group: str) -> GroupView:
        if group in self.replicas:
            raise ConfigError(f"group {group!r} has a replica on this node already")
        return GroupView(self.env, group)

    def add(self, replica: PaxosReplica) -> None:
        if replica.group in self.replicas:
            raise ConfigError(f"group {replica.group!r} has a replica on this node already")
        self.replicas[replica.group] = replica

    def start(self) -> None:
        for replica in self.replicas.values():
            replica.start()

    def stop(self) -> None:
        for replica in self.replicas.values():
            replica.stop()

    def on_message(self, src: NodeId, msg: GroupMessage) -> None:
        replica = self.replicas.get(msg.group)
        if replica is None:
            self.env.trace("drop", layer=self.LAYER, peer=src, key=msg.group,
                           reason="unknown_group")
            return
        try:
            inner = PAXOS_CODEC.decode(orjson.dumps(msg.body))
        except ProtocolError as exc:
            self.env.trace("drop", layer=self.LAYER, peer=src, key=msg.group,
                           reason="bad_group_body", detail=str(exc)[:200])
            return
        replica.on_message(src, inner)
