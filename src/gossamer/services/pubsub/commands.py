"""A pub/sub node's command port: the seed's client commands over connections (JSON lines).

Any number of clients connect to the node's ``commands`` listener and send one command a line,
as on the node's stdin (``subscribe T``, ``unsubscribe T``, ``publish T MESSAGE``, ``status``,
``help``, ``exit``); each gets one JSON object a line back: the answer to each command
(``{"event": "publish", "topic": ..., "msg": ...}`` or ``{"event": "error", "error": ...}``;
a publish is answered once it ended: ``publish`` only when the topic's root accepted it, else
an error with its ``msg`` and ``definite``: false when it may still have been taken)
and every delivery of the node's subscribed topics (``{"event": "deliver", "topic": ...,
"message": ...}``). ``NodeProcess`` is what the runtime drives on such a node: the protocol
stack's process, with the command port beside it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, cast

import orjson

from ...core.conn import CloseCode, Conn, ConnGroup
from ...core.env import Env, MessageHandler, Process
from ...core.errors import ConfigError, StateError
from ...core.ids import NodeId
from ...core.messages import Message
from ...protocols.dissemination.scribe import PublishResult
from .node import PubSubNode
from .shell import HELP, CommandError, parse_command

__all__ = ["COMMANDS_LISTENER", "CommandPort", "NodeProcess"]

COMMANDS_LISTENER = "commands"
LAYER = "pubsub"


class CommandPort:
    """The command port of one node (see the module docstring)."""

    def __init__(self, env: Env, pubsub: PubSubNode, *,
                 status: Callable[[], dict[str, Any]] | None = None,
                 joined: Callable[[], bool] | None = None) -> None:
        """``joined``: whether the node is in the overlay (publishes are refused before);
        None: always."""
        self.env = env
        self.pubsub = pubsub
        self.status = status if status is not None else self._status
        self.joined = joined if joined is not None else (lambda: True)
        self.clients: ConnGroup = env.group()

    def _status(self) -> dict[str, Any]:
        return {"node": self.env.node, "mode": self.pubsub.mode,
                "subscriptions": self.pubsub.subscriptions()}

    def _say(self, conn: Conn, event: str, **fields: Any) -> None:
        self.env.write(conn, orjson.dumps({"event": event, **fields}))

    def opened(self, conn: Conn, peer_address: str) -> None:
        self.clients.add(conn)
        self._say(conn, "ready", node=self.env.node, mode=self.pubsub.mode)

    def received(self, conn: Conn, frame: bytes) -> None:
        try:
            command = parse_command(frame.decode())
        except UnicodeDecodeError:
            self._say(conn, "error", error="a command is UTF-8 text")
            return
        except CommandError as exc:
            self._say(conn, "error", error=str(exc))
            return
        if command is None:
            return
        try:
            if command.verb == "exit":
                self.clients.discard(conn)
                self.env.close(conn, CloseCode.NORMAL, "exit")
            elif command.verb == "help":
                self._say(conn, "help", help=HELP)
            elif command.verb == "status":
                self._say(conn, "status", **self.status())
            elif command.verb == "publish":
                assert command.topic is not None
                if not self.joined():
                    raise StateError("not in the overlay yet: publish once it joined")
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
        except (ConfigError, StateError, ValueError) as exc:  # the request, not a bug
            self._say(conn, "error", error=str(exc))

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
