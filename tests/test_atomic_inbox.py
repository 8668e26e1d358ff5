"""The atomic layer's durable inbox (``AtomicConfig.inbox``): a delivery the application has
not acknowledged is handed over again after a crash, with the same position, so an application
that commits the position it handled never loses nor repeats a message, even when killed
between the delivery's mark and its own commit."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from gossamer.core.errors import StateError
from gossamer.protocols.dissemination.srm import SrmData
from gossamer.protocols.membership.srm_group import GroupJoin
from gossamer.protocols.ordering.atomic import (
    AtomicConfig,
    AtomicProcess,
    AtomicProcessConfig,
    Data,
    Outcome,
    Vote,
)
from gossamer.protocols.ordering.atomic.records import payload_of
from gossamer.testing import FakeEnv, info_of

Handed = tuple[str, object, "int | None"]


def member(env: FakeEnv, *, inbox: bool = True,
           max_inbox: int = 100) -> tuple[AtomicProcess, list[Handed]]:
    config = AtomicProcessConfig(group="g", session_period=1e6,
                                 atomic=AtomicConfig(inbox=inbox, max_inbox=max_inbox))
    process = AtomicProcess(env, config)
    handed: list[Handed] = []
    process.atomic.on_deliver = lambda mid, origin, body, position: handed.append(
        (mid, body, position))
    process.start()
    process.on_message("a", GroupJoin("a"))
    env.run_due()
    env.take_multicast()
    return process, handed


def confirmed(process: AtomicProcess, env: FakeEnv, n: int) -> None:
    """Message a:n (data at seq 2n-1, its CONFIRM at 2n) reaches ``process``."""
    mid = f"a:{2 * n - 1}"
    process.on_message("a", SrmData("a", 2 * n - 1, payload_of(Data(mid, ("a", "b"), n))))
    env.run_due()
    process.on_message("a", SrmData("a", 2 * n, payload_of(Outcome(mid, True, ("a", "b")))))
    env.run_due()


def votes(env: FakeEnv) -> list[Vote]:
    return [Vote(m.payload["mid"], m.payload["voter"], m.payload["yes"])
            for _, m in env.take_multicast()
            if isinstance(m, SrmData) and m.payload.get("k") == "vote"]


def restarted(env: FakeEnv, **kwargs: object) -> tuple[FakeEnv, AtomicProcess, list[Handed]]:
    env.crash()
    env2 = FakeEnv("b", store=env.store, seed=2, incarnation=2)
    process, handed = member(env2, **kwargs)  # type: ignore[arg-type]
    return env2, process, handed


def test_a_delivery_not_acknowledged_is_handed_over_again_with_its_position() -> None:
    env = FakeEnv("b", seed=1)
    process, handed = member(env)
    confirmed(process, env, 1)
    confirmed(process, env, 2)
    assert handed == [("a:1", 1, 1), ("a:3", 2, 2)]
    # killed before the application committed anything of its own: both come back, in order
    env2, again, handed2 = restarted(env)
    assert handed2 == [("a:1", 1, 1), ("a:3", 2, 2)]
    assert [info_of(r)["position"] for r in env2.traced("redeliver", layer="atomic")] == [1, 2]
    assert env2.traced("deliver", layer="atomic") == []  # the protocol delivered them once
    assert again.atomic.unacknowledged == 2
    again.atomic.acknowledge(1)
    env2.run_due()  # the acknowledgement's commit lands
    env3, third, handed3 = restarted(env2)
    assert handed3 == [("a:3", 2, 2)]
    third.atomic.acknowledge(2)
    confirmed(third, env3, 3)  # positions go on, never reused
    assert handed3[-1] == ("a:5", 3, 3)
    assert info_of(env3.traced("deliver", layer="atomic")[-1])["position"] == 3


def test_an_acknowledgement_lost_with_a_crash_hands_over_again() -> None:
    env = FakeEnv("b", seed=1)
    process, handed = member(env)
    confirmed(process, env, 1)
    process.atomic.acknowledge(1)  # its commit has not landed when the process dies
    assert handed == [("a:1", 1, 1)]
    _, _, handed2 = restarted(env)
    assert handed2 == [("a:1", 1, 1)]


def test_acknowledged_deliveries_leave_the_store() -> None:
    env = FakeEnv("b", seed=1)
    process, _ = member(env)
    for n in (1, 2, 3):
        confirmed(process, env, n)
    process.atomic.acknowledge(2)
    env.run_due()
    assert [key for key, _ in env.store.scan("atomic.inbox")] == [f"{3:020d}"]
    process.atomic.acknowledge(1)  # older than what was acknowledged: nothing happens
    assert process.atomic.unacknowledged == 1


def test_acknowledge_refuses_what_it_cannot_mean() -> None:
    env = FakeEnv("b", seed=1)
    process, _ = member(env)
    with pytest.raises(ValueError, match="not delivered yet"):
        process.atomic.acknowledge(1)
    plain_env = FakeEnv("b", seed=1)
    plain, handed = member(plain_env, inbox=False)
    confirmed(plain, plain_env, 1)
    assert handed == [("a:1", 1, None)]
    with pytest.raises(StateError, match="no inbox"):
        plain.atomic.acknowledge(1)
    _, _, handed2 = restarted(plain_env, inbox=False)
    assert handed2 == []  # without an inbox the mark is all there is: handed over once


def test_a_full_inbox_votes_no_until_the_application_catches_up() -> None:
    env = FakeEnv("b", seed=1)
    process, _ = member(env, max_inbox=1)
    confirmed(process, env, 1)
    assert votes(env) == [Vote("a:1", "b", True)]
    process.on_message("a", SrmData("a", 3, payload_of(Data("a:3", ("a", "b"), 2))))
    env.run_due()
    assert votes(env) == [Vote("a:3", "b", False)]  # one unacknowledged is the bound
    process.atomic.acknowledge(1)
    process.on_message("a", SrmData("a", 4, payload_of(Data("a:4", ("a", "b"), 3))))
    env.run_due()
    assert votes(env) == [Vote("a:4", "b", True)]


def test_a_delivery_marked_but_not_yet_in_the_inbox_counts_against_its_bound() -> None:
    env = FakeEnv("b", seed=1)
    process, _ = member(env, max_inbox=1)
    process.on_message("a", SrmData("a", 1, payload_of(Data("a:1", ("a", "b"), 1))))
    env.run_due()
    votes(env)
    # the CONFIRM of a:1 and the data of a:3 in one loop turn: a:1 is marked, not yet in
    process.on_message("a", SrmData("a", 2, payload_of(Outcome("a:1", True, ("a", "b")))))
    process.on_message("a", SrmData("a", 3, payload_of(Data("a:3", ("a", "b"), 2))))
    env.run_due()
    assert votes(env) == [Vote("a:3", "b", False)]
    assert process.atomic.unacknowledged == 1


def test_a_sender_whose_inbox_is_full_may_not_send() -> None:
    env = FakeEnv("b", seed=1)
    process, _ = member(env, max_inbox=2)
    for n in (1, 2):
        confirmed(process, env, n)
    with pytest.raises(StateError, match="not acknowledged"):
        process.atomic.send("mine")  # it would deliver its own message into a full inbox
    process.atomic.acknowledge(2)
    process.atomic.send("mine")


def test_acknowledge_refuses_a_position_not_handed_over_yet() -> None:
    """One commit's deliveries are numbered together, then handed over one by one: an
    application may not acknowledge the next before it has it."""
    env = FakeEnv("b", seed=1)
    process, _ = member(env)
    for n in (1, 2):
        process.on_message("a", SrmData("a", 2 * n - 1,
                                        payload_of(Data(f"a:{2 * n - 1}", ("a", "b"), n))))
    env.run_due()
    tried: list[str] = []

    def greedy(mid: str, origin: str, body: object, position: int | None) -> None:
        try:
            process.atomic.acknowledge(2)
        except ValueError as exc:
            tried.append(str(exc))

    process.atomic.on_deliver = greedy
    for n in (1, 2):  # both CONFIRMs in one turn: one commit, positions 1 and 2
        process.on_message("a", SrmData("a", 2 * n + 4, payload_of(
            Outcome(f"a:{2 * n - 1}", True, ("a", "b")))))
    env.run_due()
    assert len(tried) == 1 and "not delivered yet" in tried[0]
    assert process.atomic.unacknowledged == 0  # the second hand-over could acknowledge both


def test_the_config_refuses_an_empty_inbox() -> None:
    from gossamer.core.errors import ConfigError
    with pytest.raises(ConfigError):
        dataclasses.replace(AtomicConfig(), max_inbox=0)


def test_the_node_journal_skips_what_it_holds_and_cuts_a_torn_line(tmp_path: Path) -> None:
    """``gossamer atomic node``'s journal: a position it holds is not written again (the
    inbox hands it over after a restart that came before the acknowledgement), and a last
    line torn by a kill is cut off, so that delivery is journaled whole when it comes again."""
    from gossamer.services.atomic.api import Delivered
    from gossamer.services.atomic.journal import Journal, read_journal

    path = tmp_path / "delivered.jsonl"
    journal = Journal(path)
    assert journal.append(Delivered("a:1", "a", "x", 1))
    assert journal.append(Delivered("a:3", "a", {"y": 2}, 2))
    assert not journal.append(Delivered("a:3", "a", {"y": 2}, 2))
    journal.close()
    with path.open("ab") as torn:
        torn.write(b'{"position":3,"mid":"a:')
    again = Journal(path)
    assert again.last == 2
    assert not again.append(Delivered("a:1", "a", "x", 1))
    assert again.append(Delivered("a:5", "a", "z", 3))
    again.close()
    assert [e["mid"] for e in read_journal(tmp_path)] == ["a:1", "a:3", "a:5"]
