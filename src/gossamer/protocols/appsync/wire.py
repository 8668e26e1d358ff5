"""The wire format of seed 002 (APSYN/01), spoken exactly: join, init, sync and rqst with their
create/update/delete actions. Every gap of the seed is decided in docs/appsync-wire.md.

Decoding raises only ``AppSyncProtocolError`` subclasses, each carrying the status the server
answers with (40 bad request, 55 version not supported).
"""

from __future__ import annotations

import dataclasses
import enum
import json
import re
from collections.abc import Callable
from typing import Any, ClassVar

import orjson

from ...core.errors import InvalidMessage, ProtocolError
from ...core.jsonvalue import check_json_value
from ...core.messages import Message

__all__ = [
    "CODES",
    "MAX_ACTIONS",
    "MAX_DEPTH",
    "PROTOCOL",
    "ROUND_MAX",
    "Action",
    "AppSyncCodec",
    "AppSyncMessage",
    "AppSyncProtocolError",
    "BadRequest",
    "Create",
    "Delete",
    "Header",
    "Init",
    "Join",
    "Mode",
    "ObjectInfo",
    "Rqst",
    "Scope",
    "SessionConfig",
    "Status",
    "Sync",
    "Update",
    "VersionNotSupported",
    "next_round",
]

VERSION = "01"
PROTOCOL = f"APSYN/{VERSION}"
ROUND_MAX = 0xFFFF
MAX_ACTIONS = 256  # actions in one rqst
MAX_DEPTH = 32  # JSON nesting
MAX_NAME = 256
MAX_LIST = 1 << 16  # actions in an init or a sync

_HEX4 = re.compile(r"[0-9A-Fa-f]{4}")
_CLIENT_ID = re.compile(r"(?:[0-9A-F]{4})?")  # a client id as a Header holds it
# a header as the common case writes it (upper-case hex, our version), read without the checks
# of the general path: ``c``, ``r`` and ``l`` joined by "/" (see ``_decode_header``)
_HEADER_FIELDS = re.compile(r"(?:[0-9A-F]{4})?/[0-9A-F]{4}/[0-9A-F]{4}")
# the start of a sync as ``orjson`` writes its header (``AppSyncCodec.round_syncs``)
_SYNC_HEAD = b'{"h":{"p":"APSYN/%b","c":"%b","r":"%04X","l":"%04X"},"b":{"ack":%b,"syn":'
# a rqst as our peers write it (orjson's bytes: no space, upper-case hex, our version): the
# header's fields read from the bytes and the body parsed alone (``decode_from_peer``)
_OUR_RQST = re.compile(
    rb'\{"h":\{"p":"' + re.escape(PROTOCOL.encode())
    + rb'","c":"([0-9A-F]{4})","r":"([0-9A-F]{4})","l":"([0-9A-F]{4})"\},"b":(\[.*\])\}',
    re.DOTALL)
_PROTO = re.compile(r"APSYN/[0-9]{2}")
_NAME = re.compile(r"[A-Za-z0-9$_]+(?:\.[A-Za-z0-9$_]+)*")
PEER_SECRET = re.compile(r"[A-Za-z0-9_-]{16,128}")  # a join id's ";peer=" (docs/security.md)


class Status(enum.IntEnum):
    """The seed's code table."""

    OK = 20
    ACCEPTED = 21
    PREFERRED = 22
    MULTIPLE_ACCEPTED = 23
    MAJORITY_ACCEPTED = 24
    CONFLICT = 30
    REFUSED_TEMPORARY = 31
    INFERIOR = 32
    INFERIOR_TO_MULTIPLE = 33
    INFERIOR_TO_MAJORITY = 34
    PERMANENT_CONFLICT = 39
    BAD_REQUEST = 40
    UNAUTHORIZED = 41
    VALIDATION_FAILED = 42
    FORBIDDEN = 43
    NOT_FOUND = 44
    ALREADY_EXISTS = 45
    INTERNAL_ERROR = 50
    NOT_IMPLEMENTED = 51
    SERVICE_UNAVAILABLE = 53
    VERSION_NOT_SUPPORTED = 55

    @property
    def phrase(self) -> str:
        return self.name.replace("_", " ").title()

    @property
    def accepted(self) -> bool:
        return 20 <= self.value < 30


