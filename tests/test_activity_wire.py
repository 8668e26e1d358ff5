"""Seed-003 wire format: every example of docs/activity-wire.md round-trips, bad input is
refused with the INVALID_MESSAGE info the docs promise."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import orjson
import pytest

from gossamer.core.errors import ProtocolError
from gossamer.protocols.activity import (
    ActivityCodec,
    ActivityMessage,
    LockRequest,
    Login,
    Logout,
    ServerAnnounce,
    ServerInfo,
)
from gossamer.protocols.activity.wire import _TYPES

DOC = Path(__file__).resolve().parents[1] / "docs" / "activity-wire.md"
CODEC = ActivityCodec()


def doc_vectors() -> list[str]:
    return re.findall(r"```json\n(.*?)\n```", DOC.read_text(), flags=re.S)


def test_docs_have_a_vector_for_every_command() -> None:
    commands = {orjson.loads(v)["command"] for v in doc_vectors()}
    assert commands == set(_TYPES)


@pytest.mark.parametrize("vector", doc_vectors())
def test_doc_vectors_round_trip(vector: str) -> None:
    msg = CODEC.decode(vector)
    assert orjson.loads(vector)["command"] == msg.TYPE
    assert orjson.loads(CODEC.encode(msg)) == orjson.loads(vector)
    assert CODEC.encode(msg) == vector.encode()  # field order as in the seed


def test_typed_fields() -> None:
    announce = CODEC.decode(b'{"command":"SERVER_ANNOUNCE","id":"x","load":5,'
                            b'"hostname":"h","port":3570,"level":1}')
    assert announce == ServerAnnounce(id="x", load=5, hostname="h", port=3570, level=1)
    assert CODEC.decode(b'{"command":"LOGOUT"}') == Logout()
    assert CODEC.decode(b'{"command":"LOGIN","username":"anonymous","secret":"ignored"}') \
        == Login(username="anonymous", secret="ignored")
    info = CODEC.decode(b'{"command":"SERVER_INFO","id":"p","level":0,"users":["a:b"]}')
    assert isinstance(info, ServerInfo) and info.users == ["a:b"]
    lock = CODEC.decode(b'{"command":"LOCK_REQUEST","username":"u","secret":"s","id":"s1:1"}')
    assert lock == LockRequest(username="u", secret="s", id="s1:1")
    act = CODEC.decode(b'{"command":"ACTIVITY_MESSAGE","username":"anonymous","activity":{}}')
    assert act == ActivityMessage(username="anonymous", activity={})


BAD: list[tuple[Any, str]] = [
    (b"{not json", "JSON parse error while parsing message"),
    (b"", "JSON parse error while parsing message"),
    (b"[1, 2]", "the received message was not a JSON object"),
    (b'{"username":"a"}', "the received message did not contain a command"),
    (b'{"command":7}', "the command must be a string"),
    (b'{"command":"FLY"}', "unknown command 'FLY'"),
    (b'{"command":"LOGIN"}', "LOGIN: missing field 'username'"),
    (b'{"command":"LOGIN","username":"bob"}',
     "LOGIN: a secret must be given for a username other than anonymous"),
    (b'{"command":"LOGIN","username":5}', "LOGIN: field 'username' must be a string"),
    (b'{"command":"REDIRECT","hostname":"h","port":"80"}',
     "REDIRECT: field 'port' must be an integer"),
    (b'{"command":"REDIRECT","hostname":"h","port":true}',
     "REDIRECT: field 'port' must be an integer"),
    (b'{"command":"REDIRECT","hostname":"h","port":70000}',
     "REDIRECT: port must be in 1..65535, got 70000"),
    (b'{"command":"ACTIVITY_MESSAGE","username":"a","activity":[1]}',
     "ACTIVITY_MESSAGE: field 'activity' must be a JSON object"),
    (b'{"command":"SERVER_ANNOUNCE","id":"x","load":-1,"hostname":"h","port":1,"level":0}',
     "SERVER_ANNOUNCE: load must be >= 0, got -1"),
    (b'{"command":"SERVER_INFO","id":"x","level":0,"users":[1]}',
     "SERVER_INFO: field 'users' must be an array of strings"),
    (b'{"command":"SERVER_INFO","id":"x","level":0,"users":["nocolon"]}',
     "SERVER_INFO: users entries are 'name:secret', got 'nocolon'"),
    (b'{"command":"REGISTER","username":"a:b","secret":"s"}',
     "REGISTER: username must not contain ':' (SERVER_INFO lists user:secret)"),
    (b'{"command":"AUTHENTICATE","secret":""}', "AUTHENTICATE: secret must be non-empty"),
]


@pytest.mark.parametrize(("line", "info"), BAD)
def test_bad_input_is_a_protocol_error_with_its_info(line: bytes, info: str) -> None:
    with pytest.raises(ProtocolError) as caught:
        CODEC.decode(line)
    assert str(caught.value) == info


def test_line_limit() -> None:
    codec = ActivityCodec(max_frame=100)
    line = orjson.dumps({"command": "LOGOUT", "pad": "x" * 200})
    with pytest.raises(ProtocolError, match="over the limit of 100 bytes"):
        codec.decode(line)
