"""``gossamer hub``: run the seed-000 hub until SIGINT/SIGTERM, tracing to DATA_DIR.

``add_hub_parser(verbs)`` plugs the verb into ``gossamer.cli.main``; ``main`` runs it alone.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console

from ...core.argtypes import directory as _directory
from ...core.argtypes import port as _port
from ...core.argtypes import positive_int as _positive_int
from ...core.errors import ConfigError, GossamerError
from ...core.segments import SegmentSink
from ...core.traceio import trace_path, write_settings
from ...protocols.replica.hub_service import DEFAULT_KEEPER
from ...runtimes.net.looppolicy import run as run_loop
from .hub_server import DEFAULT_MAX_FRAME, HubServer

__all__ = ["add_hub_parser", "main"]

TRACE_PART = "hub"


def _default_web_root() -> str | None:
    """The repository's ``web/`` (browser client and demo), for a source checkout."""
    candidate = Path(__file__).resolve().parents[4] / "web"
    return str(candidate) if (candidate / "index.html").is_file() else None


def add_hub_parser(
    verbs: argparse._SubParsersAction[argparse.ArgumentParser],
) -> argparse.ArgumentParser:
    """Add the ``hub`` verb to ``verbs`` (the object ``add_subparsers()`` returned)."""
    hub = verbs.add_parser(
        "hub", help="run the seed-000 hub (WebSocket relay + web client files)",
        description="Run the replica hub: a WebSocket relay at /ws (and /) that multicasts "
                    "each client's messages to the others and point-to-point messages to their "
                    "dest, plus static files from --web-root on the same port. Stops cleanly on "
                    "SIGINT/SIGTERM.",
    )
    hub.add_argument("--host", default="127.0.0.1")
    hub.add_argument("--port", type=_port, default=8080, help="0 picks a free port")
    hub.add_argument("--data-dir", type=_directory, default="runs/hub",
                     help="the hub's directory (default runs/hub, under the current "
                          "directory): the object snapshot and per-client logs live in "
                          "DATA_DIR/hub.sqlite (kept across restarts), the trace in "
                          "DATA_DIR/trace/RUN/: segment files while running (they survive "
                          "kill -9), hub.parquet at exit")
    hub.add_argument("--no-snapshots", action="store_true",
                     help="run the seed's bare relay: no snapshot, nothing kept")
    hub.add_argument("--web-root", default=_default_web_root(),
                     help="directory served over HTTP at / (default: the repository's web/, "
                          "the browser client and demo page, when it exists)")
    hub.add_argument("--run", default="hub", help="run id written in the trace")
    hub.add_argument("--max-frame", type=_positive_int, default=DEFAULT_MAX_FRAME,
                     help="largest WebSocket message in bytes; larger ones close with 1009")
    hub.add_argument("--send-queue-limit", type=_positive_int, default=1000,
                     help="messages waiting for one client before it is disconnected as slow")
    hub.add_argument("--max-connections", type=_positive_int, default=10_000)
    hub.add_argument("--log-level", default="INFO",
                     choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    hub.set_defaults(handler=_cmd_hub)
    return hub


#: what a seed-000 run promises, stored beside its trace for ``gossamer analyze``: causal
#: delivery (so FIFO per origin), one order of the writes to each object and convergence; a
#: writer applies its own write (it traces no delivery of it)
ANALYSIS_SETTINGS: dict[str, Any] = {
    "services": ["replica"], "replay": None,
    "checks": {"layers": ["replica"], "fifo_layers": ["replica"], "causal_layers": ["replica"],
               "total_order_layers": ["replica"], "total_order_per_key": True,
               "own_delivery_layers": []}}


def _cmd_hub(args: argparse.Namespace, console: Console) -> int:
    web_root = None if args.web_root is None else Path(args.web_root)
    if web_root is not None and not web_root.is_dir():
        raise ConfigError(f"--web-root {web_root} is not a directory")
    data_dir = Path(args.data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    logging.basicConfig(level=args.log_level, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    trace_file = trace_path(data_dir, args.run, TRACE_PART)
    write_settings(data_dir, args.run, ANALYSIS_SETTINGS)
    sink = SegmentSink(trace_file)  # segments while running, compacted to trace_file at exit
    try:
        server = HubServer(host=args.host, port=args.port, web_root=web_root,
                           max_frame=args.max_frame, send_queue_limit=args.send_queue_limit,
                           max_connections=args.max_connections, trace=sink, run=args.run,
                           data_dir=data_dir,
                           keeper=None if args.no_snapshots else DEFAULT_KEEPER)
        code = run_loop(_run_until_signalled(server, console))
    finally:
        sink.close()
    console.print(f"trace: {trace_file} ({sink.rows_written} rows)", soft_wrap=True,
                  highlight=False)
    return code


async def _run_until_signalled(server: HubServer, console: Console) -> int:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    signals = (signal.SIGINT, signal.SIGTERM)
    for sig in signals:
        loop.add_signal_handler(sig, stop.set)
    try:
        try:
            await server.start()
        except OSError as exc:
            where = f"{server.spec.host}:{server.spec.port}"
            raise ConfigError(f"cannot listen on {where}: {exc}") from exc
        ws_url = "ws" + server.url.removeprefix("http") + "ws"
        console.print(f"hub ready at {server.url} (WebSocket {ws_url})",
                      soft_wrap=True, highlight=False, markup=False)
        await stop.wait()
        console.print("stopping", highlight=False)
    finally:
        for sig in signals:
            loop.remove_signal_handler(sig)
        await server.stop()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``hub`` without the rest of the CLI: ``python -m gossamer.services.replica.cli hub``."""
    parser = argparse.ArgumentParser(prog="gossamer")
    add_hub_parser(parser.add_subparsers(dest="verb", metavar="VERB", required=True))
    args = parser.parse_args(argv)
    console = Console()
    try:
        code: int = args.handler(args, console)
    except GossamerError as exc:
        console.print(f"[red]error:[/] {exc}")
        return 2
    return code


if __name__ == "__main__":
    sys.exit(main())
