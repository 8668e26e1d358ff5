"""A hand-driven APSYN server on FakeEnv: peers that write exactly the frames a test gives."""

from __future__ import annotations

from typing import Any

from gossamer.protocols.appsync import AppSyncCodec, Header, Init, Join, Rqst, Sync
from gossamer.protocols.appsync.server import AppSyncConfig, AppSyncServer
from gossamer.testing import FakeConn, FakeEnv

codec = AppSyncCodec()


class Bench:
    def __init__(self, config: AppSyncConfig | None = None, *, env: FakeEnv | None = None
                 ) -> None:
        self.env = env or FakeEnv("ctrl", seed=1)
        self.server = AppSyncServer(self.env, config or AppSyncConfig(min_ms=10, max_ms=100,
                                                                       tout=3))
        self.server.start()
        self.inbox: dict[FakeConn, list[bytes]] = {}

    def connect(self) -> FakeConn:
        conn = self.env.accept()
        self.server.opened(conn, conn.remote)
        self.inbox[conn] = []
        return conn

    def join(self, session: str = "s", client: str = "") -> tuple[FakeConn, Init]:
        """Join and, when the session was idle, take the init at once; otherwise the init
        comes when the running round ends (answer it with ``rqst`` and ``advance``)."""
        conn = self.join_later(session, client)
        if not self.inbox[conn]:
            for other in list(self.inbox):
                if other is not conn and self.inbox[other]:
                    self.rqst(other)
            self.advance(self.server.config.min_ms / 1000)
        init = self.last(conn)
        assert isinstance(init, Init), init
        return conn, init

    def join_later(self, session: str = "s", client: str = "") -> FakeConn:
        conn = self.connect()
        self.server.received(conn, codec.encode(Join(header=Header(client, 0, 0), id=session)))
        self.settle()
        return conn

    def settle(self) -> None:
        self.env.run_due()
        for conn, frame in self.env.take_written():
            self.inbox.setdefault(conn, []).append(frame)  # type: ignore[arg-type]

    def frames(self, conn: FakeConn) -> list[bytes]:
        return self.inbox[conn]

    def last(self, conn: FakeConn) -> Init | Sync:
        return codec.decode_from_server(self.inbox[conn][-1])

    def rqst(self, conn: FakeConn, *actions: Any, client: str | None = None,
             round_number: int | None = None, last: int | None = None) -> None:
        msg = self.last(conn)
        cid = client or msg.header.client_id
        number = msg.header.last if isinstance(msg, Init) else msg.header.round
        number = number if round_number is None else round_number
        self.server.received(conn, codec.encode(Rqst(
            header=Header(cid, number, number if last is None else last), actions=actions)))
        self.settle()

    def raw(self, conn: FakeConn, frame: bytes) -> None:
        self.server.received(conn, frame)
        self.settle()

    def advance(self, seconds: float) -> None:
        self.env.advance(seconds)
        self.settle()
