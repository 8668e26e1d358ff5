"""``gossamer pubsub node``: one seed-001 pub/sub node as a process over TCP, with its client.

The node listens on ``--host``:``--port`` (0: a free port) and is named ``host:port``; it joins
through ``--contact HOST:PORT`` (repeatable), or creates the overlay without one. It prints
``ready HOST:PORT mode=MODE`` once listening and ``joined HOST:PORT`` once in the overlay, then:

* ``--interactive``: reads commands from stdin, one a line -- ``subscribe TOPIC``,
  ``unsubscribe TOPIC``, ``publish TOPIC MESSAGE``, ``status``, ``help``, ``exit`` (or end of
  input). Each delivered message is printed as ``deliver TOPIC MESSAGE``; commands are answered with
  ``ok ...`` or ``error: ...`` (a bad command never stops the node).
* ``--auto``: the automated client -- random subscribe/unsubscribe/publish commands on topics
  ``topic0 .. topicK-1`` until ``--publishes N`` messages went out, then it exits once nothing
  was delivered for ``--settle`` seconds.
* neither: it runs until SIGINT/SIGTERM, printing deliveries (none without subscriptions).

``--backups N --ring HOST:PORT ...`` (scribe mode, a fixed ``--port``) replicates topic owners
by Multi-Paxos: a publish is answered ``ok`` only once its topic's group decided it.

``--json`` prints every line as a JSON object (``{"event": "deliver", "topic": ..., "message":
...}``) instead. ``--quiet`` leaves the deliveries out of stdout (clients on ``--command-port``
still get theirs), for a node that serves its clients over that port. SIGINT/SIGTERM stop the
node cleanly (exit code 0) in every case.

``add_pubsub_parser(verbs)`` plugs the verb into ``gossamer.cli.main``; ``main`` runs it alone.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console

from ...core.argtypes import directory as _directory
from ...core.argtypes import host_port
from ...core.argtypes import non_negative_int as _non_negative_int
from ...core.argtypes import port as _port
from ...core.argtypes import positive_int as _positive_int
from ...core.argtypes import seconds as _seconds
from ...core.errors import ConfigError, GossamerError
from ...runtimes.net.looppolicy import run as run_loop
from .client import run_client
from .net import AutoOptions, NodeOptions, Output, parse_contact, run_node
from .owned import OwnersOptions

__all__ = ["add_pubsub_parser", "main"]


def _contact(text: str) -> str:
    try:
        return parse_contact(text)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_pubsub_parser(
    verbs: argparse._SubParsersAction[argparse.ArgumentParser],
) -> argparse.ArgumentParser:
    """Add the ``pubsub`` verb to ``verbs`` (the object ``add_subparsers()`` returned)."""
    pubsub = verbs.add_parser("pubsub", help="the seed-001 topic publish/subscribe system")
    sub = pubsub.add_subparsers(dest="pubsub_verb", metavar="ACTION", required=True)
    node = sub.add_parser(
        "node", help="run one pub/sub node over TCP (interactive or automated client)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    node.add_argument("--host", default="127.0.0.1",
                      help="address to listen on; the node id is HOST:PORT")
    node.add_argument("--port", type=_port, default=0, help="0 picks a free port")
    node.add_argument("--contact", type=_contact, action="append", default=None,
                      metavar="HOST:PORT",
                      help="a node of the overlay to join through (repeatable); without "
                           "one, this node creates the overlay")
    node.add_argument("--mode", choices=["gossip", "scribe"], default="gossip",
                      help="gossip: HyParView + gossip broadcast; scribe: Chord + Scribe trees")
    node.add_argument("--gossip-tree", action="store_true",
                      help="gossip mode: push each message down a tree (Plumtree: IHAVE to "
                           "the other neighbours, GRAFT to repair) instead of flooding")
    node.add_argument("--chord-bits", type=_positive_int, default=256,
                      help="Chord identifier bits (SHA-256 of host:port, truncated)")
    node.add_argument("--data-dir", type=_directory, default=None,
                      help="directory of the node's sqlite store (default: in memory)")
    node.add_argument("--trace-dir", default=None,
                      help="write the trace to TRACE_DIR/trace/RUN/: segment files while "
                           "running (they survive kill -9), HOST_PORT.parquet at exit")
    node.add_argument("--command-port", type=_port, default=None, metavar="PORT",
                      help="also take the client's commands over TCP (JSON lines) on PORT "
                           "(0: a free one, printed in the ready line)")
    node.add_argument("--cluster-key", default=None, metavar="KEY",
                      help="the secret every node of this overlay shares: peer links are "
                           "refused without it (default: $GOSSAMER_CLUSTER_KEY; on 127.0.0.1 "
                           "a built-in key is used when neither is given)")
    node.add_argument("--join-timeout", type=_seconds, default=30.0, metavar="SECONDS",
                      help="with --contact: not in the overlay after this long is an error "
                           "(exit code 1)")
    node.add_argument("--run", default="pubsub", help="run id written in the trace")
    node.add_argument("--seed", type=int, default=0, help="seeds the node's randomness")
    node.add_argument("--json", action="store_true", help="print JSON objects, one a line")
    node.add_argument("--interactive", action="store_true",
                      help="read client commands from stdin")
    node.add_argument("--quiet", action="store_true",
                      help="do not print deliveries on stdout (command-port clients still get "
                           "them; every other line is printed): for a node that serves "
                           "clients over --command-port under a supervisor")
    node.add_argument("--log-level", default="WARNING",
                      choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    owned = node.add_argument_group(
        "replicated topic owners (seed 001, phase 3; --mode scribe)",
        "each founding node of the ring leads a Multi-Paxos group of itself and its next "
        "BACKUPS ring nodes; a publish is acknowledged only once its topic's group decided "
        "it (committed by a majority of the group to its --data-dir store)")
    owned.add_argument("--backups", type=_non_negative_int, default=0, metavar="N",
                       help="backup replicas of each topic owner (the seed: 2; needs "
                            "--ring, a fixed --port and --data-dir); 0 (default): owners are "
                            "not replicated")
    owned.add_argument("--ring", type=_contact, action="append", default=None,
                       metavar="HOST:PORT",
                       help="a founding node of the ring (repeat for each, this node too; "
                            "the same list at every node); needs a fixed --port")
    owned.add_argument("--spares", type=_spare_group, action="append", default=None,
                       metavar="HOST:PORT=HOST:PORT,HOST:PORT",
                       help="the seed's placement instead of --backups/--ring: an active "
                            "ring node and its spare processes outside the ring (the seed: "
                            "two), which replicate its topics and take its place when it "
                            "dies; repeat for each active node, the same list at every "
                            "process (spares too); needs a fixed --port and --data-dir, and "
                            "--contact for every process but the ring's first")
    owned.add_argument("--reserve", type=_spare_group, action="append", default=None,
                       metavar="HOST:PORT=HOST:PORT",
                       help="with --spares: processes that join an active node's group "
                            "through its log after a spare took the node's place (a new "
                            "spare, so the group is three again); the same list at every "
                            "process")
    owned.add_argument("--grown", type=_contact, action="append", default=None,
                       metavar="HOST:PORT",
                       help="with --spares: an active node (named there) whose group joins a "
                            "placement that is running without it; it takes its key range "
                            "from the group after it on the ring through both groups' logs. "
                            "Give its processes the whole placement and this flag (the "
                            "running ones need neither)")
    owned.add_argument("--paxos-heartbeat", type=_seconds, default=1.0, metavar="SECONDS",
                       help="a group leader's NOOP period (default 1.0, the seed's)")
    owned.add_argument("--paxos-suspect", type=_seconds, default=2.0, metavar="SECONDS",
                       help="a follower suspects its group's leader after this long without "
                            "a word from it (default 2.0, the seed's)")
    auto = node.add_argument_group("automated client")
    auto.add_argument("--auto", action="store_true", help="run the automated client")
    auto.add_argument("--publishes", type=_non_negative_int, default=10,
                      help="messages to publish")
    auto.add_argument("--topics", type=_positive_int, default=3,
                      help="topics to choose from (topic0 .. topicK-1)")
    auto.add_argument("--interval", type=_seconds, default=0.2,
                      help="mean seconds between two commands")
    auto.add_argument("--warmup", type=_seconds, default=1.0,
                      help="seconds after joining before the first command")
    auto.add_argument("--settle", type=_seconds, default=2.0,
                      help="exit once nothing was delivered for this long after the last "
                           "publish")
    node.set_defaults(handler=_cmd_node)
    client = sub.add_parser(
        "client", help="the seed's client, in a process of its own: commands to a running "
                       "node's command port (gossamer pubsub node --command-port PORT)")
    client.add_argument("address", type=host_port, metavar="HOST:PORT",
                        help="where the node takes commands (its --command-port)")
    client.add_argument("--json", action="store_true", help="print JSON objects, one a line")
    client.set_defaults(handler=_cmd_client)
    return pubsub


def _spare_group(text: str) -> tuple[str, tuple[str, ...]]:
    """``HOST:PORT=HOST:PORT,HOST:PORT``: an active node and its spares."""
    active, sep, rest = text.partition("=")
    spares = tuple(s for s in rest.split(",") if s)
    if not sep or not spares:
        raise argparse.ArgumentTypeError(f"expected ACTIVE=SPARE1,SPARE2 (HOST:PORT each), "
                                         f"got {text!r}")
    return _contact(active), tuple(_contact(node) for node in spares)


def _cmd_client(args: argparse.Namespace, console: Console) -> int:
    host, port = args.address
    out = Output(sys.stdout, json=args.json)
    return run_loop(run_client(host, port, out, fd=sys.stdin.fileno()))


def _cmd_node(args: argparse.Namespace, console: Console) -> int:
    logging.basicConfig(level=args.log_level, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    owners = None
    if args.spares:
        if args.backups or args.ring:
            raise ConfigError("--spares is the seed's placement: give it instead of "
                              "--backups and --ring")
        owners = OwnersOptions(spares=tuple(args.spares), reserves=tuple(args.reserve or ()),
                               grown=tuple(args.grown or ()),
                               heartbeat=args.paxos_heartbeat, suspect=args.paxos_suspect)
    elif args.backups:
        owners = OwnersOptions(ring=tuple(args.ring or ()), backups=args.backups,
                               heartbeat=args.paxos_heartbeat, suspect=args.paxos_suspect)
    elif args.reserve or args.grown:
        raise ConfigError("--reserve and --grown belong to the seed's placement: give "
                          "--spares too")
    elif args.ring:
        raise ConfigError("--ring names the founding ring of replicated owners: give "
                          "--backups N too")
    options = NodeOptions(
        host=args.host, port=args.port, mode=args.mode, contacts=tuple(args.contact or ()),
        data_dir=None if args.data_dir is None else Path(args.data_dir),
        trace_dir=None if args.trace_dir is None else Path(args.trace_dir),
        run=args.run, seed=args.seed, chord_bits=args.chord_bits,
        command_port=args.command_port, cluster_key=args.cluster_key,
        join_timeout=args.join_timeout, owners=owners, gossip_tree=args.gossip_tree)
    if args.quiet and args.interactive:
        raise ConfigError("--quiet hides the deliveries --interactive is there to print: give "
                          "one of them (a quiet node's clients use --command-port)")
    auto = None
    if args.auto:
        auto = AutoOptions(publishes=args.publishes, topics=args.topics, seed=args.seed,
                           interval=args.interval, warmup=args.warmup, settle=args.settle)
    out = Output(sys.stdout, json=args.json, deliveries=not args.quiet)
    return run_loop(run_node(options, out, interactive_input=args.interactive, auto=auto))


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``pubsub`` without the rest of the CLI: ``python -m gossamer.services.pubsub.cli``."""
    parser = argparse.ArgumentParser(prog="gossamer")
    add_pubsub_parser(parser.add_subparsers(dest="verb", metavar="VERB", required=True))
    args = parser.parse_args(argv)
    console = Console(stderr=True)
    try:
        code: int = args.handler(args, console)
    except GossamerError as exc:
        console.print(f"[red]error:[/] {exc}")
        return 2
    return code


if __name__ == "__main__":
    sys.exit(main())
