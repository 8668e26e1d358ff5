"""Unit tests of each Multi-Paxos handler on a FakeEnv: what a replica sends, writes and
traces for each message, and that bad or old messages change nothing."""

from __future__ import annotations

from typing import Any

import pytest

from gossamer.core import InvalidMessage
from gossamer.core.errors import ConfigError, StateError
from gossamer.protocols.ordering.paxos import (
    CODEC,
    Accept,
    AcceptOk,
    Catchup,
    Committed,
    Decided,
    DecidedOp,
    Nack,
    Noop,
    NoopOk,
    NotCommitted,
    Outcome,
    PaxosConfig,
    PaxosReplica,
    Prepare,
    PrepareOk,
    Propose,
    Role,
    Snapshot,
)
from gossamer.protocols.ordering.paxos.store import LogRow, PaxosStore
from gossamer.testing import FakeEnv

MEMBERS = ("a", "b", "c")
CONFIG = PaxosConfig(window=2, snapshot_every=0)


def replica(node: str = "b", *, env: FakeEnv | None = None, config: PaxosConfig = CONFIG,
            **kwargs: Any) -> tuple[PaxosReplica, FakeEnv, list[DecidedOp]]:
    env = env if env is not None else FakeEnv(node)
    decided: list[DecidedOp] = []
    kwargs.setdefault("on_decided", decided.append)
    rep = PaxosReplica(env, MEMBERS, config=config, **kwargs)
    rep.start()
    env.run_due()
    return rep, env, decided


def sent_of(env: FakeEnv, kind: type) -> list[tuple[str, Any]]:
    return [(dst, msg) for dst, msg in env.take_sent() if isinstance(msg, kind)]


def elect(rep: PaxosReplica, env: FakeEnv) -> None:
    """Make ``rep`` (node "a", the initial leader) leader with promises from b and c."""
    env.run_due()
    ballot = rep.leader.ballot
    assert ballot is not None
    for src in ("b", "c"):
        rep.on_message(src, PrepareOk(ballot=ballot, from_slot=1, accepted=(), decided=(),
                                      snapshot_slot=0))
    env.run_due()
    assert rep.role is Role.LEADER


def op(cid: str, data: Any = None) -> tuple[str, str, Any]:
    return ("op", cid, data)


# -- messages ---------------------------------------------------------------------------------


@pytest.mark.parametrize("build", [
    lambda: Prepare(ballot=(0, "a"), from_slot=1),
    lambda: Prepare(ballot=(1, "bad id!"), from_slot=1),
    lambda: Prepare(ballot=(1, "a"), from_slot=0),
    lambda: Accept(ballot=(1, "a"), slot=1, value=(("jump", "a:1", None),)),
    lambda: Accept(ballot=(1, "a"), slot=1, value=(("add", "a:1", "not a node!"),)),
    lambda: Accept(ballot=(1, "a"), slot=1, value=(("op", "", None),)),
    lambda: Decided(entries=((2, ()), (1, ()))),
    lambda: Propose(commands=()),
    lambda: Snapshot(slot=1, state=None, configs=(), recent_ids=()),
    lambda: Snapshot(slot=1, state=None, configs=((1, ()),), recent_ids=()),
    lambda: Snapshot(slot=1, state=None, configs=((1, ("a",)),), recent_ids=(("a:1", 0, 0),)),
    lambda: Noop(ballot=(1, "a"), decided_upto=-1),
])
def test_a_malformed_message_cannot_be_built(build: Any) -> None:
    with pytest.raises((ValueError, ConfigError)):
        build()


def test_messages_cross_the_codec_and_bad_frames_are_refused() -> None:
    msg = PrepareOk(ballot=(2, "a"), from_slot=3, accepted=((3, (1, "b"), (op("b:1", [1]),)),),
                    decided=((4, ()),), snapshot_slot=0)
    assert CODEC.decode(CODEC.encode(msg)) == msg
    with pytest.raises(InvalidMessage):
        CODEC.decode(b'{"type":"paxos.accept","ballot":[1,"a"],"slot":0,"value":[]}')
    with pytest.raises(InvalidMessage):
        CODEC.decode(b'{"type":"paxos.noop","ballot":[1,"a"]}')


def test_config_refuses_nonsense() -> None:
    with pytest.raises(ConfigError):
        PaxosConfig(suspect_timeout=0.5, heartbeat_interval=1.0)
    with pytest.raises(ConfigError):
        PaxosConfig(window=0)
    with pytest.raises(ConfigError):
        PaxosReplica(FakeEnv("z"), MEMBERS)  # not a founding member


