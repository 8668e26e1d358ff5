"""The activity network over real TCP on 127.0.0.1: in-process servers, the asyncio client,
bad input on a raw socket. Waits are on events with timeouts, never fixed sleeps."""

from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest

from gossamer.core.errors import ConfigError, StateError
from gossamer.protocols.activity import TreeState
from gossamer.services.activity.client import ActivityClient
from gossamer.services.activity.server import ActivityTcpServer

WAIT = 10.0
SECRET = "s3cret"


async def until(condition: Callable[[], bool], what: str) -> None:
    async with asyncio.timeout(WAIT):
        while not condition():
            await asyncio.sleep(0.01)  # polling a condition, bounded by the timeout above


def server(remote: ActivityTcpServer | None = None) -> ActivityTcpServer:
    return ActivityTcpServer(secret=SECRET, port=0, announce_interval=0.2,
                             remote=None if remote is None else remote.address,
                             hash_iterations=10)


def test_three_servers_clients_register_login_broadcast() -> None:
    async def scenario() -> None:
        root = server()
        await root.start()
        a = server(root)
        await a.start()
        b = server(root)
        await b.start()
        try:
            await until(lambda: all(s.core is not None and s.core.state is TreeState.ATTACHED
                                    for s in (a, b)), "children attached")
            assert a.core is not None and a.core.level == 1
            alice = ActivityClient(*a.address, username="alice")  # registers, then logs in
            await alice.connect()
            assert alice.generated_secret and alice.secret
            bob = ActivityClient(*b.address)
            await bob.connect()
            carol = ActivityClient(*root.address)
            await carol.connect()
            for n in range(5):
                await alice.send({"n": n})
            for receiver in (bob, carol):
                got = [await receiver.receive(WAIT) for _ in range(5)]
                assert [g["n"] for g in got] == list(range(5))
                assert {g["authenticated_user"] for g in got} == {"alice"}
            # the name is now known everywhere: registering it again fails
            again = ActivityClient(*root.address, username="alice")
            try:
                await again.connect()
                raise AssertionError("registered twice")
            except Exception as exc:
                assert "REGISTER_FAILED" in str(exc) or "register refused" in str(exc)
            await again.close()
            for c in (alice, bob, carol):
                await c.close()
        finally:
            for s in (b, a, root):
                await s.stop()

    asyncio.run(scenario())


def test_bad_input_on_a_raw_socket() -> None:
    async def scenario() -> None:
        async with server() as s:
            reader, writer = await asyncio.open_connection(*s.address)
            writer.write(b"this is not json\n")
            line = await asyncio.wait_for(reader.readline(), WAIT)
            assert orjson.loads(line) == {"command": "INVALID_MESSAGE",
                                          "info": "JSON parse error while parsing message"}
            assert await asyncio.wait_for(reader.read(), WAIT) == b""  # closed by the server
            writer.close()

    asyncio.run(scenario())


@pytest.mark.processes
def test_cli_server_and_client_processes(tmp_path: Path) -> None:
    async def scenario() -> None:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "gossamer.cli.main", "activity", "server", "-lp", "0",
            "-a", "200", stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL)
        try:
            assert proc.stdout is not None
            async with asyncio.timeout(WAIT):
                first = (await proc.stdout.readline()).decode()
                assert first.startswith("new network, server secret: ")
                ready = (await proc.stdout.readline()).decode()
            port = int(ready.rsplit(":", 1)[1])
            async with ActivityClient("127.0.0.1", port) as listener:
                activities = tmp_path / "a.jsonl"
                activities.write_text('{"n": 1}\n{"n": 2}\n')
                sender = await asyncio.create_subprocess_exec(
                    sys.executable, "-m", "gossamer.cli.main", "activity", "client", "-rp",
                    str(port), "-u", "dora", "--send", str(activities),
                    stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL)
                out, _ = await asyncio.wait_for(sender.communicate(), WAIT)
                assert sender.returncode == 0, out
                assert b"registered dora with secret: " in out
                got = [await listener.receive(WAIT) for _ in range(2)]
                assert [(g["n"], g["authenticated_user"]) for g in got] == [(1, "dora"),
                                                                           (2, "dora")]
        finally:
            proc.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(proc.wait(), WAIT) == 0

    asyncio.run(scenario())


