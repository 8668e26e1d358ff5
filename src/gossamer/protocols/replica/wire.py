"""The wire format of seed 000 (gossip over WebSockets), spoken exactly, plus marked extensions.

Messages are JSON objects told apart by a flag field, as in the seed's ``onmessage``: ``nack``,
``retry``, ``conflict``, ``subscribe``; an object with a ``key`` is a data message. Extensions
(``clear``, ``stop``, ``left``, ``snapshot``, ``welcome``, ``refused``, the ``data`` /
``deleted`` fields of a data message and the ``token`` / ``incarnation`` of a joining
``subscribe``) are ours; a peer speaking only the seed's messages never needs them. See
docs/replica-wire.md.
"""

from __future__ import annotations

import dataclasses
import enum
import zlib
from collections.abc import Callable, Mapping, Set
from typing import Any, ClassVar, TypeVar

import orjson

from ...core.errors import ConfigError, DecodeError, InvalidMessage
from ...core.ids import check_node_id
from ...core.messages import DEFAULT_MAX_FRAME, Message, TraceIds, parse_frame

__all__ = [
    "HUB_ID",
    "MAX_TOKEN_CHARS",
    "Clear",
    "Conflict",
    "Data",
    "JoinRefusal",
    "Left",
    "Nack",
    "Refused",
    "ReplicaCodec",
    "Retry",
    "Snapshot",
    "StopAll",
    "Subscribe",
    "Welcome",
    "crc_of",
    "max_write_bytes",
    "write_bytes",
]

HUB_ID = "hub"  # the ``id`` of messages the hub itself sends (``left``)
MAX_RETRY_BATCH = 1024  # data messages in one retry
MAX_TOKEN_CHARS = 128  # a client token on the wire
MAX_REASON_CHARS = 200  # the reason of a refused join (a WebSocket close reason fits 123 bytes)


class JoinRefusal(enum.IntEnum):
    """Why the hub refused a join: the ``code`` of a ``refused`` message and of the WebSocket
    close that follows it (4000-4999: codes for applications, RFC 6455)."""

    FIRST_FRAME = 4000  # a known id's first frame was not a subscribe carrying its token
    ID_IN_USE = 4001  # the id is connected on another connection
    NOT_YOURS = 4003  # the id is registered to another client: wrong or missing token
    NO_RESUME = 4009  # a new incarnation the hub cannot place (it keeps no snapshot)
    TOO_MANY_IDS = 4013  # the hub's register of client ids is full

    @property
    def retry(self) -> bool:
        """Whether joining again later may succeed (the other connection may go away)."""
        return self is JoinRefusal.ID_IN_USE


def crc_of(key: str, value: str, data: Any = None) -> int:
    """CRC32 (unsigned) of ``key|value`` as in the seed; with a ``data`` payload (our extension)
    the canonical JSON of the payload is covered too: ``key|value|<json>``."""
    if data is None:
        return zlib.crc32(f"{key}|{value}".encode()) & 0xFFFFFFFF
    # crc32(a + b) == crc32(b, crc32(a)): the JSON is not decoded and joined to the text
    return zlib.crc32(orjson.dumps(data, option=orjson.OPT_SORT_KEYS),
                      zlib.crc32(f"{key}|{value}|".encode())) & 0xFFFFFFFF


def max_write_bytes(max_frame: int) -> int:
    """The largest write (``write_bytes``) a client may make under a frame limit: half of it,
    so that the forms the write travels in again (a retry, a snapshot row beside the vector)
    still fit one frame; a write that only just fitted its data frame would lock every joiner
    out (its catch-up frame over the limit, the connection closed, again and again)."""
    return max_frame // 2


def write_bytes(key: str, data: Any) -> int:
    """What a write weighs against ``max_write_bytes``: its key and its JSON content."""
    return len(key.encode()) + len(orjson.dumps(data))


def _check_id(value: str, what: str) -> None:
    try:
        check_node_id(value)
    except ConfigError as exc:
        raise ValueError(f"{what}: {exc}") from None


def _check_vector(vector: Mapping[str, int]) -> None:
    try:
        for node, count in vector.items():
            check_node_id(node)
            if count.__class__ is not int or count < 0:
                raise ValueError(f"vector entry {node!r} must be an int >= 0, got {count!r}")
    except ConfigError as exc:
        raise ValueError(f"vector key: {exc}") from None


class _Wire(Message):
    """Base of seed-000 messages: every one carries the sender's ``id``."""

    __slots__ = ()
    id: str
    FLAG: ClassVar[str] = ""  # the flag field that marks this type on the wire


