"""``gossamer atomic node``'s delivery journal: the node's record of what it delivered, one
JSON line per delivery, each written and fsync'd before the delivery is printed or
acknowledged to the atomic layer (see ``cli``), so it holds every delivery exactly once across
kill -9 and restarts on the same data dir."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import orjson

from ...core.errors import ConfigError
from .api import Delivered

__all__ = ["JOURNAL", "Journal", "read_journal"]

JOURNAL = "delivered.jsonl"


class Journal:
    """The node's delivery journal: one JSON line per delivery, appended and fsync'd before
    the delivery is acknowledged to the atomic layer; ``last`` is the highest position in it.
    A torn last line (a kill in the middle of a write) is cut off when it is opened."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.last = 0
        good = 0
        if path.exists():
            data = path.read_bytes()
            for number, line in enumerate(data.splitlines(keepends=True), 1):
                if not line.endswith(b"\n"):
                    break  # torn: its delivery was not acknowledged, it comes again
                try:
                    self.last = max(self.last, int(orjson.loads(line)["position"]))
                except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
                    raise ConfigError(f"{path}: line {number} is not a journal entry; the "
                                      f"journal was changed by hand or its disk failed") \
                        from None
                good += len(line)
            if good < len(data):
                with path.open("r+b") as torn:
                    torn.truncate(good)
        self._file = path.open("ab")

    def append(self, message: Delivered) -> bool:
        """Journal ``message`` durably; False (nothing written) when it is there already."""
        if message.position <= self.last:
            return False
        self._file.write(orjson.dumps({"position": message.position, "mid": message.mid,
                                       "origin": message.origin, "body": message.body})
                         + b"\n")
        self._file.flush()
        os.fsync(self._file.fileno())
        self.last = message.position
        return True

    def close(self) -> None:
        self._file.close()


def read_journal(data_dir: Path) -> list[dict[str, Any]]:
    """The deliveries in a node's journal, oldest first (a torn last line left out)."""
    path = data_dir / JOURNAL
    if not path.exists():
        return []
    return [orjson.loads(line) for line in path.read_bytes().splitlines(keepends=True)
            if line.endswith(b"\n")]
