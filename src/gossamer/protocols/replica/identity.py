"""Who may speak for a client id at the seed-000 hub: one token per id, issued at its first join.

The hub keeps a record per id: the SHA-256 of its token (never the token), the incarnation that
joined last and the highest own sequence number it knows. An id nobody holds is registered to
whoever joins first (trust on first use). The token travels in the ``welcome``, which a cut can
lose, so the record stays unconfirmed until the client shows the token (a ``subscribe`` that
carries it, sent once stored, or its next join); meanwhile a join without one is issued a new
one. A join whose store holds fewer own writes than the hub knows of is a new incarnation (a
fresh store given the token, or one restored from a backup): ``Welcome.resume`` tells it to
number its writes after its earlier runs' (without the keeper's count it is refused). The
threat model is in docs/security.md.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
from collections.abc import Callable

import orjson

from ...core.env import Store
from ...core.errors import ConfigError, StateError
from .wire import MAX_TOKEN_CHARS, JoinRefusal

__all__ = ["CLIENTS_TABLE", "Admitted", "ClientBook", "ClientRecord", "Refusal"]

CLIENTS_TABLE = "hub.clients"  # client id -> its record (JSON)


@dataclasses.dataclass(frozen=True, slots=True)
class ClientRecord:
    token_sha256: str  # hex digest of the token issued at the id's first join
    incarnation: int  # the process incarnation that joined last (0: not told)
    high: int  # the highest own sequence number a join of this id held, or was told to resume at
    incarnations: int  # joins that were new incarnations of the id (fresh or restored stores)
    confirmed: bool  # the client has shown it holds the token (it may have lost the welcome)

    def to_json(self) -> bytes:
        return orjson.dumps([self.token_sha256, self.incarnation, self.high, self.incarnations,
                             self.confirmed])

    @classmethod
    def from_json(cls, raw: bytes, client: str) -> ClientRecord:
        try:
            digest, incarnation, high, incarnations, confirmed = orjson.loads(raw)
            if not (isinstance(digest, str) and len(digest) == 64 and isinstance(confirmed, bool)
                    and all(type(n) is int and n >= 0 for n in (incarnation, high, incarnations))):
                raise ValueError("wrong field types")
        except (ValueError, TypeError) as exc:
            raise StateError(f"the hub's record of client {client!r} is damaged: {exc}") from exc
        return cls(digest, incarnation, high, incarnations, confirmed)

    def holds(self, token: str | None) -> bool:
        """Whether ``token`` is this id's (compared in constant time)."""
        return token is not None and hmac.compare_digest(token_digest(token), self.token_sha256)


@dataclasses.dataclass(frozen=True, slots=True)
class Admitted:
    """A join the hub accepts. ``token``: issued now (sent to the client once), None when the
    client presented its own. ``resume``: the highest own sequence number the client's next
    write must follow. ``new_incarnation``: its store held fewer own writes than the hub knows."""

    token: str | None
    resume: int
    new_incarnation: bool
    first: bool  # the id was not registered before


@dataclasses.dataclass(frozen=True, slots=True)
class Refusal:
    code: JoinRefusal
    reason: str


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class ClientBook:
    """The hub's register of client ids and their tokens, in ``store`` (the keeper's group
    commit store, or the hub's own): ``admit`` decides a join and writes its record; the caller
    answers the join only once that write is on disk. ``new_token()`` makes a token: from a
    cryptographic source on a network (``secrets``), from ``env.rng`` in the simulator."""

    def __init__(self, store: Store, new_token: Callable[[], str], *,
                 max_clients: int = 1_000_000) -> None:
        if max_clients < 1:
            raise ConfigError(f"max_clients must be >= 1, got {max_clients}")
        self.store = store
        self.new_token = new_token
        self.max_clients = max_clients
        self._records: dict[str, ClientRecord] = {
            client: ClientRecord.from_json(raw, client)
            for client, raw in store.scan(CLIENTS_TABLE)}

    def __len__(self) -> int:
        return len(self._records)

    def record(self, client: str) -> ClientRecord | None:
        return self._records.get(client)

    def admit(self, client: str, token: str | None, *, own: int, known: int | None,
              incarnation: int | None) -> Admitted | Refusal:
        """Decide the join of ``client`` presenting ``token``, whose store holds ``own`` of
        its own writes, while the hub knows of ``known`` (None: the hub keeps no count); an
        admitted join's record is written to the store (not yet committed)."""
        record = self._records.get(client)
        if record is not None and not record.confirmed and token is None:
            record = None  # the welcome that carried its token may be lost: issue another
        if record is None:
            if client not in self._records and len(self._records) >= self.max_clients:
                return Refusal(JoinRefusal.TOO_MANY_IDS,
                               f"the hub has registered {self.max_clients} client ids")
            # an id the hub relayed before it kept tokens (an older hub's data) is registered
            # to its first claimant too, and numbered after what it wrote
            resume = max(own, known or 0)
            issued = self.new_token()
            if not 0 < len(issued) <= MAX_TOKEN_CHARS:
                raise ConfigError(f"new_token() made a token of {len(issued)} characters")
            self._put(client, ClientRecord(token_digest(issued), incarnation or 0, resume,
                                           int(own < resume), confirmed=False))
            return Admitted(issued, resume, own < resume, first=True)
        if not record.holds(token):
            said = "no token" if token is None else "a wrong token"
            return Refusal(JoinRefusal.NOT_YOURS,
                           f"client id {client!r} is registered to another client and this "
                           f"one presented {said}: use the store that joined as {client!r} "
                           f"or another id")
        if known is None:
            if own < record.high:  # a stale or fresh store, and no count to place it after
                return Refusal(JoinRefusal.NO_RESUME,
                               f"this store holds {own} writes of {client!r}, an earlier run "
                               f"had {record.high}, and this hub keeps no snapshot to say "
                               f"where to resume: use the newest store or another id")
            resume = own
        else:
            resume = max(own, known)
        fresh = own < resume
        self._put(client, ClientRecord(record.token_sha256, incarnation or 0,
                                       max(record.high, resume),
                                       record.incarnations + int(fresh), confirmed=True))
        return Admitted(None, resume, fresh, first=False)

    def confirm(self, client: str, token: str) -> bool:
        """``client``, joined, showed the token it was issued: its record is confirmed (written,
        not yet committed: nothing waits for it). False if the token is not the id's."""
        record = self._records.get(client)
        if record is None or not record.holds(token):
            return False
        if not record.confirmed:
            self._put(client, dataclasses.replace(record, confirmed=True))
        return True

    def _put(self, client: str, record: ClientRecord) -> None:
        self._records[client] = record
        self.store.put(CLIENTS_TABLE, client, record.to_json())
