"""The atomic layer driven by hand: durable before YES, delivery once, and what it drops."""

from __future__ import annotations

from gossamer.protocols.dissemination.srm import SrmData, SrmSession
from gossamer.protocols.membership.srm_group import GroupBoot, GroupJoin
from gossamer.protocols.ordering.atomic import (
    AtomicConfig,
    AtomicProcess,
    AtomicProcessConfig,
    Data,
    Outcome,
    OutcomeAnswer,
    OutcomeQuery,
    Vote,
)
from gossamer.protocols.ordering.atomic.records import payload_of
from gossamer.testing import FakeEnv

CONFIG = AtomicProcessConfig(group="g", session_period=1e6)


def member(node: str = "b", env: FakeEnv | None = None) -> tuple[AtomicProcess, FakeEnv,
                                                                 list[str]]:
    env = env if env is not None else FakeEnv(node, seed=1)
    process = AtomicProcess(env, CONFIG)
    delivered: list[str] = []
    process.atomic.on_deliver = lambda mid, origin, body, position: delivered.append(mid)
    process.start()
    process.on_message("a", GroupJoin("a"))
    env.run_due()
    env.take_multicast()
    return process, env, delivered


def data(mid: str = "a:1", snapshot: tuple[str, ...] = ("a", "b"), body: object = "hi",
         seq: int = 1, source: str = "a") -> SrmData:
    return SrmData(source, seq, payload_of(Data(mid, snapshot, body)))


def votes(env: FakeEnv) -> list[Vote]:
    out = []
    for _, msg in env.take_multicast():
        if isinstance(msg, SrmData) and msg.payload.get("k") == "vote":
            out.append(Vote(msg.payload["mid"], msg.payload["voter"], msg.payload["yes"]))
    return out


def test_the_yes_leaves_only_after_the_data_is_durable() -> None:
    process, env, _ = member()
    process.on_message("a", data())
    assert votes(env) == []  # the group commit has not landed yet
    env.crash()  # ... and a crash now loses the write and the vote together
    assert list(env.store.scan("atomic.pending")) == []
    process, env, _ = member()
    process.on_message("a", data())
    env.run_due()
    assert votes(env) == [Vote("a:1", "b", True)]
    assert [k for k, _ in env.store.scan("atomic.pending")] == ["a:1"]


def test_confirm_delivers_once_and_survives_a_restart() -> None:
    process, env, delivered = member()
    process.on_message("a", data())
    env.run_due()
    confirm = SrmData("a", 2, payload_of(Outcome("a:1", True, ("a", "b"))))
    process.on_message("a", confirm)
    env.run_due()
    assert delivered == ["a:1"]
    env.crash()
    again, env2, delivered2 = member(env=FakeEnv("b", store=env.store, seed=2))
    again.on_message("a", data())  # the same message once more, after the restart
    again.on_message("a", SrmData("a", 2, payload_of(Outcome("a:1", True, ("a", "b")))))
    env2.run_due()
    assert delivered2 == []
    assert "replay" in env2.drop_reasons("atomic")


def test_a_member_that_crashed_after_yes_recovers_the_outcome_by_asking() -> None:
    process, env, _ = member()
    process.on_message("a", data())
    env.run_due()
    env.crash()
    again, env2, delivered = member(env=FakeEnv("b", store=env.store, seed=2))
    env2.advance(1e6)  # the reloaded pending message asks for its outcome
    asked = [m for _, m in env2.take_multicast() if isinstance(m, OutcomeQuery)]
    assert asked and asked[0].mid == "a:1"
    again.on_message("c", GroupJoin("c"))
    again.on_message("c", OutcomeAnswer("c", "a:1", True, ("a", "b")))
    env2.run_due()
    assert delivered == ["a:1"]


def test_a_delivery_is_not_lost_to_another_group_commit_landing_before_its_turn() -> None:
    process, env, delivered = member()
    process.on_message("a", data())
    env.run_due()  # our YES for a:1 left
    process.on_message("a", SrmData("a", 2, payload_of(Outcome("a:1", True, ("a", "b")))))
    env.store.commit()  # another group lands (a YES for another message) before the delivery's
    env.crash()  # turn, and the process dies there
    assert delivered == []
    _again, env2, delivered2 = member(env=FakeEnv("b", store=env.store, seed=2))
    env2.run_due()
    assert delivered2 == ["a:1"]  # still pending on disk, with its outcome: delivered now


