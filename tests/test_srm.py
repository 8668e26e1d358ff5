"""SRM timers, suppression, backoff, distances and bounds, one member driven by hand."""

from __future__ import annotations

from typing import Any

import pytest

from gossamer.core.env import DatagramTooLarge, encode_datagram
from gossamer.core.errors import ConfigError
from gossamer.protocols.dissemination.srm import (
    AdaptiveTimers,
    Srm,
    SrmConfig,
    SrmData,
    SrmRepair,
    SrmRequest,
    SrmSession,
    SrmTimerConfig,
)
from gossamer.testing import FakeEnv

D = 0.05  # the default distance before any estimate


def member(node: str = "a", *, adaptive: bool = False, **config: Any) -> tuple[Srm, FakeEnv,
                                                                             list[Any]]:
    env = FakeEnv(node, seed=7)
    config.setdefault("session_period", 1e6)  # no session messages unless a test sends one
    srm = Srm(env, SrmConfig(group="g", timers=SrmTimerConfig(adaptive=adaptive), **config))
    delivered: list[Any] = []
    srm.on_deliver = lambda source, seq, payload: delivered.append((source, seq, payload))
    srm.start()
    return srm, env, delivered


def requests(env: FakeEnv) -> list[tuple[str, int]]:
    return [(m.source, m.seq) for _, m in env.take_multicast() if isinstance(m, SrmRequest)]


def request_times(env: FakeEnv, count: int) -> list[float]:
    """When each of the next ``count`` requests went out (the clock stepped by 1 ms)."""
    times = []
    for _ in range(count):
        while not requests(env):
            env.advance(0.001)
        times.append(env.now())
    return times


def test_a_gap_is_requested_after_a_timer_in_c1d_to_c1_plus_c2_d() -> None:
    srm, env, delivered = member()
    srm.on_message("s", SrmData("s", 1, "one"))
    srm.on_message("s", SrmData("s", 3, "three"))
    assert [seq for _, seq, _ in delivered] == [1, 3]
    env.advance(2 * D - 1e-9)
    assert requests(env) == []
    env.advance(2 * D + 1e-9)  # by (C1 + C2) d it has fired
    assert requests(env) == [("s", 2)]


def test_a_repeated_request_backs_off_exponentially() -> None:
    srm, env, _ = member()
    srm.on_message("s", SrmData("s", 1, "x"))
    srm.on_message("s", SrmData("s", 3, "x"))
    times = request_times(env, 3)
    first, second = times[1] - times[0], times[2] - times[1]
    assert 2 * 2 * D - 0.002 <= first <= 2 * 4 * D + 0.002  # round 1: 2 x [2d, 4d]
    assert 4 * 2 * D - 0.002 <= second <= 4 * 4 * D + 0.002  # round 2: 4 x [2d, 4d]


def test_a_request_heard_first_suppresses_ours() -> None:
    srm, env, _ = member()
    srm.on_message("s", SrmData("s", 1, "x"))
    srm.on_message("s", SrmData("s", 3, "x"))
    env.advance(D)  # before our timer (>= 2d)
    srm.on_message("b", SrmRequest("b", "s", 2))
    env.advance(4 * D)  # our first timer would have fired by now
    assert requests(env) == []
    srm.on_message("b", SrmRepair("b", "s", 2, "two"))
    env.advance(100 * D)
    assert requests(env) == []  # recovered: nothing more asked
    assert srm.stats["recovered"] == 1 and srm.stats["requests"] == 0


def test_a_holder_repairs_after_d1d_to_d1_plus_d2_d_unless_it_hears_a_repair() -> None:
    srm, env, _ = member("h")
    srm.on_message("s", SrmData("s", 1, "one"))
    srm.on_message("a", SrmRequest("a", "s", 1))
    env.advance(D - 1e-9)
    assert env.take_multicast() == []
    env.advance(D + 1e-9)
    assert env.take_multicast() == [("g", SrmRepair("h", "s", 1, "one", D))]
    # a second request that crossed the repair is ignored (hold-down of 3 d)
    srm.on_message("b", SrmRequest("b", "s", 1))
    env.advance(2 * D)
    assert env.take_multicast() == []
    # another holder answers first: ours is suppressed
    other, env2, _ = member("k")
    other.on_message("s", SrmData("s", 1, "one"))
    other.on_message("a", SrmRequest("a", "s", 1))
    env2.advance(D / 2)
    other.on_message("h", SrmRepair("h", "s", 1, "one"))
    env2.advance(10 * D)
    assert env2.take_multicast() == []


