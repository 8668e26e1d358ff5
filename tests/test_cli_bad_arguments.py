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
    (["appsync", "server", "--port", "0", "--session-key-for", "bad!name=k"],
     "a session id is"),
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


@pytest.mark.parametrize(("content", "says"), [
    (None, "No such file"),
    ('{"a": 1}\nnot json\n', "line 2: not JSON"),
    ('{"a": 1}\n\n[1, 2]\n', "line 3: an activity is a JSON object"),
])
def test_activity_client_send_file_errors_are_one_line_before_connecting(
        content: str | None, says: str, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    send = tmp_path / "activities.jsonl"
    if content is not None:
        send.write_text(content)
    # port 9 (discard): nothing listens; the file is read before any connection is tried
    assert main(["activity", "client", "-rh", "127.0.0.1", "-rp", "9", "--send",
                 str(send)]) == 2
    out = capsys.readouterr()
    text = " ".join((out.out + out.err).split())
    assert "error:" in text and says in text and "Traceback" not in text
    assert "cannot" not in text and "refused" not in text.lower()


def test_ctrl_c_in_a_client_verb_exits_130_without_a_traceback(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import gossamer.services.activity.cli as activity_cli

    async def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt  # what asyncio.run raises once Ctrl-C cancelled the verb

    monkeypatch.setattr(activity_cli, "probe", interrupted)
    assert main(["activity", "status", "127.0.0.1:9", "-s", "secret"]) == 130
    out = capsys.readouterr()
    assert "Traceback" not in out.out + out.err


@pytest.mark.parametrize(("verb", "store"), [
    (["hub", "--port", "0"], "hub.sqlite"),
    (["appsync", "server", "--port", "0"], "appsync.sqlite"),
    (["activity", "server", "-lp", "0"], "activity.sqlite"),
])
@pytest.mark.parametrize("damage", ["junk", "a directory"])
def test_a_store_that_cannot_be_opened_is_one_error_line_and_left_as_it_was(
        verb: list[str], store: str, damage: str, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    # each printed a sqlite3 traceback (file is not a database) and exited 1
    data = tmp_path / "data"
    data.mkdir()
    path = data / store
    if damage == "junk":
        path.write_bytes(b"not a database at all\n" * 50)
    else:
        path.mkdir()
    assert main([*verb, "--data-dir", str(data)]) == 2
    out = capsys.readouterr()
    text = " ".join((out.out + out.err).split())
    assert f"error: {path}: cannot be opened as a store" in text, text
    assert "Traceback" not in text and "new network" not in text
    if damage == "junk":
        assert path.read_bytes() == b"not a database at all\n" * 50


@pytest.mark.parametrize(("argv", "says"), [
    (["activity", "server", "-lp", "0", "-s", ""], "the server secret must not be empty"),
    (["activity", "status", "127.0.0.1:9", "-s", ""], "the server secret must not be empty"),
    (["activity", "server", "-lp", "0", "--trace-dir", "{tmp}/afile"], "not a directory"),
])
def test_activity_arguments_refused_by_the_parser(
        argv: list[str], says: str, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    # an empty secret was a "protocol bug" traceback once listening; a file as the trace
    # directory a NotADirectoryError traceback
    (tmp_path / "afile").write_text("mine")
    with pytest.raises(SystemExit) as exited:
        main([a.format(tmp=tmp_path) for a in argv])
    assert exited.value.code == 2
    out = capsys.readouterr()
    assert says in out.err and "Traceback" not in out.out + out.err


def test_an_activity_server_that_cannot_listen_is_exit_2_and_prints_no_secret(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["activity", "server", "-lp", "0", "-lh", "999.9.9.9"]) == 2
    out = capsys.readouterr()
    assert "error: the activity server cannot listen on 999.9.9.9:0" in out.out
    assert "new network" not in out.out  # the secret of a server that never ran
    assert main(["activity", "server", "-lp", "0", "-rp", "9"]) == 2  # -rp alone joins
    assert "joining a network needs its secret (-s)" in capsys.readouterr().out


@pytest.mark.parametrize(("argv", "says"), [
    (["--zone", "xyz"], "error: a zone id is 4 hex digits, got 'xyz'"),
    (["--session-key", ""], "error: a session key is 1..256 characters"),
])
def test_appsync_errors_name_their_own_option_only(
        argv: list[str], says: str, capsys: pytest.CaptureFixture[str]) -> None:
    # every ValueError ended "(--min-ms, --max-ms, --tout)", pointing at the round settings
    assert main(["appsync", "server", "--port", "0", *argv]) == 2
    text = capsys.readouterr().out
    assert says in text and "--min-ms" not in text, text
