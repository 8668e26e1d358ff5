"""An exclusive, advisory lock on a file (``flock``), held by a live process: the kernel
releases it when the process dies, so a kill -9 never leaves a stale lock behind."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

__all__ = ["try_lock"]


def try_lock(path: Path) -> int | None:
    """An open descriptor of ``path`` (created if missing) holding its exclusive ``flock``, or
    None when another live process holds it. Closing the descriptor releases the lock."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd
