"""The network runtime's allocator policy: a server process keeps the free top of its heap
instead of faulting it in again at every burst; once per process; an environment variable to
keep the C library's; a clear error for a bad value."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys

import pytest

from gossamer.core.errors import ConfigError
from gossamer.runtimes.net import gcpolicy, mallocpolicy

glibc = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's mallopt only")

# bursts like a server's round: 300 buffers of 25 KB built, then all freed; the minor page
# faults of the last 20 bursts, after one to warm up
_BURSTS = """
import json, resource, sys
from gossamer.runtimes.net.mallocpolicy import tune_malloc
tuned = tune_malloc()
def burst():
    held = [bytes(25_000) + bytes([n % 256]) for n in range(300)]
    held.clear()
burst()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    burst()
print(json.dumps({"tuned": tuned,
                  "faults": resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before}))
"""


def _bursts(setting: str | None) -> dict[str, object]:
    # neither our variable nor glibc's own MALLOC_* knobs from the caller's environment
    env = {k: v for k, v in os.environ.items()
           if k != mallocpolicy.ENV and not k.startswith("MALLOC_")}
    if setting is not None:
        env[mallocpolicy.ENV] = setting
    out = subprocess.run([sys.executable, "-c", _BURSTS], env=env, capture_output=True,
                         text=True, timeout=60, check=True).stdout
    result: dict[str, object] = json.loads(out)
    return result


@glibc
def test_a_server_process_keeps_its_heap_between_bursts() -> None:
    tuned = _bursts(None)
    kept = _bursts("default")
    assert tuned["tuned"] == [mallocpolicy.TRIM, mallocpolicy.MMAP]
    assert kept["tuned"] is None
    # each burst is about 1,800 pages: with the C library's trim they fault in every time
    assert isinstance(kept["faults"], int) and kept["faults"] > 20 * 1_000, kept
    assert isinstance(tuned["faults"], int) and tuned["faults"] < kept["faults"] // 10, tuned


def test_once_per_process_and_a_bad_setting_is_a_clear_error(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gcpolicy, "_applied", {mallocpolicy.ENV})
    assert mallocpolicy.tune_malloc() is None  # a second node changes nothing
    monkeypatch.setattr(gcpolicy, "_applied", set())
    monkeypatch.setenv(mallocpolicy.ENV, "lots")
    with pytest.raises(ConfigError, match="GOSSAMER_MALLOC must be 'default'"):
        mallocpolicy.tune_malloc()