def test_data_requests_and_repairs_in_another_members_name_are_dropped() -> None:
    srm, env, delivered = member("h")
    srm.on_message("q", SrmData("s", 1, "forged"))  # q is not the source s
    srm.on_message("q", SrmRepair("r", "s", 1, "forged"))  # nor the repairer r
    srm.on_message("s", SrmData("s", 1, "real"))
    srm.on_message("q", SrmRequest("a", "s", 1))  # nor the requester a
    env.advance(10 * D)
    assert delivered == [("s", 1, "real")] and env.take_multicast() == []  # no repair
    assert env.drop_reasons("srm") == ["forged_sender"] * 3


def test_a_session_message_reveals_a_lost_last_item() -> None:
    srm, env, _ = member()
    srm.on_message("s", SrmData("s", 1, "x"))
    srm.on_message("s", SrmSession(0.0, (("s", 3),), ()))
    env.advance(4 * D + 1e-9)
    assert sorted(requests(env)) == [("s", 2), ("s", 3)]


def test_a_new_member_does_not_ask_for_history_it_never_had() -> None:
    srm, env, _ = member()
    srm.on_message("s", SrmSession(0.0, (("s", 50),), ()))
    env.advance(10 * D)
    assert requests(env) == []
    srm.on_message("s", SrmData("s", 52, "x"))  # 51 is a real loss
    env.advance(4 * D + 1e-9)
    assert requests(env) == [("s", 51)]


def test_distance_comes_from_echoed_timestamps_with_a_floor() -> None:
    srm, env, _ = member(min_distance=0.01)
    env.advance(1.0)
    srm.send_session()
    (_, mine), = env.take_multicast()
    assert isinstance(mine, SrmSession)
    env.advance(0.3)  # b held our timestamp 0.1 s: rtt 0.2, distance 0.1
    srm.on_message("b", SrmSession(5.0, (), (("a", mine.sent_at, 0.1),)))
    assert srm.distance("b") == pytest.approx(0.1)
    env.advance(0.001)
    srm.on_message("c", SrmSession(5.0, (), (("a", env.now(), 0.0),)))
    assert srm.distance("c") == 0.01  # a zero distance counts as the floor
    srm.send_session()
    (_, echo), = env.take_multicast()
    assert isinstance(echo, SrmSession)
    ((_member_b, sent_at, held),) = [e for e in echo.echoes if e[0] == "b"]
    assert sent_at == 5.0 and held == pytest.approx(0.001)


def test_the_cache_is_bounded_and_the_holder_answers_for_what_it_lost() -> None:
    srm, env, _ = member("h", max_cache=2)
    for seq in (1, 2, 3):
        srm.on_message("s", SrmData("s", seq, f"p{seq}"))
    srm.on_message("a", SrmRequest("a", "s", 1))
    env.advance(10 * D)
    assert env.take_multicast() == []  # evicted and nobody holds it
    srm.holder = lambda source, seq: "durable" if (source, seq) == ("s", 1) else None
    srm.on_message("a", SrmRequest("a", "s", 1))
    env.advance(10 * D)
    assert env.take_multicast() == [("g", SrmRepair("h", "s", 1, "durable", D))]


def test_a_loss_nobody_repairs_is_given_up_after_max_rounds() -> None:
    srm, env, _ = member(max_request_rounds=3)
    srm.on_message("s", SrmData("s", 2, "x"))
    srm.on_message("s", SrmSession(0.0, (("s", 3),), ()))
    env.advance(1000 * D)
    assert requests(env) == [("s", 3)] * 3
    assert srm.stats["gave_up"] == 1
    assert env.traced("gave_up", layer="srm")


