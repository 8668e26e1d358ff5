"""``gossamer activity server|client|status``: run a seed-003 server, talk to the network, or
see its tree.

``add_activity_parser(verbs)`` plugs the verb into ``gossamer.cli.main``.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import itertools
import logging
import secrets
import signal
import sys
import threading
from pathlib import Path
from typing import Any

import orjson
from rich.console import Console
from rich.markup import escape
from rich.tree import Tree

from ...core.argtypes import directory as _directory
from ...core.argtypes import host_port
from ...core.argtypes import port as _port
from ...core.argtypes import positive_int as _positive_int
from ...core.argtypes import seconds as _seconds
from ...core.errors import ConfigError, OperationError
from ...core.segments import SegmentSink
from ...core.trace import TraceSink
from ...core.traceio import trace_path, write_settings
from ...protocols.activity import ANONYMOUS
from ...runtimes.net.looppolicy import run as run_loop
from .client import ActivityClient
from .server import DEFAULT_PORT, ActivityTcpServer
from .status import NetworkView, ServerView, probe

__all__ = ["add_activity_parser"]


def add_activity_parser(
    verbs: argparse._SubParsersAction[argparse.ArgumentParser],
) -> argparse.ArgumentParser:
    activity = verbs.add_parser("activity", help="the seed-003 activity network (server, client)")
    sub = activity.add_subparsers(dest="activity_verb", metavar="ACTION", required=True)

    server = sub.add_parser("server", help="run one server of the network")
    server.add_argument("-lh", "--local-host", default="127.0.0.1")
    server.add_argument("-lp", "--local-port", type=_port, default=DEFAULT_PORT)
    server.add_argument("-rh", "--remote-host", default=None,
                        help="join the network through the server on this host (with -rp, "
                             f"default port {DEFAULT_PORT})")
    server.add_argument("-rp", "--remote-port", type=_port, default=None,
                        help="join the network through the server on this port (with -rh, "
                             "default 127.0.0.1)")
    server.add_argument("-s", "--secret", type=_secret, default=None,
                        help="the network's server secret (generated and printed if absent)")
    server.add_argument("-a", "--announce-interval", type=_positive_int, default=5000,
                        help="milliseconds between SERVER_ANNOUNCE messages")
    server.add_argument("--data-dir", type=_directory, default=None,
                        help="directory for users (sqlite)")
    server.add_argument("--max-depth", type=_positive_int, default=None)
    server.add_argument("--id", default=None, help="server id (default: random)")
    _trace_options(server)
    server.set_defaults(handler=_cmd_server)

    client = sub.add_parser("client", help="log in and send/receive activities (JSON lines)")
    client.add_argument("-rh", "--remote-host", default="127.0.0.1")
    client.add_argument("-rp", "--remote-port", type=_port, default=DEFAULT_PORT)
    client.add_argument("-u", "--username", default=ANONYMOUS)
    client.add_argument("-s", "--secret", default=None,
                        help="without it a username is registered with a generated secret")
    client.add_argument("--send", default=None, metavar="FILE",
                        help="send each JSON object line of FILE as an activity, then log out")
    client.add_argument("--listen", action="store_true",
                        help="only print received activities until interrupted")
    client.add_argument("--id", default=None,
                        help="client id: the origin of its activities in traces (default: "
                             "random)")
    _trace_options(client)
    client.set_defaults(handler=_cmd_client)

    status = sub.add_parser("status", help="the network's tree: each server's address, level, "
                                           "parent and connected clients")
    status.add_argument("address", type=host_port, metavar="HOST:PORT",
                        help="any server of the network")
    status.add_argument("-s", "--secret", type=_secret, required=True,
                        help="the network's server secret")
    status.add_argument("--wait", type=_seconds, default=6.0,
                        help="seconds to listen for announcements: a little over the "
                             "network's announce interval (default 6, for the default 5 s)")
    status.add_argument("--json", action="store_true", help="one JSON object per server")
    status.set_defaults(handler=_cmd_status)
    return activity


def _error(console: Console, message: str) -> None:
    """One line, never wrapped at the terminal's width (nor at 80 columns in a pipe)."""
    console.print(f"[red]error:[/] {escape(message)}", soft_wrap=True, highlight=False)


