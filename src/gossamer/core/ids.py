"""Node ids: plain strings that sort the way people expect.

``node_id(7, width=5)`` gives ``"n00007"`` so that string order equals numeric order, which the
seeds rely on ("the lowest id wins").
"""

from __future__ import annotations

import re

from .errors import ConfigError

__all__ = ["NodeId", "check_node_id", "node_id", "node_ids"]

NodeId = str

_VALID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:\-]{0,127}")
_SEEN_LIMIT = 100_000
_seen: set[str] = set()  # ids already checked: every message checks its vector's keys


def check_node_id(value: object) -> NodeId:
    """Return ``value`` if it is a valid node id, else raise ``ConfigError``."""
    if value.__class__ is str and value in _seen:
        return value  # checked before (a str subclass never gets here)
    if not isinstance(value, str) or not _VALID.fullmatch(value):
        raise ConfigError(
            f"invalid node id {value!r}: 1-128 chars of letters, digits, '_', '.', ':', '-'"
        )
    if value.__class__ is str and len(_seen) < _SEEN_LIMIT:
        _seen.add(value)
    return value


def node_id(index: int, *, width: int = 5, prefix: str = "n") -> NodeId:
    """The id of node number ``index``, zero-padded so ids sort numerically."""
    if index < 0:
        raise ConfigError(f"node index must be >= 0, got {index}")
    if index >= 10**width:
        raise ConfigError(f"node index {index} does not fit in width {width}")
    return check_node_id(f"{prefix}{index:0{width}d}")


def node_ids(count: int, *, prefix: str = "n") -> list[NodeId]:
    """``count`` sortable ids, wide enough for ``count``."""
    if count < 0:
        raise ConfigError(f"count must be >= 0, got {count}")
    width = max(3, len(str(max(count - 1, 0))))
    return [node_id(i, width=width, prefix=prefix) for i in range(count)]
