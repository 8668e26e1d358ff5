"""The simulator's crash-aware MemoryStore."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gossamer.core import Store, get_json, put_json
from gossamer.runtimes.sim import MemoryStore


def test_is_a_store() -> None:
    assert isinstance(MemoryStore(), Store)


def test_read_your_writes_before_commit() -> None:
    store = MemoryStore()
    assert store.get("t", "k") is None
    store.put("t", "k", b"v1")
    assert store.get("t", "k") == b"v1"
    assert store.uncommitted == 1
    store.put("t", "k", b"v2")
    assert store.get("t", "k") == b"v2"
    assert store.get("other", "k") is None
    store.delete("t", "k")
    assert store.get("t", "k") is None


def test_delete_of_committed_is_visible_before_commit() -> None:
    store = MemoryStore()
    store.put("t", "k", b"v")
    store.commit()
    store.delete("t", "k")
    assert store.get("t", "k") is None
    store.delete("t", "absent")  # absent keys are fine
    store.crash()
    assert store.get("t", "k") == b"v"


def test_scan_is_sorted_and_merges_pending() -> None:
    store = MemoryStore()
    for key in ["c", "a", "e", "b"]:
        store.put("t", key, key.encode())
    store.put("u", "z", b"other table")
    store.commit()
    store.put("t", "d", b"new")
    store.put("t", "a", b"changed")
    store.delete("t", "e")
    store.delete("t", "never")
    assert list(store.scan("t")) == [("a", b"changed"), ("b", b"b"), ("c", b"c"), ("d", b"new")]
    assert list(store.scan("u")) == [("z", b"other table")]
    assert list(store.scan("empty")) == []


def test_crash_drops_pending_only() -> None:
    store = MemoryStore()
    store.put("t", "kept", b"1")
    store.commit()
    store.put("t", "lost", b"2")
    store.put("t", "kept", b"overwritten")
    store.crash()
    assert store.uncommitted == 0
    assert store.get("t", "lost") is None
    assert store.get("t", "kept") == b"1"
    assert list(store.scan("t")) == [("kept", b"1")]


def test_commit_persists() -> None:
    store = MemoryStore()
    store.put("t", "a", b"1")
    store.put("t", "b", b"2")
    store.commit()
    assert store.uncommitted == 0
    store.delete("t", "a")
    store.commit()
    store.crash()
    assert list(store.scan("t")) == [("b", b"2")]


@pytest.mark.parametrize("value", ["text", bytearray(b"x"), memoryview(b"x"), None, 1])
def test_put_of_non_bytes_raises(value: object) -> None:
    store = MemoryStore()
    with pytest.raises(TypeError):
        store.put("t", "k", value)  # type: ignore[arg-type]
    assert store.get("t", "k") is None
    assert store.uncommitted == 0


def test_json_helpers() -> None:
    store = MemoryStore()
    assert get_json(store, "t", "k") is None
    put_json(store, "t", "k", {"a": [1, 2]})
    assert get_json(store, "t", "k") == {"a": [1, 2]}


ops = st.lists(
    st.tuples(
        st.sampled_from(["put", "delete", "commit", "crash"]),
        st.sampled_from(["t", "u"]),
        st.sampled_from(["a", "b", "c"]),
        st.binary(max_size=3),
    ),
    max_size=40,
)


@given(ops)
def test_matches_a_simple_model(steps: list[tuple[str, str, str, bytes]]) -> None:
    store = MemoryStore()
    durable: dict[tuple[str, str], bytes] = {}
    visible: dict[tuple[str, str], bytes] = {}
    for op, table, key, value in steps:
        if op == "put":
            store.put(table, key, value)
            visible[(table, key)] = value
        elif op == "delete":
            store.delete(table, key)
            visible.pop((table, key), None)
        elif op == "commit":
            store.commit()
            durable = dict(visible)
        else:
            store.crash()
            visible = dict(durable)
        for tbl in ("t", "u"):
            expected = sorted((k, v) for (t, k), v in visible.items() if t == tbl)
            assert list(store.scan(tbl)) == expected
            for k in ("a", "b", "c"):
                assert store.get(tbl, k) == visible.get((tbl, k))
