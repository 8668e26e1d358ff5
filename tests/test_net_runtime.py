"""The asyncio runtime on real loopback sockets, TCP and WebSocket alike.

A tiny echo protocol (its own codec, so nothing here depends on other protocols) checks
delivery, bad input, oversized frames, reconnects, restarts, timers, the bounded send queue,
storage and a clean SIGTERM shutdown. Waits are on events with timeouts, never fixed sleeps.
"""

from __future__ import annotations

import os
import random
import selectors
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, cast

import orjson
import pyarrow.parquet as pq
import pytest
from websockets.sync.client import connect as ws_sync_connect

from gossamer.core import (
    Codec,
    ConfigError,
    Env,
    FibonacciBackoff,
    InvalidMessage,
    ListenerSpec,
    Message,
    NodeId,
    Process,
    StateError,
    TimerHandle,
    TraceRow,
    message,
)
from gossamer.core.traceio import SCHEMA, trace_path
from gossamer.runtimes.net import NetEnv, NetNode, NetNodeError, NodeState, SqliteStore
from gossamer.runtimes.net.linkauth import hello_frame, parse_challenge, resolve_cluster_key
from harness_net import NetCluster, RawClient, reserve_port

CODEC = Codec(max_frame=4096)
WAIT = 20.0  # wall seconds: generous upper bounds, the tests finish as soon as things happen
CLOCK_STEP = 0.001  # seconds: the coarsest event loop clock a timer is judged by (uvloop's)
HERE = Path(__file__).parent


@message("nettest.ping", codec=CODEC)
class Ping(Message):
    n: int
    body: str = ""

    def __post_init__(self) -> None:
        if self.n < 0:
            raise ValueError(f"n must be >= 0, got {self.n}")

    def trace_ids(self) -> tuple[str | None, str | None, str | None, int | None]:
        return (None, None, None, self.n)


@message("nettest.pong", codec=CODEC)
class Pong(Message):
    n: int


@message("nettest.boom", codec=CODEC)
class Boom(Message):
    """``bug=True``: the handler raises a plain exception (a local bug), else a ProtocolError."""

    bug: bool


class Echo:
    """Answers each ping with a pong; keeps what it saw; stores the last ping (committed)."""

    def __init__(self, env: Env) -> None:
        self.env = env
        self.pings: list[tuple[NodeId, int]] = []
        self.pongs: list[tuple[NodeId, int]] = []
        self.fired: list[tuple[str, float]] = []
        self.stopped = False
        self.started_at: float | None = None

    def start(self) -> None:
        self.started_at = self.env.now()

    def stop(self) -> None:
        self.stopped = True

    def on_message(self, src: NodeId, msg: Message) -> None:
        if isinstance(msg, Ping):
            self.pings.append((src, msg.n))
            store = self.env.store
            store.put("echo", "last", str(msg.n).encode())
            store.commit()
            store.put("echo", "scratch", b"uncommitted")
            self.env.send(src, Pong(msg.n))
        elif isinstance(msg, Pong):
            self.pongs.append((src, msg.n))
        elif isinstance(msg, Boom):
            if msg.bug:
                raise RuntimeError("boom: a bug in the protocol")
            raise InvalidMessage("boom refused")

    def ping(self, dst: NodeId, n: int, body: str = "") -> None:
        self.env.send(dst, Ping(n, body))

    def arm(self, name: str, delay: float) -> TimerHandle:
        return self.env.set_timer(delay, lambda: self.fired.append((name, self.env.now())))


@pytest.fixture(params=["tcp", "ws"])
def transport(request: pytest.FixtureRequest) -> str:
    return cast(str, request.param)


@pytest.fixture
def make_cluster(transport: str) -> Iterator[Callable[..., NetCluster]]:
    made: list[NetCluster] = []

    def make(node_ids: list[str], **options: Any) -> NetCluster:
        # raw test peers ("mallory") have no address to check their id with: these tests are
        # about a node's own frame handling; tests/test_net_linkauth.py checks the ids
        options.setdefault("verify_ids", False)
        cluster = NetCluster(node_ids, Echo, transport=transport, codec=CODEC, **options)
        made.append(cluster)
        return cluster

    yield make
    for cluster in made:
        cluster.close()


def echo(cluster: NetCluster, node: str) -> Echo:
    return cast(Echo, cluster.process(node))


