"""The APSYN peer core on FakeEnv: join first, answer every round, acks matched to requests
oldest first, a skipped round reported back with its last round, a broken connection leaves
unanswered requests unknown and rejoins with the same client id, a refused join never retries."""

from __future__ import annotations

import collections

import pytest

from gossamer.core.errors import ConfigError
from gossamer.protocols.appsync import (
    AppSyncCodec,
    Create,
    Header,
    Init,
    Join,
    Mode,
    ObjectInfo,
    Rqst,
    Scope,
    SessionConfig,
    Sync,
    Update,
)
from gossamer.protocols.appsync.peer import AppSyncPeer, PeerConfig, PeerPhase
from gossamer.testing import FakeConn, FakeEnv

codec = AppSyncCodec()
BOARD = ObjectInfo(Scope.GLOBAL, "board")
SECRET = "a-peer-secret-of-32-characters_x"
JOIN_ID = f"s;key=k;peer={SECRET}"  # every join shows the peer's secret


def started() -> tuple[FakeEnv, AppSyncPeer, FakeConn, list[tuple[int, int | None]]]:
    env = FakeEnv("p1")
    peer = AppSyncPeer(env, PeerConfig(address="ctrl:1", session="s", key="k",
                                       secret=SECRET))
    results: list[tuple[int, int | None]] = []
    peer.on_result = lambda number, code: results.append((number, code))
    peer.start()
    [conn] = env.dialed
    assert isinstance(conn, FakeConn)
    peer.opened(conn, "ctrl:1")
    [(_, frame)] = env.take_written()
    assert codec.decode_from_peer(frame) == Join(header=Header("", 0, 0), id=JOIN_ID)
    init = Init(header=Header("0007", 0, 5), config=SessionConfig(20, 200, 10),
                creates=(Create(BOARD, Mode.RW, {"a": 1}),))
    peer.received(conn, codec.encode(init))
    return env, peer, conn, results


def sent(env: FakeEnv) -> list[Rqst]:
    out = []
    for _, frame in env.take_written():
        msg = codec.decode_from_peer(frame)
        assert isinstance(msg, Rqst)
        out.append(msg)
    return out


def test_the_init_is_answered_and_each_sync_applied_and_answered_with_acks_matched() -> None:
    env, peer, conn, results = started()
    assert sent(env) == [Rqst(header=Header("0007", 5, 5), actions=())]
    assert peer.visible_state() == {"G//board": {"a": 1}}
    first = peer.request(Update(BOARD, {"b": 2}))
    second = peer.request(Update(ObjectInfo(Scope.GLOBAL, "board.a"), 3))
    peer.received(conn, codec.encode(Sync(header=Header("0007", 6, 5), acks=(), actions=())))
    [rqst] = sent(env)
    assert rqst.header == Header("0007", 6, 6) and len(rqst.actions) == 2
    assert not peer.synced
    peer.received(conn, codec.encode(Sync(header=Header("0007", 7, 6), acks=(21, 32),
                                          actions=(Update(BOARD, {"b": 2}),))))
    assert results == [(first, 21), (second, 32)]
    assert peer.visible_state() == {"G//board": {"a": 1, "b": 2}}
    assert peer.synced


def test_a_skipped_round_is_reported_with_the_last_round_and_a_repeat_is_ignored() -> None:
    env, peer, conn, _ = started()
    sent(env)
    peer.received(conn, codec.encode(Sync(header=Header("0007", 8, 5), acks=(),
                                          actions=(Update(BOARD, {"z": 1}),))))
    assert sent(env) == [Rqst(header=Header("0007", 5, 5), actions=())]
    assert peer.visible_state() == {"G//board": {"a": 1}}  # nothing applied out of order
    peer.received(conn, codec.encode(Sync(header=Header("0007", 5, 5), acks=(), actions=())))
    assert sent(env) == []


def test_a_sync_resent_after_the_peer_had_it_is_not_answered() -> None:
    """A late copy of a round the peer already applied (the server resent it while the first
    copy was on its way) asks for nothing: answering it with a gap report made every late
    copy ask for every round again, a storm that ended the connection (VOPR appsync seed 41
    with two zones)."""
    env, peer, conn, _ = started()
    sent(env)
    for number in (6, 7, 8):
        peer.received(conn, codec.encode(Sync(header=Header("0007", number, number - 1),
                                              acks=(), actions=())))
    assert len(sent(env)) == 3
    for number in (6, 7, 5):  # late copies, and one older than the init
        peer.received(conn, codec.encode(Sync(header=Header("0007", number, number - 1),
                                              acks=(), actions=())))
    assert sent(env) == [] and peer.round == 8


