"""Bad arguments to the services' commands are one ``error:`` line and exit code 2, checked
before anything listens or connects: never a traceback (found by trying them as a user)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gossamer.cli.main import main


@pytest.mark.parametrize(("argv", "says"), [
    (["appsync", "server", "--port", "0", "--min-ms", "-1"], "min_ms out of range"),
    (["appsync", "server", "--port", "0", "--min-ms", "500"], "min <= max"),
    (["appsync", "server", "--port", "0", "--tout", "70000"], "tout out of range"),
    (["appsync", "server", "--port", "0", "--zone", "0002", "--uplink", "http://127.0.0.1:9/"],
     "ws://HOST:PORT"),
    (["appsync", "server", "--port", "0", "--zone", "0002", "--uplink", "127.0.0.1:9"],
     "--uplink is the master zone's ws://"),
    (["appsync", "peer", "--url", "ws://127.0.0.1:9/", "--session", "s", "--set",
      "bad-name.x=1"], "bad object name"),
    (["appsync", "peer", "--url", "ws://127.0.0.1:9/", "--session", "s", "--set",
      "b.x-y=1"], "bad object name"),
])
def test_a_bad_argument_is_one_error_line(argv: list[str], says: str,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    out = capsys.readouterr()
    text = " ".join((out.out + out.err).split())  # the console may wrap a long line
    assert "error:" in text and says in text and "Traceback" not in text


@pytest.mark.parametrize("verb", [["appsync", "server"], ["hub"], ["activity", "server"],
                                  ["pubsub", "node"], ["paxos", "node"]])
def test_a_data_dir_that_is_a_file_is_one_error_line(
        verb: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    afile = tmp_path / "afile"
    afile.write_text("not a directory")
    with pytest.raises(SystemExit) as exited:  # argparse's usage error
        main([*verb, "--data-dir", str(afile)])
    assert exited.value.code == 2
    out = capsys.readouterr()
    text = " ".join((out.out + out.err).split())
    assert "not a directory" in text and "Traceback" not in text
    assert afile.read_text() == "not a directory"
