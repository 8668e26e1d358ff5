"""A commit survives the death of its process; what was not committed does not. A child
process writes, commits, writes more without committing and is killed with SIGKILL between the
commit and its reply; the parent reopens the file. With ``WriteBehindStore`` the reply
(``commit_then``) comes only once the group is on disk, and a group killed on its way never
replies and is not there.

A kill leaves the operating system's cache alone, so it cannot tell ``synchronous=FULL`` from
``NORMAL`` (both survive it); what a power loss would undo is checked where it is decided: the
store's sqlite settings.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from gossamer.runtimes.net import SqliteStore, WriteBehindStore
from gossamer.runtimes.net.redo import redo_path

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL is POSIX")

WAIT = 30.0  # seconds: an upper bound only
SRC = Path(__file__).resolve().parent.parent / "src"

# the child: commit "kept", then write "lost" without committing, say so and wait to be killed
SQLITE_CHILD = """
import sys
from gossamer.runtimes.net import SqliteStore
store = SqliteStore(sys.argv[1])
store.put("t", "kept", b"committed")
store.commit()
print("committed", flush=True)
store.put("t", "lost", b"not committed")
store.put("t", "kept", b"overwritten, not committed")
print("written", flush=True)
sys.stdin.read()  # the reply would follow; the parent kills us first
print("replied", flush=True)
"""

# the child: group "kept" replies once on disk; group "lost" is stuck on its way to disk (the
# writer thread is held inside it) when the parent kills the process
WRITE_BEHIND_CHILD = """
import asyncio, sys, threading
from gossamer.runtimes.net import WriteBehindStore

async def main():
    store = WriteBehindStore(sys.argv[1])
    replied = asyncio.Event()
    store.put("t", "kept", b"committed")
    store.commit_then(lambda: (print("replied kept", flush=True), replied.set()))
    await replied.wait()
    held = threading.Event()
    def stuck(puts, deletes, **options):
        print("writing lost", flush=True)  # held before its record reaches the redo log
        held.wait()
    store.redo.append = stuck
    store.put("t", "lost", b"on its way")
    store.commit_then(lambda: print("replied lost", flush=True))
    await asyncio.sleep(3600)

asyncio.run(main())
"""


def child(script: str, path: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    return subprocess.Popen([sys.executable, "-c", script, str(path)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def read_until(process: subprocess.Popen[str], line: str) -> list[str]:
    """The child's lines up to and including ``line`` (a dead child fails the test)."""
    assert process.stdout is not None
    seen: list[str] = []
    while True:
        got = process.stdout.readline()
        if not got:
            _, err = process.communicate(timeout=WAIT)
            pytest.fail(f"the child ended before {line!r}; it said {seen}; stderr:\n{err}")
        seen.append(got.strip())
        if seen[-1] == line:
            return seen


def kill(process: subprocess.Popen[str]) -> list[str]:
    """SIGKILL, then whatever else the child had printed."""
    process.send_signal(signal.SIGKILL)
    out, _ = process.communicate(timeout=WAIT)
    assert process.returncode == -signal.SIGKILL
    return out.split()


def reopened(path: Path) -> dict[str, bytes]:
    store = SqliteStore(path)
    try:
        return dict(store.scan("t"))
    finally:
        store.close()


def test_a_file_store_syncs_each_commit_to_disk(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.sqlite")
    db = store._open_db()
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert db.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL: the log synced per commit
    assert db.execute("PRAGMA fullfsync").fetchone()[0] == 1  # macOS: through the disk cache
    store.close()
    behind = WriteBehindStore(tmp_path / "w.sqlite")
    assert behind.inner._open_db().execute("PRAGMA synchronous").fetchone()[0] == 2
    behind.close()


def test_a_killed_process_keeps_its_commit_and_loses_what_it_had_not_committed(
        tmp_path: Path) -> None:
    path = tmp_path / "killed.sqlite"
    process = child(SQLITE_CHILD, path)
    try:
        assert read_until(process, "written") == ["committed", "written"]
    finally:
        rest = kill(process)
    assert "replied" not in rest
    assert reopened(path) == {"kept": b"committed"}


def test_a_reply_after_a_group_commit_means_on_disk_and_a_killed_group_never_replies(
        tmp_path: Path) -> None:
    path = tmp_path / "killed.sqlite"
    process = child(WRITE_BEHIND_CHILD, path)
    try:
        read_until(process, "replied kept")
        # durable in the redo log (sqlite has it at the next checkpoint): a reader beside the
        # live writer reads it from there, and after the kill the log is replayed
        assert redo_path(path).stat().st_size > 0
        assert reopened(path) == {"kept": b"committed"}  # while the child runs: on disk
        read_until(process, "writing lost")
    finally:
        rest = kill(process)
    assert "replied lost" not in " ".join(rest)
    assert reopened(path) == {"kept": b"committed"}
    assert redo_path(path).stat().st_size == 0  # the reopen replayed it into sqlite
