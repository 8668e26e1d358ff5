"""Helpers shared by the benchmark scripts (and ``scripts/record_activity_interop.py``): a free
loopback port, waiting for a server process to listen, and a percentile.

A script imports it as ``_common`` (its own folder is first on the path when it is run as
``python benchmarks/NAME.py``; the smoke tests put that folder on the path to load a script).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket

__all__ = ["free_port", "percentile", "until_listening"]


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (the OS picks it; a later bind may still race)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def until_listening(port: int, *, timeout: float = 60.0) -> None:
    """Return once something accepts TCP connections on 127.0.0.1:``port`` (a server process
    starting), or raise ``TimeoutError`` after ``timeout`` seconds."""
    async with asyncio.timeout(timeout):
        while True:
            with contextlib.suppress(OSError):
                _, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.close()
                return
            await asyncio.sleep(0.1)  # the process is starting; bounded by the timeout


def percentile(sorted_values: list[float], q: float) -> float:
    """The value at fraction ``q`` of ``sorted_values`` (nearest rank, no interpolation); NaN
    when there are none."""
    if not sorted_values:
        return float("nan")
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]
