"""An APSYN session in the simulator: the unchanged ``AppSyncServer`` and ``AppSyncPeer`` on
simulated connections, a workload (each peer changes its own C object and one shared G object
every round, with contention on one property), and faults (cut connections, peers leaving and
rejoining, the server restarting). ``visible_states`` is what each peer and the server hold.
With ``zones=2`` a second CTRL (zone 0002, session ``quiz2``) joins the first as a peer
(docs/appsync-zones.md): half the peers are its, and each zone also shares an L object;
``zones=3`` adds a third (``ctrl3``, ``quiz3``) joined to the second: a chain of three.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable
from typing import Any, TypeVar

import orjson

from ...core.conn import ListenerSpec
from ...core.env import Env
from ...core.trace import TraceSink
from ...protocols.appsync import Create, Mode, ObjectInfo, Scope, Update
from ...protocols.appsync.p2p import P2PConfig, P2PParticipant
from ...protocols.appsync.peer import AppSyncPeer, PeerConfig, PeerPhase
from ...protocols.appsync.server import AppSyncConfig, AppSyncServer, Uplink
from ...protocols.appsync.state import visible_to
from ...protocols.ordering.paxos import PaxosConfig
from ...runtimes.sim import LinkModel, NodeStatus, Simulation, parse_latency

__all__ = ["AppSyncWorld", "P2PWorld", "WorldConfig"]

PORT = 4100
SERVER = "ctrl"
SESSION = "quiz"
ZONE_SERVER = "ctrl2"  # the CTRL of zone 0002 (``zones=2``)
ZONE_SESSION = "quiz2"  # its session, linked to the master's ``quiz``


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class WorldConfig:
    peers: int = 10
    seed: int = 1
    latency: str = "uniform:0.001,0.02"  # a parse_latency text
    min_ms: int = 20
    max_ms: int = 100
    tout: int = 20
    request_chance: float = 0.5  # per peer per round
    loss: float = 0.0  # each try of a frame lost with this chance; TCP sends it again ...
    rto: float = 0.2  # ... after this many seconds, doubling per try (Simulation.connection_rto)
    drop_updates: bool = False  # peers skip the board's contended property (broken on purpose)
    # eager peers (PeerConfig.eager, gather 0.5) that make their requests at a random moment
    # of the round rather than when its sync comes
    eager: bool = False
    # quiet peers (PeerConfig.quiet, and eager): a rqst only with requests, or every tout / 2
    # rounds; the sessions' rounds are then of a fixed ``max_ms`` (the min raised to it: a
    # round that waits for nobody must outlast the round trip, or the peers fall behind)
    quiet: bool = False
    zones: int = 1  # 2: a second zone's CTRL links to the first (the master of G objects)
    traced_peers: int | None = None  # only the first N peers write apply rows (None: all)

    def __post_init__(self) -> None:
        if self.zones not in (1, 2, 3):
            raise ValueError(f"zones is 1, 2 or 3, got {self.zones!r}")


class _WorkloadPeer(AppSyncPeer):
    """A peer that, on each round, may change its own C object and the shared board."""

    def __init__(self, env: Env, config: PeerConfig, world: AppSyncWorld) -> None:
        super().__init__(env, config)
        self.world = world
        limit = world.config.traced_peers
        self.traced = limit is None or int(env.node[1:]) < limit  # nodes are pNNN
        self.counter = 0
        self.on_round = self._round
        self._made_own = ""

    def _init(self, msg: Any) -> None:  # after an init: make sure our C object exists
        super()._init(msg)
        if self._made_own != self.client_id and self.world.active:
            own = ObjectInfo(Scope.CLIENT, "me", self.client_id)
            if own.object_key not in self.objects:
                self.request(Create(own, Mode.RO, {"n": 0}))
            self._made_own = self.client_id

    def _sync(self, msg: Any) -> None:
        if self.world.config.drop_updates:  # a broken peer, for tests of the checks
            msg = dataclasses.replace(msg, actions=tuple(
                _without_hot(a) for a in msg.actions if a.info.name != "board.hot"))
        super()._sync(msg)

    def _round(self, number: int) -> None:
        if not self.world.active or self.env.rng.random() >= self.world.config.request_chance:
            return
        if self.world.config.eager or self.world.config.quiet:  # anywhere in the round
            self.env.set_timer(self.env.rng.uniform(0.0, _min_ms(self.world.config) / 1000),
                               self._requests)
        else:
            self._requests()

    def _requests(self) -> None:
        if not self.world.active or self.phase is not PeerPhase.SYNCING:
            return
        self.counter += 1
        own = ObjectInfo(Scope.CLIENT, "me", self.client_id)
        if own.object_key in self.objects:
            self.request(Update(own, {"n": self.counter}))
        if self.world.config.zones > 1:  # each zone's own L object
            room = ObjectInfo(Scope.LOCAL, "room")
            if room.object_key not in self.objects:
                self.request(Create(room, Mode.RW, {"n": 0}))
            else:
                self.request(Update(ObjectInfo(Scope.LOCAL, "room.n"), self.counter))
        board = ObjectInfo(Scope.GLOBAL, "board")
        if board.object_key not in self.objects:
            self.request(Create(board, Mode.RW, {"hot": 0}))
        else:
            self.request(Update(ObjectInfo(Scope.GLOBAL, f"board.p{self.client_id}"),
                                self.counter))
            self.request(Update(ObjectInfo(Scope.GLOBAL, "board.hot"), self.counter))
            if self.counter % 2:  # an object value: sent as applied, not merged with the rest
                self.request(Update(ObjectInfo(Scope.GLOBAL, f"board.s{self.client_id}"),
                                    {"n": self.counter}))


def _without_hot(action: Any) -> Any:
    """``action`` without the board's contended property, where a merged upd carries it."""
    if isinstance(action, Update) and action.info.name == "board" and \
            isinstance(action.data, dict) and "hot" in action.data:
        return Update(action.info, {k: v for k, v in action.data.items() if k != "hot"})
    return action


