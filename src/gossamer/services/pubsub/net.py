"""One pub/sub node as an operating-system process on TCP, and the seed's two clients.

``PubSubNetNode`` runs a ``PubSubNode`` (gossip over HyParView, or Scribe over Chord) on the
network runtime. Its node id is ``host:port`` -- the address it bound -- so Chord's identifier
is SHA-256 of ``"ip:port"`` as the seed says, and any node id a peer learns is also where that
peer listens (``address_of``). When the runtime sees the outbound link to a peer drop or fail,
gossip mode tells HyParView ``peer_down``.

The clients (seed 001, section 6; both drive the node they run in):

* interactive: one command a line -- ``subscribe T``, ``unsubscribe T``, ``publish T MESSAGE``
  (MESSAGE is the rest of the line), ``status``, ``help``, ``exit``. ``parse_command`` reads one.
* automated: ``AutoOptions``; random subscribe/unsubscribe/publish commands until ``publishes``
  messages went out, then it waits until nothing was delivered for ``settle`` seconds.

Everything the node says goes through an ``Output``: deliveries as ``deliver TOPIC MESSAGE``
lines (or JSON objects with ``--json``), answers to commands, errors (a bad command never
stops the node).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import random
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, Literal

import orjson

from ...core.conn import Framing, ListenerSpec
from ...core.errors import ConfigError, StateError
from ...core.ids import NodeId, check_node_id
from ...core.segments import SegmentSink
from ...core.trace import TraceSink
from ...core.traceio import trace_path, write_settings
from ...protocols.dissemination.gossip import GossipConfig
from ...protocols.dissemination.scribe import PublishResult, TreeRole
from ...protocols.dissemination.scribe.owners import OwnedProcess
from ...protocols.dissemination.scribe.placement import OwnerProcess
from ...protocols.membership.chord import ChordConfig, ChordHost
from ...protocols.membership.chord.ring import Peer, VNodeView
from ...protocols.membership.hyparview import HyParView, OverlayState
from ...runtimes.net import (
    Address,
    NetNode,
    NodeState,
    SqliteStore,
    WriteBehindStore,
    host_port_address,
)
from .commands import COMMANDS_LISTENER, CommandPort, NodeProcess
from .node import PubSubNode, codec_for
from .owned import (
    OwnersOptions,
    build_owned,
    owned_analysis_checks,
    owned_codec,
    owners_status,
    placed_stack,
)
from .shell import HELP, MAX_LINE, MAX_MESSAGE, Command, CommandError, parse_command

__all__ = [
    "MAX_LINE",
    "MAX_MESSAGE",
    "AutoOptions",
    "Command",
    "CommandError",
    "NodeOptions",
    "Output",
    "PubSubNetNode",
    "address_of",
    "parse_command",
    "run_node",
]

Mode = Literal["gossip", "scribe"]
JOIN_POLL = 0.05  # seconds between looks at the overlay while waiting to be in it
STORE_FILE = "pubsub.sqlite"


def _ring_view(view: VNodeView) -> dict[str, Any]:
    """One virtual node's place on the Chord ring, for ``status``."""

    def peer(p: Peer | None) -> str | None:
        return None if p is None else f"{p.node}#{p.vnode} ({p.ident:x})"

    return {"id": f"{view.me.ident:x}", "state": view.state.value,
            "predecessor": peer(view.predecessor),
            "successors": [peer(p) for p in view.successors],
            "fingers": sorted({f"{f.node}#{f.vnode} ({f.ident:x})" for f in view.fingers
                               if f is not None})}


address_of = host_port_address  # where the node ``host:port`` listens


def parse_contact(text: str) -> NodeId:
    """``HOST:PORT`` as a node id, refusing anything else."""
    try:
        node = check_node_id(text)
    except ConfigError as exc:
        raise ConfigError(f"contact {text!r}: {exc}") from None
    if address_of(node) is None:
        raise ConfigError(f"contact {text!r} is not HOST:PORT")
    return node


