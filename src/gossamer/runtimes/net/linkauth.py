"""Authenticated peer links: what a node says on a peer link before any message.

The threat model (docs/security.md): anyone who can open a TCP connection to a node. A cluster
key, shared by the nodes of one deployment, proves membership: the accepting node sends a fresh
challenge, and the dialer answers with its node id, incarnation, a nonce of its own and an
HMAC-SHA256 over all of them (a process without the key cannot join, relay or inject, and a
recorded hello is useless against a new challenge). A member knows the key too, so the key
alone cannot stop it from claiming another member's id; the claim is checked where the id
points: node ids are addresses, and the accepting node asks the claimed node, over its own link
to that address, to echo a secret token back over the link being checked (only the real owner
of the address learns the token, and only the link whose nonce it sent carries it back). A
member forging the origin of a message it relays is out of scope.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import ipaddress
import logging
import os
from collections.abc import Mapping
from typing import Any

import orjson

from ...core.errors import ConfigError, DecodeError
from ...core.ids import NodeId, check_node_id

__all__ = [
    "KEY_ENV",
    "ClusterKey",
    "Hello",
    "challenge_frame",
    "control_of",
    "hello_frame",
    "parse_challenge",
    "parse_hello",
    "resolve_cluster_key",
    "verified_frame",
    "verify_frame",
]

log = logging.getLogger("gossamer.net")

KEY_ENV = "GOSSAMER_CLUSTER_KEY"
MIN_KEY_BYTES = 16
NONCE_HEX = 32  # 16 random bytes
_LOOPBACK_KEY = b"gossamer: the built-in cluster key, for 127.0.0.1 only"
_CONTROL_PREFIX = b'{"verif'  # how a control frame starts (a message starts with {"type")


@dataclasses.dataclass(frozen=True, slots=True)
class ClusterKey:
    """The secret the nodes of one deployment share (at least 16 bytes)."""

    secret: bytes = dataclasses.field(repr=False)
    builtin: bool = False  # the loopback default, not a secret at all

    def __post_init__(self) -> None:
        if not isinstance(self.secret, bytes) or len(self.secret) < MIN_KEY_BYTES:
            raise ConfigError(f"a cluster key has at least {MIN_KEY_BYTES} bytes")

    @classmethod
    def from_text(cls, text: str) -> ClusterKey:
        return cls(text.encode())

    def prove(self, *parts: str) -> str:
        message = "\0".join(parts).encode()
        return hmac.new(self.secret, message, hashlib.sha256).hexdigest()

    def check(self, proof: str, *parts: str) -> bool:
        return hmac.compare_digest(proof.encode(), self.prove(*parts).encode())


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def resolve_cluster_key(given: str | None, host: str,
                        environ: Mapping[str, str] | None = None, *,
                        announce: bool = True) -> ClusterKey:
    """The key a node listening on ``host`` uses: ``given``, else ``$GOSSAMER_CLUSTER_KEY``,
    else (on a loopback address only) the built-in one, said in a log line (``announce``:
    a node without a peer listener, a client, has no peer links to speak of). Anywhere else
    a node without a key is refused with ``ConfigError``."""
    if given is None:
        given = (os.environ if environ is None else environ).get(KEY_ENV) or None
    if given is not None:
        return ClusterKey.from_text(given)
    if not _is_loopback(host):
        raise ConfigError(f"a node listening on {host} needs a cluster key (--cluster-key or "
                          f"${KEY_ENV}); only 127.0.0.1 has a built-in one")
    if announce:
        log.warning("peer links on %s use the built-in cluster key (loopback only); set %s "
                    "or --cluster-key for a key of your own", host, KEY_ENV)
    return ClusterKey(_LOOPBACK_KEY, builtin=True)


def new_nonce() -> str:
    return os.urandom(NONCE_HEX // 2).hex()


def _json(frame: bytes, what: str) -> dict[str, Any]:
    try:
        obj = orjson.loads(frame)
    except orjson.JSONDecodeError as exc:
        raise DecodeError(f"{what} is not JSON: {exc}") from exc
    if not isinstance(obj, dict):
        raise DecodeError(f"{what} is not a JSON object")
    return obj


def _nonce(value: Any, what: str) -> str:
    if not isinstance(value, str) or len(value) != NONCE_HEX or not all(
            c in "0123456789abcdef" for c in value):
        raise DecodeError(f"{what} must be {NONCE_HEX} lowercase hex digits")
    return value


def challenge_frame(nonce: str) -> bytes:
    return orjson.dumps({"challenge": nonce})


def parse_challenge(frame: bytes) -> str:
    obj = _json(frame, "a challenge")
    if set(obj) != {"challenge"}:
        raise DecodeError('expected {"challenge": <nonce>} as the first frame')
    return _nonce(obj["challenge"], "the challenge")


@dataclasses.dataclass(frozen=True, slots=True)
class Hello:
    node: NodeId
    incarnation: int
    nonce: str
    proof: str

    def proves(self, key: ClusterKey, challenge: str) -> bool:
        return key.check(self.proof, "hello", self.node, str(self.incarnation), challenge,
                         self.nonce)


def hello_frame(key: ClusterKey, node: NodeId, incarnation: int, challenge: str,
                nonce: str) -> bytes:
    proof = key.prove("hello", node, str(incarnation), challenge, nonce)
    return orjson.dumps({"hello": node, "incarnation": incarnation, "nonce": nonce,
                         "proof": proof})


def parse_hello(frame: bytes) -> Hello:
    obj = _json(frame, "hello")
    if set(obj) != {"hello", "incarnation", "nonce", "proof"}:
        raise DecodeError('expected {"hello", "incarnation", "nonce", "proof"} after the '
                          "challenge")
    try:
        node = check_node_id(obj["hello"])
    except ConfigError as exc:
        raise DecodeError(f"hello: {exc}") from exc
    incarnation = obj["incarnation"]
    if isinstance(incarnation, bool) or not isinstance(incarnation, int) or incarnation < 1:
        raise DecodeError("hello: incarnation must be an int >= 1")
    proof = obj["proof"]
    if not isinstance(proof, str) or len(proof) != 64:
        raise DecodeError("hello: proof must be 64 hex digits")
    return Hello(node, incarnation, _nonce(obj["nonce"], "hello: nonce"), proof)


def verify_frame(nonce: str, token: str) -> bytes:
    """Asks a node: echo ``token`` on your link to me whose hello carried ``nonce``."""
    return orjson.dumps({"verify": nonce, "token": token})


def verified_frame(token: str) -> bytes:
    return orjson.dumps({"verified": token})


def control_of(frame: bytes) -> tuple[str, str, str] | None:
    """A control frame as (kind, a, b): ("verify", nonce, token) or ("verified", token, "");
    None for anything else (a message). ``DecodeError`` for a malformed control frame."""
    if not frame.startswith(_CONTROL_PREFIX):
        return None
    obj = _json(frame, "a control frame")
    if set(obj) == {"verify", "token"}:
        return ("verify", _nonce(obj["verify"], "verify"), _nonce(obj["token"], "token"))
    if set(obj) == {"verified"}:
        return ("verified", _nonce(obj["verified"], "verified"), "")
    raise DecodeError("not a control frame: expected verify/token or verified")
