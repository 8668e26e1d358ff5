"""Registered users at rest: username -> salted PBKDF2 hash, in the env's store.

Secrets are never stored in the clear; checks use ``hmac.compare_digest``. A record also names
the registration (lock id) that wrote it, so a LOCK_CANCEL removes only what its lock saved.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable, Iterator

import orjson

from ...core.env import Store
from ...core.errors import ConfigError

__all__ = ["HASH_PREFIX", "UserTable", "hash_secret", "is_hash", "verify_secret"]

HASH_PREFIX = "pbkdf2_sha256"
TABLE = "activity.users"


def hash_secret(secret: str, salt: bytes, iterations: int) -> str:
    digest = hashlib.pbkdf2_hmac("sha256", secret.encode(), salt, iterations)
    return f"{HASH_PREFIX}${iterations}${salt.hex()}${digest.hex()}"


def is_hash(text: str) -> bool:
    parts = text.split("$")
    if len(parts) != 4 or parts[0] != HASH_PREFIX or not parts[1].isdigit():
        return False
    try:
        bytes.fromhex(parts[2])
        bytes.fromhex(parts[3])
    except ValueError:
        return False
    return 0 < int(parts[1]) <= 10_000_000


def verify_secret(secret: str, record: str) -> bool:
    """True when ``secret`` hashes to ``record`` (constant-time compare of the digests)."""
    if not is_hash(record):
        return False
    _, iterations, salt, digest = record.split("$")
    candidate = hashlib.pbkdf2_hmac("sha256", secret.encode(), bytes.fromhex(salt),
                                    int(iterations))
    return hmac.compare_digest(candidate, bytes.fromhex(digest))


class UserTable:
    """Users in ``store`` (table ``activity.users``); writes are committed by the caller."""

    def __init__(self, store: Store, *, salt: Callable[[], bytes], iterations: int) -> None:
        if iterations < 1:
            raise ConfigError(f"iterations must be >= 1, got {iterations}")
        self._store = store
        self._salt = salt
        self.iterations = iterations

    def record(self, username: str) -> str | None:
        raw = self._store.get(TABLE, username)
        return None if raw is None else str(orjson.loads(raw)["hash"])

    def lock_of(self, username: str) -> str | None:
        raw = self._store.get(TABLE, username)
        if raw is None:
            return None
        lock = orjson.loads(raw).get("lock")
        return None if lock is None else str(lock)

    def __contains__(self, username: object) -> bool:
        return isinstance(username, str) and self._store.get(TABLE, username) is not None

    def add(self, username: str, secret: str, *, lock: str | None = None) -> None:
        self.add_record(username, hash_secret(secret, self._salt(), self.iterations), lock=lock)

    def add_record(self, username: str, record: str, *, lock: str | None = None) -> None:
        self._store.put(TABLE, username, orjson.dumps({"hash": record, "lock": lock}))

    def remove(self, username: str) -> None:
        self._store.delete(TABLE, username)

    def verify(self, username: str, secret: str) -> bool:
        record = self.record(username)
        return record is not None and verify_secret(secret, record)

    def items(self) -> Iterator[tuple[str, str]]:
        for username, raw in self._store.scan(TABLE):
            yield username, str(orjson.loads(raw)["hash"])

    def commit(self) -> None:
        self._store.commit()