def _answering(config: WorldConfig) -> dict[str, Any]:
    """How the workload's peers answer: at once, eagerly (gathering half a round), or quietly
    (eagerly, and only when they have something to ask or CTRL is to hear from them)."""
    if config.quiet:
        return {"eager": True, "quiet": True}
    return {"eager": True, "gather": 0.5} if config.eager else {}


def _min_ms(config: WorldConfig) -> int:
    """The sessions' min round time: the max where the peers are quiet (fixed rounds)."""
    return config.max_ms if config.quiet else config.min_ms


_P = TypeVar("_P")


def _live(sim: Simulation, names: list[str], kind: type[_P]) -> dict[str, _P]:
    """The processes of ``names`` that are up, by name."""
    out: dict[str, _P] = {}
    for name in names:
        if sim.status(name) is NodeStatus.UP:
            process = sim.process(name)
            assert isinstance(process, kind)
            out[name] = process
    return out


class _World:
    """A simulation of ``config``'s links with the workload on (``active``) until
    ``quiesce``; ``rng`` (seeded apart from the simulation's) draws the faults."""

    def __init__(self, config: WorldConfig, *, trace: TraceSink | None, run: str,
                 faults_seed: str) -> None:
        self.config = config
        self.rng = random.Random(f"{faults_seed}/{config.seed}")
        link = LinkModel(latency=parse_latency(config.latency), loss=config.loss)
        self.sim = Simulation(seed=config.seed, link=link, trace=trace, run=run,
                              connection_rto=config.rto)
        self.active = True

    def run_for(self, seconds: float) -> None:
        self.sim.run(until=self.sim.now + seconds)

    def quiesce(self, seconds: float = 3.0) -> None:
        """Stop the workload and let the queued requests drain."""
        self.active = False
        self.run_for(seconds)


