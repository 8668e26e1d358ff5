"""Connections in the simulator: order, graceful close, resets, partitions, and the limits a
listener enforces (frame size, handshake and idle timeouts, connection slots, slow readers)."""

from __future__ import annotations

from typing import Any

import pytest

from gossamer.core import CloseReason, ConfigError, Conn, Env, ListenerSpec, MemorySink
from gossamer.runtimes.sim import Simulation, Uniform
from gossamer.runtimes.sim.network import LinkModel

PORT = 7000


class Recorder:
    """A service that records what happens to its connections; echoes when asked to."""

    def __init__(self, env: Env, *, echo: bool = False, dial: str | None = None,
                 promote_on: bytes | None = None, last_word: bytes | None = None) -> None:
        self.env = env
        self.echo = echo
        self.dial = dial
        self.promote_on = promote_on
        self.last_word = last_word
        self.events: list[tuple[str, Any, Any]] = []
        self.conn: Conn | None = None

    def start(self) -> None:
        if self.dial is not None:
            self.conn = self.env.connect(self.dial)

    def stop(self) -> None:
        pass

    def on_message(self, src: str, msg: object) -> None:
        raise AssertionError("no datagrams here")

    def opened(self, conn: Conn, peer_address: str) -> None:
        self.events.append(("opened", conn, peer_address))

    def received(self, conn: Conn, frame: bytes) -> None:
        self.events.append(("received", conn, frame))
        if self.promote_on is not None and frame == self.promote_on:
            self.env.promote(conn)
        if self.echo:
            self.env.write(conn, b"echo:" + frame)

    def closed(self, conn: Conn, reason: str) -> None:
        self.events.append(("closed", conn, reason))

    def oversized(self, conn: Conn, size: int) -> None:
        if self.last_word is not None:
            self.env.write(conn, self.last_word)

    def frames(self) -> list[bytes]:
        return [frame for kind, _, frame in self.events if kind == "received"]

    def reasons(self) -> list[str]:
        return [reason for kind, _, reason in self.events if kind == "closed"]


def build(seed: int = 1, *, spec: ListenerSpec | None = None, clients: int = 1,
          server: dict[str, Any] | None = None, client: dict[str, Any] | None = None,
          latency: tuple[float, float] = (0.001, 0.02)) -> Simulation:
    sim = Simulation(seed=seed, link=LinkModel(latency=Uniform(*latency)), trace=MemorySink())
    spec = spec or ListenerSpec(name="clients", port=PORT)
    sim.add_node("srv", lambda env: Recorder(env, **(server or {"echo": True})),
                 listeners=[spec])
    for n in range(clients):
        sim.add_node(f"c{n}", lambda env: Recorder(env, dial=f"srv:{spec.port}",
                                                   **(client or {})))
    return sim


def rec(sim: Simulation, node: str) -> Recorder:
    process = sim.process(node)
    assert isinstance(process, Recorder)
    return process


def test_frames_arrive_in_order_and_are_answered() -> None:
    for seed in range(5):
        sim = build(seed)
        sim.run(until=0.5)
        client = rec(sim, "c0")
        assert client.events and client.events[0][0] == "opened", f"seed {seed}"
        assert client.conn is not None
        for n in range(50):
            sim.call("c0", lambda p, n=n: p.env.write(p.conn, b"%d" % n))
        sim.run(until=2.0)
        want = [b"%d" % n for n in range(50)]
        assert rec(sim, "srv").frames() == want, f"seed {seed}"
        assert client.frames() == [b"echo:" + f for f in want], f"seed {seed}"


class Fanner(Recorder):
    """On ``fan``: a frame written to the asking connection, then ``write_each`` of a frame
    of its own to every connection opened, newest first."""

    def received(self, conn: Conn, frame: bytes) -> None:
        super().received(conn, frame)
        if frame == b"fan":
            self.env.write(conn, b"before")
            opened = [c for kind, c, _ in self.events if kind == "opened"]
            self.env.write_each((c, b"to %d" % n) for n, c in reversed(list(enumerate(opened))))


