"""``gossamer atomic node`` against bad input and misuse: over-long command lines, a data dir
in use or damaged, bodies that are not JSON, and sends the end of input would cut off."""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from gossamer.core.errors import ConfigError, StateError
from gossamer.runtimes.net.lines import command_lines
from gossamer.services.atomic.api import AtomicGroup
from gossamer.services.atomic.journal import JOURNAL, Journal
from gossamer.services.atomic.processes import loopback_group_address


def lines_of(chunks: list[bytes], limit: int = 10) -> list[bytes | None]:
    async def main() -> list[bytes | None]:
        reader = asyncio.StreamReader()
        for chunk in chunks:
            reader.feed_data(chunk)
        reader.feed_eof()
        return [line async for line in command_lines(reader, limit)]

    return asyncio.run(main())


def test_an_over_long_line_is_one_error_and_none_of_it_is_a_command() -> None:
    assert lines_of([b"members\n", b"x" * 25 + b" send tail\n", b"leave\n"]) == [
        b"members", None, b"leave"]
    # split across reads, longer than any read: still one error, the tail dropped
    assert lines_of([b"y" * 8, b"y" * 8, b" send tail", b"\nmembers"]) == [None, b"members"]
    assert lines_of([b"send a\nsend b"]) == [b"send a", b"send b"]
    assert lines_of([b"0123456789\n", b"01234567890\n"]) == [b"0123456789", None]


def test_two_members_may_not_share_a_data_dir(tmp_path: Path) -> None:
    address = loopback_group_address()
    first = AtomicGroup(address, data_dir=tmp_path / "a")
    with pytest.raises(StateError, match="in use by another member"):
        AtomicGroup(address, data_dir=tmp_path / "a")
    incarnation = (tmp_path / "a" / "incarnation").read_text()

    async def main() -> None:  # once the first has left, the dir is free
        await first.join()
        await first.leave()
        again = AtomicGroup(address, data_dir=tmp_path / "a")
        await again.join()
        await again.leave()

    asyncio.run(main())
    assert int((tmp_path / "a" / "incarnation").read_text()) == int(incarnation) + 1


def test_a_damaged_data_dir_is_a_clear_error(tmp_path: Path) -> None:
    address = loopback_group_address()
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match="not a directory"):
        AtomicGroup(address, data_dir=tmp_path / "file")
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "incarnation").write_text("garbage\n")
    with pytest.raises(ConfigError, match="incarnation"):
        AtomicGroup(address, data_dir=tmp_path / "b")
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "atomic.sqlite").write_bytes(b"not a database" * 100)
    group = AtomicGroup(address, data_dir=tmp_path / "c")
    with pytest.raises(ConfigError, match="not a member's store"):
        asyncio.run(group.join())
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / JOURNAL).write_bytes(b'{"position":1,"mid":"a:1"}\ngarbage\n')
    with pytest.raises(ConfigError, match="line 2 is not a journal entry"):
        Journal(tmp_path / "d" / JOURNAL)


def test_a_body_that_is_not_json_is_refused_and_sends_nothing(tmp_path: Path) -> None:
    async def main() -> None:
        group = AtomicGroup(loopback_group_address(), data_dir=tmp_path / "a")
        await group.join()
        try:
            deep: list[object] = []
            for _ in range(300):
                deep = [deep]
            for body in ({1, 2}, b"x", 2**70, deep):
                with pytest.raises(ConfigError, match="not a JSON value"):
                    await group.send(body, timeout=10)
            assert (await group.send("fine", timeout=10)).committed  # a group of one
        finally:
            await group.leave()

    asyncio.run(main())


def _node(tmp: Path, group: str, stdin: bytes) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "gossamer.cli.main", "atomic", "node", "--group", group,
         "--data-dir", str(tmp), "--interactive", "--session-period", "0.2"],
        input=stdin, capture_output=True, timeout=120)


@pytest.mark.processes
def test_a_send_then_the_end_of_input_waits_for_the_decision(tmp_path: Path) -> None:
    done = _node(tmp_path / "a", loopback_group_address(),
                 b"send hello\nsend [" + b"[" * 300 + b"]" * 300 + b"]\n" + b" " * 70_000
                 + b"send tail\n")
    out = done.stdout.decode().splitlines()
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert [line.split()[0] for line in out if not line.startswith("ready")] == [
        "error:", "error:", "delivered", "committed"] or sorted(
        line.split()[0] for line in out if not line.startswith("ready")) == [
        "committed", "delivered", "error:", "error:"], out
    assert sum("tail" in line for line in out) == 0  # the long line's tail ran nothing
    assert b"Traceback" not in done.stderr and b"never retrieved" not in done.stderr


def test_count_must_not_be_negative() -> None:
    from gossamer.cli.main import build_parser

    with pytest.raises(SystemExit):
        build_parser().parse_args(["atomic", "node", "--group", "239.1.2.3:5000",
                                   "--count", "-3"])
    assert isinstance(build_parser().parse_args(
        ["atomic", "node", "--group", "239.1.2.3:5000", "--count", "0"]), argparse.Namespace)


def test_a_command_body_is_taken_exactly_or_as_text() -> None:
    from gossamer.services.atomic.cli import body_of

    assert body_of('{"a": [1, 2.5]}') == {"a": [1, 2.5]}
    assert body_of("123456789012345678901234567890") == 123456789012345678901234567890
    assert body_of("hello there") == "hello there"
    for text in ("NaN", "Infinity", "[1e400]"):
        assert body_of(text) == text  # never a null or an inf sent in its place
