"""``gossamer.testing.FakeEnv``: an ``Env`` with a hand-stepped clock and a record of what the
protocol did (sent, wrote, closed, dialed, promoted, traced); crash-aware storage."""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest

from gossamer.core import (
    CloseCode,
    ConfigError,
    Conn,
    ConnGroup,
    Env,
    Message,
    Store,
    TraceRow,
    get_json,
    message,
    put_json,
)
from gossamer.core.messages import Codec
from gossamer.runtimes.sim import MemoryStore
from gossamer.testing import FakeConn, FakeEnv, info_of

codec = Codec()


@message("fake.hello", codec=codec)
class Hello(Message):
    n: int


def test_it_is_an_env_and_its_conns_are_conns() -> None:
    env = FakeEnv("n1")
    assert isinstance(env, Env)
    assert isinstance(env.accept(), Conn) and isinstance(env.connect("h:1"), Conn)
    assert env.node == "n1" and env.now() == 0.0 and env.tracing


def test_a_bad_node_id_is_refused() -> None:
    with pytest.raises(ConfigError):
        FakeEnv("not a node id")


# -- the clock and timers ----------------------------------------------------------------------


def test_advance_runs_due_timers_in_time_order_at_their_time() -> None:
    env = FakeEnv()
    fired: list[tuple[str, float]] = []
    for name, delay in [("late", 3.0), ("early", 1.0), ("tie-first", 2.0), ("tie-second", 2.0),
                        ("beyond", 10.0)]:
        env.set_timer(delay, lambda name=name: fired.append((name, env.now())))
    env.advance(5.0)
    assert fired == [("early", 1.0), ("tie-first", 2.0), ("tie-second", 2.0), ("late", 3.0)]
    assert env.now() == 5.0
    assert env.pending_timers() == [10.0]
    env.advance(5.0)
    assert fired[-1] == ("beyond", 10.0)
    assert env.pending_timers() == []


def test_timers_set_by_timers_run_when_they_fall_within_the_window() -> None:
    env = FakeEnv()
    ticks: list[float] = []

    def tick() -> None:
        ticks.append(env.now())
        env.set_timer(1.0, tick)

    env.set_timer(1.0, tick)
    env.advance(3.5)
    assert ticks == [1.0, 2.0, 3.0]
    assert env.pending_timers() == [4.0] and env.now() == 3.5


def test_a_timer_due_at_the_end_of_the_window_runs() -> None:
    env = FakeEnv()
    fired: list[float] = []
    env.set_timer(2.0, lambda: fired.append(env.now()))
    env.advance(1.0)
    assert fired == []
    env.advance(1.0)
    assert fired == [2.0]


def test_cancelled_timers_never_run_and_cancelling_twice_is_harmless() -> None:
    env = FakeEnv()
    fired: list[str] = []
    keep = env.set_timer(1.0, lambda: fired.append("keep"))
    drop = env.set_timer(1.0, lambda: fired.append("drop"))
    env.cancel(drop)
    env.cancel(drop)
    assert env.pending_timers() == [1.0]
    env.advance(2.0)
    env.cancel(keep)  # already fired: nothing happens
    assert fired == ["keep"]


def test_a_timer_can_cancel_a_later_one_of_the_same_window() -> None:
    env = FakeEnv()
    fired: list[str] = []
    later = env.set_timer(2.0, lambda: fired.append("later"))
    env.set_timer(1.0, lambda: env.cancel(later))
    env.advance(3.0)
    assert fired == []


def test_run_due_runs_zero_delay_timers_without_moving_time() -> None:
    env = FakeEnv(start=7.0)
    fired: list[float] = []
    env.set_timer(0.0, lambda: env.set_timer(0.0, lambda: fired.append(env.now())))
    env.set_timer(0.5, lambda: fired.append(-1.0))
    env.run_due()
    assert fired == [7.0] and env.now() == 7.0
    assert env.pending_timers() == [7.5]


def test_time_never_goes_back_and_delays_are_not_negative() -> None:
    env = FakeEnv()
    with pytest.raises(ValueError):
        env.advance(-0.1)
    with pytest.raises(ConfigError):
        env.set_timer(-1.0, lambda: None)
    with pytest.raises(TypeError):
        env.cancel(object())


def test_an_exception_in_a_timer_reaches_the_test() -> None:
    env = FakeEnv()

    def boom() -> None:
        raise RuntimeError("bug")

    env.set_timer(1.0, boom)
    with pytest.raises(RuntimeError, match="bug"):
        env.advance(2.0)


# -- what was sent and traced ------------------------------------------------------------------


def test_take_sent_returns_what_was_sent_and_starts_over() -> None:
    env = FakeEnv()
    env.send("b", Hello(1))
    env.send("c", Hello(2))
    assert env.sent == [("b", Hello(1)), ("c", Hello(2))]
    assert env.take_sent() == [("b", Hello(1)), ("c", Hello(2))]
    assert env.sent == [] and env.take_sent() == []


def test_trace_rows_are_trace_rows_with_info_as_json() -> None:
    env = FakeEnv("n1", run="r7", start=1.5)
    env.trace("send", layer="gossip", msg="n1:1", origin="n1", peer="b", key="t", seq=1,
              size=20, hop=2)
    env.trace("drop", layer="gossip", peer="b", reason="bad_payload", type="gossip.data")
    env.trace("drop", layer="chord", reason="hop_limit")
    assert env.rows[0] == TraceRow("r7", 1.5, "n1", "gossip", "send", "n1:1", "n1", "b", "t",
                                   1, 20, '{"hop":2}', 1.5)
    assert env.traced("drop") == env.rows[1:]
    assert env.traced("drop", layer="chord") == env.rows[2:]
    assert env.traced(layer="gossip") == env.rows[:2]
    assert info_of(env.rows[1]) == {"reason": "bad_payload", "type": "gossip.data"}
    assert info_of(TraceRow("r", 0.0, "n", "l", "e")) == {}
    assert env.drop_reasons() == ["bad_payload", "hop_limit"]
    assert env.drop_reasons("gossip") == ["bad_payload"]


