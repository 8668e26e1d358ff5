"""A pub/sub node's command port: the seed's client commands over connections (JSON lines).

Any number of clients connect to the node's ``commands`` listener and send one command a line,
as on the node's stdin (``subscribe T``, ``unsubscribe T``, ``publish T MESSAGE``, ``status``,
``help``, ``exit``); each gets one JSON object a line back: the answer to each command
(``{"event": "publish", "topic": ..., "msg": ...}`` or ``{"event": "error", "error": ...}``;
a publish is answered once it ended: ``publish`` only when the topic's root accepted it, else
an error with its ``msg`` and ``definite``: false when it may still have been taken; a command
refused as it came has its ``line`` in the error). Answers come in completion order: a
publish's answer names its topic and ``msg``, a refusal its line
and every delivery of the node's subscribed topics (``{"event": "deliver", "topic": ...,
"message": ...}``).

Back-pressure: a publish the node has no room for (``PubSubNode.has_room``: over Scribe,
``max_pending`` publishes await their root's acknowledgement; over gossip, a neighbour's link
is full) waits, and every later command of that client waits behind it, in order, until the
node calls back (``when_room``). What waits is bounded (``max_waiting`` commands and
``max_waiting_bytes`` over all clients); a publish beyond that is refused at once with an
error (``definite``: it was never taken) and nothing else is lost. Overload is logged once per
interval with counts (``overload``, a ``RateLimitedLog``) and traced (``overload`` rows).
At most ``BATCH`` publishes are made per turn of the event loop (the rest wait for the next
turn, in order): a burst read in one go does not hold the node's timers (heartbeats, failure
detection) for the time of thousands of publishes.

``NodeProcess`` is what the runtime drives on such a node: the protocol stack's process, with
the command port beside it.
"""

from __future__ import annotations

import functools
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol, cast

import orjson

from ...core.conn import CloseCode, Conn, ConnGroup
from ...core.env import Env, MessageHandler, Process
from ...core.errors import ConfigError, StateError
from ...core.ids import NodeId
from ...core.messages import Message
from ...protocols.dissemination.scribe import PublishResult
from .node import Overloaded, PubSubNode
from .shell import HELP, CommandError, parse_command

__all__ = ["COMMANDS_LISTENER", "CommandPort", "NodeProcess"]

COMMANDS_LISTENER = "commands"
LAYER = "pubsub"
MAX_WAITING = 10_000  # commands waiting for room, over all clients of a port
MAX_WAITING_BYTES = 16 * 1024 * 1024
BATCH = 128  # publishes made per turn of the event loop, at most


def _echo(frame: bytes) -> str:
    """The command line an error answers, as it came (its first 200 characters): answers
    come in completion order, so a client that sent several commands can tell which one
    was refused."""
    return frame.decode(errors="replace")[:200]


class OverloadLog(Protocol):
    """Where overload is reported, once per interval with counts (``RateLimitedLog``)."""

    def warn(self, key: str, fmt: str, *args: object) -> None: ...


