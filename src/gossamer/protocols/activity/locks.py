"""Seed 003's network-wide unique usernames: the LOCK_* exchange a server runs for a REGISTER.

The registering server saves the name first (so a concurrent request elsewhere is denied),
asks every other server through the tree, and answers its client once every link it asked has
allowed it; a denial anywhere removes the name everywhere (LOCK_CANCEL). ``UsernameLocks``
keeps the locks in flight for one ``ActivityServer``, which hands it the frames and tells it of
lost links.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

from ...core.conn import Conn
from .server_state import MAX_CANCELLED, UNKNOWN_SECRET, UsernameLock
from .users import UserTable
from .wire import (
    ANONYMOUS,
    ActivityWire,
    LockAllowed,
    LockCancel,
    LockDenied,
    LockRequest,
    Register,
    RegisterFailed,
    RegisterSuccess,
)

__all__ = ["UsernameLocks"]


def lock_key(msg: LockRequest | LockAllowed | LockDenied | LockCancel) -> str:
    """A lock's id: the one the frame carries, or (a reference server's frame has none) the
    name and secret."""
    return msg.id if msg.id is not None else f"{msg.username}:{msg.secret}"


class UsernameLocks:
    """The locks in flight at one server (see the module docstring). ``send``, ``close`` and
    ``trace`` are the server's; ``server_conns`` lists its authenticated server links now, and
    ``connected(conn)`` says whether a conn is still open."""

    def __init__(self, users: UserTable, *, server_id: str,
                 send: Callable[[Conn, ActivityWire], None],
                 close: Callable[[Conn, str], None],
                 server_conns: Callable[[], list[Conn]],
                 connected: Callable[[Conn], bool],
                 trace: Callable[..., None]) -> None:
        self.users = users
        self.server_id = server_id
        self._send = send
        self._close = close
        self._server_conns = server_conns
        self._connected = connected
        self._trace = trace
        self.locks: dict[str, UsernameLock] = {}
        self._numbers = 0
        self._registering: set[Conn] = set()
        self._cancelled: OrderedDict[str, None] = OrderedDict()

    def registering(self, conn: Conn) -> bool:
        """A registration from ``conn`` is in progress (a second one is invalid)."""
        return conn in self._registering

    def register(self, conn: Conn, msg: Register) -> None:
        """A client's REGISTER: refused at once if the name is known here, else locked."""
        if msg.username == ANONYMOUS or msg.username in self.users:
            self._send(conn, RegisterFailed(
                info=f"{msg.username} is already registered with the system"))
            self._close(conn, "register failed")
            return
        self._numbers += 1
        lock_id = f"{self.server_id}:{self._numbers}"
        self.users.add(msg.username, msg.secret, lock=lock_id)
        self.users.commit()  # saved before LOCK_REQUEST is sent (seed: concurrency issues)
        waiting = set(self._server_conns())
        self.locks[lock_id] = UsernameLock(msg.username, msg.secret, None, conn, waiting)
        self._registering.add(conn)
        self._trace("lock_request", peer=conn, user=msg.username, lock=lock_id,
                    waiting=len(waiting))
        request = LockRequest(username=msg.username, secret=msg.secret, id=lock_id)
        for server in waiting:
            self._send(server, request)
        self._maybe_allowed(lock_id)

    def received(self, conn: Conn, msg: LockRequest | LockAllowed | LockDenied | LockCancel
                 ) -> None:
        """A LOCK_* frame from the server link ``conn``."""
        if isinstance(msg, LockRequest):
            self._request(conn, msg)
        elif isinstance(msg, LockAllowed):
            self._allowed(conn, msg)
        elif isinstance(msg, LockDenied):
            self._denied(msg)
        else:
            self._cancel(conn, msg)

    def forget(self, conn: Conn) -> None:
        """``conn`` is gone: it answers nothing more and is answered nothing."""
        self._registering.discard(conn)
        for lock_id, lock in list(self.locks.items()):
            if lock.upstream == conn:
                del self.locks[lock_id]  # nobody to answer; the record stays registered
            elif lock.client == conn:
                lock.client = None
            elif conn in lock.waiting:
                lock.waiting.discard(conn)
                self._maybe_allowed(lock_id)

    # -- the exchange ------------------------------------------------------------------------

    def _request(self, conn: Conn, msg: LockRequest) -> None:
        lock_id = lock_key(msg)
        if msg.username in self.users or lock_id in self.locks:
            self._send(conn, LockDenied(username=msg.username, secret=msg.secret, id=msg.id))
            return
        if msg.secret is None:  # a reference server's request: the name is taken, no login
            self.users.add_record(msg.username, UNKNOWN_SECRET, lock=lock_id)
        else:
            self.users.add(msg.username, msg.secret, lock=lock_id)
        self.users.commit()
        waiting = {c for c in self._server_conns() if c != conn}
        self.locks[lock_id] = UsernameLock(msg.username, msg.secret, conn, None, waiting)
        for server in waiting:
            self._send(server, msg)
        self._maybe_allowed(lock_id)

    def _answered(self, msg: LockAllowed | LockDenied) -> str:
        """The lock an answer is for: by id, or (a legacy peer echoes no id) by name+secret."""
        lock_id = lock_key(msg)
        if msg.id is None and lock_id not in self.locks:
            for key, lock in self.locks.items():
                if lock.username == msg.username and lock.secret == msg.secret:
                    return key
        return lock_id

    def _allowed(self, conn: Conn, msg: LockAllowed) -> None:
        lock_id = self._answered(msg)
        lock = self.locks.get(lock_id)
        if lock is not None:
            lock.waiting.discard(conn)
            self._maybe_allowed(lock_id)

    def _maybe_allowed(self, lock_id: str) -> None:
        lock = self.locks[lock_id]
        if lock.waiting & set(self._server_conns()):
            return
        del self.locks[lock_id]
        key_id = None if lock_id == f"{lock.username}:{lock.secret}" else lock_id
        if lock.upstream is not None:
            self._send(lock.upstream, LockAllowed(username=lock.username, secret=lock.secret,
                                                  id=key_id))
            return
        record = self.users.record(lock.username)
        if record is not None:  # registered for good: no lock owns it now
            self.users.add_record(lock.username, record)
            self.users.commit()
        self._trace("registered", user=lock.username, lock=lock_id)
        if lock.client is not None and self._connected(lock.client):
            self._registering.discard(lock.client)
            self._send(lock.client, RegisterSuccess(info=f"register success for {lock.username}"))

    def _denied(self, msg: LockDenied) -> None:
        lock_id = self._answered(msg)
        lock = self.locks.pop(lock_id, None)
        if lock is None:
            return
        self._unlock(lock.username, lock_id)
        if lock.upstream is not None:
            self._send(lock.upstream, msg)
            return
        self._trace("register_failed", user=lock.username, lock=lock_id)
        cancel = LockCancel(username=lock.username, secret=lock.secret,
                            id=None if lock_id == f"{lock.username}:{lock.secret}" else lock_id)
        for server in self._server_conns():
            self._send(server, cancel)
        if lock.client is not None and self._connected(lock.client):
            self._registering.discard(lock.client)
            self._send(lock.client, RegisterFailed(
                info=f"{lock.username} is already registered with the system"))
            self._close(lock.client, "register failed")

    def _cancel(self, conn: Conn, msg: LockCancel) -> None:
        lock_id = lock_key(msg)
        if lock_id in self._cancelled:
            return  # only possible while the tree is briefly not a tree
        self._cancelled[lock_id] = None
        while len(self._cancelled) > MAX_CANCELLED:
            self._cancelled.popitem(last=False)
        self.locks.pop(lock_id, None)
        self._unlock(msg.username, lock_id)
        for server in self._server_conns():
            if server != conn:
                self._send(server, msg)

    def _unlock(self, username: str, lock_id: str) -> bool:
        """Remove ``username`` if lock ``lock_id`` saved it; True when it did."""
        if self.users.lock_of(username) != lock_id:
            return False
        self.users.remove(username)
        self.users.commit()
        return True
