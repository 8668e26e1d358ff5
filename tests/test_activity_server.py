"""The seed-003 server core on simulated connections (``activity_world``): every message and rule,
bad input, and a deterministic multi-server network with crashes, silence and registrations."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest

from activity_world import MemClient, MemNet
from gossamer.core.trace import TraceRow
from gossamer.protocols.activity import (
    PROTOCOL,
    Authenticate,
    AuthenticationFail,
    InvalidMessageReply,
    LockAllowed,
    LockDenied,
    LockRequest,
    LoginFailed,
    LoginSuccess,
    Redirect,
    RegisterFailed,
    RegisterSuccess,
    ServerAnnounce,
    ServerInfo,
    TreeState,
    verify_secret,
)

SECRET = "network-secret"


def settle(net: MemNet, seconds: float = 0.5) -> None:
    net.run_for(seconds)


def one_server(**options: Any) -> tuple[MemNet, MemClient]:
    net = MemNet(seed=1)
    net.add_server("s1", **options)
    client = MemClient(net, "c1")
    client.connect("s1")
    return net, client


def types(client: MemClient) -> list[str]:
    return [m.TYPE for m in client.received]


# -- clients: login, register, activity ----------------------------------------------------


def test_anonymous_login_and_logout() -> None:
    net, client = one_server()
    client.login()
    settle(net)
    assert client.received == [LoginSuccess(info="logged in as user anonymous")]
    assert net.servers["s1"].load == 1
    client.send(b'{"command":"LOGOUT"}')
    settle(net)
    assert client.is_closed and net.servers["s1"].load == 0


def test_login_unknown_user_fails_and_closes() -> None:
    net, client = one_server()
    client.login("bob", "pw")
    settle(net)
    assert types(client) == ["LOGIN_FAILED"] and client.is_closed


def test_register_then_login_and_wrong_secret() -> None:
    net, client = one_server()
    client.register("aaron", "pw")
    settle(net)
    assert client.received == [RegisterSuccess(info="register success for aaron")]
    client.login("aaron", "pw")
    settle(net)
    assert client.last() == LoginSuccess(info="logged in as user aaron")
    other = MemClient(net, "c2")
    other.connect("s1")
    other.login("aaron", "wrong")
    settle(net)
    assert other.received == [LoginFailed(info="attempt to login with wrong secret")]
    assert other.is_closed


def test_secrets_are_hashed_at_rest() -> None:
    net, client = one_server()
    client.register("aaron", "pw")
    settle(net)
    record = net.servers["s1"].users.record("aaron")
    assert record is not None and "pw" not in record.split("$")
    assert verify_secret("pw", record) and not verify_secret("px", record)
    raw = b"".join(v for _, v in net.stores["s1"].scan("activity.users"))
    assert b'"pw"' not in raw


def test_register_twice_fails() -> None:
    net, client = one_server()
    client.register("aaron", "pw")
    settle(net)
    again = MemClient(net, "c2")
    again.connect("s1")
    again.register("aaron", "other")
    settle(net)
    assert again.received == [
        RegisterFailed(info="aaron is already registered with the system")]
    assert again.is_closed


def test_register_after_login_is_invalid() -> None:
    net, client = one_server()
    client.login()
    client.register("aaron", "pw")
    settle(net)
    assert client.last() == InvalidMessageReply(
        info="REGISTER received from a client that has already logged in")
    assert client.is_closed


def test_activity_before_login_is_refused() -> None:
    net, client = one_server()
    client.send(b'{"command":"ACTIVITY_MESSAGE","username":"anonymous","activity":{}}')
    settle(net)
    assert client.received == [AuthenticationFail(info="the user has not logged in")]
    assert client.is_closed


@pytest.mark.parametrize(("line", "info"), [
    (b'{"command":"ACTIVITY_MESSAGE","username":"eve","secret":"pw","activity":{}}',
     "username eve does not match the logged in user"),
    (b'{"command":"ACTIVITY_MESSAGE","username":"aaron","secret":"px","activity":{}}',
     "the secret does not match the logged in user"),
    (b'{"command":"ACTIVITY_MESSAGE","username":"aaron","activity":{}}',
     "the secret does not match the logged in user"),
])
def test_activity_with_wrong_credentials(line: bytes, info: str) -> None:
    net, client = one_server()
    client.register("aaron", "pw")
    client.login("aaron", "pw")
    settle(net)
    client.send(line)
    settle(net)
    assert client.last() == AuthenticationFail(info=info) and client.is_closed


def test_activity_is_processed_and_broadcast_to_other_clients() -> None:
    net, alice = one_server()
    bob = MemClient(net, "bob")
    bob.connect("s1")
    alice.register("alice", "pw")
    settle(net)
    alice.login("alice", "pw")
    bob.login()
    settle(net)
    alice.publish({"verb": "post", "n": 1})
    settle(net)
    origin = f"s1.{alice.server_conn_id()}"
    assert bob.activities == [{"verb": "post", "n": 1, "authenticated_user": "alice",
                               "_origin": origin, "_seq": 1, "_via": "s1/1", "_n": 1}]
    assert alice.activities == []  # "all other clients"
    rows = net.sink.named()
    publish = [r for r in rows if r.event == "publish"]
    deliver = [r for r in rows if r.event == "deliver"]
    assert [(r.node, r.origin, r.seq, r.msg) for r in publish] == [
        ("s1", origin, 1, f"{origin}#1")]
    assert [(r.node, r.origin, r.seq, r.msg) for r in deliver] == [
        ("bob", origin, 1, f"{origin}#1")]


@pytest.mark.parametrize(("line", "info"), [
    (b"{oops", "JSON parse error while parsing message"),
    (b'{"username":"x"}', "the received message did not contain a command"),
    (b'{"command":"DANCE"}', "unknown command 'DANCE'"),
    (b'{"command":"LOGIN","username":"bob"}',
     "LOGIN: a secret must be given for a username other than anonymous"),
    (b'{"command":"LOGIN_SUCCESS","info":"x"}', "unexpected LOGIN_SUCCESS from a client"),
])
def test_bad_input_gets_invalid_message_and_close(line: bytes, info: str) -> None:
    net, client = one_server()
    client.send(line)
    settle(net)
    assert client.received == [InvalidMessageReply(info=info)] and client.is_closed
    assert net.servers["s1"].roles == {}


def test_line_limit_and_connection_limit() -> None:
    net, client = one_server(max_line=200, max_connections=2)
    client.send(b'{"command":"LOGIN","username":"anonymous","pad":"' + b"x" * 300 + b'"}')
    settle(net)
    assert isinstance(client.last(), InvalidMessageReply) and client.is_closed
    c2, c3, c4 = (MemClient(net, f"c{i}") for i in (2, 3, 4))
    for c in (c2, c3, c4):
        c.connect("s1")
    settle(net)
    # over the listener's limit (whichever came third): closed by the runtime, unheard of by
    # the server
    refused = [c for c in (c2, c3, c4) if c.is_closed]
    assert len(refused) == 1 and refused[0].received == []
    assert net.servers["s1"].roles and len(net.servers["s1"].roles) == 2
    drops = [r for r in net.sink.named() if r.node == "s1" and r.event == "drop"]
    assert any(r.info is not None and '"full"' in r.info for r in drops)


# -- servers: authentication ---------------------------------------------------------------


@pytest.mark.parametrize("line", [
    b'{"command":"SERVER_ANNOUNCE","id":"x","load":0,"hostname":"h","port":1,"level":0}',
    b'{"command":"ACTIVITY_BROADCAST","activity":{}}',
    b'{"command":"LOCK_REQUEST","username":"u","secret":"s"}',
    b'{"command":"LOCK_ALLOWED","username":"u","secret":"s"}',
    b'{"command":"LOCK_DENIED","username":"u","secret":"s"}',
])
def test_server_messages_before_authenticate_are_refused(line: bytes) -> None:
    net, peer = one_server()
    peer.send(line)
    settle(net)
    assert len(peer.received) == 1 and isinstance(peer.last(), InvalidMessageReply)
    assert "unauthenticated server" in peer.last().info  # type: ignore[attr-defined]
    assert peer.is_closed


def test_authenticate_wrong_secret_and_twice() -> None:
    net, peer = one_server()
    peer.send(Authenticate(secret="nope"))
    settle(net)
    assert peer.received == [AuthenticationFail(info="the supplied secret is incorrect: nope")]
    assert peer.is_closed
    good = MemClient(net, "p2")
    good.connect("s1")
    good.send(Authenticate(secret=SECRET, protocol=PROTOCOL))
    settle(net)
    assert good.received == [ServerInfo(id="s1", level=0, users=[], received={})]
    good.send(Authenticate(secret=SECRET, protocol=PROTOCOL))
    settle(net)
    assert good.last() == InvalidMessageReply(
        info="AUTHENTICATE received on an already authenticated connection")
    assert good.is_closed


def test_server_info_carries_hashed_users_and_lock_protocol_by_hand() -> None:
    net, client = one_server()
    client.register("aaron", "pw")
    settle(net)
    peer = MemClient(net, "p")
    peer.connect("s1")
    peer.send(Authenticate(secret=SECRET, protocol=PROTOCOL))
    settle(net)
    info = peer.last()
    assert isinstance(info, ServerInfo) and info.level == 0
    (entry,) = info.users
    name, record = entry.split(":", 1)
    assert name == "aaron" and verify_secret("pw", record)
    # a LOCK_REQUEST for a known name is denied at once; a new one is allowed (no other links)
    peer.send(LockRequest(username="aaron", secret="x", id="p:1"))
    peer.send(LockRequest(username="zoe", secret="x", id="p:2"))
    settle(net)
    assert [m.TYPE for m in peer.received[-2:]] == ["LOCK_DENIED", "LOCK_ALLOWED"]
    assert "zoe" in net.servers["s1"].users
    peer.send(b'{"command":"LOCK_CANCEL","username":"zoe","secret":"x","id":"p:2"}')
    settle(net)
    assert "zoe" not in net.servers["s1"].users and "aaron" in net.servers["s1"].users


def test_a_reference_servers_lock_request_without_secret_is_accepted() -> None:
    """The reference implementation's servers send LOCK_REQUEST without ``secret`` (and a
    legacy AUTHENTICATE without ``protocol``): the name is taken here, answered LOCK_ALLOWED
    in the same shape, and no secret logs in with it (we never learnt it)."""
    net, client = one_server()
    peer = MemClient(net, "ref")
    peer.connect("s1")
    peer.send(b'{"command":"AUTHENTICATE","secret":"' + SECRET.encode() + b'"}')
    peer.send(b'{"command":"LOCK_REQUEST","username":"bob"}')
    settle(net)
    assert not peer.is_closed
    assert peer.received[-1] == LockAllowed(username="bob")
    assert b'"secret"' not in net.servers["s1"].codec.encode(peer.received[-1])
    client.register("bob", "pw")
    settle(net)
    assert isinstance(client.last(), RegisterFailed)
    late = MemClient(net, "late")
    late.connect("s1")
    late.login("bob", "!")
    settle(net)
    assert isinstance(late.last(), LoginFailed)
    # a second request for the taken name is denied
    peer.send(b'{"command":"LOCK_REQUEST","username":"bob"}')
    settle(net)
    assert peer.received[-1] == LockDenied(username="bob")


# -- the tree ------------------------------------------------------------------------------


def tree(seed: int = 1, server: dict[str, Any] | None = None, **kwargs: Any) -> MemNet:
    """s1 root; s2, s3 children of s1; s4 child of s2 (``server``: ServerConfig options)."""
    net = MemNet(seed=seed, **kwargs)
    options = server or {}
    net.add_server("s1", **options)
    net.add_server("s2", parent="s1", **options)
    net.add_server("s3", parent="s1", **options)
    net.run_for(0.2)
    net.add_server("s4", parent="s2", **options)
    net.run_for(3.0)
    return net


def test_tree_levels_and_announcements() -> None:
    net = tree()
    levels = {sid: s.level for sid, s in net.servers.items()}
    assert levels == {"s1": 0, "s2": 1, "s3": 1, "s4": 2}
    assert all(s.state in (TreeState.ATTACHED, TreeState.ROOT) for s in net.servers.values())
    assert set(net.servers["s4"].known) == {"s1", "s2", "s3"}
    assert net.servers["s4"].known["s3"].level == 1


def test_redirect_after_login_when_another_server_has_2_less() -> None:
    net = tree(server={"load_announce_gap": 0})  # loads announced on the interval only
    clients = [MemClient(net, f"c{i}") for i in range(8)]
    for c in clients:
        c.connect("s1")
        c.login()
        net.run_for(0.05)
    net.run_for(2.5)  # announcements spread the loads
    late = MemClient(net, "late", follow_redirects=False)
    late.connect("s1")
    late.login()
    settle(net)
    assert types(late)[0] == "LOGIN_SUCCESS"
    redirect = late.received[1]
    assert isinstance(redirect, Redirect) and redirect.hostname in net.servers and late.is_closed
    assert sum(c.redirects for c in clients) > 0
    loads = [s.load for s in net.servers.values()]
    assert max(loads) - min(loads) <= 3


def deliveries_by_client(net: MemNet) -> dict[str, list[tuple[str, int]]]:
    out: dict[str, list[tuple[str, int]]] = defaultdict(list)
    for row in net.sink.named():
        if row.event == "deliver":
            assert row.origin is not None and row.seq is not None
            out[row.node].append((row.origin, row.seq))
    return out


def check_fifo(delivered: list[tuple[str, int]]) -> None:
    last: dict[str, int] = {}
    for origin, seq in delivered:
        assert seq > last.get(origin, 0), f"{origin}#{seq} after #{last.get(origin)}"
        last[origin] = seq


def clients_everywhere(net: MemNet, per_server: int = 2) -> list[MemClient]:
    clients = []
    for sid in sorted(net.servers):
        for i in range(per_server):
            c = MemClient(net, f"{sid}-c{i}", follow_redirects=False)
            c.connect(sid)
            c.login()
            clients.append(c)
    net.run_for(0.5)
    assert all(isinstance(c.received[0], LoginSuccess) for c in clients)
    return [c for c in clients if c.connected]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_every_activity_reaches_every_client_in_fifo_order(seed: int) -> None:
    net = tree(seed=seed, latency=(0.001, 0.05))
    clients = clients_everywhere(net)
    for round_ in range(5):
        for c in clients:
            c.publish({"round": round_})
        net.run_for(0.01)
    net.run_for(2.0)
    published = [r for r in net.sink.named() if r.event == "publish"]
    assert len(published) == 5 * len(clients)
    got = deliveries_by_client(net)
    for c in clients:
        expected = {(r.origin, r.seq) for r in published if r.peer != c.server_conn_id()}
        assert set(got[c.name]) == expected
        assert len(got[c.name]) == len(expected)
        check_fifo(got[c.name])


def test_same_seed_same_trace() -> None:
    def run(seed: int) -> list[TraceRow]:
        net = tree(seed=seed, latency=(0.001, 0.05))
        for c in clients_everywhere(net):
            c.publish({"x": 1})
        net.run_for(1.0)
        return net.sink.named()

    assert run(7) == run(7)
    assert run(7) != run(8)


@pytest.mark.parametrize("seed", range(6))
def test_concurrent_registrations_register_a_name_at_most_once(seed: int) -> None:
    net = tree(seed=seed, latency=(0.001, 0.05))
    contenders = []
    for sid in ("s1", "s2", "s3", "s4"):
        c = MemClient(net, f"reg-{sid}")
        c.connect(sid)
        c.register("shared", f"secret-{sid}")
        contenders.append(c)
    net.run_for(2.0)
    outcomes = [c.received[0].TYPE for c in contenders]
    assert outcomes.count("REGISTER_SUCCESS") <= 1
    assert set(outcomes) <= {"REGISTER_SUCCESS", "REGISTER_FAILED"}
    winners = [c for c in contenders if c.received[0].TYPE == "REGISTER_SUCCESS"]
    records = {sid: s.users.record("shared") for sid, s in net.servers.items()}
    if winners:
        secret = f"secret-{winners[0].name.removeprefix('reg-')}"
        assert all(r is not None and verify_secret(secret, r) for r in records.values())
    else:
        assert all(r is None for r in records.values()), records
    # identical concurrent registrations (same name and secret on two servers) are told apart
    twins = [MemClient(net, f"twin{i}") for i in range(2)]
    twins[0].connect("s3")
    twins[1].connect("s4")
    for t in twins:
        t.register("twin", "same")
    net.run_for(2.0)
    assert [t.received[0].TYPE for t in twins].count("REGISTER_SUCCESS") <= 1


def test_sequential_registration_is_known_everywhere() -> None:
    net = tree()
    c = MemClient(net, "r")
    c.connect("s4")
    c.register("aaron", "pw")
    net.run_for(1.0)
    assert c.received == [RegisterSuccess(info="register success for aaron")]
    assert all(s.users.verify("aaron", "pw") for s in net.servers.values())
    for sid in ("s1", "s3"):
        again = MemClient(net, f"again-{sid}")
        again.connect(sid)
        again.register("aaron", "x")
        net.run_for(1.0)
        assert again.received[0].TYPE == "REGISTER_FAILED"
    # a server joining later gets the users in SERVER_INFO
    net.add_server("s5", parent="s3")
    net.run_for(1.0)
    assert net.servers["s5"].users.verify("aaron", "pw")


def test_parent_crash_children_reconnect_and_activities_flow_again() -> None:
    net = tree()
    net.crash("s2")
    net.run_for(3.0)
    s4 = net.servers["s4"]
    # the seed's order: the highest level below its own, then the lowest id (s2 is gone)
    assert s4.state is TreeState.ATTACHED and s4.parent_id == "s3" and s4.level == 2
    clients = clients_everywhere(net, per_server=1)
    for c in clients:
        c.publish({"after": "crash"})
    net.run_for(1.0)
    got = deliveries_by_client(net)
    assert all(len(got[c.name]) == len(clients) - 1 for c in clients)
    # s2 rejoins under s1 with its store (registered users survive the crash)
    net.add_server("s2", parent="s1")
    net.run_for(2.0)
    assert net.servers["s2"].state is TreeState.ATTACHED and net.servers["s2"].level == 1


def test_root_crash_lowest_id_becomes_root() -> None:
    net = tree()
    net.crash("s1")
    net.run_for(5.0)
    assert net.servers["s2"].state is TreeState.ROOT and net.servers["s2"].level == 0
    s3 = net.servers["s3"]
    assert s3.state is TreeState.ATTACHED and s3.parent_id == "s2" and s3.level == 1
    assert net.servers["s4"].level == 1  # levels follow the move of its parent
    clients = clients_everywhere(net, per_server=1)
    for c in clients:
        c.publish({"x": 1})
    net.run_for(1.0)
    got = deliveries_by_client(net)
    assert all(len(got[c.name]) == len(clients) - 1 for c in clients)


def test_silent_parent_is_detected_and_the_gap_is_resent_both_ways() -> None:
    net = tree()
    clients = {c.name: c for c in clients_everywhere(net, per_server=1)}
    clients["s1-c0"].publish({"before": "blackhole"})
    net.run_for(0.5)
    net.blackhole("s2", "s4")  # only the network between s2 and s4 fails: no close at all
    # written into the dead link (lost), and sent while s4 has no parent
    clients["s1-c0"].publish({"during": "blackhole"})
    s4 = net.servers["s4"]
    while s4.state is not TreeState.RECONNECTING:
        net.run_for(0.001)
        assert net.now < 10, "the silent parent was never detected"
    assert net.now - 3.7 <= 4.0  # within the configured 3 missed announcements (+1 tick)
    clients["s4-c0"].publish({"during": "reconnect"})
    clients["s4-c0"].publish({"during": "reconnect", "n": 2})
    net.run_for(3.0)
    assert s4.parent_id == "s3" and s4.state is TreeState.ATTACHED
    got = deliveries_by_client(net)
    from_s4 = f"s4.{clients['s4-c0'].server_conn_id()}"
    for name in ("s1-c0", "s2-c0", "s3-c0"):
        assert [d for d in got[name] if d[0] == from_s4] == [(from_s4, 1), (from_s4, 2)], name
    # what s1 sent into the blackhole reached s4's side from s3, exactly once, in order
    from_s1 = f"s1.{clients['s1-c0'].server_conn_id()}"
    assert [d for d in got["s4-c0"] if d[0] == from_s1] == [(from_s1, 1), (from_s1, 2)]
    resent = [r for r in net.sink.named() if r.event == "resend" and r.info is not None]
    assert any(r.node == "s4" and '"count":2' in r.info for r in resent), resent
    assert any(r.node == "s3" and '"count":1' in r.info for r in resent), resent
    # the parent side noticed too: a hung child would hold registrations waiting for it
    assert any(r.node == "s2" and r.event == "child_silent" for r in net.sink.named())
    assert not [c for c in net.servers["s2"].server_conns() if c.remote.startswith("s4:")]


def test_max_depth_redirects_a_joining_server() -> None:
    net = MemNet(seed=1, max_depth=1)
    net.add_server("s1")
    net.add_server("s2", parent="s1")
    net.run_for(2.5)
    net.add_server("s3", parent="s2")  # level 2 would be too deep: s2 redirects it to s1
    net.run_for(2.0)
    assert net.servers["s3"].parent_id == "s1" and net.servers["s3"].level == 1


def test_announce_from_unknown_server_relayed() -> None:
    net = tree()
    peer = MemClient(net, "fake")
    peer.connect("s4")
    peer.send(Authenticate(secret=SECRET, protocol=PROTOCOL))
    peer.send(ServerAnnounce(id="zz", load=0, hostname="nowhere", port=9, level=3))
    net.run_for(1.5)
    assert "zz" in net.servers["s1"].known and "zz" in net.servers["s3"].known
    assert {m.id for m in peer.received if isinstance(m, ServerAnnounce)} == {
        "s1", "s2", "s3", "s4"}


def test_a_burst_of_logins_between_announcements_is_spread_without_bouncing() -> None:
    """40 logins at the root, 10 ms apart, faster than the 1 s announcement interval: a server
    counts each redirected client on its target until the target announces, and announces its
    own load early when it changes, so the burst spreads and no client gives up bouncing."""
    # loads announced early, at most every 10 ms: about the link latency and the login spacing
    net = tree(server={"load_announce_gap": 0.01})
    clients = [MemClient(net, f"b{i}") for i in range(40)]
    for c in clients:
        c.connect("s1")
        c.login()
        net.run_for(0.01)  # announcements come every second: all of these see stale loads
    settle(net)
    redirects = [c.redirects for c in clients]
    assert max(redirects) < 10 and sum(redirects) <= 80, redirects  # without: some give up
    loads = [s.load for s in net.servers.values()]
    assert sum(loads) == 40 and max(loads) - min(loads) <= 3, loads


def test_a_server_with_the_wrong_secret_gives_up_after_join_attempts() -> None:
    """A server pointed at a network with another secret is refused (AUTHENTICATION_FAIL) each
    time it tries; after ``join_attempts`` refusals it stops and says why, instead of retrying
    for ever, and the network it tried to join is unchanged."""
    net = MemNet(seed=3)
    net.add_server("s1")
    failures: list[str] = []
    bad = net.add_server("s2", parent="s1", secret="not-the-secret", join_attempts=3)
    bad.on_failure = failures.append
    net.run_for(30.0)
    assert bad.failure is not None and "refused this network's secret 3 times" in bad.failure
    assert failures == [bad.failure]
    assert not bad.running
    refusals = [r for r in net.sink.named() if r.node == "s2" and r.event == "auth_refused"]
    assert len(refusals) == 3
    assert "s2" not in net.servers["s1"].known
    net.add_server("s3", parent="s1")  # the right secret still joins
    net.run_for(2.0)
    assert net.servers["s3"].parent_id == "s1"


def test_a_server_that_cannot_reach_its_remote_says_so_at_each_retry() -> None:
    """Joining a remote that does not answer is retried, and each retry is told to the
    service (which logs the first and every tenth), not done in silence."""
    net = MemNet(seed=1)
    server = net.add_server("s2", parent="nowhere")  # no such server: every dial is refused
    retries: list[tuple[str, int, int]] = []
    server.on_join_retry = lambda host, port, attempts: retries.append((host, port, attempts))
    settle(net, 3 * net.announce_interval + 0.5)
    assert server.state is TreeState.JOINING
    assert len(retries) >= 3 and [r[2] for r in retries] == list(range(1, len(retries) + 1))
    assert {r[:2] for r in retries} == {("nowhere", server.config.port)}