# -- output ----------------------------------------------------------------------------------


def plain_topic(topic: str) -> str:
    """A topic as one word of a plain line: as is, or a JSON string when it is empty or holds
    whitespace or a leading quote (a topic named ``error`` is fine: lines start with a verb)."""
    if not topic or topic.startswith('"') or any(c.isspace() or not c.isprintable()
                                                 for c in topic):
        return orjson.dumps(topic).decode()
    return topic


def plain_message(message: Any) -> str:
    """The rest of a plain line: a text message verbatim (trailing spaces kept) unless it holds
    a line break or other control character, starts with a space, or reads as JSON itself,
    then as a JSON string (so the text ``"a\u0007b"`` and ``{"k":1}`` cannot pass for a
    message with a control character or an object); anything else as JSON."""
    if (isinstance(message, str) and message and not message[0].isspace()
            and all(c.isprintable() or c == "\t" for c in message)
            and not _reads_as_json(message)):
        return message
    return orjson.dumps(message).decode()


def _reads_as_json(text: str) -> bool:
    if text[0] not in _JSON_STARTS:
        return False  # the common case: a word, not a JSON value
    try:
        orjson.loads(text)
    except orjson.JSONDecodeError:
        return False
    return True


_JSON_STARTS = frozenset('"[{-0123456789tfn')


class Output:
    """Lines on a stream, each starting with what it is: ``deliver TOPIC MESSAGE`` per
    delivery, ``ok VERB TOPIC``, ``error: REASON``, ``ready``/``joined``...; or JSON objects.
    ``deliveries=False`` leaves the delivery lines out (a node whose command-port clients get
    them: ``gossamer pubsub node --quiet``); every other line is still printed."""

    def __init__(self, stream: IO[str] | None = None, *, json: bool = False,
                 deliveries: bool = True) -> None:
        self.stream = stream if stream is not None else sys.stdout
        self.json = json
        self.deliveries = deliveries
        self._pending: list[str] = []  # lines of this loop turn, not yet written

    #: lines held at most before they are written, whatever the loop turn
    MAX_PENDING = 1024

    def _line(self, text: str) -> None:
        # inside the node's event loop the lines of one loop turn leave in one write, at its
        # end: a write per delivery was a system call each on an unbuffered stdout
        # (PYTHONUNBUFFERED), a fifth of a subscriber's CPU
        pending = self._pending
        pending.append(text)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if loop is None or len(pending) >= self.MAX_PENDING:
            self.flush()
        elif len(pending) == 1:
            loop.call_soon(self.flush)  # the end of this turn

    def flush(self) -> None:
        """Write the lines held back (the node's loop does at the end of each turn)."""
        if not self._pending:
            return
        text = "\n".join(self._pending) + "\n"
        self._pending.clear()
        try:
            self.stream.write(text)
            self.stream.flush()
        except (BrokenPipeError, ValueError):
            pass  # nobody reads any more (closed pipe or stream): the node keeps running

    def emit(self, event: str, text: str, **fields: Any) -> None:
        if self.json:
            self._line(orjson.dumps({"event": event, **fields}).decode())
        else:
            self._line(text)

    def ready(self, node: NodeId, mode: str, commands: Address | None = None) -> None:
        if commands is None:
            self.emit("ready", f"ready {node} mode={mode}", node=node, mode=mode)
            return
        where = f"{commands[0]}:{commands[1]}"
        self.emit("ready", f"ready {node} mode={mode} commands={where}", node=node, mode=mode,
                  commands=where)

    def deliver(self, topic: str, message: Any) -> None:
        if not self.deliveries:
            return
        self.emit("deliver", f"deliver {plain_topic(topic)} {plain_message(message)}",
                  topic=topic, message=message)

    def ok(self, verb: str, topic: str, msg: str | None = None) -> None:
        text = f"ok {verb} {plain_topic(topic)}" + (f" {plain_message(msg)}" if msg else "")
        self.emit(verb, text, topic=topic, **({"msg": msg} if msg else {}))

    def error(self, reason: str) -> None:
        self.emit("error", f"error: {reason}", error=reason)

    def published(self, result: PublishResult) -> None:
        """How a publish ended: ``ok publish TOPIC MSG`` once the topic's root accepted it,
        else an error naming it (``definite`` false: it may still have been taken)."""
        if result.accepted:
            self.ok("publish", result.topic, result.msg)
            return
        reason = f"publish {result.msg} on {plain_topic(result.topic)}: {result.reason}"
        self.emit("error", f"error: {reason}", error=reason, msg=result.msg,
                  definite=result.definite)

    def info(self, event: str, text: str, **fields: Any) -> None:
        self.emit(event, text, **fields)


