"""Replicated topic owners over real processes, judged by the pipeline: five ``gossamer pubsub
node --backups 2`` processes on 127.0.0.1 writing their traces, three subscribers, two
publishers publishing at once; the topic's Paxos leader (its owner and Scribe root, unless
another member of its group took over while the owner's process started) is killed with
SIGKILL mid-stream and started again on its port and data dir. Every acknowledged
publish reaches every subscriber exactly once, in the same order at all of them, and
``gossamer analyze`` of the trace (total order per topic, the Paxos checks: agreement,
decided order, nothing acknowledged lost) exits 0.

Every wait is on an output line or a status answer with a timeout, never a fixed sleep."""

from __future__ import annotations

import functools
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

import pytest

from gossamer.protocols.dissemination.scribe.owners import TopicOwners, owner_groups
from gossamer.protocols.membership.chord import ChordConfig
from gossamer.testing import FakeEnv
from harness_net import reserve_port
from harness_procs import analyze_in_process_of_its_own
from test_pubsub_loopback import START_WAIT, WAIT, Event, NodeProcess

pytestmark = [pytest.mark.processes, pytest.mark.slow]

TOPIC = "news"
NODES = 5
ROUNDS = (8, 8, 8)  # publishes per publisher: before the kill, while it is down, once it is back
# short timers keep the test short; the seed's defaults (1 s, 2 s) are measured by
# benchmarks/pubsub_failover.py
PAXOS = ("--paxos-heartbeat", "0.3", "--paxos-suspect", "1.0")


def _attached(node: NodeProcess) -> bool:
    topic = node.command("status", "status")["topics"].get(TOPIC, {})
    return topic.get("role") == "root" or bool(topic.get("parent"))


def _until(pred: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not pred():
        assert time.monotonic() < deadline, f"not {what} after {WAIT}s"
        time.sleep(0.05)  # polling a status command, not waiting for the event itself


def _agreed_leader(members: list[NodeProcess], owner: str) -> str:
    """The leader every member of ``owner``'s group names, once they agree."""
    leaders: set[object] = set()

    def agreed() -> bool:
        nonlocal leaders
        leaders = {m.command("status", "status")["groups"][owner]["leader"] for m in members}
        return len(leaders) == 1 and None not in leaders

    _until(agreed, f"one leader of {owner}'s group ({leaders})")
    return str(leaders.pop())


def _answers(node: NodeProcess, since: int, count: int) -> list[Event]:
    """The next ``count`` publish answers (ok or error) of ``node`` from event ``since``."""
    def answers() -> list[Event]:
        return [e for e in node.events[since:] if e["event"] in ("publish", "error")]
    node.wait(lambda _e: len(answers()) >= count, WAIT, since=since)
    return answers()[:count]


def _scenario(tmp: Path, log: IO[bytes], nodes: list[NodeProcess]) -> set[str]:
    """Run the cluster (each process appended to ``nodes`` for the caller to close); returns
    the publishes that were acknowledged."""
    ring = [f"127.0.0.1:{reserve_port()}" for _ in range(NODES)]
    owner = TopicOwners(FakeEnv(ring[0]), ring, bits=ChordConfig().bits).owner_of(TOPIC)
    group = owner_groups(ring, bits=ChordConfig().bits)[owner]
    ring_args = [arg for node in ring for arg in ("--ring", node)]

    def spawn(me: str, contact: str | None) -> NodeProcess:
        port = me.rsplit(":", 1)[1]
        node = NodeProcess("scribe", contact, tmp, log, extra=(
            "--interactive", "--port", port, "--backups", "2", *ring_args, *PAXOS,
            "--data-dir", str(tmp / port)))
        nodes.append(node)
        return node

    first = spawn(ring[0], None).ready()
    for me in ring[1:]:
        spawn(me, first.node)
    by_id = {node.ready().node: node for node in nodes}
    assert sorted(by_id) == sorted(ring)
    for node in nodes:
        node.wait(lambda e: e["event"] == "joined", START_WAIT)
    # the group's leader: its owner, unless a member that started first suspected the owner
    # while its process was still starting and took over
    leader = _agreed_leader([by_id[m] for m in group], owner)
    victim = by_id[leader]
    others = [by_id[n] for n in ring if n != leader]
    subscribers, publishers = others[:3], [others[3], others[0]]
    for node in subscribers:
        node.command(f"subscribe {TOPIC}", "subscribe")
    for node in subscribers:
        _until(functools.partial(_attached, node), f"{node.node} attached to {TOPIC}")

    acked: set[str] = set()
    sent = 0

    def publish_round(count: int) -> None:
        nonlocal sent
        marks = {p.node: p.mark() for p in publishers}
        texts = [f"#{sent + i}" for i in range(count)]
        for text in texts:
            for p in publishers:
                p.send(f"publish {TOPIC} {p.node}{text}")
        sent += count
        for p in publishers:
            answers = _answers(p, marks[p.node], count)
            for answer in answers:  # an error is a timeout, not a rejection
                assert answer["event"] == "publish" or answer.get("definite") is False, answer
            # answers come as publishes end; their ids number them in the order they were sent
            answers.sort(key=lambda a: int(str(a["msg"]).rsplit(":", 1)[1]))
            for answer, text in zip(answers, texts, strict=True):
                if answer["event"] == "publish":
                    acked.add(f"{p.node}{text}")

    publish_round(ROUNDS[0])
    for sub in subscribers:
        sub.wait_delivered(TOPIC, f"{publishers[0].node}#{ROUNDS[0] - 1}")
    victim.proc.kill()  # SIGKILL
    victim.proc.wait(WAIT)
    publish_round(ROUNDS[1])
    again = spawn(leader, first.node if first is not victim else others[0].node).ready()
    assert again.node == leader
    again.wait(lambda e: e["event"] == "joined", START_WAIT)
    publish_round(ROUNDS[2])

    # every acknowledged publish, once, in one order at every subscriber
    for sub in subscribers:
        for text in sorted(acked):
            sub.wait_delivered(TOPIC, text)
    orders = {sub.node: sub.delivered(TOPIC) for sub in subscribers}
    for name, got in orders.items():
        assert len(got) == len(set(got)), f"{name} delivered a publish twice: {got}"
        assert acked <= set(got), f"{name} misses {sorted(acked - set(got))}"
    reference = orders[subscribers[0].node]
    for name, got in orders.items():
        common = [m for m in got if m in reference]
        assert common == [m for m in reference if m in got], (name, got, reference)
    assert len(acked) >= sum(ROUNDS) * len(publishers) // 2, sorted(acked)
    for node in nodes:
        if node is not victim:
            node.proc.send_signal(signal.SIGTERM)
    for node in nodes:
        if node is not victim:
            assert node.stop_code() == 0, node.node
    return acked


def test_killing_a_topics_paxos_leader_loses_no_acknowledged_publish(tmp_path: Path) -> None:
    started = time.monotonic()
    with (tmp_path / "nodes.log").open("wb") as log:
        nodes: list[NodeProcess] = []
        try:
            acked = _scenario(tmp_path, log, nodes)
        finally:
            for node in nodes:
                node.close()
    ran = time.monotonic() - started
    assert acked
    analysis = analyze_in_process_of_its_own(tmp_path, tmp_path / "analysis")
    assert analysis.returncode == 0, analysis.stdout[-4000:] + analysis.stderr[-2000:]
    print(f"{len(acked)} acknowledged; processes {ran:.1f}s, analysis "
          f"{time.monotonic() - started - ran:.1f}s")
