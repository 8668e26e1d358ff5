"""Messages and their codec.

A message type is a small frozen dataclass (slots) on ``Message``, registered under a type
string; the codec turns it into one compact JSON object (orjson) and back. Decoding checks every
field against the class annotations, so a malformed message cannot be built from peer input:
bad bytes raise a ``ProtocolError`` subclass and never reach a protocol.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable
from typing import Any, ClassVar, Protocol, TypeVar, dataclass_transform

import orjson

from .errors import (
    ConfigError,
    DecodeError,
    FrameTooLarge,
    InvalidMessage,
    UnknownMessageType,
)

__all__ = [
    "DEFAULT_MAX_FRAME",
    "Codec",
    "Message",
    "TraceIds",
    "WireCodec",
    "layer_of",
    "message",
    "parse_frame",
]

DEFAULT_MAX_FRAME = 1 << 20  # 1 MiB: every transport and codec refuses larger frames
TYPE_KEY = "type"

TraceIds = tuple[str | None, str | None, str | None, int | None]
"""(msg, origin, key, seq) of a message for its trace rows."""

M = TypeVar("M", bound="Message")


@dataclasses.dataclass(frozen=True, slots=True)
class Message:
    """Base of every message. Subclasses are frozen slotted dataclasses made with ``@message``."""

    TYPE: ClassVar[str] = ""
    #: the codec of the protocol this message belongs to (set by ``@message``)
    CODEC: ClassVar[Codec | None] = None
    #: the field naming the node the message speaks for, which must be the node that sent it
    #: (see ``speaker_of``); None: the message names no one
    SPEAKER: ClassVar[str | None] = None

    def trace_ids(self) -> TraceIds:
        """The trace columns (msg, origin, key, seq) this message fills; none by default."""
        return (None, None, None, None)


def speaker_of(msg: Message) -> str | None:
    """The node ``msg`` speaks for (its ``SPEAKER`` field), or None: a protocol that gets it
    from another sender drops it (a holder of the group key speaking in another's name)."""
    field = type(msg).SPEAKER
    return None if field is None else str(getattr(msg, field))


def parse_frame(data: bytes | str, max_frame: int) -> Any:
    """The JSON value of one frame, refusing frames over ``max_frame`` bytes and non-JSON."""
    if isinstance(data, str):
        data = data.encode()  # the limit is in bytes, as on the wire
    if len(data) > max_frame:
        raise FrameTooLarge(f"frame of {len(data)} bytes over max_frame={max_frame}")
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise DecodeError(f"not JSON: {exc}") from exc


class WireCodec(Protocol):
    """What a runtime needs of a codec: ``Codec`` below, or a seed's exact wire format."""

    max_frame: int

    def encode(self, msg: Message) -> bytes: ...

    def decode(self, data: bytes | str) -> Message: ...


Checker = Callable[[Any, str], Any]


def _fail(path: str, expected: str, value: Any) -> typing.NoReturn:
    raise InvalidMessage(f"field {path!r}: expected {expected}, got {type(value).__name__}")


def _checker_for(annotation: Any) -> Checker:
    """A function that validates (and converts lists to tuples) one decoded JSON value."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if annotation is Any:
        return lambda value, path: value
    if annotation is type(None) or annotation is None:

        def check_none(value: Any, path: str) -> Any:
            if value is not None:
                _fail(path, "null", value)
            return None

        return check_none
    if annotation is bool:

        def check_bool(value: Any, path: str) -> Any:
            if not isinstance(value, bool):
                _fail(path, "bool", value)
            return value

        return check_bool
    if annotation is int:

        def check_int(value: Any, path: str) -> Any:
            if not isinstance(value, int) or isinstance(value, bool):
                _fail(path, "int", value)
            return value

        return check_int
    if annotation is float:

        def check_float(value: Any, path: str) -> Any:
            if not isinstance(value, int | float) or isinstance(value, bool):
                _fail(path, "number", value)
            return float(value)  # JSON has no NaN or infinity, so orjson never yields them

        return check_float
    if annotation is str:

        def check_str(value: Any, path: str) -> Any:
            if not isinstance(value, str):
                _fail(path, "string", value)
            return value

        return check_str
    if origin in (typing.Union, types.UnionType):
        checkers = [_checker_for(a) for a in args]

        def check_union(value: Any, path: str) -> Any:
            for check in checkers:
                try:
                    return check(value, path)
                except InvalidMessage:
                    continue
            _fail(path, " | ".join(getattr(a, "__name__", str(a)) for a in args), value)

        return check_union
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            item = _checker_for(args[0])

            def check_tuple(value: Any, path: str) -> Any:
                if not isinstance(value, list | tuple):
                    _fail(path, "array", value)
                return tuple(item(v, f"{path}[{i}]") for i, v in enumerate(value))

            return check_tuple
        items = [_checker_for(a) for a in args]

        def check_fixed_tuple(value: Any, path: str) -> Any:
            if not isinstance(value, list | tuple) or len(value) != len(items):
                _fail(path, f"array of {len(items)}", value)
            pairs = enumerate(zip(items, value, strict=True))
            return tuple(check(v, f"{path}[{i}]") for i, (check, v) in pairs)

        return check_fixed_tuple
    if origin is list or annotation is list:
        item = _checker_for(args[0]) if args else _checker_for(Any)

        def check_list(value: Any, path: str) -> Any:
            if not isinstance(value, list | tuple):
                _fail(path, "array", value)
            return [item(v, f"{path}[{i}]") for i, v in enumerate(value)]

        return check_list
    if origin is dict or annotation is dict:
        key_check = _checker_for(args[0]) if args else _checker_for(str)
        val_check = _checker_for(args[1]) if args else _checker_for(Any)

        def check_dict(value: Any, path: str) -> Any:
            if not isinstance(value, dict):
                _fail(path, "object", value)
            return {key_check(k, path): val_check(v, f"{path}.{k}") for k, v in value.items()}

        return check_dict
    raise ConfigError(f"message field annotation {annotation!r} is not JSON-representable")


@dataclasses.dataclass(frozen=True, slots=True)
class _Spec:
    cls: type[Message]
    names: tuple[str, ...]
    required: frozenset[str]
    checkers: dict[str, Checker]


class Codec:
    """A registry of message types and the JSON codec over them."""

    def __init__(self, *, max_frame: int = DEFAULT_MAX_FRAME) -> None:
        if max_frame <= 0:
            raise ConfigError(f"max_frame must be > 0, got {max_frame}")
        self.max_frame = max_frame
        self._types: dict[str, type[Message]] = {}
        self._specs: dict[str, _Spec] = {}
        self._names: dict[type[Message], tuple[str, ...]] = {}

    def register(self, cls: type[M]) -> type[M]:
        type_name = cls.TYPE
        if not type_name:
            raise ConfigError(f"{cls.__name__} has no TYPE")
        known = self._types.get(type_name)
        if known is not None and known is not cls:
            raise ConfigError(f"message type {type_name!r} already registered by {known!r}")
        if not (dataclasses.is_dataclass(cls) and issubclass(cls, Message)):
            raise ConfigError(f"{cls!r} must be a Message dataclass")
        self._types[type_name] = cls
        self._names[cls] = tuple(f.name for f in dataclasses.fields(cls))
        return cls

    def types(self) -> dict[str, type[Message]]:
        return dict(self._types)

    def _spec(self, type_name: str) -> _Spec:
        spec = self._specs.get(type_name)
        if spec is None:
            cls = self._types[type_name]
            hints = typing.get_type_hints(cls)
            fields = dataclasses.fields(cls)
            required = frozenset(
                f.name
                for f in fields
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
            )
            checkers = {f.name: _checker_for(hints[f.name]) for f in fields}
            spec = _Spec(cls, tuple(f.name for f in fields), required, checkers)
            self._specs[type_name] = spec
        return spec

    def to_dict(self, msg: Message) -> dict[str, Any]:
        names = self._names.get(type(msg))
        if names is None:
            raise ConfigError(f"{type(msg).__name__} is not registered with this codec")
        out: dict[str, Any] = {TYPE_KEY: msg.TYPE}
        for name in names:
            out[name] = getattr(msg, name)
        return out

    def encode(self, msg: Message) -> bytes:
        data = orjson.dumps(self.to_dict(msg))
        if len(data) > self.max_frame:
            raise ConfigError(
                f"{msg.TYPE} encodes to {len(data)} bytes, over max_frame={self.max_frame}"
            )
        return data

    def decode(self, data: bytes | str) -> Message:
        return self.from_dict(parse_frame(data, self.max_frame))

    def from_dict(self, obj: Any) -> Message:
        if not isinstance(obj, dict):
            raise DecodeError(f"expected a JSON object, got {type(obj).__name__}")
        type_name = obj.get(TYPE_KEY)
        if not isinstance(type_name, str):
            raise DecodeError(f"missing or non-string {TYPE_KEY!r}")
        if type_name not in self._types:
            raise UnknownMessageType(f"unknown message type {type_name!r}")
        spec = self._specs.get(type_name) or self._spec(type_name)
        # one pass over the fields (every message a node receives comes through here)
        checkers = spec.checkers
        kwargs: dict[str, Any] = {}
        if not spec.required <= obj.keys():
            missing = spec.required - obj.keys()
            raise InvalidMessage(f"{type_name}: missing field(s) {sorted(missing)}")
        for name, value in obj.items():
            if name == TYPE_KEY:
                continue
            check = checkers.get(name)
            if check is None:
                extra = sorted(k for k in obj if k != TYPE_KEY and k not in checkers)
                raise InvalidMessage(f"{type_name}: unknown field(s) {extra}")
            kwargs[name] = check(value, name)
        try:
            return spec.cls(**kwargs)
        except (TypeError, ValueError) as exc:
            raise InvalidMessage(f"{type_name}: {exc}") from exc


    @classmethod
    def union(cls, *codecs: Codec, max_frame: int | None = None) -> Codec:
        """One codec for every message type of ``codecs`` (a node's stack: membership and
        dissemination); ``max_frame`` defaults to the largest of theirs."""
        if not codecs:
            raise ConfigError("union() needs at least one codec")
        joined = cls(max_frame=max_frame if max_frame is not None
                     else max(c.max_frame for c in codecs))
        for codec in codecs:
            for message_type in codec.types().values():
                joined.register(message_type)
        return joined


@dataclass_transform(frozen_default=True)
def message(type_name: str, *, codec: Codec) -> Callable[[type[M]], type[M]]:
    """Class decorator: make a frozen slotted dataclass message and register it with the codec
    of its protocol (each protocol has its own; a node's runtime is given the codec of the
    protocols it runs, see ``Codec.union``).

    ``@message("fifo.data", codec=CODEC)`` on a plain class body; ``__post_init__`` may raise
    ``ValueError`` to reject values the annotations allow but the protocol does not.
    """

    def wrap(cls: type[M]) -> type[M]:
        cls.TYPE = type_name
        made = dataclasses.dataclass(frozen=True, slots=True)(cls)
        made.CODEC = codec
        return codec.register(made)

    return wrap


def layer_of(msg: Message) -> str:
    """The layer a message's trace rows name: its type's prefix (``srm`` of ``srm.data``)."""
    return msg.TYPE.partition(".")[0]

