"""Interop by transcript: what a reference implementation of the course protocol (a Java server
of the course project) said on the server link, recorded against gossamer's server
(``scripts/record_activity_interop.py``), is played back to gossamer's server here, which must
answer as it did then: the same commands in the same order, with the same users, secrets and
activities. Its clients, played back too, must receive what they received then.

``SERVER_ANNOUNCE`` comes on its own timer, so announcements are not matched in order: each
side's recorded ones are sent (reference) or must have come at least once, well formed
(gossamer). Activities are compared without the fields gossamer adds for its own repair
(``_``-prefixed: a reference server passes them through untouched).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from gossamer.services.activity.client import ActivityClient
from gossamer.services.activity.server import ActivityTcpServer

WAIT = 15.0
SECRET = "interop-secret"
SERVER_ID = "gossamer-1"
TRANSCRIPTS = Path(__file__).parent / "fixtures" / "activity_interop"


def load(name: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (TRANSCRIPTS / f"{name}.jsonl").read_text().splitlines()]


def comparable(frame: dict[str, Any]) -> dict[str, Any]:
    """What must be the same as recorded: everything but addresses, loads and gossamer's own
    repair fields."""
    kept = {k: v for k, v in frame.items() if k not in ("hostname", "port", "load")}
    if isinstance(kept.get("activity"), dict):
        kept["activity"] = {k: v for k, v in kept["activity"].items() if not k.startswith("_")}
    return kept


class Lines:
    """One JSON-lines connection; frames received are kept in order, consumed by ``expect``."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.frames: list[dict[str, Any]] = []
        self.arrived = asyncio.Event()
        self.task = asyncio.get_running_loop().create_task(self._read())

    async def _read(self) -> None:
        while line := await self.reader.readline():
            if line.strip():
                self.frames.append(json.loads(line))
                self.arrived.set()

    def send(self, frame: dict[str, Any]) -> None:
        self.writer.write(json.dumps(frame).encode() + b"\n")

    async def expect(self, recorded: dict[str, Any], *, skip: str | None = None) -> None:
        """Wait for the next frame (``skip`` commands passed over) and compare it."""
        async with asyncio.timeout(WAIT):
            while True:
                while self.frames and self.frames[0].get("command") == skip:
                    self.frames.pop(0)
                if self.frames:
                    got = self.frames.pop(0)
                    assert comparable(got) == comparable(recorded), (got, recorded)
                    return
                self.arrived.clear()
                await self.arrived.wait()

    def close(self) -> None:
        self.writer.close()
        self.task.cancel()


