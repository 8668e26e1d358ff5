"""Command lines from stdin for the interactive CLIs, on the event loop (no reader thread, so
the loop's timers never wait on it), each line bounded: one over the limit is dropped whole
and reported once, never read as a command."""

from __future__ import annotations

import asyncio
import os
import stat
import sys
from collections.abc import AsyncIterator
from typing import Protocol

__all__ = ["ByteSource", "command_lines", "stdin_reader"]


class ByteSource(Protocol):
    """What ``command_lines`` reads: at most ``n`` bytes at a time, ``b""`` at the end."""

    async def read(self, n: int) -> bytes: ...


class _FileSource:
    """stdin redirected from a file or a device (``< commands.txt``, ``< /dev/null``): a pipe
    transport refuses those (asyncio raises, uvloop aborts the process), and reading them
    never waits for input, so they are read on the loop, a chunk per turn of it."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    async def read(self, n: int) -> bytes:
        await asyncio.sleep(0)  # the loop's other work between two chunks
        return os.read(self.fd, n)


async def stdin_reader(limit: int) -> ByteSource:
    """stdin as an asyncio stream (no reader thread: the loop's timers never wait on it): a
    pipe, socket or terminal through the loop; a file or device read directly."""
    fd = sys.stdin.fileno()
    mode = os.fstat(fd).st_mode
    if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or os.isatty(fd)):
        return _FileSource(fd)
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=limit)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    return reader


async def command_lines(reader: ByteSource, limit: int) -> AsyncIterator[bytes | None]:
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
