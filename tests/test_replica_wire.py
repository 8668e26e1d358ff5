"""The seed-000 wire format: the examples in docs/replica-wire.md are test vectors."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gossamer.core import DecodeError, FrameTooLarge, InvalidMessage, ProtocolError
from gossamer.protocols.replica import (
    Clear,
    Conflict,
    Data,
    Left,
    Nack,
    Refused,
    ReplicaCodec,
    Retry,
    Snapshot,
    StopAll,
    Subscribe,
    Welcome,
    crc_of,
)

DOC = Path(__file__).resolve().parents[1] / "docs" / "replica-wire.md"
KINDS = {"subscribe": Subscribe, "data": Data, "nack": Nack, "retry": Retry,
         "conflict": Conflict, "clear": Clear, "stop": StopAll, "left": Left,
         "snapshot": Snapshot, "welcome": Welcome, "refused": Refused}
codec = ReplicaCodec()


def vectors() -> list[tuple[str, str]]:
    text = DOC.read_text()
    found = re.findall(r"<!-- vector: (\w+) -->\s*```json\n(.*?)\n```", text, re.S)
    assert len(found) >= 10, "the doc lost its examples"
    return found


@pytest.mark.parametrize(("kind", "text"), vectors())
def test_doc_examples_decode_to_their_type_and_round_trip(kind: str, text: str) -> None:
    msg = codec.decode(text)
    assert isinstance(msg, KINDS[kind])
    assert orjson.loads(codec.encode(msg)) == orjson.loads(text)
    if isinstance(msg, Data):
        assert msg.crc_ok, "the doc's crc must be right"
    if isinstance(msg, Retry):
        assert all(part.crc_ok for part in msg.retry)


def test_the_seeds_own_subscribe_line_decodes() -> None:
    # from the seed's hub log: {"id"=>"a7ec...", "vector"=>{}, "subscribe"=>true}
    msg = codec.decode('{"id": "a7ec773b815d7896b3edb47f9353df17", "vector": {}, '
                       '"subscribe": true}')
    assert msg == Subscribe(id="a7ec773b815d7896b3edb47f9353df17", vector={})


def test_crc_is_the_seeds_crc32_of_key_bar_value() -> None:
    import zlib

    assert crc_of("k", "abc123") == zlib.crc32(b"k|abc123")
    assert crc_of("k", "abc123", {"b": 1, "a": 2}) == zlib.crc32(b'k|abc123|{"a":2,"b":1}')


BAD: list[tuple[str, type[ProtocolError], str]] = [
    ("not json", DecodeError, "not JSON"),
    ("[1, 2]", DecodeError, "object"),
    ('{"vector": {}, "subscribe": true}', InvalidMessage, "id"),
    ('{"id": 5, "vector": {}, "subscribe": true}', InvalidMessage, "id"),
    ('{"id": "a", "vector": {}, "subscribe": 1}', InvalidMessage, "true"),
    ('{"id": "a", "vector": {"b": -1}, "subscribe": true}', InvalidMessage, "vector"),
    ('{"id": "a", "vector": {"b": true}, "subscribe": true}', InvalidMessage, "vector"),
    ('{"id": "a", "vector": {}, "subscribe": true, "x": 1}', InvalidMessage, "unknown"),
    ('{"id": "a", "vector": {}, "subscribe": true, "token": ""}', InvalidMessage, "token"),
    ('{"id": "a", "vector": {}, "subscribe": true, "token": 5}', InvalidMessage, "token"),
    ('{"id": "a", "vector": {}, "subscribe": true, "incarnation": 0}', InvalidMessage,
     "incarnation"),
    ('{"id": "hub", "dest": "a", "welcome": true, "resume": -1}', InvalidMessage, "resume"),
    ('{"id": "hub", "dest": "a", "refused": true, "code": 1000, "reason": "x"}',
     InvalidMessage, "code"),
    ('{"id": "a", "dest": "b", "start": 3, "end": 2, "nack": true}', InvalidMessage, "start"),
    ('{"id": "a", "dest": "b", "start": "1", "end": 2, "nack": true}', InvalidMessage, "start"),
    ('{"id": "a", "key": "k", "old_value": null, "value": "v", "crc": 1, "vector": {}}',
     InvalidMessage, "vector"),
    ('{"id": "a", "key": "k", "old_value": 7, "value": "v", "crc": 1, "vector": {"a": 1}}',
     InvalidMessage, "old_value"),
    ('{"id": "a", "key": "", "old_value": null, "value": "v", "crc": 1, "vector": {"a": 1}}',
     InvalidMessage, "key"),
    ('{"id": "a", "dest": "b", "retry": [{"id": "a"}], "retry2": 1}', InvalidMessage,
     "unknown"),
    ('{"id": "a", "dest": "b", "retry": [5]}', InvalidMessage, "data message"),
    ('{"id": "a"}', InvalidMessage, "no flag"),
    ('{"id": "a b", "clear": true}', InvalidMessage, "id"),
    ('{"id": "a", "vector": {"no spaces": 1}, "subscribe": true}', InvalidMessage, "vector key"),
]


@pytest.mark.parametrize(("frame", "error", "says"), BAD)
def test_bad_frames_are_refused_with_a_reason(
    frame: str, error: type[ProtocolError], says: str
) -> None:
    with pytest.raises(error) as caught:
        codec.decode(frame)
    assert says in str(caught.value)


def test_frames_over_the_limit_are_refused_in_bytes() -> None:
    small = ReplicaCodec(max_frame=64)
    with pytest.raises(FrameTooLarge):
        small.decode('{"id": "a", "clear": true, "pad": "' + "é" * 20 + '"}')


def test_a_corrupted_value_fails_the_crc() -> None:
    good = Data(id="a", key="k", old_value=None, value="v1", crc=crc_of("k", "v1"),
                vector={"a": 1})
    assert good.crc_ok
    flipped = Data(id="a", key="k", old_value=None, value="v2", crc=good.crc, vector={"a": 1})
    assert not flipped.crc_ok


ids = st.from_regex(r"[a-z][a-z0-9]{0,7}", fullmatch=True)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                 max_size=3),
    max_leaves=8,
)


@given(sender=ids, key=st.text(min_size=1, max_size=10), old=st.none() | st.text(max_size=12),
       value=st.text(max_size=12), data=json_values, deleted=st.booleans(),
       others=st.dictionaries(ids, st.integers(0, 10**6), max_size=4),
       seq=st.integers(1, 10**6))
def test_data_round_trips(sender: str, key: str, old: str | None, value: str, data: Any,
                          deleted: bool, others: dict[str, int], seq: int) -> None:
    vector = {**others, sender: seq}
    msg = Data(id=sender, key=key, old_value=old, value=value, crc=crc_of(key, value, data),
               vector=vector, data=data, deleted=deleted)
    back = codec.decode(codec.encode(msg))
    assert back == msg
    assert isinstance(back, Data) and back.crc_ok and back.seq == seq


@pytest.mark.parametrize("objects", [
    '{"k": []}',  # an empty path
    '{"k": [["r1", null, "c1", 1, 5]]}',  # five fields
    '{"k": [["r1", null, "c1", 0, 5, false]]}',  # seq 0
    '{"k": [["r1", 7, "c1", 1, 5, false]]}',  # old revision not a string
    '{"k": [["r1", null, "bad id!", 1, 5, false]]}',  # writer not an id
    '{"k": [["", null, "c1", 1, 5, false]]}',  # empty revision
    '{"k": [["r1", null, "c1", 1, 5, "no"]]}',  # deleted not a bool
    '{"k": "r1"}',  # not a list
])
def test_malformed_snapshots_are_refused(objects: str) -> None:
    frame = ('{"id": "hub", "dest": "c1", "snapshot": true, "vector": {}, "objects": '
             + objects + ', "last": true}')
    with pytest.raises(InvalidMessage):
        codec.decode(frame)