CODES = frozenset(int(s) for s in Status)


class AppSyncProtocolError(ProtocolError):
    """Bad APSYN input; ``status`` is what the server answers with."""

    status: Status = Status.BAD_REQUEST


class BadRequest(AppSyncProtocolError, InvalidMessage):
    reason = "bad_request"
    status = Status.BAD_REQUEST


class VersionNotSupported(AppSyncProtocolError):
    reason = "version"
    status = Status.VERSION_NOT_SUPPORTED


class Scope(enum.Enum):
    GLOBAL = "G"
    LOCAL = "L"
    CLIENT = "C"


class Mode(enum.Enum):
    NA = "NA"
    RO = "RO"
    RW = "RW"


def next_round(number: int) -> int:
    """The round after ``number``: FFFF wraps to 0001, 0000 is reserved."""
    return 1 if number >= ROUND_MAX else number + 1


def _hex4(value: int) -> str:
    return f"{value:04X}"


def _is_hex4(text: str) -> bool:
    return _HEX4.fullmatch(text) is not None


@dataclasses.dataclass(frozen=True, slots=True)
class ObjectInfo:
    """``s`` scope, optional ``i`` scope id (4 hex digits, upper case), ``n`` name."""

    scope: Scope
    name: str
    scope_id: str | None = None
    # derived once (a round asks for them many times per request)
    root: str = dataclasses.field(init=False, repr=False, compare=False)
    path: tuple[str, ...] = dataclasses.field(init=False, repr=False, compare=False)
    object_key: str = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.scope, Scope):
            raise ValueError(f"scope must be a Scope, got {self.scope!r}")
        if (not isinstance(self.name, str) or len(self.name) > MAX_NAME
                or _NAME.fullmatch(self.name) is None):
            raise ValueError(f"bad object name {str(self.name)[:40]!r}")
        if self.scope_id is not None:
            if not isinstance(self.scope_id, str) or not _is_hex4(self.scope_id):
                raise ValueError("a scope id is 4 hex digits")
            object.__setattr__(self, "scope_id", self.scope_id.upper())
        if self.scope is Scope.CLIENT and self.scope_id is None:
            raise ValueError("a C object needs its owner's client id as scope id")
        if self.scope is Scope.GLOBAL and self.scope_id is not None:
            raise ValueError("a G object has no scope id")
        root, *path = self.name.split(".")
        object.__setattr__(self, "root", root)  # the object's own name (the first segment)
        object.__setattr__(self, "path", tuple(path))  # inside the object (empty: all of it)
        # one string per object: scope, scope id and root name
        object.__setattr__(self, "object_key", f"{self.scope.value}/{self.scope_id or ''}/{root}")

    def to_wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {"s": self.scope.value}
        if self.scope_id is not None:
            out["i"] = self.scope_id
        out["n"] = self.name
        return out


@dataclasses.dataclass(frozen=True, slots=True)
class Create:
    info: ObjectInfo
    mode: Mode
    data: Any

    TAG: ClassVar[str] = "cre"

    def __post_init__(self) -> None:
        if not isinstance(self.mode, Mode):
            raise ValueError(f"mode must be a Mode, got {self.mode!r}")
        if self.info.path:
            raise ValueError("a create is of a whole object: no dotted name")
        check_json_value(self.data, MAX_DEPTH)  # NaN, sets, big ints: refused before queueing

    def to_wire(self) -> dict[str, Any]:
        return {"t": "cre", "i": self.info.to_wire(), "m": self.mode.value, "d": self.data}