def test_in_process_server_with_the_wrong_secret_fails() -> None:
    async def scenario() -> None:
        async with server() as root:
            bad = ActivityTcpServer(secret="other", port=0, announce_interval=0.2,
                                    remote=root.address, hash_iterations=10)
            async with bad:
                await asyncio.wait_for(bad.failed.wait(), WAIT)
                assert bad.failure is not None and "refused" in bad.failure

    asyncio.run(scenario())


@pytest.mark.processes
def test_cli_server_errors_are_one_line_and_exit_1_or_2() -> None:
    """A server joining with the wrong secret prints one error line and exits 1 (no traceback,
    no retrying for ever); one whose port is taken exits 2, bad input as for the hub and the
    APSYN server."""
    async def run(*args: str) -> tuple[int, str, str]:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "gossamer.cli.main", "activity", "server", *args,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(proc.communicate(), WAIT * 3)
        assert proc.returncode is not None
        return proc.returncode, out.decode(), err.decode()

    async def scenario() -> None:
        async with server() as root:
            host, port = root.address
            code, out, err = await run("-lp", "0", "-a", "200", "-rh", host, "-rp", str(port),
                                       "-s", "wrong-secret")
            assert code == 1, (out, err)
            assert "error:" in out and "refused this network's secret" in out
            assert "Traceback" not in err
            code, out, err = await run("-lp", str(port), "-lh", host)
            assert code == 2, (out, err)
            assert f"error: the activity server cannot listen on {host}:{port}" in out
            assert "Traceback" not in err

    asyncio.run(scenario())


def test_status_probe_draws_the_tree_with_loads() -> None:
    """``activity status``: a chain root <- a <- b with two clients on b and one on the root;
    the probe at a sees every server with its parent and client count, and the rendered tree
    nests b under a under the root. A wrong secret is an error, not an empty tree."""
    from rich.console import Console

    from gossamer.core.errors import OperationError
    from gossamer.services.activity.cli import _status_tree
    from gossamer.services.activity.status import probe

    async def scenario() -> None:
        async with server() as root, server(root) as a, server(a) as b:
            await until(lambda: all(s.core is not None and s.core.state is TreeState.ATTACHED
                                    for s in (a, b)), "chain attached")
            clients = [ActivityClient(*b.address), ActivityClient(*b.address),
                       ActivityClient(*root.address)]
            for c in clients:
                await c.connect()
            ids = {s.server_id: name for s, name in ((root, "root"), (a, "a"), (b, "b"))}
            expected = {"root": (None, 0, 1), "a": ("root", 1, 0), "b": ("a", 2, 2)}
            seen: dict[str, tuple[str | None, int | None, int]] = {}
            try:
                try:
                    async with asyncio.timeout(30):  # probe again until each load is announced
                        while seen != expected:
                            view = await probe(*a.address, SECRET, wait=0.7)
                            assert view.entry == a.server_id
                            seen = {ids[s.id]: (None if s.parent is None else ids[s.parent],
                                                s.level, s.load)
                                    for s in view.servers.values()}
                except TimeoutError:
                    raise AssertionError(f"the probe saw {seen}, not {expected}") from None
                console = Console(width=200, record=True)
                console.print(_status_tree(view))
                lines = console.export_text().splitlines()[1:]  # after the title
                depth = {name: next(i for i, line in enumerate(lines) if sid in line)
                         for sid, name in ids.items()}
                assert depth["root"] < depth["a"] < depth["b"]
                try:
                    await probe(*a.address, "wrong", wait=0.1)
                    raise AssertionError("a wrong secret was accepted")
                except OperationError as exc:
                    assert "refused the secret" in str(exc)
            finally:
                for c in clients:
                    await c.close()

    asyncio.run(scenario())


def test_one_live_server_per_data_dir(tmp_path: Path) -> None:
    # two servers on one data dir registered users into one store behind each other's back
    async def scenario() -> None:
        first = ActivityTcpServer(secret=SECRET, port=0, data_dir=tmp_path, hash_iterations=10)
        await first.start()
        second = ActivityTcpServer(secret=SECRET, port=0, data_dir=tmp_path,
                                   hash_iterations=10)
        with pytest.raises(StateError, match="another live activity server uses this"):
            await second.start()
        await first.stop()
        again = ActivityTcpServer(secret=SECRET, port=0, data_dir=tmp_path, hash_iterations=10)
        await again.start()  # the lock went with the first server
        await again.stop()
        with pytest.raises(ConfigError, match="non-empty"):
            ActivityTcpServer(secret="", port=0)

    asyncio.run(scenario())
