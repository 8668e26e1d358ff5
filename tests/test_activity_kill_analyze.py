"""A real-process fault test of the activity network, judged by the pipeline: three server
processes in a line (s1 <- s2 <- s3) writing their traces, a sender on s1 and a listener on s3;
s2, the middle server, is killed with SIGKILL mid-stream and restarted on its port and data
dir; then every server stops cleanly and ``gossamer analyze`` of the trace (the killed
process's segments recovered) must exit 0: every activity reached every client logged in while
it was published, once and in order."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import orjson
import pytest

from harness_procs import analyze_in_process_of_its_own, why_analysis_failed
from test_activity_processes import WAIT, Network, numbered, until_delivered

# the analysis runs in a process of its own (its own JVM), so this test runs beside the others
# in the parallel lane instead of lengthening the one-process Spark lane
pytestmark = [pytest.mark.processes, pytest.mark.slow]

RUN = "kill-middle"
SENT = 60  # numbered activities; the kill comes after the first 20


async def _scenario(tmp: Path) -> None:
    trace = ("--trace-dir", str(tmp / "out"), "--run", RUN)
    net = Network(tmp)
    try:
        s1 = await net.spawn("s1", "server", "-lp", "0", "-a", "200", "--data-dir",
                             str(tmp / "s1.data"), "--id", "s1", *trace)
        secret = (await s1.expect(lambda s: "server secret: " in s, "secret")).rsplit(" ", 1)[1]
        p1 = int((await s1.expect(lambda s: " listening on " in s, "ready")).rsplit(":", 1)[1])
        s2, p2 = await net.server("s2", 0, "-rh", "127.0.0.1", "-rp", str(p1), "-s", secret,
                                  *trace)
        s3, _p3 = await net.server("s3", 0, "-rh", "127.0.0.1", "-rp", str(p2), "-s", secret,
                                   *trace)
        # one client at a time, so none is redirected (a server sends a login on to one with
        # two clients fewer than itself)
        listen3 = await net.client("listen3", _p3, "--listen")
        sender = await net.client("sender", p1, stdin=True)
        await until_delivered(sender, [listen3], "a")
        for n in range(20):
            sender.write(orjson.dumps({"n": n}).decode())
        await numbered(listen3, 5)  # the stream is flowing through s2
        s2.proc.kill()
        for n in range(20, 40):  # while s3 finds its way back to s1
            sender.write(orjson.dumps({"n": n}).decode())
        await asyncio.wait_for(s2.proc.wait(), WAIT)
        s2b, port = await net.server("s2b", p2, "-rh", "127.0.0.1", "-rp", str(p1), "-s",
                                     secret, *trace, server_id="s2")
        assert port == p2
        for n in range(40, SENT):
            sender.write(orjson.dumps({"n": n}).decode())
        got = await numbered(listen3, SENT)
        assert [a["n"] for a in got] == list(range(SENT))
        # a clean stop of every process: the traces are compacted, sessions end as logouts
        assert sender.proc.stdin is not None
        sender.proc.stdin.close()
        for server in (s3, s2b, s1):
            server.proc.send_signal(signal.SIGINT)
            await asyncio.wait_for(server.proc.wait(), WAIT)
    finally:
        await net.close()


def test_killing_the_middle_server_mid_stream_passes_the_analysis(tmp_path: Path) -> None:
    asyncio.run(_scenario(tmp_path))
    analysis = analyze_in_process_of_its_own(tmp_path / "out", tmp_path / "analysis")
    assert analysis.returncode == 0, why_analysis_failed(analysis, tmp_path / "analysis")
    # the killed process's rows were recovered from its segments and judged with the rest
    assert "s2" in {path.name.split(".")[0].split("-")[0]
                    for path in (tmp_path / "out" / "trace" / RUN).iterdir()}
