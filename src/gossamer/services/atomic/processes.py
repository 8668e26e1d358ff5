"""``gossamer atomic node`` processes driven from asyncio: spawn members on one loopback
group, read what each prints, wait on it. For the loopback experiment and the kill test.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from .journal import read_journal

__all__ = ["WAIT", "MemberProcess", "ProcessGroup", "loopback_group_address"]

WAIT = 120.0  # seconds: an upper bound for each wait, every wait ends when its line shows up


class MemberProcess:
    """One ``gossamer atomic node --interactive`` process (one life of a member) and what it
    printed: its name, the members it sees, its deliveries, the decisions of its own sends,
    its votes and its errors."""

    def __init__(self, label: str, proc: asyncio.subprocess.Process,
                 changed: asyncio.Condition) -> None:
        self.label = label
        self.proc = proc
        self.changed = changed
        self.name: str | None = None
        self.members: set[str] = set()
        self.delivered: list[str] = []
        self.decided: dict[str, bool] = {}
        self.voted_yes: list[str] = []
        self.errors: list[str] = []
        self.on_line: Callable[[MemberProcess, str], None] = lambda member, line: None
        self.reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        assert self.proc.stdout is not None
        while raw := await self.proc.stdout.readline():
            line = raw.decode().rstrip("\n")
            verb, _, rest = line.partition(" ")
            words = rest.split()
            if verb == "ready":
                self.name = words[0]
            elif verb == "member+":
                self.members.add(words[0])
            elif verb == "member-":
                self.members.discard(words[0])
            elif verb == "delivered":
                self.delivered.append(words[0])
            elif verb in ("committed", "aborted"):
                self.decided[words[0]] = verb == "committed"
            elif verb == "voted" and words[1] == "yes":
                self.voted_yes.append(words[0])
            elif verb == "error:":
                self.errors.append(line)
            self.on_line(self, line)
            async with self.changed:
                self.changed.notify_all()
        async with self.changed:
            self.changed.notify_all()

    def write(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line.encode() + b"\n")


class ProcessGroup:
    """The member processes of one group, each with its data dir under ``out/data/<run>``,
    its stderr under ``out/logs/<run>`` and its trace under ``out/trace/<run>``; ``node_args``
    go to every ``gossamer atomic node``."""

    def __init__(self, out: Path, group: str, period: float, *, run: str,
                 node_args: Sequence[str] = ()) -> None:
        self.out = out
        self.group = group
        self.period = period
        self.run = run
        self.node_args = tuple(node_args)
        self.changed = asyncio.Condition()
        self.lives: list[MemberProcess] = []

    async def spawn(self, label: str) -> MemberProcess:
        logs = self.out / "logs" / self.run
        logs.mkdir(parents=True, exist_ok=True)
        with (logs / f"{label}.stderr").open("ab") as err:
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "gossamer.cli.main", "atomic", "node",
                "--group", self.group, "--data-dir", str(self.out / "data" / self.run / label),
                "--interactive", "--print-votes", "--session-period", str(self.period),
                "--trace-dir", str(self.out), "--run", self.run, "--log-level", "INFO",
                *self.node_args,
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=err)
        member = MemberProcess(label, proc, self.changed)
        self.lives.append(member)
        await self.until(lambda: member.name is not None, f"{label} ready")
        return member

    def journal(self, label: str) -> list[str]:
        """The message ids in ``label``'s delivery journal (every life of it), oldest first:
        the member's record of what it delivered (its printed lines may miss the last one
        journaled before a kill -9)."""
        return [entry["mid"] for entry in read_journal(self.out / "data" / self.run / label)]

    async def until(self, condition: Callable[[], bool], what: str, timeout: float = WAIT,
                    on_timeout: Callable[[], str] = lambda: "") -> None:
        try:
            async with asyncio.timeout(timeout), self.changed:
                await self.changed.wait_for(condition)
        except TimeoutError:
            raise TimeoutError(f"not within {timeout} s: {what} {on_timeout()}") from None

    async def stop(self) -> None:
        """Each process leaves (the end of its input), compacting its trace; one that does
        not within ``WAIT`` is killed."""
        for member in self.lives:
            if member.proc.returncode is None and member.proc.stdin is not None:
                member.proc.stdin.close()
        for member in self.lives:
            try:
                async with asyncio.timeout(WAIT):
                    await member.proc.wait()
            except TimeoutError:
                print(f"{member.label} did not leave within {WAIT} s: killed")
                with contextlib.suppress(ProcessLookupError):
                    member.proc.kill()
                await member.proc.wait()
            await member.reader


def loopback_group_address(rng: random.Random | None = None) -> str:
    """A free port on a random group of the administratively scoped range, so concurrent
    runs do not hear each other."""
    rng = rng or random.Random()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"239.255.{rng.randrange(1, 255)}.{rng.randrange(1, 255)}:{port}"