# -- START and election -------------------------------------------------------------------


def test_the_initial_leader_campaigns_at_start_once_its_round_is_durable() -> None:
    env = FakeEnv("a")
    rep = PaxosReplica(env, MEMBERS, config=CONFIG)
    rep.start()
    assert rep.role is Role.CANDIDATE
    assert env.take_sent() == []  # the round is not on disk yet
    env.run_due()
    assert sent_of(env, Prepare) == [("b", Prepare(ballot=(1, "a"), from_slot=1)),
                                     ("c", Prepare(ballot=(1, "a"), from_slot=1))]
    again = PaxosReplica(FakeEnv("a", store=env.store), MEMBERS, config=CONFIG)
    assert again.max_round == 1  # a restart campaigns above it


def test_other_founders_wait_and_suspect_after_the_timeout() -> None:
    rep, env, _ = replica("b")
    assert rep.role is Role.FOLLOWER and env.take_sent() == []
    env.advance(CONFIG.suspect_timeout + CONFIG.election_jitter + 0.01)
    env.run_due()
    assert rep.role is Role.CANDIDATE
    assert {dst for dst, _ in sent_of(env, Prepare)} == {"a", "c"}


def test_prepare_is_promised_on_disk_before_prepare_ok_leaves() -> None:
    rep, env, _ = replica("b")
    rep.on_message("a", Prepare(ballot=(3, "a"), from_slot=1))
    assert env.take_sent() == []
    env.run_due()
    [(dst, reply)] = env.take_sent()
    assert dst == "a" and reply == PrepareOk(ballot=(3, "a"), from_slot=1, accepted=(),
                                             decided=(), snapshot_slot=0)
    env.crash()
    restarted, _env2, _ = replica("b", env=FakeEnv("b", store=env.store))
    assert restarted.ballot == (3, "a")


def test_a_crash_before_the_promise_is_on_disk_sends_nothing_and_forgets_it() -> None:
    rep, env, _ = replica("b")
    rep.on_message("a", Prepare(ballot=(3, "a"), from_slot=1))
    env.crash()  # power loss during the group commit
    assert env.take_sent() == []
    restarted, _env2, _ = replica("b", env=FakeEnv("b", store=env.store))
    assert restarted.ballot is None


def test_old_ballots_are_dropped_with_a_nack_and_change_nothing() -> None:
    rep, env, _ = replica("b")
    rep.on_message("c", Prepare(ballot=(5, "c"), from_slot=1))
    env.run_due()
    env.take_sent()
    for msg in (Prepare(ballot=(4, "a"), from_slot=1),
                Accept(ballot=(4, "a"), slot=1, value=()),
                Noop(ballot=(4, "a"), decided_upto=0)):
        rep.on_message("a", msg)
        env.run_due()
    assert env.drop_reasons("paxos") == ["old_ballot"] * 3
    assert env.take_sent() == [("a", Nack(promised=(5, "c")))] * 3
    assert rep.ballot == (5, "c") and rep.log.rows == {}


def test_forged_and_unknown_senders_are_dropped() -> None:
    rep, env, _ = replica("b")
    rep.on_message("c", Prepare(ballot=(9, "a"), from_slot=1))  # c claims a's ballot
    rep.on_message("mallory", Prepare(ballot=(9, "mallory"), from_slot=1))
    rep.on_message("c", Accept(ballot=(9, "a"), slot=1, value=()))
    env.run_due()
    assert env.drop_reasons("paxos") == ["forged_ballot", "unknown_sender", "forged_ballot"]
    assert env.take_sent() == [] and rep.ballot is None and rep.log.rows == {}


def test_elected_on_a_majority_then_heartbeats() -> None:
    rep, env, _ = replica("a")
    env.take_sent()
    rep.on_message("b", PrepareOk(ballot=(1, "a"), from_slot=1, accepted=(), decided=(),
                                  snapshot_slot=0))
    assert rep.role is Role.LEADER  # a (its own promise) and b: 2 of 3
    assert [row.event for row in env.traced(layer="paxos")][-2:] == ["elected", "leader"]
    assert sent_of(env, Noop) == [("b", Noop(ballot=(1, "a"), decided_upto=0)),
                                  ("c", Noop(ballot=(1, "a"), decided_upto=0))]
    env.advance(CONFIG.heartbeat_interval)
    assert len(sent_of(env, Noop)) == 2