# -- the node --------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class NodeOptions:
    """How to run one node. ``contacts`` are ``host:port`` ids; none: create the overlay."""

    host: str = "127.0.0.1"
    port: int = 0
    mode: Mode = "gossip"
    contacts: tuple[NodeId, ...] = ()
    data_dir: Path | None = None
    trace_dir: Path | None = None
    run: str = "pubsub"
    seed: int = 0
    chord_bits: int = 256  # the seed's SHA-256 ring
    command_port: int | None = None  # the command port (commands.py) on host; 0: a free one
    join_timeout: float = 30.0  # with contacts: not in the overlay by then is an error (exit 1)
    cluster_key: str | None = dataclasses.field(default=None, repr=False)  # None: see linkauth
    send_queue_limit: int = 10_000  # messages held per peer link (queue and backlog)
    owners: OwnersOptions | None = None  # replicated topic owners (scribe mode; owned.py)
    # gossip mode: Plumtree-style tree (eager push on a tree, IHAVE to the other neighbours,
    # GRAFT to repair) instead of flooding every neighbour with every message
    gossip_tree: bool = False

    def __post_init__(self) -> None:
        if self.mode not in ("gossip", "scribe"):
            raise ConfigError(f"mode must be 'gossip' or 'scribe', got {self.mode!r}")
        if self.gossip_tree and self.mode != "gossip":
            raise ConfigError("--gossip-tree is a gossip mode's option (--mode gossip)")
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"port must be in 0..65535, got {self.port}")
        for contact in self.contacts:
            parse_contact(contact)
        if self.command_port is not None and not 0 <= self.command_port <= 65535:
            raise ConfigError(f"command_port must be in 0..65535, got {self.command_port}")
        if self.owners is not None and self.mode != "scribe":
            raise ConfigError("replicated topic owners (--backups) need --mode scribe")
        if self.owners is not None and self.data_dir is None:
            # an acceptor that forgot its promises in a restart could let two values be
            # decided for one slot: the groups' state lives on disk
            raise ConfigError("replicated topic owners keep their Paxos state on disk: give "
                              "--data-dir")
        if self.owners is not None and self.port == 0:
            raise ConfigError("replicated topic owners need a fixed --port: the node is "
                              "named HOST:PORT in the founding ring (--ring)")


def analysis_settings(mode: Mode, *, owned: bool = False) -> dict[str, Any]:
    """What a pub/sub run promises, stored beside its trace for ``gossamer analyze``: each
    topic's subscribers deliver its messages (layer ``pubsub``, and the dissemination layer
    below it: gossip delivers every message to every node, Scribe a topic's to its
    subscribers), a subscribed publisher its own; no FIFO order (a subscriber sees only its
    topics' share of an origin's sequence). ``owned``: replicated topic owners, which add
    one order per topic at every subscriber (``owned_analysis_checks``)."""
    below = "gossip" if mode == "gossip" else "scribe"
    checks: dict[str, Any] = {"layers": ["pubsub", below], "fifo_layers": [],
                              "own_delivery_layers": ["pubsub", below]}
    if owned:
        checks = owned_analysis_checks(checks)
    return {"services": ["pubsub"], "replay": None, "checks": checks}


