"""Growing the seed's placement over real sockets (issue 19, seed 001 phase 3): two active
ring nodes with two spare processes each run ``gossamer pubsub node --spares ...`` on
127.0.0.1 while publishes flow; then a third group starts (``--grown``: its processes are
given the whole placement, the running ones were not told of it) whose active node takes the
topic's key range from the group after it. The range moves through both groups' logs; every
acknowledged publish, before and after, reaches both subscribers exactly once, in one order,
and the new active node is the topic's root."""

from __future__ import annotations

from pathlib import Path

import pytest

from gossamer.protocols.dissemination.scribe.owners import TopicOwners, spare_groups
from gossamer.testing import FakeEnv
from harness_net import reserve_port
from test_pubsub_loopback import NodeProcess
from test_pubsub_spares_procs import (
    PAXOS,
    START_WAIT,
    TOPIC,
    _until,
    delivered_once_in_one_order,
    publish_round,
    publish_until,
    subscribe_all,
)

pytestmark = [pytest.mark.processes]


def test_a_group_started_later_takes_its_key_range_and_the_topic_goes_on(
        tmp_path: Path) -> None:
    addr = [f"127.0.0.1:{reserve_port()}" for _ in range(9)]
    ring, new = addr[:2], addr[2]
    spares = {a: (addr[3 + 2 * i], addr[4 + 2 * i]) for i, a in enumerate([*ring, new])}
    old_spares = {a: s for a, s in spares.items() if a != new}
    bits = 256  # gossamer pubsub node's --chord-bits default
    owners = TopicOwners(FakeEnv(new), groups=spare_groups(spares), bits=bits, grown=[new])
    # the new group's key range is wherever its (random) address hashes: a narrow one may
    # hold none of the first few hundred names (CI: 1 run in some hundreds), so look further
    topic = next((t for t in (f"{TOPIC}{i}" for i in range(2_000_000))
                  if owners.owner_of(t) == new), None)
    assert topic is not None, f"no topic name of 2,000,000 falls in {new}'s range ({addr})"

    def placement(groups: dict[str, tuple[str, ...]]) -> list[str]:
        return [arg for a, s in groups.items() for arg in ("--spares", f"{a}={','.join(s)}")]

    nodes: dict[str, NodeProcess] = {}
    with (tmp_path / "nodes.log").open("wb") as log:
        def spawn(me: str, extra: list[str]) -> None:
            port = me.rsplit(":", 1)[1]
            contact = None if me == ring[0] else ring[0]
            nodes[me] = NodeProcess("scribe", contact, tmp_path, log, extra=(
                "--interactive", "--run", "loopback-grow", "--port", port, *extra, *PAXOS,
                "--data-dir", str(tmp_path / port)))

        try:
            first = [*ring, *(s for a in ring for s in spares[a])]
            for me in first:
                spawn(me, placement(old_spares))
            for me in first:
                assert nodes[me].ready().node == me
            for me in ring:
                nodes[me].wait(lambda e: e["event"] == "joined", START_WAIT)
            subscribers, publisher = ring, nodes[ring[0]]
            subscribe_all([nodes[me] for me in subscribers], topic)
            acked: list[str] = []
            publish_round(publisher, topic, 0, 10, acked)
            for me in (new, *spares[new]):
                spawn(me, [*placement(spares), "--grown", new])
            for me in (new, *spares[new]):
                assert nodes[me].ready().node == me
            nodes[new].wait(lambda e: e["event"] == "joined", START_WAIT)

            def taken() -> bool:
                status = nodes[new].command("status", "status")
                return status["groups"][new]["claiming"] is False

            _until(taken, f"{new}'s group holding its key range")
            _until(lambda: nodes[new].command("status", "status")["topics"].get(
                topic, {}).get("role") == "root", f"{new} the root of {topic}")
            publish_until(publisher, topic, 10, acked, 15)
            delivered_once_in_one_order([nodes[me] for me in subscribers], topic, acked)
        finally:
            for node in nodes.values():
                node.close()