def test_stale_prepare_ok_is_dropped() -> None:
    rep, env, _ = replica("b")
    rep.on_message("a", PrepareOk(ballot=(1, "b"), from_slot=1, accepted=(), decided=(),
                                  snapshot_slot=0))
    assert env.drop_reasons("paxos") == ["stale_prepare_ok"]
    assert rep.role is Role.FOLLOWER


def test_a_nack_with_a_higher_ballot_ends_the_campaign() -> None:
    rep, _env, _ = replica("a")
    rep.on_message("b", Nack(promised=(7, "c")))
    assert rep.role is Role.FOLLOWER and rep.leader.ballot is None
    assert rep.max_round == 7


# -- recovery, window, batching -------------------------------------------------------------


def test_a_new_leader_recovers_accepted_values_and_fills_holes_with_noops() -> None:
    rep, env, _ = replica("a", config=PaxosConfig(window=4, snapshot_every=0))
    env.take_sent()
    older = (op("c:2", "y"),)
    rep.on_message("b", PrepareOk(ballot=(1, "a"), from_slot=1,
                                  accepted=((3, (1, "c"), older),), decided=(),
                                  snapshot_slot=0))
    assert rep.role is Role.LEADER  # a's own promise and b's
    accepts = {msg.slot: msg.value for _dst, msg in sent_of(env, Accept)}
    assert accepts == {1: (), 2: (), 3: older}  # slots 1 and 2 were holes: no-ops


def test_the_value_of_the_highest_ballot_in_the_quorum_is_recovered() -> None:
    low, high = (op("b:1", "low"),), (op("c:1", "high"),)
    # (what a itself accepted in slot 1, what the other member reports): high wins either way
    cases = [(((2, "b"), low), ("c", (4, "c"), high)), (((4, "c"), high), ("b", (2, "b"), low))]
    for (own_ballot, own_value), (other, ballot, value) in cases:
        env = FakeEnv("a")
        saved = PaxosStore(env.store)
        saved.save_promised(own_ballot)
        saved.save_row(1, LogRow(own_ballot, own_value))
        env.store.commit()
        rep, env, _ = replica("a", env=env, config=PaxosConfig(window=4, snapshot_every=0))
        rep.leader.campaign()
        env.run_due()  # a promises itself and reports its own slot 1
        env.take_sent()
        mine = rep.leader.ballot
        assert mine == (own_ballot[0] + 1, "a")
        rep.on_message(other, PrepareOk(ballot=mine, from_slot=1, accepted=((1, ballot, value),),
                                        decided=(), snapshot_slot=0))
        assert rep.role is Role.LEADER
        assert {msg.value for _d, msg in sent_of(env, Accept)} == {high}


def test_proposals_are_batched_and_the_window_bounds_slots_in_flight() -> None:
    rep, env, _ = replica("a")  # window 2
    env.run_due()
    done: list[Outcome] = []
    for i in range(5):
        rep.propose(i, done.append)  # queued: no leader yet
    elect(rep, env)
    accepts = [msg for _dst, msg in sent_of(env, Accept)]
    assert {m.slot for m in accepts} == {1}  # one slot holds all five
    assert len(accepts[0].value) == 5
    for i in range(5, 9):
        rep.propose(i, done.append)
    accepts = [msg for _dst, msg in sent_of(env, Accept)]
    assert {m.slot for m in accepts} == {2}  # slot 3 is beyond the window of 2
    rep.on_message("b", AcceptOk(ballot=(1, "a"), slot=1))
    env.run_due()  # a's own ACCEPT_OK and the decision's commit
    accepts = [msg for _dst, msg in sent_of(env, Accept)]
    assert {m.slot for m in accepts} == {3}
    assert [o for o in done if isinstance(o, Committed)] == [Committed(1, i) for i in range(5)]


def test_a_proposal_at_a_follower_is_forwarded_to_the_leader() -> None:
    rep, env, _ = replica("b")
    rep.on_message("a", Noop(ballot=(1, "a"), decided_upto=0))
    env.take_sent()
    cid = rep.propose({"x": 1})
    assert env.take_sent() == [("a", Propose(commands=(("op", cid, {"x": 1}),)))]
    env.advance(CONFIG.propose_retry)  # not decided yet: forwarded again
    assert [dst for dst, msg in env.take_sent() if isinstance(msg, Propose)] == ["a"]


def test_a_propose_reaching_a_follower_is_dropped() -> None:
    rep, env, _ = replica("b")
    rep.on_message("c", Propose(commands=(op("c:1"),)))
    assert env.drop_reasons("paxos") == ["not_leader"]