def _cmd_status(args: argparse.Namespace, console: Console) -> int:
    host, port = args.address
    try:
        view = run_loop(probe(host, port, args.secret, wait=args.wait))
    except OperationError as exc:
        _error(console, str(exc))
        return 1
    if args.json:
        for server in sorted(view.servers.values(), key=lambda s: s.id):
            sys.stdout.write(orjson.dumps(
                {"id": server.id, "hostname": server.hostname, "port": server.port,
                 "level": server.level, "parent": server.parent,
                 "clients": server.load}).decode() + "\n")
        return 0
    console.print(_status_tree(view))
    console.print(f"{len(view.servers)} servers, "
                  f"{sum(s.load for s in view.servers.values())} clients, {view.users} "
                  f"registered users (seen from {view.entry})", highlight=False)
    return 0


def _status_tree(view: NetworkView) -> Tree:
    tree = Tree(f"activity network (probed at {view.entry}, level {view.entry_level})")

    def label(server: ServerView) -> str:
        level = "?" if server.level is None else str(server.level)
        return (f"{server.id}  {server.hostname}:{server.port}  level {level}  "
                f"clients {server.load}")

    def grow(branch: Tree, server: ServerView, seen: set[str]) -> None:
        seen.add(server.id)
        for child in view.children(server.id):
            if child.id not in seen:
                grow(branch.add(label(child)), child, seen)

    seen: set[str] = set()
    for root in view.children(None):
        grow(tree.add(label(root)), root, seen)
    for server in view.servers.values():  # in a cycle of stale parents: shown flat
        if server.id not in seen:
            tree.add(label(server) + f"  (parent {server.parent})")
    return tree


def _secret(text: str) -> str:
    if not text:
        raise argparse.ArgumentTypeError("the server secret must not be empty")
    return text


def _trace_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--trace-dir", type=_directory, default=None,
                        help="write the trace to TRACE_DIR/trace/RUN/: segment files while "
                             "running (they survive kill -9), ID.parquet at exit")
    parser.add_argument("--run", default="activity", help="run id written in the trace")


#: what an activity run promises, stored beside its trace for ``gossamer analyze``: every
#: activity reaches the servers and the clients logged in while it was published (sessions:
#: nothing is sent again across a logout or a lost server), in each origin's order
ANALYSIS_SETTINGS: dict[str, Any] = {
    "services": ["activity"], "replay": None,
    "checks": {"layers": ["activity"], "fifo_layers": ["activity"],
               "session_layers": ["activity"], "own_delivery_layers": []}}


def _open_trace(args: argparse.Namespace, part: str) -> tuple[SegmentSink | None, Path | None]:
    if args.trace_dir is None:
        return None, None
    path = trace_path(args.trace_dir, args.run, part)
    write_settings(args.trace_dir, args.run, ANALYSIS_SETTINGS)
    return SegmentSink(path), path


def _close_trace(sink: TraceSink | None, path: Path | None, console: Console) -> None:
    if sink is not None and isinstance(sink, SegmentSink):
        sink.close()
        console.print(f"trace: {path} ({sink.rows_written} rows)", soft_wrap=True,
                      highlight=False)


def _cmd_server(args: argparse.Namespace, console: Console) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    secret = args.secret
    # -rh or -rp alone joins too: the other defaults (the client's defaults); it started a
    # network of its own when only -rp was given
    joins = args.remote_host is not None or args.remote_port is not None
    remote = None if not joins else (args.remote_host or "127.0.0.1",
                                     DEFAULT_PORT if args.remote_port is None
                                     else args.remote_port)
    new_network = secret is None
    if new_network:
        if joins:
            raise ConfigError("joining a network needs its secret (-s)")
        secret = secrets.token_hex(16)
    data_dir = None
    if args.data_dir is not None:
        data_dir = Path(args.data_dir)
        data_dir.mkdir(parents=True, exist_ok=True)
    server_id = args.id or secrets.token_hex(8)
    sink, path = _open_trace(args, server_id)
    try:
        server = ActivityTcpServer(secret=secret, host=args.local_host, port=args.local_port,
                                   remote=remote,
                                   announce_interval=args.announce_interval / 1000,
                                   data_dir=data_dir, max_depth=args.max_depth,
                                   server_id=server_id, trace=sink, run=args.run)
        return run_loop(_serve(server, console, new_network=new_network))
    finally:
        _close_trace(sink, path, console)


