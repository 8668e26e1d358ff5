"""Shared objects of an APSYN session and the one way an action changes them, used alike by the
sync server and by every peer (so both hold the same values), plus access rules and a small
JSON Schema subset for status 42.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
from collections.abc import Mapping
from typing import Any

import orjson

from .wire import Action, AppSyncCodec, Create, Delete, Mode, ObjectInfo, Scope, Status, Update

__all__ = [
    "LAYER",
    "ActionRefused",
    "SharedObject",
    "action_digest",
    "action_id",
    "apply_action",
    "check_action",
    "object_from_json",
    "object_to_json",
    "schema_errors",
    "state_digest",
    "touched_paths",
    "value_digest",
    "visible_to",
    "writable_by",
]


LAYER = "appsync"


class ActionRefused(Exception):
    """An action that cannot apply to the state it met; ``status`` says why (not a peer's
    protocol error: a well-formed request the state refuses)."""

    def __init__(self, status: Status, why: str) -> None:
        super().__init__(why)
        self.status = status


@dataclasses.dataclass(frozen=True, slots=True)
class SharedObject:
    """One object: identity (scope, scope id, root name), access mode, owner's client id and
    its JSON value."""

    scope: Scope
    scope_id: str | None
    name: str
    mode: Mode
    owner: str
    value: Any

    @property
    def key(self) -> str:
        return f"{self.scope.value}/{self.scope_id or ''}/{self.name}"

    def info(self) -> ObjectInfo:
        return ObjectInfo(scope=self.scope, name=self.name, scope_id=self.scope_id)

    def as_create(self) -> Create:
        return Create(info=self.info(), mode=self.mode, data=self.value)


def object_to_json(obj: SharedObject) -> bytes:
    return orjson.dumps({"s": obj.scope.value, "i": obj.scope_id, "n": obj.name,
                         "m": obj.mode.value, "o": obj.owner, "d": obj.value})


def object_from_json(raw: bytes) -> SharedObject:
    data = orjson.loads(raw)
    return SharedObject(scope=Scope(data["s"]), scope_id=data["i"], name=data["n"],
                        mode=Mode(data["m"]), owner=data["o"], value=data["d"])


def owner_of(info: ObjectInfo, creator: str) -> str:
    """C objects belong to their scope id; G and L objects to the client that created them."""
    return info.scope_id if info.scope is Scope.CLIENT and info.scope_id else creator


def visible_to(obj: SharedObject, client_id: str) -> bool:
    return obj.owner == client_id or obj.mode is not Mode.NA


def writable_by(obj: SharedObject, client_id: str) -> bool:
    if obj.owner == client_id:
        return True
    return obj.scope is not Scope.CLIENT and obj.mode is Mode.RW


_IMMUTABLE = frozenset({str, int, float, bool, type(None)})


def _copied(value: Any) -> Any:
    """A copy of a JSON value nobody else holds: a string, number, boolean or null is
    immutable and kept as it is (what ``copy.deepcopy`` does with it, without its call)."""
    return value if type(value) in _IMMUTABLE else copy.deepcopy(value)


def merge_patch(target: Any, patch: Any, *, copy_values: bool = True) -> Any:
    """RFC 7396: a non-object patch replaces; members set to null are removed.
    ``copy_values`` False: the result shares the patch's values (for a comparison only)."""
    if not isinstance(patch, dict):
        return _copied(patch) if copy_values else patch
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value, copy_values=copy_values)
    return result


def touched_paths(action: Action) -> list[tuple[str, ...]]:
    """The property paths an action writes; () is the whole object. Two actions of different
    peers on one object conflict when a path of one is a prefix of a path of the other."""
    path = action.info.path
    if isinstance(action, Update) and not path and isinstance(action.data, dict):
        return [(key,) for key in action.data]
    return [path]


def _set_path(value: Any, path: tuple[str, ...], new: Any | None, *, delete: bool) -> Any:
    if not isinstance(value, dict):
        raise ActionRefused(Status.NOT_FOUND, "the property's parent is not an object")
    head, rest = path[0], path[1:]
    out = dict(value)
    if rest:
        if head not in out:
            raise ActionRefused(Status.NOT_FOUND, f"no property {head!r}")
        out[head] = _set_path(out[head], rest, new, delete=delete)
    elif delete:
        if head not in out:
            raise ActionRefused(Status.NOT_FOUND, f"no property {head!r}")
        del out[head]
    else:
        out[head] = _copied(new)
    return out


def _check_path(value: Any, path: tuple[str, ...], *, delete: bool) -> None:
    """Raise what ``_set_path`` would, without copying anything."""
    for depth, head in enumerate(path):
        if not isinstance(value, dict):
            raise ActionRefused(Status.NOT_FOUND, "the property's parent is not an object")
        if depth < len(path) - 1 or delete:
            if head not in value:
                raise ActionRefused(Status.NOT_FOUND, f"no property {head!r}")
            value = value[head]


