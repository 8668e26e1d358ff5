"""A legacy server of the original course protocol (no ``level``, no SERVER_INFO, LOCK_* without
ids) joins our network as a child over TCP; its clients get our broadcasts and ours get its."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

import orjson

from gossamer.services.activity.client import ActivityClient
from gossamer.services.activity.server import ActivityTcpServer

WAIT = 10.0
SECRET = "s3cret"
KNOWN = {"AUTHENTICATE", "INVALID_MESSAGE", "AUTHENTICATION_FAIL", "LOGIN", "LOGOUT",
         "ACTIVITY_MESSAGE", "SERVER_ANNOUNCE", "ACTIVITY_BROADCAST", "LOCK_REQUEST",
         "LOCK_ALLOWED", "LOCK_DENIED"}


async def until(condition: Callable[[], bool]) -> None:
    async with asyncio.timeout(WAIT):
        while not condition():
            await asyncio.sleep(0.01)  # polling a condition, bounded by the timeout above


class LegacyServer:
    """The original protocol, strictly: an unknown command (SERVER_INFO) is INVALID_MESSAGE."""

    def __init__(self, parent: tuple[str, int]) -> None:
        self.parent_address = parent
        self.clients: list[asyncio.StreamWriter] = []
        self.parent: asyncio.StreamWriter | None = None
        self.from_parent: list[dict[str, Any]] = []
        self.invalid: list[str] = []
        self.users: dict[str, str] = {}
        self.tasks: list[asyncio.Task[None]] = []
        self.listener: asyncio.Server | None = None
        self.port = 0

    async def start(self) -> None:
        self.listener = await asyncio.start_server(self._client, "127.0.0.1", 0)
        self.port = self.listener.sockets[0].getsockname()[1]
        reader, self.parent = await asyncio.open_connection(*self.parent_address)
        self._write(self.parent, {"command": "AUTHENTICATE", "secret": SECRET})
        self._announce()
        self.tasks.append(asyncio.get_running_loop().create_task(self._parent_loop(reader)))

    def _announce(self) -> None:
        assert self.parent is not None
        self._write(self.parent, {"command": "SERVER_ANNOUNCE", "id": "legacy-1",
                                  "load": len(self.clients), "hostname": "127.0.0.1",
                                  "port": self.port})

    @staticmethod
    def _write(writer: asyncio.StreamWriter, obj: dict[str, Any]) -> None:
        writer.write(orjson.dumps(obj) + b"\n")

    async def _parent_loop(self, reader: asyncio.StreamReader) -> None:
        while line := await reader.readline():
            msg = orjson.loads(line)
            self.from_parent.append(msg)
            command = msg.get("command")
            if command not in KNOWN:
                self.invalid.append(str(command))
                assert self.parent is not None
                self._write(self.parent, {"command": "INVALID_MESSAGE",
                                          "info": f"unknown command {command}"})
                self.parent.close()
                return
            if command == "ACTIVITY_BROADCAST":
                for client in self.clients:
                    self._write(client, msg)
            elif command == "LOCK_REQUEST":  # the original: allowed unless known
                assert self.parent is not None
                known = msg["username"] in self.users
                if not known:
                    self.users[msg["username"]] = msg["secret"]
                self._write(self.parent, {"command": "LOCK_DENIED" if known else "LOCK_ALLOWED",
                                          "username": msg["username"], "secret": msg["secret"]})

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while line := await reader.readline():
            msg = orjson.loads(line)
            if msg["command"] == "LOGIN" and msg["username"] == "anonymous":
                self.clients.append(writer)
                self._write(writer, {"command": "LOGIN_SUCCESS",
                                     "info": "logged in as user anonymous"})
            elif msg["command"] == "ACTIVITY_MESSAGE":
                activity = {**msg["activity"], "authenticated_user": msg["username"]}
                out = {"command": "ACTIVITY_BROADCAST", "activity": activity}
                assert self.parent is not None
                self._write(self.parent, out)
                for client in self.clients:
                    if client is not writer:
                        self._write(client, out)
            elif msg["command"] == "LOGOUT":
                break
        if writer in self.clients:
            self.clients.remove(writer)
        writer.close()

    async def stop(self) -> None:
        for task in self.tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self.parent is not None:
            self.parent.close()
        if self.listener is not None:
            self.listener.close()
            await self.listener.wait_closed()


def test_legacy_child_joins_and_its_clients_get_our_broadcasts() -> None:
    async def scenario() -> None:
        root = ActivityTcpServer(secret=SECRET, port=0, announce_interval=0.2,
                                 hash_iterations=10)
        await root.start()
        child = ActivityTcpServer(secret=SECRET, port=0, announce_interval=0.2,
                                  remote=root.address, hash_iterations=10)
        await child.start()
        legacy = LegacyServer(root.address)
        await legacy.start()
        try:
            await until(lambda: root.core is not None and "legacy-1" in root.core.known)
            assert root.core is not None and root.core.known["legacy-1"].level is None
            # the announcement without a level reached our other server too
            await until(lambda: child.core is not None and "legacy-1" in child.core.known)
            async with ActivityClient("127.0.0.1", legacy.port) as theirs, \
                    ActivityClient(*child.address, username="alice") as ours:
                await until(lambda: len(legacy.clients) == 1)
                for n in range(3):
                    await ours.send({"n": n})
                got = [await theirs.receive(WAIT) for _ in range(3)]
                assert [g["n"] for g in got] == [0, 1, 2]
                assert {g["authenticated_user"] for g in got} == {"alice"}
                # and the other way: a legacy client's activity reaches our clients
                await theirs.send({"from": "legacy"})
                back = await ours.receive(WAIT)
                assert back["from"] == "legacy"
            # our registration asked the legacy server too (it answered without an id)
            assert "alice" in legacy.users
            assert legacy.invalid == []  # we never sent it SERVER_INFO or anything unknown
            assert all(m["command"] != "SERVER_INFO" for m in legacy.from_parent)
        finally:
            await legacy.stop()
            await child.stop()
            await root.stop()

    asyncio.run(scenario())


class ReferenceParent:
    """A parent of the original course protocol: AUTHENTICATE is taken in silence (no
    SERVER_INFO), activities and announcements are relayed, nothing else is known."""

    def __init__(self) -> None:
        self.authentications: list[dict[str, Any]] = []
        self.servers: list[asyncio.StreamWriter] = []
        self.clients: list[asyncio.StreamWriter] = []
        self.invalid: list[str] = []
        self.listener: asyncio.Server | None = None
        self.tasks: list[asyncio.Task[None]] = []
        self.port = 0

    async def start(self) -> None:
        self.listener = await asyncio.start_server(self._conn, "127.0.0.1", 0)
        self.port = self.listener.sockets[0].getsockname()[1]
        self.tasks.append(asyncio.get_running_loop().create_task(self._announce()))

    async def _announce(self) -> None:
        # the original announces every interval; ours run at 0.2 s here, so as often as that
        while True:
            for server in self.servers:
                LegacyServer._write(server, {"command": "SERVER_ANNOUNCE", "id": "ref-root",
                                             "load": len(self.clients),
                                             "hostname": "127.0.0.1", "port": self.port})
            await asyncio.sleep(0.1)  # the fake's own announce period, not a test wait

    def _relay(self, msg: dict[str, Any], source: asyncio.StreamWriter) -> None:
        for writer in (*self.servers, *self.clients):
            if writer is not source:
                LegacyServer._write(writer, msg)

    async def _conn(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while line := await reader.readline():
            msg = orjson.loads(line)
            command = msg.get("command")
            if command == "AUTHENTICATE" and msg.get("secret") == SECRET:
                self.authentications.append(msg)
                self.servers.append(writer)
            elif command == "LOGIN" and msg.get("username") == "anonymous":
                self.clients.append(writer)
                LegacyServer._write(writer, {"command": "LOGIN_SUCCESS",
                                             "info": "logged in as user anonymous"})
            elif command == "ACTIVITY_MESSAGE":
                activity = {**msg["activity"], "authenticated_user": msg["username"]}
                self._relay({"command": "ACTIVITY_BROADCAST", "activity": activity}, writer)
            elif command in ("ACTIVITY_BROADCAST", "SERVER_ANNOUNCE") and writer in self.servers:
                self._relay(msg, writer)
            elif command in KNOWN:
                continue
            else:
                self.invalid.append(str(command))
                LegacyServer._write(writer, {"command": "INVALID_MESSAGE",
                                             "info": f"unknown command {command}"})
                break
        for group in (self.servers, self.clients):
            if writer in group:
                group.remove(writer)
        writer.close()

    async def stop(self) -> None:
        for task in self.tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for writer in (*self.servers, *self.clients):
            writer.close()
        if self.listener is not None:
            self.listener.close()
            await self.listener.wait_closed()


def test_our_server_joins_a_reference_parent_that_never_sends_server_info() -> None:
    """Issue 18: as a child of a reference server, ours used to wait for SERVER_INFO and
    reconnect every 2 s. Silence after AUTHENTICATE (or the parent's first server message) is
    the original protocol's acceptance: attached once, activities flow both ways."""
    async def scenario() -> None:
        parent = ReferenceParent()
        await parent.start()
        ours = ActivityTcpServer(secret=SECRET, port=0, announce_interval=0.2,
                                 remote=("127.0.0.1", parent.port), hash_iterations=10)
        await ours.start()
        try:
            await until(lambda: ours.core is not None and ours.core.state.value == "attached")
            async with ActivityClient("127.0.0.1", parent.port) as theirs, \
                    ActivityClient(*ours.address) as mine:
                await until(lambda: len(parent.clients) == 1)
                await mine.send({"n": 1})
                assert (await theirs.receive(WAIT))["n"] == 1
                await theirs.send({"from": "reference"})
                assert (await mine.receive(WAIT))["from"] == "reference"
                await mine.send({"n": 2})
                assert (await theirs.receive(WAIT))["n"] == 2
            assert len(parent.authentications) == 1, parent.authentications  # no reconnects
            assert parent.invalid == []
            assert ours.core is not None and ours.core.state.value == "attached"
        finally:
            await ours.stop()
            await parent.stop()

    asyncio.run(scenario())