def test_duplicates_and_own_items_are_delivered_never() -> None:
    srm, _env, delivered = member()
    srm.on_message("s", SrmData("s", 1, "x"))
    srm.on_message("s", SrmData("s", 1, "x"))
    srm.on_message("b", SrmRepair("b", "s", 1, "x"))
    seq = srm.multicast("mine")
    srm.on_message("b", SrmRepair("b", "a", seq, "mine"))
    assert delivered == [("s", 1, "x")]


def test_adaptive_timers_widen_when_this_members_request_was_a_duplicate() -> None:
    srm, env, _ = member(adaptive=True)
    place(srm, env, "s", 0.01)
    for other in ("b", "c", "d"):  # a group of five: C2 may grow up to 5
        srm.on_message(other, SrmSession(0.0, (), ()))
    srm.on_message("s", SrmData("s", 1, "x"))
    for seq in range(2, 12, 2):  # five losses; each time ours and two nearer members' went out
        srm.on_message("s", SrmData("s", seq + 1, "x"))
        while not requests(env):
            env.advance(0.001)
        for other in ("b", "c"):
            srm.on_message(other, SrmRequest(other, "s", seq, 0.005))
        srm.on_message("b", SrmRepair("b", "s", seq, "x"))
    assert srm.timers.c2 > 2.0  # wider: fewer duplicates next time
    fixed, _fixed_env, _ = member(adaptive=False)
    fixed.on_message("s", SrmData("s", 1, "x"))
    fixed.on_message("s", SrmData("s", 3, "x"))
    fixed.on_message("b", SrmRequest("b", "s", 2))
    fixed.on_message("b", SrmRepair("b", "s", 2, "x"))
    assert (fixed.timers.c1, fixed.timers.c2) == (2.0, 2.0)


def place(srm: Srm, env: FakeEnv, other: str, distance: float) -> None:
    """``other`` is ``distance`` away from ``srm``'s member (a session echo says so)."""
    now = env.now()
    srm.on_message(other, SrmSession(now, (), ((srm.env.node, now - 2 * distance, 0.0),)))


def lose_and_recover(srm: Srm, env: FakeEnv, seq: int, *, duplicate_from: str | None,
                     within: bool = True, distance: float | None = None) -> None:
    """``seq`` of source s goes missing; our request goes out first, then (if given) a
    duplicate request from another member (carrying ``distance``, its own to s), in the same
    round or (``within`` False) after our ignore window; then the repair comes."""
    srm.on_message("s", SrmData("s", seq + 1, "x"))
    while not requests(env):
        env.advance(0.001)
    if duplicate_from is not None:
        if not within:
            env.advance(10.0)
        srm.on_message(duplicate_from, SrmRequest(duplicate_from, "s", seq, distance))
    srm.on_message("s", SrmRepair("s", "s", seq, "x"))
    env.take_multicast()


def test_a_duplicate_request_counts_unless_it_came_from_farther_from_the_source() -> None:
    def after(duplicate_from: str, distance: float | None) -> tuple[float, float]:
        """Our duplicates average after one loss, and C2 once the next loss adjusted it."""
        srm, env, _ = member(adaptive=True)
        place(srm, env, "s", 0.01)
        place(srm, env, "near", 0.012)  # about as far from us as the source is
        place(srm, env, "far", 0.1)  # more than 1.5 x our distance to s
        srm.on_message("s", SrmData("s", 1, "x"))
        lose_and_recover(srm, env, 2, duplicate_from=duplicate_from, distance=distance)
        duplicates = srm.timers.ave_dup_req
        srm.on_message("s", SrmData("s", 5, "x"))  # the next loss (4) adjusts C1, C2
        return duplicates, srm.timers.c2

    # a member nearer the source asked too: ours was the duplicate, so wider next time
    assert after("near", 0.008) == (1.0, pytest.approx(2.5))
    # the other said it is farther from s than we are: its duplicate was its own to
    # suppress; we count none, and our window narrows (our request came late: > 1 d)
    assert after("near", 0.02) == (0.0, pytest.approx(1.9))
    # a request that carries no distance: judged by the reference simulator's guess
    assert after("far", None) == (0.0, pytest.approx(1.9))
    assert after("near", None) == (1.0, pytest.approx(2.5))


