"""``gossamer appsync server|peer|p2p``: run the APSYN sync server over WebSocket, be a peer of
one of its sessions (set values, print every change as a JSON line), or be a participant of
peer-to-peer mode (a peer whose CTRL the participants choose through a Multi-Paxos log).

``add_appsync_parser(verbs)`` plugs the verb into ``gossamer.cli.main``.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from pathlib import Path

import orjson
from rich.console import Console

from ...core.argtypes import directory as _directory
from ...core.argtypes import port as _port
from ...core.argtypes import positive_int as _positive_int
from ...core.argtypes import seconds as _seconds
from ...core.conn import parse_address
from ...core.errors import ConfigError, OperationError
from ...protocols.appsync import ObjectInfo, Scope
from ...protocols.appsync.server import parse_join_id
from ...runtimes.net.looppolicy import run as run_loop
from .net import DEFAULT_PORT, AppSyncClient, AppSyncP2PNode, AppSyncWsServer

__all__ = ["add_appsync_parser", "default_web_root"]


def default_web_root() -> str | None:
    """The repository's ``web/appsync`` (demo page and browser client), for a source checkout."""
    candidate = Path(__file__).resolve().parents[4] / "web" / "appsync"
    return str(candidate) if (candidate / "index.html").is_file() else None


def add_appsync_parser(
    verbs: argparse._SubParsersAction[argparse.ArgumentParser],
) -> argparse.ArgumentParser:
    appsync = verbs.add_parser("appsync", help="seed 002: APSYN shared state (server, peer)")
    sub = appsync.add_subparsers(dest="appsync_verb", metavar="ACTION", required=True)

    server = sub.add_parser("server", help="the sync server (CTRL), WebSocket at path /")
    server.add_argument("--host", default="127.0.0.1")
    server.add_argument("--port", type=_port, default=DEFAULT_PORT)
    server.add_argument("--session-key", default=None,
                        help="joins must carry ;key=KEY in their id (kept as a salted hash); "
                             "without it every session is accepted")
    server.add_argument("--session-key-for", action="append", default=[],
                        metavar="SESSION=KEY", help="a key of its own for one session "
                                                    "(repeatable)")
    server.add_argument("--data-dir", type=_directory, default=None,
                        help="directory for session state (sqlite)")
    server.add_argument("--min-ms", type=int, default=20,
                        help="min round time in ms (default 20)")
    server.add_argument("--max-ms", type=_positive_int, default=200,
                        help="max round time in ms (default 200)")
    server.add_argument("--tout", type=_positive_int, default=50,
                        help="rounds a silent peer is kept (default 50)")
    server.add_argument("--web-root", default=default_web_root(),
                        help="directory served over HTTP beside the protocol, its index.html "
                             "at / (default: the repository's web/appsync, the demo page and "
                             "the browser client, when it exists)")
    server.add_argument("--zone", default="0001", help="this server's zone id (4 hex digits)")
    server.add_argument("--uplink", default=None, metavar="URL",
                        help="ws:// URL of the master zone's server: join it as a peer of each "
                             "session, sharing the G objects (docs/appsync-zones.md)")
    server.add_argument("--uplink-key", default=None,
                        help="the master zone's session key, if it asks for one")
    server.set_defaults(handler=_cmd_server)

    peer = sub.add_parser("peer", help="join a session; set values; print changes (JSON lines)")
    peer.add_argument("--url", default=f"ws://127.0.0.1:{DEFAULT_PORT}/")
    peer.add_argument("--session", default="demo")
    peer.add_argument("--key", default=None, help="the session key, if the server has one")
    peer.add_argument("--set", action="append", default=[], metavar="NAME.PROP=JSON",
                      help="set a property of a G object (created RW if missing); repeatable")
    peer.add_argument("--watch", type=_seconds, default=None,
                      help="print changes for this long, then exit (default: until Ctrl-C; "
                           "0: exit once the sets are answered)")
    peer.set_defaults(handler=_cmd_peer)

    p2p = sub.add_parser("p2p", help="a participant of peer-to-peer mode: a peer whose CTRL is "
                                     "chosen among the participants through a Multi-Paxos log "
                                     "(prints changes, and {\"ctrl\", \"epoch\"} lines when "
                                     "the CTRL changes)")
    p2p.add_argument("--id", required=True, help="HOST:PORT of this participant's peer link")
    p2p.add_argument("--member", action="append", required=True, metavar="HOST:PORT=WS_URL",
                     help="every participant, this one too: its peer link and the ws:// URL "
                          "where it serves APSYN when chosen as CTRL (repeatable)")
    p2p.add_argument("--session", default="demo")
    p2p.add_argument("--key", default=None, help="the session key, if the sessions have one")
    p2p.add_argument("--cluster-key", default=None,
                     help="the secret the participants' peer links share (>= 16 bytes)")
    p2p.add_argument("--data-dir", type=_directory, default=None,
                     help="directory for the log (the CTRL choice and every round's changes)")
    p2p.add_argument("--set", action="append", default=[], metavar="NAME.PROP=JSON",
                     help="set a property of a G object (created RW if missing); repeatable")
    p2p.add_argument("--watch", type=_seconds, default=None,
                     help="print changes for this long, then exit (default: until Ctrl-C)")
    p2p.set_defaults(handler=_cmd_p2p)
    return appsync


