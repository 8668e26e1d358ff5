"""Ten pub/sub node processes on 127.0.0.1 (``python -m gossamer.services.pubsub.cli pubsub
node --interactive --json``), driven through each one's stdin like the seed's interactive
client: every subscriber prints every publish, a node that unsubscribed prints no more, bad
commands are answered with errors, SIGTERM and ``exit`` stop the processes cleanly.

Every wait is on an output line with a timeout, never a fixed sleep. Before the checked
publishes, "probe" rounds are published until one reaches every subscriber: the overlay (the
Chord ring under the Scribe trees) settles in its own time on a loaded machine.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from gossamer.services.pubsub.net import (
    Command,
    CommandError,
    Output,
    address_of,
    parse_command,
)
from harness_net import reserve_port

pytestmark = pytest.mark.processes

NODES = 10
WAIT = 60.0  # wall seconds: upper bounds only, every wait ends as soon as its line shows up
START_WAIT = 90.0  # a process's start (imports) on a busy machine: an upper bound only
PROBE_WAIT = 2.0  # how long one probe round may take before the next one goes out
TOPIC = "news"
QUIET = "quiet"  # nobody subscribes: nothing may ever be printed for it

Event = dict[str, Any]


class NodeProcess:
    """One node process; a thread collects its JSON output lines."""

    def __init__(self, mode: str, contact: str | None, trace_dir: Path, log: IO[bytes], *,
                 extra: Sequence[str] = ("--interactive",)) -> None:
        # "gossip-tree": gossip mode with --gossip-tree (Plumtree)
        flags = ["--mode", "gossip", "--gossip-tree"] if mode == "gossip-tree" else ["--mode", mode]
        argv = [sys.executable, "-m", "gossamer.services.pubsub.cli", "pubsub", "node",
                "--json", *flags, "--trace-dir", str(trace_dir),
                "--run", f"loopback-{mode}", *extra]
        if contact is not None:
            argv += ["--contact", contact]
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.mode = mode
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=log, env=env)
        self.events: list[Event] = []
        self._cond = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.node = "?"

    def ready(self) -> NodeProcess:
        self.node = str(self.wait(lambda e: e["event"] == "ready", START_WAIT)["node"])
        return self

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            event = json.loads(raw)
            with self._cond:
                self.events.append(event)
                self._cond.notify_all()
        with self._cond:
            self.events.append({"event": "eof"})
            self._cond.notify_all()

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line.encode() + b"\n")
        self.proc.stdin.flush()

    def wait(self, pred: Callable[[Event], bool], timeout: float = WAIT, *,
             since: int = 0) -> Event:
        """The first event from index ``since`` on that ``pred`` accepts."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for event in self.events[since:]:
                    if pred(event):
                        return event
                left = deadline - time.monotonic()
                if left <= 0 or self.events[-1:] == [{"event": "eof"}]:
                    raise AssertionError(f"{self.node}: no matching line in "
                                         f"{timeout}s; last lines {self.events[-5:]}")
                self._cond.wait(left)

    def mark(self) -> int:
        with self._cond:
            return len(self.events)

    def command(self, line: str, answer: str) -> Event:
        """Send a command and wait for its answer (an event named ``answer``, or an error)."""
        since = self.mark()
        self.send(line)
        event = self.wait(lambda e: e["event"] in (answer, "error"), since=since)
        assert event["event"] == answer, f"{self.node}: {line!r} -> {event}"
        return event

    def delivered(self, topic: str) -> list[str]:
        with self._cond:
            return [str(e["message"]) for e in self.events
                    if e["event"] == "deliver" and e["topic"] == topic]

    def has(self, topic: str, message: str) -> bool:
        return message in self.delivered(topic)

    def wait_delivered(self, topic: str, message: str, timeout: float = WAIT) -> None:
        self.wait(lambda e: e["event"] == "deliver" and e["topic"] == topic
                  and e["message"] == message, timeout)

    def stop_code(self, timeout: float = WAIT) -> int:
        return self.proc.wait(timeout)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def close(self) -> None:
        self.kill()
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                pipe.close()


