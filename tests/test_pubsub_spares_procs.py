"""The seed's placement over real sockets (issue 19, seed 001 phase 3): ``gossamer pubsub node
--spares ACTIVE=SPARE1,SPARE2 --reserve ACTIVE=RESERVE`` processes on 127.0.0.1, three active
ring nodes with two spare processes and a reserve each (twelve processes). The topic's active
node is killed with SIGKILL mid-stream; a spare of its group takes its place on the ring with
its Chord identifier (``status`` says it is active for that owner), the group adds its reserve
and removes the dead node through its log, and every acknowledged publish reaches both
subscribers exactly once, in one order."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from gossamer.protocols.dissemination.scribe.owners import TopicOwners, spare_groups
from gossamer.protocols.membership.chord import chord_id
from gossamer.testing import FakeEnv
from harness_net import reserve_port
from test_pubsub_loopback import START_WAIT, WAIT, NodeProcess

pytestmark = [pytest.mark.processes]

TOPIC = "news"
PAXOS = ("--paxos-heartbeat", "0.3", "--paxos-suspect", "1.0")


def _until(pred: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not pred():
        assert time.monotonic() < deadline, f"not {what} after {WAIT}s"
        time.sleep(0.05)  # polling a status command, not waiting for the event itself


def _answers(node: NodeProcess, since: int, count: int) -> list[dict[str, object]]:
    def answers() -> list[dict[str, object]]:
        return [e for e in node.events[since:] if e["event"] in ("publish", "error")]
    node.wait(lambda _e: len(answers()) >= count, WAIT, since=since)
    return answers()[:count]


def attached(node: NodeProcess, topic: str) -> bool:
    """Whether ``node`` is in ``topic``'s tree (its root, or with a parent)."""
    state = node.command("status", "status")["topics"].get(topic, {})
    return state.get("role") == "root" or bool(state.get("parent"))


def subscribe_all(subscribers: list[NodeProcess], topic: str) -> None:
    """Each subscribes to ``topic``; returns once each is in its tree."""
    for node in subscribers:
        node.command(f"subscribe {topic}", "subscribe")
    for node in subscribers:
        _until(lambda node=node: attached(node, topic), f"{node.node} attached to {topic}")


def delivered_once_in_one_order(subscribers: list[NodeProcess], topic: str,
                                acked: list[str]) -> None:
    """Every acknowledged publish reaches each subscriber, none twice, and two subscribers
    deliver what they both got in the same order."""
    for node in subscribers:
        for text in acked:
            node.wait_delivered(topic, text)
    orders = [node.delivered(topic) for node in subscribers]
    for got in orders:
        assert len(got) == len(set(got)), f"delivered twice: {got}"
    for other in orders[1:]:
        common = [m for m in orders[0] if m in other]
        assert common == [m for m in other if m in orders[0]], orders


def publish_round(publisher: NodeProcess, topic: str, first: int, count: int,
                  acked: list[str]) -> None:
    """Publish ``m{first}`` .. on ``topic`` and add the acknowledged ones to ``acked``; an
    error must be a timeout (perhaps ordered), never a rejection."""
    mark = publisher.mark()
    texts = [f"m{first + i}" for i in range(count)]
    for text in texts:
        publisher.send(f"publish {topic} {text}")
    answers = _answers(publisher, mark, count)
    answers.sort(key=lambda a: int(str(a["msg"]).rsplit(":", 1)[1]))
    for answer, text in zip(answers, texts, strict=True):
        assert answer["event"] == "publish" or answer.get("definite") is False
        if answer["event"] == "publish":
            acked.append(text)


def publish_until(publisher: NodeProcess, topic: str, first: int, acked: list[str],
                  want: int) -> None:
    """Rounds of publishes from ``m{first}`` on until ``acked`` holds ``want`` of them: under
    load a publish may time out (perhaps ordered), and the checks that follow need enough
    acknowledged ones to mean anything."""
    deadline = time.monotonic() + WAIT
    while len(acked) < want:
        assert time.monotonic() < deadline, f"{len(acked)} publishes acked after {WAIT}s"
        publish_round(publisher, topic, first, 5, acked)
        first += 5


def test_a_spare_process_takes_the_killed_active_nodes_place(tmp_path: Path) -> None:
    addr = [f"127.0.0.1:{reserve_port()}" for _ in range(12)]
    ring = addr[:3]
    spares = {a: (addr[3 + 2 * i], addr[4 + 2 * i]) for i, a in enumerate(ring)}
    reserves = {a: (addr[9 + i],) for i, a in enumerate(ring)}
    groups = spare_groups(spares)
    bits = 256  # gossamer pubsub node's --chord-bits default (the seed's SHA-256 ring)
    owners = TopicOwners(FakeEnv(ring[0]), groups=groups, bits=bits)
    topic = next(t for t in (f"{TOPIC}{i}" for i in range(200))
                 if owners.owner_of(t) == ring[1])  # not the ring's first node (a contact)
    placement = [arg for a, s in spares.items() for arg in ("--spares", f"{a}={','.join(s)}")]
    placement += [arg for a, r in reserves.items() for arg in ("--reserve", f"{a}={r[0]}")]
    nodes: dict[str, NodeProcess] = {}
    with (tmp_path / "nodes.log").open("wb") as log:
        def spawn(me: str) -> NodeProcess:
            port = me.rsplit(":", 1)[1]
            contact = None if me == ring[0] else ring[0]
            node = nodes[me] = NodeProcess("scribe", contact, tmp_path, log, extra=(
                "--interactive", "--run", "loopback-spares", "--port", port, *placement,
                *PAXOS, "--data-dir", str(tmp_path / port)))
            return node

        try:
            for me in addr:
                spawn(me)
            for me in addr:
                assert nodes[me].ready().node == me
            for me in ring:
                nodes[me].wait(lambda e: e["event"] == "joined", START_WAIT)
            for me in addr[3:]:
                nodes[me].wait(lambda e: e["event"] == "spare", START_WAIT)
            victim, subscribers, publisher = ring[1], [ring[0], ring[2]], nodes[ring[2]]
            subscribe_all([nodes[me] for me in subscribers], topic)
            acked: list[str] = []
            publish_round(publisher, topic, 0, 10, acked)
            nodes[victim].proc.kill()  # SIGKILL
            nodes[victim].proc.wait(WAIT)

            def taken_over() -> list[str]:
                out = []
                for spare in spares[victim]:
                    status = nodes[spare].command("status", "status")
                    if status.get("active") and status.get("joined"):
                        out.append(spare)
                return out

            _until(lambda: len(taken_over()) == 1, f"a spare of {victim} on the ring")
            (new,) = taken_over()
            ring_view = nodes[new].command("status", "status")["ring"][0]
            publish_until(publisher, topic, 10, acked, 15)
            # the group took its reserve in through the log and let the dead node go
            reserve = reserves[victim][0]

            def members() -> list[str]:
                status = nodes[new].command("status", "status")
                return sorted(status["groups"][victim]["members"])

            _until(lambda: members() == sorted([*spares[victim], reserve]),
                   f"the reserve {reserve} in the group instead of {victim}")
            delivered_once_in_one_order([nodes[me] for me in subscribers], topic, acked)
            # the new active node is on the ring with the dead node's identifier
            assert ring_view["id"] == format(chord_id(victim, bits), "x"), ring_view
        finally:
            for node in nodes.values():
                node.close()
