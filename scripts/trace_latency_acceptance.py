"""Acceptance: ``gossamer analyze``'s latency of real processes matches what clients measured.

Starts 3 ``gossamer pubsub node`` processes on loopback, a few seconds apart (so their run
clocks ``t`` start at different moments), each with ``--trace-dir`` and a command port. One
client connection per node subscribes it to a topic; the script publishes through each node in
turn and stamps, with ``time.time()``, when it sent each publish command and when each other
node's command port handed the delivery back. Then it stops two nodes cleanly (SIGTERM: their
segments are compacted to Parquet) and kills the third with SIGKILL (its segments stay), runs
``gossamer analyze`` on the trace directory (which recovers the killed node's segments), and
compares analyze's per-delivery latency with the clients' measurement of the same delivery.

The clients' figure includes two loopback hops of the command port that analyze does not see
(the publish command in, the delivery line out), so it is a little larger; the check is that
the two agree within ``--tolerance`` (2 ms) at the median and p95, and that the median
per-delivery difference is within it too (single deliveries may differ more when the machine
is busy: the clients' two extra hops wait for a CPU like anything else; the script prints the
spread and the load average).

    PYTHONPATH=src .venv/bin/python scripts/trace_latency_acceptance.py [--out DIR]

Exit code 0 when every check holds, 1 otherwise. Needs Spark (Java 17), like ``analyze``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pyarrow.parquet as pq

from gossamer.core.traceio import read_trace

RUN = "acceptance"
TOPIC = "latency"
NODES = 3
STAGGER = 2.0  # seconds between two node starts: their t clocks differ by this much
WAIT = 30.0


class Node:
    """One ``gossamer pubsub node`` process and a client connection to its command port."""

    def __init__(self, proc: asyncio.subprocess.Process, node: str, commands: str) -> None:
        self.proc = proc
        self.node = node
        self.commands = commands
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.deliveries: dict[str, float] = {}  # message text -> when its line arrived
        self.answers: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.delivered = asyncio.Event()

    async def connect(self) -> None:
        host, port = self.commands.rsplit(":", 1)
        self.reader, self.writer = await asyncio.open_connection(host, int(port))
        greeting = json.loads(await asyncio.wait_for(self.reader.readline(), WAIT))
        assert greeting["event"] == "ready", greeting

    async def listen(self) -> None:
        assert self.reader is not None
        while line := await self.reader.readline():
            arrived = time.time()
            event = json.loads(line)
            if event["event"] == "deliver":
                self.deliveries.setdefault(event["message"], arrived)
                self.delivered.set()
            else:
                await self.answers.put(event)

    async def command(self, line: str) -> tuple[float, dict[str, Any]]:
        """Send one command; (when it was sent, its answer)."""
        assert self.writer is not None
        sent = time.time()
        self.writer.write(line.encode() + b"\n")
        await self.writer.drain()
        return sent, await asyncio.wait_for(self.answers.get(), WAIT)


async def start_node(out: Path, contact: str | None) -> Node:
    command = [sys.executable, "-m", "gossamer.services.pubsub.cli", "pubsub", "node", "--json",
               "--mode", "gossip", "--port", "0", "--command-port", "0",
               "--trace-dir", str(out), "--run", RUN]
    if contact is not None:
        command += ["--contact", contact]
    proc = await asyncio.create_subprocess_exec(
        *command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
        env=dict(os.environ, PYTHONUNBUFFERED="1"))
    assert proc.stdout is not None
    while True:
        line = await asyncio.wait_for(proc.stdout.readline(), WAIT)
        if not line:
            raise RuntimeError("a node exited before it was ready")
        event = json.loads(line)
        if event.get("event") == "ready":
            return Node(proc, event["node"], event["commands"])


async def drain_stdout(node: Node) -> None:
    assert node.proc.stdout is not None
    while await node.proc.stdout.readline():
        continue  # read and dropped: only the pipe must not fill


async def measure(out: Path, messages: int, interval: float) -> tuple[list[Node],
                                                                      dict[tuple[str, str], float]]:
    """Run the nodes, publish, and return them with the clients' latency per (msg, node)."""
    nodes: list[Node] = []
    try:
        return await _measure(nodes, out, messages, interval)
    finally:
        for node in nodes:  # whatever went wrong, no node outlives the script
            if node.proc.returncode is None:
                node.proc.kill()
                await node.proc.wait()


