"""Store benchmark: durable (fsync'd) commits/s of gossamer's stores, single and grouped, side by
side in the same run with the settings they replaced (``synchronous=NORMAL``, a write-behind
store whose commit returned before the data was on disk), with the ratios.

Run ``python benchmarks/store.py [--quick] [--writers N ...] [--window S] [--rounds R]
[--dir DIR] [--json OUT]``. The files go to a temporary directory under ``--dir`` (default: the
system's temporary directory): put it on the disk you want to measure.

One operation = one row written (a 100-byte JSON value under a new key) and committed; its
"reply" may go once the commit returned (``commit()``) or once the callback ran
(``commit_then``). Cases, each run for ``--window`` seconds, best of ``--rounds``, interleaved:

- single, on the caller's thread, one write + one commit per operation:
  ``sqlite NORMAL`` (the store's setting before: the WAL is synced only at checkpoints, so a
  commit may roll back after a power loss) and ``sqlite FULL`` (``SqliteStore`` now: the WAL is
  synced at every commit).
- grouped, ``N`` writers on an event loop, each writing again as soon as it has its reply:
  ``write-behind before`` (the ``WriteBehindStore`` this change replaced, rebuilt here: a commit
  hands the write to the writer thread and returns at once, the reply leaves before the data is
  on disk, and the next commit waits for the group before it; ``NORMAL``) and
  ``write-behind FULL`` (``WriteBehindStore.commit_then``: the writes of all waiting writers
  form one group, one fsync, then all the replies).
- batch, on the caller's thread: ``sqlite FULL batch N``: N writes, one commit, N callbacks.

``commits/s`` counts sqlite transactions (each one fsync when ``FULL``); ``writes/commit`` is
how many operations one commit carried.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import platform
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson
from rich.console import Console
from rich.table import Table

from gossamer.runtimes.net import SqliteStore, WriteBehindStore

__all__ = ["main", "render", "run"]

TABLE = "bench"
VALUE = orjson.dumps({"writer": "c0007", "seq": 123456, "data": "x" * 60})  # about 100 bytes

Figures = dict[str, Any]


def relaxed(store: SqliteStore) -> SqliteStore:
    """``store`` with the setting it had before this change (a baseline only: no caller of
    gossamer can ask for it)."""
    store._open_db().execute("PRAGMA synchronous=NORMAL")
    return store


def keys() -> Iterator[str]:
    return (f"{n:010d}" for n in itertools.count())


def figures(writes: int, commits: int, seconds: float) -> Figures:
    return {"writes": writes, "commits": commits, "seconds": seconds,
            "writes_per_s": writes / seconds, "commits_per_s": commits / seconds,
            "writes_per_commit": writes / commits if commits else 0.0}


# -- single and batch: on the caller's thread -----------------------------------------------------


def single(path: Path, window: float, *, durable: bool) -> Figures:
    store = SqliteStore(path)
    if not durable:
        relaxed(store)
    names = keys()
    writes = 0
    start = time.perf_counter()
    deadline = start + window
    while True:
        store.put(TABLE, next(names), VALUE)
        store.commit()
        writes += 1
        if time.perf_counter() >= deadline:
            break
    seconds = time.perf_counter() - start
    store.close()
    return figures(writes, writes, seconds)


def batch(path: Path, window: float, size: int) -> Figures:
    store = SqliteStore(path)
    names = keys()
    replies = writes = commits = 0

    def reply() -> None:
        nonlocal replies
        replies += 1

    start = time.perf_counter()
    deadline = start + window
    while True:
        callbacks: list[Callable[[], None]] = []
        for _ in range(size):
            store.put(TABLE, next(names), VALUE)
            callbacks.append(reply)
        store.commit()
        for fn in callbacks:  # the replies: only now
            fn()
        writes += size
        commits += 1
        if time.perf_counter() >= deadline:
            break
    seconds = time.perf_counter() - start
    store.close()
    assert replies == writes
    return figures(writes, commits, seconds)


# -- grouped: N writers on an event loop ----------------------------------------------------------


class WriteBehindBefore:
    """The ``WriteBehindStore`` before this change, for the baseline: ``commit()`` hands the
    writes to the writer thread and returns (the caller replies at once, before they are on
    disk); a commit while the group before is still being written waits for it; NORMAL."""

    def __init__(self, path: Path) -> None:
        self.inner = relaxed(SqliteStore(path, any_thread=True))
        self.pending: dict[tuple[str, str], bytes | None] = {}
        self.written: Future[None] | None = None
        self.writer = ThreadPoolExecutor(max_workers=1)
        self.commits = 0

    def put(self, table: str, key: str, value: bytes) -> None:
        self.pending[(table, key)] = value

    def commit(self) -> None:
        if not self.pending:
            return
        if self.written is not None:
            self.written.result()
        changes, self.pending = self.pending, {}
        puts = orjson.dumps([(t, k, v.decode()) for (t, k), v in changes.items()
                             if v is not None])
        self.written = self.writer.submit(self._write, puts)

    def _write(self, puts: bytes) -> None:
        self.inner.apply_json(puts, b"[]")
        self.inner.commit()
        self.commits += 1

    def close(self) -> None:
        if self.written is not None:
            self.written.result()
        self.writer.shutdown()
        self.inner.close()


async def grouped_before(path: Path, window: float, writers: int) -> Figures:
    store = WriteBehindBefore(path)
    names = keys()
    writes = 0
    start = time.perf_counter()
    deadline = start + window
    while time.perf_counter() < deadline:
        for _ in range(writers):  # each writer: write, commit, reply at once, write again
            store.put(TABLE, next(names), VALUE)
            store.commit()
            writes += 1
        await asyncio.sleep(0)
    store.close()  # what was handed over is written (not what the replies waited for)
    seconds = time.perf_counter() - start
    return figures(writes, store.commits, seconds)


async def grouped_durable(path: Path, window: float, writers: int) -> Figures:
    store = WriteBehindStore(path)
    names = keys()
    replies = 0
    active = writers
    done = asyncio.Event()
    start = time.perf_counter()
    deadline = start + window

    def write() -> None:
        store.put(TABLE, next(names), VALUE)
        store.commit_then(replied)

    def replied() -> None:
        nonlocal replies, active
        replies += 1
        if time.perf_counter() < deadline:
            write()  # the writer's next operation, once it has its reply
        else:
            active -= 1
            if not active:
                done.set()

    for _ in range(writers):
        write()
    await done.wait()
    seconds = time.perf_counter() - start
    commits = store.groups_written
    store.close()
    return figures(replies, commits, seconds)


# -- the run --------------------------------------------------------------------------------------


@contextmanager
def files(parent: str | None) -> Iterator[Callable[[str], Path]]:
    """A fresh sqlite path per case and round, in a temporary directory removed at the end."""
    with tempfile.TemporaryDirectory(prefix="gossamer-store-bench-", dir=parent) as root:
        counter = itertools.count()
        yield lambda name: Path(root) / f"{name}-{next(counter)}.sqlite"


def cases(writers: list[int]) -> list[tuple[str, str, Callable[[Path, float], Figures]]]:
    """(name, what its ratio is taken against, how to run it once)."""
    listed: list[tuple[str, str, Callable[[Path, float], Figures]]] = [
        ("sqlite NORMAL", "sqlite NORMAL", lambda p, w: single(p, w, durable=False)),
        ("sqlite FULL", "sqlite NORMAL", lambda p, w: single(p, w, durable=True)),
    ]
    for n in writers:
        listed += [
            (f"sqlite FULL batch {n}", "sqlite FULL",
             lambda p, w, n=n: batch(p, w, n)),
            (f"write-behind before, {n} writers", f"write-behind before, {n} writers",
             lambda p, w, n=n: asyncio.run(grouped_before(p, w, n))),
            (f"write-behind FULL, {n} writers", f"write-behind before, {n} writers",
             lambda p, w, n=n: asyncio.run(grouped_durable(p, w, n))),
        ]
    return listed


DURABLE = {"sqlite NORMAL": False, "sqlite FULL": True}


def durable(name: str) -> bool:
    return DURABLE.get(name, "FULL" in name)


def run(quick: bool = False, *, writers: list[int] | None = None, window: float | None = None,
        rounds: int | None = None, directory: str | None = None) -> Figures:
    writers = writers or ([10] if quick else [10, 100])
    window = window if window is not None else (0.2 if quick else 2.0)
    rounds = rounds if rounds is not None else (1 if quick else 3)
    listed = cases(writers)
    best: dict[str, Figures] = {}
    with files(directory) as fresh:
        for _ in range(rounds):  # interleaved: a slow moment of the disk hits every case
            for name, _against, once in listed:
                got = once(fresh(name.replace(" ", "-").replace(",", "")), window)
                if name not in best or got["writes_per_s"] > best[name]["writes_per_s"]:
                    best[name] = got
    results: Figures = {}
    for name, against, _once in listed:
        row = dict(best[name])
        row["durable"] = durable(name)
        row["against"] = against
        row["ratio"] = row["writes_per_s"] / best[against]["writes_per_s"]
        if name.startswith("write-behind FULL"):
            row["vs_single_full"] = row["writes_per_s"] / best["sqlite FULL"]["writes_per_s"]
        if name.startswith("sqlite FULL batch"):
            row["vs_normal"] = row["writes_per_s"] / best["sqlite NORMAL"]["writes_per_s"]
        results[name] = row
    return {
        "quick": quick, "writers": writers, "window_s": window, "rounds": rounds,
        "cases": results, "directory": directory or tempfile.gettempdir(),
        "machine": f"{os.cpu_count()} CPUs, {platform.system()} {platform.machine()}",
        "python": platform.python_version(), "sqlite": sqlite3.sqlite_version,
    }


def render(result: Figures, console: Console) -> None:
    table = Table(title=f"Store commits, best of {result['rounds']} x {result['window_s']} s "
                        f"(files in {result['directory']})")
    for column in ("case", "on disk at reply", "writes/s", "commits/s", "writes/commit",
                   "ratio", "against"):
        table.add_column(column, justify="left" if column in ("case", "against") else "right")
    for name, row in result["cases"].items():
        table.add_row(name, "yes" if row["durable"] else "no", f"{row['writes_per_s']:,.0f}",
                      f"{row['commits_per_s']:,.0f}", f"{row['writes_per_commit']:.1f}",
                      f"{row['ratio']:.2f}x", row["against"])
    console.print(table)
    for name, row in result["cases"].items():
        if "vs_single_full" in row:
            console.print(f"{name}: {row['vs_single_full']:.1f}x the writes/s of one commit "
                          f"per write (sqlite FULL)")
        if "vs_normal" in row:
            console.print(f"{name}: {row['vs_normal']:.2f}x the writes/s of sqlite NORMAL, "
                          f"commit per write")
    console.print(f"{result['machine']}, CPython {result['python']}, sqlite {result['sqlite']}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="short windows, one round")
    parser.add_argument("--writers", type=int, nargs="+", help="writers per group (N)")
    parser.add_argument("--window", type=float, help="seconds each case runs per round")
    parser.add_argument("--rounds", type=int, help="rounds (best of)")
    parser.add_argument("--dir", help="where the sqlite files go (the disk measured)")
    parser.add_argument("--json", metavar="OUT", help="also write the figures as JSON to OUT")
    args = parser.parse_args(argv)
    result = run(args.quick, writers=args.writers, window=args.window, rounds=args.rounds,
                 directory=args.dir)
    render(result, Console())
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(result, out, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
