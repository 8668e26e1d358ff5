"""Seed 002: the APSYN sync server's processing per round with N peers in one session, each
sending every round a request that changes one property of its own C object and its property
of one shared G object (the issue's 1,000-peer target: under the 50 ms round time).

    .venv/bin/python benchmarks/appsync_rounds.py                 # 100, 300, 1000 peers
    .venv/bin/python benchmarks/appsync_rounds.py --quick         # 50 peers, few rounds
    .venv/bin/python benchmarks/appsync_rounds.py --json          # figures as JSON, last line

The server is the unchanged ``AppSyncServer`` on ``FakeEnv`` (no sockets, no simulator), in
a process with a server's collector and allocator policies (``tune_gc``, ``tune_malloc``): a
round's processing is what ``_end_round`` costs (decoding the requests is timed too: every
peer's rqst frame is fed through ``received``), measured with ``time.process_time`` and
reported as median and max ms per round beside the 50 ms round. The ratio printed is the round
time over the median (above 1: the server keeps up).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

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
    Sync,
    Update,
)
from gossamer.protocols.appsync.server import AppSyncConfig, AppSyncServer
from gossamer.runtimes.net.gcpolicy import tune_gc
from gossamer.runtimes.net.mallocpolicy import tune_malloc
from gossamer.testing import FakeConn, FakeEnv

ROUND_MS = 50
codec = AppSyncCodec(max_frame=16 * 1024 * 1024)  # what a peer reads: whole syncs


def measure(peers: int, rounds: int) -> dict[str, Any]:
    env = FakeEnv("ctrl", tracing=False)
    server = AppSyncServer(env, AppSyncConfig(min_ms=ROUND_MS, max_ms=ROUND_MS,
                                              max_peers=max(peers, 1), tout=1000))
    server.start()
    conns: list[FakeConn] = []
    for _ in range(peers):
        conn = env.accept()
        server.opened(conn, conn.remote)
        server.received(conn, codec.encode(Join(header=Header("", 0, 0), id="bench")))
        conns.append(conn)
    env.run_due()
    env.advance(ROUND_MS / 1000)  # the first join's round ends: the others get their inits
    ids: dict[object, str] = {}
    current = 0
    for written_to, frame in env.take_written():
        msg = codec.decode_from_server(frame)
        ids[written_to] = msg.header.client_id
        current = max(current, msg.header.last if isinstance(msg, Init) else msg.header.round)
    board = ObjectInfo(Scope.GLOBAL, "board")
    per_round: list[float] = []
    for number in range(rounds + 1):
        frames = []
        for conn in conns:
            cid = ids[conn]
            mine = ObjectInfo(Scope.CLIENT, "me", cid)
            if number == 0:
                actions: tuple[Any, ...] = (Create(mine, Mode.RO, {"n": 0}),)
                if conn is conns[0]:
                    actions += (Create(board, Mode.RW, {}),)
            else:
                actions = (Update(ObjectInfo(Scope.CLIENT, "me.n", cid), number),
                           Update(ObjectInfo(Scope.GLOBAL, f"board.p{cid}"), number))
            frames.append((conn, codec.encode(Rqst(header=Header(cid, current, current),
                                                    actions=actions))))
        start = time.process_time()
        for conn, frame in frames:
            server.received(conn, frame)
        env.advance(ROUND_MS / 1000)  # the min time: the round ends (all answered)
        elapsed = time.process_time() - start
        written = env.take_written()
        sync = codec.decode_from_server(written[0][1])
        assert isinstance(sync, Sync)
        current = sync.header.round
        if number > 0:  # round 0 creates the objects
            per_round.append(elapsed * 1000)
    median = statistics.median(per_round)
    return {"peers": peers, "rounds": rounds, "median_ms": round(median, 2),
            "max_ms": round(max(per_round), 2), "round_ms": ROUND_MS,
            "headroom": round(ROUND_MS / median, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--peers", type=int, nargs="+", default=None)
    parser.add_argument("--rounds", type=int, default=None)
    args = parser.parse_args()
    # the collector's and the allocator's policy of a server process (the network runtime
    # sets them when its first node starts): without the allocator's, each round's freed
    # syncs are given back to the kernel and the next round faults their pages in again
    tune_gc()
    tune_malloc()
    sizes, rounds = ((50,), 5) if args.quick else ((100, 300, 1000), 10)
    sizes = tuple(args.peers) if args.peers else sizes
    rounds = args.rounds or rounds
    results = []
    for n in sizes:
        r = measure(n, rounds)
        results.append(r)
        print(f"{r['peers']:>5} peers: {r['median_ms']:8.2f} ms per round (max "
              f"{r['max_ms']:.2f}), round time {r['round_ms']} ms: headroom "
              f"{r['headroom']:.2f}x", flush=True)
    if args.json:
        print(json.dumps(results))


if __name__ == "__main__":
    main()
