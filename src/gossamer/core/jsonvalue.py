"""What a replicated value may be: a JSON value the wire carries as it is, the same at every
replica. ``json_copy`` is what the services' APIs hand to their protocols: the caller's
object encoded and decoded (a tuple becomes a list, a change the caller makes later is not
seen), so the replica that made it holds what the others decode; what JSON would change or
cannot carry (NaN and infinities, which orjson writes as null; integers beyond 64 bits; sets;
keys that are not strings) is refused with ``ConfigError`` before anything is sent."""

from __future__ import annotations

import math
from typing import Any

import orjson

from .errors import ConfigError

__all__ = ["INT_MAX", "INT_MIN", "MAX_JSON_DEPTH", "check_json_value", "json_copy"]

MAX_JSON_DEPTH = 64
#: the integers JSON on our wire carries (64 bits, signed or unsigned)
INT_MIN, INT_MAX = -(1 << 63), (1 << 64) - 1


def check_json_value(value: Any, max_depth: int = MAX_JSON_DEPTH, depth: int = 0) -> None:
    """``ValueError`` unless ``value`` is a JSON value the wire can carry as it is: nested at
    most ``max_depth``, objects with string keys, integers within 64 bits, finite numbers."""
    if depth > max_depth:
        raise ValueError(f"JSON nested deeper than {max_depth}")
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise ValueError(f"a JSON object's keys are strings, got {key!r}")
            check_json_value(item, max_depth, depth + 1)
    elif isinstance(value, list | tuple):
        for item in value:
            check_json_value(item, max_depth, depth + 1)
    elif isinstance(value, str | bool) or value is None:
        return
    elif isinstance(value, int):
        if not INT_MIN <= value <= INT_MAX:
            raise ValueError(f"an integer beyond 64 bits cannot be sent: {value}")
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{value} is not a JSON number")
    else:
        raise ValueError(f"a {type(value).__name__} is not a JSON value")


def json_copy(value: Any, what: str = "the value") -> Any:
    """``value`` as every replica will hold it (module docstring); ``ConfigError`` naming
    ``what`` when it is no such value."""
    if isinstance(value, str | bool) or value is None:
        return value  # the common case, as it is
    try:
        check_json_value(value)
    except ValueError as exc:
        raise ConfigError(f"{what} is not a JSON value every replica can hold: {exc}") from None
    if isinstance(value, int | float):
        return value
    return orjson.loads(orjson.dumps(value))
