"""Atomic multicast in the simulator: all of the snapshot or none, under loss, duplication,
reordering, member crashes around the vote and the sender crashing between the phases."""

from __future__ import annotations

import dataclasses

import pytest

from gossamer.core.trace import MemorySink
from gossamer.protocols.ordering.atomic import AtomicProcess, AtomicProcessConfig
from gossamer.runtimes.sim import LinkModel, Simulation, Uniform
from gossamer.services.atomic import AtomicRunOptions, judge_atomicity, run_atomic_sim

GROUP = "g"
PERIOD = 0.5


def rows(sim: Simulation) -> list:  # type: ignore[type-arg]
    sink = sim.trace_sink
    assert isinstance(sink, MemorySink)
    return sink.named()


def test_without_faults_every_message_commits_everywhere() -> None:
    sim = run_atomic_sim(1, AtomicRunOptions(members=5, messages=10))
    verdict = judge_atomicity(rows(sim))
    assert verdict.ok, f"seed=1 {verdict.violations}"
    assert verdict.committed == verdict.published == 10 and verdict.deliveries == 50


def test_loss_duplication_and_reordering_keep_atomicity() -> None:
    for seed in (2, 3):
        sim = run_atomic_sim(seed, AtomicRunOptions(members=6, messages=12, loss=0.15,
                                                    duplicate=0.1, reorder=0.2))
        verdict = judge_atomicity(rows(sim))
        assert verdict.ok, f"seed={seed} {verdict.violations}"
        assert verdict.committed >= 9, f"seed={seed}: SRM should repair most of it: {verdict}"


def test_crashes_of_members_and_senders_keep_atomicity() -> None:
    for seed in (4, 5, 6):
        sim = run_atomic_sim(seed, AtomicRunOptions(members=5, messages=12, loss=0.05,
                                                    member_crashes=2, sender_crashes=1))
        verdict = judge_atomicity(rows(sim))
        assert verdict.ok, f"seed={seed} {verdict.violations}"
        assert verdict.undecided == 0, f"seed={seed}: every sender recovered: {verdict}"


INBOX_RUN = AtomicRunOptions(members=5, messages=15, loss=0.1, member_crashes=3,
                             sender_crashes=1, inbox=True)


def test_an_application_over_the_inbox_handles_each_delivery_once_across_crashes() -> None:
    """Crashes fall between a hand-over and the application's commit (the delivery comes
    again) and between that commit and its acknowledgement (it comes again and is skipped):
    each member's application handles each message it delivered exactly once."""
    redelivered = 0
    for seed in (8, 20, 48):
        trace = rows(run_atomic_sim(seed, INBOX_RUN))
        verdict = judge_atomicity(trace)
        assert verdict.ok, f"seed={seed} {verdict.violations}"
        redelivered += sum(1 for r in trace if r.event == "redeliver")
        handled = sorted((r.node, r.msg) for r in trace if r.event == "handle")
        assert handled == sorted((r.node, r.msg) for r in trace if r.event == "deliver")
    assert redelivered >= 3  # the seeds were chosen for it