def _cmd_server(args: argparse.Namespace, console: Console) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    data_dir = args.data_dir
    if args.uplink is not None:
        _, _, path = parse_address(args.uplink)  # checked now, not at the first join
        if path is None:
            raise ConfigError(f"--uplink is the master zone's ws://HOST:PORT/, got "
                              f"{args.uplink!r}")
    own: dict[str, str] = {}
    for pair in args.session_key_for:
        name, sep, key = pair.partition("=")
        if not sep or not name or not key:
            raise ConfigError(f"--session-key-for takes SESSION=KEY, got {pair!r}")
        try:
            if parse_join_id(name).session != name:  # a session a join can name
                raise ValueError("a session id has no ';'")
        except ValueError as exc:
            raise ConfigError(f"--session-key-for {name!r}: {exc}") from None
        own[name] = key
    try:
        server = AppSyncWsServer(host=args.host, port=args.port, session_key=args.session_key,
                                 session_keys=own,
                                 data_dir=data_dir, min_ms=args.min_ms, max_ms=args.max_ms,
                                 tout=args.tout, zone=args.zone, uplink=args.uplink,
                                 uplink_key=args.uplink_key,
                                 web_root=None if not args.web_root else Path(args.web_root))
    except ConfigError:  # says which setting itself (zone, session key, web root)
        raise
    except ValueError as exc:  # the round settings the seed's ``sc`` can carry
        raise ConfigError(f"{exc} (--min-ms, --max-ms, --tout)") from None
    return run_loop(_serve(server, console))


async def _serve(server: AppSyncWsServer, console: Console) -> int:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        try:
            await server.start()
        except OSError as exc:
            console.print(f"[red]error:[/] cannot listen on {server.spec.host}:"
                          f"{server.spec.port}: {exc.strerror or exc}", highlight=False)
            return 1
        console.print(f"appsync server listening on {server.url}", highlight=False)
        if server.page_url is not None:
            console.print(f"demo page: {server.page_url} (open it in several tabs)",
                          highlight=False)
        await stop.wait()
    finally:
        await server.stop()
    return 0


def _parse_set(text: str) -> tuple[str, str, object]:
    target, sep, raw = text.partition("=")
    name, dot, prop = target.partition(".")
    if not sep or not dot or not name or not prop:
        raise ConfigError(f"--set takes NAME.PROP=JSON, got {text!r}")
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ConfigError(f"--set {target}: {raw!r} is not JSON") from exc
    try:
        ObjectInfo(Scope.GLOBAL, target)  # the seed's name grammar, checked before connecting
    except ValueError as exc:
        raise ConfigError(f"--set {target}: {exc}") from None
    return name, prop, value


def _cmd_peer(args: argparse.Namespace, console: Console) -> int:
    sets = [_parse_set(text) for text in args.set]
    try:
        return run_loop(_peer(args, sets, AppSyncClient(args.url, args.session,
                                                           key=args.key)))
    except OperationError as exc:
        console.print(f"[red]error:[/] {exc}", highlight=False)
        return 1


def _cmd_p2p(args: argparse.Namespace, console: Console) -> int:
    sets = [_parse_set(text) for text in args.set]
    urls: dict[str, str] = {}
    for pair in args.member:
        link, sep, url = pair.partition("=")
        if not sep or not link or not url.startswith("ws://"):
            raise ConfigError(f"--member takes HOST:PORT=ws://HOST:PORT/, got {pair!r}")
        urls[link] = url
    node = AppSyncP2PNode(args.id, list(urls), urls, args.session, key=args.key,
                          cluster_key=args.cluster_key,
                          data_dir=None if args.data_dir is None else Path(args.data_dir))

    def ctrl_line(ctrl: str, epoch: int) -> None:  # a JSON line beside the changes
        sys.stdout.write(orjson.dumps({"ctrl": ctrl, "epoch": epoch}).decode() + "\n")
        sys.stdout.flush()

    node.on_ctrl = ctrl_line
    try:
        return run_loop(_peer(args, sets, node))
    except OperationError as exc:
        console.print(f"[red]error:[/] {exc}", highlight=False)
        return 1


async def _peer(args: argparse.Namespace, sets: list[tuple[str, str, object]],
                client: AppSyncClient) -> int:
    def show(key: str, value: object) -> None:
        sys.stdout.write(orjson.dumps({"key": key, "value": value}).decode() + "\n")
        sys.stdout.flush()

    async with client:
        for key, value in client.objects().items():
            show(key, value)
        client.watch(show)
        results = []
        for name, prop, value in sets:
            shared = client.share(name, {})
            results.append(shared.set(prop, value))
        for name_prop, future in zip(args.set, results, strict=True):
            status = await asyncio.wait_for(future, client.timeout)
            code = "unknown" if status is None else f"{int(status)} {status.phrase}"
            sys.stderr.write(f"{name_prop.partition('=')[0]}: {code}\n")
        if args.watch is None:
            await asyncio.Event().wait()
        elif args.watch > 0:
            await asyncio.sleep(args.watch)  # the user asked to watch this long
    return 0