def rows(cluster: NetCluster, **match: object) -> list[TraceRow]:
    return [r for r in cluster.trace.named()
            if all(getattr(r, name) == value for name, value in match.items())]


def info(row: TraceRow) -> dict[str, Any]:
    return cast(dict[str, Any], orjson.loads(row.info)) if row.info else {}


def drop_reasons(cluster: NetCluster, node: str) -> list[str]:
    return [info(r)["reason"] for r in rows(cluster, node=node, event="drop")]


def ping(cluster: NetCluster, src: str, dst: str, n: int, body: str = "") -> None:
    cluster.call(src, lambda p: cast(Echo, p).ping(dst, n, body))


def ping_many(cluster: NetCluster, src: str, dst: str, numbers: Iterable[int]) -> None:
    def send_all(process: Process) -> None:
        for n in numbers:
            cast(Echo, process).ping(dst, n)

    cluster.call(src, send_all)


async def raw_connection(cluster: NetCluster, node: str, frames: list[bytes], *,
                         hello_as: str | None = "mallory") -> RawClient:
    """A hand-made peer: dial ``node``, answer its challenge with a hello proven with the
    cluster's (built-in loopback) key as ``hello_as`` (None: no hello), then send each frame
    as is."""
    conn = await RawClient.open(cluster.transport, cluster.address(node))
    challenge = await conn.recv()
    assert challenge is not None, "the node sent no challenge"
    if hello_as is not None:
        await conn.send(hello_frame(LOOPBACK_KEY, hello_as, 1, parse_challenge(challenge),
                                    "0" * 32))
    for frame in frames:
        await conn.send(frame)
    return conn


LOOPBACK_KEY = resolve_cluster_key(None, "127.0.0.1", environ={})


# -- delivery ------------------------------------------------------------------------------


def test_messages_flow_between_three_nodes(make_cluster: Callable[..., NetCluster]) -> None:
    ids = ["a", "b", "c"]
    before = time.time()
    cluster = make_cluster(ids, seed=4)
    for n, (src, dst) in enumerate((s, d) for s in ids for d in ids if s != d):
        ping(cluster, src, dst, n)

    def all_answered() -> bool:
        return all(len(echo(cluster, node).pongs) == 2 for node in ids)

    assert cluster.run_until(all_answered, WAIT)
    ping(cluster, "a", "a", 99)  # to itself: through its own server, like any peer
    assert cluster.run_until(lambda: ("a", 99) in echo(cluster, "a").pongs, WAIT)
    assert sorted(echo(cluster, "b").pings) == [("a", 0), ("c", 5)]
    sends = rows(cluster, event="send", layer="nettest")
    recvs = rows(cluster, event="recv", layer="nettest")
    assert len(sends) == len(recvs) == 14
    one = next(r for r in recvs if r.node == "b" and r.peer == "a" and r.seq == 0)
    assert info(one) == {"type": "nettest.ping"}
    assert one.size == len(CODEC.encode(Ping(0)))
    assert one.run == "test" and 0.0 <= one.t < WAIT
    assert {r.node for r in rows(cluster, event="join", layer="net")} == set(ids)
    # every row, from env.trace or the runtime's message rows, carries the wall clock
    every = rows(cluster)
    assert all(r.wall is not None and before <= r.wall <= time.time() for r in every)
    env = cast(NetEnv, echo(cluster, "a").env)
    assert isinstance(env, Env)
    assert env.rng.random() == random.Random("4/a").random()


def test_a_frame_of_exactly_max_frame_bytes_is_delivered(
    make_cluster: Callable[..., NetCluster],
) -> None:
    cluster = make_cluster(["a", "b"])
    body = "y" * (CODEC.max_frame - len(CODEC.encode(Ping(1))))
    assert len(CODEC.encode(Ping(1, body))) == CODEC.max_frame
    ping(cluster, "a", "b", 1, body)
    assert cluster.run_until(lambda: echo(cluster, "a").pongs == [("b", 1)], WAIT)
    with pytest.raises(ConfigError):
        ping(cluster, "a", "b", 2, body + "y")  # over the limit: our own bug, raised


# -- bad input -----------------------------------------------------------------------------


