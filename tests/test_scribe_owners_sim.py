"""Replicated topic owners (issue 19 point 2) in the simulator: each founding owner's topics are
ordered by a Multi-Paxos group of the owner and its next two ring nodes. The owner crashes while
publishes flow: no acknowledged publish is lost, and every subscriber delivers the topic in the
one decided order (``seq`` of its deliver rows is the decided position).

Every check reads the trace; every assertion message names the seed.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from checks import named
from gossamer.core import node_ids
from gossamer.core.errors import ConfigError, InvalidMessage
from gossamer.protocols.dissemination.scribe import Publish, TreeRole
from gossamer.protocols.dissemination.scribe.owners import (
    TopicOwners,
    owner_groups,
)
from gossamer.protocols.membership.chord.ring import chord_id
from gossamer.protocols.ordering.paxos.groups import (
    GROUP_CODEC,
    GroupMessage,
    PaxosGroups,
    PrefixedStore,
)
from gossamer.protocols.ordering.paxos.messages import Nack
from gossamer.testing import FakeEnv
from owners_world import BITS, TOPIC, order_problems, owner_crash


def run_owner_crash(seed: int, loss: float, recover_after: float | None = None) -> None:
    run = owner_crash(seed, loss, recover_after=recover_after)
    rows, net, crash_at, count = run.rows, run.net, run.crash_at, run.count
    problems = order_problems(rows, run.subscribers, run.alive)
    assert problems == [], f"seed={seed} loss={loss} owner={net.owner}: {problems[:10]}"
    acked = [r for r in named(rows) if r.event == "acked" and r.key == TOPIC]
    assert len(acked) >= count - 5, f"seed={seed}: only {len(acked)} of {count} acknowledged"
    late = [r for r in acked if r.t > crash_at + 1.0]
    assert late, f"seed={seed}: nothing was acknowledged after the owner crashed"
    roots = [n for n in run.alive if net.apps[n].scribe.role(TOPIC) is TreeRole.ROOT]
    assert roots and set(roots) <= set(net.group), (
        f"seed={seed}: root after the crash {roots}, group {net.group}")


@pytest.mark.parametrize("seed", [8, 20])
def test_an_owner_that_comes_back_keeps_one_order_when_a_retry_was_decided_twice(
        seed: int) -> None:
    """The owner returns and is root again while a publisher's retry is decided a second time
    (seeds 8 and 20: at consecutive positions): every subscriber delivers it at its first
    position, however its two copies arrive."""
    run_owner_crash(seed, 0.03, recover_after=3.0)


@pytest.mark.parametrize(("seed", "loss"), [
    (1, 0.0), (2, 0.03),
    *(pytest.param(s, loss, marks=pytest.mark.slow) for s in (3, 4, 5) for loss in (0.0, 0.05))])
def test_owner_crash_mid_stream_loses_no_acknowledged_publish_and_keeps_one_order(
        seed: int, loss: float) -> None:
    run_owner_crash(seed, loss)


def test_owner_groups_are_the_owner_and_its_next_two_ring_nodes() -> None:
    ids = node_ids(5)
    groups = owner_groups(ids, bits=BITS)
    ring = sorted(ids, key=lambda n: chord_id(n, BITS))
    for i, node in enumerate(ring):
        assert groups[node] == (node, ring[(i + 1) % 5], ring[(i + 2) % 5])
    assert owner_groups(ids[:2], bits=BITS)[ids[0]] == (
        ids[0], ids[1])  # a ring of two: groups of two
    with pytest.raises(ConfigError):
        owner_groups(ids, bits=BITS, backups=-1)


def test_a_node_outside_a_topics_group_redirects_to_a_member_of_it() -> None:
    ids = node_ids(6)
    groups = owner_groups(ids, bits=BITS)
    probe = TopicOwners(FakeEnv(ids[0]), ids, bits=BITS)
    owner = probe.owner_of(TOPIC)
    outsider = next(n for n in ids if n not in groups[owner])
    owners = TopicOwners(FakeEnv(outsider), ids, bits=BITS)
    answers: list[Any] = []
    owners.propose(TOPIC, object(), answers.append)
    assert [type(a).__name__ for a in answers] == ["Redirected"]
    assert answers[0].leader in groups[owner]  # any member takes it


def test_group_messages_validate_and_unknown_or_bad_ones_are_dropped() -> None:
    with pytest.raises(ValueError):
        GroupMessage(group="", body={})
    with pytest.raises(ValueError):
        GroupMessage(group="a/b", body={})
    with pytest.raises(ValueError):
        GroupMessage(group="g", body=[1])
    with pytest.raises(InvalidMessage):
        GROUP_CODEC.decode(orjson.dumps({"type": "paxos.group", "group": 3, "body": {}}))
    env = FakeEnv("n1")
    owners = TopicOwners(env, ["n1", "n2", "n3"], bits=BITS)
    owners.start()
    env.take_sent()
    replica = next(iter(owners.groups.replicas.values()))
    before = (replica.role, replica.current_leader, replica.delivered, replica.max_round)
    owners.on_message("n2", GroupMessage(group="nobody", body={"type": "paxos.nack"}))
    owners.on_message("n2", GroupMessage(group=replica.group, body={"type": "paxos.nope"}))
    reasons = [row.info for row in env.traced("drop", layer="paxos")]
    assert any("unknown_group" in str(r) for r in reasons), reasons
    assert any("bad_group_body" in str(r) for r in reasons), reasons
    assert (replica.role, replica.current_leader, replica.delivered, replica.max_round) == before
    assert env.take_sent() == []


def test_a_group_replicas_tables_are_prefixed_and_its_messages_wrapped() -> None:
    env = FakeEnv("n1")
    store = PrefixedStore(env.store, "owner:n1")
    store.put("paxos", "k", b"v")
    assert env.store.get("owner:n1/paxos", "k") == b"v" and store.get("paxos", "k") == b"v"
    assert list(store.scan("paxos")) == [("k", b"v")]
    view = PaxosGroups(env).view("owner:n1")
    view.send("n2", Nack(promised=(1, "n2")))
    sent = env.sent
    assert len(sent) == 1
    dst, msg = sent[0]
    assert dst == "n2" and isinstance(msg, GroupMessage) and msg.group == "owner:n1"
    assert msg.body["type"] == "paxos.nack"


def test_a_group_of_one_orders_keeps_bounded_histories_and_answers_a_retry_at_once() -> None:
    env = FakeEnv("n1")
    owners = TopicOwners(env, ["n1"], bits=BITS, history_limit=2, max_topics=2)
    heard: list[tuple[str, int, str]] = []
    owners.on_ordered = lambda key, pos, item: heard.append((key, pos, item.origin))
    owners.start()
    env.advance(0.5)
    answers: list[Any] = []
    for topic in ("a", "b", "c"):
        for seq in (1, 2, 3):
            owners.propose(topic, Publish(topic=topic, origin="p", seq=seq + 10 * ord(topic),
                                          payload=seq), answers.append)
            env.advance(0.05)
    assert [type(a).__name__ for a in answers] == ["Accepted"] * 9, answers
    assert [a.position for a in answers] == [1, 2, 3] * 3
    assert [(k, p) for k, p, _ in heard] == [(t, p) for t in "abc" for p in (1, 2, 3)]
    assert owners.history("a") == []  # the oldest topic's history went (max_topics = 2)
    assert [pos for pos, _ in owners.history("c")] == [2, 3]  # the last history_limit items
    replica = owners.replica("n1")
    assert replica is not None
    before = replica.delivered
    retry: list[Any] = []
    owners.propose("c", Publish(topic="c", origin="p", seq=3 + 10 * ord("c"), payload=3),
                   retry.append)
    env.advance(0.5)
    assert [(type(a).__name__, a.position) for a in retry] == [("Accepted", 3)]
    assert replica.delivered == before  # answered from the history: not proposed again


@pytest.mark.parametrize("seed", [47, 62])
def test_a_subscriber_whose_join_was_lost_delivers_its_catch_up_in_the_decided_order(
        seed: int) -> None:
    """At 8% loss a subscriber's first JOIN is lost (seeds 47, 62): it joins the stream after
    the first publishes, fetches them by catch-up, and delivers them before what arrives live
    (it held its deliveries until the catch-up was over)."""
    run_owner_crash(seed, 0.08, recover_after=1.5 if seed % 2 else None)