def test_write_each_delivers_each_frame_to_its_connection_after_what_was_written_before(
) -> None:
    for seed in range(3):
        sim = Simulation(seed=seed, link=LinkModel(latency=Uniform(0.001, 0.02)),
                         trace=MemorySink())
        sim.add_node("srv", Fanner, listeners=[ListenerSpec(name="clients", port=PORT)])
        for n in range(3):
            sim.add_node(f"c{n}", lambda env: Recorder(env, dial=f"srv:{PORT}"))
        sim.run(until=0.5)
        server = rec(sim, "srv")
        order = {peer: n for n, (kind, _, peer) in enumerate(
            e for e in server.events if e[0] == "opened")}
        sim.call("c1", lambda p: p.env.write(p.conn, b"fan"))
        sim.run(until=2.0)
        for name in ("c0", "c1", "c2"):
            client = rec(sim, name)
            mine = client.frames()
            index = next(n for peer, n in order.items() if peer.startswith(name))
            want = ([b"before"] if name == "c1" else []) + [b"to %d" % index]
            assert mine == want, f"seed {seed}: {name} got {mine}"


def test_graceful_close_delivers_what_was_written_first() -> None:
    sim = build()
    sim.run(until=0.5)

    def burst_then_close(p: Any) -> None:
        for n in range(10):
            p.env.write(p.conn, b"%d" % n)
        p.env.close(p.conn, 1000, "bye")
        p.env.write(p.conn, b"after close")  # taken by nobody

    sim.call("c0", burst_then_close)
    sim.run(until=2.0)
    server = rec(sim, "srv")
    assert server.frames() == [b"%d" % n for n in range(10)]
    assert server.reasons() == [CloseReason.PEER_CLOSED]
    assert rec(sim, "c0").reasons() == [CloseReason.CLOSED]


def test_dial_to_nothing_is_refused() -> None:
    sim = Simulation(seed=3, trace=MemorySink())
    sim.add_node("c", lambda env: Recorder(env, dial="nobody:1"))
    sim.add_node("d", lambda env: Recorder(env, dial="c:1"))  # up, no listener
    sim.run(until=1.0)
    assert rec(sim, "c").reasons() == [CloseReason.REFUSED]
    assert rec(sim, "d").reasons() == [CloseReason.REFUSED]
    assert not [e for e in rec(sim, "c").events if e[0] == "opened"]


def test_a_crash_resets_the_other_end_and_loses_what_was_in_flight() -> None:
    sim = build(latency=(0.05, 0.05))
    sim.run(until=0.5)
    sim.call("c0", lambda p: p.env.write(p.conn, b"doomed"))
    sim.crash("c0")  # before the frame arrived: it dies with the connection
    sim.run(until=1.0)
    server = rec(sim, "srv")
    assert server.frames() == []
    assert server.reasons() == [CloseReason.RESET]


def test_cut_resets_both_ends_at_once() -> None:
    sim = build(latency=(0.05, 0.05))
    sim.run(until=0.5)
    sim.call("c0", lambda p: p.env.write(p.conn, b"lost"))
    assert sim.cut("c0", "srv") == 1
    sim.run(until=1.0)
    assert rec(sim, "srv").frames() == []
    assert rec(sim, "srv").reasons() == [CloseReason.RESET]
    assert rec(sim, "c0").reasons() == [CloseReason.RESET]


def test_a_partition_holds_frames_in_order_until_the_heal() -> None:
    sim = build(latency=(0.01, 0.03))
    sim.run(until=0.5)
    for n in range(3):
        sim.call("c0", lambda p, n=n: p.env.write(p.conn, b"before%d" % n))
    sim.partition([["c0"], ["srv"]])  # the first three are in flight
    for n in range(3):
        sim.call("c0", lambda p, n=n: p.env.write(p.conn, b"during%d" % n))
    sim.run(until=5.0)
    assert rec(sim, "srv").frames() == []
    sim.heal()
    sim.run(until=6.0)
    assert rec(sim, "srv").frames() == [b"before0", b"before1", b"before2",
                                        b"during0", b"during1", b"during2"]
    assert rec(sim, "srv").reasons() == []