def test_malformed_frames_are_dropped_and_the_connection_kept(
    make_cluster: Callable[..., NetCluster], caplog: pytest.LogCaptureFixture
) -> None:
    cluster = make_cluster(["a", "b"])
    bad = [b"not json at all", b'{"type": "nettest.nope", "n": 1}',
           b'{"type": "nettest.ping", "n": "seven"}', b'{"type": "nettest.ping", "n": -1}',
           b'{"type": "nettest.ping", "n": 1, "extra": true}', b"[1, 2]"]
    conn = cluster.run_async(raw_connection(cluster, "b", [*bad, CODEC.encode(Ping(7))]))
    try:
        assert cluster.run_until(lambda: ("mallory", 7) in echo(cluster, "b").pings, WAIT)
    finally:
        cluster.run_async(conn.close())
    assert drop_reasons(cluster, "b")[:6] == [
        "decode", "unknown_type", "invalid", "invalid", "invalid", "decode"]
    for row in rows(cluster, node="b", event="drop")[:6]:
        assert row.layer == "net" and row.peer == "mallory" and "error" in info(row)
    # the pong to mallory has nowhere to go: mallory is no peer of b
    assert drop_reasons(cluster, "b")[6:] == ["unknown_peer"]
    logged = " ".join(r.getMessage() for r in caplog.records if r.name == "gossamer.net")
    for reason in ("decode", "unknown_type", "invalid", "unknown peer mallory"):
        assert reason in logged
    ping(cluster, "a", "b", 8)
    assert cluster.run_until(lambda: echo(cluster, "a").pongs == [("b", 8)], WAIT)


def test_a_bad_hello_closes_only_that_connection(
    make_cluster: Callable[..., NetCluster],
) -> None:
    cluster = make_cluster(["a", "b"])
    for hello in (b"garbage", b'{"hello": "no spaces allowed"}', b'{"hi": "a"}'):
        conn = cluster.run_async(raw_connection(cluster, "b", [hello], hello_as=None))
        cluster.run_async(conn.wait_closed())  # b hangs up
        cluster.run_async(conn.close())
    assert drop_reasons(cluster, "b") == ["decode", "decode", "decode"]
    ping(cluster, "a", "b", 1)
    assert cluster.run_until(lambda: echo(cluster, "a").pongs == [("b", 1)], WAIT)


def test_a_silent_client_is_cut_off_and_inbound_connections_are_bounded(
    make_cluster: Callable[..., NetCluster],
) -> None:
    cluster = make_cluster(["a", "b"], hello_timeout=0.1, max_inbound=2)
    silent = cluster.run_async(raw_connection(cluster, "b", [], hello_as=None))
    cluster.run_async(silent.wait_closed())  # no hello in time: b hangs up
    cluster.run_async(silent.close())
    assert drop_reasons(cluster, "b") == ["handshake_timeout"]
    first = cluster.run_async(raw_connection(cluster, "b", []))
    second = cluster.run_async(raw_connection(cluster, "b", []))
    third = cluster.run_async(RawClient.open(cluster.transport, cluster.address("b")))
    try:
        cluster.run_async(third.wait_closed())
        assert drop_reasons(cluster, "b") == ["handshake_timeout", "full"]
    finally:
        for conn in (first, second, third):
            cluster.run_async(conn.close())
    ping(cluster, "a", "b", 1)  # room again once those closed
    assert cluster.run_until(lambda: echo(cluster, "a").pongs == [("b", 1)], WAIT)


def test_an_oversized_frame_closes_the_connection_and_the_node_keeps_working(
    make_cluster: Callable[..., NetCluster], caplog: pytest.LogCaptureFixture
) -> None:
    cluster = make_cluster(["a", "b"])
    huge = b'{"type": "nettest.ping", "n": 1, "body": "' + b"z" * CODEC.max_frame + b'"}'
    conn = cluster.run_async(raw_connection(cluster, "b", [huge]))
    try:
        cluster.run_async(conn.wait_closed())  # b hangs up on us
    finally:
        cluster.run_async(conn.close())
    assert cluster.run_until(lambda: "too_large" in drop_reasons(cluster, "b"), WAIT)
    assert echo(cluster, "b").pings == []
    assert any("too_large" in r.getMessage() for r in caplog.records)
    # a fresh connection is accepted, and the node's own links still work
    conn = cluster.run_async(raw_connection(cluster, "b", [CODEC.encode(Ping(2))]))
    try:
        assert cluster.run_until(lambda: ("mallory", 2) in echo(cluster, "b").pings, WAIT)
    finally:
        cluster.run_async(conn.close())
    ping(cluster, "a", "b", 3)
    assert cluster.run_until(lambda: ("b", 3) in echo(cluster, "a").pongs, WAIT)


