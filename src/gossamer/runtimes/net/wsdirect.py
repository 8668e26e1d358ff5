"""A served WebSocket whose text messages go to the runtime as aiohttp's parser finds them.

aiohttp hands every message of a ``WebSocketResponse`` to ``receive()`` through a queue: the
parser puts it there and wakes the task that awaits it (a future, a loop step, a coroutine
resumed). The runtime's handlers are synchronous, so that hop buys nothing: on a server with
many connections each sending a small frame per round (APSYN's requests, the hub's writes) it
was a tenth of the server's CPU. ``DirectWebSocketResponse`` gives its parser a queue that
calls the connection's handler with each text message instead (``deliver_to``); everything
else (binary frames, close, ping and pong, errors and the end of the stream) still travels
through the queue to ``receive()``, so aiohttp's close handshake, heartbeat and limits work
as before.

The queue and parser are aiohttp internals (its ``_websocket.reader`` module and the
response's ``_post_start``): ``pyproject.toml`` pins the aiohttp minor version they were
read from, and a response on an aiohttp whose internals differ keeps the queue (slower, not
wrong; logged once; ``tests/test_wsdirect.py`` fails, so it is seen).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import aiohttp
from aiohttp import WSMsgType, web
from aiohttp._websocket.reader import WebSocketDataQueue, WebSocketReader
from aiohttp.helpers import DEFAULT_CHUNK_SIZE

__all__ = ["DirectWebSocketResponse"]

log = logging.getLogger(__name__)

_TEXT = WSMsgType.TEXT
EARLY_LIMIT = 64  # text messages kept before the handler is set; then reading pauses
_warned: list[bool] = []


class _DirectQueue(WebSocketDataQueue):
    """Text messages to ``handler`` (kept in order in ``early`` until there is one);
    everything else to the queue, for ``receive()``."""

    def __init__(self, protocol: Any, limit: int, *, loop: Any) -> None:
        super().__init__(protocol, limit, loop=loop)
        self.handler: Callable[[bytes], None] | None = None
        self.early: list[bytes] = []

    def feed_data(self, data: Any, size: int) -> None:
        if data[0] is _TEXT:  # (type, payload, extra): bytes, as decode_text=False
            handler = self.handler
            if handler is None:
                self.early.append(data[1])
                if len(self.early) == EARLY_LIMIT:
                    self._protocol.pause_reading()
            else:
                handler(data[1])
            return
        super().feed_data(data, size)


class DirectWebSocketResponse(web.WebSocketResponse):
    """A ``WebSocketResponse`` (``decode_text=False``) whose text messages are handed to
    ``deliver_to``'s handler, in order, as they are parsed; ``receive()`` sees the rest."""

    _direct: _DirectQueue | None = None  # set: text messages go to its handler

    @property
    def direct(self) -> bool:
        return self._direct is not None

    def _post_start(self, request: Any, protocol: Any, writer: Any) -> None:
        super()._post_start(request, protocol, writer)
        if self._decode_text or self._compress:
            return
        try:
            # before the first frame: a client sends none until it has the 101 (RFC 6455
            # 4.1), so the parser aiohttp set up has nothing yet and is replaced whole
            queue = _DirectQueue(request.protocol, DEFAULT_CHUNK_SIZE, loop=self._loop)
            parser = WebSocketReader(queue, self._max_msg_size, compress=False,
                                     decode_text=False)
            if self._reader is not None:  # what a too eager client sent already
                for item in list(self._reader._buffer):
                    queue.feed_data(*item)
            request.protocol._payload_parser = parser
            self._reader, self._parser = queue, parser
            self._direct = queue
        except (AttributeError, TypeError) as exc:  # another aiohttp
            if not _warned:
                _warned.append(True)
                log.warning("aiohttp %s: served WebSocket messages go through its queue "
                            "(%r)", aiohttp.__version__, exc)

    def deliver_to(self, handler: Callable[[bytes], None]) -> None:
        """From now on each text message is ``handler(payload)``; those that came before
        are handed over first, in order."""
        queue = self._direct
        if queue is None:
            raise RuntimeError("this response's messages come from receive()")
        early, queue.early = queue.early, []
        queue.handler = handler
        for payload in early:
            handler(payload)
        if len(early) >= EARLY_LIMIT:
            queue._protocol.resume_reading()