def test_a_frame_over_the_limit_gets_the_last_word_then_a_close() -> None:
    spec = ListenerSpec(name="clients", port=PORT, max_frame=100)
    sim = build(spec=spec, server={"last_word": b"too big"})
    sim.run(until=0.5)
    sim.call("c0", lambda p: p.env.write(p.conn, b"x" * 101))
    sim.run(until=1.0)
    assert rec(sim, "srv").frames() == []
    assert rec(sim, "srv").reasons() == [CloseReason.TOO_LARGE]
    assert rec(sim, "c0").frames() == [b"too big"]
    assert rec(sim, "c0").reasons() == [CloseReason.PEER_CLOSED]


def test_silent_connections_are_closed_by_the_handshake_and_idle_timeouts() -> None:
    spec = ListenerSpec(name="clients", port=PORT, handshake_timeout=1.0, idle_timeout=3.0)
    sim = build(spec=spec, clients=2)
    sim.run(until=0.5)
    sim.call("c1", lambda p: p.env.write(p.conn, b"hello"))
    sim.run(until=2.0)
    assert rec(sim, "c0").reasons() == [CloseReason.PEER_CLOSED]
    assert rec(sim, "c1").reasons() == []
    sim.run(until=5.0)
    assert rec(sim, "c1").reasons() == [CloseReason.PEER_CLOSED]
    assert sorted(rec(sim, "srv").reasons()) == [CloseReason.HANDSHAKE_TIMEOUT,
                                                  CloseReason.IDLE_TIMEOUT]


def test_slots_kept_for_peers_admit_only_what_gets_promoted() -> None:
    spec = ListenerSpec(name="servers", port=PORT, max_connections=3, reserved_for_peers=1,
                        handshake_timeout=None)
    sim = build(spec=spec, clients=4, server={"promote_on": b"i am a server"})
    sim.run(until=0.5)
    opened = [n for n in range(4)
              if any(e[0] == "opened" for e in rec(sim, "srv").events
                     if e[2].startswith(f"c{n}:"))]
    assert len(opened) == 3  # the fourth was over the limit: the service never saw it
    for n in range(4):
        sim.call(f"c{n}", lambda p: p.env.write(p.conn, b"just a client"))
    sim.run(until=1.0)
    # two clients fit beside the reserved slot; the third was on probation and not promoted
    assert len(rec(sim, "srv").reasons()) == 1
    assert rec(sim, "srv").reasons() == [CloseReason.FULL]


def test_a_reader_that_falls_behind_is_disconnected() -> None:
    spec = ListenerSpec(name="clients", port=PORT, send_queue_limit=5)
    sim = build(spec=spec, server={"echo": False})
    sim.run(until=0.5)
    sim.partition([["c0"], ["srv"]])

    def flood(p: Any) -> None:
        for conn in list(p.events):
            if conn[0] == "opened":
                for _ in range(10):
                    p.env.write(conn[1], b"x")

    sim.call("srv", flood)
    sim.run(until=1.0)
    assert rec(sim, "srv").reasons() == [CloseReason.SLOW_CONSUMER]
    sim.heal()
    sim.run(until=2.0)
    assert rec(sim, "c0").reasons() == [CloseReason.RESET]


def test_same_seed_same_events() -> None:
    def run(seed: int) -> list[tuple[str, str, Any]]:
        sim = build(seed, clients=3)
        sim.run(until=0.3)
        for n in range(3):
            for k in range(5):
                sim.call(f"c{n}", lambda p, k=k: p.env.write(p.conn, b"%d" % k))
        sim.run(until=2.0)
        return [(kind, conn.id, data) for kind, conn, data in rec(sim, "srv").events]

    assert run(11) == run(11), "seed 11"
    assert run(11) != run(12)


