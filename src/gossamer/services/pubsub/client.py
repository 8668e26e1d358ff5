"""``gossamer pubsub client HOST:PORT``: the seed's client in a process of its own, talking to
a running node's command port (``--command-port``, see ``commands.py``).

It reads the seed's commands from stdin, one a line, sends each to the node and prints what
comes back: answers (``ok publish news 127.0.0.1:4000:7``, ``error: ...``) and the deliveries
of the node's subscribed topics (``deliver news hello``), or JSON objects with ``--json``. It ends
at ``exit``, at the end of its input (after the answers to what it sent), or when the node
closes the connection (exit code 1 if it never connected or the node went away).

Back-pressure: at most ``window`` commands are unanswered at a time (a publish is answered once
its topic's root accepted it, or refused); while the window is full the client stops reading
its input, so a producer piping into it waits instead of anything being dropped.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import orjson

from ...core.conn import Conn, Framing
from ...core.env import Env
from ...runtimes.net import NetNode
from .net import READ_AHEAD, TOO_LONG, Output, _read_lines
from .shell import MAX_LINE

__all__ = ["WINDOW", "CommandClient", "run_client"]

WINDOW = 1000  # commands sent and not yet answered, at most


class CommandClient:
    """A process that holds one connection to a node's command port."""

    def __init__(self, env: Env, address: str, on_event: Callable[[dict[str, Any]], None],
                 on_closed: Callable[[str], None], *, window: int = WINDOW) -> None:
        if window < 1:
            raise ValueError("window must be >= 1")
        self.env = env
        self.window = window
        self.room = asyncio.Event()  # fewer than ``window`` commands are unanswered
        self.room.set()
        self.address = address
        self.on_event = on_event
        self.on_closed = on_closed
        self.conn: Conn | None = None
        self.open = asyncio.Event()
        self.sent = 0
        self.answered = 0
        self.caught_up = asyncio.Event()  # every command sent has its answer
        self.caught_up.set()

    def start(self) -> None:
        self.conn = self.env.connect(self.address, framing=Framing.LINES,
                                     max_frame=8 * MAX_LINE)

    def stop(self) -> None:
        if self.conn is not None:
            self.env.close(self.conn)

    def opened(self, conn: Conn, peer_address: str) -> None:
        self.open.set()

    def received(self, conn: Conn, frame: bytes) -> None:
        event = orjson.loads(frame)
        if isinstance(event, dict):
            if event.get("event") not in ("ready", "deliver"):
                self.answered += 1
                if self.answered >= self.sent:
                    self.caught_up.set()
                if self.sent - self.answered < self.window:
                    self.room.set()
            self.on_event(event)

    def closed(self, conn: Conn, reason: str) -> None:
        self.conn = None
        self.on_closed(reason)

    def send(self, line: str) -> None:
        if self.conn is not None:
            self.sent += 1
            self.caught_up.clear()
            if self.sent - self.answered >= self.window:
                self.room.clear()
            self.env.write(self.conn, line.encode())


def _show(out: Output, event: dict[str, Any]) -> None:
    kind = str(event.get("event"))
    fields = {k: v for k, v in event.items() if k != "event"}
    if kind == "deliver":
        out.deliver(str(event.get("topic")), event.get("message"))
    elif kind == "error":
        out.error(str(event.get("error")))
    elif kind in ("subscribe", "unsubscribe", "publish"):
        out.ok(kind, str(event.get("topic")), event.get("msg"))
    elif kind == "ready":
        out.info("connected", f"connected to {event.get('node')} mode={event.get('mode')}",
                 **fields)
    else:
        out.info(kind, f"{kind} " + orjson.dumps(fields).decode(), **fields)


async def run_client(host: str, port: int, out: Output, *, fd: int,
                     timeout: float = 10.0, window: int = WINDOW) -> int:
    """Connect, pass commands from ``fd`` on, print what comes back; the exit code."""
    try:
        return await _run_client(host, port, out, fd=fd, timeout=timeout, window=window)
    finally:
        out.flush()  # what the last loop turn printed


async def _run_client(host: str, port: int, out: Output, *, fd: int, timeout: float,
                      window: int) -> int:
    ended: asyncio.Future[str] = asyncio.get_running_loop().create_future()

    def closed(reason: str) -> None:
        if not ended.done():
            ended.set_result(reason)

    net = NetNode(node_id="client", listen=None, factory=lambda env: CommandClient(
        env, f"{host}:{port}", lambda event: _show(out, event), closed, window=window))
    await net.start()
    client = net.process
    assert isinstance(client, CommandClient)
    try:
        try:
            async with asyncio.timeout(timeout):
                opened = asyncio.ensure_future(client.open.wait())
                await asyncio.wait(_either(opened, ended),
                                   return_when=asyncio.FIRST_COMPLETED)
                opened.cancel()
        except TimeoutError:
            out.error(f"no answer from {host}:{port} within {timeout:g} s")
            return 1
        if not client.open.is_set():
            out.error(f"cannot reach the node at {host}:{port} ({ended.result()}): is it "
                      f"running with --command-port {port}?")
            return 1
        return await _pump(client, net, out, fd, ended)
    finally:
        await net.close()


def _either(*futures: asyncio.Future[Any]) -> list[asyncio.Future[Any]]:
    return list(futures)


def _send(net: NetNode, client: CommandClient, line: str) -> None:
    net.call(lambda _process: client.send(line))


async def _pump(client: CommandClient, net: NetNode, out: Output, fd: int,
                ended: asyncio.Future[str]) -> int:
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[str | None] = asyncio.Queue()
    credits = threading.Semaphore(READ_AHEAD)
    threading.Thread(target=_read_lines, args=(loop, queue, fd, credits), daemon=True,
                     name="gossamer-client-stdin").start()
    while True:
        if not queue.empty():  # lines already read: no task and wait for each
            line = queue.get_nowait()
            if ended.done():
                out.error(f"the node closed the connection ({ended.result()})")
                return 1
        else:
            line_task = asyncio.ensure_future(queue.get())
            done, _ = await asyncio.wait(_either(line_task, ended),
                                         return_when=asyncio.FIRST_COMPLETED)
            if ended in done:
                line_task.cancel()
                out.error(f"the node closed the connection ({ended.result()})")
                return 1
            line = line_task.result()
        if line is not None:
            credits.release()
        if line is None:  # end of input: wait for the answers to what was sent, then go
            caught_up = asyncio.ensure_future(client.caught_up.wait())
            await asyncio.wait(_either(caught_up, ended), timeout=10.0,
                               return_when=asyncio.FIRST_COMPLETED)
            caught_up.cancel()
            return 0
        if line == TOO_LONG:
            out.error(f"line longer than {MAX_LINE} characters, ignored")
            continue
        if line.strip().lower() == "exit":
            return 0
        if line.strip():
            if not client.room.is_set():  # the window is full: wait for answers
                room = asyncio.ensure_future(client.room.wait())
                await asyncio.wait(_either(room, ended), return_when=asyncio.FIRST_COMPLETED)
                room.cancel()
                if ended.done():
                    out.error(f"the node closed the connection ({ended.result()})")
                    return 1
            _send(net, client, line)