class CommandPort:
    """The command port of one node (see the module docstring)."""

    def __init__(self, env: Env, pubsub: PubSubNode, *,
                 status: Callable[[], dict[str, Any]] | None = None,
                 joined: Callable[[], bool] | None = None,
                 max_waiting: int = MAX_WAITING, max_waiting_bytes: int = MAX_WAITING_BYTES,
                 overload: OverloadLog | None = None) -> None:
        """``joined``: whether the node is in the overlay (publishes are refused before);
        None: always. ``max_waiting``/``max_waiting_bytes``: commands held while the node
        has no room (see the module docstring); ``overload``: where overload is logged."""
        if max_waiting < 1 or max_waiting_bytes < 1:
            raise ConfigError("max_waiting and max_waiting_bytes must be >= 1")
        self.env = env
        self.pubsub = pubsub
        self.status = status if status is not None else self._status
        self.joined = joined if joined is not None else (lambda: True)
        self.clients: ConnGroup = env.group()
        self.max_waiting = max_waiting
        self.max_waiting_bytes = max_waiting_bytes
        self.overload = overload
        self._waiting: dict[Conn, deque[bytes]] = {}  # a client's commands held, in order
        self._held = 0  # commands in _waiting
        self._batch = BATCH  # publishes this turn may still make
        self._next_turn: Any = None  # the timer that starts the next turn, while one is due
        self._held_bytes = 0
        self.waited = 0  # publishes that had to wait for room, so far
        self.refused = 0  # publishes refused because too many waited, so far

    @property
    def waiting(self) -> int:
        """Commands held for when the node has room, over all clients."""
        return self._held

    def _status(self) -> dict[str, Any]:
        return {"node": self.env.node, "mode": self.pubsub.mode,
                "subscriptions": self.pubsub.subscriptions()}

    def _say(self, conn: Conn, event: str, **fields: Any) -> None:
        self.env.write(conn, orjson.dumps({"event": event, **fields}))

    def opened(self, conn: Conn, peer_address: str) -> None:
        self.clients.add(conn)
        self._say(conn, "ready", node=self.env.node, mode=self.pubsub.mode)

    def received(self, conn: Conn, frame: bytes) -> None:
        waiting = self._waiting.get(conn)
        if waiting is not None:  # an earlier command of this client waits: this one too
            self._hold(conn, waiting, frame)
        elif not self._execute(conn, frame):
            waiting = deque[bytes]()
            if self._hold(conn, waiting, frame):
                self._waiting[conn] = waiting
                self._wait_for_room()
                if self._batch > 0:
                    self._report("waiting")

    def _hold(self, conn: Conn, waiting: deque[bytes], frame: bytes) -> bool:
        """Keep ``frame`` for when the node has room; False: too much waits, it was refused."""
        if (self._held >= self.max_waiting
                or self._held_bytes + len(frame) > self.max_waiting_bytes):
            self._refuse(conn)
            return False
        waiting.append(frame)
        self._held += 1
        self._held_bytes += len(frame)
        self.waited += 1
        return True

    def _refuse(self, conn: Conn) -> None:
        """Too much waits already: a publish is refused (definitely not taken), any other
        command too (in order behind a waiting publish, it cannot run now)."""
        self.refused += 1
        self._say(conn, "error", error=f"overloaded: {self._held} commands wait for room; "
                  f"this one was refused, send it again later", definite=True)
        self._report("refused")

    def _report(self, what: str) -> None:
        self.env.trace("overload", layer=LAYER, reason=what, waiting=self._held,
                       waited=self.waited, refused=self.refused)
        if self.overload is not None:
            self.overload.warn(f"pubsub_overload {self.env.node}",
                               "%s: publishing faster than the overlay carries: %d commands "
                               "wait for room (%d waited, %d refused so far)", self.env.node,
                               self._held, self.waited, self.refused)

    def _room(self) -> None:
        """The node may have room again: run what waits, oldest client first, until it has
        none (then wait again)."""
        for conn in list(self._waiting):
            waiting = self._waiting.get(conn)
            while waiting:
                frame = waiting.popleft()
                self._held -= 1
                self._held_bytes -= len(frame)
                if not self._execute(conn, frame):
                    waiting.appendleft(frame)
                    self._held += 1
                    self._held_bytes += len(frame)
                    self._wait_for_room()
                    return
                waiting = self._waiting.get(conn)  # gone if it was ``exit``
            self._waiting.pop(conn, None)

    def _wait_for_room(self) -> None:
        """Run what waits at the next turn (this turn's batch is used up) or when the node
        has room."""
        if self._batch <= 0:
            if self._next_turn is None:
                self._next_turn = self.env.set_timer(0.0, self._new_turn)
        else:
            self.pubsub.when_room(self._room)

    def _new_turn(self) -> None:
        self._next_turn = None
        self._batch = BATCH
        self._room()

    def _execute(self, conn: Conn, frame: bytes) -> bool:
        """Run one command; False (nothing done) if it is a publish the node has no room
        for now."""
        try:
            command = parse_command(frame.decode())
        except UnicodeDecodeError:
            self._say(conn, "error", error="a command is UTF-8 text")
            return True
        except CommandError as exc:
            self._say(conn, "error", error=str(exc), line=_echo(frame))
            return True
        if command is None:
            return True
        try:
            if command.verb == "exit":
                self.clients.discard(conn)
                self._forget(conn)  # what it sent after ``exit`` is not run
                self.env.close(conn, CloseCode.NORMAL, "exit")
            elif command.verb == "help":
                self._say(conn, "help", help=HELP)
            elif command.verb == "status":
                self._say(conn, "status", **self.status())
            elif command.verb == "publish":
                assert command.topic is not None
                if not self.joined():
                    raise StateError("not in the overlay yet: publish once it joined")
                if self._batch <= 0 or not self.pubsub.has_room():
                    return False
                if self._next_turn is None:  # the first of this turn: the next one refills
                    self._next_turn = self.env.set_timer(0.0, self._new_turn)
                self._batch -= 1
                self.pubsub.publish(command.topic, command.message,
                                    on_done=functools.partial(self._published, conn))
            else:
                assert command.topic is not None
                if command.verb == "subscribe":
                    self.pubsub.subscribe(command.topic)
                elif not self.pubsub.is_subscribed(command.topic):
                    raise StateError(f"not subscribed to {command.topic}")
                else:
                    self.pubsub.unsubscribe(command.topic)
                self._say(conn, command.verb, topic=command.topic)
        except Overloaded:
            return False  # (has_room said yes): it waits like the others
        except (ConfigError, StateError, ValueError) as exc:  # the request, not a bug
            self._say(conn, "error", error=str(exc), line=_echo(frame))
        return True

    def _published(self, conn: Conn, result: PublishResult) -> None:
        """Answer a publish once it ended: ``ok`` only when the topic's root accepted it."""
        if conn not in self.clients:
            return  # the client left meanwhile
        if result.accepted:
            self._say(conn, "publish", topic=result.topic, msg=result.msg)
        else:
            self._say(conn, "error", error=f"publish {result.msg} on {result.topic}: "
                      f"{result.reason}", msg=result.msg, definite=result.definite)

    def closed(self, conn: Conn, reason: str) -> None:
        self.clients.discard(conn)
        self._forget(conn)  # never run, never answered: the client left

    def _forget(self, conn: Conn) -> None:
        waiting = self._waiting.pop(conn, None)
        if waiting:
            self._held -= len(waiting)
            self._held_bytes -= sum(map(len, waiting))

    def deliver(self, topic: str, message: Any) -> None:
        """A delivery of a subscribed topic, to every connected client."""
        if len(self.clients):
            self.env.write_many(self.clients, orjson.dumps(
                {"event": "deliver", "topic": topic, "message": message}))


class NodeProcess:
    """The process of a node with a command port: the stack's process, and the port."""

    def __init__(self, inner: Process, port: CommandPort) -> None:
        self.inner = inner
        self.port = port

    def start(self) -> None:
        self.inner.start()

    def stop(self) -> None:
        self.inner.stop()

    def on_message(self, src: NodeId, msg: Message) -> None:
        cast(MessageHandler, self.inner).on_message(src, msg)

    def on_unreachable(self, node: NodeId) -> None:
        hook = getattr(self.inner, "on_unreachable", None)
        if hook is not None:
            hook(node)

    def opened(self, conn: Conn, peer_address: str) -> None:
        self.port.opened(conn, peer_address)

    def received(self, conn: Conn, frame: bytes) -> None:
        self.port.received(conn, frame)

    def closed(self, conn: Conn, reason: str) -> None:
        self.port.closed(conn, reason)