def test_protocol_errors_are_dropped_and_bugs_stop_the_node(
    make_cluster: Callable[..., NetCluster], caplog: pytest.LogCaptureFixture
) -> None:
    cluster = make_cluster(["a", "b", "c"])
    cluster.call("a", lambda p: cast(Echo, p).env.send("b", Boom(bug=False)))
    assert cluster.run_until(lambda: "invalid" in drop_reasons(cluster, "b"), WAIT)
    drop = rows(cluster, node="b", event="drop")[0]
    assert drop.layer == "nettest" and drop.peer == "a"
    assert cluster.node("b").state is NodeState.RUNNING

    cluster.call("a", lambda p: cast(Echo, p).env.send("b", Boom(bug=True)))
    with pytest.raises(NetNodeError, match="boom"):
        cluster.run_until(lambda: False, WAIT)
    node_b = cluster.node("b")
    assert isinstance(node_b.failure, RuntimeError)
    assert rows(cluster, node="b", event="crash")
    assert any(r.exc_info and r.name == "gossamer.net" for r in caplog.records)
    cluster.host.failures.clear()  # seen; the rest of the cluster carries on
    assert cluster.run_until(lambda: node_b.state is NodeState.CLOSED, WAIT)
    ping(cluster, "a", "c", 1)
    assert cluster.run_until(lambda: echo(cluster, "a").pongs == [("c", 1)], WAIT)


# -- links: queueing, reconnects, restarts ------------------------------------------------


def test_a_peer_down_at_first_gets_the_queued_messages_and_the_queue_is_bounded(
    make_cluster: Callable[..., NetCluster],
) -> None:
    cluster = make_cluster(["a", "b", "c"], down=["c"], send_queue_limit=3,
                           backoff_factory=lambda: FibonacciBackoff(unit=0.02, cap=0.3))
    ping_many(cluster, "a", "c", range(1, 6))
    assert drop_reasons(cluster, "a") == ["queue_full", "queue_full"]
    assert [r.seq for r in rows(cluster, node="a", event="drop")] == [4, 5]
    assert cluster.node("a").queued("c") == 3
    # the link dials, fails and backs off while c is down
    assert cluster.run_until(lambda: cluster.node("a").connect_failures("c") >= 3, WAIT)
    assert not cluster.node("a").link_connected("c")
    cluster.start_node("c")
    assert cluster.run_until(lambda: len(echo(cluster, "a").pongs) == 3, WAIT)
    assert echo(cluster, "c").pings == [("a", 1), ("a", 2), ("a", 3)]
    assert cluster.node("a").queued("c") == 0


def test_a_restarted_peer_gets_later_messages_and_keeps_committed_state(
    make_cluster: Callable[..., NetCluster],
) -> None:
    cluster = make_cluster(["a", "b", "c"])
    ping(cluster, "a", "b", 1)
    assert cluster.run_until(lambda: echo(cluster, "a").pongs == [("b", 1)], WAIT)
    first = echo(cluster, "b")
    port = cluster.address("b")
    cluster.restart("b")
    second = echo(cluster, "b")
    assert second is not first and first.stopped
    assert cluster.address("b") == port
    store = second.env.store
    assert store.get("echo", "last") == b"1"  # committed before the restart
    assert store.get("echo", "scratch") is None  # not committed: lost like in a crash
    # the old connection is gone; a reconnects (a message in flight at that moment may be
    # lost, which the runtime is allowed to do, so a few tries are fine)
    for n in range(2, 12):
        ping(cluster, "a", "b", n)
        if cluster.run_until(lambda: bool(echo(cluster, "b").pings), 2.0):
            break
    assert echo(cluster, "b").pings and echo(cluster, "b").pings[0][0] == "a"
    ping(cluster, "c", "b", 100)
    assert cluster.run_until(lambda: ("b", 100) in echo(cluster, "c").pongs, WAIT)
    assert [r.node for r in rows(cluster, event="leave", layer="net")] == ["b"]