def test_proposing_needs_a_running_replica_and_bounded_payloads() -> None:
    env = FakeEnv("b")
    rep = PaxosReplica(env, MEMBERS, config=PaxosConfig(max_command_bytes=10))
    with pytest.raises(StateError):
        rep.propose(1)
    rep.start()
    with pytest.raises(ConfigError):
        rep.propose("x" * 20)


def test_too_many_pending_proposals_are_refused_definitely() -> None:
    rep, _env, _ = replica("b", config=PaxosConfig(max_pending=1))
    outcomes: list[Outcome] = []
    rep.propose(1, outcomes.append)
    rep.propose(2, outcomes.append)
    assert len(outcomes) == 1 and not isinstance(outcomes[0], Committed)
    assert outcomes[0].definite


# -- accept and learn ---------------------------------------------------------------------


def test_accept_is_written_then_acknowledged_to_every_member() -> None:
    rep, env, decided = replica("b")
    value = (op("a:1", "hello"),)
    rep.on_message("a", Accept(ballot=(1, "a"), slot=1, value=value))
    assert env.take_sent() == []
    env.run_due()
    ok = AcceptOk(ballot=(1, "a"), slot=1)
    assert sorted(dst for dst, msg in env.take_sent() if msg == ok) == ["a", "c"]
    assert rep.current_leader == "a"
    assert [row.seq for row in env.traced("accept", layer="paxos")] == [1]
    # b's own ACCEPT_OK arrived (self-send); one more makes a majority
    rep.on_message("c", ok)
    env.run_due()
    assert decided == [DecidedOp(1, 0, "a:1", "hello")]
    assert rep.decided_upto == 1
    [row] = env.traced("decide", layer="paxos")
    assert row.seq == 1


def test_accept_ok_from_a_non_member_or_too_far_is_dropped() -> None:
    rep, env, _ = replica("b")
    rep.on_message("a", AcceptOk(ballot=(1, "a"), slot=1000))
    assert env.drop_reasons("paxos") == ["too_far"]
    assert rep.decided_upto == 0


def test_votes_for_another_value_do_not_decide_mine() -> None:
    rep, env, decided = replica("b")
    rep.on_message("a", Accept(ballot=(1, "a"), slot=1, value=(op("a:1"),)))
    env.run_due()
    rep.on_message("c", AcceptOk(ballot=(2, "c"), slot=1))
    rep.on_message("a", AcceptOk(ballot=(2, "c"), slot=1))
    env.run_due()
    assert decided == [] and rep.decided_upto == 0  # majority of ballot 2, value unknown


def test_decided_slots_apply_in_order_and_duplicates_once() -> None:
    rep, env, decided = replica("b")
    rep.on_message("a", Decided(entries=((2, (op("a:1", 2),)),)))
    env.run_due()
    assert decided == [] and rep.decided_upto == 0  # slot 1 is missing
    rep.on_message("a", Decided(entries=((1, (op("a:1", 1), op("a:2", 1))),)))
    env.run_due()
    assert [(d.slot, d.id) for d in decided] == [(1, "a:1"), (1, "a:2")]
    assert rep.decided_upto == 2


def test_heartbeat_from_a_leader_ahead_triggers_catchup() -> None:
    rep, env, _ = replica("b")
    rep.on_message("a", Noop(ballot=(1, "a"), decided_upto=5))
    assert env.take_sent() == [("a", NoopOk(ballot=(1, "a"), decided_upto=0)),
                               ("a", Catchup(from_slot=1))]
    rep.on_message("a", Noop(ballot=(1, "a"), decided_upto=5))
    assert sent_of(env, Catchup) == []  # rate-limited


def test_a_follower_behind_asks_for_the_next_batch_as_soon_as_one_is_learnt() -> None:
    """Catching up is pipelined: each answer that leaves the follower short of what it heard
    decided is followed by the next request at once, not one batch per heartbeat."""
    config = PaxosConfig(window=2, snapshot_every=0, catchup_batch=3)
    rep, env, _ = replica("b", config=config)
    rep.on_message("a", Noop(ballot=(1, "a"), decided_upto=7))
    assert sent_of(env, Catchup) == [("a", Catchup(from_slot=1))]
    rep.on_message("a", Decided(entries=tuple((s, (op(f"a:{s}"),)) for s in (1, 2, 3))))
    env.run_due()
    assert rep.decided_upto == 3
    assert sent_of(env, Catchup) == [("a", Catchup(from_slot=4))]  # at once, no retry wait
    rep.on_message("a", Decided(entries=tuple((s, (op(f"a:{s}"),)) for s in (4, 5, 6))))
    env.run_due()
    assert sent_of(env, Catchup) == [("a", Catchup(from_slot=7))]
    rep.on_message("a", Decided(entries=((7, (op("a:7"),)),)))
    env.run_due()
    assert rep.decided_upto == 7 and sent_of(env, Catchup) == []  # caught up: no more
    rep.on_message("a", Decided(entries=((7, (op("a:7"),)),)))  # nothing new: no request
    assert sent_of(env, Catchup) == []


