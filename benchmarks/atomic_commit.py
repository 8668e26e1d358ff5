"""The cost of atomicity: commits/s and commit latency of ``AtomicGroup`` on loopback multicast,
beside plain SRM delivery of the same messages to the same number of members, measured in the
same run, with the ratios atomic/SRM.

Every member is a real ``MulticastEnv`` on a loopback IP multicast group (UDP, HMAC-tagged
datagrams), all in one process and one event loop. One member sends ``--messages`` messages of
about 100 bytes with at most ``--inflight`` undecided at a time.

- **atomic**: ``AtomicGroup`` members, each with its own sqlite store in a temp dir
  (``synchronous=FULL``: each commit is an fsync, as in a deployment). The latency of a message
  is from ``send`` to its ``Sent`` (committed); every member writes the data and votes, the
  sender writes the outcome. A message that aborts is counted, not timed.
- **SRM**: the same number of members running only SRM (no votes, no store: the sequence in
  memory). The latency of a message is from the multicast to its delivery by the last of the
  other members (what the atomic sender waits for before it can decide, minus the votes).

Run ``python benchmarks/atomic_commit.py [--quick] [--sizes 5,20] [--messages N]
[--inflight K] [--period S] [--dir DIR] [--json OUT]``. ``--quick``: 5 members, 30 messages.
One process hosts every member, so they share one core and their fsyncs queue on one loop:
this measures the protocols' cost per message on one machine, not a deployment's throughput.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import socket
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from gossamer.core.env import Env
from gossamer.core.ids import NodeId
from gossamer.core.messages import Message
from gossamer.protocols.dissemination.srm import CODEC as SRM_CODEC
from gossamer.protocols.dissemination.srm import Srm, SrmConfig
from gossamer.runtimes.net import MulticastEnv, resolve_group_key
from gossamer.runtimes.sim import MemoryStore
from gossamer.services.atomic.api import AtomicGroup

MODES = ("SRM", "atomic")
BODY = "x" * 100


def _group() -> str:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"239.255.{random.randrange(1, 255)}.{random.randrange(1, 255)}:{port}"


async def _until(condition: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    try:
        async with asyncio.timeout(timeout):
            while not condition():
                await asyncio.sleep(0.02)
    except TimeoutError:
        raise RuntimeError(f"{what}: not within {timeout} s") from None


def _summary(mode: str, members: int, latencies: list[float], elapsed: float,
             aborted: int) -> dict[str, Any]:
    """Throughput and latency of what completed (committed, for atomic); with nothing
    completed, the percentiles are None (printed as ``-``) and so are the ratios."""
    latencies.sort()
    row: dict[str, Any] = {"mode": mode, "members": members,
                           "messages": len(latencies) + aborted, "aborted": aborted,
                           "per_s": len(latencies) / elapsed, "p50_ms": None, "p99_ms": None}
    if latencies:
        row["p50_ms"] = 1000 * latencies[len(latencies) // 2]
        row["p99_ms"] = 1000 * latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]
    return row


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if not a or not b else a / b


def _fmt(value: float | None, spec: str, suffix: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{suffix}"


async def atomic_run(members: int, messages: int, inflight: int, period: float,
                     base: Path) -> dict[str, Any]:
    address = _group()
    groups = [AtomicGroup(address, data_dir=base / f"m{i:02d}", session_period=period)
              for i in range(members)]
    readers: list[asyncio.Task[int]] = []
    try:
        for group in groups:
            await group.join()
            readers.append(asyncio.create_task(_drain(group)))  # delivered messages are read
        await _until(lambda: all(len(g.members()) == members for g in groups),
                     f"atomic, {members} members: every member sees the whole group")
        sender = groups[0]
        latencies: list[float] = []
        aborted = 0
        gate = asyncio.Semaphore(inflight)

        async def one(i: int) -> None:
            nonlocal aborted
            async with gate:
                began = time.perf_counter()
                sent = await sender.send({"i": i, "body": BODY}, timeout=120.0)
                if sent.committed:
                    latencies.append(time.perf_counter() - began)
                else:
                    aborted += 1

        began = time.perf_counter()
        await asyncio.gather(*(one(i) for i in range(messages)))
        elapsed = time.perf_counter() - began
    finally:
        for task in readers:
            task.cancel()
        for group in reversed(groups):
            await group.leave()
    return _summary("atomic", members, latencies, elapsed, aborted)


async def _drain(group: AtomicGroup) -> int:
    """Read every delivery as an application would (the group's queue is bounded and a reader
    that falls behind is dropped); returns how many it read once cancelled."""
    delivered = 0
    try:
        async for _ in group:
            delivered += 1
    except asyncio.CancelledError:
        return delivered
    return delivered


class _SrmMember:
    """A member running SRM alone: it hands every delivered item to ``on_item``."""

    def __init__(self, env: Env, group: str, period: float,
                 on_item: Callable[[NodeId, Any], None]) -> None:
        self.env = env
        self.srm = Srm(env, SrmConfig(group=group, session_period=period))
        self.srm.on_deliver = lambda source, seq, payload: on_item(env.node, payload)

    def start(self) -> None:
        self.srm.start()

    def stop(self) -> None:
        self.srm.stop()

    def on_message(self, src: NodeId, msg: Message) -> None:
        if not self.srm.on_message(src, msg):
            self.env.trace("drop", layer="srm", peer=src, reason="unknown_type")


async def srm_run(members: int, messages: int, inflight: int,
                  period: float) -> dict[str, Any]:
    host, _, port = _group().rpartition(":")
    key = resolve_group_key(None, "127.0.0.1")
    waiting: dict[int, tuple[float, set[NodeId], asyncio.Future[float]]] = {}

    def on_item(node: NodeId, payload: Any) -> None:
        entry = waiting.get(payload["i"])
        if entry is None:
            return
        began, missing, done = entry
        missing.discard(node)
        if not missing and not done.done():
            done.set_result(time.perf_counter() - began)

    envs = [MulticastEnv(f"s{i:02d}", group=(host, int(port)), key=key, codec=SRM_CODEC,
                         store=MemoryStore()) for i in range(members)]
    nodes: list[_SrmMember] = []

    def build(env: MulticastEnv) -> _SrmMember:
        nodes.append(_SrmMember(env, env.group_name, period, on_item))
        return nodes[-1]

    try:
        for env in envs:
            await env.open(build)
        await _until(lambda: all(len(n.srm.members_heard()) == members - 1 for n in nodes),
                     f"SRM, {members} members: every member hears every other")
        sender, others = nodes[0], {env.node for env in envs[1:]}
        latencies: list[float] = []
        gate = asyncio.Semaphore(inflight)
        loop = asyncio.get_running_loop()

        async def one(i: int) -> None:
            async with gate:
                done: asyncio.Future[float] = loop.create_future()
                waiting[i] = (time.perf_counter(), set(others), done)
                sender.srm.multicast({"i": i, "body": BODY})
                latencies.append(await asyncio.wait_for(done, 120.0))
                del waiting[i]

        began = time.perf_counter()
        await asyncio.gather(*(one(i) for i in range(messages)))
        elapsed = time.perf_counter() - began
    finally:
        for env in reversed(envs):
            env.close_group()
        await asyncio.sleep(0)  # the transports finish closing on the next loop turn
    return _summary("SRM", members, latencies, elapsed, 0)


def run(*, quick: bool = False, sizes: Sequence[int] | None = None,
        messages: int | None = None, inflight: int = 10, period: float = 1.0,
        directory: str | None = None,
        progress: Callable[[str], None] = lambda line: None) -> dict[str, Any]:
    sizes = list(sizes) if sizes is not None else ([5] if quick else [5, 20])
    count = messages if messages is not None else (30 if quick else 300)
    rows: list[dict[str, Any]] = []
    ratios: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(dir=directory) as tmp:
        for members in sizes:
            progress(f"SRM, {members} members, {count} messages ...")
            srm = asyncio.run(srm_run(members, count, inflight, period))
            progress(f"atomic, {members} members, {count} messages, fsync on ...")
            atomic = asyncio.run(atomic_run(members, count, inflight, period,
                                            Path(tmp) / str(members)))
            rows += [srm, atomic]
            ratios.append({"members": members,
                           "throughput": _ratio(atomic["per_s"], srm["per_s"]),
                           "p50": _ratio(atomic["p50_ms"], srm["p50_ms"]),
                           "p99": _ratio(atomic["p99_ms"], srm["p99_ms"])})
    return {"messages": count, "inflight": inflight, "session_period": period,
            "rows": rows, "ratios": ratios, "load": list(os.getloadavg())}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="5 members, 30 messages")
    parser.add_argument("--sizes", default=None, help="group sizes, comma-separated (5,20)")
    parser.add_argument("--messages", type=int, default=None)
    parser.add_argument("--inflight", type=int, default=10)
    parser.add_argument("--period", type=float, default=1.0,
                        help="session period (s); the atomic deadline is 5 of them")
    parser.add_argument("--dir", default=None, help="where the stores go (a temp dir in it)")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    sizes = None if args.sizes is None else [int(s) for s in args.sizes.split(",")]
    started = time.monotonic()
    result = run(quick=args.quick, sizes=sizes, messages=args.messages, inflight=args.inflight,
                 period=args.period, directory=args.dir,
                 progress=lambda line: print(f"[{time.monotonic() - started:6.1f} s] {line}",
                                             flush=True))
    print(f"{result['messages']} messages of ~100 bytes, {result['inflight']} in flight, "
          f"session period {result['session_period']} s, loopback multicast, one process")
    print(f"  {'members':>7}  {'mode':<6} {'msgs/s':>8} {'p50 ms':>8} {'p99 ms':>8} "
          f"{'aborted':>7}")
    for row in result["rows"]:
        print(f"  {row['members']:>7}  {row['mode']:<6} {row['per_s']:8.1f} "
              f"{_fmt(row['p50_ms'], '8.2f')} {_fmt(row['p99_ms'], '8.2f')} "
              f"{row['aborted']:>7}")
    print("  atomic/SRM:")
    for ratio in result["ratios"]:
        print(f"  {ratio['members']:>7}  throughput {_fmt(ratio['throughput'], '.3f', 'x')}  "
              f"p50 {_fmt(ratio['p50'], '.1f', 'x')}  p99 {_fmt(ratio['p99'], '.1f', 'x')}")
    load = result["load"]
    print(f"load: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} (1, 5, 15 min); "
          f"{time.monotonic() - started:.1f} s")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
