"""Command lines from stdin for the interactive CLIs, on the event loop (no reader thread, so
the loop's timers never wait on it), each line bounded: one over the limit is dropped whole
and reported once, never read as a command."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator

__all__ = ["command_lines", "stdin_reader"]


async def stdin_reader(limit: int) -> asyncio.StreamReader:
    """stdin as an asyncio stream (no reader thread: the loop's timers never wait on it)."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=limit)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    return reader


async def command_lines(reader: asyncio.StreamReader, limit: int) -> AsyncIterator[bytes | None]:
    """The lines of ``reader`` without their newline; None, once, for a line over ``limit``
    bytes, whose every byte up to its newline is dropped (never read as a command); a last
    line without a newline counts."""
    pending = bytearray()
    too_long = False
    while chunk := await reader.read(65_536):
        start = 0
        while (end := chunk.find(b"\n", start)) >= 0:
            if too_long:
                too_long = False  # the end of the long line, dropped with it
            elif len(pending) + end - start > limit:
                yield None
            else:
                yield bytes(pending) + chunk[start:end]
            pending.clear()
            start = end + 1
        if not too_long:
            pending += chunk[start:]
            if len(pending) > limit:
                pending.clear()
                too_long = True
                yield None
    if pending and not too_long:
        yield bytes(pending)