@dataclasses.dataclass(frozen=True, slots=True)
class Subscribe(_Wire):
    """Sent on (re)connect and multicast: here is my vector; resend what I miss."""

    TYPE: ClassVar[str] = "replica.subscribe"
    FLAG: ClassVar[str] = "subscribe"
    id: str
    vector: dict[str, int]
    # extension, on the first subscribe of a connection (the join) only: the client's token
    # (issued by the hub at its first join) and its process's incarnation (``env.incarnation``)
    token: str | None = None
    incarnation: int | None = None

    def __post_init__(self) -> None:
        _check_id(self.id, "id")
        _check_vector(self.vector)
        if self.token is not None and not 0 < len(self.token) <= MAX_TOKEN_CHARS:
            raise ValueError(f"token must be 1-{MAX_TOKEN_CHARS} characters")
        if self.incarnation is not None and (self.incarnation.__class__ is not int
                                             or self.incarnation < 1):
            raise ValueError("incarnation must be an int >= 1")

    @property
    def joining(self) -> bool:
        """Whether it carries join credentials (never forwarded as they are)."""
        return self.token is not None or self.incarnation is not None


@dataclasses.dataclass(frozen=True, slots=True)
class Data(_Wire):
    """A write of object ``key`` from revision ``old_value`` (None: new object) to ``value``.

    ``vector`` is the sender's vector with its own entry counting this message, so
    ``vector[id]`` is the message's sequence number (1, 2, ...).
    """

    TYPE: ClassVar[str] = "replica.data"
    id: str
    key: str
    old_value: str | None
    value: str
    crc: int
    vector: dict[str, int]
    data: Any = None  # extension: the object's new content (JSON)
    deleted: bool = False  # extension: the write deletes the object
    # ``crc_ok``, once computed (the hub's keeper and its causal layer both ask)
    _crc_ok: bool | None = dataclasses.field(default=None, init=False, repr=False,
                                             compare=False)

    def __post_init__(self) -> None:
        _check_id(self.id, "id")
        _check_vector(self.vector)
        if not self.key:
            raise ValueError("key must be non-empty")
        if self.vector.get(self.id, 0) < 1:
            raise ValueError(f"vector[{self.id}] must be >= 1 (the message's sequence number)")
        if not 0 <= self.crc <= 0xFFFFFFFF:
            raise ValueError(f"crc must be an unsigned 32-bit int, got {self.crc}")

    @property
    def seq(self) -> int:
        return self.vector[self.id]

    @property
    def crc_ok(self) -> bool:
        ok = self._crc_ok
        if ok is None:
            ok = self.crc == crc_of(self.key, self.value, self.data)
            object.__setattr__(self, "_crc_ok", ok)  # a cache: equality and hash ignore it
        return ok

    def trace_ids(self) -> TraceIds:
        return (f"{self.id}:{self.seq}", self.id, self.key, self.seq)


@dataclasses.dataclass(frozen=True, slots=True)
class Nack(_Wire):
    """To ``dest``: resend your messages ``start..end`` (sequence numbers, inclusive)."""

    TYPE: ClassVar[str] = "replica.nack"
    FLAG: ClassVar[str] = "nack"
    id: str
    dest: str
    start: int
    end: int

    def __post_init__(self) -> None:
        _check_id(self.id, "id")
        _check_id(self.dest, "dest")
        if self.start < 1 or self.end < self.start:
            raise ValueError(f"need 1 <= start <= end, got {self.start}..{self.end}")


@dataclasses.dataclass(frozen=True, slots=True)
class Retry(_Wire):
    """To ``dest``: the data messages it asked for (or missed while away), in one message."""

    TYPE: ClassVar[str] = "replica.retry"
    FLAG: ClassVar[str] = "retry"
    id: str
    dest: str
    retry: tuple[Data, ...]

    def __post_init__(self) -> None:
        _check_id(self.id, "id")
        _check_id(self.dest, "dest")
        if len(self.retry) > MAX_RETRY_BATCH:
            raise ValueError(f"at most {MAX_RETRY_BATCH} messages per retry")


@dataclasses.dataclass(frozen=True, slots=True)
class Conflict(_Wire):
    """To the loser ``dest``: your write ``loser_time`` on ``object`` lost to ``winner``'s
    write ``winner_time``; rebase it and send it again."""

    TYPE: ClassVar[str] = "replica.conflict"
    FLAG: ClassVar[str] = "conflict"
    id: str
    dest: str
    loser_time: int
    winner: str
    winner_time: int
    object: str

    def __post_init__(self) -> None:
        _check_id(self.id, "id")
        _check_id(self.dest, "dest")
        _check_id(self.winner, "winner")
        if self.loser_time < 1 or self.winner_time < 1:
            raise ValueError("loser_time and winner_time are sequence numbers >= 1")


