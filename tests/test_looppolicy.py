"""The runtime on asyncio's event loop and on uvloop's: the loop the gossamer commands run on
(``GOSSAMER_LOOP``: runtimes/net/looppolicy.py), and what differs between the two loops that
the runtime must not depend on (signal handlers left behind, a clock in whole milliseconds,
stdin that is a file)."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from pathlib import Path

import pytest
import uvloop

from gossamer.cli.main import main
from gossamer.core import Codec, Env, Message, NodeId, Process
from gossamer.core.errors import ConfigError
from gossamer.runtimes.net import looppolicy
from gossamer.runtimes.net.lines import command_lines, stdin_reader

LOOPS = ["asyncio", "uvloop"]


async def _loop_module() -> str:
    return type(asyncio.get_running_loop()).__module__


def test_asyncio_by_default_and_uvloop_when_asked() -> None:
    assert looppolicy.loop_name({}) == "asyncio"
    assert looppolicy.loop_name({"GOSSAMER_LOOP": ""}) == "asyncio"
    assert looppolicy.loop_name({"GOSSAMER_LOOP": " uvloop "}) == "uvloop"
    assert looppolicy.loop_factory({"GOSSAMER_LOOP": "uvloop"}) is uvloop.new_event_loop


def test_uvloop_asked_for_but_not_installed_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # "import uvloop" raises ImportError
    with pytest.raises(ConfigError, match=r"uvloop is not installed \(pip install uvloop\)"):
        looppolicy.loop_name({"GOSSAMER_LOOP": "uvloop"})


def test_an_unknown_loop_is_refused_and_its_coroutine_closed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GOSSAMER_LOOP", "trio")
    with pytest.raises(ConfigError, match="GOSSAMER_LOOP must be one of asyncio, uvloop"):
        looppolicy.loop_name()
    coro = _loop_module()
    with pytest.raises(ConfigError):
        looppolicy.run(coro)
    # closed, not left for the collector ("never awaited" would be an error: filterwarnings)
    assert coro.cr_frame is None


@pytest.mark.parametrize("loop", LOOPS)
def test_run_uses_the_chosen_loop_whatever_policy_is_installed(
        monkeypatch: pytest.MonkeyPatch, loop: str) -> None:
    monkeypatch.setenv("GOSSAMER_LOOP", loop)
    assert looppolicy.run(_loop_module()).startswith(loop)
    # an application (or GOSSAMER_TEST_LOOP) may have installed another loop's policy: the
    # setting still decides
    other = asyncio.DefaultEventLoopPolicy() if loop == "uvloop" else uvloop.EventLoopPolicy()
    installed = asyncio.get_event_loop_policy()
    asyncio.set_event_loop_policy(other)
    try:
        assert looppolicy.run(_loop_module()).startswith(loop)
    finally:
        asyncio.set_event_loop_policy(installed)


@pytest.mark.parametrize("loop", LOOPS)
def test_signal_handlers_a_service_added_do_not_outlive_its_loop(
        monkeypatch: pytest.MonkeyPatch, loop: str) -> None:
    """uvloop leaves them on the closed loop: a SIGTERM while the command writes its trace out
    after the loop would be ignored."""
    monkeypatch.setenv("GOSSAMER_LOOP", loop)
    before = signal.getsignal(signal.SIGTERM)

    async def serve() -> None:
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, lambda: None)

    looppolicy.run(serve())
    assert signal.getsignal(signal.SIGTERM) is before


PAXOS = "127.0.0.1:9"  # never bound: the loop is refused before anything listens


@pytest.mark.parametrize("argv", [
    ["hub", "--port", "0"], ["appsync", "server", "--port", "0"],
    ["activity", "server", "-lp", "0"], ["pubsub", "node", "--port", "0"],
    ["paxos", "node", "--listen", PAXOS, "--member", PAXOS],
], ids=lambda argv: "-".join(argv[:2]))
def test_a_command_refuses_an_unknown_loop_in_one_line_before_making_anything(
        argv: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("GOSSAMER_LOOP", "bogus")
    monkeypatch.chdir(tmp_path)
    assert main([*argv, "--data-dir", str(tmp_path / "data")]) == 2
    out = capsys.readouterr()
    text = " ".join((out.out + out.err).split())  # the console may wrap a long line
    assert "GOSSAMER_LOOP must be one of asyncio, uvloop, got 'bogus'" in text
    assert "Traceback" not in text
    assert list(tmp_path.iterdir()) == []  # no data dir, no trace files


class _Idle:
    """A process that only is: the clock test reads its env."""

    def __init__(self, env: Env) -> None:
        self.env = env
        self.heard: list[NodeId] = []

    def start(self) -> None:
        self.heard.clear()

    def on_message(self, src: NodeId, msg: Message) -> None:
        self.heard.append(src)


@pytest.mark.parametrize("loop", LOOPS)
def test_the_runtime_clock_is_finer_than_a_millisecond_on_either_loop(loop: str) -> None:
    """uvloop's ``loop.time`` counts whole milliseconds, once per loop iteration: a node's
    ``now`` (every trace row's ``t``, so every latency) must not."""
    from harness_net import NetCluster

    cluster = NetCluster(["a"], _Idle, transport="tcp", codec=Codec(max_frame=4096),
                         loop_factory=looppolicy.loop_factory({"GOSSAMER_LOOP": loop}))
    try:
        steps: list[float] = []

        def measure(process: Process) -> None:
            assert isinstance(process, _Idle)
            env = process.env
            first = env.now()
            until = time.monotonic() + 0.0002
            while time.monotonic() < until:  # 0.2 ms of work inside one step of the loop
                continue
            steps.append(env.now() - first)

        cluster.call("a", measure)
        assert steps[0] >= 0.0002, steps  # 0 on a clock read once per loop iteration
    finally:
        cluster.close()


@pytest.mark.parametrize("loop", LOOPS)
@pytest.mark.parametrize("source", ["file", "devnull"])
def test_commands_from_stdin_redirected_from_a_file_or_dev_null(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, loop: str, source: str) -> None:
    """``gossamer paxos node --interactive < commands.txt``: a pipe transport refuses a file
    (asyncio raised ValueError, a traceback; uvloop aborted the process)."""
    path = tmp_path / "commands.txt"
    path.write_bytes(b"put a 1\nget a\n" + b"x" * 100 + b"\nlast")
    with open(path if source == "file" else os.devnull, "rb") as stdin:
        monkeypatch.setattr(sys, "stdin", stdin)
        monkeypatch.setenv("GOSSAMER_LOOP", loop)

        async def read_all() -> list[bytes | None]:
            reader = await stdin_reader(64)
            return [line async for line in command_lines(reader, 64)]

        lines = looppolicy.run(read_all())
    assert lines == ([b"put a 1", b"get a", None, b"last"] if source == "file" else [])
