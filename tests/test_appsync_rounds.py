"""One APSYN round on its own (``process_round``): the conflict groups found through the
bucketed candidate pairs (and the shortcut for peers writing properties of their own) are
those of testing every pair, on random requests; and its updates as the syncs carry them
(``as_sent``: property updates of one object merged into one)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gossamer.protocols.appsync import Delete, Mode, ObjectInfo, Scope, Status, Update
from gossamer.protocols.appsync import rounds as rounds_module
from gossamer.protocols.appsync.rounds import (
    MERGED_DEPTH,
    Request,
    Sent,
    as_sent,
    precheck,
    process_round,
)
from gossamer.protocols.appsync.state import SharedObject, apply_action
from gossamer.protocols.appsync.wire import MAX_DEPTH

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
def test_bucketed_pairs_and_the_apart_shortcut_find_the_groups_every_pair_would(
        specs: list[Any], number: int) -> None:
    fast = process_round("s", board(), [make(s) for s in specs], number)
    original, apart = rounds_module._candidate_pairs, rounds_module._apart
    try:
        rounds_module._candidate_pairs = all_pairs
        rounds_module._apart = lambda requests, indices: False
        slow = process_round("s", board(), [make(s) for s in specs], number)
    finally:
        rounds_module._candidate_pairs, rounds_module._apart = original, apart
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


# -- a round's updates as the syncs carry them (as_sent) -------------------------------------


def _applied(*actions: tuple[str, Any]) -> list[Any]:
    """Apply ``(client, action)`` in order to ``board()``: a round's applied list."""
    objects = board()
    out = []
    for client, action in actions:
        before = objects.get(action.info.object_key)
        after = apply_action(before, action, client)
        assert after is not None
        objects[after.key] = after
        out.append((client, action, before, after))
    return out


def _replayed(sent: list[Sent]) -> dict[str, Any]:
    """What a peer holding ``board()`` holds after applying ``sent``."""
    objects = board()
    for update in sent:
        key = update.action.info.object_key
        after = apply_action(objects.get(key), update.action, "0001")
        if after is None:
            objects.pop(key, None)
        else:
            objects[key] = after
    return {key: obj.value for key, obj in objects.items()}


def g(name: str) -> ObjectInfo:
    return ObjectInfo(Scope.GLOBAL, name)


def test_property_updates_of_one_object_in_a_round_are_sent_as_one_upd() -> None:
    applied = _applied(("0001", Update(g("o.a.x"), 5)), ("0002", Update(g("o.b.x"), 2.5)),
                       ("0003", Update(g("o.c"), "new")), ("0001", Update(g("o.d"), True)))
    sent = as_sent(applied)
    assert len(sent) == 1 and sent[0].merged
    assert sent[0].action == Update(g("o"), {"a": {"x": 5}, "b": {"x": 2.5}, "c": "new",
                                             "d": True})
    assert sent[0].parts == tuple((client, action) for client, action, _b, _a in applied)
    assert (sent[0].before, sent[0].after) == (applied[0][2], applied[-1][3])
    assert _replayed(sent) == {"G//o": applied[-1][3].value}


@pytest.mark.parametrize("second", [
    Update(g("o.b"), {"x": 1}),  # an object value: a path update replaces, a patch would merge
    Update(g("o.b"), None),  # null: a path update sets it, a patch would remove it
    Update(g("o.b"), [[1], 2]),  # a list: merged, it would nest deeper than its name
    Update(g("o.a"), 3),  # a prefix of the first's path
    Update(g("o.a.x"), 4),  # the same path again (one peer's two requests)
    Update(g("o"), {"b": {"x": 1}}),  # the whole object
    Delete(g("o.b")),
])
def test_updates_that_a_merge_would_change_are_sent_as_applied(second: Any) -> None:
    applied = _applied(("0001", Update(g("o.a.x"), 5)), ("0001", second))
    sent = as_sent(applied)
    assert [update.action for update in sent] == [Update(g("o.a.x"), 5), second]
    assert not any(update.merged for update in sent)


def test_a_property_deeper_than_merged_depth_is_sent_as_applied() -> None:
    deep: dict[str, Any] = {"z": 0}
    for name in reversed("abcdefgh"):
        deep = {name: deep}
    obj = SharedObject(Scope.GLOBAL, None, "o", Mode.RW, "0001", {**deep, "k": 0})
    nine = Update(g("o." + ".".join("abcdefgh") + ".z"), 1)
    assert len(nine.info.path) == MERGED_DEPTH + 1
    after = apply_action(obj, nine, "0001")
    last = apply_action(after, Update(g("o.k"), 2), "0001")
    sent = as_sent([("0001", nine, obj, after), ("0001", Update(g("o.k"), 2), after, last)])
    assert [update.merged for update in sent] == [False, False]


