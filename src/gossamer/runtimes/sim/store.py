"""The simulator's durable store: in memory, and crash-aware.

Committed writes survive a simulated crash; uncommitted ones are lost, as on a real disk, and so
is a group commit that was still on its way to disk. ``items`` and ``size`` measure what it
holds (what a read sees), for the trace's ``stored`` rows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from ...core.env import Store, scan_with_pending

__all__ = ["DeferFn", "MemoryStore"]

_DELETED = None

DeferFn = Callable[[Callable[[], None]], None]
"""How a runtime runs a function as a later event of the node that owns the store."""


class MemoryStore(Store):
    """``Store`` in memory; ``crash()`` loses what a power loss would.

    ``commit()`` is durable at once. ``commit_then(fn)`` without a runtime attached commits at
    once and calls ``fn``; with one (``attach``: the simulator, ``FakeEnv``) the writes so far
    form a group that reaches "disk" as a later event of the node (the simulator: the next
    event, at the same virtual time; ``FakeEnv``: its next ``run_due``/``advance``), and every
    ``commit_then`` until then joins that group; then its callbacks run, in order. A crash
    before that loses the group's writes and its callbacks, as a power loss during the fsync
    would. Both runtimes order events by a sequence, so the same seed still gives the same trace.
    """

    __slots__ = ("_callbacks", "_committed", "_defer", "_generation", "_group", "_pending")

    def __init__(self) -> None:
        self._committed: dict[str, dict[str, bytes]] = {}
        self._pending: dict[tuple[str, str], bytes | None] = {}
        self._group: dict[tuple[str, str], bytes | None] = {}  # on its way to disk
        self._callbacks: list[Callable[[], None]] = []  # of the group, run once it is written
        self._defer: DeferFn | None = None
        self._generation = 0  # a group's landing from before a crash or a new owner is void

    def attach(self, defer: DeferFn | None) -> None:
        """A runtime takes the store for a new incarnation of its node: ``defer(fn)`` runs
        ``fn`` as a later event of that node (None: a group commits at once). A group the
        previous incarnation left on its way (a graceful stop) is written now; its callbacks
        belong to a process that is gone and never run."""
        self._apply(self._group)
        self._group = {}
        self._callbacks = []
        self._generation += 1
        self._defer = defer

    def get(self, table: str, key: str) -> bytes | None:
        pending = self._pending
        if pending and (table, key) in pending:
            return pending[(table, key)]
        group = self._group
        if group and (table, key) in group:
            return group[(table, key)]
        rows = self._committed.get(table)
        return None if rows is None else rows.get(key)

    def put(self, table: str, key: str, value: bytes) -> None:
        if not isinstance(value, bytes):
            raise TypeError(f"store values are bytes, got {type(value).__name__}")
        self._pending[(table, key)] = value

    def delete(self, table: str, key: str) -> None:
        self._pending[(table, key)] = _DELETED

    def scan(self, table: str) -> Iterator[tuple[str, bytes]]:
        return scan_with_pending(self._committed.get(table, {}).items(), table, self._group,
                                 self._pending)

    def _apply(self, changes: Mapping[tuple[str, str], bytes | None]) -> None:
        committed = self._committed
        for (table, key), value in changes.items():
            rows = committed.setdefault(table, {})
            if value is None:
                rows.pop(key, None)
            else:
                rows[key] = value

    def commit(self) -> None:
        """Everything so far is durable now, a group on its way included (its callbacks still
        run at its event)."""
        if self._group:
            self._apply(self._group)
            self._group = {}
        self._apply(self._pending)
        self._pending = {}

    def commit_then(self, fn: Callable[[], None]) -> None:
        defer = self._defer
        if defer is None:
            self.commit()
            fn()
            return
        if self._pending:
            if self._group:
                self._group.update(self._pending)
            else:
                self._group = self._pending
            self._pending = {}
        first = not self._callbacks
        self._callbacks.append(fn)
        if first:
            generation = self._generation
            defer(lambda: self._land(generation))

    def _land(self, generation: int) -> None:
        """The group reaches disk; then its callbacks run, in the order given."""
        if generation != self._generation:
            return  # crashed (or taken by a new incarnation) since: the group is gone
        self._apply(self._group)
        self._group = {}
        callbacks, self._callbacks = self._callbacks, []
        for fn in callbacks:
            fn()

    def crash(self) -> None:
        """Forget every write that was not committed, the group on its way to disk included,
        and never run its callbacks (a power loss)."""
        self._pending = {}
        self._group = {}
        self._callbacks = []
        self._generation += 1

    @property
    def uncommitted(self) -> int:
        """Writes a crash would lose (pending, and those of a group on its way)."""
        return len(self._pending) + len(self._group)

    def _visible(self) -> Iterator[tuple[str, str, bytes]]:
        """Every (table, key, value) a read sees: committed rows with the group's and the
        pending writes over them."""
        over = {**self._group, **self._pending} if self._group else self._pending
        for table, rows in self._committed.items():
            for key, value in rows.items():
                if (table, key) not in over:
                    yield table, key, value
        for (table, key), written in over.items():
            if written is not None:
                yield table, key, written

    @property
    def items(self) -> int:
        """How many (table, key) rows the store holds, uncommitted writes included."""
        return sum(1 for _ in self._visible())

    @property
    def size(self) -> int:
        """Bytes the store holds: table name, key (UTF-8) and value of every row, as ``items``
        counts them (the same measure as ``SqliteStore.size``)."""
        return sum(len(table.encode()) + len(key.encode()) + len(value)
                   for table, key, value in self._visible())