@dataclasses.dataclass(frozen=True, slots=True)
class Clear(_Wire):
    """Extension (the demo's Clear button): every client clears its data and queues."""

    TYPE: ClassVar[str] = "replica.clear"
    FLAG: ClassVar[str] = "clear"
    id: str

    def __post_init__(self) -> None:
        _check_id(self.id, "id")


@dataclasses.dataclass(frozen=True, slots=True)
class StopAll(_Wire):
    """Extension (the demo's big stop button): every client stops generating data."""

    TYPE: ClassVar[str] = "replica.stop"
    FLAG: ClassVar[str] = "stop"
    id: str

    def __post_init__(self) -> None:
        _check_id(self.id, "id")


@dataclasses.dataclass(frozen=True, slots=True)
class Left(_Wire):
    """Extension, sent by the hub (``id`` = "hub"): the connection of client ``left`` closed."""

    TYPE: ClassVar[str] = "replica.left"
    FLAG: ClassVar[str] = "left"
    id: str
    left: str

    def __post_init__(self) -> None:
        _check_id(self.id, "id")
        _check_id(self.left, "left")


@dataclasses.dataclass(frozen=True, slots=True)
class Welcome(_Wire):
    """Extension, sent by the hub to ``dest`` that joined: its ``token`` when one was issued
    now (keep it; present it at every later join), and ``resume``: the highest sequence number
    of ``dest`` the hub knows of, so a new incarnation (a fresh or restored store) numbers its
    writes after it."""

    TYPE: ClassVar[str] = "replica.welcome"
    FLAG: ClassVar[str] = "welcome"
    id: str
    dest: str
    token: str | None
    resume: int

    def __post_init__(self) -> None:
        _check_id(self.id, "id")
        _check_id(self.dest, "dest")
        if self.token is not None and not 0 < len(self.token) <= MAX_TOKEN_CHARS:
            raise ValueError(f"token must be 1-{MAX_TOKEN_CHARS} characters")
        if self.resume.__class__ is not int or self.resume < 0:
            raise ValueError("resume must be an int >= 0")


@dataclasses.dataclass(frozen=True, slots=True)
class Refused(_Wire):
    """Extension, sent by the hub to a connection whose join it refused, just before it closes
    it with the same ``code`` and ``reason``."""

    TYPE: ClassVar[str] = "replica.refused"
    FLAG: ClassVar[str] = "refused"
    id: str
    dest: str
    code: int
    reason: str

    def __post_init__(self) -> None:
        _check_id(self.id, "id")
        _check_id(self.dest, "dest")
        if self.code.__class__ is not int or not 4000 <= self.code <= 4999:
            raise ValueError("code must be an int in 4000..4999")
        if len(self.reason) > MAX_REASON_CHARS:
            raise ValueError(f"reason must be at most {MAX_REASON_CHARS} characters")


SnapshotWrite = tuple[str, "str | None", str, int, Any, bool]
"""One write of a snapshot's object path: (revision, old revision, writer, seq, content,
deleted)."""


def _check_write(row: Any) -> SnapshotWrite:
    if not isinstance(row, list | tuple) or len(row) != 6:
        raise ValueError("a snapshot write is [revision, old, writer, seq, content, deleted]")
    revision, old, writer, seq, content, deleted = row
    if not isinstance(revision, str) or not revision:
        raise ValueError("a snapshot write's revision must be a non-empty string")
    if old is not None and not isinstance(old, str):
        raise ValueError("a snapshot write's old revision must be a string or null")
    if not isinstance(writer, str):
        raise ValueError("a snapshot write's writer must be a string")
    _check_id(writer, "snapshot writer")
    if type(seq) is not int or seq < 1:
        raise ValueError("a snapshot write's seq must be an int >= 1")
    if not isinstance(deleted, bool):
        raise ValueError("a snapshot write's deleted flag must be a bool")
    return (revision, old, writer, seq, content, deleted)