def test_runs_end_at_another_object_and_keep_apart_clients_are_never_merged() -> None:
    other = SharedObject(Scope.GLOBAL, None, "p", Mode.RW, "0001", {"k": 0})
    objects = {**board(), other.key: other}
    applied: list[Any] = []
    for client, action in [("0001", Update(g("o.a.x"), 1)), ("0002", Update(g("o.a.y"), 2)),
                           ("0001", Update(g("p.k"), 3)), ("0002", Update(g("o.b.x"), 4)),
                           ("zone", Update(g("o.c"), 5)), ("0003", Update(g("o.d"), 6))]:
        before = objects[action.info.object_key]
        after = apply_action(before, action, client)
        assert after is not None
        objects[after.key] = after
        applied.append((client, action, before, after))
    sent = as_sent(applied, frozenset({"zone"}))
    assert [len(update.parts) for update in sent] == [2, 1, 1, 1, 1]
    assert sent[0].action == Update(g("o"), {"a": {"x": 1, "y": 2}})
    assert [update.action for update in sent[1:]] == [a for _c, a, _b, _a in applied[2:]]


def test_a_run_whose_merge_would_not_give_the_same_object_is_sent_as_applied() -> None:
    """The check behind the rules: were ``before`` and ``after`` not what the run's merge
    gives (a rule missed), the run goes out action by action."""
    applied = _applied(("0001", Update(g("o.a.x"), 5)), ("0002", Update(g("o.b.x"), 6)))
    client, action, before, after = applied[-1]
    assert after is not None
    wrong = SharedObject(after.scope, after.scope_id, after.name, after.mode, after.owner,
                         {**after.value, "extra": 1})
    sent = as_sent([*applied[:-1], (client, action, before, wrong)])
    assert [update.merged for update in sent] == [False, False]


@settings(max_examples=150, deadline=None)
@given(st.lists(request, min_size=1, max_size=12), st.integers(1, 5))
def test_a_round_sent_merged_leaves_every_peer_where_the_round_left_ctrl(
        specs: list[Any], number: int) -> None:
    """Any round of the board's requests: applying what ``as_sent`` sends gives the objects
    the round left at CTRL, and every applied request is carried once, in the apply order."""
    objects = board()
    result = process_round("s", objects, [make(spec) for spec in specs], number, zone="0001",
                           max_objects=100, schemas={}, rule=None)
    sent = as_sent(result.applied)
    assert _replayed(sent) == {key: obj.value for key, obj in objects.items()}
    assert [part for update in sent for part in update.parts] == [
        (client, action) for client, action, _b, _a in result.applied]


@settings(max_examples=200, deadline=None)
@given(st.lists(request, min_size=1, max_size=14), st.integers(1, 5))
def test_a_round_without_steps_decides_and_sends_what_it_does_with_them(
        specs: list[Any], number: int) -> None:
    """``steps=False`` (CTRL without a trace) sets a first-level property in the object the
    round made instead of copying it again: the same codes, the same actions applied, the
    same objects at the end, what ``as_sent`` makes of them leaves every peer there too, and
    the objects the round started with are untouched."""
    with_steps, without = board(), board()
    start = {key: (obj, copy.deepcopy(obj.value)) for key, obj in without.items()}
    kept = process_round("s", with_steps, [make(spec) for spec in specs], number)
    quick = process_round("s", without, [make(spec) for spec in specs], number, steps=False)
    assert quick.codes == kept.codes
    assert [a[:2] for a in quick.applied] == [a[:2] for a in kept.applied]
    final = {k: o.value for k, o in without.items()}
    assert final == {k: o.value for k, o in with_steps.items()}
    assert _replayed(as_sent(quick.applied)) == final
    assert all(obj.value == value for obj, value in start.values())


def test_a_round_without_steps_copies_a_shared_object_once() -> None:
    """Ten peers' first-level properties of one board: one copy of it in the round (the first
    update's), and the other nine set in that copy."""
    objects = board()
    requests = [Request(f"{n:04X}", Update(ObjectInfo(Scope.GLOBAL, f"o.p{n}"), n))
                for n in range(1, 11)]
    result = process_round("s", objects, requests, 3, steps=False)
    afters = {id(after) for _c, _a, _b, after in result.applied}
    assert len(afters) == 1 and set(result.codes) == {Status.MULTIPLE_ACCEPTED}
    assert objects["G//o"].value == {"a": {"x": 0, "y": 0}, "b": {"x": 0},
                                     **{f"p{n}": n for n in range(1, 11)}}
    assert board()["G//o"].value == {"a": {"x": 0, "y": 0}, "b": {"x": 0}}


