"""What a replica client of seed 000 is configured with (``ReplicaConfig``), the state of its
link to the hub, and the callbacks an application gives it (rebase, change, clear/stop)."""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable
from typing import Any

from ...core.errors import ConfigError
from ..ordering.causal import CausalConfig

__all__ = ["ChangeFn", "LinkState", "PeerFn", "RebaseFn", "ReplicaConfig", "reapply"]

RebaseFn = Callable[[str, Any, Any], Any]
"""``rebase(key, intended_content, current_content) -> new content, or None to give up``."""

ChangeFn = Callable[[str, Any, "str | None"], None]
"""``on_change(key, content or None when deleted, revision)``; the revision is None for a write
waiting in the offline queue."""

PeerFn = Callable[[str], None]
"""``on_clear(by)`` / ``on_stop(by)``: client ``by`` pressed Clear / stop-all."""


class LinkState(enum.Enum):
    """The client's connection to the hub, as the runtime reports it."""

    OFFLINE = "offline"  # not connected: writes wait in the offline queue
    SYNCING = "syncing"  # connected, catching up before the offline queue is rebased and sent
    ONLINE = "online"




def reapply(key: str, intended: Any, current: Any) -> Any:
    """The default rebase: the intended content wins over whatever is there now."""
    return intended


@dataclasses.dataclass(frozen=True, slots=True)
class ReplicaConfig:
    causal: CausalConfig = dataclasses.field(default_factory=CausalConfig)
    history_limit: int = 256  # applied writes kept per key (to revert and to find forks)
    resolved_limit: int = 10_000  # own lost writes remembered as resolved
    pending_conflict_limit: int = 1024  # Conflicts waiting for their winner's delivery
    rebase_queue_limit: int = 10_000  # own lost writes waiting to be rebased
    # a lost write is rebased after a random delay in [0, rebase_delay * 2**g], g = how many
    # times this intent already lost (at most rebase_backoff_max): the losers of one winner do
    # not all rebase at once and collide again, and repeated losers back off (0: at once)
    rebase_delay: float = 0.1
    rebase_backoff_max: int = 6
    # a due rebase waits (at most this long) while messages are known to be missing here, so
    # that it is based on the network's state rather than a stale one (the seed's footnote 11)
    catch_up_wait: float = 2.0
    offline_queue_limit: int = 10_000  # writes made while not online; a full queue refuses
    sync_timeout: float = 5.0  # on connect: the longest wait to catch up before sending
    snapshot_keys_limit: int = 100_000  # objects accepted from one (multi-part) snapshot

    def __post_init__(self) -> None:
        if self.sync_timeout <= 0:
            raise ConfigError("sync_timeout must be > 0")
        for name in ("history_limit", "resolved_limit", "pending_conflict_limit",
                     "rebase_queue_limit", "offline_queue_limit", "snapshot_keys_limit"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1")
        if self.rebase_delay < 0 or self.rebase_backoff_max < 0 or self.catch_up_wait < 0:
            raise ConfigError("rebase_delay, rebase_backoff_max, catch_up_wait must be >= 0")
