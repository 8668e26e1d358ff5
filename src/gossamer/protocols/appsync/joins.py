"""What a join's ``id`` carries (the session, its key, a zone, the peer's secret) and how
session keys and peer secrets are kept at rest (docs/appsync-wire.md, *session id and key*)."""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import re

from ...core.errors import ConfigError
from .wire import PEER_SECRET

__all__ = ["ZONE_ID", "JoinId", "KeyHash", "hash_session_key", "parse_join_id", "secret_digest"]

_SESSION = re.compile(r"[A-Za-z0-9._$-]{1,128}")
ZONE_ID = re.compile(r"[0-9A-Fa-f]{4}")


@dataclasses.dataclass(frozen=True, slots=True)
class KeyHash:
    """A session key at rest: PBKDF2-SHA256 of the key with ``salt``."""

    salt: bytes
    digest: bytes
    iterations: int

    def matches(self, key: str) -> bool:
        candidate = hashlib.pbkdf2_hmac("sha256", key.encode(), self.salt, self.iterations)
        return hmac.compare_digest(candidate, self.digest)


def hash_session_key(key: str, salt: bytes, *, iterations: int = 100_000) -> KeyHash:
    if not key or ";" in key:
        raise ConfigError("a session key is 1..256 characters without ';'")
    return KeyHash(salt=salt, iterations=iterations,
                   digest=hashlib.pbkdf2_hmac("sha256", key.encode(), salt, iterations))


@dataclasses.dataclass(frozen=True, slots=True)
class JoinId:
    """What a join's ``id`` says: the session, its key (if any) and, for the CTRL of another
    zone joining as a peer, that zone's id."""

    session: str
    key: str | None = None
    zone: str | None = None
    peer: str | None = None  # the peer's own secret: a reconnect as its client id proves it


def parse_join_id(text: str) -> JoinId:
    """``session [";key=" key] [";zone=" 4HEXDIG] [";peer=" secret]`` -> ``JoinId``;
    ValueError if malformed."""
    session, *params = text.split(";")
    if _SESSION.fullmatch(session) is None:
        raise ValueError("a session id is 1..128 of A-Z a-z 0-9 . _ $ -")
    found: dict[str, str] = {}
    for param in params:
        name, sep, value = param.partition("=")
        if not sep or name not in ("key", "zone", "peer") or name in found:
            raise ValueError("the join parameters are ;key=KEY, ;zone=ZONE and ;peer=SECRET, "
                             "each once")
        found[name] = value
    key, zone, peer = found.get("key"), found.get("zone"), found.get("peer")
    if key is not None and not 1 <= len(key) <= 256:
        raise ValueError("a session key is 1..256 characters without ';'")
    if zone is not None and ZONE_ID.fullmatch(zone) is None:
        raise ValueError("a zone id is 4 hex digits")
    if peer is not None and PEER_SECRET.fullmatch(peer) is None:
        raise ValueError("a peer secret is 16..128 of A-Z a-z 0-9 _ -")
    return JoinId(session, key, zone, peer)


def secret_digest(salt: bytes, secret: str) -> bytes:
    """A peer secret at rest (it is random and long: one salted hash suffices)."""
    return hashlib.sha256(salt + secret.encode()).digest()
