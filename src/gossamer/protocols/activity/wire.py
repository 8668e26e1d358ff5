"""The wire format of seed 003 (the activity stream network), spoken exactly: one JSON object per
line, told apart by its ``command``. See docs/activity-wire.md for every message and example.

Decoding never raises anything but ``ProtocolError``; its message is the ``info`` the server puts
in the INVALID_MESSAGE it answers with. Marked extensions: an optional ``id`` on the LOCK_*
messages (tells identical concurrent registrations apart, as the seed's rationale proposes).
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import orjson

from ...core.errors import ConfigError, DecodeError, InvalidMessage, UnknownMessageType
from ...core.messages import Message

__all__ = [
    "ANONYMOUS",
    "DEFAULT_MAX_LINE",
    "MAX_RECEIVED",
    "PROTOCOL",
    "ActivityBroadcast",
    "ActivityCodec",
    "ActivityMessage",
    "ActivityWire",
    "Authenticate",
    "AuthenticationFail",
    "InvalidMessageReply",
    "LockAllowed",
    "LockCancel",
    "LockDenied",
    "LockRequest",
    "Login",
    "LoginFailed",
    "LoginSuccess",
    "Logout",
    "Redirect",
    "Register",
    "RegisterFailed",
    "RegisterSuccess",
    "ServerAnnounce",
    "ServerInfo",
]

ANONYMOUS = "anonymous"
PROTOCOL = "gossamer-activity/1"  # the AUTHENTICATE extension naming our tree protocol
DEFAULT_MAX_LINE = 64 * 1024  # bytes in one line; longer lines are INVALID_MESSAGE and a close
COMMAND = "command"
MAX_NAME = 256  # characters of a username, secret, id or hostname
PARSE_ERROR = "JSON parse error while parsing message"
NO_COMMAND = "the received message did not contain a command"


class ActivityWire(Message):
    """Base of seed-003 messages; ``TYPE`` is the ``command`` on the wire."""

    __slots__ = ()
    #: fields that may be absent on the wire (None), in the order they are written
    OPTIONAL: ClassVar[frozenset[str]] = frozenset()


def _check_text(value: str, what: str, *, empty: bool = False) -> None:
    if not empty and not value:
        raise ValueError(f"{what} must be non-empty")
    if len(value) > MAX_NAME:
        raise ValueError(f"{what} is longer than {MAX_NAME} characters")


MAX_RECEIVED = 1024  # origin servers in a ``received`` map


def _check_received(received: dict[str, Any]) -> None:
    """A ``received`` map: origin server -> the last activity number received from it."""
    if len(received) > MAX_RECEIVED:
        raise ValueError(f"received lists more than {MAX_RECEIVED} origin servers")
    for origin, number in received.items():
        _check_text(origin, "received origin")
        if isinstance(number, bool) or not isinstance(number, int) or number < 0:
            raise ValueError(f"received[{origin[:40]!r}] must be an integer >= 0")


def _check_port(port: int) -> None:
    if not 0 < port <= 65535:
        raise ValueError(f"port must be in 1..65535, got {port}")


@dataclasses.dataclass(frozen=True, slots=True)
class Authenticate(ActivityWire):
    """``protocol`` (extension) names what the sender speaks; absent from a legacy server of
    the original course protocol, which gets no SERVER_INFO (it would not understand it)."""

    TYPE: ClassVar[str] = "AUTHENTICATE"
    OPTIONAL: ClassVar[frozenset[str]] = frozenset({"protocol", "received"})
    secret: str
    protocol: str | None = None
    # extension: a server joining again after losing its parent lists, per origin server, the
    # last activity its side of the tree received; the parent resends what is newer
    received: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        _check_text(self.secret, "secret")
        if self.received is not None:
            _check_received(self.received)


@dataclasses.dataclass(frozen=True, slots=True)
class InvalidMessageReply(ActivityWire):
    TYPE: ClassVar[str] = "INVALID_MESSAGE"
    info: str


@dataclasses.dataclass(frozen=True, slots=True)
class AuthenticationFail(ActivityWire):
    TYPE: ClassVar[str] = "AUTHENTICATION_FAIL"
    info: str


@dataclasses.dataclass(frozen=True, slots=True)
class Login(ActivityWire):
    """``secret`` is None (absent) only for ``anonymous``; an anonymous secret is ignored."""

    TYPE: ClassVar[str] = "LOGIN"
    OPTIONAL: ClassVar[frozenset[str]] = frozenset({"secret"})
    username: str
    secret: str | None = None

    def __post_init__(self) -> None:
        _check_text(self.username, "username")
        if self.username != ANONYMOUS:
            if self.secret is None:
                raise ValueError("a secret must be given for a username other than anonymous")
            _check_text(self.secret, "secret")


@dataclasses.dataclass(frozen=True, slots=True)
class LoginSuccess(ActivityWire):
    TYPE: ClassVar[str] = "LOGIN_SUCCESS"
    info: str


@dataclasses.dataclass(frozen=True, slots=True)
class Redirect(ActivityWire):
    TYPE: ClassVar[str] = "REDIRECT"
    hostname: str
    port: int

    def __post_init__(self) -> None:
        _check_text(self.hostname, "hostname")
        _check_port(self.port)


@dataclasses.dataclass(frozen=True, slots=True)
class LoginFailed(ActivityWire):
    TYPE: ClassVar[str] = "LOGIN_FAILED"
    info: str


@dataclasses.dataclass(frozen=True, slots=True)
class Logout(ActivityWire):
    TYPE: ClassVar[str] = "LOGOUT"


@dataclasses.dataclass(frozen=True, slots=True)
class ActivityMessage(ActivityWire):
    TYPE: ClassVar[str] = "ACTIVITY_MESSAGE"
    OPTIONAL: ClassVar[frozenset[str]] = frozenset({"secret"})
    username: str
    secret: str | None = None
    activity: dict[str, Any] = dataclasses.field(kw_only=True)  # last on the wire, as in the seed

    def __post_init__(self) -> None:
        _check_text(self.username, "username")


@dataclasses.dataclass(frozen=True, slots=True)
class ServerAnnounce(ActivityWire):
    """``level`` is None (absent) from a legacy server of the original course protocol;
    ``parent`` (the id of the server's parent, absent at the root and from legacy servers) is a
    gossamer extension that the original protocol's servers ignore: ``activity status`` draws
    the tree from it."""

    TYPE: ClassVar[str] = "SERVER_ANNOUNCE"
    OPTIONAL: ClassVar[frozenset[str]] = frozenset({"level", "parent"})
    id: str
    load: int
    hostname: str
    port: int
    level: int | None = None
    parent: str | None = None

    def __post_init__(self) -> None:
        _check_text(self.id, "id")
        _check_text(self.hostname, "hostname")
        _check_port(self.port)
        if self.parent is not None:
            _check_text(self.parent, "parent")
        if self.load < 0:
            raise ValueError(f"load must be >= 0, got {self.load}")
        if self.level is not None and self.level < 0:
            raise ValueError(f"level must be >= 0, got {self.level}")


@dataclasses.dataclass(frozen=True, slots=True)
class ActivityBroadcast(ActivityWire):
    TYPE: ClassVar[str] = "ACTIVITY_BROADCAST"
    activity: dict[str, Any]


@dataclasses.dataclass(frozen=True, slots=True)
class Register(ActivityWire):
    TYPE: ClassVar[str] = "REGISTER"
    username: str
    secret: str

    def __post_init__(self) -> None:
        _check_text(self.username, "username")
        _check_text(self.secret, "secret")
        if ":" in self.username:
            raise ValueError("username must not contain ':' (SERVER_INFO lists user:secret)")


@dataclasses.dataclass(frozen=True, slots=True)
class RegisterFailed(ActivityWire):
    TYPE: ClassVar[str] = "REGISTER_FAILED"
    info: str


@dataclasses.dataclass(frozen=True, slots=True)
class RegisterSuccess(ActivityWire):
    TYPE: ClassVar[str] = "REGISTER_SUCCESS"
    info: str


@dataclasses.dataclass(frozen=True, slots=True)
class _Lock(ActivityWire):
    """The four LOCK_* messages: the same fields, told apart by ``command``. ``secret`` may be
    absent: the reference implementation's servers send LOCK_REQUEST without it."""

    OPTIONAL: ClassVar[frozenset[str]] = frozenset({"id", "secret"})
    username: str
    secret: str | None = None
    id: str | None = None  # extension: the registration this lock belongs to

    def __post_init__(self) -> None:
        _check_text(self.username, "username")
        if self.secret is not None:
            _check_text(self.secret, "secret", empty=True)
        if self.id is not None:
            _check_text(self.id, "id")


@dataclasses.dataclass(frozen=True, slots=True)
class LockRequest(_Lock):
    TYPE: ClassVar[str] = "LOCK_REQUEST"


@dataclasses.dataclass(frozen=True, slots=True)
class LockDenied(_Lock):
    TYPE: ClassVar[str] = "LOCK_DENIED"


@dataclasses.dataclass(frozen=True, slots=True)
class LockAllowed(_Lock):
    TYPE: ClassVar[str] = "LOCK_ALLOWED"


@dataclasses.dataclass(frozen=True, slots=True)
class LockCancel(_Lock):
    TYPE: ClassVar[str] = "LOCK_CANCEL"


@dataclasses.dataclass(frozen=True, slots=True)
class ServerInfo(ActivityWire):
    """``users`` lists ``"name:secret"``; our servers send the salted hash as the secret."""

    TYPE: ClassVar[str] = "SERVER_INFO"
    OPTIONAL: ClassVar[frozenset[str]] = frozenset({"received"})
    id: str
    level: int
    users: list[str]
    # per origin server, the last activity this side of the tree received: the joining child
    # sends what is newer (see ``Authenticate.received``)
    received: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        _check_text(self.id, "id")
        if self.received is not None:
            _check_received(self.received)
        if self.level < 0:
            raise ValueError(f"level must be >= 0, got {self.level}")
        for entry in self.users:
            if ":" not in entry or entry.startswith(":"):
                raise ValueError(f"users entries are 'name:secret', got {entry[:40]!r}")


_TYPES: dict[str, type[ActivityWire]] = {
    cls.TYPE: cls
    for cls in (Authenticate, InvalidMessageReply, AuthenticationFail, Login, LoginSuccess,
                Redirect, LoginFailed, Logout, ActivityMessage, ServerAnnounce,
                ActivityBroadcast, Register, RegisterFailed, RegisterSuccess, LockRequest,
                LockDenied, LockAllowed, ServerInfo, LockCancel)
}

# field name -> (python type check, description) per annotation string
_KINDS: dict[str, tuple[type[Any], str]] = {
    "str": (str, "a string"),
    "str | None": (str, "a string"),
    "int": (int, "an integer"),
    "int | None": (int, "an integer"),
    "dict[str, Any]": (dict, "a JSON object"),
    "dict[str, Any] | None": (dict, "a JSON object"),
    "list[str]": (list, "an array of strings"),
}


@dataclasses.dataclass(frozen=True, slots=True)
class _Field:
    name: str
    kind: str
    required: bool


def _fields_of(cls: type[ActivityWire]) -> tuple[_Field, ...]:
    out = []
    for f in dataclasses.fields(cls):
        kind = f.type if isinstance(f.type, str) else str(f.type)
        if kind not in _KINDS:
            raise ConfigError(f"{cls.__name__}.{f.name}: unsupported annotation {kind!r}")
        out.append(_Field(f.name, kind, f.name not in cls.OPTIONAL))
    return tuple(out)


_FIELDS: dict[str, tuple[_Field, ...]] = {name: _fields_of(cls) for name, cls in _TYPES.items()}


def _check_value(command: str, field: _Field, value: Any) -> Any:
    expected, what = _KINDS[field.kind]
    if value is None and not field.required:
        return None
    if not isinstance(value, expected) or isinstance(value, bool):
        raise InvalidMessage(f"{command}: field {field.name!r} must be {what}")
    if field.kind == "list[str]" and not all(isinstance(v, str) for v in value):
        raise InvalidMessage(f"{command}: field {field.name!r} must be {what}")
    return value


class ActivityCodec:
    """Seed-003 messages to and from one line of JSON (without the newline)."""

    def __init__(self, *, max_frame: int = DEFAULT_MAX_LINE) -> None:
        if isinstance(max_frame, bool) or max_frame < 64:
            raise ConfigError(f"max_frame must be >= 64 bytes, got {max_frame}")
        self.max_frame = max_frame

    @staticmethod
    def to_dict(msg: Message) -> dict[str, Any]:
        if not isinstance(msg, ActivityWire) or msg.TYPE not in _TYPES:
            raise ConfigError(f"{type(msg).__name__} is not a seed-003 message")
        out: dict[str, Any] = {COMMAND: msg.TYPE}
        for field in _FIELDS[msg.TYPE]:
            value = getattr(msg, field.name)
            if value is None and not field.required:
                continue  # optional and absent, e.g. an anonymous LOGIN's secret
            out[field.name] = value
        return out

    def encode(self, msg: Message) -> bytes:
        data = orjson.dumps(self.to_dict(msg))
        if len(data) > self.max_frame:
            raise ConfigError(f"{msg.TYPE} encodes to {len(data)} bytes, over {self.max_frame}")
        return data

    def decode(self, data: bytes | str) -> ActivityWire:
        """One message from one line; ``ProtocolError`` whose text is the INVALID_MESSAGE info."""
        raw = data.encode() if isinstance(data, str) else data
        if len(raw) > self.max_frame:
            raise InvalidMessage(f"message of {len(raw)} bytes is over the limit of "
                                 f"{self.max_frame} bytes")
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise DecodeError(PARSE_ERROR) from None
        return self.from_dict(obj)

    @staticmethod
    def from_dict(obj: Any) -> ActivityWire:
        if not isinstance(obj, dict):
            raise DecodeError("the received message was not a JSON object")
        command = obj.get(COMMAND)
        if command is None:
            raise DecodeError(NO_COMMAND)
        if not isinstance(command, str):
            raise DecodeError("the command must be a string")
        cls = _TYPES.get(command)
        if cls is None:
            raise UnknownMessageType(f"unknown command {command[:MAX_NAME]!r}")
        kwargs: dict[str, Any] = {}
        for field in _FIELDS[command]:
            if field.name not in obj:
                if field.required:
                    raise InvalidMessage(f"{command}: missing field {field.name!r}")
                continue
            kwargs[field.name] = _check_value(command, field, obj[field.name])
        # other fields are ignored, as the seed asks of an anonymous LOGIN's secret
        try:
            return cls(**kwargs)
        except (TypeError, ValueError) as exc:
            raise InvalidMessage(f"{command}: {exc}") from None
