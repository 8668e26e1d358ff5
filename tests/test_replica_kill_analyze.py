"""A real-process fault test of the replicated-objects hub, judged by the pipeline: ``gossamer
hub`` as a process with its keeper's data dir, three ``Replica`` clients writing their own
keys and shared ones (conflicts) and tracing beside the hub; the hub is killed with SIGKILL
mid-stream (the clients go on writing, queued offline), started again on its port and data
dir, the clients reconnect and keep writing; then everything stops cleanly and ``gossamer
analyze`` of the hub's data dir (the killed hub's segments recovered, its stored analysis
settings: causal delivery, one order of the writes to each key, convergence) must exit 0.

Two pipeline defects it found are fixed: a restarted process's ``t`` starts again at 0
(``continuous_lives`` keeps one clock per node across its lives), and a kill between the
keeper's group commit and the callback that traces its ``deliver`` rows lost rows of stored
deliveries (the restarted keeper traces what its store restored; ``restored_deliveries``)."""

from __future__ import annotations

import asyncio
import functools
import signal
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from gossamer.core import FibonacciBackoff
from gossamer.core.segments import SegmentSink
from gossamer.core.traceio import trace_path
from gossamer.protocols.replica import LinkState
from gossamer.services.replica import Replica
from harness_procs import WAIT, LineProc, analyze_in_process_of_its_own, why_analysis_failed

# the analysis runs in a process of its own (its own JVM), so this test runs beside the others
# in the parallel lane instead of lengthening the one-process Spark lane
pytestmark = [pytest.mark.processes, pytest.mark.slow]

RUN = "kill-hub"
CLIENTS = 3
ROUNDS = 30  # of writes by every client; the kill after round 10, the restart after round 20


async def _hub(tmp: Path, port: int, procs: list[LineProc]) -> tuple[LineProc, int]:
    with (tmp / "hub.stderr").open("ab") as err:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "gossamer.cli.main", "hub", "--host", "127.0.0.1", "--port",
            str(port), "--data-dir", str(tmp / "hub"), "--run", RUN, "--log-level", "WARNING",
            stdout=asyncio.subprocess.PIPE, stderr=err, stdin=asyncio.subprocess.DEVNULL)
    hub = LineProc(f"hub:{port}", proc)
    procs.append(hub)
    ready = await hub.expect(lambda s: s.startswith("hub ready at http://"), "the ready line")
    return hub, int(ready.split()[3].rsplit(":", 1)[1].rstrip("/"))


def _write(replicas: list[Replica], round_: int) -> None:
    for n, replica in enumerate(replicas):
        replica.set(f"own-{n}-{round_ % 4}", round_)
        replica.set(f"shared-{round_ % 3}", {"by": n, "round": round_})


def _of_round(replica: Replica, key: str, round_: int) -> bool:
    value = replica.items().get(key)
    return isinstance(value, dict) and value.get("round") == round_


async def _scenario(tmp: Path) -> None:
    procs: list[LineProc] = []
    sinks = [SegmentSink(trace_path(tmp / "hub", RUN, f"client-{n}")) for n in range(CLIENTS)]
    replicas: list[Replica] = []
    try:
        hub, port = await _hub(tmp, 0, procs)
        url = f"ws://127.0.0.1:{port}/ws"
        replicas = [Replica(url, client_id=f"client-{n}", db_path=tmp / f"client-{n}.sqlite",
                            backoff=FibonacciBackoff(unit=0.02, cap=0.5), trace=sinks[n],
                            run=RUN) for n in range(CLIENTS)]
        for replica in replicas:
            await replica.start()
        for replica in replicas:
            await replica.synced(WAIT)
        for round_ in range(10):
            _write(replicas, round_)
            await asyncio.sleep(0)  # let frames flow between rounds
        for replica in replicas:  # the stream is flowing: a write of round 5 arrived
            await replica.wait_until(
                lambda r=replica: r.items().get(f"own-{CLIENTS - 1}-1", -1) >= 5, WAIT)
        assert hub.proc.returncode is None
        hub.proc.kill()
        await asyncio.wait_for(hub.proc.wait(), WAIT)
        for round_ in range(10, 20):  # queued offline while the hub is down
            _write(replicas, round_)
            await asyncio.sleep(0)
        hub, again = await _hub(tmp, port, procs)
        assert again == port
        for replica in replicas:
            replica.reconnect()  # cut a backoff wait short
        for round_ in range(20, ROUNDS):
            _write(replicas, round_)
            await asyncio.sleep(0)
        for replica in replicas:
            await replica.synced(WAIT)
        last = ROUNDS - 1
        # which client's last write to a shared key wins its fork depends on what each had
        # seen when it wrote (the lowest id wins among writes on one base): every replica
        # holds a write of the last round, and the same one (the revisions below)
        for replica in replicas:
            await replica.wait_until(functools.partial(_of_round, replica,
                                                       f"shared-{last % 3}", last), WAIT)
        # nothing waits to be rebased either: a write that lost its conflict is rebased after
        # a delay, and one rebased after the others stopped is a publish they never deliver
        for replica in replicas:
            await replica.wait_until(
                lambda r=replica: r.link is LinkState.ONLINE and not r.offline_queue
                and not r.rebase_queue and r.revisions() == replicas[0].revisions(), WAIT)
        items = replicas[0].items()
        for n in range(CLIENTS):
            for k in range(4):  # each own key's last write, whatever its life
                assert items[f"own-{n}-{k}"] == max(r for r in range(ROUNDS) if r % 4 == k)
        for replica in replicas:
            await replica.close()
        replicas = []
        hub.proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(hub.proc.wait(), WAIT) == 0
    finally:
        for replica in replicas:
            await replica.close()
        for sink in sinks:
            sink.close()
        for proc in procs:
            if proc.proc.returncode is None:
                proc.proc.kill()
                await proc.proc.wait()


def test_killing_the_hub_mid_stream_passes_the_analysis(tmp_path: Path) -> None:
    asyncio.run(_scenario(tmp_path))
    analysis = analyze_in_process_of_its_own(tmp_path / "hub", tmp_path / "analysis")
    assert analysis.returncode == 0, why_analysis_failed(analysis, tmp_path / "analysis")
    # the judged checks include convergence and one order per key, and the killed hub's first
    # life was recovered from its segments (two starts in its part)
    checks = pq.read_table(tmp_path / "analysis" / "checks").to_pylist()
    status = {row["check"]: row["status"] for row in checks}
    assert status["convergence"] == "pass" and status["total order"] == "pass", checks
    hub_rows = pq.read_table(trace_path(tmp_path / "hub", RUN, "hub")).to_pylist()
    assert hub_rows, "the hub's trace part is empty"