def test_foreign_connections_are_refused() -> None:
    sim = build(clients=2)
    sim.run(until=0.5)
    other = rec(sim, "c1").conn
    with pytest.raises(Exception, match="belongs to node c1"):
        sim.call("c0", lambda p: p.env.write(other, b"x"))
    with pytest.raises(ConfigError):
        ListenerSpec(name="x", port=1, reserved_for_peers=5, max_connections=5)
    with pytest.raises(ConfigError, match="binary_close need a WebSocket listener"):
        ListenerSpec(name="x", port=1, binary_close=(4040, "40 Bad Request"))


class Timed(Recorder):
    """A recorder that also notes when each frame arrived."""

    def __init__(self, env: Env, **kw: Any) -> None:
        super().__init__(env, **kw)
        self.arrivals: list[float] = []

    def received(self, conn: Conn, frame: bytes) -> None:
        self.arrivals.append(self.env.now())
        super().received(conn, frame)


def lossy_arrivals(seed: int, loss: float, rto: float) -> tuple[list[bytes], list[float]]:
    sim = Simulation(seed=seed, link=LinkModel(latency=Uniform(0.001, 0.02), loss=loss),
                     trace=MemorySink(), connection_rto=rto)
    sim.add_node("srv", lambda env: Timed(env), listeners=[ListenerSpec(name="c", port=PORT)])
    sim.add_node("c0", lambda env: Recorder(env, dial=f"srv:{PORT}"))
    sim.run(until=0.5)
    for n in range(100):
        sim.schedule(n * 0.01, lambda n=n: sim.call(
            "c0", lambda p: p.env.write(p.conn, b"%d" % n)))
    sim.run(until=60.0)
    server = sim.process("srv")
    assert isinstance(server, Timed)
    return server.frames(), server.arrivals


def test_loss_on_a_connection_costs_retransmission_time_never_data_or_order() -> None:
    """With ``connection_rto`` a lost try of a frame is sent again after the timeout
    (doubling per try), and later frames wait behind it; without it loss costs nothing."""
    want = [b"%d" % n for n in range(100)]
    for seed in range(3):
        clean, clean_at = lossy_arrivals(seed, 0.0, 0.2)
        free, free_at = lossy_arrivals(seed, 0.2, 0.0)
        lossy, lossy_at = lossy_arrivals(seed, 0.2, 0.2)
        assert clean == free == lossy == want, f"seed {seed}"
        assert free_at == clean_at, f"seed {seed}"  # no timeout given: loss is free
        assert lossy_at == sorted(lossy_at), f"seed {seed}"  # in order
        # about a fifth of the frames waited at least one timeout (or behind one that did)
        late = sum(1 for a, b in zip(lossy_at, clean_at, strict=True) if a - b >= 0.2 - 0.02)
        assert late >= 20, f"seed {seed}: {late} late"
        assert max(b - a for a, b in zip(clean_at, lossy_at, strict=True)) < 0.2 * 2 ** 8


def test_connection_rto_is_checked_at_once() -> None:
    with pytest.raises(ConfigError):
        Simulation(seed=1, connection_rto=-1.0)


def test_a_silent_connection_in_a_kept_slot_is_closed_after_probation_timeout() -> None:
    """A peer speaks first at once: silent connections that took the kept slots are closed
    after ``probation_timeout``, while the others have their whole ``handshake_timeout``."""
    spec = ListenerSpec(name="servers", port=PORT, max_connections=3, reserved_for_peers=1,
                        handshake_timeout=30.0, probation_timeout=0.5)
    sim = build(spec=spec, clients=3, server={"promote_on": b"i am a server"})
    sim.run(until=5.0)
    assert rec(sim, "srv").reasons() == [CloseReason.HANDSHAKE_TIMEOUT]  # the one on probation
    sim.run(until=40.0)
    assert rec(sim, "srv").reasons() == [CloseReason.HANDSHAKE_TIMEOUT] * 3
