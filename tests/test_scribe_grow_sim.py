"""Growing the seed's placement while it runs (issue 19, seed 001 phase 3): a new group whose
active node joins the ring takes part of an owner's key range, and the moved topics' state is
handed over through both groups' logs (``scribe/handover.py``). In the simulator the new group
starts while publishes flow: the topic moves to it, no acknowledged publish is lost, positions
go on from the old group's and every subscriber delivers the one decided order. Every
assertion message names the seed."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from checks import named
from gossamer.core.errors import ConfigError
from gossamer.protocols.dissemination.scribe import TreeRole
from gossamer.protocols.dissemination.scribe.handover import (
    RangeClaim,
    RangeState,
    ident_hex,
    in_range,
    state_fits,
)
from gossamer.protocols.dissemination.scribe.owners import TopicOwners, spare_groups
from gossamer.protocols.membership.chord.ring import chord_id
from gossamer.protocols.ordering.orderer import Redirected
from gossamer.protocols.ordering.paxos.config import DecidedOp
from gossamer.testing import FakeEnv, info_of
from owners_world import BITS, TOPIC, grow, order_problems


def check_growth(seed: int, loss: float, crash_new: float | None = None,
                 count: int = 60) -> Any:
    run = grow(seed, loss, crash_new=crash_new, count=count)
    net, rows = run.net, named(run.rows)
    grown, old = net.grown, net.owner
    problems = order_problems(run.rows, run.subscribers, run.alive)
    assert problems == [], f"seed={seed} loss={loss}: {problems[:10]}"
    acked = [r for r in rows if r.event == "acked" and r.key == TOPIC]
    assert len(acked) >= run.count - 5, f"seed={seed}: {len(acked)} of {run.count} acked"
    handed = {r.node: r.t for r in rows if r.event == "hand_over" and r.peer == grown}
    taken = [r.node for r in rows if r.event == "take" and r.key == f"owner:{grown}"]
    assert handed and taken, f"seed={seed}: hand-over at {handed}, taken at {taken}"
    ordered = [r for r in rows if r.event == "ordered" and r.key == TOPIC]
    by_old = [r for r in ordered if info_of(r).get("group") == f"owner:{old}"]
    by_new = [r for r in ordered if info_of(r).get("group") == f"owner:{grown}"]
    assert by_old and by_new, f"seed={seed}: ordered by the old group {len(by_old)}, new " \
                              f"{len(by_new)}"
    # the old group orders nothing of the topic once its log handed it over, and the new
    # group's positions go on from the old one's
    late = [r for r in by_old if r.node in handed and r.t > handed[r.node]]
    assert late == [], f"seed={seed}: ordered by {old}'s group after the hand-over: {late[:3]}"
    assert min(r.seq for r in by_new) == max(r.seq for r in by_old) + 1, f"seed={seed}"
    assert [r for r in acked if r.t > min(handed.values()) + 1.0], f"seed={seed}: none acked " \
                                                                   f"after the hand-over"
    roots = [n for n in run.alive if net.procs[n].active
             and net.scribe(n).role(TOPIC) is TreeRole.ROOT]
    (root,) = roots
    assert net.procs[root].owner == grown, f"seed={seed}: root {root}, grown {grown}"
    return run


@pytest.mark.parametrize(("seed", "loss"), [(1, 0.0), (2, 0.05)])
def test_a_new_group_takes_the_topic_through_both_logs_and_nothing_acknowledged_is_lost(
        seed: int, loss: float) -> None:
    check_growth(seed, loss)


def test_a_spare_of_the_new_group_claims_the_range_when_its_active_node_dies_first() -> None:
    seed = 3
    run = check_growth(seed, 0.0, crash_new=0.2, count=160)  # publishes until after the take
    grown = run.net.grown
    took = [r.node for r in named(run.rows) if r.event == "join_ring"
            and r.key == f"owner:{grown}" and r.node != grown]
    assert took and took[0] in run.net.grown_groups[grown], f"seed={seed}: {took}"


# -- the hand-over's rules, one decided operation at a time -----------------------------------

GROUPS = spare_groups({"a": ("a1", "a2"), "d": ("d1", "d2")})
LOW, HIGH = sorted(((chord_id("d", BITS), "d"), (chord_id("a", BITS), "a")))


def _names(prefix: str) -> Any:
    return (f"{prefix}{i}" for i in range(100_000))


def _setup() -> tuple[str, str, str, str, str, str]:
    """``holder`` (of the two founding owners, the one whose range the new owner ``new``
    cuts), a key ``moved`` of ``new``'s part, a key ``kept`` of the rest, and the range."""
    holder, other = HIGH[1], LOW[1]
    lo, hi = chord_id(other, BITS), chord_id(holder, BITS)
    new = next(n for n in _names("g") if in_range(chord_id(n, BITS), lo, hi - 1)
               and chord_id(n, BITS) - lo > 16)
    mine = chord_id(new, BITS)
    moved = next(k for k in _names("k") if in_range(chord_id(k, BITS), lo, mine))
    kept = next(k for k in _names("k") if in_range(chord_id(k, BITS), mine, hi))
    return holder, new, moved, kept, ident_hex(lo), ident_hex(mine)


def decide(owners: TopicOwners, owner: str, slot: int, payload: Any) -> None:
    replica = owners.replica(owner)
    assert replica is not None and replica.on_decided is not None
    replica.on_decided(DecidedOp(slot=slot, index=0, id=f"x:{slot}", payload=payload))


