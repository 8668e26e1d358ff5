"""Record what a reference implementation of seed 003's course protocol (a Java server of the
course project) and gossamer's activity server say to each other, as transcripts the interop
tests replay (``tests/fixtures/activity_interop/*.jsonl``).

Not part of the test suite (it needs the Java server): run it when the protocol changes.

    scripts/record_activity_interop.py --ref-classpath 'OUT:LIB/*' [--out DIR]

``--ref-classpath``: the compiled reference server (main class ``activitystreamer.Server``,
options ``-lp -rh -rp -s -a``), e.g. a course project built with ``javac`` against its own
``lib/`` jars. Each scenario starts the processes on 127.0.0.1 with ephemeral ports, puts a
recording proxy on the server link between them, drives clients over raw sockets, and writes
one transcript: a JSON object per line in the order they happened, with ports, ids, loads and
secrets as they were:

- ``{"from": "reference" | "gossamer", "frame": {...}}``: a frame on the server link (in
  ``gossamer_client_redirected_by_reference``: on gossamer's client's first connection);
- ``{"from": "client", "client": NAME, "server": "reference" | "gossamer", "frame": {...}}``:
  what a client sent to that server;
- ``{"to": "client", "client": NAME, "server": ..., "frame": {...}}``: what it received
  (clients of the gossamer server only: the replay checks those).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

SECRET = "interop-secret"
WAIT = 20.0
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))
from _common import free_port, until_listening  # noqa: E402  (the benchmarks' helpers)


class Recorder:
    """A TCP proxy on the server link: each JSON line passes through and is written down."""

    def __init__(self, upstream: int, *, downstream_name: str, upstream_name: str) -> None:
        self.upstream = upstream
        self.names = (downstream_name, upstream_name)  # who connects in, who listens behind
        self.frames: list[dict[str, Any]] = []
        self.port = 0
        self.server: asyncio.Server | None = None

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream)
        with contextlib.suppress(asyncio.CancelledError):  # the recording ends
            await asyncio.gather(self._pump(reader, up_writer, self.names[0]),
                                 self._pump(up_reader, writer, self.names[1]),
                                 return_exceptions=True)

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                    who: str) -> None:
        try:
            while line := await reader.readline():
                text = line.strip()
                if text:
                    try:
                        frame = json.loads(text)
                    except ValueError:
                        frame = {"unparsed": text.decode(errors="replace")}
                    self.frames.append({"from": who, "frame": frame})
                writer.write(line)
                await writer.drain()
        finally:
            with contextlib.suppress(Exception):
                writer.close()


class LineClient:
    """A raw JSON-lines client of either server; what it sends (and, on the gossamer server,
    what it receives) goes into ``log``."""

    def __init__(self, port: int, name: str, server: str, log: list[dict[str, Any]]) -> None:
        self.port = port
        self.name, self.server, self.log = name, server, log
        self.received: list[dict[str, Any]] = []
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.task: asyncio.Task[None] | None = None

    async def open(self) -> LineClient:
        self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
        self.task = asyncio.get_running_loop().create_task(self._read())
        return self

    async def _read(self) -> None:
        assert self.reader is not None
        while line := await self.reader.readline():
            if line.strip():
                frame = json.loads(line)
                self.received.append(frame)
                if self.server == "gossamer":
                    self.log.append({"to": "client", "client": self.name,
                                     "server": self.server, "frame": frame})

    def send(self, frame: dict[str, Any]) -> None:
        assert self.writer is not None
        self.log.append({"from": "client", "client": self.name, "server": self.server,
                         "frame": frame})
        self.writer.write(json.dumps(frame).encode() + b"\n")

    async def until(self, command: str) -> dict[str, Any]:
        async with asyncio.timeout(WAIT):
            while True:
                for frame in self.received:
                    if frame.get("command") == command:
                        return frame
                await asyncio.sleep(0.02)  # polling, bounded by the timeout

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        if self.task is not None:
            self.task.cancel()


def start_reference(classpath: str, port: int, *,
                    parent: int | None = None) -> subprocess.Popen[bytes]:
    args = ["java", "-cp", classpath, "activitystreamer.Server", "-lh", "127.0.0.1",
            "-lp", str(port), "-s", SECRET, "-a", "1000"]
    if parent is not None:
        args += ["-rh", "127.0.0.1", "-rp", str(parent)]
    return subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def start_gossamer(port: int, *, parent: int | None = None) -> subprocess.Popen[bytes]:
    args = [sys.executable, "-m", "gossamer.cli.main", "activity", "server", "-lh",
            "127.0.0.1", "-lp", str(port), "-s", SECRET, "-a", "1000", "--id", "gossamer-1"]
    if parent is not None:
        args += ["-rh", "127.0.0.1", "-rp", str(parent)]
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    return subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)


async def exchange(parent: tuple[int, str], child: tuple[int, str], recorder: Recorder) -> None:
    """Clients on both servers (port, "reference" | "gossamer"): a registration on the child
    (LOCK_* across the link) and one refused on the parent, an anonymous sender on the parent
    and a registered one on the child (ACTIVITY_BROADCAST both ways), announces meanwhile."""
    log = recorder.frames
    async with asyncio.timeout(WAIT):
        while not any(f.get("frame", {}).get("command") == "SERVER_ANNOUNCE" for f in log):
            await asyncio.sleep(0.05)  # waiting for the link; bounded by the timeout
    on_child = await LineClient(child[0], "alice", child[1], log).open()
    on_child.send({"command": "REGISTER", "username": "alice", "secret": "pw-alice"})
    await on_child.until("REGISTER_SUCCESS")
    on_child.send({"command": "LOGIN", "username": "alice", "secret": "pw-alice"})
    await on_child.until("LOGIN_SUCCESS")
    on_parent = await LineClient(parent[0], "anon", parent[1], log).open()
    on_parent.send({"command": "LOGIN", "username": "anonymous"})
    await on_parent.until("LOGIN_SUCCESS")
    clash = await LineClient(parent[0], "clash", parent[1], log).open()
    clash.send({"command": "REGISTER", "username": "alice", "secret": "other"})
    await clash.until("REGISTER_FAILED")
    on_child.send({"command": "ACTIVITY_MESSAGE", "username": "alice", "secret": "pw-alice",
                   "activity": {"text": "from a client of the child"}})
    await on_parent.until("ACTIVITY_BROADCAST")
    on_child.received.clear()
    on_parent.send({"command": "ACTIVITY_MESSAGE", "username": "anonymous",
                    "activity": {"text": "from a client of the parent"}})
    await on_child.until("ACTIVITY_BROADCAST")
    await asyncio.sleep(1.5)  # one more round of SERVER_ANNOUNCE each way (the -a interval)
    for client in (on_child, on_parent, clash):
        client.close()


async def scenario(classpath: str, *, reference_parent: bool) -> list[dict[str, Any]]:
    parent_port, child_port = free_port(), free_port()
    processes = []
    try:
        if reference_parent:
            processes.append(start_reference(classpath, parent_port))
        else:
            processes.append(start_gossamer(parent_port))
        await until_listening(parent_port)
        recorder = Recorder(parent_port,
                            downstream_name="gossamer" if reference_parent else "reference",
                            upstream_name="reference" if reference_parent else "gossamer")
        await recorder.start()
        if reference_parent:
            processes.append(start_gossamer(child_port, parent=recorder.port))
        else:
            processes.append(start_reference(classpath, child_port, parent=recorder.port))
        await until_listening(child_port)
        sides = ("reference", "gossamer") if reference_parent else ("gossamer", "reference")
        await exchange((parent_port, sides[0]), (child_port, sides[1]), recorder)
        return list(recorder.frames)
    finally:
        if recorder_server := getattr(locals().get("recorder"), "server", None):
            recorder_server.close()
        for process in processes:
            process.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=10)


async def redirect_scenario(classpath: str) -> list[dict[str, Any]]:
    """gossamer's client logs in at a reference parent that has three clients more than its
    gossamer child: the reference answers LOGIN_SUCCESS then REDIRECT to the child, which the
    client follows; what it sends there reaches the parent's clients. The recording proxy is
    on the client's first connection (client <-> reference)."""
    from gossamer.services.activity.client import ActivityClient

    parent_port, child_port = free_port(), free_port()
    processes = [start_reference(classpath, parent_port)]
    recorder: Recorder | None = None
    crowd: list[LineClient] = []
    try:
        await until_listening(parent_port)
        processes.append(start_gossamer(child_port, parent=parent_port))
        await until_listening(child_port)
        await asyncio.sleep(2.5)  # the child's SERVER_ANNOUNCE reaches the parent (-a 1000)
        log: list[dict[str, Any]] = []
        for index in range(3):
            client = await LineClient(parent_port, f"crowd-{index}", "reference", log).open()
            client.send({"command": "LOGIN", "username": "anonymous"})
            await client.until("LOGIN_SUCCESS")
            crowd.append(client)
        await asyncio.sleep(1.5)  # the parent's load is announced
        recorder = Recorder(parent_port, downstream_name="gossamer", upstream_name="reference")
        await recorder.start()
        async with ActivityClient("127.0.0.1", recorder.port) as ours:
            async with asyncio.timeout(WAIT):
                while not (ours.joined and ours.redirects):
                    await asyncio.sleep(0.05)  # polling the client; bounded by the timeout
            await ours.send({"text": "after the redirect"})
            await crowd[0].until("ACTIVITY_BROADCAST")
        return list(recorder.frames)
    finally:
        for client in crowd:
            client.close()
        if recorder is not None and recorder.server is not None:
            recorder.server.close()
        for process in processes:
            process.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=10)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--ref-classpath", required=True)
    parser.add_argument("--out", default=str(ROOT / "tests" / "fixtures" / "activity_interop"))
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name, reference_parent in (("gossamer_child_of_reference", True),
                                   ("reference_child_of_gossamer", False)):
        started = time.perf_counter()
        frames = asyncio.run(scenario(args.ref_classpath, reference_parent=reference_parent))
        path = out / f"{name}.jsonl"
        path.write_text("".join(json.dumps(f, sort_keys=True) + "\n" for f in frames))
        print(f"{path}: {len(frames)} frames in {time.perf_counter() - started:.1f} s")
    started = time.perf_counter()
    frames = asyncio.run(redirect_scenario(args.ref_classpath))
    path = out / "gossamer_client_redirected_by_reference.jsonl"
    path.write_text("".join(json.dumps(f, sort_keys=True) + "\n" for f in frames))
    print(f"{path}: {len(frames)} frames in {time.perf_counter() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
