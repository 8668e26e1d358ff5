"""``ReplicatedLog``: one replica of a Multi-Paxos log as an asyncio object over TCP peer links.

``await log.start()`` binds and starts the replica; ``await log.propose(op)`` returns once the
operation is decided (``Committed``); ``log.subscribe(fn)`` hears every decided operation in
log order; ``log.members`` and ``log.leader`` say who is in the group and who leads it. The
replica is named after its address (``host:port``), so the members of a group are addresses.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ...core.env import Env
from ...core.errors import ConfigError, OperationError, StateError
from ...core.ids import NodeId, check_node_id
from ...core.jsonvalue import INT_MAX, INT_MIN, json_copy
from ...core.segments import SegmentSink
from ...core.traceio import trace_path, write_settings
from ...protocols.ordering.paxos import (
    CODEC,
    Committed,
    DecidedOp,
    NotCommitted,
    Outcome,
    PaxosConfig,
    PaxosReplica,
)
from ...runtimes.net import NetNode, SqliteStore, WriteBehindStore, host_port_address

__all__ = ["KeyValue", "ReplicatedLog", "address_of"]

STORE_FILE = "paxos.sqlite"


address_of = host_port_address  # where the replica ``host:port`` listens


# the integers the log's codec carries (core.jsonvalue's INT_MIN, INT_MAX): an ``incr`` whose
# sum would leave them is refused where it is applied, at every replica alike, and changes nothing


class KeyValue:
    """The demo state machine: a replicated dict of ``set`` and ``incr`` operations."""

    def __init__(self) -> None:
        self.data: dict[str, Any] = {}

    @staticmethod
    def check(op: Any) -> None:
        """Refuse an operation this state machine would not apply (``ConfigError``)."""
        if not isinstance(op, dict) or op.get("op") not in ("set", "incr") \
                or not isinstance(op.get("key"), str):
            raise ConfigError(f"not a key/value operation: {op!r}")
        if op["op"] == "incr":
            by = op.get("by")
            if not isinstance(by, int) or isinstance(by, bool):
                raise ConfigError(f"incr needs an int 'by': {op!r}")
            if not INT_MIN <= by <= INT_MAX:
                raise ConfigError(f"incr by {by} is beyond 64 bits")

    def incremented(self, key: str, by: int) -> int:
        """What ``incr key by`` would leave in ``key`` (``ConfigError`` beyond 64 bits)."""
        current = self.data.get(key, 0)
        total = (current if isinstance(current, int) else 0) + by
        if not INT_MIN <= total <= INT_MAX:
            raise ConfigError(f"incr {key} {by} would leave {key} beyond 64 bits")
        return total

    def apply(self, op: Any) -> bool:
        """Apply a decided operation. One this state machine refuses (another replica's code
        may know it; an ``incr`` past 64 bits) changes nothing: False."""
        try:
            self.check(op)
            key = op["key"]
            value = op.get("value") if op["op"] == "set" else self.incremented(key, op["by"])
        except ConfigError:
            return False
        self.data[key] = value
        return True

    def snapshot(self) -> Any:
        return dict(self.data)

    def restore(self, state: Any) -> None:
        self.data = dict(state)


#: what a replicated log's run promises, stored beside its trace for ``gossamer analyze``: the
#: Paxos layer's checks (agreement) apply on their own; nothing is published or delivered
ANALYSIS_SETTINGS: dict[str, Any] = {"services": ["paxos"], "replay": None,
                                     "checks": {"layers": ["paxos"], "fifo_layers": []}}


class ReplicatedLog:
    """One replica of a group on this event loop. ``node_id`` is ``host:port`` (where it
    listens); ``members`` the founding group (``node_id`` among them). ``data_dir`` keeps the
    replica's state in sqlite, committed in groups (one fsync on a writer thread for many
    writes; no reply leaves before its group is on disk), so a restarted replica resumes;
    without it the state lasts as long as the process (``group_commit=False``: one commit per
    write, for comparison). ``snapshot_fn`` / ``restore_fn`` as for ``PaxosReplica``.
    ``trace_dir``: write the trace to ``TRACE_DIR/trace/RUN/`` (segment files while running,
    ``HOST_PORT.parquet`` at stop) with the run's analysis settings, for ``gossamer
    analyze``."""

    def __init__(
        self,
        node_id: NodeId,
        members: Sequence[NodeId],
        *,
        data_dir: Path | None = None,
        config: PaxosConfig | None = None,
        snapshot_fn: Callable[[], Any] | None = None,
        restore_fn: Callable[[Any], None] | None = None,
        cluster_key: str | None = None,
        seed: int = 0,
        group_commit: bool = True,
        trace_dir: Path | None = None,
        run: str = "paxos",
    ) -> None:
        self.node_id = check_node_id(node_id)
        address = address_of(self.node_id)
        if address is None:
            raise ConfigError(f"a replica is named host:port, got {node_id!r}")
        self.members = tuple(check_node_id(m) for m in members)
        for member in self.members:
            if address_of(member) is None:
                raise ConfigError(f"member {member!r} is not host:port")
        if self.node_id not in self.members:
            raise ConfigError(f"{node_id} is not among the members {self.members}")
        self.config = config if config is not None else PaxosConfig()
        self.snapshot_fn = snapshot_fn
        self.restore_fn = restore_fn
        self._subscribers: list[Callable[[DecidedOp], None]] = []
        self._leader_waiters: list[Callable[[NodeId | None], None]] = []
        self.replica: PaxosReplica | None = None
        self.failed = asyncio.Event()
        self._proposals: set[asyncio.Future[Outcome]] = set()  # awaited by ``propose``
        self._stopped = False
        store = None
        if data_dir is not None:
            data_dir.mkdir(parents=True, exist_ok=True)
            path = data_dir / STORE_FILE
            store = WriteBehindStore(path) if group_commit else SqliteStore(path)
        self.trace: SegmentSink | None = None
        sink = None
        if trace_dir is not None:
            sink = self.trace = SegmentSink(trace_path(trace_dir, run, self.node_id))
            write_settings(trace_dir, run, ANALYSIS_SETTINGS)
        self.net = NetNode(node_id=self.node_id, factory=self._build, codec=CODEC,
                           listen=address, store=store, seed=seed, cluster_key=cluster_key,
                           trace=sink, run=run)
        self.net.resolver = address_of
        self.net.on_failure = lambda _node, _exc: self.failed.set()

    def _build(self, env: Env) -> PaxosReplica:
        self.replica = PaxosReplica(
            env, self.members, config=self.config, snapshot_fn=self.snapshot_fn,
            restore_fn=self.restore_fn, on_decided=self._decided,
            on_leader_changed=self._leader_changed)
        return self.replica

    def _decided(self, op: DecidedOp) -> None:
        for fn in list(self._subscribers):
            fn(op)

    def _leader_changed(self, leader: NodeId, _ballot: object) -> None:
        for fn in list(self._leader_waiters):
            fn(leader)

    # -- the API ------------------------------------------------------------------------------

    async def start(self) -> None:
        """Bind the peer listener and start the replica (decided operations of an earlier
        run are handed to the subscribers again, in order: subscribe before). A replica
        starts once: after ``stop()`` build a new one (on the same data dir to resume)."""
        if self._stopped:
            raise StateError(f"replica {self.node_id} was stopped: a ReplicatedLog starts "
                             "once; build a new one (on the same data_dir to resume)")
        try:
            await self.net.start()
        except OSError as exc:
            raise ConfigError(f"cannot listen on {self.node_id}: {exc}") from exc

    async def stop(self) -> None:
        """Stop the replica; a ``propose`` still waiting raises ``OperationError``
        (``definite=False``: it may have been decided)."""
        self._stopped = True
        await self.net.close()
        for waiting in list(self._proposals):
            if not waiting.done():
                waiting.set_result(NotCommitted("the replica stopped before the decision",
                                                definite=False))
        self._proposals.clear()
        if self.trace is not None:
            self.trace.close()  # the segments compacted to HOST_PORT.parquet

    def _running(self) -> PaxosReplica:
        if self.replica is None or not self.replica.running:
            raise StateError(f"replica {self.node_id} is not running")
        return self.replica

    async def propose(self, payload: Any, *, timeout: float | None = None) -> Committed:
        """Propose ``payload`` (any JSON value) and return where it was decided. A timeout
        raises ``OperationError`` with ``definite=False``: the operation may still be decided
        (this replica keeps forwarding it until it is)."""
        replica = self._running()
        payload = json_copy(payload, "a proposal")  # what every replica will apply
        loop = asyncio.get_running_loop()
        done: asyncio.Future[Outcome] = loop.create_future()

        def on_done(outcome: Outcome) -> None:
            if not done.done():
                done.set_result(outcome)

        replica.propose(payload, on_done)
        self._proposals.add(done)
        try:
            outcome = await asyncio.wait_for(asyncio.shield(done), timeout)
        except TimeoutError:
            raise OperationError("not decided in time (it may still be decided)",
                                 definite=False) from None
        finally:
            self._proposals.discard(done)
        if isinstance(outcome, Committed):
            return outcome
        raise OperationError(outcome.reason, definite=outcome.definite)

    def subscribe(self, fn: Callable[[DecidedOp], None]) -> Callable[[], None]:
        """``fn(op)`` for every decided operation, in log order; returns the unsubscriber."""
        self._subscribers.append(fn)
        return lambda: self._subscribers.remove(fn) if fn in self._subscribers else None

    def watch_leader(self, fn: Callable[[NodeId | None], None]) -> Callable[[], None]:
        """``fn(leader)`` whenever this replica hears a new leader; returns the unwatcher."""
        self._leader_waiters.append(fn)
        return lambda: self._leader_waiters.remove(fn) if fn in self._leader_waiters else None

    @property
    def leader(self) -> NodeId | None:
        """The leader this replica knows (None: none yet)."""
        return None if self.replica is None else self.replica.current_leader

    @property
    def group(self) -> frozenset[NodeId]:
        """The replica set of the next undecided slot."""
        return frozenset(self.members) if self.replica is None else self.replica.members

    @property
    def decided_upto(self) -> int:
        return 0 if self.replica is None else self.replica.decided_upto

    async def wait_leader(self, timeout: float) -> NodeId:
        """The leader, once one is known (``TimeoutError`` after ``timeout``)."""
        if self.leader is not None:
            return self.leader
        loop = asyncio.get_running_loop()
        found: asyncio.Future[NodeId] = loop.create_future()

        def heard(leader: NodeId | None) -> None:
            if leader is not None and not found.done():
                found.set_result(leader)

        unwatch = self.watch_leader(heard)
        try:
            return await asyncio.wait_for(found, timeout)
        finally:
            unwatch()