def test_a_broken_connection_makes_answers_unknown_and_rejoins_with_the_same_id() -> None:
    env, peer, conn, results = started()
    number = peer.request(Update(BOARD, {"x": 1}))
    peer.received(conn, codec.encode(Sync(header=Header("0007", 6, 5), acks=(), actions=())))
    env.take_written()
    peer.closed(conn, "reset")
    assert results == [(number, None)] and peer.phase is PeerPhase.CONNECTING
    env.advance(peer.config.reconnect_delay)
    again = env.dialed[-1]
    peer.opened(again, "ctrl:1")
    [(_, frame)] = env.take_written()
    assert codec.decode_from_peer(frame) == Join(header=Header("0007", 0, 0), id=JOIN_ID)


def test_a_refused_join_is_not_retried() -> None:
    env = FakeEnv("p1")
    peer = AppSyncPeer(env, PeerConfig(address="ctrl:1", session="s"))
    peer.start()
    [conn] = env.dialed

    class Refused:  # what a runtime's connection carries after the server closed it
        close_code = 4041

    peer.conn = Refused()  # type: ignore[assignment]
    peer.closed(peer.conn, "peer_closed")  # type: ignore[arg-type]
    assert peer.phase is PeerPhase.CLOSED and peer.refused == (4041, "peer_closed")
    env.advance(10.0)
    assert env.dialed == [conn]


def test_a_gathering_peer_answers_later_in_the_round_with_what_was_requested_meanwhile() -> None:
    """``gather``: the answer waits that fraction of the min round time (20 ms here), and a
    request made in the wait travels in this round's rqst instead of the next one's."""
    env = FakeEnv("p1")
    peer = AppSyncPeer(env, PeerConfig(address="ctrl:1", session="s", gather=0.5))
    peer.start()
    [conn] = env.dialed
    assert isinstance(conn, FakeConn)
    peer.opened(conn, "ctrl:1")
    env.take_written()
    peer.received(conn, codec.encode(Init(header=Header("0007", 0, 5),
                                          config=SessionConfig(20, 200, 10), creates=())))
    assert sent(env) == []  # not at once
    env.advance(0.005)
    number = peer.request(Update(BOARD, {"b": 2}))
    assert sent(env) == []
    env.advance(0.005)  # 10 ms = 0.5 x 20 ms after the init
    assert sent(env) == [Rqst(header=Header("0007", 5, 5), actions=(Update(BOARD, {"b": 2}),))]
    assert peer.in_flight == collections.deque([number])
    peer.stop()  # a stopped peer answers nothing more
    peer.received(conn, codec.encode(Sync(header=Header("0007", 6, 5), acks=(21,), actions=())))
    env.advance(1.0)
    assert sent(env) == []


def test_an_eager_peer_sends_a_request_when_it_is_made_for_the_round_that_is_open() -> None:
    """``eager``: a request made before the gathered answer is due sends the answer at once;
    requests made after the answer went (in one step) go together in a rqst of their own
    for the same round; acks match them oldest first across the two rqsts."""
    env = FakeEnv("p1")
    peer = AppSyncPeer(env, PeerConfig(address="ctrl:1", session="s", gather=0.5, eager=True))
    got: list[tuple[int, int | None]] = []
    peer.on_result = lambda number, code: got.append((number, code))
    peer.start()
    [conn] = env.dialed
    assert isinstance(conn, FakeConn)
    peer.request(Update(BOARD, {"early": 0}))  # before the init: waits for the first answer
    env.advance(0.001)
    assert env.take_written() == []  # not connected yet: nothing to send it in
    peer.opened(conn, "ctrl:1")
    env.take_written()
    peer.received(conn, codec.encode(Init(header=Header("0007", 0, 5),
                                          config=SessionConfig(20, 200, 10), creates=())))
    assert sent(env) == []  # the gathered answer (10 ms) is not due yet
    env.advance(0.002)
    first = peer.request(Update(BOARD, {"b": 2}))
    assert sent(env) == []  # after this step, not inside it
    env.advance(0.0)
    assert sent(env) == [Rqst(header=Header("0007", 5, 5),
                              actions=(Update(BOARD, {"early": 0}), Update(BOARD, {"b": 2})))]
    env.advance(0.02)  # the gathered answer's time passes: it went already, nothing more
    assert sent(env) == []
    second = peer.request(Update(BOARD, {"c": 3}))
    third = peer.request(Update(BOARD, {"d": 4}))
    env.advance(0.0)
    assert sent(env) == [Rqst(header=Header("0007", 5, 5),
                              actions=(Update(BOARD, {"c": 3}), Update(BOARD, {"d": 4})))]
    assert list(peer.in_flight) == [first - 1, first, second, third]
    peer.received(conn, codec.encode(Sync(header=Header("0007", 6, 5), acks=(21, 23, 21),
                                          actions=())))
    assert got == [(first - 1, 21), (first, 23), (second, 21)]
    env.advance(0.0101)  # round 6's answer, gathered: empty
    assert sent(env) == [Rqst(header=Header("0007", 6, 6), actions=())]
    peer.stop()
    peer.request(Update(BOARD, {"e": 5}))
    env.advance(1.0)
    assert sent(env) == []  # a stopped peer sends nothing


