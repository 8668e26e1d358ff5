"""``RowLog``: append-only rows of numbered entries, bounded at the front, cut at the tail."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gossamer.core.errors import StateError
from gossamer.core.rowlog import RowLog
from gossamer.runtimes.sim.store import MemoryStore


def rows_of(store: MemoryStore, table: str = "t") -> dict[tuple[str, int], dict[int, bytes]]:
    """(name, row's first position) -> position -> entry, parsed from the stored bytes."""
    found: dict[tuple[str, int], dict[int, bytes]] = {}
    for key, raw in store.scan(table):
        name, first = orjson.loads(key)
        entries: dict[int, bytes] = {}
        offset = 0
        while offset < len(raw):
            a = raw.index(b" ", offset)
            b = raw.index(b" ", a + 1)
            length = int(raw[a + 1:b])
            entries[int(raw[offset:a])] = raw[b + 1:b + 1 + length]
            offset = b + 1 + length
        found[(name, first)] = entries
    return found


def test_each_write_adds_one_row_per_name_with_only_the_new_entries() -> None:
    store = MemoryStore()
    log = RowLog(store, "t")
    log.append("a", 1, b"one")
    log.append("a", 2, b"two with spaces 3 4")
    log.append("b", 7, b"")
    assert list(store.scan("t")) == []  # held until written
    log.write_pending()
    log.append("a", 3, b"three")
    log.write_pending()
    assert rows_of(store) == {("a", 1): {1: b"one", 2: b"two with spaces 3 4"},
                              ("a", 3): {3: b"three"}, ("b", 7): {7: b""}}
    assert log.stored_rows == 3
    again = RowLog(store, "t")
    assert again.load() == {"a": [(1, b"one"), (2, b"two with spaces 3 4"), (3, b"three")],
                            "b": [(7, b"")]}
    again.append("a", 4, b"four")  # it goes on from the loaded positions
    with pytest.raises(StateError, match="appends position 6 after 4"):
        again.append("a", 6, b"gap")


def test_drop_before_deletes_only_rows_wholly_below_the_bound() -> None:
    store = MemoryStore()
    log = RowLog(store, "t")
    for position in range(1, 5):
        log.append("a", position, b"%d" % position)
    log.write_pending()  # row 1-4
    for position in range(5, 7):
        log.append("a", position, b"%d" % position)
        log.write_pending()  # rows 5 and 6
    log.drop_before("a", 5)
    assert sorted(rows_of(store)) == [("a", 5), ("a", 6)]
    log.drop_before("a", 6)
    assert sorted(rows_of(store)) == [("a", 6)]
    log.append("a", 7, b"7")
    log.drop_before("a", 9)  # everything, the held entry too
    log.write_pending()
    assert rows_of(store) == {} and log.last("a") is None
    log.append("a", 20, b"20")  # a name with nothing starts anywhere
    assert log.last("a") == 20


def test_a_row_the_bound_falls_in_stays_until_its_last_position_goes() -> None:
    store = MemoryStore()
    log = RowLog(store, "t")
    for position in range(10):
        log.append("a", position, b"%d" % position)
    log.write_pending()
    log.drop_before("a", 5)
    assert sorted(rows_of(store)) == [("a", 0)]  # positions 5-9 are in it
    assert RowLog(store, "t").load()["a"][0] == (0, b"0")  # the caller bounds what it keeps


def test_cut_from_deletes_later_rows_and_rewrites_the_one_it_falls_in() -> None:
    store = MemoryStore()
    log = RowLog(store, "t")
    for position in range(6):
        log.append("a", position, b"old%d" % position)
    log.write_pending()  # row 0-5
    for position in range(6, 9):
        log.append("a", position, b"old%d" % position)
        log.write_pending()  # rows 6, 7, 8
    log.append("a", 9, b"held")
    log.cut_from("a", 3, lambda position: b"kept%d" % position if position >= 1 else None)
    assert rows_of(store) == {("a", 0): {1: b"kept1", 2: b"kept2"}}
    assert log.last("a") == 2
    log.append("a", 3, b"new3")
    log.write_pending()
    assert RowLog(store, "t").load() == {"a": [(1, b"kept1"), (2, b"kept2"), (3, b"new3")]}
    log.cut_from("a", 0, lambda position: None)
    assert rows_of(store) == {} and log.last("a") is None


def test_a_store_in_the_former_layout_is_refused_with_a_clear_error() -> None:
    store = MemoryStore()
    store.put("old", "a 000000000000", b"anything")
    with pytest.raises(StateError, match=r"older gossamer.*new data directory"):
        RowLog(store, "t", former_table="old").load()


def test_a_damaged_row_is_a_state_error() -> None:
    store = MemoryStore()
    store.put("t", '["a",1]', b"1 50 short")
    with pytest.raises(StateError, match="damaged"):
        RowLog(store, "t").load()
    store = MemoryStore()
    store.put("t", "not json", b"")
    with pytest.raises(StateError, match="damaged"):
        RowLog(store, "t").load()


operations = st.lists(st.one_of(
    st.tuples(st.just("append"), st.integers(1, 4)),
    st.tuples(st.just("write"), st.just(0)),
    st.tuples(st.just("drop"), st.integers(0, 6)),
    st.tuples(st.just("cut"), st.integers(0, 6)),
    st.tuples(st.just("reload"), st.just(0)),
), max_size=40)


@settings(max_examples=200, deadline=None)
@given(operations)
def test_what_reloads_is_the_model_after_every_sequence_of_operations(ops: list) -> None:
    """Against a model (a dict of position -> entry, and the bound): after any sequence,
    a reload gives every written position at or above the bound, in order; rows never
    outlive their positions by more than the one the bound falls in."""
    store = MemoryStore()
    log = RowLog(store, "t")
    model: dict[int, bytes] = {}  # what the caller keeps (its positions, bounded)
    written: set[int] = set()  # positions whose entry is in a row
    bound = 0
    next_position = 0
    for op, arg in ops:
        if op == "append":
            for _ in range(arg):
                entry = b"e%d" % next_position
                log.append("n", next_position, entry)
                model[next_position] = entry
                next_position += 1
        elif op == "write":
            log.write_pending()
            written |= set(model)
        elif op == "drop":
            bound = min(next_position, bound + arg)
            log.drop_before("n", bound)
            model = {p: e for p, e in model.items() if p >= bound}
        elif op == "cut":
            start = max(bound, next_position - arg)
            log.cut_from("n", start, model.get)
            model = {p: e for p, e in model.items() if p < start}
            written = {p for p in written if p < start}
            next_position = start
        else:  # a restart: what was not written is lost
            log.write_pending()
            written |= set(model)
            log = RowLog(store, "t")
            loaded = dict(log.load().get("n", []))
            assert {p: e for p, e in loaded.items() if p >= bound} == model
            log.drop_before("n", bound)  # what the caller keeps, as the keeper's load does
    log.write_pending()
    loaded = dict(RowLog(store, "t").load().get("n", []))
    assert {p: e for p, e in loaded.items() if p >= bound} == model
    assert all(p < bound for p in set(loaded) - set(model))
    assert log.stored_rows == len(list(store.scan("t")))