def test_without_tracing_rows_are_discarded() -> None:
    env = FakeEnv(tracing=False)
    assert not env.tracing
    env.trace("drop", layer="x", reason="r")
    assert env.rows == []


# -- rng and store -----------------------------------------------------------------------------


def test_the_rng_is_seeded() -> None:
    draws = [FakeEnv(seed=5).rng.random() for _ in range(2)]
    assert draws[0] == draws[1] == random.Random(5).random()
    assert FakeEnv(seed=6).rng.random() != draws[0]
    assert FakeEnv(seed="n1").rng.random() == random.Random("n1").random()


def test_crash_loses_uncommitted_writes_and_voids_timers() -> None:
    env = FakeEnv()
    assert isinstance(env.store, MemoryStore)
    put_json(env.store, "t", "kept", 1)
    env.store.commit()
    put_json(env.store, "t", "lost", 2)
    fired: list[str] = []
    env.set_timer(1.0, lambda: fired.append("dead"))
    env.crash()
    env.advance(2.0)
    assert fired == [] and env.pending_timers() == []
    assert get_json(env.store, "t", "kept") == 1 and get_json(env.store, "t", "lost") is None
    # the next incarnation, on a fresh env over the same store
    again = FakeEnv(env.node, store=env.store)
    assert again.store is env.store and get_json(again.store, "t", "kept") == 1


def test_crash_needs_a_memory_store() -> None:
    class OtherStore(Store):
        def get(self, table: str, key: str) -> bytes | None:
            return None

        def put(self, table: str, key: str, value: bytes) -> None:
            """Discards."""

        def delete(self, table: str, key: str) -> None:
            """Discards."""

        def scan(self, table: str) -> Iterator[tuple[str, bytes]]:
            return iter(())

        def commit(self) -> None:
            """Nothing to commit."""

    env = FakeEnv(store=OtherStore())
    with pytest.raises(TypeError, match="MemoryStore"):
        env.crash()


# -- connections -------------------------------------------------------------------------------


def test_accepted_and_dialed_conns_are_distinct_and_hashable_by_identity() -> None:
    env = FakeEnv()
    first = env.accept()
    second = env.accept("peers", "10.0.0.2:7000")
    dialed = env.connect("10.0.0.3:7000")
    assert (first.listener, first.remote) == ("clients", "127.0.0.1:5000")
    assert (second.listener, second.remote) == ("peers", "10.0.0.2:7000")
    assert (dialed.listener, dialed.remote) == (None, "10.0.0.3:7000")
    assert len({first.id, second.id, dialed.id}) == 3
    twin = FakeConn(first.id, first.listener, first.remote)
    assert twin != first and len({first, twin}) == 2
    assert env.dialed == [dialed]


def test_writes_are_recorded_until_the_conn_is_closed() -> None:
    env = FakeEnv()
    conn, other = env.accept(), env.accept()
    env.write(conn, b"one")
    env.write(other, b"two")
    env.close(conn, CloseCode.INVALID_TEXT, "not utf-8")
    env.write(conn, b"after close")
    env.close(conn)
    assert env.take_written() == [(conn, b"one"), (other, b"two")]
    assert env.written == [] and env.take_written() == []
    assert env.closes == [(conn, 1007, "not utf-8"), (conn, CloseCode.NORMAL, "")]


def test_write_many_writes_once_to_each_member_but_the_excluded_one() -> None:
    env = FakeEnv()
    a, b, c, closed = env.accept(), env.accept(), env.accept(), env.accept()
    group = env.group()
    assert isinstance(group, ConnGroup) and len(group) == 0
    for conn in (a, b, c, closed):
        group.add(conn)
    env.close(closed)
    env.write_many(group, b"frame", exclude=b)
    assert env.take_written() == [(a, b"frame"), (c, b"frame")]
    env.write_many([c, a], b"list")
    assert env.take_written() == [(c, b"list"), (a, b"list")]


def test_write_each_writes_each_frame_to_its_conn_in_order() -> None:
    env = FakeEnv()
    a, b, closed = env.accept(), env.accept(), env.accept()
    env.close(closed)
    env.write(a, b"before")
    env.write_each(iter([(b, b"to b"), (closed, b"lost"), (a, b"to a")]))
    assert env.take_written() == [(a, b"before"), (b, b"to b"), (a, b"to a")]


def test_promote_is_recorded() -> None:
    env = FakeEnv()
    conn = env.accept("peers")
    env.promote(conn)
    assert env.promoted == [conn]


def test_the_example_in_the_module_docstring_holds() -> None:
    from gossamer.protocols.membership import HyParView, Join

    env = FakeEnv("a", seed=1)
    view = HyParView(env, contacts=["b"])
    view.start()
    assert env.take_sent() == [("b", Join())]
    env.advance(view.config.join_timeout)  # no answer: it asks again
    assert env.take_sent() == [("b", Join())]


def test_wall_is_the_wall_epoch_plus_the_fake_clock() -> None:
    env = FakeEnv("n1", start=2.0, wall_epoch=1_700_000_000.0)
    env.trace("join", layer="sim")
    env.advance(0.5)
    env.trace("leave", layer="sim")
    assert [(r.t, r.wall) for r in env.rows] == [(2.0, 1_700_000_002.0), (2.5, 1_700_000_002.5)]