def test_abort_and_a_no_deliver_nothing() -> None:
    process, env, delivered = member()
    process.on_message("a", data())
    env.run_due()
    process.on_message("a", SrmData("a", 2, payload_of(Outcome("a:1", False, ("a", "b")))))
    env.run_due()
    assert delivered == [] and list(env.store.scan("atomic.pending")) == []
    assert votes(env) == [Vote("a:1", "b", True)]
    process.atomic.refuse = lambda mid: True  # the disk is full
    process.on_message("a", data("a:3", seq=3))
    env.run_due()
    assert votes(env) == [Vote("a:3", "b", False)]


def test_a_no_is_kept_so_a_restart_never_votes_yes_for_the_same_message() -> None:
    process, env, _ = member()
    process.atomic.refuse = lambda mid: True  # the disk is full: NO
    process.on_message("a", data())
    env.run_due()
    assert votes(env) == [Vote("a:1", "b", False)]
    env.crash()
    again, env2, delivered = member(env=FakeEnv("b", store=env.store, seed=2))
    again.on_message("a", data())  # the data once more (a repair) to the restarted member
    env2.run_due()
    assert votes(env2) == []  # no YES: whoever saw the NO has aborted it
    assert "replay" in env2.drop_reasons("atomic")
    again.on_message("c", GroupJoin("c"))
    again.on_message("c", OutcomeQuery("c", "a:1"))  # and it answers ABORT when asked
    env2.advance(1.0)
    answers = [m for _, m in env2.take_multicast() if isinstance(m, OutcomeAnswer)]
    assert [(m.mid, m.commit) for m in answers] == [("a:1", False)]
    assert delivered == []


def test_a_no_is_not_told_as_an_abort_before_it_is_on_disk() -> None:
    process, env, _ = member()
    process.atomic.refuse = lambda mid: True
    process.on_message("a", data())
    process.on_message("c", GroupJoin("c"))
    process.on_message("c", OutcomeQuery("c", "a:1"))  # before the group commit lands
    env.advance(1.0)
    assert not [m for _, m in env.take_multicast() if isinstance(m, OutcomeAnswer)]


def test_malformed_forged_outsiders_and_strangers_are_dropped_with_a_reason() -> None:
    process, env, delivered = member()
    process.on_message("a", SrmData("a", 1, {"k": "data", "mid": 5}))
    process.on_message("a", data(mid="a:9", seq=2))  # id does not match its SRM name
    process.on_message("x", data(mid="x:1", source="x", snapshot=("x", "b")))  # not a member
    process.on_message("a", data(mid="a:3", seq=3, snapshot=("a", "c")))  # b not in it
    env.run_due()
    assert env.drop_reasons("atomic") == ["invalid", "forged_id", "not_member",
                                          "not_in_snapshot"]
    assert votes(env) == [] and delivered == []
    assert list(env.store.scan("atomic.pending")) == []


def test_the_sender_commits_on_every_yes_and_aborts_on_a_no() -> None:
    process, env, delivered = member("a")
    process.on_message("b", GroupJoin("b"))
    env.run_due()
    env.take_multicast()
    outcomes: list[tuple[str, bool]] = []
    process.atomic.on_outcome = lambda mid, ok: outcomes.append((mid, ok))
    first = process.atomic.send("one")
    assert first == "a:1"
    process.on_message("b", SrmData("b", 1, payload_of(Vote(first, "b", True))))
    env.run_due()
    second = process.atomic.send("two")
    process.on_message("b", SrmData("b", 2, payload_of(Vote(second, "b", False))))
    env.run_due()
    assert outcomes == [(first, True), (second, False)]
    assert delivered == [first]
    # a vote by someone outside the snapshot counts for nothing
    third = process.atomic.send("three")
    process.on_message("c", GroupJoin("c"))
    process.on_message("c", SrmData("c", 1, payload_of(Vote(third, "c", True))))
    assert "not_in_snapshot" in env.drop_reasons("atomic")