def _quiet_peer(sc: SessionConfig) -> tuple[FakeEnv, AppSyncPeer, FakeConn]:
    env = FakeEnv("p1")
    peer = AppSyncPeer(env, PeerConfig(address="ctrl:1", session="s", eager=True, quiet=True))
    peer.start()
    [conn] = env.dialed
    assert isinstance(conn, FakeConn)
    peer.opened(conn, "ctrl:1")
    env.take_written()
    peer.received(conn, codec.encode(Init(header=Header("0007", 0, 5), config=sc, creates=())))
    return env, peer, conn


def _sync(peer: AppSyncPeer, conn: FakeConn, number: int, acks: tuple[int, ...] = ()) -> None:
    peer.received(conn, codec.encode(Sync(header=Header("0007", number, number - 1),
                                          acks=acks, actions=())))


def test_a_quiet_peer_answers_only_with_requests_or_before_ctrl_would_drop_it() -> None:
    """``quiet`` in fixed rounds (max = min): no rqst for a round it has nothing for, its
    requests sent when made (eager), and an empty rqst once tout / 2 rounds (5 of 10) went by
    without one, so CTRL, which drops a peer silent for tout rounds, keeps it."""
    env, peer, conn = _quiet_peer(SessionConfig(50, 50, 10))
    assert sent(env) == []  # the init's round: nothing to ask
    answered = []
    for number in range(6, 21):
        _sync(peer, conn, number)
        env.advance(0.0)
        answered += [(number, r.actions) for r in sent(env)]
    assert answered == [(9, ()), (14, ()), (19, ())]  # rounds 5-8 unanswered, then every 5th
    first = peer.request(Update(BOARD, {"b": 2}))
    env.advance(0.0)
    assert sent(env) == [Rqst(header=Header("0007", 20, 20), actions=(Update(BOARD, {"b": 2}),))]
    got: list[tuple[int, int | None]] = []
    peer.on_result = lambda number, code: got.append((number, code))
    for number in range(21, 25):  # the count starts again from the request
        _sync(peer, conn, number, (21,) if number == 21 else ())
        env.advance(0.0)
        assert sent(env) == []
    assert got == [(first, 21)]
    _sync(peer, conn, 25)
    assert sent(env) == [Rqst(header=Header("0007", 25, 25), actions=())]


def test_a_quiet_peer_answers_every_round_where_rounds_wait_for_answers() -> None:
    """Where the max round time is above the min, CTRL waits for every peer's answer up to the
    max: a peer that kept quiet would hold each round that long, so it answers every round."""
    env, peer, conn = _quiet_peer(SessionConfig(20, 200, 10))
    assert sent(env) == [Rqst(header=Header("0007", 5, 5), actions=())]
    for number in range(6, 10):
        _sync(peer, conn, number)
        assert sent(env) == [Rqst(header=Header("0007", number, number), actions=())]


def test_a_quiet_peer_with_a_short_timeout_answers_every_round() -> None:
    """tout 2 or 3: tout / 2 rounds is one round, so a quiet peer answers each one."""
    for tout in (1, 2, 3):
        env, peer, conn = _quiet_peer(SessionConfig(50, 50, tout))
        assert len(sent(env)) == 1, tout
        _sync(peer, conn, 6)
        assert len(sent(env)) == 1, tout


def test_gather_is_checked_at_once() -> None:
    with pytest.raises(ConfigError):
        PeerConfig(address="ctrl:1", session="s", gather=1.0)


def test_a_ctrl_that_sends_no_sync_is_given_up_after_the_sync_timeout() -> None:
    """A hung CTRL keeps its connection open: without a watchdog the peer would wait for ever.
    No sync for 10 max round times (at least 2 s): the connection is closed and dialled again."""
    env, peer, conn, _ = started()
    env.take_written()
    env.advance(1.9)  # the session's max round is 200 ms: 2 s of silence allowed
    assert not env.closes
    peer.received(conn, codec.encode(Sync(header=Header("0007", 6, 5), acks=(), actions=())))
    env.advance(1.9)  # a sync re-arms it
    assert not env.closes
    env.advance(0.2)
    assert env.closes and env.closes[-1][2] == "no sync"
    assert env.traced("sync_timeout")
