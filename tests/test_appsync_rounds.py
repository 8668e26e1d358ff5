"""One APSYN round on its own (``process_round``): the conflict groups found through the
bucketed candidate pairs are those of testing every pair, on random requests."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gossamer.protocols.appsync import Delete, Mode, ObjectInfo, Scope, Update
from gossamer.protocols.appsync import rounds as rounds_module
from gossamer.protocols.appsync.rounds import Request, process_round
from gossamer.protocols.appsync.state import SharedObject

NAMES = ["o", "o.a", "o.b", "o.a.x", "o.a.y", "o.b.x"]


def board() -> dict[str, SharedObject]:
    obj = SharedObject(Scope.GLOBAL, None, "o", Mode.RW, "0001",
                       {"a": {"x": 0, "y": 0}, "b": {"x": 0}})
    return {obj.key: obj}


request = st.tuples(st.sampled_from(["0001", "0002", "0003"]), st.sampled_from(NAMES),
                    st.sampled_from(["upd", "patch", "del"]), st.integers(0, 2))


def make(spec: tuple[str, str, str, int]) -> Request:
    client, name, kind, value = spec
    info = ObjectInfo(Scope.GLOBAL, name)
    if kind == "del" and "." in name:
        return Request(client, Delete(info))
    if kind == "patch" and name == "o":
        return Request(client, Update(info, {"a": {"x": value}}))
    return Request(client, Update(info, {"v": value} if name == "o" else value))


def all_pairs(requests: list[Request], indices: list[int]) -> set[tuple[int, int]]:
    return {(a, b) for n, a in enumerate(indices) for b in indices[n + 1:]}


@settings(max_examples=200, deadline=None)
@given(st.lists(request, max_size=9), st.integers(1, 0xFFFF))
def test_bucketed_pairs_find_the_groups_every_pair_would(specs: list[Any],
                                                          number: int) -> None:
    fast = process_round("s", board(), [make(s) for s in specs], number)
    original = rounds_module._candidate_pairs
    try:
        rounds_module._candidate_pairs = all_pairs
        slow = process_round("s", board(), [make(s) for s in specs], number)
    finally:
        rounds_module._candidate_pairs = original
    assert fast.codes == slow.codes
    assert [a[1] for a in fast.applied] == [a[1] for a in slow.applied]


def test_many_peers_on_one_property_are_one_group() -> None:
    requests = [Request(f"{n:04X}", Update(ObjectInfo(Scope.GLOBAL, "o.a"), n))
                for n in range(1, 201)]
    result = process_round("s", board(), requests, 7)
    assert sorted(int(c) for c in result.codes) == [22] + [32] * 199
    assert len(result.applied) == 1


@pytest.mark.parametrize("number", [1, 2, 3])
def test_the_winner_rotates_with_the_round(number: int) -> None:
    requests = [Request(c, Update(ObjectInfo(Scope.GLOBAL, "o.a"), c)) for c in
                ("0001", "0002", "0003")]
    result = process_round("s", board(), requests, number)
    winner = [r.client_id for r, c in zip(requests, result.codes, strict=True) if c == 22]
    assert winner == [["0001", "0002", "0003"][number % 3]]
