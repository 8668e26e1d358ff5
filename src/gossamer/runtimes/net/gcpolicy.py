"""The network runtime's policy for Python's cyclic garbage collector in a server process.

With the interpreter's thresholds (700, 10, 10) a server that allocates fast collects its young
generation every few milliseconds, so objects that live for a round or a group commit (tens of
milliseconds) are promoted to the old generation, and every time a quarter of that generation
is such newcomers the collector walks all of it: pauses of 50-165 ms every 2-3 s in the hub and
the APSYN server under benchmark load (gc callbacks; BENCHMARKS.md), which are their p99. With a
young threshold of 50,000 allocations most of those objects are freed by reference counting
before a collection sees them: under the same load no full collection ran, the hub's p99 at
half load fell from 140 to 27-30 ms and the APSYN server's at 500 clients from 159-160 to
126-128 ms (its CPU the same within the runs' spread).

``GOSSAMER_GC=default`` leaves the collector as the interpreter set it; ``GOSSAMER_GC=N`` (an
integer >= 700) sets the young threshold to N. Applied once per process, when the first node
starts; cyclic garbage then waits at most N allocations longer to be freed.
"""

from __future__ import annotations

import gc
import logging
import os

from ...core.errors import ConfigError

__all__ = ["ENV", "YOUNG", "once_setting", "tune_gc"]

log = logging.getLogger("gossamer.net")

ENV = "GOSSAMER_GC"
YOUNG = 50_000  # allocations between two collections of the young generation
OLDER = (20, 100)  # the middle and old generations' thresholds, in collections of the one below

_applied: set[str] = set()  # the process policies applied in this process, by variable


def once_setting(env: str) -> str | None:
    """What the variable ``env`` asks of a policy applied once per process: None when it was
    applied already or the variable says ``default``; else its value ("" when unset)."""
    if env in _applied:
        return None
    _applied.add(env)
    setting = os.environ.get(env, "").strip()
    return None if setting == "default" else setting


def tune_gc() -> tuple[int, int, int] | None:
    """Set the server thresholds once per process (see the module); the thresholds set, or None
    when ``GOSSAMER_GC=default`` or an earlier call set them already."""
    setting = once_setting(ENV)
    if setting is None:
        return None
    young = YOUNG
    if setting:
        try:
            young = int(setting)
        except ValueError:
            young = 0
        if young < 700:
            raise ConfigError(f"{ENV} must be 'default' or an integer >= 700, got {setting!r}")
    thresholds = (young, *OLDER)
    gc.set_threshold(*thresholds)
    log.debug("garbage collector thresholds %s (%s)", thresholds, ENV)
    return thresholds
