"""The event loop a gossamer command runs its nodes on: asyncio's own or uvloop's.

The network runtime needs only the asyncio interfaces (``AbstractEventLoop``, ``Transport``,
``Protocol``), so it runs on any loop that implements them; an application that embeds a node
keeps whatever loop it runs. The ``gossamer`` commands pick one with ``GOSSAMER_LOOP``:

* ``asyncio`` (the default): asyncio's own loop;
* ``uvloop``: uvloop's (``pip install 'gossamer[uvloop]'``; not on Windows), and an error
  naming the missing package when it is not installed.

Measured side by side (``BENCHMARKS.md``, *Event loops*), uvloop's loop made no service
clearly faster on this workload's machine (the hub 1.01-1.07x, the APSYN server and Scribe
within the spread, gossip on a tree about 0.9x the CPU per delivery), so it is a choice, not
the default; the conformance suites run every service on both.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from ...core.errors import ConfigError

__all__ = ["CHOICES", "ENV", "loop_factory", "loop_name", "run"]

ENV = "GOSSAMER_LOOP"
CHOICES = ("asyncio", "uvloop")

T = TypeVar("T")


def loop_name(environ: dict[str, str] | None = None) -> str:
    """The loop ``GOSSAMER_LOOP`` asks for: ``"asyncio"`` (also when unset) or ``"uvloop"``; a
    ConfigError for a value not in ``CHOICES`` or for ``uvloop`` when it is not installed."""
    setting = (os.environ if environ is None else environ).get(ENV, "").strip() or "asyncio"
    if setting not in CHOICES:
        raise ConfigError(f"{ENV} must be one of {', '.join(CHOICES)}, got {setting!r}")
    if setting == "uvloop":
        try:
            import uvloop  # noqa: F401  (only whether it imports)
        except ImportError:
            raise ConfigError(f"{ENV}=uvloop, but uvloop is not installed (pip install "
                              "'gossamer[uvloop]')") from None
    return setting


def loop_factory(environ: dict[str, str] | None = None
                 ) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """What makes the chosen loop (None: asyncio's default)."""
    if loop_name(environ) == "asyncio":
        return None
    import uvloop

    return uvloop.new_event_loop


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)`` on the loop ``GOSSAMER_LOOP`` chooses."""
    try:
        factory = loop_factory()
    except ConfigError:
        main.close()  # never awaited: no "coroutine was never awaited" warning
        raise
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main)
