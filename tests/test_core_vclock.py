"""Vector clocks: hand cases for compare, algebraic properties of merge, and the wire forms."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gossamer.core import ConfigError, InvalidMessage, Order, ProtocolError, VectorClock

NODES = ["a", "b", "c", "n001", "n002"]
counts = st.integers(min_value=0, max_value=20)
entries = st.dictionaries(st.sampled_from(NODES), counts, max_size=len(NODES))
clocks = entries.map(VectorClock)
# compact form carries node ids, so use the node-id alphabet (no ',' or '=')
node_names = st.from_regex(r"\A[A-Za-z0-9][A-Za-z0-9_.:\-]{0,12}\Z")
wide_clocks = st.dictionaries(node_names, st.integers(0, 2**40), max_size=8).map(VectorClock)


def vc(**entries: int) -> VectorClock:
    return VectorClock(entries)


@pytest.mark.parametrize(
    ("left", "right", "expected"),
    [
        (vc(), vc(), Order.EQUAL),
        (vc(a=1), vc(a=1), Order.EQUAL),
        (vc(a=1, b=0), vc(a=1), Order.EQUAL),
        (vc(), vc(a=1), Order.BEFORE),
        (vc(a=1), vc(a=2), Order.BEFORE),
        (vc(a=1), vc(a=1, b=1), Order.BEFORE),
        (vc(a=2, b=3), vc(a=2, b=4, c=1), Order.BEFORE),
        (vc(a=1), vc(), Order.AFTER),
        (vc(a=3, b=1), vc(a=2, b=1), Order.AFTER),
        (vc(a=1), vc(b=1), Order.CONCURRENT),
        (vc(a=2, b=1), vc(a=1, b=2), Order.CONCURRENT),
        (vc(a=1, c=5), vc(a=2), Order.CONCURRENT),
    ],
)
def test_compare_hand_cases(left: VectorClock, right: VectorClock, expected: Order) -> None:
    assert left.compare(right) is expected


def test_dominates() -> None:
    assert vc(a=2, b=1).dominates(vc(a=1))
    assert vc(a=1).dominates(vc(a=1))
    assert not vc(a=1).dominates(vc(b=1))
    assert not vc(a=1).dominates(vc(a=2))


def merged(a: VectorClock, b: VectorClock) -> VectorClock:
    out = a.copy()
    out.merge(b)
    return out


@given(clocks, clocks)
def test_merge_is_commutative(a: VectorClock, b: VectorClock) -> None:
    assert merged(a, b) == merged(b, a)


@given(clocks, clocks, clocks)
def test_merge_is_associative(a: VectorClock, b: VectorClock, c: VectorClock) -> None:
    assert merged(merged(a, b), c) == merged(a, merged(b, c))


@given(clocks)
def test_merge_is_idempotent(a: VectorClock) -> None:
    assert merged(a, a) == a


@given(clocks, clocks)
def test_merge_dominates_both_inputs_and_is_the_least_such(a: VectorClock, b: VectorClock) -> None:
    m = merged(a, b)
    assert m.dominates(a)
    assert m.dominates(b)
    for node in set(a) | set(b):
        assert m[node] == max(a[node], b[node])


@given(clocks, clocks)
def test_merge_accepts_plain_mapping(a: VectorClock, b: VectorClock) -> None:
    from_mapping = a.copy()
    from_mapping.merge(b.to_wire())
    assert from_mapping == merged(a, b)


@given(clocks, st.sampled_from(NODES), st.integers(1, 5))
def test_increment_makes_clock_after_its_copy(a: VectorClock, node: str, by: int) -> None:
    before = a.copy()
    assert a.increment(node, by) == before[node] + by
    assert a.compare(before) is Order.AFTER
    assert before.compare(a) is Order.BEFORE


@given(clocks)
def test_copy_is_independent(a: VectorClock) -> None:
    clone = a.copy()
    clone.increment("z")
    assert a["z"] == 0
    assert clone != a


@given(clocks, clocks)
def test_compare_is_antisymmetric(a: VectorClock, b: VectorClock) -> None:
    forward, backward = a.compare(b), b.compare(a)
    assert (forward is Order.BEFORE) == (backward is Order.AFTER)
    assert (forward is Order.AFTER) == (backward is Order.BEFORE)
    assert (forward is Order.EQUAL) == (backward is Order.EQUAL)
    assert (forward is Order.CONCURRENT) == (backward is Order.CONCURRENT)
    assert (forward is Order.EQUAL) == (a == b)


@given(clocks, clocks)
def test_equal_clocks_hash_equal(a: VectorClock, b: VectorClock) -> None:
    if a == b:
        assert hash(a) == hash(b)


@given(wide_clocks)
def test_wire_round_trip(a: VectorClock) -> None:
    wire = a.to_wire()
    assert list(wire) == sorted(wire)
    assert all(count > 0 for count in wire.values())
    assert VectorClock.from_wire(wire) == a


@given(wide_clocks)
def test_compact_round_trip(a: VectorClock) -> None:
    text = a.encode_compact()
    assert VectorClock.decode_compact(text) == a


def test_compact_form_is_sorted_and_omits_zeros() -> None:
    assert vc(b=1, a=3, c=0).encode_compact() == "a=3,b=1"
    assert VectorClock().encode_compact() == ""
    assert VectorClock.decode_compact("") == VectorClock()
    assert VectorClock.decode_compact("a=0,b=2") == vc(b=2)


@given(entries)
def test_zeros_are_not_stored(raw: dict[str, int]) -> None:
    clock = VectorClock(raw)
    nonzero = {node: count for node, count in raw.items() if count}
    assert len(clock) == len(nonzero)
    assert set(clock) == set(nonzero)
    assert clock.to_wire() == dict(sorted(nonzero.items()))


def test_set_to_zero_removes_entry() -> None:
    clock = vc(a=2, b=1)
    clock.set("a", 0)
    assert list(clock) == ["b"]
    assert clock == vc(b=1)
    assert clock.to_wire() == {"b": 1}


def test_explicit_zero_equals_absent() -> None:
    assert vc(a=1, b=0) == vc(a=1)
    assert hash(vc(a=1, b=0)) == hash(vc(a=1))
    assert VectorClock.from_wire({"a": 0}) == VectorClock()


@pytest.mark.parametrize(
    "bad",
    [
        {"a": -1},
        {"a": 1.0},
        {"a": 1.5},
        {"a": "1"},
        {"a": None},
        {"a": True},
        {"a": False},
        {"a": [1]},
        [["a", 1]],
        "a=1",
        None,
        3,
    ],
)
def test_from_wire_rejects_bad_input(bad: object) -> None:
    with pytest.raises(InvalidMessage):
        VectorClock.from_wire(bad)


def test_from_wire_errors_are_protocol_errors() -> None:
    with pytest.raises(ProtocolError):
        VectorClock.from_wire({"a": -5})


@pytest.mark.parametrize("bad", ["a", "=1", "a=", "a=x", "a=-1", "a=1,", "a=1,,b=2", "a=²"])
def test_decode_compact_rejects_bad_input(bad: str) -> None:
    with pytest.raises(InvalidMessage):
        VectorClock.decode_compact(bad)


def test_local_misuse_raises_config_error() -> None:
    with pytest.raises(ConfigError):
        VectorClock({"a": -1})
    with pytest.raises(ConfigError):
        vc(a=1).increment("a", 0)
    with pytest.raises(ConfigError):
        vc(a=1).set("a", -1)