def test_a_member_suppressed_by_a_farther_members_request_gets_earlier() -> None:
    srm, env, _ = member(adaptive=True)
    place(srm, env, "s", 0.01)
    srm.on_message("s", SrmData("s", 1, "x"))
    srm.on_message("s", SrmData("s", 3, "x"))  # 2 is lost; our timer runs
    srm.on_message("b", SrmRequest("b", "s", 2, 0.05))  # b, five times as far, asked first
    srm.on_message("c", SrmRequest("c", "s", 2, 0.04))  # and c: two requests, one duplicate
    srm.on_message("s", SrmRepair("s", "s", 2, "x"))
    assert requests(env) == []  # we were suppressed
    assert srm.timers.ave_dup_req == 0.0  # their duplicate is none of ours
    c1 = srm.timers.c1
    srm.on_message("s", SrmData("s", 5, "x"))  # the next loss adjusts C1 down
    assert srm.timers.c1 == pytest.approx(c1 - 0.05)


def test_a_member_suppressed_by_a_nearer_members_request_learns_nothing() -> None:
    srm, env, _ = member(adaptive=True)
    place(srm, env, "s", 0.01)
    srm.on_message("s", SrmData("s", 1, "x"))
    for seq in (2, 4, 6):
        srm.on_message("s", SrmData("s", seq + 1, "x"))  # lost; our timer runs
        for other in ("b", "c"):  # two nearer members asked (one duplicate): not ours
            srm.on_message(other, SrmRequest(other, "s", seq, 0.005))
        srm.on_message("s", SrmRepair("s", "s", seq, "x"))
    assert requests(env) == []
    assert srm.timers.requests_done == 0
    assert (srm.timers.c1, srm.timers.c2) == (2.0, 2.0)


def test_the_timers_move_once_per_closed_round_not_once_per_timer() -> None:
    srm, env, _ = member("h", adaptive=True)
    place(srm, env, "a", 0.01)
    for seq in range(1, 8):
        srm.on_message("s", SrmData("s", seq, "x"))
    srm.on_message("a", SrmRequest("a", "s", 1, 0.02))
    while not env.take_multicast():  # our repair goes out
        env.advance(0.001)
    srm.on_message("x", SrmRepair("x", "s", 1, "x", 0.005))  # a nearer holder's: a duplicate
    env.advance(1.0)  # the round closes: one sample, above the target
    d2 = srm.timers.d2
    for seq in range(2, 8):  # six requests heard, six repair timers, one sample
        srm.on_message("a", SrmRequest("a", "s", seq, 0.02))
    assert srm.timers.d2 == pytest.approx(d2 + 0.5)


def test_a_duplicate_repair_counts_unless_it_came_from_farther_from_the_requester() -> None:
    def d2_after(distance: float) -> float:
        srm, env, _ = member("h", adaptive=True)
        place(srm, env, "a", 0.01)
        srm.on_message("s", SrmData("s", 1, "one"))
        srm.on_message("a", SrmRequest("a", "s", 1, 0.02))
        d2 = srm.timers.d2
        while not env.take_multicast():  # our repair goes out
            env.advance(0.001)
        srm.on_message("x", SrmRepair("x", "s", 1, "one", distance))  # and another one
        env.advance(1.0)  # the round closes
        srm.on_message("s", SrmData("s", 2, "two"))
        srm.on_message("a", SrmRequest("a", "s", 2, 0.02))  # the next repair adjusts D1, D2
        return srm.timers.d2 - d2

    assert d2_after(0.005) == pytest.approx(0.5)  # x is nearer a: ours was the duplicate
    assert d2_after(0.05) <= 0.0  # x is farther: its duplicate, not ours


