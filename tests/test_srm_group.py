"""Group state over SRM's session messages: join, group state from the closest member,
leave, boot after silence and the booted member's correcting join."""

from __future__ import annotations

from gossamer.core.env import Env
from gossamer.core.ids import NodeId
from gossamer.core.messages import Message
from gossamer.protocols.dissemination.srm import Srm, SrmConfig, SrmSession
from gossamer.protocols.membership.srm_group import (
    GroupBoot,
    GroupJoin,
    GroupLeave,
    GroupState,
    SrmGroup,
)
from gossamer.runtimes.sim import LinkModel, Simulation
from gossamer.testing import FakeEnv

PERIOD = 1.0


def member(node: str) -> tuple[SrmGroup, FakeEnv, list[tuple[str, bool, str]]]:
    env = FakeEnv(node, seed=3)
    srm = Srm(env, SrmConfig(group="g", session_period=PERIOD))
    group = SrmGroup(env, srm)
    changes: list[tuple[str, bool, str]] = []
    group.on_change = lambda m, joined, reason: changes.append((m, joined, reason))
    group.start()
    return group, env, changes


def test_join_announces_and_the_state_comes_from_one_member() -> None:
    group, env, changes = member("a")
    assert env.take_multicast() == [("g", GroupJoin("a"))]
    group.on_message("b", GroupJoin("b"))
    assert group.members() == ("a", "b") and changes == [("b", True, "join")]
    env.advance(0.2)  # the state timer is in [D1 d, (D1 + D2) d] = [0.05, 0.1]
    assert [m for _, m in env.take_multicast() if isinstance(m, GroupState)] == [
        GroupState("a", "b", ("a", "b"))]
    # a closer member answered the next joiner first: a's offer is suppressed
    group.on_message("c", GroupJoin("c"))
    group.on_message("b", GroupState("b", "c", ("a", "b", "c")))
    env.advance(0.2)
    assert [m for _, m in env.take_multicast() if isinstance(m, GroupState)] == []


def test_a_joiner_takes_the_state_it_is_sent() -> None:
    group, _, changes = member("z")
    group.on_message("a", GroupState("a", "z", ("a", "b", "z")))
    assert group.members() == ("a", "b", "z")
    assert sorted(changes) == [("a", True, "state"), ("b", True, "state")]


def test_silence_for_five_periods_boots_and_a_session_keeps_alive() -> None:
    group, env, changes = member("a")
    group.on_message("b", GroupJoin("b"))
    group.on_message("c", GroupJoin("c"))
    for _ in range(8):
        env.advance(PERIOD)
        group.srm.on_message("c", SrmSession(env.now(), (), ()))  # c talks, b is silent
    assert group.members() == ("a", "c")
    assert ("b", False, "boot") in changes
    assert ("g", GroupBoot("b", "a")) in env.take_multicast()


def test_a_booted_member_that_is_alive_rejoins() -> None:
    group, env, _ = member("a")
    env.take_multicast()
    group.on_message("b", GroupBoot("a", "b"))
    assert env.take_multicast() == [("g", GroupJoin("a"))]


def test_a_boot_of_a_member_heard_within_a_period_is_stale_and_kept() -> None:
    """A member that was paused boots everyone it missed when it runs again: whoever heard
    the booted member lately keeps it; one silent longer is removed as before."""
    group, env, changes = member("a")
    for other in ("b", "c", "d"):
        group.on_message(other, GroupJoin(other))
    env.advance(0.5 * PERIOD)
    group.on_message("c", GroupBoot("b", "c"))  # b was heard half a period ago
    assert "b" in group.members() and ("b", False, "boot") not in changes
    assert "stale_boot" in env.drop_reasons("group")
    env.advance(1.5 * PERIOD)
    group.on_message("c", GroupBoot("b", "c"))  # silent for two periods now: gone
    assert "b" not in group.members() and ("b", False, "boot") in changes


def test_group_messages_in_another_members_name_or_from_outsiders_change_nothing() -> None:
    group, env, changes = member("a")
    for other in ("b", "c"):
        group.on_message(other, GroupJoin(other))
    before, changed = group.members(), list(changes)
    group.on_message("x", GroupLeave("b"))  # x speaks for b
    group.on_message("x", GroupJoin("ghost"))
    group.on_message("y", GroupBoot("c", "y"))  # y is in no group of ours
    group.on_message("b", GroupBoot("c", "y"))  # b boots in y's name
    group.on_message("x", GroupState("b", "a", ("x",)))  # a state in b's name
    assert group.members() == before and changes == changed
    assert env.drop_reasons("group") == ["forged_member", "forged_member", "not_member",
                                         "forged_member", "forged_member"]
    env.advance(2 * PERIOD)  # c silent here too (a boot of a member heard lately is stale)
    group.on_message("b", GroupBoot("c", "b"))  # a member's own boot of another: taken
    assert group.members() == ("a", "b")


def test_leave_and_a_leaving_session_remove_the_member() -> None:
    group, env, changes = member("a")
    group.on_message("b", GroupJoin("b"))
    group.on_message("c", GroupJoin("c"))
    group.on_message("b", GroupLeave("b"))
    group.srm.on_message("c", SrmSession(0.0, (), (), joined=False))
    assert group.members() == ("a",)
    assert changes[-2:] == [("b", False, "leave"), ("c", False, "leave")]
    group.stop()
    sent = env.take_multicast()
    assert ("g", GroupLeave("a")) in sent
    assert any(isinstance(m, SrmSession) and not m.joined for _, m in sent)


class GroupNode:
    def __init__(self, env: Env) -> None:
        self.srm = Srm(env, SrmConfig(group="g", session_period=PERIOD))
        self.group = SrmGroup(env, self.srm)

    def start(self) -> None:
        self.srm.start()
        self.group.start()

    def stop(self) -> None:
        self.group.stop()
        self.srm.stop()

    def on_message(self, src: NodeId, msg: Message) -> None:
        if not self.srm.on_message(src, msg):
            self.group.on_message(src, msg)


def test_in_the_simulator_a_crashed_member_is_booted_everywhere_and_rejoins() -> None:
    names = [f"n{i}" for i in range(6)]
    sim = Simulation(seed=11, link=LinkModel(loss=0.05))
    sim.add_multicast_group("g", names)
    sim.add_nodes(names, GroupNode)
    sim.run(until=5.0)
    for name in names:
        assert sim.process(name).group.members() == tuple(names), name  # type: ignore[attr-defined]
    sim.crash("n3", recover_after=15.0)
    sim.run(until=15.0)
    for name in names:
        if name != "n3":
            members = sim.process(name).group.members()  # type: ignore[attr-defined]
            assert "n3" not in members, f"seed=11 {name}: {members}"
    sim.run(until=25.0)
    for name in names:
        assert sim.process(name).group.members() == tuple(names), name  # type: ignore[attr-defined]