def test_catchup_answers_with_decided_entries_or_a_snapshot() -> None:
    config = PaxosConfig(snapshot_every=2, log_retain=0)
    app: list[str] = []
    rep, env, _ = replica("b", config=config, on_decided=lambda op: app.append(op.id),
                          snapshot_fn=lambda: list(app), restore_fn=app.extend)
    rep.on_message("a", Decided(entries=((1, (op("a:1"),)), (2, (op("a:2"),)))))
    env.run_due()
    rep.on_message("a", Decided(entries=((3, (op("a:3"),)),)))
    env.run_due()
    assert rep.log.snapshot is not None and rep.log.snapshot.slot == 2
    assert sorted(rep.log.rows) == [3]  # compacted behind the snapshot
    rep.on_message("c", Catchup(from_slot=3))
    assert env.take_sent() == [("c", Decided(entries=((3, (op("a:3"),)),)))]
    rep.on_message("c", Catchup(from_slot=1))
    sent = env.take_sent()
    assert sent[0] == ("c", Snapshot(slot=2, state=["a:1", "a:2"], configs=((1, MEMBERS),),
                                     recent_ids=(("a:1", 1, 0), ("a:2", 2, 0))))
    assert sent[1] == ("c", Decided(entries=((3, (op("a:3"),)),)))


def test_a_snapshot_installs_the_state_and_answers_own_proposals_in_it() -> None:
    restored: list[Any] = []
    rep, env, decided = replica("c", restore_fn=restored.append)
    outcomes: list[Outcome] = []
    cid = rep.propose("mine", outcomes.append)
    rep.on_message("a", Snapshot(slot=10, state={"k": 1}, configs=((1, MEMBERS),),
                                 recent_ids=((cid, 9, 0),)))
    env.run_due()
    assert restored == [{"k": 1}] and rep.decided_upto == 10
    assert outcomes == [Committed(9, 0)] and decided == []
    assert [row.event for row in env.traced("install")] == ["install"]


def test_a_joiner_asks_for_a_snapshot_and_learns_the_replica_set() -> None:
    env = FakeEnv("d")
    rep = PaxosReplica(env, joining=True, contacts=MEMBERS, config=CONFIG)
    rep.start()
    assert rep.role is Role.OUTSIDE
    rep.on_message("a", Noop(ballot=(1, "a"), decided_upto=3))
    assert sent_of(env, Catchup) == [("a", Catchup(from_slot=1, need_snapshot=True))]
    rep.on_message("a", Snapshot(slot=0, state=None, configs=((1, MEMBERS),), recent_ids=()))
    rep.on_message("a", Decided(entries=((1, (("add", "a:1", "d"),)),)))
    env.run_due()
    assert rep.members == frozenset(MEMBERS)  # the add takes effect 2 slots later
    rep.on_message("a", Decided(entries=((2, ()), (3, ()))))
    env.run_due()
    assert rep.members == frozenset({*MEMBERS, "d"}) and rep.role is Role.FOLLOWER


def test_the_leader_reports_a_silent_member_as_possibly_to_remove() -> None:
    suspects: list[str] = []
    rep, env, _ = replica("a", on_possible_remove_replica=suspects.append)
    elect(rep, env)
    for _ in range(int(CONFIG.possible_remove_after / CONFIG.heartbeat_interval) + 1):
        rep.on_message("b", NoopOk(ballot=(1, "a"), decided_upto=0))
        env.advance(CONFIG.heartbeat_interval)
    assert suspects == ["c"]


def test_a_message_of_another_layer_is_refused() -> None:
    rep, _env, _ = replica("b")
    from gossamer.protocols.ordering import FifoSync
    with pytest.raises(InvalidMessage):
        rep.on_message("a", FifoSync())