# -- requests checked as they arrive (precheck) ---------------------------------------------


def two_boards() -> dict[str, SharedObject]:
    """``board()`` and ``r``, read-only and owned by 0001: refusals (43, 44) to check early."""
    ro = SharedObject(Scope.GLOBAL, None, "r", Mode.RO, "0001", {"a": 1, "n": 2})
    return {**board(), ro.key: ro}


mixed = st.tuples(st.sampled_from(["0001", "0002", "0003"]),
                  st.sampled_from([*NAMES, "r.a", "r.n", "r", "q.a"]),
                  st.sampled_from(["upd", "patch", "del"]), st.integers(0, 2))


def decided(result: Any, objects: dict[str, SharedObject]) -> tuple[Any, ...]:
    return (result.codes, [a[:2] for a in result.applied],
            {key: obj.value for key, obj in objects.items()})


@settings(max_examples=200, deadline=None)
@given(st.lists(mixed, min_size=1, max_size=14), st.integers(1, 5), st.booleans())
def test_requests_checked_as_they_arrive_are_decided_as_the_round_would(
        specs: list[Any], number: int, steps: bool) -> None:
    """Each request prechecked against the objects the round starts with: the same codes, the
    same actions applied and the same objects as a round that checks everything itself (a
    peer's several requests on one object included: only its only one takes the verdict)."""
    early, late = two_boards(), two_boards()
    requests = [make(spec) for spec in specs]
    for request in requests:
        precheck(request, early)
    assert all(r.checked is None or r.checked is early[r.action.info.object_key]
               for r in requests if r.action is not None)
    quick = process_round("s", early, requests, number, steps=steps)
    full = process_round("s", late, [make(spec) for spec in specs], number, steps=steps)
    assert decided(quick, early) == decided(full, late)


def test_precheck_keeps_the_object_an_action_applies_to_and_nothing_it_refuses() -> None:
    objects = two_boards()
    ok = Request("0002", Update(g("o.a.x"), 1))
    read_only = Request("0002", Update(g("r.a"), 1))  # 43
    missing = Request("0002", Update(g("q.a"), 1))  # 44
    no_parent = Request("0002", Update(g("o.z.x"), 1))  # 44
    for request in (ok, read_only, missing, no_parent):
        precheck(request, objects)
    assert ok.checked is objects["G//o"]
    assert (read_only.checked, missing.checked, no_parent.checked) == (None, None, None)
    schema = Request("0002", Update(g("o.a.x"), 1))
    precheck(schema, objects, schemas={"o": {"type": "object"}})  # a schema needs the after
    ruled = Request("0002", Update(g("o.a.x"), 1))
    precheck(ruled, objects, rule=lambda call: True)  # a rule is asked at the round
    assert (schema.checked, ruled.checked) == (None, None)


@pytest.mark.parametrize(("now", "code"), [
    (SharedObject(Scope.GLOBAL, None, "o", Mode.RW, "0001", {"a": 5}), Status.NOT_FOUND),
    (SharedObject(Scope.GLOBAL, None, "o", Mode.RO, "0003", {"a": {"x": 0}}),
     Status.FORBIDDEN),
])
def test_a_verdict_for_another_object_than_the_rounds_is_not_taken(
        now: SharedObject, code: Status) -> None:
    """Checked against one instance of ``o``, decided where another stands under its key (a
    master zone's update came in between): the round checks it again and refuses it."""
    request = Request("0002", Update(g("o.a.x"), 1))
    precheck(request, board())
    assert request.checked is not None
    result = process_round("s", {now.key: now}, [request], 4)
    assert result.codes == [code] and result.applied == []


def test_a_merged_update_is_one_the_wire_accepts_as_it_is() -> None:
    """``as_sent`` builds its merged ``upd`` without checking its data again: its values are
    checked scalars nested at most MERGED_DEPTH, which the wire's limit allows."""
    assert MERGED_DEPTH < MAX_DEPTH
    applied = _applied(("0001", Update(g("o.a.x"), 5)), ("0002", Update(g("o.c"), "s")))
    merged = as_sent(applied)[0].action
    assert merged == Update(merged.info, merged.data)  # what checking it would have made
    assert Update.checked(g("o"), {"a": 1}) == Update(g("o"), {"a": 1})