@dataclasses.dataclass(frozen=True, slots=True)
class Snapshot(_Wire):
    """Extension, sent by the hub to ``dest``: one part of the object states at ``vector``
    (``objects``: key -> winning path, oldest first); ``last`` marks the final part."""

    TYPE: ClassVar[str] = "replica.snapshot"
    FLAG: ClassVar[str] = "snapshot"
    id: str
    dest: str
    vector: dict[str, int]
    objects: dict[str, tuple[SnapshotWrite, ...]]
    last: bool

    def __post_init__(self) -> None:
        _check_id(self.id, "id")
        _check_id(self.dest, "dest")
        _check_vector(self.vector)
        for key, path in self.objects.items():
            if not isinstance(key, str) or not key:
                raise ValueError("snapshot object keys must be non-empty strings")
            if not isinstance(path, tuple) or not path:
                raise ValueError(f"snapshot object {key!r} needs a non-empty path")
            for row in path:
                _check_write(row)


_FLAGGED: tuple[type[_Wire], ...] = (Nack, Retry, Conflict, Subscribe, Clear, StopAll, Snapshot,
                                     Welcome, Refused)
_OPTIONAL = frozenset({"token", "incarnation"})  # fields left out when None
_FIELDS: dict[type[_Wire], tuple[str, ...]] = {
    cls: tuple(f.name for f in dataclasses.fields(cls))
    for cls in (*_FLAGGED, Left, Data)
}


def _expect(obj: Mapping[str, Any], name: str, kind: type | tuple[type, ...], what: str) -> Any:
    if name not in obj:
        raise InvalidMessage(f"{what}: missing field {name!r}")
    value = obj[name]
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
        raise InvalidMessage(f"{what}: field {name!r} has the wrong type {type(value).__name__}")
    return value


def _vector(obj: Mapping[str, Any], what: str) -> dict[str, int]:
    vector = _expect(obj, "vector", dict, what)
    for node, count in vector.items():
        try:
            check_node_id(node)
        except ConfigError:
            raise InvalidMessage(f"{what}: vector key {node!r} is not a client id") from None
        if type(count) is not int or count < 0:
            raise InvalidMessage(f"{what}: vector entry {node!r} is not an int >= 0")
    return dict(vector)


_DATA_FIELDS = frozenset({"id", "key", "old_value", "value", "crc", "vector", "data", "deleted"})


def _no_extra(obj: Mapping[str, Any], allowed: Set[str], what: str) -> None:
    extra = set(obj) - allowed
    if extra:
        raise InvalidMessage(f"{what}: unknown field(s) {sorted(extra)}")


W = TypeVar("W", bound=_Wire)


def _build(cls: Callable[..., W], what: str, **fields: Any) -> W:
    try:
        return cls(**fields)
    except (TypeError, ValueError) as exc:
        raise InvalidMessage(f"{what}: {exc}") from exc