def test_a_removed_replica_answers_its_undecided_proposals_and_refuses_new_ones() -> None:
    rep, env, _ = replica("c")
    rep.on_message("a", Noop(ballot=(1, "a"), decided_upto=0))
    outcomes: list[Outcome] = []
    rep.propose("left behind", outcomes.append)
    # the removal of c is decided in slot 1; it takes effect at slot 1 + window (2) = 3
    rep.on_message("a", Decided(entries=((1, (("remove", "a:9", "c"),)), (2, ()))))
    env.run_due()
    assert rep.role is Role.OUTSIDE
    assert outcomes == [NotCommitted("removed from the group before it was decided",
                                     definite=False)]
    rep.propose("too late", outcomes.append)
    assert outcomes[-1] == NotCommitted("not a member of the group", definite=True)
    assert rep.pending_count == 0


def test_notifications_leader_changed_added_and_removed_replica() -> None:
    changes: list[tuple[Any, Any]] = []
    added: list[tuple[int, str]] = []
    removed: list[tuple[int, str]] = []
    rep, env, _ = replica("b", on_leader_changed=lambda n, b: changes.append((n, b)),
                          on_added_replica=lambda s, n: added.append((s, n)),
                          on_removed_replica=lambda s, n: removed.append((s, n)))
    rep.on_message("a", Noop(ballot=(1, "a"), decided_upto=0))
    rep.on_message("a", Noop(ballot=(1, "a"), decided_upto=0))  # the same leader: once
    rep.on_message("a", Decided(entries=((1, (("add", "a:1", "d"),)),
                                         (2, (("remove", "a:2", "c"),)))))
    env.run_due()
    assert changes == [("a", (1, "a"))]
    assert added == [(1, "d")] and removed == [(2, "c")]
    rep.on_message("c", Prepare(ballot=(2, "c"), from_slot=3))
    env.run_due()
    rep.on_message("c", Accept(ballot=(2, "c"), slot=3, value=()))
    env.run_due()
    assert changes[-1] == ("c", (2, "c"))


def test_the_leader_is_suspected_suspect_timeout_after_its_last_word() -> None:
    config = PaxosConfig(election_jitter=0.0, snapshot_every=0)
    rep, env, _ = replica("b", config=config)
    env.advance(1.5)
    rep.on_message("a", Noop(ballot=(1, "a"), decided_upto=0))  # then a falls silent
    env.advance(config.suspect_timeout)  # t = 3.5: two seconds after a's last NOOP
    env.run_due()
    assert rep.role is Role.CANDIDATE
    [row] = env.traced("suspect", layer="paxos")
    assert row.t == pytest.approx(1.5 + config.suspect_timeout)


def test_values_for_slots_far_beyond_the_log_are_dropped() -> None:
    rep, env, decided = replica("b")
    far = rep.horizon + 1
    rep.on_message("a", Accept(ballot=(1, "a"), slot=far, value=(op("a:1"),)))
    rep.on_message("a", Decided(entries=((far, (op("a:2"),)),)))
    env.run_due()
    assert env.drop_reasons("paxos") == ["too_far", "too_far"]
    # nothing taken, but the replica knows it is behind: it asks the leader to catch up
    assert env.take_sent() == [("a", Catchup(from_slot=1))]
    assert rep.log.rows == {} and decided == []
    assert rep.ballot is None  # not even the ballot was taken


def test_an_accept_too_far_ahead_still_counts_as_word_from_the_leader() -> None:
    """A follower far behind under load drops the leader's ACCEPTs it cannot take yet, but
    they show the leader alive: it is suspected only ``suspect_timeout`` after the last one
    (before, a lagging follower campaigned against a live leader and took the lead)."""
    config = PaxosConfig(election_jitter=0.0, snapshot_every=0)
    rep, env, _ = replica("b", config=config)
    env.advance(1.5)
    rep.on_message("a", Noop(ballot=(1, "a"), decided_upto=0))
    env.advance(1.5)  # t = 3.0
    rep.on_message("a", Accept(ballot=(1, "a"), slot=rep.horizon + 1, value=(op("a:9"),)))
    assert env.drop_reasons("paxos") == ["too_far"]
    env.advance(config.suspect_timeout - 0.1)  # t = 4.9: 3.4 s after the NOOP
    env.run_due()
    assert rep.role is Role.FOLLOWER and env.traced("suspect", layer="paxos") == []
    env.advance(0.2)  # t = 5.1: 2.1 s after the ACCEPT
    env.run_due()
    assert rep.role is Role.CANDIDATE
    [row] = env.traced("suspect", layer="paxos")
    assert row.t == pytest.approx(3.0 + config.suspect_timeout)
