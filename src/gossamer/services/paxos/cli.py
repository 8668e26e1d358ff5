"""``gossamer paxos node``: one replica of a Multi-Paxos replicated key/value store, a process
over TCP. The replica is named ``--listen HOST:PORT``; ``--member HOST:PORT`` (repeated, itself
included) is the founding group, the same at every replica. It prints ``ready HOST:PORT``, then
``leader NODE`` whenever it hears a new leader and ``applied SLOT INDEX KEY VALUE`` for every
operation applied (in log order; after a restart, from the snapshot on again). With
``--interactive`` it reads commands from stdin, one a line:

  set KEY VALUE   replicate KEY = VALUE (a JSON value, or else the text); ``ok SLOT INDEX`` once
                  decided, ``error: ...`` if not in time (it may still be decided)
  incr KEY N      add the integer N to KEY (the sum stays within 64 bits: an incr that would
                  leave them is refused, here if this replica sees it, else where it applies,
                  where it prints ``refused SLOT INDEX KEY`` and changes nothing)
  get KEY         ``value KEY VALUE`` as applied here (this replica's view, maybe behind)
  status          ``status leader=NODE decided=N members=A,B,C``
  exit            stop once the commands asked are answered (so does the end of input;
                  SIGINT or SIGTERM stop at once)

A command line has at most 16,384 bytes; a longer one is refused whole.

``--data-dir`` keeps the replica's promise, log and snapshots in sqlite (fsync'd), so a replica
restarted (even after ``kill -9``) resumes where it was.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import re
import signal
import sqlite3
import sys
from pathlib import Path
from typing import Any

import orjson
from rich.console import Console

from ...core.argtypes import directory as _directory
from ...core.argtypes import host_port
from ...core.argtypes import seconds as _seconds
from ...core.errors import ConfigError, OperationError
from ...protocols.ordering.paxos import DecidedOp, PaxosConfig
from ...runtimes.net import StoreOpenError
from ...runtimes.net.lines import command_lines, stdin_reader
from ...runtimes.net.looppolicy import run as run_loop
from .api import KeyValue, ReplicatedLog

__all__ = ["add_paxos_parser"]

MAX_LINE = 16_384


def _say(text: str) -> None:
    try:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()
    except (BrokenPipeError, ValueError):
        return  # nobody reads any more: the replica keeps running


def _value(text: str) -> Any:
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return text


_INTEGER = re.compile(r"-?[0-9]+")  # ASCII digits only (str.isdigit takes "²")


async def _command(log: ReplicatedLog, kv: KeyValue, line: str, timeout: float) -> None:
    words = line.split(None, 2)
    if not words:
        return
    verb = words[0].lower()
    try:
        if verb == "set" and len(words) == 3:
            op: dict[str, Any] = {"op": "set", "key": words[1], "value": _value(words[2])}
        elif verb == "incr" and len(words) == 3 and _INTEGER.fullmatch(words[2]):
            op = {"op": "incr", "key": words[1], "by": int(words[2])}
            KeyValue.check(op)
            kv.incremented(words[1], op["by"])  # as far as this replica knows
        elif verb == "get" and len(words) == 2:
            _say(f"value {words[1]} {orjson.dumps(kv.data.get(words[1])).decode()}")
            return
        elif verb == "status" and len(words) == 1:
            members = ",".join(sorted(log.group))
            _say(f"status leader={log.leader} decided={log.decided_upto} members={members}")
            return
        else:
            _say("error: commands: set KEY VALUE | incr KEY N | get KEY | status | exit")
            return
        committed = await log.propose(op, timeout=timeout)
        _say(f"ok {committed.slot} {committed.index}")
    except (OperationError, ConfigError) as exc:
        _say(f"error: {exc}")


async def run_node(args: argparse.Namespace) -> int:
    listen = "{}:{}".format(*args.listen)
    members = ["{}:{}".format(*m) for m in args.member]
    if listen not in members:
        members.append(listen)
    config = PaxosConfig(heartbeat_interval=args.heartbeat, suspect_timeout=args.suspect)
    kv = KeyValue()
    try:
        log = ReplicatedLog(listen, members, config=config, snapshot_fn=kv.snapshot,
                            restore_fn=kv.restore,
                            data_dir=None if args.data_dir is None else Path(args.data_dir),
                            cluster_key=args.cluster_key,
                            trace_dir=None if args.trace_dir is None else Path(args.trace_dir),
                            run=args.run)
    except (sqlite3.DatabaseError, StoreOpenError) as exc:
        raise ConfigError(f"{args.data_dir}: not a replica's store ({exc})") from None

    def applied(op: DecidedOp) -> None:
        done = kv.apply(op.payload)
        if isinstance(op.payload, dict) and isinstance(op.payload.get("key"), str):
            key = op.payload["key"]
            if done:
                value = orjson.dumps(kv.data.get(key)).decode()
                _say(f"applied {op.slot} {op.index} {key} {value}")
            else:
                _say(f"refused {op.slot} {op.index} {key}")

    log.subscribe(applied)
    log.watch_leader(lambda leader: _say(f"leader {leader}"))
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    commands: set[asyncio.Task[None]] = set()
    try:
        await log.start()
        _say(f"ready {listen}")
        waits: list[asyncio.Task[Any]] = [loop.create_task(stop.wait()),
                                          loop.create_task(log.failed.wait())]
        if args.interactive:
            stdin = await stdin_reader(MAX_LINE)

            async def read() -> None:
                async for raw in command_lines(stdin, MAX_LINE):
                    if raw is None:
                        _say(f"error: a command line has at most {MAX_LINE} bytes")
                        continue
                    line = raw.decode(errors="replace").strip()
                    if line.lower() == "exit":
                        break
                    task = loop.create_task(_command(log, kv, line, args.timeout))
                    commands.add(task)
                    task.add_done_callback(commands.discard)
                if commands:  # exit or the end of input: the commands asked are answered first
                    await asyncio.wait(set(commands))

            waits.append(loop.create_task(read()))
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        for wait in waits:
            wait.cancel()
    finally:
        for task in commands:
            task.cancel()
        await asyncio.gather(*commands, return_exceptions=True)
        await log.stop()
    if log.net.failure is not None:
        _say(f"error: replica failed: {log.net.failure!r}")
        return 1
    return 0


def add_paxos_parser(
    verbs: argparse._SubParsersAction[argparse.ArgumentParser],
) -> argparse.ArgumentParser:
    """Add the ``paxos`` verb to ``verbs`` (the object ``add_subparsers()`` returned)."""
    paxos = verbs.add_parser("paxos", help="the Multi-Paxos replicated log on its own")
    sub = paxos.add_subparsers(dest="paxos_verb", metavar="ACTION", required=True)
    node = sub.add_parser("node", help="run one replica of a replicated key/value store",
                          description=__doc__,
                          formatter_class=argparse.RawDescriptionHelpFormatter)
    node.add_argument("--listen", type=host_port, required=True, metavar="HOST:PORT",
                      help="where this replica listens; also its name")
    node.add_argument("--member", type=host_port, action="append", required=True,
                      metavar="HOST:PORT", help="a founding replica (repeat for each)")
    node.add_argument("--data-dir", type=_directory, default=None,
                      help="directory of the replica's sqlite store (default: in memory)")
    node.add_argument("--trace-dir", default=None,
                      help="write the trace to TRACE_DIR/trace/RUN/ (segment files while "
                           "running, HOST_PORT.parquet at exit) for gossamer analyze")
    node.add_argument("--run", default="paxos", help="the run id of the trace (default paxos)")
    node.add_argument("--heartbeat", type=_seconds, default=1.0, metavar="SECONDS",
                      help="the leader's NOOP period")
    node.add_argument("--suspect", type=_seconds, default=2.0, metavar="SECONDS",
                      help="suspect the leader after this long without a word from it")
    node.add_argument("--timeout", type=_seconds, default=30.0, metavar="SECONDS",
                      help="how long a command waits for its decision")
    node.add_argument("--cluster-key", default=None, metavar="KEY",
                      help="the secret the replicas share (default: $GOSSAMER_CLUSTER_KEY; "
                           "on 127.0.0.1 a built-in key)")
    node.add_argument("--interactive", action="store_true", help="read commands from stdin")
    node.add_argument("--log-level", default="WARNING",
                      choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    node.set_defaults(handler=_cmd_node)
    return paxos


def _cmd_node(args: argparse.Namespace, console: Console) -> int:
    logging.basicConfig(level=args.log_level, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    return run_loop(run_node(args))