def test_injected_loss_is_seeded(make_cluster: Callable[..., NetCluster]) -> None:
    cluster = make_cluster(["a", "b"], seed=3, loss=0.5)
    ping_many(cluster, "a", "b", range(40))
    draws = random.Random("3/a/loss")
    expected = [("a", n) for n in range(40) if draws.random() >= 0.5]
    assert 0 < len(expected) < 40
    assert cluster.run_until(lambda: echo(cluster, "b").pings == expected, WAIT)
    assert len(rows(cluster, node="a", event="send", layer="nettest")) == 40


# -- timers --------------------------------------------------------------------------------


def test_timers_fire_in_order_and_cancel_works(make_cluster: Callable[..., NetCluster]) -> None:
    cluster = make_cluster(["a"])
    handles: dict[str, TimerHandle] = {}

    def arm(process: Process) -> None:
        node = cast(Echo, process)
        handles["late"] = node.arm("late", 0.08)
        handles["early"] = node.arm("early", 0.02)
        handles["cancelled"] = node.arm("cancelled", 0.01)
        node.env.cancel(handles["cancelled"])
        node.env.cancel(handles["cancelled"])  # twice is harmless
        with pytest.raises(ConfigError):
            node.env.set_timer(-1.0, lambda: None)

    armed_at = cast(Echo, cluster.process("a")).env.now()
    cluster.call("a", arm)
    assert cluster.run_until(lambda: len(echo(cluster, "a").fired) == 2, WAIT)
    fired = echo(cluster, "a").fired
    assert [name for name, _ in fired] == ["early", "late"]
    # not early, to the loop clock's resolution (uvloop's counts whole milliseconds)
    assert fired[0][1] >= armed_at + 0.02 - CLOCK_STEP
    assert fired[1][1] >= armed_at + 0.08 - CLOCK_STEP
    start = echo(cluster, "a").started_at
    assert start is not None and 0.0 <= start < 5.0


# -- storage -------------------------------------------------------------------------------


def test_sqlite_store_loses_uncommitted_writes_on_close(tmp_path: Path) -> None:
    path = tmp_path / "node.sqlite"
    store = SqliteStore(path)
    store.put("t", "b", b"2")
    store.put("t", "a", b"1")
    store.put("other", "x", b"x")
    store.commit()
    store.put("t", "c", b"3")
    store.delete("t", "a")
    assert store.get("t", "c") == b"3" and store.get("t", "a") is None  # reads see writes
    assert list(store.scan("t")) == [("b", b"2"), ("c", b"3")]
    assert store.uncommitted
    store.close()
    with pytest.raises(StateError):
        store.get("t", "b")
    reopened = SqliteStore(path)
    try:
        assert list(reopened.scan("t")) == [("a", b"1"), ("b", b"2")]
        assert reopened.get("t", "c") is None
        assert list(reopened.scan("other")) == [("x", b"x")]
        reopened.delete("t", "missing")
        reopened.put("t", "a", b"one")
        reopened.commit()
        assert reopened.get("t", "a") == b"one"
    finally:
        reopened.close()


def test_sqlite_store_in_memory_scans_sorted_and_checks_values() -> None:
    store = SqliteStore(":memory:")
    try:
        for key in ("n10", "n02", "Z", "n1", "é"):
            store.put("t", key, key.encode())
        assert [k for k, _ in store.scan("t")] == sorted(["n10", "n02", "Z", "n1", "é"])
        assert list(store.scan("empty")) == []
        with pytest.raises(TypeError):
            store.put("t", "k", "not bytes")  # type: ignore[arg-type]
    finally:
        store.close()
    store.close()  # idempotent


# -- configuration -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "options",
    [
        {"node_id": "has space"},
        {"transport": "udp"},
        {"listen": ("127.0.0.1", 70000)},
        {"listen": "127.0.0.1:0"},
        {"peers": {"b": ("127.0.0.1", -1)}},
        {"loss": 1.5},
        {"send_queue_limit": 0},
        {"max_frame": 0},
        {"seed": "x"},
        {"run": ""},
        {"store": object()},
        {"factory": 3},
        {"codec": None},  # a node with peer links must know their messages
        {"listeners": [ListenerSpec(name="peers", port=0)]},  # the peer listener's name
    ],
)
def test_bad_options_are_refused_at_once(options: dict[str, Any]) -> None:
    settings: dict[str, Any] = {"node_id": "a", "factory": Echo, "codec": CODEC, **options}
    with pytest.raises(ConfigError):
        NetNode(**settings)


# -- shutdown on SIGTERM -------------------------------------------------------------------