async def _measure(nodes: list[Node], out: Path, messages: int,
                   interval: float) -> tuple[list[Node], dict[tuple[str, str], float]]:
    for i in range(NODES):
        nodes.append(await start_node(out, nodes[0].node if nodes else None))
        if i < NODES - 1:
            await asyncio.sleep(STAGGER)
    background = [asyncio.create_task(drain_stdout(n)) for n in nodes]
    for node in nodes:
        await node.connect()
        background.append(asyncio.create_task(node.listen()))
        await node.command(f"subscribe {TOPIC}")
    # the overlay is up once a probe from each node reaches every other node
    deadline = time.monotonic() + WAIT
    for origin in nodes:
        for attempt in range(1000):
            probe = f"probe-{origin.node}-{attempt}"
            await origin.command(f"publish {TOPIC} {probe}")
            await asyncio.sleep(0.5)
            if all(probe in n.deliveries for n in nodes if n is not origin):
                break
            if time.monotonic() > deadline:
                raise RuntimeError("the overlay did not connect")
    measured: dict[tuple[str, str], float] = {}
    sent_at: dict[str, tuple[str, float]] = {}  # text -> (msg id, sent)
    for i in range(messages):
        origin = nodes[i % NODES]
        text = f"m{i}"
        sent, answer = await origin.command(f"publish {TOPIC} {text}")
        sent_at[text] = (answer["msg"], sent)
        await asyncio.sleep(interval)
    await asyncio.sleep(1.0)  # the last deliveries
    for text, (msg, sent) in sent_at.items():
        origin = msg.rsplit(":", 1)[0]
        for node in nodes:
            if node.node != origin and text in node.deliveries:
                measured[(msg, node.node)] = node.deliveries[text] - sent
    # two clean exits, one kill -9 (after the 200 ms flush bound: its rows are on disk)
    await asyncio.sleep(0.5)
    nodes[-1].proc.send_signal(signal.SIGKILL)
    for node in nodes[:-1]:
        node.proc.send_signal(signal.SIGTERM)
    for node in nodes:
        await asyncio.wait_for(node.proc.wait(), WAIT)
    for task in background:
        task.cancel()
    await asyncio.gather(*background, return_exceptions=True)
    for node in nodes:
        if node.writer is not None:
            node.writer.close()
    return nodes, measured


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def ms(seconds: float) -> str:
    return f"{seconds * 1000:8.3f} ms"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=None, help="trace directory (default: a new temp dir)")
    parser.add_argument("--messages", type=int, default=60)
    parser.add_argument("--interval", type=float, default=0.05,
                        help="seconds between two publishes")
    parser.add_argument("--tolerance", type=float, default=0.002, help="seconds")
    args = parser.parse_args()
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="gossamer-accept-"))
    print(f"trace directory: {out}")
    nodes, measured = asyncio.run(measure(out, args.messages, args.interval))
    folder = out / "trace" / RUN
    print("after the run:", " ".join(sorted(p.name for p in folder.iterdir())))
    print(f"nodes: {', '.join(n.node for n in nodes)} (started {STAGGER} s apart; "
          f"{nodes[-1].node} killed with SIGKILL)")

    started = time.monotonic()
    analyze = subprocess.run(
        [sys.executable, "-m", "gossamer.cli.main", "analyze", str(out),
         "--master", "local[2]"], capture_output=True, text=True, check=False)
    print(f"gossamer analyze: exit {analyze.returncode} in {time.monotonic() - started:.0f} s")
    for line in analyze.stdout.splitlines():
        if any(word in line for word in ("recovered", "torn", "latency", "trace rows")):
            print("  |", line.rstrip())
    if analyze.returncode not in (0, 1):
        print(analyze.stdout, analyze.stderr)
        return 1
    print("after analyze:", " ".join(sorted(p.name for p in folder.iterdir())))

    latency = pq.read_table(out / "analysis" / "latency").to_pylist()
    analysed = {(r["msg"], r["node"]): r["latency"] for r in latency
                if r["layer"] == "pubsub" and r["msg"] in {msg for msg, _ in measured}}
    # what t alone would have said: publish t at one process, deliver t at another
    trace = read_trace(out)
    trace = trace.filter(pc.equal(trace["layer"], "pubsub"))
    publishes = trace.filter(pc.equal(trace["event"], "publish")).to_pylist()
    delivers = trace.filter(pc.equal(trace["event"], "deliver")).to_pylist()
    t_publish = {r["msg"]: r["t"] for r in publishes}
    on_t = [r["t"] - t_publish[r["msg"]] for r in delivers
            if (r["msg"], r["node"]) in measured and r["msg"] in t_publish]

    common = sorted(set(measured) & set(analysed))
    missing = sorted(set(measured) - set(analysed))
    client = [measured[k] for k in common]
    pipeline = [analysed[k] for k in common]
    diffs = [measured[k] - analysed[k] for k in common]
    print(f"deliveries measured by the clients: {len(measured)}, by analyze: {len(common)}, "
          f"missing from analyze: {len(missing)}")
    print(f"{'':22}{'clients':>14}{'analyze (wall)':>16}{'from t alone':>16}")
    for label, q in (("p50", 0.5), ("p95", 0.95), ("max", 1.0)):
        print(f"latency {label:14}{ms(percentile(client, q)):>14}"
              f"{ms(percentile(pipeline, q)):>16}{ms(percentile(on_t, q)):>16}")
    print(f"clients - analyze per delivery: p50 {ms(percentile(diffs, 0.5))}, "
          f"p95 {ms(percentile(diffs, 0.95))}, mean {ms(statistics.fmean(diffs))}, "
          f"min {ms(min(diffs))}, max {ms(max(diffs))}")
    print(f"load average: {' '.join(f'{x:.1f}' for x in os.getloadavg())} on "
          f"{os.cpu_count()} cores")
    checks = {
        "every measured delivery is in analyze's latency table": not missing,
        f"p50 within {args.tolerance * 1000:g} ms":
            abs(percentile(client, 0.5) - percentile(pipeline, 0.5)) <= args.tolerance,
        f"p95 within {args.tolerance * 1000:g} ms":
            abs(percentile(client, 0.95) - percentile(pipeline, 0.95)) <= args.tolerance,
        f"per delivery, clients - analyze within {args.tolerance * 1000:g} ms at the median":
            abs(percentile(diffs, 0.5)) <= args.tolerance,
        "the killed node's segments were recovered": "recovered" in analyze.stdout,
    }
    for name, ok in checks.items():
        print(f"{'PASS' if ok else 'FAIL'}  {name}")
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
