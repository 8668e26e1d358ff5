"""One round of an APSYN session, processed as simultaneous: each request checked on its own,
conflicts between peers resolved (majority, then a rotating priority), the accepted requests
applied in one order, and a status code for every request (docs/appsync-wire.md, Conflicts).
Pure: objects in, objects and codes out.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import orjson

from .state import (
    ActionRefused,
    SharedObject,
    apply_action,
    check_action,
    merge_patch,
    schema_errors,
    set_property,
    touched_paths,
    writable_by,
)
from .wire import Action, Create, ObjectInfo, Scope, Status, Update

__all__ = ["Request", "RoundResult", "RuleCall", "Sent", "as_sent", "precheck",
           "priority_order", "process_round", "signature_of"]


@dataclasses.dataclass(frozen=True, slots=True)
class RuleCall:
    """What an application rule is asked: may ``client_id`` do ``action`` (``before`` ->
    ``after``, None: absent)? A rule answering False refuses with 39."""

    session: str
    client_id: str
    action: Action
    before: Any
    after: Any


Rule = Callable[[RuleCall], bool]


@dataclasses.dataclass(slots=True)
class Request:
    """One request action of a peer; ``status`` preset (40, 55) for what did not parse;
    ``checked``: the object its action was found to apply to on its own (``precheck``)."""

    client_id: str
    action: Action | None
    status: Status | None = None
    checked: SharedObject | None = None


@dataclasses.dataclass(slots=True)
class RoundResult:
    codes: list[Status]  # one per request, in the order given
    applied: list[tuple[str, Action, SharedObject | None, SharedObject | None]]
    # (client, action, object before, object after), in the one apply order


def priority_order(clients: list[str], round_number: int) -> list[str]:
    """Client ids sorted, rotated by the round: each is first in turn."""
    ordered = sorted(clients)
    if not ordered:
        return ordered
    k = round_number % len(ordered)
    return ordered[k:] + ordered[:k]


def _overlap(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
    n = min(len(a), len(b))
    return a[:n] == b[:n]


def _conflict(x: Action, y: Action) -> bool:
    return any(_overlap(p, q) for p in touched_paths(x) for q in touched_paths(y))


def signature_of(action: Action) -> bytes:
    """What two requests share when they ask for the same thing (a majority, 24/34)."""
    return orjson.dumps([type(action).__name__, action.info.object_key, action.info.name,
                         getattr(action, "data", None),
                         getattr(getattr(action, "mode", None), "value", None)],
                        option=orjson.OPT_SORT_KEYS)


class _Round:
    def __init__(self, session: str, objects: Mapping[str, SharedObject], round_number: int,
                 *, zone: str, max_objects: int, schemas: Mapping[str, Mapping[str, Any]],
                 rule: Rule | None) -> None:
        self.session = session
        self.objects = objects
        self.round = round_number
        self.zone = zone
        self.max_objects = max_objects
        self.schemas = schemas
        self.rule = rule

    def settable(self, action: Action) -> bool:
        """``action`` sets a first-level property of an object no schema or rule looks at
        (what ``process_round`` may set in an object it made this round)."""
        return (isinstance(action, Update) and len(action.info.path) == 1
                and self.rule is None and action.info.root not in self.schemas)

    def check(self, current: SharedObject | None, action: Action, client: str,
              count: int, *, need_after: bool = True) -> SharedObject | None:
        """The object after ``action``, or ``ActionRefused`` (any status but 2x).
        ``need_after=False``: the caller only asks whether it may apply; where no schema or
        rule needs the object after it either, it is not built (returns ``current``)."""
        info = action.info
        if info.scope is Scope.LOCAL and info.scope_id not in (None, self.zone):
            raise ActionRefused(Status.NOT_IMPLEMENTED, "L objects of another zone")
        if isinstance(action, Create) and current is None and count >= self.max_objects:
            raise ActionRefused(Status.SERVICE_UNAVAILABLE, "the session is full")
        schema = self.schemas.get(info.root)
        if not need_after and schema is None and self.rule is None:
            check_action(current, action, client)
            return current
        after = apply_action(current, action, client)
        if after is not None and schema is not None and schema_errors(after.value, schema):
            raise ActionRefused(Status.VALIDATION_FAILED, "; ".join(
                schema_errors(after.value, schema)[:3]))
        if self.rule is not None:
            try:
                allowed = self.rule(RuleCall(
                    session=self.session, client_id=client, action=action,
                    before=None if current is None else current.value,
                    after=None if after is None else after.value))
            except Exception as exc:  # an application rule's fault is the server's: 50
                raise ActionRefused(Status.INTERNAL_ERROR, f"rule failed: {exc!r}") from exc
            if not allowed:
                raise ActionRefused(Status.PERMANENT_CONFLICT, "refused by an application rule")
        return after


_KEPT_AT_APPLY = frozenset({Status.INTERNAL_ERROR, Status.SERVICE_UNAVAILABLE})


def precheck(request: Request, objects: Mapping[str, SharedObject], *, zone: str = "0001",
             max_objects: int = 10_000, schemas: Mapping[str, Mapping[str, Any]] | None = None,
             rule: Rule | None = None) -> None:
    """Step 1 of ``process_round`` for one request, done as it arrives (a server waiting for
    a round's requests is idle, and the round's end is what its peers wait for): an update
    or delete of an object no schema or rule looks at, that applies to the object as it is
    now, has that object kept in ``checked``. ``process_round`` takes the verdict where its
    round meets the same instance under the key (nothing made another since, and an object
    is changed in place only by the round that made it) and the request is its peer's only
    one on the object; anything else is checked there as before. Same arguments as
    ``process_round``."""
    action = request.action
    if request.status is not None or action is None or isinstance(action, Create) or \
            rule is not None or (schemas is not None and action.info.root in schemas):
        return
    current = objects.get(action.info.object_key)
    if current is None:
        return
    rnd = _Round("", objects, 0, zone=zone, max_objects=max_objects, schemas=schemas or {},
                 rule=None)  # neither the session nor the round matters without a rule
    try:  # step 1's own check, as the round would make it for the peer's only request
        rnd.check(current, action, request.client_id, len(objects), need_after=False)
    except ActionRefused:
        return  # refused: the round says why
    request.checked = current


def process_round(session: str, objects: dict[str, SharedObject], requests: list[Request],
                  round_number: int, *, zone: str = "0001", max_objects: int = 10_000,
                  schemas: Mapping[str, Mapping[str, Any]] | None = None,
                  rule: Rule | None = None, steps: bool = True) -> RoundResult:
    """Process one round's ``requests`` against ``objects`` (changed in place).

    ``steps`` False: the caller reads of ``applied`` only the actions and each key's last
    object (what the syncs and the store need; not each update's digest: no trace). A
    first-level property update of an object an earlier update of this round made (its value
    a dict nobody else holds) then sets the property in that object instead of copying it
    again: one copy of a shared object a round, not one per update (500 peers' updates of one
    board copied it 250 times a round). Every entry of ``applied`` on that object then shares
    it as its ``after`` (and all but the first as their ``before``): its state at the end of
    the round. What ``as_sent`` makes of them applies to the same objects (it merges only
    updates whose merge is the same by construction), though it may merge fewer of them."""
    rnd = _Round(session, objects, round_number, zone=zone, max_objects=max_objects,
                 schemas=schemas or {}, rule=rule)
    codes: list[Status | None] = [r.status for r in requests]
    # 1. each request on its own, against the round's start plus the peer's own earlier ones
    # (the object after a request is built only for a later request of the same peer on it)
    views: dict[str, dict[str, SharedObject | None]] = {}
    later: dict[tuple[str, str], int] = {}  # (client, object) -> its requests still to check
    for request in requests:
        if request.action is not None:
            pair = (request.client_id, request.action.info.object_key)
            later[pair] = later.get(pair, 0) + 1
    valid: list[int] = []
    for index, request in enumerate(requests):
        if codes[index] is not None or request.action is None:
            codes[index] = codes[index] or Status.BAD_REQUEST
            continue
        view = views.setdefault(request.client_id, {})
        key = request.action.info.object_key
        current = view[key] if key in view else objects.get(key)
        pair = (request.client_id, key)
        later[pair] -= 1
        if request.checked is current and current is not None and later[pair] == 0:
            valid.append(index)  # checked as it arrived, against this very object
            continue
        try:
            after = rnd.check(current, request.action, request.client_id, len(objects),
                              need_after=later[pair] > 0)
        except ActionRefused as refused:
            codes[index] = refused.status
            continue
        if later[pair] > 0:
            view[key] = after
        valid.append(index)
    # 2. conflicts between peers, per object
    by_object: dict[str, list[int]] = {}
    for index in valid:
        action = requests[index].action
        assert action is not None
        by_object.setdefault(action.info.object_key, []).append(index)
    represented: set[int] = set()  # accepted requests that apply (majority: one copy)
    for indices in by_object.values():
        parent = {i: i for i in indices}

        def find(i: int, parent: dict[int, int] = parent) -> int:
            while parent[i] != i:
                parent[i] = parent[parent[i]]
                i = parent[i]
            return i

        if len({requests[i].client_id for i in indices}) == 1:  # one peer's: no conflict
            for i in indices:
                codes[i] = Status.ACCEPTED
            represented.update(indices)
            continue
        if _apart(requests, indices):  # peers' properties of their own: all 23, no pairs
            for i in indices:
                codes[i] = Status.MULTIPLE_ACCEPTED
            represented.update(indices)
            continue
        for a, b in _candidate_pairs(requests, indices):
            ra, rb = requests[a], requests[b]
            if ra.client_id != rb.client_id and ra.action is not None and \
                    rb.action is not None and _conflict(ra.action, rb.action):
                parent[find(a)] = find(b)
        groups: dict[int, list[int]] = {}
        for i in indices:
            groups.setdefault(find(i), []).append(i)
        accepted_clients: set[str] = set()
        solo: list[int] = []
        for group in groups.values():
            if len(group) == 1:  # the usual case: a request no other one conflicts with
                solo.append(group[0])
                accepted_clients.add(requests[group[0]].client_id)
                continue
            clients = sorted({requests[i].client_id for i in group})
            if len(clients) == 1:
                solo += group
                accepted_clients.add(clients[0])
                continue
            _resolve(requests, group, clients, round_number, codes, represented,
                     accepted_clients)
        for i in solo:
            codes[i] = (Status.ACCEPTED if accepted_clients == {requests[i].client_id}
                        else Status.MULTIPLE_ACCEPTED)
            represented.add(i)
    # 3. apply in the round's priority order, each peer's requests in its order
    applied: list[tuple[str, Action, SharedObject | None, SharedObject | None]] = []
    clients = sorted({r.client_id for r in requests})
    position = {c: n for n, c in enumerate(priority_order(clients, round_number))}
    order = sorted(represented, key=lambda i: (position[requests[i].client_id], i))
    made: dict[str, SharedObject] = {}  # steps False: objects this loop made, by key
    for index in order:
        request = requests[index]
        action = request.action
        assert action is not None
        key = action.info.object_key
        before = objects.get(key)
        try:
            if before is not None and made.get(key) is before and rnd.settable(action) and \
                    writable_by(before, request.client_id) and isinstance(before.value, dict):
                # what ``check`` asks of a first-level property update (its zone was seen
                # in step 1): the property's object exists, may be written and is an object
                assert isinstance(action, Update)  # as settable says
                after = set_property(before, action)
            else:
                after = rnd.check(before, action, request.client_id, len(objects))
                if not steps and after is not None:
                    made[key] = after
        except ActionRefused as refused:
            # the server's own trouble keeps its code (50; 53: an accepted create before it
            # filled the session); anything else changed under it: a rival accepted first
            codes[index] = (refused.status if refused.status in _KEPT_AT_APPLY
                            else Status.REFUSED_TEMPORARY)
            continue
        if after is None:
            objects.pop(key, None)
        else:
            objects[key] = after
        applied.append((request.client_id, action, before, after))
    return RoundResult(codes=[c if c is not None else Status.INTERNAL_ERROR for c in codes],
                       applied=applied)


def _apart(requests: list[Request], indices: list[int]) -> bool:
    """Whether each of these requests writes one first-level property no other one writes
    (a round of a shared board: every peer its own): then no path of one is a prefix of a
    path of another, no two conflict, and every group ``process_round`` forms is one
    request."""
    heads: set[str] = set()
    for i in indices:
        action = requests[i].action
        assert action is not None
        path = action.info.path
        if len(path) != 1 or path[0] in heads:
            return False
        heads.add(path[0])
    return True


def _candidate_pairs(requests: list[Request], indices: list[int]
                     ) -> set[tuple[int, int]]:
    """Pairs of requests on one object to test for a conflict, enough for the groups to come
    out as if every pair were tested. Only paths with one first segment (or the whole object)
    overlap; a request writing a whole first-level property (a hub) overlaps every other in
    its bucket, so each of those is paired with one hub of another client (O(n), so 1,000
    peers on one property are no n^2); deeper paths are paired among themselves."""
    buckets: dict[str | None, list[int]] = {}
    exact: dict[str | None, list[int]] = {}
    for i in indices:
        action = requests[i].action
        assert action is not None
        for path in touched_paths(action):
            head = path[0] if path else None
            buckets.setdefault(head, []).append(i)
            if len(path) <= 1:
                exact.setdefault(head, []).append(i)
    pairs: set[tuple[int, int]] = set()

    def one_of_another_client(among: list[int]) -> tuple[int, int | None]:
        first = among[0]
        other = next((i for i in among if requests[i].client_id != requests[first].client_id),
                     None)
        return first, other

    def pair_each(sources: list[int], among: list[int]) -> None:
        """Each of ``sources`` with one of ``among`` of another client, if there is one."""
        first, other = one_of_another_client(among)
        for m in sources:
            target = first if requests[m].client_id != requests[first].client_id else other
            if target is not None and target != m:
                pairs.add((m, target))

    def hubs_with(hubs: list[int], members: list[int]) -> None:
        pair_each(members, hubs)  # a member overlaps every hub
        pair_each(hubs, members)  # and a hub every member

    if None in exact:  # the whole object: every request overlaps
        hubs_with(exact[None], indices)
    for head, members in buckets.items():
        if head is None or len(members) == 1:  # alone under its head: only the whole-
            continue  # object requests overlap it, paired above
        if head in exact:
            hubs_with(exact[head], members)
        deeper = [i for i in members if i not in set(exact.get(head, ()))]
        pairs.update((a, b) for n, a in enumerate(deeper) for b in deeper[n + 1:])
    return pairs


def _resolve(requests: list[Request], group: list[int], clients: list[str], round_number: int,
             codes: list[Status | None], represented: set[int],
             accepted_clients: set[str]) -> None:
    """A group of conflicting requests of several peers: majority, else rotating priority."""
    by_client: dict[str, list[int]] = {c: [] for c in clients}
    for i in group:
        by_client[requests[i].client_id].append(i)
    signatures: dict[bytes, list[str]] = {}
    for client, mine in by_client.items():
        sig = b"|".join(signature_of(requests[i].action) for i in mine  # type: ignore[arg-type]
                        )
        signatures.setdefault(sig, []).append(client)
    best = max(signatures.values(), key=len)
    if len(best) >= 2 and 2 * len(best) > len(clients):
        winner = priority_order(best, round_number)[0]
        for client, mine in by_client.items():
            for i in mine:
                codes[i] = (Status.MAJORITY_ACCEPTED if client in best
                            else Status.INFERIOR_TO_MAJORITY)
                if client == winner:
                    represented.add(i)
        accepted_clients.update(best)
        return
    accepted: list[int] = []
    for client in priority_order(clients, round_number):
        for i in by_client[client]:
            action = requests[i].action
            assert action is not None
            rivals = {requests[j].client_id for j in accepted
                      if requests[j].client_id != client
                      and _conflict(action, requests[j].action)}  # type: ignore[arg-type]
            if rivals:
                codes[i] = Status.INFERIOR if len(rivals) == 1 else Status.INFERIOR_TO_MULTIPLE
            else:
                codes[i] = Status.PREFERRED
                accepted.append(i)
                represented.add(i)
                accepted_clients.add(client)


Applied = tuple[str, Action, SharedObject | None, SharedObject | None]
#: the deepest property path ``as_sent`` merges (a merged upd nests its values this deep)
MERGED_DEPTH = 8
_SCALARS = (str, int, float)  # bool is an int


@dataclasses.dataclass(frozen=True, slots=True)
class Sent:
    """An update as CTRL sends it in its syncs: one applied action, or a run of property
    updates of one object merged into one ``upd`` of the object (``parts``: the applied
    ``(client, action)`` it carries, in the apply order)."""

    action: Action
    before: SharedObject | None
    after: SharedObject | None
    parts: tuple[tuple[str, Action], ...]

    @property
    def merged(self) -> bool:
        return len(self.parts) > 1

    @classmethod
    def alone(cls, entry: Applied) -> Sent:
        """One applied ``(client, action, before, after)`` sent as it was applied."""
        client, action, before, after = entry
        return cls(action, before, after, ((client, action),))


def as_sent(applied: Sequence[Applied], keep_apart: frozenset[str] = frozenset(), *,
            merge: bool = True) -> list[Sent]:
    """A round's applied actions as its syncs carry them (docs/appsync-wire.md, *One upd per
    object*): consecutive updates of one object that each set a property at most
    ``MERGED_DEPTH`` names deep to a string, number or boolean, on paths none of which is a
    prefix of another, become one ``upd`` of the object whose ``d`` holds them all (so a
    merged update nests no deeper than its names). Applying it as a merge patch gives the object
    exactly what applying them one by one did (checked here: a run whose merge would not is
    sent as it was applied). A 500-peer round of property updates is one action, not 250,
    and its syncs a third of the bytes. Actions of the clients in ``keep_apart`` (a master
    zone's, relayed as the master sent them) are never merged; ``merge`` False: nothing is."""
    if not merge:
        return [Sent.alone(entry) for entry in applied]
    out: list[Sent] = []
    run: list[Applied] = []
    paths: set[tuple[str, ...]] = set()
    prefixes: set[tuple[str, ...]] = set()

    def close() -> None:
        merged = _merged(run) if len(run) > 1 else None
        if merged is not None:
            out.append(merged)
        else:
            out.extend(Sent.alone(entry) for entry in run)
        run.clear()
        paths.clear()
        prefixes.clear()

    for entry in applied:
        client, action = entry[0], entry[1]
        path = action.info.path
        if (not isinstance(action, Update) or not 0 < len(path) <= MERGED_DEPTH
                or client in keep_apart or not isinstance(action.data, _SCALARS)):
            close()
            out.append(Sent.alone(entry))
            continue
        deep = len(path) > 1  # a first-level property has no prefix to look at
        if run and (run[0][1].info.object_key != action.info.object_key
                    or path in paths or path in prefixes
                    or (deep and any(path[:n] in paths for n in range(1, len(path))))):
            close()
        run.append(entry)
        paths.add(path)
        if deep:
            prefixes.update(path[:n] for n in range(1, len(path)))
    close()
    return out


def _merged(run: list[Applied]) -> Sent | None:
    """One ``upd`` of the run's object carrying every property the run set, or None when
    applying it would not give what the run gave."""
    patch: dict[str, Any] = {}
    for _client, action, _before, _after in run:
        assert isinstance(action, Update)  # as_sent runs only updates together
        *parents, leaf = action.info.path
        into = patch
        for name in parents:
            into = into.setdefault(name, {})
        into[leaf] = action.data
    first, last = run[0], run[-1]
    before, after = first[2], last[3]
    if before is None or after is None or \
            merge_patch(before.value, patch, copy_values=False) != after.value:
        return None
    info = first[1].info
    # its values are the run's checked scalars, nested at most MERGED_DEPTH (< the wire's
    # MAX_DEPTH): nothing to check again
    action = Update.checked(ObjectInfo(info.scope, info.root, info.scope_id), patch)
    return Sent(action, before, after, tuple((client, part) for client, part, _b, _a in run))

