"""Seed 002 against Colyseus, side by side in one run: shared state over WebSocket on loopback,
100 and 500 clients, each changing its own property 10 times a second, both servers at a 50 ms
round (APSYN) or patch rate (Colyseus).

One load generator for both (``colyseus/clients.mjs``, Node): every client sends its changes; a
sample of them is instrumented (decodes everything, times each change from its making to its
arrival there, on one clock), the rest are light so the generator does not take the 2 cores
before the servers do. Figures per system and size: change-to-arrival p50/p99 at the sampled
clients, changes delivered per second (what a sampled client sees, times the clients) and per
CPU-second of the server process (``/proc``, over the measured window). The targets of issue
20: APSYN's p99 no worse than Colyseus's, and at least 0.5x its deliveries per server
CPU-second.

- APSYN: ``gossamer appsync server`` (the service as users run it); one session, a shared ``G``
  object ``board`` made by the first client, each client updating ``board.p<its id>``.
  Run three times: peers that answer each round at once (the default), peers that answer it
  ``--gather`` (0.6) of its min time late with the changes made meanwhile
  (``PeerConfig.gather``): a change then waits less for the round that carries it, and eager
  peers (``PeerConfig.eager``, gathering ``--eager``, 0): a change is sent when it is made, in
  the answer if that is still to come, else in a rqst of its own for the open round, so it
  waits only for the end of the round it reaches (``--eager`` 0: answering at once, the
  changes in rqsts of their own), and quiet peers (``PeerConfig.quiet`` with ``eager``,
  ``--no-quiet`` leaves them out): a rqst only when a change is made (or every tout / 2
  rounds, so CTRL keeps the peer), in rounds of a fixed 50 ms (``--max-ms 50``: the rounds
  wait for nobody's answer), as a Colyseus client sends a message per change.
- Colyseus: ``colyseus/server.mjs``, a room whose state maps each client to its last change.

Colyseus is a benchmark dependency only, installed into ``benchmarks/colyseus/node_modules``
by this script on its first run (``npm install``; ``@colyseus/core`` with the WebSocket
transport: the ``colyseus`` bundle's peer, ``@colyseus/uwebsockets-transport``, is fetched from
GitHub, which this machine cannot reach, so peers are not installed automatically).

    .venv/bin/python benchmarks/appsync.py                 # 100 and 500 clients
    .venv/bin/python benchmarks/appsync.py --quick         # 20 clients, short windows
    .venv/bin/python benchmarks/appsync.py --clients 100 --json out.json
    .venv/bin/python benchmarks/appsync.py --clients 500 --repeat 3   # medians of paired runs
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from _common import cpu_seconds, free_port, stop_processes

HERE = Path(__file__).resolve().parent
NODE_DIR = HERE / "colyseus"
ROUND_MS = 50
RATE = 10  # changes per client per second
START_WAIT = 60.0  # seconds for a server to listen


def ensure_node_modules() -> None:
    """Install the Node side (Colyseus, ws) once; a clear error without node or npm."""
    if (NODE_DIR / "node_modules" / "@colyseus" / "core").is_dir():
        return
    npm = shutil.which("npm")
    if npm is None or shutil.which("node") is None:
        raise SystemExit("benchmarks/appsync.py needs Node.js 20 and npm (apt install nodejs npm)")
    print("installing Colyseus into benchmarks/colyseus/node_modules (once) ...", flush=True)
    subprocess.run([npm, "install", "--no-audit", "--no-fund"], cwd=NODE_DIR, check=True)


def _wait_for_line(proc: subprocess.Popen[str], prefix: str, what: str) -> str:
    """The first line of ``proc``'s stdout starting with ``prefix``; an error naming ``what``
    if the process ends first."""
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith(prefix):
            return line.strip()
    raise RuntimeError(f"{what} ended (exit {proc.wait()}) before printing {prefix!r}")


def start_server(system: str, max_ms: int = 4 * ROUND_MS) -> tuple[subprocess.Popen[str], str]:
    """The server process and the URL its clients connect to (APSYN: rounds of at least
    ``ROUND_MS`` and at most ``max_ms``)."""
    port = free_port()
    if system == "colyseus":
        argv = ["node", str(NODE_DIR / "server.mjs"), str(port), str(ROUND_MS)]
        ready, url = "listening", f"ws://127.0.0.1:{port}"
    else:
        argv = [sys.executable, "-m", "gossamer.cli.main", "appsync", "server", "--port",
                str(port), "--min-ms", str(ROUND_MS), "--max-ms", str(max_ms)]
        ready, url = "appsync server listening", f"ws://127.0.0.1:{port}/"
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            cwd=NODE_DIR)
    _wait_for_line(proc, ready, f"the {system} server")
    return proc, url


def run_one(system: str, clients: int, *, sample: int, warmup: float, seconds: float,
            gather: float = 0.0, eager: bool = False, quiet: bool = False) -> dict[str, Any]:
    # quiet peers answer only the rounds they have changes for: the rounds must not wait for
    # the others, so they last exactly ROUND_MS (max = min)
    server, url = start_server(system, ROUND_MS if quiet else 4 * ROUND_MS)
    load = subprocess.Popen(
        ["node", str(NODE_DIR / "clients.mjs"), system, url, str(clients), str(sample),
         str(warmup), str(seconds), str(RATE), str(gather), "1" if eager else "0",
         "1" if quiet else "0"],
        stdout=subprocess.PIPE, text=True, cwd=NODE_DIR)
    try:
        _wait_for_line(load, "measuring", f"the {system} load generator")
        cpu0 = cpu_seconds([server.pid])
        _wait_for_line(load, "done", f"the {system} load generator")
        cpu = cpu_seconds([server.pid]) - cpu0
        result: dict[str, Any] = json.loads(_wait_for_line(load, "{", "the load generator"))
    finally:
        stop_processes([load, server])  # type: ignore[list-item]
    per_client = result["received"] / max(1, result["sample"]) / result["seconds"]
    result["delivered_per_s"] = per_client * clients
    result["server_cpu_s"] = cpu
    result["delivered_per_cpu_s"] = (result["delivered_per_s"] * result["seconds"] / cpu
                                     if cpu > 0 else float("nan"))
    result["server_cpu_share"] = cpu / result["seconds"]
    return result


def median_run(results: list[dict[str, Any]]) -> dict[str, Any]:
    """The run whose deliveries per server CPU-second are the median (the lower middle one of
    an even count): a run that happened, not a mix of several."""
    ordered = sorted(results, key=lambda r: r["delivered_per_cpu_s"])
    return ordered[(len(ordered) - 1) // 2]


def paired_ratios(theirs: list[dict[str, Any]], ours: list[dict[str, Any]]
                  ) -> dict[str, Any]:
    """Each of ``ours`` against the baseline run of its own repeat (the machine's load moves
    both): the ratios, and their medians as ``p99_ratio`` and ``cpu_ratio``."""
    if len(theirs) != len(ours) or not ours:
        raise ValueError("one baseline run per run of ours")
    p99 = [o["p99_ms"] / t["p99_ms"] for t, o in zip(theirs, ours, strict=True)]
    cpu = [o["delivered_per_cpu_s"] / t["delivered_per_cpu_s"]
           for t, o in zip(theirs, ours, strict=True)]
    return {"p99_ratio": statistics.median(p99), "cpu_ratio": statistics.median(cpu),
            "p99_ratios": p99, "cpu_ratios": cpu}


def spread(ratios: list[float]) -> str:
    """``1.03x`` for one run, ``1.03x (0.98-1.16x over 3 runs)`` for several."""
    middle = f"{statistics.median(ratios):.2f}x"
    if len(ratios) == 1:
        return middle
    return f"{middle} ({min(ratios):.2f}-{max(ratios):.2f}x over {len(ratios)} runs)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="20 clients, 2 s + 3 s")
    parser.add_argument("--clients", type=int, nargs="+", default=None)
    parser.add_argument("--sample", type=int, default=5, help="instrumented clients")
    parser.add_argument("--warmup", type=float, default=None, help="seconds before measuring")
    parser.add_argument("--seconds", type=float, default=None, help="seconds measured")
    parser.add_argument("--gather", type=float, default=0.6,
                        help="APSYN is also run with peers that answer each round this "
                             "fraction of its min time late (PeerConfig.gather; 0: not)")
    parser.add_argument("--eager", type=float, default=0.0,
                        help="APSYN is also run with eager peers (PeerConfig.eager: a change "
                             "is sent when it is made) gathering this fraction of the min "
                             "time (0: answering at once); negative: not")
    parser.add_argument("--no-quiet", dest="quiet", action="store_false",
                        help="leave out the quiet peers (PeerConfig.quiet, eager, in rounds "
                             "of a fixed 50 ms)")
    parser.add_argument("--repeat", type=int, default=1,
                        help="run every system this many times, interleaved; each APSYN run "
                             "is compared with the Colyseus run of its own repeat, and the "
                             "median ratio is reported with the range (default 1)")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args()
    sizes = args.clients or ([20] if args.quick else [100, 500])
    warmup = args.warmup if args.warmup is not None else (2.0 if args.quick else 5.0)
    seconds = args.seconds if args.seconds is not None else (3.0 if args.quick else 15.0)
    ensure_node_modules()
    # label, system, gather, eager, quiet
    variants = [("colyseus", "colyseus", 0.0, False, False),
                ("apsyn", "apsyn", 0.0, False, False)]
    if args.gather > 0:
        variants.append((f"apsyn, gather {args.gather:g}", "apsyn", args.gather, False, False))
    if args.eager >= 0:
        label = "apsyn, eager" + (f", gather {args.eager:g}" if args.eager > 0 else "")
        variants.append((label, "apsyn", args.eager, True, False))
    if args.quiet:
        variants.append(("apsyn, quiet", "apsyn", 0.0, True, True))
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    rows = []
    for clients in sizes:
        row: dict[str, Any] = {"clients": clients}
        runs: dict[str, list[dict[str, Any]]] = {label: [] for label, *_ in variants}
        for repeat in range(args.repeat):
            for label, system, gather, eager, quiet in variants:
                print(f"{label}: {clients} clients, {warmup:g} s warm-up, {seconds:g} s "
                      f"measured" + (f" (run {repeat + 1} of {args.repeat})"
                                     if args.repeat > 1 else "") + " ...", flush=True)
                r = run_one(system, clients, sample=args.sample, warmup=warmup,
                            seconds=seconds, gather=gather, eager=eager, quiet=quiet)
                runs[label].append(r)
                print(f"  p50 {r['p50_ms']:.1f} ms, p99 {r['p99_ms']:.1f} ms; "
                      f"{r['delivered_per_s']:,.0f} changes delivered/s; server CPU "
                      f"{r['server_cpu_share']:.2f} cores, {r['delivered_per_cpu_s']:,.0f} "
                      f"per CPU-second; errors {r['errors']}", flush=True)
        for label, results in runs.items():
            row[label] = {**median_run(results), "runs": results}
        for label, *_ in variants[1:]:
            ratios = paired_ratios(runs["colyseus"], runs[label])
            row[f"{label} / colyseus"] = ratios
            print(f"{label} / colyseus at {clients} clients: p99 "
                  f"{spread(ratios['p99_ratios'])} (target <= 1), delivered per server "
                  f"CPU-second {spread(ratios['cpu_ratios'])} (target >= 0.5)", flush=True)
        rows.append(row)
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