def reasons(env: FakeEnv) -> list[str]:
    return [info_of(r)["reason"] for r in env.rows if r.event == "drop"]


def test_the_old_group_hands_the_range_over_in_log_order_and_orders_none_of_it_after() -> None:
    holder, new, moved, kept, lo, hi = _setup()
    env = FakeEnv(f"{holder}1")
    owners = TopicOwners(env, groups=GROUPS, bits=BITS)
    owners.start()
    members = (new, f"{new}.s1", f"{new}.s2")
    decide(owners, holder, 1, {"key": moved, "item": ["p", 1, "one"]})
    assert owners.position(moved) == 1 and owners.takes(moved)
    # forged or misfit claims change nothing
    owners.on_range_message("x9", RangeClaim(lo=lo, hi=hi, to=new, members=members))
    wrong = ident_hex(int(lo, 16) + 1)
    owners.on_range_message(new, RangeClaim(lo=wrong, hi=hi, to=new, members=members))
    assert reasons(env)[-2:] == ["claim_not_from_its_group", "claim_out_of_range"]
    assert owners.takes(moved)
    # a fitting claim is proposed in the holder's log; nothing moves until it is decided
    owners.on_range_message(new, RangeClaim(lo=lo, hi=hi, to=new, members=members))
    assert owners.takes(moved)
    spec = {"lo": lo, "hi": hi, "to": new, "members": list(members)}
    decide(owners, holder, 2, {"hand_over": spec})
    assert not owners.takes(moved) and owners.takes(kept)
    answers: list[Any] = []
    owners.propose(moved, object(), answers.append)
    assert isinstance(answers[0], Redirected) and answers[0].leader in members
    # a publish of the moved key decided after the hand-over gets no position here
    decide(owners, holder, 3, {"key": moved, "item": ["p", 2, "two"]})
    assert owners.position(moved) == 1 and reasons(env)[-1] == "key_not_ordered_here"
    decide(owners, holder, 4, {"hand_over": spec})
    assert reasons(env)[-1] == "handed_over_already"
    # the claim again: answered with the state the log handed over
    env.sent.clear()
    owners.on_range_message(members[1], RangeClaim(lo=lo, hi=hi, to=new, members=members))
    [(dst, state)] = env.sent
    assert dst == members[1] and isinstance(state, RangeState)
    assert state.state == {"positions": {moved: 1}, "history": {moved: [[1, ["p", 1, "one"]]]}}
    # what the log decided survives a snapshot
    snap = owners.replica(holder).snapshot_fn()  # type: ignore[union-attr,misc]
    again = TopicOwners(FakeEnv(f"{holder}2"), groups=GROUPS, bits=BITS)
    again.replica(holder).restore_fn(snap)  # type: ignore[union-attr,misc]
    assert not again.takes(moved) and again.takes(kept)


def test_the_new_group_orders_nothing_before_its_log_took_the_state() -> None:
    holder, new, moved, _, lo, hi = _setup()
    groups = {**GROUPS, new: (new, f"{new}.s1", f"{new}.s2")}
    env = FakeEnv(f"{new}.s1")
    owners = TopicOwners(env, groups=groups, bits=BITS, grown=[new])
    owners.start()
    assert owners.owner_of(moved) == new and owners.claiming(new)
    assert not owners.takes(moved)
    answers: list[Any] = []
    owners.propose(moved, object(), answers.append)
    assert isinstance(answers[0], Redirected) and answers[0].leader in GROUPS[holder]
    state = {"positions": {moved: 7}, "history": {moved: [[7, ["p", 3, "seven"]]]}}
    owners.on_range_message("x9", RangeState(lo=lo, hi=hi, owner=holder, state=state))
    assert reasons(env)[-1] == "state_not_from_its_group"
    decide(owners, new, 1, {"take": {"lo": lo, "hi": hi, "from": "d" if holder == "a" else "a",
                                     "state": state}})
    assert reasons(env)[-1] == "bad_take" and owners.claiming(new)
    decide(owners, new, 2, {"take": {"lo": lo, "hi": hi, "from": holder, "state": state}})
    assert not owners.claiming(new) and owners.takes(moved)
    assert owners.position(moved) == 7
    assert [(p, i.seq) for p, i in owners.history(moved)] == [(7, 3)]
    decide(owners, new, 3, {"take": {"lo": lo, "hi": hi, "from": holder, "state": state}})
    assert reasons(env)[-1] == "taken_already"
    with pytest.raises(ConfigError):
        TopicOwners(FakeEnv(new), groups=groups, bits=BITS, grown=["zz"])
    with pytest.raises(ConfigError):
        TopicOwners(FakeEnv(new), groups=GROUPS, bits=BITS, grown=["a", "d"])


def test_a_state_too_big_for_one_operation_leaves_out_its_oldest_history() -> None:
    item = ["p", 1, "x" * 100]
    state = {"positions": {"a": 30, "b": 20},
             "history": {"a": [[p, item] for p in range(1, 31)],
                         "b": [[p, item] for p in range(1, 21)]}}
    fitted = state_fits(state, 2_000)
    assert len(orjson.dumps(fitted)) <= 2_000
    assert fitted["positions"] == {"a": 30, "b": 20}  # positions always move
    kept = [p for items in fitted["history"].values() for p, _ in items]
    assert kept and min(kept) > 15 and fitted["history"]["a"][-1][0] == 30  # newest kept
    assert state_fits(state, 1 << 20) == state  # a state that fits is unchanged
