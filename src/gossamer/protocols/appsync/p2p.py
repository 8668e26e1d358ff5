"""APSYN in peer-to-peer mode (seed 002: "one of the peers is selected randomly to act as the
synchronisation control component"): every participant is a peer and a Multi-Paxos replica;
the log decides who is CTRL and holds every round's changes, so a new CTRL, chosen when the
old one fails, starts from the latest state (docs/appsync-zones.md, Peer-to-peer mode).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import orjson

from ...core.conn import CloseCode, Conn
from ...core.env import Env, TimerHandle
from ...core.errors import ConfigError
from ...core.ids import NodeId
from ..ordering.paxos import Committed, DecidedOp, Outcome, PaxosConfig, PaxosReplica
from .peer import AppSyncPeer, PeerPhase
from .server import AppSyncConfig, AppSyncServer
from .state import LAYER, SharedObject, object_from_json, object_to_json

__all__ = ["P2PConfig", "P2PParticipant"]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class P2PConfig:
    """``port``: where a participant listens when it is CTRL; ``addresses``: the address a
    peer dials to join each participant as CTRL (absent: ``node:port``, as in the simulator);
    ``elect_after``: seconds without a CTRL (at start, or since the connection to it broke)
    before a participant proposes a new one; the server's and the log's settings."""

    port: int
    addresses: Mapping[NodeId, str] = dataclasses.field(default_factory=dict)
    elect_after: float = 1.0
    server: AppSyncConfig = dataclasses.field(default_factory=AppSyncConfig)
    paxos: PaxosConfig = dataclasses.field(default_factory=PaxosConfig)

    def ctrl_address(self, node: NodeId) -> str:
        return self.addresses.get(node) or f"{node}:{self.port}"

    def __post_init__(self) -> None:
        if self.elect_after <= 0 or not 0 < self.port < 65536:
            raise ConfigError("elect_after > 0 and a port in 1..65535")


class P2PParticipant:
    """One participant: ``peer`` is the application's peer (built by ``make_peer(env)``, not
    yet started: it is started and pointed at each CTRL the log chooses); ``server`` exists
    while this participant is CTRL. The replicated state: ``epoch`` (elections so far),
    ``ctrl`` and each session's round and objects."""

    def __init__(self, env: Env, members: Iterable[NodeId], config: P2PConfig,
                 make_peer: Callable[[Env], AppSyncPeer]) -> None:
        self.env = env
        self.config = config
        self.members = tuple(sorted(members))
        if env.node not in self.members:
            raise ConfigError(f"{env.node} is not among the participants {self.members}")
        self.replica = PaxosReplica(env, self.members, config=config.paxos, group="appsync-p2p",
                                    on_decided=self._decided, snapshot_fn=self._snapshot,
                                    restore_fn=self._restore)
        self.epoch = 0
        self.ctrl: NodeId | None = None
        self.sessions: dict[str, tuple[int, dict[str, Any]]] = {}  # name -> (round, objects)
        self.peer = make_peer(env)
        app_closed = self.peer.on_closed

        def closed(reason: str) -> None:
            if app_closed is not None:
                app_closed(reason)
            self._lost_ctrl(reason)

        self.peer.on_closed = closed
        self.server: AppSyncServer | None = None
        self._peer_started = False
        self._elect_timer: TimerHandle | None = None
        self._settle_due = False
        # (ctrl, epoch) each time this participant's peer turns to another CTRL
        self.on_ctrl: Callable[[NodeId, int], None] | None = None

    # -- process ---------------------------------------------------------------------------

    def start(self) -> None:
        self.replica.start()
        self._arm_election()
        self._settle()

    def stop(self) -> None:
        self.replica.stop()
        if self.server is not None:
            self.server.stop()
        self.peer.stop()

    def on_message(self, src: NodeId, msg: Any) -> None:
        self.replica.on_message(src, msg)

    def opened(self, conn: Conn, peer_address: str) -> None:
        if conn is self.peer.conn:
            self.peer.opened(conn, peer_address)
        elif self.server is not None:
            self.server.opened(conn, peer_address)
        else:  # a peer that still takes us for CTRL: try again (it learns the new one)
            self.env.close(conn, CloseCode.TRY_AGAIN_LATER, "not the CTRL")

    def received(self, conn: Conn, frame: bytes) -> None:
        if conn is self.peer.conn:
            self.peer.received(conn, frame)
        elif self.server is not None:
            self.server.received(conn, frame)

    def closed(self, conn: Conn, reason: str) -> None:
        if conn is self.peer.conn:
            self.peer.closed(conn, reason)
        elif self.server is not None:
            self.server.closed(conn, reason)

    # -- choosing the CTRL -----------------------------------------------------------------

    def _arm_election(self) -> None:
        if self._elect_timer is not None:
            self.env.cancel(self._elect_timer)
        jitter = self.env.rng.uniform(0, self.config.elect_after / 2)
        self._elect_timer = self.env.set_timer(self.config.elect_after + jitter,
                                               self._maybe_elect)

    def _lost_ctrl(self, reason: str) -> None:
        if self._elect_timer is None:
            self._arm_election()

    def _maybe_elect(self) -> None:
        """No CTRL yet, or ours is unreachable: propose one chosen at random (the first
        proposal for the next epoch that the log decides is everyone's choice)."""
        self._elect_timer = None
        if self.ctrl is not None and self.peer.phase is PeerPhase.SYNCING:
            return  # joined: the CTRL is alive as far as we can tell
        candidates = [m for m in self.members if m != self.ctrl] or list(self.members)
        choice = self.env.rng.choice(candidates)
        self.env.trace("ctrl_propose", layer=LAYER, peer=choice, seq=self.epoch + 1)
        self.replica.propose({"t": "ctrl", "e": self.epoch + 1, "n": choice})
        self._arm_election()  # again, should this proposal or its CTRL fail

    # -- the replicated state machine ------------------------------------------------------

    def _decided(self, op: DecidedOp) -> None:
        payload = op.payload
        if not isinstance(payload, dict):
            return
        kind, epoch = payload.get("t"), payload.get("e")
        if kind == "ctrl" and epoch == self.epoch + 1:
            self.epoch, self.ctrl = epoch, payload["n"]
            self.env.trace("ctrl_elected", layer=LAYER, peer=self.ctrl, seq=self.epoch)
            self._schedule_settle()
            if self._elect_timer is not None:  # give the peer its time to join the new CTRL
                self._arm_election()
        elif kind == "round" and epoch == self.epoch:  # a deposed CTRL's late round: ignored
            name = payload["s"]
            _, objects = self.sessions.get(name, (0, {}))
            objects = dict(objects)
            for key, value in payload["o"].items():
                if value is None:
                    objects.pop(key, None)
                else:
                    objects[key] = value
            self.sessions[name] = (payload["r"], objects)

    def _snapshot(self) -> Any:
        return {"epoch": self.epoch, "ctrl": self.ctrl,
                "sessions": {name: [r, objects] for name, (r, objects)
                             in self.sessions.items()}}

    def _restore(self, state: Any) -> None:
        self.epoch, self.ctrl = state["epoch"], state["ctrl"]
        self.sessions = {name: (r, dict(objects))
                         for name, (r, objects) in state["sessions"].items()}
        self._schedule_settle()

    def _schedule_settle(self) -> None:
        if not self._settle_due:
            self._settle_due = True
            self.env.set_timer(0.0, self._settle)

    def _settle(self) -> None:
        """Act on the decided CTRL: serve if it is us, stop serving if not, join it."""
        self._settle_due = False
        me = self.env.node
        if self.ctrl == me and self.server is None:
            self.server = AppSyncServer(self.env, self.config.server, round_log=self)
            self.server.start()
        elif self.ctrl != me and self.server is not None:
            server, self.server = self.server, None
            server.shutdown(CloseCode.TRY_AGAIN_LATER, "another CTRL was chosen")
        if self.ctrl is None:
            return
        address = self.config.ctrl_address(self.ctrl)
        if not self._peer_started:
            self._peer_started = True
            self.peer.address = address
            self.peer.start()
        elif address != self.peer.address:
            self.peer.retarget(address)
        else:
            return
        if self.on_ctrl is not None:
            self.on_ctrl(self.ctrl, self.epoch)

    # -- RoundLog: the CTRL's state goes through the log ------------------------------------

    def load(self, session: str) -> tuple[int, list[SharedObject]] | None:
        kept = self.sessions.get(session)
        if kept is None:
            return None
        round_number, objects = kept
        return round_number, [object_from_json(orjson.dumps(value))
                              for value in objects.values()]

    def commit(self, session: str, changed: Mapping[str, SharedObject | None],
               new_round: int, then: Callable[[], None]) -> None:
        epoch = self.epoch
        payload = {"t": "round", "e": epoch, "s": session, "r": new_round,
                   "o": {key: None if obj is None else orjson.loads(object_to_json(obj))
                         for key, obj in changed.items()}}

        def done(outcome: Outcome) -> None:
            if isinstance(outcome, Committed) and self.epoch == epoch and \
                    self.ctrl == self.env.node and self.server is not None:
                then()
            elif self.server is not None and self.ctrl == self.env.node:
                # not decided (yet): serve again from the decided state, never from this one
                server, self.server = self.server, None
                server.shutdown(CloseCode.TRY_AGAIN_LATER, "a round was not committed")
                self._schedule_settle()

        self.replica.propose(payload, done)