async def replay(transcript: list[dict[str, Any]], *, gossamer_is_child: bool) -> None:
    """Play the reference's side of ``transcript`` (its link frames, gossamer's clients)
    against a gossamer server, and check gossamer's side."""
    links: asyncio.Queue[Lines] = asyncio.Queue()
    announces: list[dict[str, Any]] = []

    async def accepted(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await links.put(Lines(reader, writer))

    fake_parent = None
    if gossamer_is_child:
        fake_parent = await asyncio.start_server(accepted, "127.0.0.1", 0)
        remote = ("127.0.0.1", fake_parent.sockets[0].getsockname()[1])
        ours = ActivityTcpServer(secret=SECRET, port=0, announce_interval=0.2, remote=remote,
                                 hash_iterations=10, server_id=SERVER_ID)
        await ours.start()
        link = await asyncio.wait_for(links.get(), WAIT)
    else:
        ours = ActivityTcpServer(secret=SECRET, port=0, announce_interval=0.2,
                                 hash_iterations=10, server_id=SERVER_ID)
        await ours.start()
        link = Lines(*await asyncio.open_connection(*ours.address))
    clients: dict[str, Lines] = {}
    try:
        for entry in transcript:
            frame = entry["frame"]
            if entry.get("from") == "reference":
                link.send(frame)
            elif entry.get("from") == "gossamer":
                if frame.get("command") != "SERVER_ANNOUNCE":
                    await link.expect(frame, skip="SERVER_ANNOUNCE")
            elif entry.get("server") != "gossamer":
                continue  # a client of the reference server: its effect is on the link
            elif entry.get("from") == "client":
                if entry["client"] not in clients:
                    clients[entry["client"]] = Lines(*await asyncio.open_connection(
                        *ours.address))
                clients[entry["client"]].send(frame)
            else:
                await clients[entry["client"]].expect(frame)
        # the announcements that came meanwhile: at least one, as the protocol has them
        async with asyncio.timeout(WAIT):
            while not (announces := [f for f in link.frames
                                     if f.get("command") == "SERVER_ANNOUNCE"]):
                link.arrived.clear()
                await link.arrived.wait()
        first = announces[0]
        assert first["id"] == SERVER_ID and first["hostname"] == "127.0.0.1"
        assert first["port"] == ours.address[1] and isinstance(first["load"], int)
    finally:
        for client in clients.values():
            client.close()
        link.close()
        await ours.stop()
        if fake_parent is not None:
            fake_parent.close()


@pytest.mark.parametrize(("name", "gossamer_is_child"), [
    ("gossamer_child_of_reference", True),
    ("reference_child_of_gossamer", False),
])
def test_gossamer_answers_a_recorded_reference_server_as_it_did(
        name: str, gossamer_is_child: bool) -> None:
    transcript = load(name)
    commands = {entry["frame"].get("command") for entry in transcript
                if entry.get("from") in ("reference", "gossamer")}
    # the recording crosses the link both ways: authentication, a lock, broadcasts
    assert {"AUTHENTICATE", "LOCK_REQUEST", "LOCK_ALLOWED", "ACTIVITY_BROADCAST",
            "SERVER_ANNOUNCE"} <= commands
    asyncio.run(replay(transcript, gossamer_is_child=gossamer_is_child))


def test_a_transcript_that_gossamer_no_longer_matches_fails() -> None:
    """The replay can fail: a recorded answer changed (a LOCK_ALLOWED turned into a
    LOCK_DENIED) is caught."""
    transcript = load("reference_child_of_gossamer")
    for entry in transcript:
        if entry.get("from") == "gossamer" and entry["frame"].get("command") == "LOCK_ALLOWED":
            entry["frame"] = {**entry["frame"], "command": "LOCK_DENIED"}
    with pytest.raises(AssertionError, match="LOCK_DENIED"):
        asyncio.run(replay(transcript, gossamer_is_child=False))


def test_gossamer_client_follows_a_recorded_reference_redirect() -> None:
    """The reference server answered our client's LOGIN with LOGIN_SUCCESS, then REDIRECT: played
    back (the REDIRECT pointing at a gossamer server here), the client logs in where it is sent
    and what it sends there is broadcast."""
    transcript = load("gossamer_client_redirected_by_reference")
    assert [e["frame"]["command"] for e in transcript] == ["LOGIN", "LOGIN_SUCCESS", "REDIRECT"]

    async def scenario() -> None:
        target = ActivityTcpServer(secret=SECRET, port=0, hash_iterations=10,
                                   server_id=SERVER_ID)
        await target.start()
        served: list[Lines] = []

        async def reference(reader: asyncio.StreamReader,
                            writer: asyncio.StreamWriter) -> None:
            line = Lines(reader, writer)
            served.append(line)
            for entry in transcript:
                if entry["from"] == "gossamer":
                    await line.expect(entry["frame"])
                elif entry["frame"]["command"] == "REDIRECT":
                    line.send({**entry["frame"], "hostname": target.address[0],
                               "port": target.address[1]})
                else:
                    line.send(entry["frame"])

        fake = await asyncio.start_server(reference, "127.0.0.1", 0)
        watcher = Lines(*await asyncio.open_connection(*target.address))
        try:
            watcher.send({"command": "LOGIN", "username": "anonymous"})
            await watcher.expect({"command": "LOGIN_SUCCESS",
                                  "info": "logged in as user anonymous"})
            async with ActivityClient("127.0.0.1", fake.sockets[0].getsockname()[1]) as ours:
                async with asyncio.timeout(WAIT):
                    while not (ours.joined and ours.redirects == 1):
                        await asyncio.sleep(0.02)  # polling the client; bounded above
                await ours.send({"text": "after the redirect"})
                await watcher.expect({"command": "ACTIVITY_BROADCAST", "activity": {
                    "authenticated_user": "anonymous", "text": "after the redirect"}})
            assert len(served) == 1  # one login at the reference, then the redirect
        finally:
            watcher.close()
            for line in served:
                line.close()
            fake.close()
            await target.stop()

    asyncio.run(scenario())