class AppSyncWorld(_World):
    def __init__(self, config: WorldConfig, *, trace: TraceSink | None = None,
                 run: str = "appsync") -> None:
        super().__init__(config, trace=trace, run=run, faults_seed="appsync-world")
        self.server_config = AppSyncConfig(min_ms=_min_ms(config), max_ms=config.max_ms,
                                           tout=config.tout)
        spec = ListenerSpec(name="appsync", port=PORT, handshake_timeout=None)
        self.sim.add_node(SERVER, lambda env: AppSyncServer(env, self.server_config),
                          listeners=[spec])
        self.ctrl_of: dict[str, tuple[str, str]] = {SERVER: (SERVER, SESSION)}
        self.zone_ctrls = [(SERVER, SESSION)]  # zone k + 1's CTRL joins zone k's
        for zone in range(2, config.zones + 1):
            ctrl, session = f"ctrl{zone}", f"quiz{zone}"
            above, above_session = self.zone_ctrls[-1]
            zone_config = dataclasses.replace(self.server_config, zone=f"{zone:04X}",
                                              uplink=Uplink(address=f"{above}:{PORT}",
                                                            sessions={session: above_session},
                                                            reconnect_delay=0.2))
            self.sim.add_node(ctrl, self._server_factory(zone_config), listeners=[spec])
            self.zone_ctrls.append((ctrl, session))
        self.peer_names = [f"p{n:03d}" for n in range(config.peers)]
        for n, name in enumerate(self.peer_names):
            ctrl, session = self.zone_ctrls[n % config.zones]
            self.ctrl_of[name] = (ctrl, session)
            peer_config = PeerConfig(address=f"{ctrl}:{PORT}", session=session,
                                     reconnect_delay=0.2, **_answering(config))
            self.sim.add_node(name, self._peer_factory(peer_config))

    def _member_zone(self) -> tuple[str, str]:
        """A member zone's CTRL (drawn when there are several) and the CTRL it joins."""
        names = [ctrl for ctrl, _session in self.zone_ctrls]
        member = names[1] if len(names) == 2 else self.rng.choice(names[1:])
        return member, names[names.index(member) - 1]

    @staticmethod
    def _server_factory(config: AppSyncConfig) -> Callable[[Env], AppSyncServer]:
        return lambda env: AppSyncServer(env, config)

    def _peer_factory(self, config: PeerConfig) -> Callable[[Env], _WorkloadPeer]:
        return lambda env: _WorkloadPeer(env, config, self)

    def server(self, name: str = SERVER) -> AppSyncServer | None:
        if self.sim.status(name) is not NodeStatus.UP:
            return None
        process = self.sim.process(name)
        assert isinstance(process, AppSyncServer)
        return process

    def peers(self) -> dict[str, AppSyncPeer]:
        return _live(self.sim, self.peer_names, AppSyncPeer)

    # -- faults ----------------------------------------------------------------------------

    def faults(self, seconds: float, *, cuts: int, leaves: int, server_restarts: int,
               zone_faults: int = 0) -> None:
        """Spread the faults over ``seconds`` of workload, at times the seed chooses;
        ``zone_faults`` (``zones`` >= 2): cuts of a member zone's link to the CTRL it joins and
        restarts of a member CTRL, alternately."""
        start = self.sim.now
        events: list[tuple[float, str]] = (
            [(self.rng.uniform(0, seconds), "cut") for _ in range(cuts)]
            + [(self.rng.uniform(0, seconds), "leave") for _ in range(leaves)]
            + [(self.rng.uniform(0.2, 0.8) * seconds, "restart")
               for _ in range(server_restarts)]
            + [(self.rng.uniform(0.1, 0.9) * seconds, ("uplink", "zone_restart")[n % 2])
               for n in range(zone_faults if self.config.zones > 1 else 0)])
        for at, kind in sorted(events):
            self.sim.run(until=start + at)
            name = self.rng.choice(self.peer_names)
            if kind in ("uplink", "zone_restart"):
                member, above = self._member_zone()
                if self.sim.status(member) is not NodeStatus.UP:
                    continue
                if kind == "uplink":
                    self.sim.cut(member, above)
                else:
                    self.sim.crash(member, recover_after=self.rng.uniform(0.2, 1.0))
            elif kind == "cut" and self.sim.status(name) is NodeStatus.UP:
                self.sim.cut(name, self.ctrl_of[name][0])
            elif kind == "leave" and self.sim.status(name) is NodeStatus.UP:
                self.sim.crash(name, recover_after=self.rng.uniform(0.1, 1.0))
            elif kind == "restart" and self.sim.status(SERVER) is NodeStatus.UP:
                self.sim.crash(SERVER, recover_after=self.rng.uniform(0.2, 1.0))
        self.sim.run(until=start + seconds)

    # -- verdict ---------------------------------------------------------------------------

    def record_states(self) -> None:
        """End-of-run rows: each CTRL's view for each of its peers and each peer's own."""
        for name, _session in self.zone_ctrls:
            server = self.server(name)
            if server is not None:
                server.trace_states()
        for peer in self.peers().values():
            peer.trace_state()

    def visible_states(self) -> dict[str, dict[str, Any]]:
        """Each joined peer's objects, and what its CTRL says it may see (``=name``)."""
        out: dict[str, dict[str, Any]] = {}
        for name, peer in self.peers().items():
            if peer.phase is not PeerPhase.SYNCING:
                continue
            out[name] = peer.visible_state()
            ctrl, session_name = self.ctrl_of[name]
            server = self.server(ctrl)
            session = None if server is None else server.sessions.get(session_name)
            if session is not None:
                out[f"={name}"] = {key: obj.value for key, obj in sorted(session.objects.items())
                                   if visible_to(obj, peer.client_id)}
        return out


