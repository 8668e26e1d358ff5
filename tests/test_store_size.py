"""What a store holds, measured the same way by the simulator's MemoryStore and the network
runtime's SqliteStore: rows (``items``) and bytes of table, key and value (``size``)."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from gossamer.core import Store
from gossamer.runtimes.net import SqliteStore
from gossamer.runtimes.sim import MemoryStore

Op = tuple[str, str, str, bytes]

ops = st.lists(st.tuples(
    st.sampled_from(["put", "delete", "commit"]),
    st.sampled_from(["t", "tablé"]),
    st.sampled_from(["a", "b", "ключ"]),
    st.binary(max_size=20),
), max_size=30)


def replay(store: Store, steps: list[Op]) -> None:
    for op, table, key, value in steps:
        if op == "put":
            store.put(table, key, value)
        elif op == "delete":
            store.delete(table, key)
        else:
            store.commit()


def expected(steps: list[Op]) -> tuple[int, int]:
    rows: dict[tuple[str, str], bytes] = {}
    for op, table, key, value in steps:
        if op == "put":
            rows[(table, key)] = value
        elif op == "delete":
            rows.pop((table, key), None)
    size = sum(len(t.encode()) + len(k.encode()) + len(v) for (t, k), v in rows.items())
    return len(rows), size


def test_an_empty_store_holds_nothing(tmp_path: Path) -> None:
    for store in (MemoryStore(), SqliteStore(tmp_path / "s.sqlite")):
        assert (store.items, store.size) == (0, 0)
        store.close()


def test_size_counts_committed_and_pending_and_a_crash_forgets_pending() -> None:
    store = MemoryStore()
    store.put("t", "k", b"12345")
    store.commit()
    store.put("t", "k2", b"xy")
    store.delete("t", "k")
    assert (store.items, store.size) == (1, 1 + 2 + 2)
    store.crash()
    assert (store.items, store.size) == (1, 1 + 1 + 5)


@given(ops)
def test_both_stores_measure_the_same(steps: list[Op]) -> None:
    memory, sqlite = MemoryStore(), SqliteStore()
    replay(memory, steps)
    replay(sqlite, steps)
    want = expected(steps)
    assert (memory.items, memory.size) == want
    assert (sqlite.items, sqlite.size) == want
    sqlite.close()