async def _serve(server: ActivityTcpServer, console: Console, *, new_network: bool) -> int:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await server.start()  # ConfigError (exit 2) when it cannot listen or use its data dir
        if new_network:  # once it listens: a secret of a server that never ran helps nobody
            console.print(f"new network, server secret: {server.secret}", highlight=False)
        host, port = server.address
        console.print(f"activity server {server.server_id} listening on {host}:{port}",
                      highlight=False)
        stopped = asyncio.create_task(stop.wait())
        failed = asyncio.create_task(server.failed.wait())
        await asyncio.wait({stopped, failed}, return_when=asyncio.FIRST_COMPLETED)
        stopped.cancel()
        failed.cancel()
    finally:
        await server.stop()
    if server.failure is not None:
        _error(console, str(server.failure))
        return 1
    return 0


def _cmd_client(args: argparse.Namespace, console: Console) -> int:
    client_id = args.id or f"{args.username}.{secrets.token_hex(4)}"
    sink, path = _open_trace(args, client_id)
    try:
        return run_loop(_client(args, console, client_id, sink))
    finally:
        _close_trace(sink, path, console)


async def _client(args: argparse.Namespace, console: Console, client_id: str,
                  sink: TraceSink | None) -> int:
    client = ActivityClient(args.remote_host, args.remote_port, username=args.username,
                            secret=args.secret, client_id=client_id, trace=sink,
                            node=client_id, run=args.run)
    sends = None if args.send is None else _activities(args.send)  # before logging in
    try:
        info = await client.connect()
    except (OSError, OperationError) as exc:
        _error(console, str(exc))
        return 1
    if client.generated_secret:
        console.print(f"registered {args.username} with secret: {client.secret}",
                      highlight=False)
    console.print(info, highlight=False)
    printer = asyncio.create_task(_print_activities(client))
    try:
        if sends is not None:
            for activity in sends:
                await client.send(activity)
        elif not args.listen:
            await _interactive(client, console)
        else:
            await client.closed.wait()
    finally:
        printer.cancel()
        await client.close()
    if client.error:
        _error(console, str(client.error))
        return 1
    return 0


def _activities(path: str) -> list[dict[str, Any]]:
    """The activities of a ``--send`` file, one JSON object a line (blank lines skipped)."""
    try:
        text = Path(path).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"--send {path}: {getattr(exc, 'strerror', None) or exc}") from None
    activities = []
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                activities.append(_activity(line))
            except ValueError as exc:
                raise ConfigError(f"--send {path}, line {number}: {exc}") from None
    return activities


def _activity(line: str) -> dict[str, Any]:
    """One activity typed or read from a file: a JSON object, else ``ValueError``."""
    try:
        activity = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"not JSON: {exc}") from None
    if not isinstance(activity, dict):
        raise ValueError("an activity is a JSON object")
    return activity


async def _print_activities(client: ActivityClient) -> None:
    while True:
        activity = await client.receive()
        sys.stdout.write(orjson.dumps(activity).decode() + "\n")
        sys.stdout.flush()


def _stdin_lines() -> asyncio.Queue[str]:
    """Lines of stdin ("" at its end) read by a daemon thread: a read blocked on a terminal
    must not keep the process alive after Ctrl-C (the loop's executor would, until Enter)."""
    loop = asyncio.get_running_loop()
    lines: asyncio.Queue[str] = asyncio.Queue(maxsize=64)

    def read() -> None:
        for line in itertools.chain(iter(sys.stdin.readline, ""), [""]):
            try:
                asyncio.run_coroutine_threadsafe(lines.put(line), loop).result()
            except (RuntimeError, concurrent.futures.CancelledError):
                return  # the loop is closed or stopping: nobody reads any more

    threading.Thread(target=read, name="stdin", daemon=True).start()
    return lines


async def _interactive(client: ActivityClient, console: Console) -> None:
    lines = _stdin_lines()
    while not client.closed.is_set():
        line = await lines.get()
        if not line:
            return
        if not line.strip():
            continue
        try:
            activity = _activity(line)
        except ValueError as exc:
            console.print(f"[red]{escape(str(exc))}[/]", soft_wrap=True)
            continue
        await client.send(activity)