def bounded(node: str, other: str, env: FakeEnv | None = None) -> tuple[AtomicProcess,
                                                                       FakeEnv]:
    """A member keeping at most two outcomes, in a group with ``other``."""
    env = env if env is not None else FakeEnv(node, seed=1)
    process = AtomicProcess(env, AtomicProcessConfig(
        group="g", session_period=1e6, atomic=AtomicConfig(max_outcomes=2)))
    process.start()
    process.on_message(other, GroupJoin(other))
    env.run_due()
    env.take_multicast()
    return process, env


def test_outcomes_kept_durably_are_bounded() -> None:
    process, env = bounded("b", "a")
    for seq in (1, 2, 3):
        process.on_message("a", SrmData("a", seq, payload_of(
            Outcome(f"a:{seq + 10}", False, ("a", "b")))))
    env.run_due()
    assert [k for k, _ in env.store.scan("atomic.outcome")] == ["a:12", "a:13"]
    assert [k for k, _ in env.store.scan("atomic.items")] == ["a:2", "a:3"]


def test_a_sender_never_decides_again_an_outcome_it_let_go() -> None:
    process, env = bounded("a", "b")
    outcomes: list[tuple[str, bool]] = []
    process.atomic.on_outcome = lambda mid, ok: outcomes.append((mid, ok))
    for vote_seq in (1, 2, 3):  # three messages, each confirmed; the first one let go
        mid = process.atomic.send(f"m{vote_seq}")
        process.on_message("b", SrmData("b", vote_seq, payload_of(Vote(mid, "b", True))))
        env.run_due()
    assert [ok for _, ok in outcomes] == [True, True, True]
    first = outcomes[0][0]
    assert first not in [k for k, _ in env.store.scan("atomic.outcome")]
    env.take_multicast()
    # a restarted member that took the old data again votes YES, and asks
    process.on_message("b", SrmData("b", 4, payload_of(Vote(first, "b", True))))
    process.on_message("b", OutcomeQuery("b", first))
    env.advance(1.0)
    assert outcomes[3:] == []  # no second decision: it was CONFIRMed
    assert not [m for _, m in env.take_multicast()
                if isinstance(m, SrmData) and m.payload.get("k") == "outcome"]
    assert env.drop_reasons("atomic").count("forgotten") == 2
    env.crash()  # the mark is durable: the same after a restart
    again, env2 = bounded("a", "b", FakeEnv("a", store=env.store, seed=2))
    again.on_message("b", SrmData("b", 5, payload_of(Vote(first, "b", True))))
    env2.advance(1.0)
    assert not [m for _, m in env2.take_multicast()
                if isinstance(m, SrmData) and m.payload.get("k") == "outcome"]
    assert "forgotten" in env2.drop_reasons("atomic")


def keys(env: FakeEnv, table: str) -> list[str]:
    return [k for k, _ in env.store.scan(table)]


def marks_from(process: AtomicProcess, member: str, *resolved: tuple[str, int]) -> None:
    """A session message of ``member`` saying up to where it needs nothing of each source."""
    process.on_message(member, SrmSession(0.0, (), (), True, resolved))


def test_an_outcome_goes_once_no_member_needs_it_and_its_data_is_refused_after() -> None:
    process, env, _ = member()
    process.on_message("c", GroupJoin("c"))
    snapshot = ("a", "b", "c")
    process.on_message("a", data(snapshot=snapshot))
    env.run_due()
    process.on_message("a", SrmData("a", 2, payload_of(Outcome("a:1", False, snapshot))))
    env.run_due()
    assert keys(env, "atomic.outcome") == ["a:1"] and keys(env, "atomic.items") == ["a:2"]
    marks_from(process, "a", ("a", 2))
    marks_from(process, "c", ("a", 1))  # c still misses the outcome's item (a:2)
    env.advance(1e6)  # a session period: the collection runs
    assert keys(env, "atomic.outcome") == ["a:1"]
    marks_from(process, "c", ("a", 2))
    env.advance(1e6)
    assert keys(env, "atomic.outcome") == [] and keys(env, "atomic.items") == []
    env.store.commit()  # (the collection's writes ride the next group commit)
    env.crash()  # a restart, and the old data comes again (a repair for someone else)
    again, env2, _ = member(env=FakeEnv("b", store=env.store, seed=2))
    again.on_message("a", data(snapshot=snapshot))
    env2.run_due()
    assert votes(env2) == [] and "collected" in env2.drop_reasons("atomic")


