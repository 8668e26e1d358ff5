"""Replicated topic owners over real processes: fail-over time, and issue 19's long run.

Five ``gossamer pubsub node --backups 2`` processes on 127.0.0.1 (Paxos timers as given, the
seed's by default: NOOP every 1 s, suspicion after 2 s), one topic, three subscribers and one
publisher sending a publish every ``--interval`` seconds through its stdin. The topic's Paxos
leader is killed with SIGKILL after ``--kill-after`` publishes and started again on its port
and data dir after ``--restart-after`` more. With ``--placement spares``, the seed's own
placement: four ring nodes with two spare processes each (``--spares``), two subscribers and
a publisher; the topic's active node is killed, a spare takes its place, and the killed node
comes back as a spare.

* **fail-over**: from the ``kill -9`` to the first acknowledged publish on the topic among
  those sent after the kill (wall clock of this process, which reads every node's output).
* **delivery**: every acknowledged publish delivered at every subscriber exactly once, and the
  subscribers' orders equal; with ``--analyze``, ``gossamer analyze`` of the trace too.

Run ``python benchmarks/pubsub_failover.py [--placement backups|spares] [--repeat N]
[--publishes N] [--interval S] [--heartbeat S] [--suspect S] [--analyze] [--dir DIR]
[--json OUT]``. Fail-over is measured
once per repeat (a fresh cluster each time); issue 19's run is ``--publishes 1000 --analyze``.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from _common import free_port
from gossamer.protocols.dissemination.scribe.owners import TopicOwners, owner_groups
from gossamer.testing import FakeEnv

TOPIC = "news"
NODES = 5
SPARE_RING = 4  # ring nodes with --placement spares (twelve processes)
CHORD_BITS = 256  # gossamer pubsub node's --chord-bits default
WAIT = 120.0  # upper bound of any one wait (a loaded machine)
Event = dict[str, Any]


class Node:
    """One node process; a thread stamps each JSON output line with the wall clock."""

    def __init__(self, argv: list[str], log: IO[bytes]) -> None:
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=log, env=dict(os.environ, PYTHONUNBUFFERED="1"))
        self.events: list[tuple[float, Event]] = []
        self.cond = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            event = json.loads(raw)
            with self.cond:
                self.events.append((time.time(), event))
                self.cond.notify_all()
        with self.cond:
            self.events.append((time.time(), {"event": "eof"}))
            self.cond.notify_all()

    def wait(self, pred: Callable[[Event], bool], what: str, *, since: int = 0) -> Event:
        deadline = time.monotonic() + WAIT
        with self.cond:
            while True:
                for _, event in self.events[since:]:
                    if pred(event):
                        return event
                left = deadline - time.monotonic()
                if left <= 0 or (self.events and self.events[-1][1]["event"] == "eof"):
                    raise SystemExit(f"no {what} in {WAIT}s: {self.events[-5:]}")
                self.cond.wait(left)

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line.encode() + b"\n")
        self.proc.stdin.flush()

    def command(self, line: str, answer: str) -> Event:
        with self.cond:
            since = len(self.events)
        self.send(line)
        event = self.wait(lambda e: e["event"] in (answer, "error"), answer, since=since)
        if event["event"] != answer:
            raise SystemExit(f"{line!r}: {event}")
        return event

    def delivered(self) -> list[str]:
        with self.cond:
            return [str(e["message"]) for _, e in self.events
                    if e["event"] == "deliver" and e["topic"] == TOPIC]

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def _until(pred: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not pred():
        if time.monotonic() > deadline:
            raise SystemExit(f"not {what} after {WAIT}s")
        time.sleep(0.05)  # polling a status command


def one_run(base: Path, args: argparse.Namespace, log: IO[bytes]) -> dict[str, Any]:
    spares = args.placement == "spares"
    ring = [f"127.0.0.1:{free_port()}" for _ in range(SPARE_RING if spares else NODES)]
    bits = CHORD_BITS
    groups: dict[str, tuple[str, ...]]
    if spares:  # the seed's: each ring node with two spare processes outside the ring
        groups = {a: (a, f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}") for a in ring}
        owner = TopicOwners(FakeEnv(ring[0]), groups=groups, bits=bits).owner_of(TOPIC)
        placement = [arg for a, g in groups.items()
                     for arg in ("--spares", f"{a}={','.join(g[1:])}")]
    else:
        groups = owner_groups(ring, bits=bits)
        owner = TopicOwners(FakeEnv(ring[0]), ring, bits=bits).owner_of(TOPIC)
        placement = [*(arg for member in ring for arg in ("--ring", member)), "--backups", "2"]
    group = groups[owner]
    processes = [*ring, *(m for a in ring for m in groups[a][1:])] if spares else ring
    nodes: dict[str, Node] = {}

    def spawn(me: str, contact: str | None) -> Node:
        port = me.rsplit(":", 1)[1]
        argv = [sys.executable, "-m", "gossamer.cli.main", "pubsub", "node", "--json",
                "--interactive", "--mode", "scribe", "--port", port, *placement,
                "--paxos-heartbeat", str(args.heartbeat), "--paxos-suspect", str(args.suspect),
                "--data-dir", str(base / port), "--trace-dir", str(base), "--run", "owners"]
        if contact is not None:
            argv += ["--contact", contact]
        node = nodes[me] = Node(argv, log)
        node.wait(lambda e: e["event"] == "ready", "ready")
        return node

    try:
        spawn(ring[0], None)
        for me in processes[1:]:
            spawn(me, ring[0])
        for me in ring:
            nodes[me].wait(lambda e: e["event"] == "joined", "joined")

        def agreed() -> bool:
            leaders = {nodes[m].command("status", "status")["groups"][owner]["leader"]
                       for m in group}
            return len(leaders) == 1 and None not in leaders

        _until(agreed, "one leader of the topic's group")
        # the victim: the topic's Paxos leader (backups on the ring), or its active node
        leader = owner if spares else nodes[group[0]].command(
            "status", "status")["groups"][owner]["leader"]
        others = [n for n in ring if n != leader]
        subscribers, publisher = [nodes[n] for n in others[:-1]], nodes[others[-1]]
        for sub in subscribers:
            sub.command(f"subscribe {TOPIC}", "subscribe")

        def attached(sub: Node) -> bool:
            topic = sub.command("status", "status")["topics"].get(TOPIC, {})
            return bool(topic.get("role") == "root" or topic.get("parent"))

        for sub in subscribers:
            _until(functools.partial(attached, sub), "subscribers attached")
        sent_at: dict[int, float] = {}
        killed_at = restarted_at = 0.0
        for i in range(args.publishes):
            if i == args.kill_after:
                nodes[leader].proc.kill()  # SIGKILL
                killed_at = time.time()
                nodes[leader].proc.wait()
            if i == args.kill_after + args.restart_after:
                spawn(leader, others[0])  # with spares: back as a spare (its place is taken)
                restarted_at = time.time()
            sent_at[i] = time.time()
            publisher.send(f"publish {TOPIC} m{i}")
            time.sleep(args.interval)  # the workload's pace
        answers: list[tuple[float, Event]] = []

        def all_answered() -> bool:
            nonlocal answers
            with publisher.cond:
                answers = [(t, e) for t, e in publisher.events
                           if e["event"] == "publish" or "definite" in e]
            return len(answers) >= int(args.publishes)

        _until(all_answered, "every publish answered")
        # ids number the publishes in the order they were sent
        by_seq = sorted(answers, key=lambda te: int(str(te[1]["msg"]).rsplit(":", 1)[1]))
        acked = {f"m{i}": t for i, (t, e) in enumerate(by_seq) if e["event"] == "publish"}
        after_kill = [t for i, (t, e) in enumerate(by_seq)
                      if e["event"] == "publish" and sent_at[i] >= killed_at]
        failover = min(after_kill) - killed_at if after_kill else None
        def has_every_ack(sub: Node) -> bool:
            return set(acked) <= set(sub.delivered())

        for sub in subscribers:
            _until(functools.partial(has_every_ack, sub), "every ack delivered")
        orders = [sub.delivered() for sub in subscribers]
        once = all(len(o) == len(set(o)) for o in orders)
        same = all(o == orders[0] for o in orders)
        for node in nodes.values():
            if node.proc.poll() is None:
                node.proc.send_signal(signal.SIGTERM)
        for node in nodes.values():
            node.proc.wait(WAIT)
        return {"placement": args.placement, "failover_s": failover, "acked": len(acked),
                "sent": args.publishes,
                "failed": args.publishes - len(acked), "exactly_once": once,
                "same_order": same, "delivered": [len(o) for o in orders],
                "restart_s": restarted_at - killed_at, "leader_was_owner": leader == owner}
    finally:
        for node in nodes.values():
            node.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--publishes", type=int, default=60)
    parser.add_argument("--interval", type=float, default=0.05)
    parser.add_argument("--kill-after", type=int, default=None,
                        help="publishes before the kill (default: a third)")
    parser.add_argument("--restart-after", type=int, default=None,
                        help="publishes between the kill and the restart (default: a third)")
    parser.add_argument("--placement", choices=("backups", "spares"), default="backups",
                        help="backups: five ring nodes, each group an owner and its next two "
                             "(--backups 2); spares: the seed's, four ring nodes with two "
                             "spare processes each (--spares), the active node killed")
    parser.add_argument("--heartbeat", type=float, default=1.0)
    parser.add_argument("--suspect", type=float, default=2.0)
    parser.add_argument("--analyze", action="store_true",
                        help="run gossamer analyze on each run's trace")
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.kill_after is None:
        args.kill_after = args.publishes // 3
    if args.restart_after is None:
        args.restart_after = args.publishes // 3
    base = args.dir or Path(tempfile.mkdtemp(prefix="pubsub-failover-"))
    results = []
    for n in range(args.repeat):
        run_dir = base / f"run{n}"
        run_dir.mkdir(parents=True, exist_ok=True)
        with (run_dir / "nodes.log").open("wb") as log:
            result = one_run(run_dir, args, log)
        if args.analyze:
            analysis = subprocess.run(
                [sys.executable, "-m", "gossamer.cli.main", "analyze", str(run_dir),
                 "--out", str(run_dir / "analysis")], capture_output=True, text=True)
            result["analyze_exit"] = analysis.returncode
        results.append(result)
        print(json.dumps(result), flush=True)
    failovers = [r["failover_s"] for r in results if r["failover_s"] is not None]
    summary = {"load": os.getloadavg(), "heartbeat": args.heartbeat, "suspect": args.suspect,
               "failover_s": failovers,
               "failover_median_s": statistics.median(failovers) if failovers else None,
               "runs": results}
    print(f"fail-over (kill -9 of the leader -> first acknowledged publish): "
          f"{', '.join(f'{f:.2f}' for f in failovers)} s; timers {args.heartbeat} s / "
          f"{args.suspect} s; load {summary['load'][0]:.1f}")
    if args.json is not None:
        args.json.write_text(json.dumps(summary, indent=2))
    ok = all(r["exactly_once"] and r["same_order"] and r.get("analyze_exit", 0) == 0
             for r in results)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
