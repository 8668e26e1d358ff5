"""Messages and the codec: round trips, every kind of decode error, registration, immutability.

Every message here registers on a private ``Codec`` so nothing collides with the global one.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gossamer.core import (
    Codec,
    ConfigError,
    DecodeError,
    FrameTooLarge,
    InvalidMessage,
    LocalError,
    Message,
    ProtocolError,
    UnknownMessageType,
    message,
)

codec = Codec()


@message("t.x", codec=codec)
class Sample(Message):
    count: int
    name: str
    ratio: float
    flag: bool
    pair: tuple[int, str]
    items: tuple[str, ...]
    numbers: list[int]
    table: dict[str, list[int]]
    maybe: int | None = None
    anything: Any = None


@message("t.positive", codec=codec)
class Positive(Message):
    value: int

    def __post_init__(self) -> None:
        if self.value < 1:
            raise ValueError(f"value must be >= 1, got {self.value}")


@message("t.empty", codec=codec)
class Empty(Message):
    """A message with no fields."""


def sample(**overrides: Any) -> Sample:
    fields: dict[str, Any] = {
        "count": 1,
        "name": "n",
        "ratio": 0.5,
        "flag": True,
        "pair": (1, "a"),
        "items": ("x", "y"),
        "numbers": [1, 2],
        "table": {"k": [3]},
    }
    fields.update(overrides)
    return Sample(**fields)


def sample_wire(**overrides: Any) -> dict[str, Any]:
    wire = codec.to_dict(sample())
    wire.update(overrides)
    return wire


ints = st.integers(min_value=-(2**63), max_value=2**63 - 1)
floats = st.floats(allow_nan=False, allow_infinity=False)
json_values = st.recursive(
    st.none() | st.booleans() | ints | floats | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                max_size=3),
    max_leaves=10,
)


@given(
    count=ints,
    name=st.text(max_size=20),
    ratio=floats,
    flag=st.booleans(),
    pair=st.tuples(ints, st.text(max_size=5)),
    items=st.lists(st.text(max_size=5), max_size=5).map(tuple),
    numbers=st.lists(ints, max_size=5),
    table=st.dictionaries(st.text(max_size=5), st.lists(ints, max_size=3), max_size=4),
    maybe=st.none() | ints,
    anything=json_values,
)
def test_round_trip(**fields: Any) -> None:
    msg = Sample(**fields)
    data = codec.encode(msg)
    decoded = codec.decode(data)
    assert type(decoded) is Sample
    assert decoded == msg
    assert isinstance(decoded.pair, tuple)
    assert isinstance(decoded.items, tuple)
    assert isinstance(decoded.numbers, list)
    assert codec.decode(data.decode()) == msg  # str frames decode the same


def test_encoding_is_compact_json_with_type() -> None:
    data = codec.encode(Positive(3))
    assert data == b'{"type":"t.positive","value":3}'
    assert codec.decode(data) == Positive(3)
    assert codec.encode(Empty()) == b'{"type":"t.empty"}'
    assert codec.decode(b'{"type":"t.empty"}') == Empty()


def test_defaults_may_be_omitted_on_the_wire() -> None:
    wire = sample_wire()
    del wire["maybe"], wire["anything"]
    decoded = codec.decode(orjson.dumps(wire))
    assert decoded == sample()
    assert decoded.maybe is None


def test_int_is_accepted_for_float() -> None:
    decoded = codec.decode(orjson.dumps(sample_wire(ratio=2)))
    assert isinstance(decoded, Sample)
    assert decoded.ratio == 2.0
    assert type(decoded.ratio) is float


def test_types_lists_registered() -> None:
    assert codec.types() == {"t.x": Sample, "t.positive": Positive, "t.empty": Empty}
    assert Sample.TYPE == "t.x"


def expect(error: type[Exception], data: bytes | str, *, on: Codec = codec) -> ProtocolError:
    with pytest.raises(error) as info:
        on.decode(data)
    exc = info.value
    assert isinstance(exc, ProtocolError)
    assert not isinstance(exc, LocalError)
    return exc


@pytest.mark.parametrize("data", [b"", b"{", b"not json", b"{'type': 't.x'}", b"\xff\xfe"])
def test_not_json_is_decode_error(data: bytes) -> None:
    assert expect(DecodeError, data).reason == "decode"


@pytest.mark.parametrize("data", [b"[]", b"1", b'"t.x"', b"null", b"true", b'[{"type":"t.x"}]'])
def test_non_object_is_decode_error(data: bytes) -> None:
    expect(DecodeError, data)


@pytest.mark.parametrize("data", [b"{}", b'{"value":1}', b'{"type":1,"value":1}',
                                  b'{"type":null}'])
def test_missing_or_bad_type_is_decode_error(data: bytes) -> None:
    expect(DecodeError, data)


def test_unknown_type() -> None:
    exc = expect(UnknownMessageType, b'{"type":"t.nope","value":1}')
    assert exc.reason == "unknown_type"
    # known to another codec is still unknown here
    expect(UnknownMessageType, b'{"type":"t.x"}', on=Codec())


@pytest.mark.parametrize(
    "wire",
    [
        {"type": "t.positive"},  # missing field
        {"type": "t.positive", "value": 1, "extra": 2},  # extra field
        {"type": "t.positive", "value": True},  # bool is not int
        {"type": "t.positive", "value": "1"},  # str is not int
        {"type": "t.positive", "value": 1.0},  # float is not int
        {"type": "t.positive", "value": None},
        {"type": "t.positive", "value": [1]},
        {"type": "t.positive", "value": 0},  # __post_init__ ValueError
        {"type": "t.positive", "value": -3},
        {"type": "t.empty", "x": 1},
    ],
)
def test_invalid_fields(wire: dict[str, Any]) -> None:
    assert expect(InvalidMessage, orjson.dumps(wire)).reason == "invalid"


@pytest.mark.parametrize(
    "overrides",
    [
        {"name": 1},
        {"ratio": "0.5"},
        {"ratio": True},
        {"flag": 1},
        {"flag": "true"},
        {"pair": [1]},
        {"pair": [1, "a", 2]},
        {"pair": ["1", "a"]},
        {"pair": {"0": 1}},
        {"items": "xy"},
        {"items": [1]},
        {"numbers": [1, "2"]},
        {"numbers": [True]},
        {"numbers": {"a": 1}},
        {"table": []},
        {"table": {"k": 3}},
        {"table": {"k": [1.5]}},
        {"maybe": "1"},
        {"maybe": False},
    ],
)
def test_wrong_nested_types_are_invalid(overrides: dict[str, Any]) -> None:
    expect(InvalidMessage, orjson.dumps(sample_wire(**overrides)))


def test_post_init_error_keeps_its_cause() -> None:
    exc = expect(InvalidMessage, b'{"type":"t.positive","value":0}')
    assert isinstance(exc.__cause__, ValueError)
    assert "value must be >= 1" in str(exc)


def test_too_large_frame() -> None:
    small = Codec(max_frame=32)
    small.register(Positive)
    ok = b'{"type":"t.positive","value":1}'
    assert len(ok) <= 32
    assert small.decode(ok) == Positive(1)
    exc = expect(FrameTooLarge, b'{"type":"t.positive","value":1}   ', on=small)
    assert exc.reason == "too_large"
    expect(FrameTooLarge, b"x" * 33, on=small)  # checked before parsing


def test_too_large_str_frame_counts_bytes_not_characters() -> None:
    small = Codec(max_frame=16)
    text = '"' + "\u00e9" * 10 + '"'  # 12 characters, 22 bytes of UTF-8
    assert len(text) <= 16 < len(text.encode())
    expect(FrameTooLarge, text, on=small)


def test_encode_over_max_frame_is_local_error() -> None:
    small = Codec(max_frame=16)
    small.register(Positive)
    with pytest.raises(ConfigError):
        small.encode(Positive(10**12))


def test_encode_unregistered_is_local_error() -> None:
    with pytest.raises(ConfigError):
        Codec().encode(Positive(1))


def test_bad_max_frame() -> None:
    with pytest.raises(ConfigError):
        Codec(max_frame=0)


def test_two_classes_under_one_type_is_config_error() -> None:
    private = Codec()

    @message("t.dup", codec=private)
    class First(Message):
        a: int

    with pytest.raises(ConfigError):

        @message("t.dup", codec=private)
        class Second(Message):
            b: int

    assert private.types() == {"t.dup": First}
    assert private.register(First) is First  # registering the same class again is fine


def test_register_needs_type_and_message_dataclass() -> None:
    private = Codec()

    @dataclasses.dataclass(frozen=True, slots=True)
    class NoType(Message):
        a: int = 0

    with pytest.raises(ConfigError):
        private.register(NoType)

    @dataclasses.dataclass(frozen=True)
    class NotMessage:
        TYPE = "t.plain"
        a: int = 0

    with pytest.raises(ConfigError):
        private.register(NotMessage)  # type: ignore[type-var]
    assert private.types() == {}


def test_messages_are_frozen() -> None:
    msg = Positive(1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        msg.value = 2  # type: ignore[misc]
    assert msg.value == 1


def test_messages_are_slotted() -> None:
    msg = sample()
    assert "__slots__" in Sample.__dict__
    assert not hasattr(msg, "__dict__")
    with pytest.raises((AttributeError, TypeError)):
        msg.new_attribute = 1  # type: ignore[attr-defined]


def test_messages_compare_and_hash_by_value() -> None:
    assert Positive(2) == Positive(2)
    assert Positive(2) != Positive(3)
    assert hash(Positive(2)) == hash(Positive(2))


def test_constructor_validates() -> None:
    with pytest.raises(ValueError):
        Positive(0)


def test_default_trace_ids() -> None:
    assert Positive(1).trace_ids() == (None, None, None, None)