def test_a_delivered_message_let_go_leaves_no_mark_and_is_refused_after() -> None:
    process, env, delivered = member()
    process.on_message("a", data())
    env.run_due()
    process.on_message("a", SrmData("a", 2, payload_of(Outcome("a:1", True, ("a", "b")))))
    env.run_due()
    assert delivered == ["a:1"] and keys(env, "atomic.delivered") == ["a:1"]
    marks_from(process, "a", ("a", 2))
    env.advance(1e6)
    assert keys(env, "atomic.outcome") == [] and keys(env, "atomic.delivered") == []
    env.store.commit()
    env.crash()
    again, env2, delivered2 = member(env=FakeEnv("b", store=env.store, seed=2))
    again.on_message("a", data())
    again.on_message("a", SrmData("a", 2, payload_of(Outcome("a:1", True, ("a", "b")))))
    env2.run_due()
    assert delivered2 == [] and votes(env2) == []
    assert "collected" in env2.drop_reasons("atomic")


def test_a_member_that_said_nothing_or_was_booted_holds_outcomes_back() -> None:
    process, env, _ = member()
    process.on_message("c", GroupJoin("c"))
    process.on_message("a", data(snapshot=("a", "b", "c")))
    env.run_due()
    process.on_message("a", SrmData("a", 2, payload_of(Outcome("a:1", True, ("a", "b", "c")))))
    env.run_due()
    marks_from(process, "a", ("a", 5))
    env.advance(1e6)
    assert keys(env, "atomic.outcome") == ["a:1"]  # c said nothing yet
    env.advance(1e6)  # (nor here: a boot of a member heard within a period is stale)
    process.on_message("a", GroupBoot("c", "a"))  # c is booted: it may recover
    assert process.group.members() == ("a", "b")
    env.advance(1e6)
    assert keys(env, "atomic.outcome") == ["a:1"]
    marks_from(process, "c", ("a", 5))  # c is back, and needs nothing more
    env.advance(1e6)
    assert keys(env, "atomic.outcome") == []


def test_each_member_says_up_to_where_it_needs_nothing() -> None:
    process, env, _ = member()
    for seq in (1, 2):  # two messages of a, undecided here
        process.on_message("a", data(mid=f"a:{seq}", seq=seq))
    process.on_message("a", SrmData("a", 3, payload_of(Outcome("a:1", True, ("a", "b")))))
    env.run_due()
    env.take_multicast()
    process.srm.send_session()
    (_, session), = env.take_multicast()
    assert isinstance(session, SrmSession)
    assert dict(session.resolved)["a"] == 1  # a:2 is still undecided here


def test_after_a_restart_an_outcome_waits_for_its_snapshot_members_to_say_so() -> None:
    process, env, _ = member()
    process.on_message("a", data(snapshot=("a", "b", "c")))
    env.run_due()
    process.on_message("a", SrmData("a", 2, payload_of(Outcome("a:1", True, ("a", "b", "c")))))
    env.run_due()
    env.crash()
    env2 = FakeEnv("b", store=env.store, seed=2)
    again = AtomicProcess(env2, CONFIG)
    again.start()  # nobody heard yet: the view is this member alone
    env2.advance(1e6)
    assert keys(env2, "atomic.outcome") == ["a:1"]  # a and c voted: they may need it
    marks_from(again, "a", ("a", 5))
    marks_from(again, "c", ("a", 5))
    again.on_message("a", SrmSession(0.0, (("a", 2),), ()))  # and we hear of a's items
    env2.advance(1e6)
    assert keys(env2, "atomic.outcome") == []
