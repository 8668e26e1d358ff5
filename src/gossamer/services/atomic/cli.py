"""``gossamer atomic node``: one member of an atomic multicast group on an IP multicast group
(``--group 239.x.y.z:port``; loopback by default). It prints ``ready NAME``, then
``delivered MID ORIGIN BODY`` for each confirmed message, ``committed MID`` / ``aborted MID``
for its own sends, and ``member+ NAME`` / ``member- NAME`` as the group changes, and with
``--print-votes`` ``voted MID yes|no`` once each of its votes has left (a YES: after the
message is on disk).
With ``--interactive`` it reads commands from stdin, one a line:

  send TEXT   multicast TEXT atomically (a JSON value, or else the text)
  members     ``members A,B,C`` as this member knows the group
  leave       leave the group and exit (so do the end of input, SIGINT and SIGTERM)

A send goes to the group as this member knows it when it sends (its snapshot): right after
``ready`` that may be itself alone, until the others' ``member+`` lines come (a session period
or two), and a member joining while a send is decided may make it abort. A script that wants
every member in the snapshot waits for their ``member+`` lines (or ``members``) first.

``--send-every SECONDS --count N`` sends N numbered messages on its own (an automated sender).
With ``--data-dir DIR`` each delivery is first appended to the journal ``DIR/delivered.jsonl``
(``{"position", "mid", "origin", "body"}`` a line, fsync'd), which is the node's record: every
message this member delivered is in it exactly once, even across kill -9 and restarts on the
same directory (the atomic layer hands over again what the journal had not taken; positions up
to the journal's last are skipped). The printed line follows the journal's write, so a kill
between the two leaves a delivery in the journal that was never printed, never the reverse.
The journal and the member's store (``DIR/atomic.sqlite``) belong together: a journal kept
beside a new store would skip the new store's first positions as held.

The datagrams are authenticated with the group key (``--group-key``, else
``$GOSSAMER_GROUP_KEY``, else on loopback a built-in key, said in a log line).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import math
import signal
import sys
from pathlib import Path
from typing import Any

import orjson
from rich.console import Console

from ...core.argtypes import directory as _directory
from ...core.argtypes import non_negative_int
from ...core.argtypes import seconds as _seconds
from ...core.errors import ConfigError, OperationError, StateError
from ...core.segments import SegmentSink
from ...core.traceio import trace_path, write_settings
from ...runtimes.net import DEFAULT_RECV_BUFFER
from ...runtimes.net.lines import command_lines, stdin_reader
from ...runtimes.net.looppolicy import run as run_loop
from .api import AtomicGroup, Delivered
from .journal import JOURNAL, Journal

__all__ = ["add_atomic_parser", "body_of"]

MAX_LINE = 8_192
#: what the pipeline checks on an atomic trace: the atomicity check of its ``atomic`` rows,
#: and no per-node delivery check (reliability, FIFO, own delivery) of any layer: they would
#: take an aborted message for a lost one (as ``experiments/atomic.toml`` says too), and SRM
#: skips what a killed member missed of its own old sequence
ANALYSIS_SETTINGS: dict[str, Any] = {"services": ["atomic"], "replay": None,
                                     "checks": {"layers": [], "fifo_layers": []}}


def _say(text: str) -> None:
    try:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()
    except (BrokenPipeError, ValueError):
        return


def _not_a_number(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is out of a float's range")
    return value


def body_of(text: str) -> Any:
    """What ``send TEXT`` sends: TEXT as a JSON value, else TEXT itself. Numbers are taken
    exactly (an integer over 64 bits is refused when sent, never rounded to a float); NaN,
    Infinity and a float out of range make it text."""
    try:
        return json.loads(text, parse_constant=_not_a_number, parse_float=_finite)
    except (ValueError, RecursionError):
        return text


async def _send(group: AtomicGroup, body: Any) -> None:
    try:
        sent = await group.send(body)
        _say(f"{'committed' if sent.committed else 'aborted'} {sent.mid}")
    except (OperationError, ConfigError, StateError) as exc:
        _say(f"error: {exc}")


def decisions_within(args: argparse.Namespace) -> float:
    """How long a leave waits for the sends on their way: the atomic period (5 session
    periods) twice over, and at least 5 s."""
    return max(5.0, 10.0 * float(args.session_period))


async def run_node(args: argparse.Namespace) -> int:
    sink = None
    if args.trace_dir is not None:
        sink = SegmentSink(None)
    group = AtomicGroup(args.group, data_dir=args.data_dir, group_key=args.group_key,
                        ttl=args.ttl, session_period=args.session_period, trace=sink,
                        run=args.run, recv_buffer=args.recv_buffer,
                        drop_rate=args.drop_rate)
    # (the group made the data dir) the journal is opened before the first delivery can come
    journal = None if args.data_dir is None else Journal(args.data_dir / JOURNAL)
    if sink is not None:
        sink.path = trace_path(args.trace_dir, args.run, group.name)
        write_settings(args.trace_dir, args.run, ANALYSIS_SETTINGS)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    tasks: set[asyncio.Task[None]] = set()

    sends: set[asyncio.Task[None]] = set()  # waited for (bounded) before leaving

    def spawn(coro: Any, into: set[asyncio.Task[None]] = tasks) -> None:
        task = loop.create_task(coro)
        into.add(task)
        task.add_done_callback(into.discard)

    def sending(coro: Any) -> None:
        spawn(coro, sends)

    try:
        group.on_member = lambda member, joined: _say(f"member{'+' if joined else '-'} {member}")
        if args.print_votes:
            group.on_vote = lambda mid, yes: _say(f"voted {mid} {'yes' if yes else 'no'}")

        def delivered(message: Delivered) -> None:
            # journaled (fsync'd) before it is printed and before this returns, which
            # acknowledges it: a kill at any point loses nothing and repeats nothing
            if journal is not None and not journal.append(message):
                return
            body = orjson.dumps(message.body).decode()
            _say(f"delivered {message.mid} {message.origin} {body}")

        group.on_delivered = delivered
        await group.join()
        _say(f"ready {group.name}")
        waits: list[asyncio.Task[Any]] = [loop.create_task(stop.wait())]
        if args.count:
            async def automated() -> None:
                for n in range(1, args.count + 1):
                    await asyncio.sleep(args.send_every)
                    sending(_send(group, {"from": group.name, "n": n}))

            spawn(automated())
        if args.interactive:
            stdin = await stdin_reader(MAX_LINE)

            async def read() -> None:
                async for raw in command_lines(stdin, MAX_LINE):
                    if raw is None:
                        _say(f"error: a command line has at most {MAX_LINE} bytes")
                        continue
                    verb, _, rest = raw.decode(errors="replace").strip().partition(" ")
                    if verb == "leave":
                        return
                    if verb == "send" and rest:
                        sending(_send(group, body_of(rest)))
                    elif verb == "members":
                        _say("members " + ",".join(group.members()))
                    elif verb:
                        _say("error: commands: send TEXT | members | leave")

            waits.append(loop.create_task(read()))
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        for wait in waits:
            wait.cancel()
        for task in tasks:  # no new sends (the automated sender)
            task.cancel()
        if sends:  # a send then leave (or the end of input): its decision first, bounded
            _, late = await asyncio.wait(set(sends), timeout=decisions_within(args))
            if late:
                _say(f"error: leaving with {len(late)} sends undecided (they may still "
                     f"commit)")
    finally:
        for task in [*tasks, *sends]:
            task.cancel()
        await asyncio.gather(*tasks, *sends, return_exceptions=True)
        await group.leave()
        if journal is not None:
            journal.close()
        if sink is not None:
            sink.close()
    return 0


def add_atomic_parser(
    verbs: argparse._SubParsersAction[argparse.ArgumentParser],
) -> argparse.ArgumentParser:
    """Add the ``atomic`` verb to ``verbs``."""
    atomic = verbs.add_parser("atomic", help="atomic multicast over SRM (seed 004)")
    sub = atomic.add_subparsers(dest="atomic_verb", metavar="ACTION", required=True)
    node = sub.add_parser("node", help="run one member of an atomic multicast group",
                          description=__doc__,
                          formatter_class=argparse.RawDescriptionHelpFormatter)
    node.add_argument("--group", required=True, metavar="ADDR:PORT",
                      help="the IPv4 multicast group, e.g. 239.1.2.3:5000")
    node.add_argument("--data-dir", type=_directory, default=None,
                      help="the member's name and sqlite store (default: in memory)")
    node.add_argument("--group-key", default=None, metavar="KEY",
                      help="the group's secret, at least 16 bytes (default: "
                           "$GOSSAMER_GROUP_KEY; on loopback a built-in key)")
    node.add_argument("--ttl", type=int, default=1, help="multicast TTL (default 1)")
    node.add_argument("--recv-buffer", type=int, default=DEFAULT_RECV_BUFFER, metavar="BYTES",
                      help=f"UDP receive buffer asked of the kernel (default {DEFAULT_RECV_BUFFER}"
                           f"; the size granted is logged at INFO)")
    node.add_argument("--drop-rate", type=float, default=0.0, metavar="P",
                      help="drop this fraction of the datagrams received, traced (loss on a "
                           "network that loses none, such as loopback; default 0)")
    node.add_argument("--session-period", type=_seconds, default=1.0, metavar="SECONDS",
                      help="SRM session message period (default 1 s)")
    node.add_argument("--send-every", type=_seconds, default=1.0, metavar="SECONDS",
                      help="the automated sender's interval")
    node.add_argument("--count", type=non_negative_int, default=0,
                      help="messages the automated sender sends (default 0: none)")
    node.add_argument("--print-votes", action="store_true",
                      help="print 'voted MID yes|no' once each vote of this member has left")
    node.add_argument("--interactive", action="store_true", help="read commands from stdin")
    node.add_argument("--trace-dir", type=Path, default=None,
                      help="write the trace under DIR/trace/RUN/NAME.parquet")
    node.add_argument("--run", default="atomic-live", help="the run id of the trace")
    node.add_argument("--log-level", default="WARNING",
                      choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    node.set_defaults(handler=_cmd_node)
    return atomic


def _cmd_node(args: argparse.Namespace, console: Console) -> int:
    logging.basicConfig(level=args.log_level, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    return run_loop(run_node(args))
