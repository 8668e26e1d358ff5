"""APSYN/01 wire format (seed 002): the vectors of docs/appsync-wire.md, accepted and refused
inputs for every rule, the round wrap, and a fuzz test (only typed errors, never a crash)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gossamer.protocols.appsync import (
    AppSyncCodec,
    AppSyncProtocolError,
    BadRequest,
    Create,
    Delete,
    Header,
    Init,
    Join,
    Mode,
    ObjectInfo,
    Rqst,
    Scope,
    SessionConfig,
    Status,
    Sync,
    Update,
    VersionNotSupported,
    next_round,
)
from gossamer.protocols.appsync.wire import _decode_header as decode_header

codec = AppSyncCodec()
DOC = Path(__file__).resolve().parent.parent / "docs" / "appsync-wire.md"

WIRE = {
    "join": Join(header=Header("", 0, 0), id="appName-sessionId-salt"),
    "init": Init(header=Header("0001", 0, 1), config=SessionConfig(20, 200, 10),
                 creates=(Create(ObjectInfo(Scope.GLOBAL, "quiz"), Mode.RW, {"round": 1}),)),
    "sync": Sync(header=Header("0001", 2, 1), acks=(21, 32),
                 actions=(Update(ObjectInfo(Scope.GLOBAL, "quiz.round"), 2),)),
    "beat": Sync(header=Header("0001", 3, 2), acks=(), actions=()),
    "rqst": Rqst(header=Header("0001", 2, 2), actions=(
        Create(ObjectInfo(Scope.CLIENT, "me", "0001"), Mode.RO, {"x": 1}),
        Delete(ObjectInfo(Scope.GLOBAL, "old")))),
    "empty": Rqst(header=Header("0001", 0xFFFF, 0xFFFF), actions=()),
}


def doc_vectors() -> dict[str, bytes]:
    text = DOC.read_text()
    block = text.split("Wire (our encoder, byte for byte):", 1)[1].split("```")[1]
    out = {}
    for line in block.strip().splitlines():
        name, frame = line.split(None, 1)
        out[name] = frame.strip().encode()
    return out


def test_every_wire_vector_of_the_doc_is_what_the_encoder_writes_and_decodes_back() -> None:
    vectors = doc_vectors()
    assert set(vectors) == set(WIRE)
    for name, msg in WIRE.items():
        assert codec.encode(msg) == vectors[name], name
        decoded = (codec.decode_from_peer(vectors[name]) if isinstance(msg, Join | Rqst)
                   else codec.decode_from_server(vectors[name]))
        assert decoded == msg, name


def test_the_seeds_own_examples_parse() -> None:
    # {"id":"appName-sessionId-salt"} and the heartbeat {"ack":[],"syn":[]}
    join = codec.decode_from_peer(doc_vectors()["join"])
    assert isinstance(join, Join) and join.id == "appName-sessionId-salt"
    beat = codec.decode_from_server(
        b'{"h":{"p":"APSYN/01","c":"0001","r":"0003","l":"0002"},"b":{"ack":[],"syn":[]}}')
    assert isinstance(beat, Sync) and beat.acks == () and beat.actions == ()


def test_any_key_order_whitespace_and_lower_case_hex_are_accepted() -> None:
    msg = codec.decode_from_peer(
        b'{ "h" : { "l":"0000", "r":"0000", "c":"", "p":"APSYN/01" },\t"b" :\r\n{"id":"s"} }')
    assert msg == Join(header=Header("", 0, 0), id="s")
    rqst = codec.decode_from_peer(b'{"h":{"p":"APSYN/01","c":"00ab","r":"00ff","l":"00fe"},'
                                  b'"b":[]}')
    assert rqst == Rqst(header=Header("00AB", 0xFF, 0xFE), actions=())
    assert codec.encode(rqst) == (b'{"h":{"p":"APSYN/01","c":"00AB","r":"00FF","l":"00FE"},'
                                  b'"b":[]}')


def test_the_round_wraps_from_ffff_to_0001_and_0000_is_reserved() -> None:
    assert next_round(0xFFFE) == 0xFFFF
    assert next_round(0xFFFF) == 1
    assert next_round(0) == 1
    with pytest.raises(ValueError):
        Rqst(header=Header("0001", 0, 0), actions=())
    with pytest.raises(ValueError):
        Sync(header=Header("0001", 0, 0), acks=(), actions=())


HEAD = '{"p":"APSYN/01","c":"0001","r":"0002","l":"0002"}'
JOINHEAD = '{"p":"APSYN/01","c":"","r":"0000","l":"0000"}'


def rqst_with(action: str) -> bytes:
    return f'{{"h":{HEAD},"b":[{action}]}}'.encode()


REFUSED_40 = [
    f'{{"h":{JOINHEAD}}}',  # no body
    '{"h":{"p":"APSYN/01","c":"","r":"000","l":"0000"},"b":{"id":"s"}}',
    '{"h":{"p":"APSYN/01","c":"","r":"00G0","l":"0000"},"b":{"id":"s"}}',
    '{"h":{"p":"APSYN/01","c":"","r":"0000","l":"0001"},"b":{"id":"s"}}',  # join with l
    f'{{"h":{JOINHEAD},"b":{{"id":"s","id":"t"}}}}',  # duplicate key
    f'{{"h":{JOINHEAD},"b":{{"id":"s","x":1}}}}',  # extra key
    f'{{"h":{JOINHEAD},"b":{{"id":""}}}}',
    '{"h":{"p":"APSYN/1","c":"","r":"0000","l":"0000"},"b":{"id":"s"}}',
    '{"h":{"p":"APSYN/01","c":"001","r":"0001","l":"0001"},"b":[]}',
    '{"h":{"p":"APSYN/01","c":"","r":"0001","l":"0001"},"b":[]}',  # rqst without client id
    f'{{"h":{HEAD},"b":{{}}}}',
    '[1,2]',
    'NaN',
    '{"h":' + HEAD + ',"b":[' + ",".join(['{"t":"del","i":{"s":"G","n":"a"}}'] * 257) + "]}",
    '{"h":{"p":"APSYN/01","c":"0001","r":"0002","l":"0002"},"b":[],"x":1}',
    "not json",
]
REFUSED_ACTIONS = [
    '{"t":"upd","i":{"s":"G","i":"0001","n":"a"},"d":1}',  # G with i
    '{"t":"upd","i":{"s":"C","n":"a"},"d":1}',  # C without i
    '{"t":"upd","i":{"s":"C","i":"01","n":"a"},"d":1}',  # short scope id
    '{"t":"upd","i":{"s":"X","n":"a"},"d":1}',
    '{"t":"upd","i":{"s":"G","n":"a..b"},"d":1}',
    '{"t":"upd","i":{"s":"G","n":"1-x"},"d":1}',
    '{"t":"upd","i":{"s":"G","n":""},"d":1}',
    '{"t":"upd","i":{"s":"G","n":"a"}}',  # no d
    '{"t":"cre","i":{"s":"G","n":"a.b"},"m":"RW","d":1}',  # dotted create
    '{"t":"cre","i":{"s":"G","n":"a"},"m":"rw","d":1}',
    '{"t":"cre","i":{"s":"G","n":"a"},"d":1}',
    '{"t":"put","i":{"s":"G","n":"a"}}',
    '{"t":"del","i":{"s":"G","n":"a"},"d":1}',
    '{"t":"upd","i":{"s":"G","n":"a"},"d":123456789012345678901234567890}',
    '{"t":"upd","i":{"s":"G","n":"a"},"d":' + "[" * 40 + "]" * 40 + "}",
    '"del"',
]


@pytest.mark.parametrize("frame", REFUSED_40 + [rqst_with(a).decode() for a in REFUSED_ACTIONS])
def test_refused_inputs_are_status_40(frame: str) -> None:
    with pytest.raises(BadRequest) as info:
        codec.decode_from_peer(frame.encode())
    assert info.value.status is Status.BAD_REQUEST


@pytest.mark.parametrize("frame", [
    '{"h":{"p":"APSYN/01","c":"0001","r":"0002","l":"0001"},"b":{"ack":[99],"syn":[]}}',
    '{"h":{"p":"APSYN/01","c":"0001","r":"0002","l":"0001"},"b":{"ack":[true],"syn":[]}}',
    '{"h":{"p":"APSYN/01","c":"0001","r":"0000","l":"0001"},"b":{"sc":{"min":"C9","max":"C8",'
    '"tout":"1"},"cr":[]}}',
    '{"h":{"p":"APSYN/01","c":"0001","r":"0000","l":"0001"},"b":{"sc":{"min":"1","max":"C8",'
    '"tout":"12345"},"cr":[]}}',
    '{"h":{"p":"APSYN/01","c":"0001","r":"0000","l":"0001"},"b":{"sc":{"min":"1","max":"C8",'
    '"tout":"1"},"cr":[{"t":"del","i":{"s":"G","n":"a"}}]}}',
    '{"h":{"p":"APSYN/01","c":"","r":"0000","l":"0001"},"b":{"sc":{"min":"1","max":"C8",'
    '"tout":"1"},"cr":[]}}',
])
def test_refused_server_frames_are_status_40(frame: str) -> None:
    with pytest.raises(BadRequest):
        codec.decode_from_server(frame.encode())


def test_an_empty_init_is_accepted() -> None:
    init = codec.decode_from_server(b'{"h":{"p":"APSYN/01","c":"0001","r":"0000","l":"0001"},'
                                    b'"b":{"sc":{"min":"0","max":"c8","tout":"a"},"cr":[]}}')
    assert init == Init(header=Header("0001", 0, 1), config=SessionConfig(0, 200, 10),
                        creates=())


def test_another_version_is_status_55() -> None:
    with pytest.raises(VersionNotSupported) as info:
        codec.decode_from_peer(b'{"h":{"p":"APSYN/02","c":"","r":"0000","l":"0000"},'
                               b'"b":{"id":"s"}}')
    assert info.value.status is Status.VERSION_NOT_SUPPORTED


def test_every_action_and_name_rule_round_trips() -> None:
    actions = (Create(ObjectInfo(Scope.LOCAL, "$a_1", "0001"), Mode.NA, [1, "x", None]),
               Update(ObjectInfo(Scope.GLOBAL, "a.b.$c_9"), {"k": None}),
               Delete(ObjectInfo(Scope.CLIENT, "x.y", "ffff")))
    frame = codec.encode(Rqst(header=Header("0002", 5, 5), actions=actions))
    back = codec.decode_from_peer(frame)
    assert isinstance(back, Rqst)
    assert back.actions[2].info.scope_id == "FFFF"
    assert back.actions[:2] == actions[:2]


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-10, 10) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.sampled_from(["h", "b", "p", "c", "r", "l", "id", "t", "i", "n", "s", "m", "d",
                         "ack", "syn"]), inner, max_size=4),
    max_leaves=12)


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.binary(max_size=200), json_values.map(lambda v: json.dumps(v).encode())))
def test_fuzz_decoding_raises_only_typed_errors(frame: bytes) -> None:
    for decode in (codec.decode_from_peer, codec.decode_from_server):
        try:
            decode(frame)
        except AppSyncProtocolError as exc:
            assert exc.status in (Status.BAD_REQUEST, Status.VERSION_NOT_SUPPORTED)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(list(WIRE.values())), st.integers(0, 200), st.integers(0, 255))
def test_fuzz_one_byte_changed_is_a_typed_error_or_a_valid_message(msg: object, where: int,
                                                                   byte: int) -> None:
    frame = bytearray(codec.encode(msg))  # type: ignore[arg-type]
    frame[where % len(frame)] = byte
    for decode in (codec.decode_from_peer, codec.decode_from_server):
        try:
            decoded = decode(bytes(frame))
        except AppSyncProtocolError:
            continue
        assert codec.encode(decoded) is not None
        assert re.match(rb'\{"h":\{"p":"APSYN/01"', codec.encode(decoded))


def test_a_sync_built_from_shared_encoded_actions_is_the_same_bytes() -> None:
    sync = WIRE["sync"]
    assert isinstance(sync, Sync)
    syn = b"[" + b",".join(codec.encode_action(a) for a in sync.actions) + b"]"
    assert codec.encode_sync(sync.header, sync.acks, syn) == codec.encode(sync)
    assert codec.encode_sync(Header("0001", 3, 2), (), b"[]") == doc_vectors()["beat"]
    with pytest.raises(ValueError):
        codec.encode_sync(Header("0001", 3, 2), (99,), b"[]")


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(["", "0001", "00af", "00AF", "FFFF", "1", "0G01", "00001", " 001"]),
       st.sampled_from(["0000", "0001", "fffe", "FFFE", "1", "10000", "-001", "00 1"]),
       st.sampled_from(["0000", "0002", "beef", "BEEF", "2", "XYZW"]),
       st.sampled_from(["APSYN/01", "APSYN/02", "apsyn/01", "APSYN/1"]),
       st.booleans())
def test_the_quick_header_path_reads_what_the_grammar_says(client: str, r: str, last: str,
                                                           proto: str, shuffled: bool) -> None:
    """The common header (upper-case hex, our version) is read without the general path's
    checks: it gives the same ``Header`` and refuses what the general path refuses."""
    head = {"p": proto, "c": client, "r": r, "l": last}
    if shuffled:
        head = dict(reversed(list(head.items())))
    hex4 = re.compile(r"[0-9A-Fa-f]{4}")
    fields = ((client == "" or hex4.fullmatch(client)) and hex4.fullmatch(r)
              and hex4.fullmatch(last))
    if not re.fullmatch(r"APSYN/[0-9]{2}", proto):
        with pytest.raises(BadRequest):
            decode_header(head)
        return
    if proto != "APSYN/01":  # the version is judged before the fields
        with pytest.raises(VersionNotSupported):
            decode_header(head)
        return
    if not fields:
        with pytest.raises(BadRequest):
            decode_header(head)
        return
    header = decode_header(head)
    assert header == Header(client.upper(), int(r, 16), int(last, 16))
    assert header.client_id == client.upper() and header.version == "01"
    for extra in ({**head, "x": 1}, {k: v for k, v in head.items() if k != "l"}):
        with pytest.raises(BadRequest):
            decode_header(extra)


@pytest.mark.parametrize(("client", "r", "last", "acks"), [
    ("0001", 1, 0, ()), ("00AF", 0xFFFF, 0xFFFE, (21, 23, 32)), ("", 7, 7, (55,))])
def test_a_sync_built_without_a_header_object_is_the_same_bytes(
        client: str, r: int, last: int, acks: tuple[int, ...]) -> None:
    syn = b"[" + codec.encode_action(Delete(ObjectInfo(Scope.GLOBAL, "board"))) + b"]"
    parts = codec.sync_parts_for(client, r, last, acks, syn)
    assert parts[1] is syn  # shared with every other peer's sync of the round
    assert b"".join(parts) == orjson.dumps(
        {"h": Header(client, r, last).to_wire(), "b": {"ack": list(acks), "syn": json.loads(syn)}})
    for bad in ((client, 0, last, acks), (client, r, 0x10000, acks), (client, r, last, (99,)),
                ("00af", r, last, acks), ("1", r, last, acks)):
        with pytest.raises(ValueError):
            codec.sync_parts_for(*bad, syn)
    # CTRL's per-peer path: the round checked once, the same parts
    assert codec.round_syncs(r)(client.encode(), last, acks, syn) == parts
    with pytest.raises(ValueError):
        codec.round_syncs(0)


def test_object_infos_are_checked_once_and_the_cache_stays_bounded(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from gossamer.protocols.appsync import wire

    monkeypatch.setattr(wire, "INFO_CACHE_SIZE", 4)
    monkeypatch.setattr(wire, "_INFO_CACHE", {})

    def rqst(name: str, scope: str = "G") -> str:
        return ('{"h":{"p":"APSYN/01","c":"0001","r":"0002","l":"0001"},'
                f'"b":[{{"t":"upd","i":{{"s":"{scope}","n":"{name}"}},"d":1}}]}}')

    first = codec.decode_from_peer(rqst("board.p1"))
    again = codec.decode_from_peer(rqst("board.p1"))
    assert isinstance(first, Rqst) and isinstance(again, Rqst)
    assert again.actions[0].info is first.actions[0].info  # the same checked object
    for n in range(10):
        codec.decode_from_peer(rqst(f"board.q{n}"))
        assert len(wire._INFO_CACHE) <= 4
    for bad in ("bo ard", "a" * 300):  # refused every time, never kept
        for _ in range(2):
            with pytest.raises(BadRequest):
                codec.decode_from_peer(rqst(bad))
    with pytest.raises(BadRequest):
        codec.decode_from_peer(rqst("board.p1", scope="X"))
    assert all(key[2] not in ("bo ard", "a" * 300) for key in wire._INFO_CACHE)


@pytest.mark.parametrize("value", [2**70, -(2**64), {1, 2}, float("nan"), float("inf"),
                                   {"a": [1, {"b": float("-inf")}]}, {1: "key not a string"},
                                   b"bytes"])
def test_a_value_the_wire_cannot_carry_is_refused_before_it_is_queued(value: object) -> None:
    """A request whose value would be sent differently (NaN as null) or not at all (an
    integer beyond 64 bits, a set) is refused when it is made, not when its rqst is encoded
    (which stopped the peer)."""
    info = ObjectInfo(Scope.GLOBAL, "board.x")
    with pytest.raises(ValueError):
        Update(info, value)
    with pytest.raises(ValueError):
        Create(ObjectInfo(Scope.GLOBAL, "board"), Mode.RW, {"x": value})
    Update(info, {"fine": [1, 2.5, "s", None, True, 2**63]})


OUR_RQSTS = [WIRE["rqst"], WIRE["empty"],
             Rqst(header=Header("00AF", 0x1A2B, 0x1A2A), actions=(
                 Update(ObjectInfo(Scope.GLOBAL, "board.p00AF"), 1234.5),)),
             Rqst(header=Header("0001", 1, 0), actions=(
                 Update(ObjectInfo(Scope.GLOBAL, "board"), {"a": [1, {"b": None}], "c": "é"}),
                 Update(ObjectInfo(Scope.CLIENT, "me.x", "0001"), 18446744073709551615)))]


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(OUR_RQSTS), st.integers(0, 300), st.integers(0, 255),
       st.booleans())
def test_the_quick_rqst_path_reads_what_the_general_path_reads(msg: Rqst, where: int,
                                                               byte: int, change: bool) -> None:
    """A rqst in our peers' own bytes is read without building the message (the server's
    path): whatever a frame holds, it gives the general path's client id, round, last and
    actions, raises where the general path raises, or leaves the frame to it (None)."""
    frame = bytearray(codec.encode(msg))
    if change:
        frame[where % len(frame)] = byte
    data = bytes(frame)
    try:
        general: Join | Rqst | None = codec._decode_peer(data)
    except AppSyncProtocolError as exc:
        general = None
        status = exc.status
    try:
        quick = codec.peer_rqst(data)
    except AppSyncProtocolError as exc:
        assert general is None and exc.status == status, data
        return
    if not change:
        assert quick == (msg.header.client_id, msg.header.round, msg.header.last, msg.actions)
    if quick is not None:
        assert isinstance(general, Rqst), data
        assert quick == (general.header.client_id, general.header.round, general.header.last,
                         general.actions), data
    if general is not None:
        assert codec.decode_from_peer(data) == general
    if isinstance(general, Rqst):  # what CTRL reads of it, whichever path
        header = general.header
        assert codec.rqst_fields(data) == (header.client_id, header.round, header.last,
                                           general.actions), data
    else:  # a join, or refused: CTRL refuses it with the general path's status
        with pytest.raises(AppSyncProtocolError):
            codec.rqst_fields(data)


def test_the_quick_rqst_path_refuses_what_the_message_refuses() -> None:
    many = b"[" + b",".join([b'{"t":"del","i":{"s":"G","n":"x"}}'] * 257) + b"]"
    frame = b'{"h":{"p":"APSYN/01","c":"0001","r":"0002","l":"0001"},"b":' + many + b"}"
    for decode in (codec.peer_rqst, codec._decode_peer):
        with pytest.raises(BadRequest, match="more than 256"):
            decode(frame)
    join = codec.encode(WIRE["join"])
    assert codec.peer_rqst(join) is None and isinstance(codec.decode_from_peer(join), Join)
    with pytest.raises(BadRequest, match="sends rqst"):  # from a joined peer: refused
        codec.rqst_fields(join)
    assert codec.peer_rqst(frame.replace(b'"r":"0002"', b'"r":"0000"')) is None
    assert codec.peer_rqst(b" " + codec.encode(WIRE["empty"])) is None  # another form
    assert AppSyncCodec(max_frame=40).peer_rqst(codec.encode(WIRE["empty"])) is None
