"""A server's data directory: one live process at a time (a lock beside its store), its store
opened under that lock, and its node started with errors a user can act on.

The activity server and the APSYN server share it (the hub's keeper and the replicated log
lock their own files the same way)."""

from __future__ import annotations

import os
from pathlib import Path

from ...core.conn import ListenerSpec
from ...core.errors import ConfigError, StateError
from ...core.filelock import try_lock
from .node import NetNode
from .store import SqliteStore

__all__ = ["DataDir"]


class DataDir:
    """``data_dir`` (None: the store is in memory, nothing is locked) of a server named
    ``who`` in messages, its store the file ``store_file`` in it."""

    def __init__(self, data_dir: Path | None, store_file: str, *, who: str) -> None:
        self.path = data_dir
        self.store_file = store_file
        self.who = who
        self._lock: int | None = None

    def open_store(self) -> SqliteStore:
        """Lock the directory and open the store: ``StateError`` when another live process
        holds it (two would write one store behind each other's back), ``StoreOpenError``
        when the file cannot be opened; either way the directory is left unlocked."""
        if self.path is None:
            return SqliteStore(":memory:")
        self._lock = try_lock(self.path / f"{self.store_file}.lock")
        if self._lock is None:
            raise StateError(f"{self.path}: another live {self.who} uses this data dir")
        try:
            return SqliteStore(self.path / self.store_file)
        except BaseException:
            self.release()
            raise

    async def start(self, node: NetNode, spec: ListenerSpec) -> None:
        """``node.start()``; on failure the node is closed and the directory unlocked, and an
        address that cannot be bound is ``ConfigError`` naming it."""
        try:
            await node.start()
        except BaseException as exc:
            await node.close()
            self.release()
            if isinstance(exc, OSError):
                raise ConfigError(f"the {self.who} cannot listen on {spec.host}:{spec.port}: "
                                  f"{exc.strerror or exc}") from None
            raise

    def release(self) -> None:
        if self._lock is not None:
            os.close(self._lock)
            self._lock = None