class PubSubNetNode:
    """A ``PubSubNode`` on a ``NetNode``: ``await start()``, commands, ``await stop()``.

    ``on_message(topic, message)`` hears each delivery. Commands run on the event loop's thread.
    """

    def __init__(self, options: NodeOptions,
                 on_message: Callable[[str, Any], None] | None = None) -> None:
        self.options = options
        self.on_message = on_message
        self.failed = asyncio.Event()
        self.pubsub: PubSubNode | None = None
        self.owned: OwnedProcess | OwnerProcess | None = None  # with replicated owners
        store: SqliteStore | WriteBehindStore | None = None
        if options.data_dir is not None:
            options.data_dir.mkdir(parents=True, exist_ok=True)
            path = options.data_dir / STORE_FILE
            # replicated owners: Paxos state committed in groups (one fsync for many writes,
            # no reply before its group is on disk), as ``gossamer paxos node`` does
            store = SqliteStore(path) if options.owners is None else WriteBehindStore(path)
        # the trace part is named after the node id, known once bound: until then the sink
        # holds its rows (segments survive kill -9; a clean stop compacts them to Parquet)
        self.trace: SegmentSink | None = None
        if options.trace_dir is not None:
            self.trace = SegmentSink(None)
        sink: TraceSink | None = self.trace
        listeners = [] if options.command_port is None else [ListenerSpec(
            name=COMMANDS_LISTENER, host=options.host, port=options.command_port,
            framing=Framing.LINES, max_frame=4 * MAX_LINE, max_connections=64,
            handshake_timeout=None)]
        self.port: CommandPort | None = None
        self.net = NetNode(node_id="unbound", factory=self._build,
                           codec=codec_for(options.mode) if options.owners is None
                           else owned_codec(),
                           listen=(options.host, options.port), listeners=listeners,
                           store=store, trace=sink, run=options.run, seed=options.seed,
                           cluster_key=options.cluster_key,
                           send_queue_limit=options.send_queue_limit)
        self.net.resolver = address_of
        self.net.on_failure = lambda _node, _exc: self.failed.set()

    @property
    def node_id(self) -> NodeId:
        return self.net.node_id

    @property
    def address(self) -> Address:
        return self.net.address

    def _build(self, env: Any) -> Any:
        opts = self.options
        create = not opts.contacts
        process: Any
        if opts.owners is not None and opts.owners.spares:
            def built(app: PubSubNode) -> None:  # a fresh one after leaving the ring
                self.pubsub = app
                if self.port is not None:
                    self.port.pubsub = app

            placement = opts.owners.placement()
            assert placement is not None
            self.owned = placed_stack(
                env, placement, paxos=opts.owners.paxos(),
                reserves=dict(opts.owners.reserves), grown=opts.owners.grown,
                contacts=opts.contacts,
                create=not opts.contacts, chord_config=ChordConfig(bits=opts.chord_bits),
                on_message=self._delivered, on_build=built)
            process = self.owned
        elif opts.owners is not None:
            self.pubsub, self.owned = build_owned(
                env, opts.owners, contacts=opts.contacts,
                chord_config=ChordConfig(bits=opts.chord_bits), on_message=self._delivered)
            process = self.owned
        else:
            self.pubsub = PubSubNode(
                env, opts.mode, contacts=opts.contacts, create=create,
                chord_config=ChordConfig(bits=opts.chord_bits) if opts.mode == "scribe"
                else None, on_message=self._delivered,
                gossip_config=GossipConfig(mode="tree") if opts.gossip_tree else None)
            process = self.pubsub.process
        if opts.command_port is None:
            return process
        assert self.pubsub is not None
        self.port = CommandPort(env, self.pubsub, status=self.status, joined=self.joined,
                                overload=self.net.overload)
        return NodeProcess(process, self.port)

    @property
    def command_address(self) -> Address | None:
        """Where the command port listens (None without one)."""
        if self.options.command_port is None:
            return None
        return self.net.listener_address(COMMANDS_LISTENER)

    def _delivered(self, topic: str, message: Any) -> None:
        if self.on_message is not None:
            self.on_message(topic, message)
        if self.port is not None:
            self.port.deliver(topic, message)

    async def start(self) -> NodeId:
        """Bind, take the name ``host:port``, start the protocol stack."""
        bound = await self.net.listen()
        assert bound is not None
        host, port = bound
        node = check_node_id(f"{host}:{port}")  # the bound ip: "localhost" is 127.0.0.1
        if self.options.owners is not None:
            try:
                self.options.owners.check_member(node)
                if self.options.owners.is_spare(node) and not self.options.contacts:
                    raise ConfigError(f"{node} is a spare: give it --contact HOST:PORT (a "
                                      f"ring node to join through when it takes a node's "
                                      f"place)")
            except ConfigError:
                await self.net.close()
                raise
        self.net.rename(node)
        if self.trace is not None:
            assert self.options.trace_dir is not None
            self.trace.path = trace_path(self.options.trace_dir, self.options.run, node)
            write_settings(self.options.trace_dir, self.options.run,
                           analysis_settings(self.options.mode,
                                             owned=self.options.owners is not None))
        self.net.start_process()
        return node

    @property
    def running(self) -> bool:
        return self.net.state is NodeState.RUNNING

    def joined(self) -> bool:
        """In the overlay: a HyParView member, or on the Chord ring."""
        pubsub = self.pubsub
        if pubsub is None or not self.running:
            return False
        if pubsub.gossip is not None:
            membership = pubsub.gossip.membership
            return isinstance(membership, HyParView) and membership.state is OverlayState.MEMBER
        assert pubsub.scribe is not None
        chord = pubsub.scribe.chord
        return isinstance(chord, ChordHost) and chord.joined

    async def wait_joined(self, timeout: float | None = None) -> bool:
        """Wait until ``joined()``; False after ``timeout`` seconds or if the node stopped."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while not self.joined():
            if not self.running or (deadline is not None and loop.time() >= deadline):
                return False
            await asyncio.sleep(JOIN_POLL)
        return True

    def status(self) -> dict[str, Any]:
        pubsub = self.pubsub
        info: dict[str, Any] = {"node": self.node_id, "mode": self.options.mode,
                                "joined": self.joined(),
                                "subscriptions": pubsub.subscriptions() if pubsub else []}
        if pubsub is not None and pubsub.gossip is not None:
            membership = pubsub.gossip.membership
            if isinstance(membership, HyParView):
                info["active_view"] = membership.active_view()
        if pubsub is not None and pubsub.scribe is not None:
            scribe = pubsub.scribe
            chord = scribe.chord
            if isinstance(chord, ChordHost):
                info["ring"] = [_ring_view(view) for view in chord.views()]
            info["topics"] = {
                topic: {"role": role.value if (role := scribe.role(topic)) else None,
                        "root": role is TreeRole.ROOT, "parent": scribe.parent(topic),
                        "children": scribe.children(topic)}
                for topic in scribe.topics()}
            if self.owned is not None:
                info.update(owners_status(self.owned.owners, sorted(scribe.topics())))
            if isinstance(self.owned, OwnerProcess):
                info["active"] = self.owned.active  # on the ring as its group's owner
                info["owner"] = self.owned.owner
        return info

    def _call(self, fn: Callable[[PubSubNode], Any]) -> Any:
        pubsub = self.pubsub
        if pubsub is None or not self.running:
            raise CommandError(f"node is {self.net.state.value}")
        result: list[Any] = []
        refused: list[Exception] = []

        def run(_process: object) -> None:
            try:
                result.append(fn(pubsub))
            except (ValueError, StateError, ConfigError) as exc:  # the request, not a bug
                refused.append(exc)

        self.net.call(run)  # anything else is a bug: it stops the node and is raised here
        if refused:
            raise CommandError(str(refused[0])) from refused[0]
        return result[0] if result else None

    def subscribe(self, topic: str) -> None:
        self._call(lambda p: p.subscribe(topic))

    def unsubscribe(self, topic: str) -> None:
        if not self.is_subscribed(topic):
            raise CommandError(f"not subscribed to {topic}")
        self._call(lambda p: p.unsubscribe(topic))

    def publish(self, topic: str, message: Any, *,
                on_done: Callable[[PublishResult], None] | None = None) -> str:
        """Publish; ``on_done`` hears (on the event loop's thread) how it ended: accepted
        once the topic's root acknowledged it (see ``PubSubNode.publish``)."""
        if self.pubsub is None or not self.running:
            raise CommandError(f"node is {self.net.state.value}")
        if not self.joined():
            # a publish made before the node is in the overlay would go nowhere
            raise CommandError("not in the overlay yet: publish once 'joined' is printed")
        return str(self._call(lambda p: p.publish(topic, message, on_done=on_done)))

    def is_subscribed(self, topic: str) -> bool:
        return self.pubsub is not None and self.pubsub.is_subscribed(topic)

    async def wait_room(self) -> None:
        """Return once the node takes a new publish (``PubSubNode.has_room``) or stopped:
        the back-pressure of a publisher in this process."""
        pubsub = self.pubsub
        if pubsub is None or not self.running or pubsub.has_room():
            return
        room = asyncio.Event()
        self._call(lambda p: p.when_room(room.set))
        while not room.is_set() and self.running:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(room.wait(), 1.0)  # and look whether it stopped

    async def stop(self) -> None:
        """Leave the overlay (the node's ``stop()`` says goodbye; what it wrote to connected
        links goes out before they close), close all."""
        await self.net.close()
        if self.trace is not None:
            self.trace.close()


# -- the clients -----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class AutoOptions:
    """The automated client: random commands until ``publishes`` went out, then settle."""

    publishes: int = 10
    topics: int = 3
    seed: int = 0
    interval: float = 0.2  # mean seconds between two commands
    warmup: float = 1.0  # seconds after joining before the first command
    publish_weight: float = 0.5  # chance that a command is a publish
    settle: float = 2.0  # done once nothing was delivered for this long after the last publish
    max_settle: float = 60.0
    join_timeout: float = 30.0

    def __post_init__(self) -> None:
        if self.publishes < 0 or self.topics < 1:
            raise ConfigError("need publishes >= 0 and topics >= 1")
        if not 0 < self.publish_weight <= 1:
            raise ConfigError("publish_weight must be in (0, 1]")
        for name in ("interval", "warmup", "settle", "max_settle", "join_timeout"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name} must be >= 0")


def execute(node: PubSubNetNode, command: Command, out: Output) -> None:
    """Carry out one command, answering on ``out``; a failing command prints an error."""
    try:
        if command.verb == "subscribe":
            assert command.topic is not None
            node.subscribe(command.topic)
            out.ok("subscribe", command.topic)
        elif command.verb == "unsubscribe":
            assert command.topic is not None
            node.unsubscribe(command.topic)
            out.ok("unsubscribe", command.topic)
        elif command.verb == "publish":
            assert command.topic is not None
            node.publish(command.topic, command.message, on_done=out.published)
        elif command.verb == "status":
            status = node.status()
            out.info("status", "status " + orjson.dumps(status).decode(), **status)
        elif command.verb == "help":
            out.info("help", HELP, help=HELP)
    except CommandError as exc:
        out.error(str(exc))
    except Exception as exc:  # a bug below: the node has stopped itself (see run_node)
        out.error(f"{command.verb} failed: {exc!r}")


TOO_LONG = "\0too long"  # what the reader queues for an over-long line


READ_AHEAD = 1024  # lines read from the input before the node took them


def _read_lines(loop: asyncio.AbstractEventLoop, queue: asyncio.Queue[str | None],
                fd: int, credits: threading.Semaphore | None = None) -> None:
    """A daemon thread: lines of ``fd`` into ``queue``, then None at the end of input.
    With ``credits``, it takes one per line and blocks (stops reading) when there is none:
    the consumer gives one back per line it took (bounded read-ahead).

    It reads the raw descriptor with ``os.read``: a daemon thread blocked inside a buffered
    ``sys.stdin`` read would abort the interpreter at exit, holding the buffer's lock.
    """

    def put(item: str | None) -> None:
        if credits is not None and item is not None:
            credits.acquire()
        with contextlib.suppress(RuntimeError):  # the loop is gone: the node is exiting
            loop.call_soon_threadsafe(queue.put_nowait, item)

    pending = b""
    skipping = False  # inside an over-long line, until its newline
    try:
        while chunk := os.read(fd, 65_536):
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for raw in lines:
                if skipping:
                    skipping = False
                    continue
                put(TOO_LONG if len(raw) > MAX_LINE else raw.decode("utf-8", "replace"))
            if len(pending) > MAX_LINE:
                if not skipping:
                    put(TOO_LONG)
                skipping, pending = True, b""
    except OSError as exc:  # stdin closed under us: what was read still counts
        print(f"error: reading input failed: {exc}", file=sys.stderr)
    if pending and not skipping:
        put(pending.decode("utf-8", "replace"))
    put(None)


async def interactive(node: PubSubNetNode, out: Output, fd: int | None = None) -> None:
    """Commands from the file descriptor ``fd`` (stdin) until ``exit`` or the end of input."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[str | None] = asyncio.Queue()
    source = sys.stdin.fileno() if fd is None else fd
    credits = threading.Semaphore(READ_AHEAD)
    threading.Thread(target=_read_lines, args=(loop, queue, source, credits), daemon=True,
                     name="gossamer-stdin").start()
    while node.running:
        line = await queue.get()
        if line is None:
            return
        credits.release()
        if line == TOO_LONG:
            out.error(f"line longer than {MAX_LINE} characters, ignored")
            continue
        try:
            command = parse_command(line)
        except CommandError as exc:
            out.error(str(exc))
            continue
        if command is None:
            continue
        if command.verb == "exit":
            return
        if command.verb == "publish":
            await node.wait_room()  # back-pressure: reading stops while the node is full
        execute(node, command, out)


async def automated(node: PubSubNetNode, options: AutoOptions, out: Output,
                    delivered: asyncio.Event) -> int:
    """The automated client; returns how many messages it published."""
    if not await node.wait_joined(options.join_timeout):
        out.error(f"not in the overlay after {options.join_timeout}s; auto client gives up")
        return 0
    rng = random.Random(f"{options.seed}/{node.node_id}/auto")
    topics = [f"topic{i}" for i in range(options.topics)]
    await asyncio.sleep(options.warmup)
    published = 0
    sent: set[str] = set()  # ids of our publishes
    ended: set[str] = set()  # ... whose end (ok or error) was printed
    answered = asyncio.Event()

    def on_done(result: PublishResult) -> None:  # on the event loop's thread
        out.published(result)
        ended.add(result.msg)
        answered.set()

    while published < options.publishes and node.running:
        topic = rng.choice(topics)
        if rng.random() < options.publish_weight:
            text = f"{node.node_id}#{published}"
            published += 1
            await node.wait_room()
            try:
                sent.add(node.publish(topic, text, on_done=on_done))
            except CommandError as exc:
                out.error(str(exc))
        elif node.is_subscribed(topic):
            execute(node, Command("unsubscribe", topic), out)
        else:
            execute(node, Command("subscribe", topic), out)
        await asyncio.sleep(rng.uniform(0, 2 * options.interval))
    loop = asyncio.get_running_loop()
    deadline = loop.time() + options.max_settle
    # every publish ended (its root accepted it, or it failed) before the client is done
    while sent - ended and node.running and loop.time() < deadline:
        answered.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(answered.wait(), max(deadline - loop.time(), 0))
    # settle: until nothing was delivered for `settle` seconds (or max_settle passed)
    while node.running and loop.time() < deadline:
        delivered.clear()
        try:
            await asyncio.wait_for(delivered.wait(), min(options.settle,
                                                        max(deadline - loop.time(), 0)))
        except TimeoutError:
            break
    out.info("auto_done", f"auto done: published {published}", published=published)
    return published


async def _announce_joined(node: PubSubNetNode, out: Output, timeout: float | None) -> bool:
    """Print ``joined`` once in the overlay; False (and an error line) when a node that was
    given contacts is not in the overlay within ``timeout`` seconds."""
    owners = node.options.owners
    if owners is not None and owners.spares:
        # the seed's placement: a process is on the ring only while its group's log names it
        # (a spare until it takes a node's place, an old owner back after one did): no deadline
        if owners.is_spare(node.node_id):
            out.info("spare", f"spare {node.node_id}", node=node.node_id)
        timeout = None
    if await node.wait_joined(timeout if node.options.contacts else None):
        out.info("joined", f"joined {node.node_id}", node=node.node_id)
        return True
    if node.running:
        contacts = ", ".join(node.options.contacts)
        out.error(f"not in the overlay after {timeout:g} s: no contact answered ({contacts}); "
                  f"is a node running there, with the same --mode and cluster key?")
    return False


async def run_node(options: NodeOptions, out: Output, *, interactive_input: bool = False,
                   auto: AutoOptions | None = None, stdin: int | None = None) -> int:
    """Run one node until SIGINT/SIGTERM, ``exit``/end of input (interactive), the end of the
    automated client's run, or a protocol bug (exit code 1)."""
    try:
        return await _run_node(options, out, interactive_input=interactive_input, auto=auto,
                               stdin=stdin)
    finally:
        out.flush()  # what the last loop turn printed


async def _run_node(options: NodeOptions, out: Output, *, interactive_input: bool,
                    auto: AutoOptions | None, stdin: int | None) -> int:
    loop = asyncio.get_running_loop()
    delivered = asyncio.Event()

    def on_message(topic: str, message: Any) -> None:
        delivered.set()
        out.deliver(topic, message)

    node = PubSubNetNode(options, on_message=on_message)
    stop = asyncio.Event()
    signals = (signal.SIGINT, signal.SIGTERM)
    for sig in signals:
        loop.add_signal_handler(sig, stop.set)
    tasks: list[asyncio.Task[Any]] = []
    background: list[asyncio.Task[Any]] = []
    joining: asyncio.Task[bool] | None = None
    try:
        try:
            node_id = await node.start()
        except OSError as exc:
            raise ConfigError(f"cannot listen on {options.host}:{options.port}: {exc}") from exc
        out.ready(node_id, options.mode, node.command_address)
        joining = loop.create_task(_announce_joined(node, out, options.join_timeout))
        tasks = [loop.create_task(stop.wait()), loop.create_task(node.failed.wait()), joining]
        if interactive_input:
            tasks.append(loop.create_task(interactive(node, out, stdin)))
        if auto is not None:
            tasks.append(loop.create_task(automated(node, auto, out, delivered)))
        while True:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            if done != {joining} or not joining.result():
                break
            tasks.remove(joining)  # joined: carry on until something else ends the run
    finally:
        for task in tasks + background:
            task.cancel()
        await asyncio.gather(*tasks, *background, return_exceptions=True)
        for sig in signals:
            loop.remove_signal_handler(sig)
        await node.stop()
    if node.net.failure is not None:
        out.error(f"node failed: {node.net.failure!r}")
        return 1
    out.info("stopped", f"stopped {node.node_id}", node=node.node_id)
    if joining is not None and joining.done() and not joining.cancelled() \
            and not joining.result():
        return 1  # it never joined the overlay it was pointed at
    return 0
