"""The event loop a gossamer command runs its nodes on: asyncio's own or uvloop's.

The network runtime needs only the asyncio interfaces (``AbstractEventLoop``, ``Transport``,
``Protocol``), so it runs on any loop that implements them; an application that embeds a node
keeps whatever loop it runs. The ``gossamer`` commands pick one with ``GOSSAMER_LOOP``:

* ``asyncio`` (the default): asyncio's own loop;
* ``uvloop``: uvloop's (``pip install uvloop``, or the ``uvloop`` extra; not on Windows), and an
  error naming the missing package when it is not installed.

Either way ``run`` leaves SIGINT and SIGTERM as it found them: asyncio's loop takes the
handlers a service added off when it closes, uvloop's leaves them on the closed loop, where a
signal after the loop ended (while a command writes its trace out) would be ignored.

Measured side by side (``BENCHMARKS.md``, *Event loops*), uvloop's loop made no service
clearly faster on this workload's machine (the hub 1.01-1.07x, the APSYN server and Scribe
within the spread, gossip on a tree about 0.9x the CPU per delivery), so it is a choice, not
the default. The tests run the runtime on both: the conformance suites (FIFO over TCP peer
links, the seed-000 hub over WebSocket, the seed-003 servers over JSON lines, pub/sub over
gossip) and APSYN's server with its clients.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar, cast

from ...core.errors import ConfigError

__all__ = ["CHOICES", "ENV", "loop_factory", "loop_name", "run"]

ENV = "GOSSAMER_LOOP"
CHOICES = ("asyncio", "uvloop")

T = TypeVar("T")
_SIGNALS = (signal.SIGINT, signal.SIGTERM)  # what the services' commands handle on the loop


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
                              "uvloop)") from None
    return setting


def loop_factory(environ: dict[str, str] | None = None
                 ) -> Callable[[], asyncio.AbstractEventLoop]:
    """What makes the chosen loop: asyncio's own even where another event loop policy is
    installed (an application's uvloop policy), or uvloop's."""
    if loop_name(environ) == "asyncio":
        return asyncio.DefaultEventLoopPolicy().new_event_loop
    import uvloop

    return cast(Callable[[], asyncio.AbstractEventLoop], uvloop.new_event_loop)


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)`` on the loop ``GOSSAMER_LOOP`` chooses."""
    try:
        factory = loop_factory()
    except ConfigError:
        main.close()  # never awaited: no "coroutine was never awaited" warning
        raise
    # signal handlers belong to the main thread; elsewhere (a Spark task's thread) the loop
    # installs none
    kept = ({sig: signal.getsignal(sig) for sig in _SIGNALS}
            if threading.current_thread() is threading.main_thread() else {})
    try:
        with asyncio.Runner(loop_factory=factory) as runner:
            return runner.run(main)
    finally:
        for sig, handler in kept.items():
            if handler is not None and signal.getsignal(sig) is not handler:
                signal.signal(sig, handler)