class LineReader:
    """Lines of a child's stdout, with a deadline instead of a blocking read."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        self.fd = proc.stdout.fileno()
        self.buffer = b""
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.fd, selectors.EVENT_READ)

    def wait_for(self, prefix: str, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while True:
            while b"\n" in self.buffer:
                line, self.buffer = self.buffer.split(b"\n", 1)
                if line.decode().startswith(prefix):
                    return line.decode()
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not self.selector.select(remaining):
                raise TimeoutError(f"no line starting with {prefix!r} in {timeout}s")
            chunk = os.read(self.fd, 65536)
            if not chunk:
                raise EOFError(f"child exited before printing {prefix!r}")
            self.buffer += chunk

    def close(self) -> None:
        self.selector.close()


@pytest.mark.processes
def test_sigterm_stops_a_host_cleanly_and_closes_its_trace(tmp_path: Path,
                                                           transport: str) -> None:
    errors = tmp_path / "stderr.txt"
    with errors.open("wb") as stderr, subprocess.Popen(
        [sys.executable, str(HERE / "net_sigterm_host.py"), str(tmp_path), transport],
        stdout=subprocess.PIPE, stderr=stderr,
    ) as proc:
        lines = LineReader(proc)
        try:
            port = int(lines.wait_for("PORT ", WAIT).split()[1])
            note = b'{"type": "sigtest.note", "text": "hi"}'

            def hello(challenge: bytes) -> bytes:
                return hello_frame(LOOPBACK_KEY, "tester", 1, parse_challenge(challenge),
                                   "0" * 32)

            if transport == "tcp":
                with socket.create_connection(("127.0.0.1", port), timeout=WAIT) as sock:
                    challenge = sock.makefile("rb").readline().rstrip(b"\n")
                    sock.sendall(hello(challenge) + b"\n" + note + b"\n")
                    lines.wait_for("GOT b tester hi", WAIT)
                    proc.send_signal(signal.SIGTERM)  # with our connection still open
                    assert proc.wait(timeout=WAIT) == 0, errors.read_text()
            else:
                with ws_sync_connect(f"ws://127.0.0.1:{port}/") as ws:
                    ws.send(hello(str(ws.recv()).encode()).decode())
                    ws.send(note.decode())
                    lines.wait_for("GOT b tester hi", WAIT)
                    proc.send_signal(signal.SIGTERM)
                    assert proc.wait(timeout=WAIT) == 0, errors.read_text()
        finally:
            lines.close()
            if proc.poll() is None:
                proc.kill()
    for node in ("a", "b"):
        table = pq.read_table(trace_path(tmp_path, "sigterm", node))
        assert table.schema.equals(SCHEMA), table.schema
        events = table.column("event").to_pylist()
        assert events[0] == "join" and events[-1] == "leave"
        assert "stopped" in events
    b_rows = pq.read_table(trace_path(tmp_path, "sigterm", "b")).to_pylist()
    assert any(r["event"] == "recv" and r["peer"] == "tester" for r in b_rows)


def test_a_node_restarted_within_the_second_without_its_data_gets_a_new_incarnation(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """With nothing saved, the incarnation comes from the clock: a process killed and started
    again within one second once got the same one (whole seconds), so its new messages had its
    old messages' ids and were dropped as duplicates everywhere."""
    from types import SimpleNamespace

    from gossamer.runtimes.net import node as net_node
    from gossamer.runtimes.sim import MemoryStore

    now = [net_node.INCARNATION_EPOCH + 1_000.2]
    monkeypatch.setattr(net_node.time, "time", lambda: now[0])
    first = net_node.NetNode._next_incarnation(SimpleNamespace(store=MemoryStore()))
    now[0] += 0.5  # killed and started again, no data dir, in the same second
    second = net_node.NetNode._next_incarnation(SimpleNamespace(store=MemoryStore()))
    assert second > first
    kept = MemoryStore()
    third = net_node.NetNode._next_incarnation(SimpleNamespace(store=kept))
    assert net_node.NetNode._next_incarnation(SimpleNamespace(store=kept)) == third + 1


def test_reserved_ports_are_never_handed_out_twice() -> None:
    # The kernel may bind a port just closed again; a test reserving twelve addresses once got
    # one of them twice, and a node listed in two Paxos groups (stop 44's CI).
    ports = [reserve_port() for _ in range(300)]
    assert len(set(ports)) == len(ports)