def test_an_application_that_forgets_what_it_handled_is_caught(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from gossamer.services.atomic.experiment import InboxAppProcess
    build = InboxAppProcess.__init__

    def forgetful(self: InboxAppProcess, env: object, config: AtomicProcessConfig) -> None:
        build(self, env, config)  # type: ignore[arg-type]
        self.handled = 0  # its own cursor lost: what the inbox hands over again is redone

    monkeypatch.setattr(InboxAppProcess, "__init__", forgetful)
    verdict = judge_atomicity(rows(run_atomic_sim(8, INBOX_RUN)))
    assert any("handled 2 times" in v for v in verdict.violations), verdict


def _group(seed: int, members: int = 3) -> Simulation:
    sim = Simulation(seed=seed, link=LinkModel(latency=Uniform(0.005, 0.01)))
    names = [f"m{i}" for i in range(members)]
    sim.add_multicast_group(GROUP, names)
    config = AtomicProcessConfig(group=GROUP, session_period=PERIOD)
    sim.add_nodes(names, lambda env: AtomicProcess(env, config))
    sim.run(until=3 * PERIOD)
    return sim


def _voted(sim: Simulation, node: str) -> bool:
    return any(r.event == "vote" and r.node == node for r in rows(sim))


def test_a_member_that_crashed_after_yes_delivers_after_recovery_exactly_once() -> None:
    sim = _group(7)
    sim.call("m0", lambda p: p.atomic.send("x"))  # type: ignore[attr-defined]
    sim.run(stop_when=lambda: _voted(sim, "m2"))
    sim.crash("m2", recover_after=3.0)  # its YES left; the CONFIRM has not reached it
    sim.run(until=sim.now + 10.0)
    verdict = judge_atomicity(rows(sim))
    assert verdict.ok and verdict.committed == 1, verdict
    delivered = [r.node for r in rows(sim) if r.event == "deliver"]
    assert sorted(delivered) == ["m0", "m1", "m2"]
    recovered_at = next(r.t for r in rows(sim) if r.event == "recover")
    assert next(r.t for r in rows(sim) if r.event == "deliver" and r.node == "m2") > recovered_at


def test_a_member_down_before_it_could_vote_makes_the_sender_abort() -> None:
    sim = _group(8)
    sim.crash("m2", recover_after=8.0)
    sim.call("m0", lambda p: p.atomic.send("x"))  # type: ignore[attr-defined]
    sim.run(until=sim.now + 12.0)
    verdict = judge_atomicity(rows(sim))
    assert verdict.ok and verdict.aborted == 1 and verdict.deliveries == 0, verdict


def test_the_sender_crashing_after_every_yes_blocks_until_it_recovers_then_aborts() -> None:
    sim = _group(9)
    sim.call("m0", lambda p: p.atomic.send("x"))  # type: ignore[attr-defined]
    sim.run(stop_when=lambda: _voted(sim, "m1") and _voted(sim, "m2"))
    sim.crash("m0", recover_after=6.0)  # before any vote reached it: nobody knows a decision
    sim.run(until=sim.now + 5.0)
    blocked = judge_atomicity(rows(sim))
    assert blocked.undecided == 1 and blocked.deliveries == 0, blocked  # the blocking case
    sim.run(until=sim.now + 10.0)
    verdict = judge_atomicity(rows(sim))
    assert verdict.ok and verdict.aborted == 1 and verdict.deliveries == 0, verdict
    for node in ("m1", "m2"):
        assert list(sim.store(node).scan("atomic.pending")) == [], node


def test_a_no_vote_aborts_for_everyone() -> None:
    sim = _group(10)
    sim.call("m2", lambda p: setattr(p.atomic, "refuse", lambda mid: True))  # type: ignore[attr-defined]
    sim.call("m0", lambda p: p.atomic.send("x"))  # type: ignore[attr-defined]
    sim.run(until=sim.now + 5.0)
    verdict = judge_atomicity(rows(sim))
    assert verdict.ok and verdict.aborted == 1 and verdict.deliveries == 0, verdict


def test_same_seed_same_trace() -> None:
    options = AtomicRunOptions(members=4, messages=5, loss=0.1, member_crashes=1)
    assert rows(run_atomic_sim(11, options)) == rows(run_atomic_sim(11, options))


def test_a_big_groups_run_leaves_out_only_the_session_messages() -> None:
    options = AtomicRunOptions(members=5, messages=6, loss=0.1, member_crashes=1)
    every = rows(run_atomic_sim(3, options))
    lean = rows(run_atomic_sim(3, dataclasses.replace(options, trace_sessions=False)))
    sessions = [r for r in every if r.info and '"srm.session"' in r.info]
    assert sessions and len(lean) == len(every) - len(sessions)
    assert lean == [r for r in every if r not in sessions]  # the same run, nothing else gone
    assert judge_atomicity(lean) == judge_atomicity(every)