@dataclasses.dataclass(frozen=True, slots=True)
class Update:
    info: ObjectInfo
    data: Any

    TAG: ClassVar[str] = "upd"

    def __post_init__(self) -> None:
        check_json_value(self.data, MAX_DEPTH)  # NaN, sets, big ints: refused before queueing

    @classmethod
    def checked(cls, info: ObjectInfo, data: Any) -> Update:
        """An update whose data the caller has checked already (made of checked updates'
        values, nested no deeper than ``MAX_DEPTH``): made without walking it again."""
        update = object.__new__(cls)
        object.__setattr__(update, "info", info)
        object.__setattr__(update, "data", data)
        return update

    def to_wire(self) -> dict[str, Any]:
        return {"t": "upd", "i": self.info.to_wire(), "d": self.data}


@dataclasses.dataclass(frozen=True, slots=True)
class Delete:
    info: ObjectInfo

    TAG: ClassVar[str] = "del"

    def to_wire(self) -> dict[str, Any]:
        return {"t": "del", "i": self.info.to_wire()}


Action = Create | Update | Delete


@dataclasses.dataclass(frozen=True, slots=True)
class Header:
    """``c`` client id ("" or 4 hex digits, upper case), ``r`` round, ``l`` last received."""

    client_id: str
    round: int
    last: int
    version: str = VERSION

    def __post_init__(self) -> None:
        if self.client_id != "" and not (isinstance(self.client_id, str)
                                         and _is_hex4(self.client_id)):
            raise ValueError("a client id is empty or 4 hex digits")
        object.__setattr__(self, "client_id", self.client_id.upper())
        for name in ("round", "last"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= ROUND_MAX:
                raise ValueError(f"{name} must be in 0..FFFF")

    @classmethod
    def checked(cls, client_id: str, round: int, last: int) -> Header:
        """A header of ours whose fields the caller has checked already (``__post_init__``
        would accept them as they are): made without checking them again."""
        header = object.__new__(cls)
        object.__setattr__(header, "client_id", client_id)
        object.__setattr__(header, "round", round)
        object.__setattr__(header, "last", last)
        object.__setattr__(header, "version", VERSION)
        return header

    def to_wire(self) -> dict[str, Any]:
        return {"p": f"APSYN/{self.version}", "c": self.client_id, "r": _hex4(self.round),
                "l": _hex4(self.last)}


@dataclasses.dataclass(frozen=True, slots=True)
class SessionConfig:
    """``min``/``max`` round time in milliseconds, ``tout`` in rounds."""

    min_ms: int
    max_ms: int
    tout: int

    def __post_init__(self) -> None:
        for name, limit in (("min_ms", 0xFFFFFFFF), ("max_ms", 0xFFFFFFFF), ("tout", 0xFFFF)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= limit:
                raise ValueError(f"{name} out of range")
        if self.max_ms < 1 or self.tout < 1 or self.min_ms > self.max_ms:
            raise ValueError("need 0 <= min <= max, max >= 1 and tout >= 1")

    def to_wire(self) -> dict[str, str]:
        return {"min": f"{self.min_ms:X}", "max": f"{self.max_ms:X}", "tout": f"{self.tout:X}"}


class AppSyncMessage(Message):
    """Base of the four APSYN messages."""

    __slots__ = ()


def _check_actions(actions: tuple[Any, ...], allowed: tuple[type, ...]) -> None:
    if not isinstance(actions, tuple):
        raise ValueError("actions must be a tuple")
    for action in actions:
        if not isinstance(action, allowed):
            raise ValueError(f"{type(action).__name__} is not allowed here")


@dataclasses.dataclass(frozen=True, slots=True)
class Join(AppSyncMessage):
    TYPE: ClassVar[str] = "join"
    header: Header
    id: str

    def __post_init__(self) -> None:
        if self.header.round != 0 or self.header.last != 0:
            raise ValueError("a join has round and last received 0000")
        if self.header.client_id == "0000":
            raise ValueError("client id 0000 is not one CTRL gives (0001..FFFF)")
        if not isinstance(self.id, str) or not 1 <= len(self.id) <= 512:
            raise ValueError("a join id is 1..512 characters")


@dataclasses.dataclass(frozen=True, slots=True)
class Init(AppSyncMessage):
    TYPE: ClassVar[str] = "init"
    header: Header
    config: SessionConfig
    creates: tuple[Create, ...]

    def __post_init__(self) -> None:
        if self.header.round != 0 or self.header.client_id == "":
            raise ValueError("an init has round 0000 and the peer's client id")
        _check_actions(self.creates, (Create,))


@dataclasses.dataclass(frozen=True, slots=True)
class Sync(AppSyncMessage):
    TYPE: ClassVar[str] = "sync"
    header: Header
    acks: tuple[int, ...]
    actions: tuple[Action, ...]

    def __post_init__(self) -> None:
        if self.header.round == 0:
            raise ValueError("a sync has a round number other than 0000")
        if not isinstance(self.acks, tuple) or any(
                isinstance(a, bool) or a not in CODES for a in self.acks):
            raise ValueError("acks are codes of the code table")
        _check_actions(self.actions, (Create, Update, Delete))


@dataclasses.dataclass(frozen=True, slots=True)
class Rqst(AppSyncMessage):
    TYPE: ClassVar[str] = "rqst"
    header: Header
    actions: tuple[Action, ...]

    def __post_init__(self) -> None:
        if self.header.round == 0:
            raise ValueError("a rqst has a round number other than 0000")
        if self.header.client_id == "":
            raise ValueError("a rqst carries the peer's client id")
        if len(self.actions) > MAX_ACTIONS:
            raise ValueError(f"more than {MAX_ACTIONS} actions in a rqst")
        _check_actions(self.actions, (Create, Update, Delete))


# -- decoding -------------------------------------------------------------------------------


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        raise BadRequest("duplicate key in a JSON object")
    return out


def _refuse_constant(name: str) -> Any:
    raise BadRequest(f"{name} is not JSON")


def _parse_int(text: str) -> int:
    value = int(text)
    if not -(1 << 63) <= value < (1 << 64):
        raise BadRequest("an integer beyond 64 bits")
    return value


def _loads(data: bytes | str) -> Any:
    try:
        value = orjson.loads(data)  # strict: UTF-8, no lone surrogates, no NaN, no infinity
        raw = data if isinstance(data, bytes) else data.encode()
        if orjson.dumps(value) == raw:
            # the frame is exactly orjson's own writing of what it read (what our peers and
            # the browser client send): it holds no duplicate key (one would have been
            # dropped) and no integer beyond 64 bits (written back as a float)
            return value
        return json.loads(data, object_pairs_hook=_no_duplicates, parse_int=_parse_int,
                          parse_constant=_refuse_constant)
    except (orjson.JSONDecodeError, ValueError, RecursionError) as exc:
        if isinstance(exc, BadRequest):
            raise
        raise BadRequest(f"not JSON: {str(exc)[:80]}") from exc


def _obj(value: Any, keys: set[str], what: str, optional: frozenset[str] = frozenset()
         ) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise BadRequest(f"{what} must be a JSON object")
    if value.keys() == keys:  # the common case, without building sets
        return value
    have = set(value)
    if not keys - optional <= have or not have <= keys:
        raise BadRequest(f"{what} has keys {sorted(have)}, expected {sorted(keys)}")
    return value


def _str(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise BadRequest(f"{what} must be a string")
    return value


def _round(value: Any, what: str) -> int:
    text = _str(value, what)
    if not _is_hex4(text):
        raise BadRequest(f"{what} must be 4 hex digits")
    return int(text, 16)


def _hex_field(value: Any, what: str, digits: int) -> int:
    text = _str(value, what)
    if not 1 <= len(text) <= digits or any(ch not in "0123456789abcdefABCDEF" for ch in text):
        raise BadRequest(f"{what} must be 1..{digits} hex digits")
    return int(text, 16)


def _decode_header(value: Any) -> Header:
    if value.__class__ is dict and len(value) == 4:
        # the common case first: exactly the four keys, our protocol, upper-case hex digits
        client, r, last = value.get("c"), value.get("r"), value.get("l")
        if (value.get("p") == PROTOCOL and client.__class__ is str and r.__class__ is str
                and last.__class__ is str
                and _HEADER_FIELDS.fullmatch(f"{client}/{r}/{last}") is not None):
            return Header.checked(client, int(r, 16), int(last, 16))
    head = _obj(value, {"p", "c", "r", "l"}, "head")
    proto = _str(head["p"], "p")
    if _PROTO.fullmatch(proto) is None:
        raise BadRequest("p must be APSYN/ and 2 digits")
    if proto != PROTOCOL:
        raise VersionNotSupported(f"{proto} is not supported, {PROTOCOL} is")
    client = _str(head["c"], "c")
    if client and not _is_hex4(client):
        raise BadRequest("c must be empty or 4 hex digits")
    return Header(client_id=client, round=_round(head["r"], "r"), last=_round(head["l"], "l"))


#: object infos decoded before, by their wire fields: peers name the same few objects round
#: after round, and an ``ObjectInfo`` (frozen) is checked once, not at every request. Cleared
#: when full, so at most this many are kept.
_INFO_CACHE: dict[tuple[str, str | None, str], ObjectInfo] = {}
INFO_CACHE_SIZE = 65_536


def _decode_info(value: Any) -> ObjectInfo:
    info = _obj(value, {"s", "i", "n"}, "object info", frozenset({"i"}))
    scope_text = _str(info["s"], "s")
    scope_id = _str(info["i"], "i") if "i" in info else None
    name = _str(info["n"], "n")
    key = (scope_text, scope_id, name)
    known = _INFO_CACHE.get(key)
    if known is not None:
        return known
    try:
        scope = Scope(scope_text)
    except ValueError as exc:
        raise BadRequest("s must be G, L or C") from exc
    decoded = ObjectInfo(scope=scope, name=name, scope_id=scope_id)
    if len(_INFO_CACHE) >= INFO_CACHE_SIZE:
        _INFO_CACHE.clear()
    _INFO_CACHE[key] = decoded
    return decoded


def _decode_action(value: Any) -> Action:
    if not isinstance(value, dict) or "t" not in value:
        raise BadRequest("an action is an object with t")
    tag = value["t"]
    if tag == "cre":
        body = _obj(value, {"t", "i", "m", "d"}, "cre")
        try:
            mode = Mode(_str(body["m"], "m"))
        except ValueError as exc:
            raise BadRequest("m must be NA, RO or RW") from exc
        return Create(info=_decode_info(body["i"]), mode=mode, data=body["d"])
    if tag == "upd":
        body = _obj(value, {"t", "i", "d"}, "upd")
        return Update(info=_decode_info(body["i"]), data=body["d"])
    if tag == "del":
        body = _obj(value, {"t", "i"}, "del")
        return Delete(info=_decode_info(body["i"]))
    raise BadRequest(f"unknown action {str(tag)[:10]!r}")


def _actions(value: Any, what: str) -> tuple[Action, ...]:
    if not isinstance(value, list):
        raise BadRequest(f"{what} must be an array")
    if len(value) > MAX_LIST:
        raise BadRequest(f"{what} is too long")
    return tuple(_decode_action(item) for item in value)


class AppSyncCodec:
    """Bytes <-> messages. ``decode_from_peer`` gives a Join or Rqst, ``decode_from_server``
    an Init or Sync; both raise ``BadRequest`` (40) or ``VersionNotSupported`` (55)."""

    def __init__(self, *, max_frame: int = 64 * 1024) -> None:
        self.max_frame = max_frame

    def encode(self, msg: Message) -> bytes:
        if isinstance(msg, Join):
            body: Any = {"id": msg.id}
        elif isinstance(msg, Init):
            body = {"sc": msg.config.to_wire(), "cr": [c.to_wire() for c in msg.creates]}
        elif isinstance(msg, Sync):
            body = {"ack": list(msg.acks), "syn": [a.to_wire() for a in msg.actions]}
        elif isinstance(msg, Rqst):
            body = [a.to_wire() for a in msg.actions]
        else:
            raise TypeError(f"not an APSYN message: {type(msg).__name__}")
        return orjson.dumps({"h": msg.header.to_wire(), "b": body})

    def encode_action(self, action: Action) -> bytes:
        return orjson.dumps(action.to_wire())

    def encode_sync(self, header: Header, acks: tuple[int, ...], syn: bytes) -> bytes:
        """The bytes ``encode(Sync(header, acks, actions))`` gives, from the actions already
        encoded as a JSON array (shared by every peer that sees the same updates)."""
        return b"".join(self.sync_parts(header, acks, syn))

    def sync_parts(self, header: Header, acks: tuple[int, ...], syn: bytes
                   ) -> tuple[bytes, bytes, bytes]:
        """``encode_sync``'s bytes in three parts, the peer's own, the shared ``syn`` and the
        end, so that what is kept of a sync shares ``syn`` with every other peer's."""
        return self.sync_parts_for(header.client_id, header.round, header.last, acks, syn,
                                   header.version)

    def sync_parts_for(self, client_id: str, round: int, last: int, acks: tuple[int, ...],
                       syn: bytes, version: str = VERSION) -> tuple[bytes, bytes, bytes]:
        """``sync_parts`` without building a ``Header``: the same checks, the same bytes as
        ``orjson`` writes the header."""
        if any(a not in CODES for a in acks):
            raise ValueError("a sync's acks are codes of the table")
        if not 0 <= last <= ROUND_MAX:
            raise ValueError("last must be in 0..FFFF")
        if _CLIENT_ID.fullmatch(client_id) is None:
            raise ValueError("a client id is empty or 4 hex digits, upper case")
        return self.round_syncs(round, version)(client_id.encode(), last, acks, syn)

    def round_syncs(self, round: int, version: str = VERSION
                    ) -> Callable[[bytes, int, tuple[int, ...], bytes],
                                  tuple[bytes, bytes, bytes]]:
        """The syncs of round ``round`` in ``sync_parts``'s three parts, for many peers (CTRL's
        per-peer path, once per peer and round): the round is checked here, once; the function
        takes a client id CTRL checked at the join (as bytes), the peer's last round, the codes
        CTRL decided and the round's shared ``syn``."""
        if not 0 < round <= ROUND_MAX:
            raise ValueError("a sync has a round other than 0000")
        version_bytes = version.encode()

        def parts(client: bytes, last: int, acks: tuple[int, ...], syn: bytes
                  ) -> tuple[bytes, bytes, bytes]:
            return (_SYNC_HEAD % (version_bytes, client, round, last,
                                  orjson.dumps(acks) if acks else b"[]"), syn, b"}}")

        return parts

    def _envelope(self, data: bytes | str) -> tuple[Header, Any]:
        if len(data) > self.max_frame:
            raise BadRequest(f"frame of {len(data)} bytes over {self.max_frame}")
        message = _obj(_loads(data), {"h", "b"}, "message")
        return _decode_header(message["h"]), message["b"]

    def peer_rqst(self, data: bytes) -> tuple[str, int, int, tuple[Action, ...]] | None:
        """A rqst as our peers write it (``orjson``'s bytes: no spaces, upper-case hex, this
        version, a round other than 0000): its client id, round, last received and actions,
        read without building the message (the server's path, once per peer and round).
        None: a frame in any other form, for ``decode_from_peer`` to read; ``BadRequest``
        where that would raise it. What is around the body is valid JSON as it stands, so
        the frame is valid JSON exactly when its body is, and holds what the general path
        finds in it."""
        if len(data) > self.max_frame:
            return None
        ours = _OUR_RQST.fullmatch(data)
        if ours is None or ours[2] == b"0000":
            return None
        client, r, last, body = ours.groups()
        if body == b"[]":
            return client.decode(), int(r, 16), int(last, 16), ()
        try:
            actions = _actions(_loads(body), "rqst body")
        except ValueError as exc:
            raise BadRequest(str(exc)) from exc
        if len(actions) > MAX_ACTIONS:
            raise BadRequest(f"more than {MAX_ACTIONS} actions in a rqst")
        return client.decode(), int(r, 16), int(last, 16), actions

    def rqst_fields(self, data: bytes | str) -> tuple[str, int, int, tuple[Action, ...]]:
        """What CTRL reads of a joined peer's frame: a rqst's client id, round, last received
        and actions, by ``peer_rqst`` where the frame is in our peers' form, else by the
        general path; ``BadRequest`` for anything else (a join included)."""
        if data.__class__ is bytes:
            ours = self.peer_rqst(data)
            if ours is not None:
                return ours
        msg = self._decode_peer(data)
        if not isinstance(msg, Rqst):
            raise BadRequest("a joined peer sends rqst with its own client id")
        header = msg.header
        return header.client_id, header.round, header.last, msg.actions

    def decode_from_peer(self, data: bytes | str) -> Join | Rqst:
        if data.__class__ is bytes:
            ours = self.peer_rqst(data)
            if ours is not None:
                client, r, last, actions = ours
                return Rqst(header=Header.checked(client, r, last), actions=actions)
        return self._decode_peer(data)

    def _decode_peer(self, data: bytes | str) -> Join | Rqst:
        """``decode_from_peer`` by the general path: any form the grammar allows."""
        header, body = self._envelope(data)
        try:
            if header.round == 0:
                join = _obj(body, {"id"}, "join body")
                return Join(header=header, id=_str(join["id"], "id"))
            return Rqst(header=header, actions=_actions(body, "rqst body"))
        except ValueError as exc:
            raise BadRequest(str(exc)) from exc

    def decode_from_server(self, data: bytes | str) -> Init | Sync:
        header, body = self._envelope(data)
        try:
            if header.round == 0:
                init = _obj(body, {"sc", "cr"}, "init body")
                sc = _obj(init["sc"], {"min", "max", "tout"}, "sc")
                config = SessionConfig(min_ms=_hex_field(sc["min"], "min", 8),
                                       max_ms=_hex_field(sc["max"], "max", 8),
                                       tout=_hex_field(sc["tout"], "tout", 4))
                creates = _actions(init["cr"], "cr")
                if not all(isinstance(c, Create) for c in creates):
                    raise BadRequest("an init holds only cre actions")
                return Init(header=header, config=config,
                            creates=tuple(c for c in creates if isinstance(c, Create)))
            sync = _obj(body, {"ack", "syn"}, "sync body")
            acks = sync["ack"]
            if not isinstance(acks, list) or any(
                    isinstance(a, bool) or not isinstance(a, int) or a not in CODES
                    for a in acks):
                raise BadRequest("ack must be a list of codes of the code table")
            return Sync(header=header, acks=tuple(acks), actions=_actions(sync["syn"], "syn"))
        except ValueError as exc:
            raise BadRequest(str(exc)) from exc

    def decode(self, data: bytes | str) -> Message:
        """For a runtime that wants one ``decode``: the messages a peer sends."""
        return self.decode_from_peer(data)
