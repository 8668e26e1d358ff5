"""The event loop the gossamer commands run on (``GOSSAMER_LOOP``: runtimes/net/looppolicy.py)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from gossamer.cli.main import main
from gossamer.core.errors import ConfigError
from gossamer.runtimes.net import looppolicy


async def _loop_module() -> str:
    return type(asyncio.get_running_loop()).__module__


def test_asyncio_by_default_and_uvloop_when_asked() -> None:
    assert looppolicy.loop_name({}) == "asyncio"
    assert looppolicy.loop_name({"GOSSAMER_LOOP": ""}) == "asyncio"
    assert looppolicy.loop_factory({}) is None
    assert looppolicy.loop_name({"GOSSAMER_LOOP": " uvloop "}) == "uvloop"
    assert looppolicy.loop_factory({"GOSSAMER_LOOP": "uvloop"}) is not None


def test_uvloop_asked_for_but_not_installed_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # "import uvloop" raises ImportError
    assert looppolicy.loop_name({}) == "asyncio"
    with pytest.raises(ConfigError, match=r"uvloop is not installed \(pip install"):
        looppolicy.loop_name({"GOSSAMER_LOOP": "uvloop"})


def test_an_unknown_loop_is_refused_and_its_coroutine_closed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GOSSAMER_LOOP", "trio")
    with pytest.raises(ConfigError, match="GOSSAMER_LOOP must be one of asyncio, uvloop"):
        looppolicy.loop_name()
    main = _loop_module()
    with pytest.raises(ConfigError):
        looppolicy.run(main)
    # closed, not left for the collector ("never awaited" would be an error: filterwarnings)
    assert main.cr_frame is None


@pytest.mark.parametrize(("setting", "module"), [("uvloop", "uvloop"), ("asyncio", "asyncio")])
def test_run_uses_the_chosen_loop(monkeypatch: pytest.MonkeyPatch, setting: str,
                                  module: str) -> None:
    monkeypatch.setenv("GOSSAMER_LOOP", setting)
    assert looppolicy.run(_loop_module()).startswith(module)


PAXOS = "127.0.0.1:9"  # never bound: the loop is refused before anything listens


@pytest.mark.parametrize("argv", [
    ["hub", "--port", "0"], ["appsync", "server", "--port", "0"],
    ["activity", "server", "-lp", "0"], ["pubsub", "node", "--port", "0"],
    ["paxos", "node", "--listen", PAXOS, "--member", PAXOS],
], ids=lambda argv: "-".join(argv[:2]))
def test_a_command_refuses_an_unknown_loop_in_one_line(
        argv: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("GOSSAMER_LOOP", "bogus")
    assert main([*argv, "--data-dir", str(tmp_path / "data")]) == 2
    out = capsys.readouterr()
    text = " ".join((out.out + out.err).split())  # the console may wrap a long line
    assert "GOSSAMER_LOOP must be one of asyncio, uvloop, got 'bogus'" in text
    assert "Traceback" not in text
