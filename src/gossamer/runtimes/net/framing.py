"""Framings on a byte stream: JSON lines and length prefixes in, whole frames out; and the
bytes of one frame on the wire for each framing (a WebSocket server's text frame included).

Nothing here knows connections, services or limits beyond the frame size.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

from ...core.conn import Framing
from ...core.errors import ConfigError, FrameTooLarge

__all__ = ["StreamDecoder", "encoder_for", "frames_without", "length_frame", "line_frame",
           "text_frame"]

_TEXT = 0x81  # FIN + opcode 1 (text): the first byte of every frame a WebSocket server sends
_LEN16 = struct.Struct("!BBH").pack
_LEN64 = struct.Struct("!BBQ").pack
_LENGTH = struct.Struct("!I")


def text_frame(payload: bytes) -> bytes:
    """A final, unmasked text frame carrying ``payload`` (RFC 6455 5.2: a server's frame)."""
    length = len(payload)
    if length < 126:
        return bytes((_TEXT, length)) + payload
    if length < 1 << 16:
        return _LEN16(_TEXT, 126, length) + payload
    return _LEN64(_TEXT, 127, length) + payload


def line_frame(payload: bytes) -> bytes:
    if b"\n" in payload:
        raise ConfigError("a frame on a JSON-lines connection must not contain a newline")
    return payload + b"\n"


def length_frame(payload: bytes) -> bytes:
    return _LENGTH.pack(len(payload)) + payload


def frames_without(frames: bytes, offsets: list[int], positions: list[int]) -> bytes:
    """``frames`` (joined; frame i spans ``offsets[i]:offsets[i + 1]``) without the frames at
    ``positions`` (ascending): what a writer that excluded itself gets of a batch."""
    view = memoryview(frames)
    parts: list[memoryview] = []
    start = 0
    for position in positions:
        if offsets[position] > start:
            parts.append(view[start:offsets[position]])
        start = offsets[position + 1]
    if start < len(frames):
        parts.append(view[start:])
    return b"".join(parts)


def encoder_for(framing: Framing) -> Callable[[bytes], bytes]:
    """The wire bytes of one frame sent by this side (a WebSocket *server* for ``WS``)."""
    if framing is Framing.LINES:
        return line_frame
    if framing is Framing.LENGTH:
        return length_frame
    return text_frame


class StreamDecoder:
    """Cuts frames out of a TCP byte stream (``LINES`` or ``LENGTH``), at most ``max_frame``
    bytes each; ``FrameTooLarge`` once a frame is known to be over (nothing more is read)."""

    __slots__ = ("_buffer", "_framing", "_need", "max_frame")

    def __init__(self, framing: Framing, max_frame: int) -> None:
        if framing is Framing.WS:
            raise ConfigError("a WebSocket is framed by its library, not by StreamDecoder")
        self._framing = framing
        self.max_frame = max_frame
        self._buffer = bytearray()
        self._need = -1  # LENGTH: the body length of the frame being read (-1: reading header)

    def feed(self, data: bytes) -> list[bytes]:
        """The frames completed by ``data`` (a line's ``\\r\\n`` counts as its end too)."""
        if self._framing is Framing.LINES:
            return self._lines(data)
        return self._lengths(data)

    def _lines(self, data: bytes) -> list[bytes]:
        buffer = self._buffer
        if not buffer and data.endswith(b"\n") and data.count(b"\n") == 1:
            frame = data[:-1]  # the usual case: one whole line per read
            if frame.endswith(b"\r"):
                frame = frame[:-1]
            if len(frame) > self.max_frame:
                raise FrameTooLarge(f"line of {len(frame)} bytes over max_frame="
                                    f"{self.max_frame}")
            return [frame]
        buffer += data
        frames: list[bytes] = []
        start = 0
        while True:
            end = buffer.find(b"\n", start)
            if end < 0:
                break
            frame = bytes(buffer[start:end])
            if frame.endswith(b"\r"):
                frame = frame[:-1]
            if len(frame) > self.max_frame:
                raise FrameTooLarge(f"line of {len(frame)} bytes over max_frame="
                                    f"{self.max_frame}")
            frames.append(frame)
            start = end + 1
        del buffer[:start]
        if len(buffer) > self.max_frame + 1:
            raise FrameTooLarge(f"a line of over {self.max_frame} bytes (no newline yet)")
        return frames

    def _lengths(self, data: bytes) -> list[bytes]:
        buffer = self._buffer
        buffer += data
        frames: list[bytes] = []
        position = 0
        while True:
            if self._need < 0:
                if len(buffer) - position < _LENGTH.size:
                    break
                (self._need,) = _LENGTH.unpack_from(buffer, position)
                position += _LENGTH.size
                if self._need > self.max_frame:
                    raise FrameTooLarge(f"frame of {self._need} bytes over max_frame="
                                        f"{self.max_frame}")
            if len(buffer) - position < self._need:
                break
            frames.append(bytes(buffer[position:position + self._need]))
            position += self._need
            self._need = -1
        del buffer[:position]
        return frames