def test_a_request_of_a_later_round_is_no_duplicate() -> None:
    for within, duplicates in ((True, 1.0), (False, 0.0)):
        srm, env, _ = member(adaptive=True)
        srm.on_message("s", SrmData("s", 1, "x"))
        lose_and_recover(srm, env, 2, duplicate_from="b", within=within)
        assert srm.timers.ave_dup_req == duplicates, within


def test_the_first_adaptive_repair_window_is_log10_of_the_group() -> None:
    srm, env, _ = member("h", adaptive=True)
    for i in range(99):  # a group of 100: D1 = D2 = 2
        srm.on_message(f"m{i}", SrmSession(0.0, (), ()))
    srm.on_message("s", SrmData("s", 1, "one"))
    srm.on_message("a", SrmRequest("a", "s", 1))
    assert (srm.timers.d1, srm.timers.d2) == (2.0, 2.0)
    env.advance(2 * D - 1e-9)
    assert env.take_multicast() == []  # not before D1 d
    env.advance(2 * D + 1e-9)  # by (D1 + D2) d it has gone
    assert env.take_multicast() == [("g", SrmRepair("h", "s", 1, "one", D))]
    fixed, _fixed_env, _ = member("h")
    fixed.on_message("s", SrmData("s", 1, "one"))
    fixed.on_message("a", SrmRequest("a", "s", 1))
    assert (fixed.timers.d1, fixed.timers.d2) == (1.0, 1.0)


def test_a_request_is_not_repeated_before_the_source_could_answer_it() -> None:
    # C1 = 0.5, C2 = 1: doubling alone would ask again after 1-3 d, inside the round trip
    env = FakeEnv("a", seed=7)
    srm = Srm(env, SrmConfig(group="g", session_period=1e6, timers=SrmTimerConfig(
        c1=0.5, c2=1.0, adaptive=False)))
    srm.start()
    srm.on_message("s", SrmData("s", 1, "x"))
    srm.on_message("s", SrmData("s", 3, "x"))
    times = request_times(env, 2)
    # a round trip (2 d) and the source's whole repair window ((D1 + D2) d = 2 d)
    assert times[1] - times[0] >= 4 * D - 1e-9


def test_adaptive_timers_back_off_by_three_fixed_ones_by_two() -> None:
    assert AdaptiveTimers(SrmTimerConfig(adaptive=True)).backoff == 3.0
    assert AdaptiveTimers(SrmTimerConfig(adaptive=False)).backoff == 2.0
    assert AdaptiveTimers(SrmTimerConfig(backoff=1.5)).backoff == 1.5
    with pytest.raises(ConfigError):
        SrmTimerConfig(backoff=0.5)


def test_bad_configuration_is_refused() -> None:
    with pytest.raises(ConfigError):
        SrmConfig(group="g", session_period=0)
    with pytest.raises(ConfigError):
        SrmTimerConfig(c1=-1)
    with pytest.raises(ValueError):
        SrmData("s", 0, "x")


def test_a_large_groups_session_messages_fit_a_datagram_and_rotate_through_everyone() -> None:
    srm, env, _ = member("m00000000", max_session_entries=120)
    names = [f"m{i:08x}" for i in range(1, 301)]
    stamp = 1_764_000_000.123456  # wall-clock stamps, as on a network
    env.advance(1_764_000_000.987654)
    for name in names:
        srm.on_message(name, SrmSession(stamp, ((name, 12_345_678),), ()))
    full = SrmSession(env.now(), tuple((n, 12_345_678) for n in names[:120]),
                      tuple((n, stamp, 0.123456789012) for n in names[:120]))
    with pytest.raises(DatagramTooLarge):  # the premise: all 120 of each do not fit
        encode_datagram(full)
    env.take_multicast()  # (the periodic ones sent while the clock moved on)
    echoed: set[str] = set()
    for _ in range(12):
        env.advance(0.123456789)
        srm.send_session()
        (_, session), = env.take_multicast()
        assert isinstance(session, SrmSession)
        echoed.update(member for member, _, _ in session.echoes)
    assert echoed == set(names)  # every member's stamp went back to it within a few periods
