"""The event loop a gossamer command runs its nodes on: asyncio's own or uvloop's.

The network runtime needs only the asyncio interfaces (``AbstractEventLoop``, ``Transport``,
``Protocol``), so it runs on any loop that implements them; an application that embeds a node
keeps whatever loop it runs. The ``gossamer`` commands pick one with ``GOSSAMER_LOOP``:

* ``auto`` (the default): uvloop when it is installed (a dependency of gossamer everywhere but
  on Windows, where uvloop does not run), else asyncio's;
* ``uvloop``: uvloop, and an error naming the missing package when it is not installed;
* ``asyncio``: asyncio's own loop.

uvloop's loop does the same work in less CPU (libuv's reads, writes and timers in C): the
figures, each service side by side on both loops, are in ``BENCHMARKS.md`` (*Event loops*).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from ...core.errors import ConfigError

__all__ = ["CHOICES", "ENV", "loop_factory", "loop_name", "run"]

ENV = "GOSSAMER_LOOP"
CHOICES = ("auto", "uvloop", "asyncio")

T = TypeVar("T")


def loop_name(environ: dict[str, str] | None = None) -> str:
    """The loop ``GOSSAMER_LOOP`` asks for, resolved: ``"uvloop"`` or ``"asyncio"``; a
    ConfigError for a value not in ``CHOICES`` or for ``uvloop`` when it is not installed."""
    setting = (os.environ if environ is None else environ).get(ENV, "").strip() or "auto"
    if setting not in CHOICES:
        raise ConfigError(f"{ENV} must be one of {', '.join(CHOICES)}, got {setting!r}")
    if setting == "asyncio":
        return "asyncio"
    try:
        import uvloop  # noqa: F401  (only whether it imports)
    except ImportError:
        if setting == "uvloop":
            raise ConfigError(f"{ENV}=uvloop, but uvloop is not installed (pip install "
                              "uvloop; or GOSSAMER_LOOP=asyncio)") from None
        return "asyncio"
    return "uvloop"


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
