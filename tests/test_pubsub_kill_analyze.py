"""A real-process fault test of topic pub/sub, judged by the pipeline: five node processes on
127.0.0.1 writing their traces, two subscribers, a publisher publishing steadily; a node that
neither publishes nor subscribes (a relay of the overlay) is killed with SIGKILL mid-stream and
started again on its port and data dir, as a user would; the publisher carries on; every
process stops cleanly and ``gossamer analyze`` of the trace (the killed process's segments
recovered) must exit 0: each message reached every subscriber once (both layers), and nothing
reached a node that was not owed it.

No probe rounds: every message published is one the service owes its subscribers (they
subscribed and their place in the topic's dissemination was in place before the first
publish), so what the analysis judges is exactly the traffic of the run."""

from __future__ import annotations

import functools
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

import pyarrow.parquet as pq
import pytest

from harness_procs import analyze_in_process_of_its_own
from test_pubsub_loopback import START_WAIT, WAIT, NodeProcess

# the analysis runs in a process of its own (its own JVM), so this test runs beside the others
# in the parallel lane instead of lengthening the one-process Spark lane
pytestmark = [pytest.mark.processes, pytest.mark.slow]

TOPIC = "news"
NODES = 6
SENT = 45  # messages; the kill comes after the first 15, the restart after the next 15


def _attached(node: NodeProcess) -> bool:
    """The subscriber's place in the topic's dissemination is in place: over Scribe it is the
    topic's root or has a parent in its tree; over gossip, it is a member of the overlay."""
    status = node.command("status", "status")
    if node.mode == "gossip":
        return bool(status["active_view"])
    topic = status["topics"].get(TOPIC, {})
    return topic.get("role") == "root" or bool(topic.get("parent"))


def _until(pred: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not pred():
        assert time.monotonic() < deadline, f"not {what} after {WAIT}s"
        time.sleep(0.05)  # polling a status command, not waiting for the event itself


def _part(tmp: Path, node: NodeProcess, pattern: str) -> list[Path]:
    """The files of ``node``'s trace part whose name ends with ``pattern``."""
    run_dir = tmp / "trace" / f"loopback-{node.mode}"
    return sorted(run_dir.glob(node.node.replace(":", "_") + pattern))


def _scenario(mode: str, tmp: Path, log: IO[bytes], nodes: list[NodeProcess]) -> NodeProcess:
    """Run the nodes (each one appended to ``nodes`` as it starts, for the caller to close);
    returns the restarted one."""
    def spawn(contact: str | None, name: str, port: str = "0") -> NodeProcess:
        node = NodeProcess(mode, contact, tmp, log,
                           extra=("--interactive", "--port", port,
                                  "--data-dir", str(tmp / f"{name}.data")))
        nodes.append(node)
        return node

    first = spawn(None, "n0").ready()
    rest = [spawn(first.node, f"n{i}") for i in range(1, NODES)]
    for node in rest:
        node.ready()
    for node in nodes:
        node.wait(lambda e: e["event"] == "joined", START_WAIT)
    publisher, subscribers, relays = nodes[1], [nodes[0], nodes[2], nodes[3]], nodes[4:]
    for node in subscribers:
        node.command(f"subscribe {TOPIC}", "subscribe")
    for node in subscribers:
        _until(functools.partial(_attached, node), f"{node.node} attached to {TOPIC}")
    # the victim neither publishes nor subscribes, and is not the topic's Scribe root (a
    # root's death is fail-over, judged by the simulator's VOPR); it may forward the topic
    victim = next(node for node in relays
                  if node.command("status", "status").get("topics", {}).get(TOPIC, {})
                  .get("role") != "root")

    def publish(n: int) -> None:
        publisher.command(f"publish {TOPIC} m{n}", "publish")

    for n in range(15):
        publish(n)
    for sub in subscribers:
        sub.wait_delivered(TOPIC, "m4")  # the stream is flowing
    # some of the victim's rows are on disk in a completed segment (its writer rotates the
    # partial one once it is 1 s old): its first life is in the trace, not only its second
    _until(lambda: bool(_part(tmp, victim, "-*.seg")), f"{victim.node}'s first segment")
    victim.proc.kill()
    victim.proc.wait(WAIT)
    for n in range(15, 30):  # while the overlay repairs around the dead node
        publish(n)
    port = victim.node.rsplit(":", 1)[1]
    again = spawn(first.node, f"n{nodes.index(victim)}", port).ready()
    assert again.node == victim.node
    again.wait(lambda e: e["event"] == "joined", START_WAIT)
    for n in range(30, SENT):
        publish(n)
    for sub in subscribers:
        for n in range(SENT):
            sub.wait_delivered(TOPIC, f"m{n}")
        got = sub.delivered(TOPIC)
        assert sorted(got) == sorted(f"m{n}" for n in range(SENT)), (sub.node, got)
    # a clean stop of every process still running: the traces are compacted
    for node in nodes:
        if node is not victim:
            node.proc.send_signal(signal.SIGTERM)
    for node in nodes:
        if node is not victim:
            assert node.stop_code() == 0, node.node
    return again


def test_killing_a_relay_node_mid_stream_passes_the_analysis(tmp_path: Path) -> None:
    # Scribe only, for CI time (one analysis, a JVM, is the main cost): ``_scenario("gossip",
    # ...)`` runs the same over HyParView + gossip
    mode = "scribe"
    with (tmp_path / "nodes.log").open("wb") as log:
        nodes: list[NodeProcess] = []
        try:
            again = _scenario(mode, tmp_path, log, nodes)
        finally:
            for node in nodes:
                node.close()
    analysis = analyze_in_process_of_its_own(tmp_path, tmp_path / "analysis")
    assert analysis.returncode == 0, analysis.stdout[-4000:] + analysis.stderr[-2000:]
    # both lives of the killed node were judged: its first one's segments were sealed by its
    # second, which compacted them with its own rows at its clean exit
    [part] = _part(tmp_path, again, ".parquet")
    joins = pq.read_table(part, filters=[("layer", "=", "net"), ("event", "=", "join")])
    assert joins.num_rows == 2, part