def check_action(current: SharedObject | None, action: Action, client_id: str) -> None:
    """``ActionRefused`` if ``action`` by ``client_id`` cannot apply to ``current`` (what
    ``apply_action`` checks, without building the object after it: a round checks every
    request alone first, and a shared object's copy per request is what that would cost)."""
    info = action.info
    if isinstance(action, Create):
        if current is not None:
            raise ActionRefused(Status.ALREADY_EXISTS, f"{info.object_key} exists")
        if info.scope is Scope.CLIENT and info.scope_id != client_id:
            raise ActionRefused(Status.FORBIDDEN, "a C object belongs to its scope id")
        return
    if current is None:
        raise ActionRefused(Status.NOT_FOUND, f"no object {info.object_key}")
    if not writable_by(current, client_id):
        raise ActionRefused(Status.FORBIDDEN, f"{info.object_key} is {current.mode.value}")
    if info.path:
        _check_path(current.value, info.path, delete=isinstance(action, Delete))


def apply_action(current: SharedObject | None, action: Action, client_id: str
                 ) -> SharedObject | None:
    """The object after ``action`` by ``client_id`` (None: deleted), or ``ActionRefused``.
    Checks existence and access; schemas and rules are the server's."""
    check_action(current, action, client_id)
    info = action.info
    if isinstance(action, Create):
        return SharedObject(scope=info.scope, scope_id=info.scope_id, name=info.root,
                            mode=action.mode, owner=owner_of(info, client_id),
                            value=copy.deepcopy(action.data))
    assert current is not None
    path = info.path
    if isinstance(action, Delete):
        if not path:
            return None
        value = _set_path(current.value, path, None, delete=True)
    elif not path:
        value = merge_patch(current.value, action.data)
    else:
        value = _set_path(current.value, path, action.data, delete=False)
    return SharedObject(current.scope, current.scope_id, current.name, current.mode,
                        current.owner, value)


def set_property(obj: SharedObject, action: Update) -> SharedObject:
    """``obj`` with the first-level property ``action`` sets, set in ``obj`` itself: for a
    caller that made ``obj`` (its value a dict nobody else holds) and checked ``action``
    against it (``check_action``); ``apply_action`` copies instead."""
    obj.value[action.info.path[0]] = _copied(action.data)
    return obj


_TYPES: Mapping[str, tuple[type, ...]] = {
    "object": (dict,), "array": (list,), "string": (str,), "boolean": (bool,),
    "integer": (int,), "number": (int, float), "null": (type(None),),
}


def schema_errors(value: Any, schema: Mapping[str, Any], where: str = "$") -> list[str]:
    """What is wrong with ``value`` under a JSON Schema subset: type, enum, const, properties,
    required, additionalProperties (bool), items, minimum/maximum, min/maxLength, maxItems."""
    errors: list[str] = []
    kind = schema.get("type")
    if kind is not None:
        kinds = [kind] if isinstance(kind, str) else list(kind)
        ok = any(isinstance(value, _TYPES[k]) and not (
            k in ("integer", "number") and isinstance(value, bool)) for k in kinds)
        if not ok:
            return [f"{where}: not {kind}"]
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{where}: not one of the enum")
    if "const" in schema and value != schema["const"]:
        errors.append(f"{where}: not the const")
    if isinstance(value, int | float) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            errors.append(f"{where}: below minimum")
        if "maximum" in schema and value > schema["maximum"]:
            errors.append(f"{where}: above maximum")
    if isinstance(value, str):
        if len(value) < schema.get("minLength", 0):
            errors.append(f"{where}: too short")
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            errors.append(f"{where}: too long")
    if isinstance(value, list):
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            errors.append(f"{where}: too many items")
        if "items" in schema:
            for index, item in enumerate(value):
                errors += schema_errors(item, schema["items"], f"{where}[{index}]")
    if isinstance(value, dict):
        properties = schema.get("properties", {})
        for name in schema.get("required", ()):
            if name not in value:
                errors.append(f"{where}: {name} is required")
        for name, item in value.items():
            if name in properties:
                errors += schema_errors(item, properties[name], f"{where}.{name}")
            elif schema.get("additionalProperties", True) is False:
                errors.append(f"{where}: {name} is not allowed")
    return errors


def action_id(session: str, sync_round: int, action: Action) -> str:
    """The trace id of an applied action: the same at the server and at every peer."""
    return f"{session}:{sync_round:04X}:{action_digest(action)}"


def action_digest(action: Action) -> str:
    """What ``action_id`` ends with: a digest of the action's encoding, which the requesting
    peer knows before the server chose the round (its ``sync_request`` rows carry it)."""
    return hashlib.blake2b(AppSyncCodec().encode_action(action), digest_size=6).hexdigest()


def state_digest(values: Mapping[str, Any]) -> str:
    """A digest of a whole visible state (object key -> value): a peer's and what its CTRL
    holds for it are equal exactly when the two hold the same objects with the same values."""
    return hashlib.blake2b(orjson.dumps(values, option=orjson.OPT_SORT_KEYS),
                           digest_size=8).hexdigest()


def value_digest(obj: SharedObject | None) -> str:
    if obj is None:
        return "deleted"
    return hashlib.blake2b(orjson.dumps(obj.value, option=orjson.OPT_SORT_KEYS),
                           digest_size=8).hexdigest()