class ReplicaCodec:
    """Encode and decode seed-000 messages. Implements ``gossamer.core.WireCodec``."""

    def __init__(self, *, max_frame: int = DEFAULT_MAX_FRAME) -> None:
        if max_frame <= 0:
            raise ConfigError(f"max_frame must be > 0, got {max_frame}")
        self.max_frame = max_frame

    # -- encoding -------------------------------------------------------------------------

    def to_dict(self, msg: Message) -> dict[str, Any]:
        if isinstance(msg, Data):
            out: dict[str, Any] = {"id": msg.id, "key": msg.key, "old_value": msg.old_value,
                                   "value": msg.value, "crc": msg.crc, "vector": msg.vector}
            if msg.data is not None:
                out["data"] = msg.data
            if msg.deleted:
                out["deleted"] = True
            return out
        if isinstance(msg, Retry):
            return {"id": msg.id, "dest": msg.dest,
                    "retry": [self.to_dict(part) for part in msg.retry]}
        if isinstance(msg, Left):
            return {"id": msg.id, "left": msg.left}
        if isinstance(msg, Snapshot):
            return {"id": msg.id, "dest": msg.dest, "snapshot": True, "vector": msg.vector,
                    "objects": {key: [list(row) for row in path]
                                for key, path in msg.objects.items()},
                    "last": msg.last}
        if isinstance(msg, _FLAGGED):
            out = {name: value for name in _FIELDS[type(msg)]
                   if (value := getattr(msg, name)) is not None or name not in _OPTIONAL}
            out[msg.FLAG] = True
            return out
        raise ConfigError(f"{type(msg).__name__} is not a seed-000 message")

    def encode(self, msg: Message) -> bytes:
        data = orjson.dumps(self.to_dict(msg))
        if len(data) > self.max_frame:
            raise ConfigError(f"{msg.TYPE} encodes to {len(data)} bytes, over {self.max_frame}")
        return data

    # -- decoding -------------------------------------------------------------------------

    def decode(self, data: bytes | str) -> Message:
        return self.from_dict(parse_frame(data, self.max_frame))

    def from_dict(self, obj: Any) -> Message:
        if not isinstance(obj, dict):
            raise DecodeError(f"expected a JSON object, got {type(obj).__name__}")
        if "key" in obj and obj.keys() <= _DATA_FIELDS:  # the usual message: data, no flag
            return self._data(obj)
        _expect(obj, "id", str, "message")
        for cls in _FLAGGED:
            if cls.FLAG in obj:
                if cls is not Retry and obj[cls.FLAG] is not True:  # retry's flag is its list
                    raise InvalidMessage(f"flag {cls.FLAG!r} must be true")
                return self._flagged(cls, obj)
        if "left" in obj:
            _no_extra(obj, {"id", "left"}, "left")
            return _build(Left, "left", id=obj["id"], left=_expect(obj, "left", str, "left"))
        if "key" in obj:
            return self._data(obj)
        raise InvalidMessage("no flag (nack, retry, conflict, subscribe, clear, stop, left, "
                             "snapshot, welcome, refused) and no key: not a seed-000 message")

    def _data(self, obj: Mapping[str, Any]) -> Data:
        what = "data"
        if not obj.keys() <= _DATA_FIELDS:
            _no_extra(obj, _DATA_FIELDS, what)
        ident, key, value = obj.get("id"), obj.get("key"), obj.get("value")
        crc, vector = obj.get("crc"), obj.get("vector")
        old_value = obj.get("old_value")
        deleted = obj.get("deleted", False)
        if not (ident.__class__ is str and key.__class__ is str and value.__class__ is str
                and crc.__class__ is int and vector.__class__ is dict):
            # not the usual shape: which field is wrong, and how
            ident = _expect(obj, "id", str, "message")
            key = _expect(obj, "key", str, what)
            value = _expect(obj, "value", str, what)
            crc = _expect(obj, "crc", int, what)
            vector = _vector(obj, what)
        if old_value is not None and old_value.__class__ is not str:
            raise InvalidMessage(f"{what}: field 'old_value' must be a string or null")
        if deleted.__class__ is not bool:
            raise InvalidMessage(f"{what}: field 'deleted' must be a bool")
        # the vector's ids and counts are checked by Data itself (a ValueError: refused)
        try:
            return Data(ident, key, old_value, value, crc, vector, obj.get("data"), deleted)
        except (TypeError, ValueError) as exc:
            raise InvalidMessage(f"{what}: {exc}") from exc

    def _flagged(self, cls: type[_Wire], obj: Mapping[str, Any]) -> Message:
        what = cls.FLAG
        names = _FIELDS[cls]
        _no_extra(obj, {*names, cls.FLAG}, what)
        if cls is Snapshot:
            objects = _expect(obj, "objects", dict, what)
            paths: dict[str, tuple[SnapshotWrite, ...]] = {}
            for key, path in objects.items():
                if not isinstance(path, list):
                    raise InvalidMessage(f"snapshot: object {key!r} is not a list of writes")
                try:
                    paths[key] = tuple(_check_write(row) for row in path)
                except ValueError as exc:
                    raise InvalidMessage(f"snapshot: object {key!r}: {exc}") from None
            return _build(Snapshot, what, id=obj["id"], dest=_expect(obj, "dest", str, what),
                          vector=_vector(obj, what), objects=paths,
                          last=_expect(obj, "last", bool, what))
        if cls is Retry:
            parts = _expect(obj, "retry", list, what)
            if len(parts) > MAX_RETRY_BATCH:
                raise InvalidMessage(f"retry: more than {MAX_RETRY_BATCH} messages")
            decoded = []
            for part in parts:
                if not isinstance(part, dict) or "key" not in part:
                    raise InvalidMessage("retry: every element must be a data message")
                decoded.append(self._data(part))
            return _build(Retry, what, id=obj["id"], dest=_expect(obj, "dest", str, what),
                          retry=tuple(decoded))
        kinds: dict[str, type] = {"id": str, "dest": str, "start": int, "end": int,
                                  "loser_time": int, "winner": str, "winner_time": int,
                                  "object": str, "token": str, "incarnation": int,
                                  "resume": int, "code": int, "reason": str}
        fields: dict[str, Any] = {}
        for name in names:
            if name == "vector":
                fields[name] = _vector(obj, what)
            elif name in _OPTIONAL and obj.get(name) is None:
                fields[name] = None  # absent (or null): the seed's subscribe has neither
            else:
                fields[name] = _expect(obj, name, kinds[name], what)
        return _build(cls, what, **fields)