@pytest.fixture
def cluster(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[list[NodeProcess]]:
    mode = request.param
    log_path = tmp_path / "nodes.log"
    nodes: list[NodeProcess] = []
    with log_path.open("wb") as log:
        try:
            first = NodeProcess(mode, None, tmp_path, log).ready()
            nodes.append(first)
            for _ in range(NODES - 1):  # started together, each joining through the first
                nodes.append(NodeProcess(mode, first.node, tmp_path, log))
            for node in nodes:
                node.ready()
            yield nodes
        finally:
            for node in nodes:
                node.close()


def _probe_until_settled(publishers: list[NodeProcess], subscribers: list[NodeProcess],
                         deadline: float) -> int:
    """Probe rounds (one publish per publisher) until a round reaches every subscriber."""
    rounds = 0
    while True:
        rounds += 1
        probes = [f"probe-{rounds}-{i}" for i in range(len(publishers))]
        for node, probe in zip(publishers, probes, strict=True):
            node.command(f"publish {TOPIC} {probe}", "publish")
        round_end = time.monotonic() + PROBE_WAIT
        try:
            for sub in subscribers:
                for probe in probes:
                    sub.wait_delivered(TOPIC, probe, max(round_end - time.monotonic(), 0.01))
            return rounds
        except AssertionError:
            if time.monotonic() > deadline:
                raise


@pytest.mark.parametrize("cluster", ["scribe", "gossip", "gossip-tree"], indirect=True)
def test_ten_processes_subscribe_publish_unsubscribe(cluster: list[NodeProcess],
                                                     tmp_path: Path) -> None:
    started = time.monotonic()
    nodes = cluster
    assert len({n.node for n in nodes}) == NODES
    assert all(address_of(n.node) is not None for n in nodes)
    for node in nodes:
        node.wait(lambda e: e["event"] == "joined")

    subscribers, others = nodes[:6], nodes[6:]
    for node in subscribers:
        node.command(f"subscribe {TOPIC}", "subscribe")
    status = nodes[0].command("status", "status")
    assert status["subscriptions"] == [TOPIC]
    if nodes[0].mode == "scribe":  # its place on the ring and in the topic's tree
        [ring] = status["ring"]
        assert ring["state"] == "active" and ring["successors"]
        # a subscribe is answered once asked; its JOIN reaches the tree a little later
        deadline = time.monotonic() + WAIT
        while status["topics"][TOPIC]["role"] == "joining" and time.monotonic() < deadline:
            time.sleep(0.05)  # poll interval, not a wait for an event
            status = nodes[0].command("status", "status")
        assert status["topics"][TOPIC]["role"] in ("root", "member")
    else:
        assert status["active_view"]
    # bad commands are answered, and the node carries on
    nodes[0].command("frobnicate x", "error")
    nodes[0].command("publish onlytopic", "error")
    nodes[0].command(f"subscribe {'t' * 300}", "error")

    publishers = [nodes[0], nodes[7], nodes[9]]
    rounds = _probe_until_settled(publishers, subscribers, started + 25.0)

    # every subscriber prints every publish, from subscribers and non-subscribers alike
    messages = [f"m{i} from {p.node}" for i, p in enumerate(publishers * 2)]
    for node, text in zip(publishers * 2, messages, strict=True):
        node.command(f"publish {TOPIC} {text}", "publish")
    for sub in subscribers:
        for text in messages:
            sub.wait_delivered(TOPIC, text)
    nodes[3].command(f"publish {QUIET} nobody listens", "publish")

    # an unsubscribed node stops receiving; the others still get everything
    leaver, stayers = subscribers[0], subscribers[1:]
    leaver.command(f"unsubscribe {TOPIC}", "unsubscribe")
    after = [f"after-{i}" for i in range(3)]
    for node, text in zip([nodes[8], nodes[2], leaver], after, strict=True):
        node.command(f"publish {TOPIC} {text}", "publish")
    for sub in stayers:
        for text in after:
            sub.wait_delivered(TOPIC, text)

    mode = nodes[0].mode
    killed: NodeProcess | None = None
    if mode in ("gossip", "gossip-tree"):
        # a crashed process: its neighbours see the connection drop and tell HyParView
        # peer_down at once (no keepalive timeout needed); the rest still gets everything
        killed = others[0]
        killed.kill()
        nodes = [n for n in nodes if n is not killed]
        others = others[1:]
        nodes[-1].command(f"publish {TOPIC} after-kill", "publish")
        for sub in stayers:
            sub.wait_delivered(TOPIC, "after-kill")
        after.append("after-kill")

    # nobody else printed the topic's messages, nobody printed the quiet topic; no duplicates
    for node in nodes:
        assert node.delivered(QUIET) == [], node.node
        got = [m for m in node.delivered(TOPIC) if not m.startswith("probe-")]
        assert len(got) == len(set(got)), f"{node.node} printed a message twice: {got}"
        if node in stayers:
            assert got == [*messages, *after] or sorted(got) == sorted([*messages, *after])
        elif node is leaver:
            assert sorted(got) == sorted(messages), f"{node.node} after unsubscribing: {got}"
        else:
            assert got == [], f"non-subscriber {node.node} printed {got}"

    # clean stops: half by SIGTERM, half by the exit command
    for i, node in enumerate(nodes):
        if i % 2:
            node.proc.send_signal(signal.SIGTERM)
        else:
            node.send("exit")
    for node in nodes:
        assert node.stop_code() == 0, node.node
        node.wait(lambda e: e["event"] == "stopped")
    traces = sorted((tmp_path / "trace").rglob("*.parquet"))
    assert len(traces) == len(nodes)  # a killed process never wrote its (buffered) trace
    table = pa.concat_tables([pq.read_table(t) for t in traces])
    layers = set(table.column("layer").to_pylist())
    assert layers >= {"net", "pubsub", "chord" if mode == "scribe" else "hyparview"}
    if mode.startswith("gossip"):
        # a tree prunes the link a duplicate came over (and announces on its lazy links);
        # flooding does neither. Whether a duplicate comes at all is the overlay's doing (one
        # HyParView built without a cycle brings none), so it is counted, not assumed
        types = [json.loads(i).get("type") if i else None for i in table.column("info").to_pylist()]
        copies: dict[tuple[str, str], int] = {}
        for node, msg, event, kind in zip(table.column("node").to_pylist(),
                                          table.column("msg").to_pylist(),
                                          table.column("event").to_pylist(), types, strict=True):
            if event == "recv" and kind == "gossip.data":
                copies[node, msg] = copies.get((node, msg), 0) + 1
        duplicates = sum(n - 1 for n in copies.values())
        tree_rows = {t for t in types if t in ("gossip.prune", "gossip.ihave", "gossip.graft")}
        if mode == "gossip":
            assert not tree_rows, tree_rows
        else:
            assert ("gossip.prune" in tree_rows) is (duplicates > 0), (duplicates, tree_rows)
    if killed is not None:
        downs = table.filter(pc.and_(pc.equal(table["event"], "neighbor_down"),
                                     pc.equal(table["peer"], killed.node)))
        reasons = {json.loads(info)["reason"] for info in downs.column("info").to_pylist()}
        assert "down" in reasons, f"nobody heard {killed.node} go down from the runtime: {reasons}"
    elapsed = time.monotonic() - started
    print(f"{len(nodes)} processes, {rounds} probe round(s), {elapsed:.1f}s")


def test_parse_command() -> None:
    assert parse_command("  ") is None
    assert parse_command("subscribe a") == Command("subscribe", "a")
    assert parse_command("unsub a") == Command("unsubscribe", "a")
    assert parse_command("publish a hello  big world") == Command("publish", "a",
                                                                   "hello  big world")
    assert parse_command("EXIT") == Command("exit")
    # the message is the rest of the line: trailing spaces kept, the line break not
    assert parse_command("  publish a  x y  \r\n") == Command("publish", "a", "x y  ")
    assert parse_command("sub a  \n") == Command("subscribe", "a")
    for bad in ("subscribe", "subscribe a b", "publish a", "publish a   ", "status now", "jump",
                "publish " + "t" * 300 + " x"):
        with pytest.raises(CommandError):
            parse_command(bad)
    assert address_of("127.0.0.1:4000") == ("127.0.0.1", 4000)
    assert address_of("n001") is None
    assert address_of("127.0.0.1:0") is None


def test_plain_output_lines_say_what_they_are() -> None:
    """Every plain line starts with what it is, so a topic named ``error`` or a message with
    a line break cannot pass for something else, and trailing spaces survive."""
    out = Output(io.StringIO())
    out.deliver("error", "disk full ")
    out.deliver("two words", "line 1\nline 2")
    out.deliver("t", {"k": 1})
    out.ok("publish", "t", "hi ")
    out.error("not subscribed to x")
    # text that reads as JSON is quoted, so it cannot pass for a control character, an
    # object or a number; a word that merely starts like one is not
    out.deliver("t", '"a\\u0007b"')
    out.deliver("t", "a\u0007b")
    out.deliver("t", '{"k":1}')
    out.deliver("t", "12")
    out.deliver("t", "true story")
    assert out.stream.getvalue().split("\n") == [
        "deliver error disk full ", 'deliver "two words" "line 1\\nline 2"',
        'deliver t {"k":1}', "ok publish t hi ", "error: not subscribed to x",
        'deliver t "\\"a\\\\u0007b\\""', 'deliver t "a\\u0007b"',
        'deliver t "{\\"k\\":1}"', 'deliver t "12"', "deliver t true story", ""]


def test_a_quiet_output_leaves_out_the_deliveries_only() -> None:
    out = Output(io.StringIO(), deliveries=False)
    out.deliver("t", "not printed")
    out.ok("subscribe", "t")
    out.error("bad")
    assert out.stream.getvalue() == "ok subscribe t\nerror: bad\n"


def test_output_writes_the_lines_of_one_loop_turn_in_one_write() -> None:
    """In the node's loop a turn's lines leave together at its end (one system call on an
    unbuffered stdout, not one per delivery); outside a loop each line leaves at once."""

    class Counted(io.StringIO):
        writes = 0

        def write(self, text: str) -> int:
            self.writes += 1
            return super().write(text)

    async def one_turn() -> Counted:
        stream = Counted()
        out = Output(stream)
        out.deliver("t", "a")
        out.deliver("t", "b")
        assert stream.getvalue() == ""  # held until this turn ends
        await asyncio.sleep(0)  # the turn ends
        return stream

    stream = asyncio.run(one_turn())
    assert stream.getvalue() == "deliver t a\ndeliver t b\n" and stream.writes == 1
    alone = Counted()
    Output(alone).deliver("t", "c")
    assert alone.getvalue() == "deliver t c\n"


@pytest.mark.parametrize("mode", ["gossip", "scribe"])
def test_automated_clients_publish_and_exit(mode: str, tmp_path: Path) -> None:
    """Four automated clients: N publishes each, deliveries only on subscribed topics, a
    publisher subscribed to its topic prints its own message, then each exits by itself."""
    publishes = 5
    auto = ["--auto", "--publishes", str(publishes), "--topics", "2", "--seed", "7",
            "--interval", "0.05", "--warmup", "0.3", "--settle", "1.0"]
    nodes: list[NodeProcess] = []
    with (tmp_path / "nodes.log").open("wb") as log:
        # the contact stays up (an automated client that finished first would leave the
        # others without a way in while their processes still start)
        contact = NodeProcess(mode, None, tmp_path, log, extra=()).ready()
        try:
            nodes = [NodeProcess(mode, contact.node, tmp_path, log, extra=auto)
                     for _ in range(4)]
            for node in nodes:
                node.ready()
            for node in nodes:
                done = node.wait(lambda e: e["event"] == "auto_done", timeout=30.0)
                assert done["published"] == publishes, node.node
                assert node.stop_code() == 0, node.node
        finally:
            for node in [contact, *nodes]:
                node.close()
    for node in nodes:
        subscribed: set[str] = set()
        own: list[str] = []  # messages published while subscribed to their topic
        published = 0
        for event in node.events:
            if event["event"] == "subscribe":
                subscribed.add(event["topic"])
            elif event["event"] == "unsubscribe":
                subscribed.discard(event["topic"])
            elif event["event"] == "publish":
                if event["topic"] in subscribed:
                    own.append(f"{node.node}#{published}")
                published += 1
            elif event["event"] == "deliver":
                assert event["topic"] in subscribed, f"{node.node}: {event} not subscribed"
        assert published == publishes
        if mode == "gossip":  # delivered locally at once (Scribe goes through the root)
            printed = {e["message"] for e in node.events if e["event"] == "deliver"}
            assert set(own) <= printed, f"{node.node} missed its own {set(own) - printed}"


@pytest.mark.parametrize("mode", ["gossip", "scribe"])
def test_a_publisher_restarted_without_its_data_is_not_taken_for_its_old_self(
        mode: str, tmp_path: Path) -> None:
    """A node killed with SIGKILL and started again on the same host:port with no data dir:
    its new incarnation numbers its messages in a range of its own, so what it publishes now
    is delivered, not dropped as a duplicate of what its old self published."""
    with (tmp_path / "nodes.log").open("wb") as log:
        first = NodeProcess(mode, None, tmp_path, log).ready()
        nodes = [first]
        try:
            subscriber = NodeProcess(mode, first.node, tmp_path, log).ready()
            publisher = NodeProcess(mode, first.node, tmp_path, log).ready()
            nodes += [subscriber, publisher]
            for node in nodes:
                node.wait(lambda e: e["event"] == "joined")
            subscriber.command(f"subscribe {TOPIC}", "subscribe")
            _probe_until_settled([publisher], [subscriber], time.monotonic() + 30.0)
            for n in range(3):
                publisher.command(f"publish {TOPIC} before-{n}", "publish")
            for n in range(3):
                subscriber.wait_delivered(TOPIC, f"before-{n}")
            port = publisher.node.rsplit(":", 1)[1]
            publisher.kill()
            again = NodeProcess(mode, first.node, tmp_path, log,
                                extra=("--interactive", "--port", port)).ready()
            nodes.append(again)
            assert again.node == publisher.node  # the same node id, a new incarnation
            again.wait(lambda e: e["event"] == "joined")
            _probe_until_settled([again], [subscriber], time.monotonic() + 30.0)
            for n in range(3):
                again.command(f"publish {TOPIC} after-{n}", "publish")
            for n in range(3):
                subscriber.wait_delivered(TOPIC, f"after-{n}")
        finally:
            for node in nodes:
                node.close()


def test_a_node_whose_contact_never_answers_says_so_and_exits_1(tmp_path: Path) -> None:
    with (tmp_path / "nodes.log").open("wb") as log:
        node = NodeProcess("gossip", f"127.0.0.1:{reserve_port()}", tmp_path, log,
                           extra=("--join-timeout", "1"))
        try:
            node.ready()
            error = node.wait(lambda e: e["event"] == "error")
            assert "not in the overlay after 1 s: no contact answered" in error["error"]
            assert node.stop_code() == 1
        finally:
            node.close()


def test_quiet_and_interactive_together_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    from gossamer.services.pubsub.cli import main as pubsub_main

    assert pubsub_main(["pubsub", "node", "--quiet", "--interactive"]) == 2
    assert "--quiet hides the deliveries" in capsys.readouterr().err