class P2PWorld(_World):
    """Peer-to-peer mode (docs/appsync-zones.md): ``participants`` nodes, each a peer with
    the workload and a replica of the log that chooses the CTRL among them."""

    def __init__(self, config: WorldConfig, *, participants: int = 5,
                 trace: TraceSink | None = None, run: str = "appsync-p2p",
                 paxos: PaxosConfig | None = None, elect_after: float = 0.5) -> None:
        super().__init__(config, trace=trace, run=run, faults_seed="appsync-p2p")
        self.names = [f"n{n}" for n in range(participants)]
        self.p2p = P2PConfig(port=PORT, elect_after=elect_after,
                             server=AppSyncConfig(min_ms=_min_ms(config),
                                                  max_ms=config.max_ms, tout=config.tout),
                             paxos=paxos or PaxosConfig(heartbeat_interval=0.2,
                                                        suspect_timeout=0.6,
                                                        election_jitter=0.2))
        spec = ListenerSpec(name="appsync", port=PORT, handshake_timeout=None)
        peer_config = PeerConfig(address=f"unset:{PORT}", session=SESSION,
                                 reconnect_delay=0.2, **_answering(config))
        for name in self.names:
            self.sim.add_node(name, lambda env: P2PParticipant(
                env, self.names, self.p2p,
                lambda peer_env: _WorkloadPeer(peer_env, peer_config, self)),  # type: ignore[arg-type]
                listeners=[spec])

    def participants(self) -> dict[str, P2PParticipant]:
        return _live(self.sim, self.names, P2PParticipant)

    def ctrl(self) -> str | None:
        """The CTRL every live participant agrees on (None: they do not agree yet)."""
        chosen = {(p.epoch, p.ctrl) for p in self.participants().values()}
        return next(iter(chosen))[1] if len(chosen) == 1 else None

    def crash_ctrl(self, recover_after: float | None = None) -> str:
        ctrl = self.ctrl()
        assert ctrl is not None, "no agreed CTRL to crash"
        self.sim.crash(ctrl, recover_after=recover_after)
        return ctrl

    def faults(self, seconds: float, *, ctrl_crashes: int, cuts: int, leaves: int,
               partitions: int = 0) -> None:
        """Spread the faults over ``seconds`` of workload: crashes of whoever is CTRL then,
        connection cuts between a participant and the CTRL, other participants crashing,
        partitions that cut whoever is CTRL off from the others for 0.5-2.5 s; every crashed
        node recovers on its store within 2 s."""
        start = self.sim.now
        cut_off = [self.rng.uniform(0.1, 0.7) * seconds for _ in range(partitions)]
        events = sorted([(self.rng.uniform(0.1, 0.9) * seconds, "ctrl")
                         for _ in range(ctrl_crashes)]
                        + [(self.rng.uniform(0, seconds), "cut") for _ in range(cuts)]
                        + [(self.rng.uniform(0, seconds), "leave") for _ in range(leaves)]
                        + [(at, "partition") for at in cut_off]
                        + [(at + self.rng.uniform(0.5, 2.5), "heal") for at in cut_off])
        for at, kind in events:
            self.sim.run(until=start + at)
            if kind == "heal":
                self.sim.heal()
                continue
            if kind == "partition":
                ctrl = self.ctrl()
                if ctrl is not None:
                    self.sim.partition([[ctrl], [n for n in self.names if n != ctrl]])
                continue
            up = [n for n in self.names if self.sim.status(n) is NodeStatus.UP]
            if 2 * (len(up) - 1) <= len(self.names):  # keep a majority up (liveness)
                continue
            ctrl = self.ctrl()
            name = self.rng.choice(up)
            if kind == "ctrl" and ctrl is not None and ctrl in up:
                self.sim.crash(ctrl, recover_after=self.rng.uniform(0.5, 2.0))
            elif kind == "cut" and ctrl is not None and ctrl in up and name != ctrl:
                self.sim.cut(name, ctrl)
            elif kind == "leave" and name != ctrl:
                self.sim.crash(name, recover_after=self.rng.uniform(0.2, 1.5))
        self.sim.run(until=start + seconds)

    def replicated_states(self) -> set[bytes]:
        """Each live participant's copy of the log's state: the CTRL and the objects (one
        element: they agree). Round numbers are left out: rounds go on without requests, so
        one participant may not have learned the newest decision yet."""
        return {orjson.dumps([p.epoch, p.ctrl, {name: objects for name, (_r, objects)
                                                in p.sessions.items()}],
                             option=orjson.OPT_SORT_KEYS)
                for p in self.participants().values()}

    def record_states(self) -> None:
        """End-of-run rows: the CTRL's view for each peer and each participant's own."""
        for participant in self.participants().values():
            if participant.server is not None:
                participant.server.trace_states()
            participant.peer.trace_state()

    def visible_states(self) -> dict[str, dict[str, Any]]:
        """Each joined participant's objects and what the CTRL says it may see."""
        participants = self.participants()
        ctrl = self.ctrl()
        server = None if ctrl is None or ctrl not in participants else \
            participants[ctrl].server
        session = None if server is None else server.sessions.get(SESSION)
        out: dict[str, dict[str, Any]] = {}
        for name, participant in participants.items():
            peer = participant.peer
            if peer.phase is not PeerPhase.SYNCING:
                continue
            out[name] = peer.visible_state()
            if session is not None:
                out[f"={name}"] = {key: obj.value for key, obj in sorted(session.objects.items())
                                   if visible_to(obj, peer.client_id)}
        return out
