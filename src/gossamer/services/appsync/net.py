"""APSYN over WebSocket: ``AppSyncWsServer`` (the sync server on the network runtime, path ``/``,
state in ``DATA_DIR/appsync.sqlite``, the browser demo from ``web_root`` on the same port) and
``AppSyncClient``, an asyncio peer whose shared objects feel local: set a property and it is
requested, callbacks on change, ``await synced()``, the result code of each request.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ...core.conn import Framing, ListenerSpec, parse_address
from ...core.env import Env
from ...core.errors import ConfigError, OperationError, StateError
from ...core.trace import TraceSink
from ...protocols.appsync import Action, Create, Delete, Mode, ObjectInfo, Scope, Status, Update
from ...protocols.appsync.p2p import P2PConfig, P2PParticipant
from ...protocols.appsync.peer import AppSyncPeer, PeerConfig, PeerPhase
from ...protocols.appsync.server import (
    AppSyncConfig,
    AppSyncServer,
    KeyHash,
    Uplink,
    hash_session_key,
    refusal,
)
from ...protocols.appsync.state import SharedObject
from ...protocols.ordering.paxos import CODEC, PaxosConfig
from ...runtimes.net import (
    NetNode,
    NodeState,
    WriteBehindStore,
    host_port_address,
)
from ...runtimes.net.datadir import DataDir

__all__ = ["DEFAULT_PORT", "AppSyncClient", "AppSyncP2PNode", "AppSyncWsServer", "Shared"]

log = logging.getLogger("gossamer.appsync")
DEFAULT_PORT = 3790
STORE_FILE = "appsync.sqlite"
P2P_STORE_FILE = "appsync-p2p.sqlite"
address_of = host_port_address
LISTENER = "appsync"
#: APSYN is JSON text: a binary frame is a message that does not parse (40), refused at once
#: by a close (a join waited for the handshake timeout; a request was dropped unanswered)
_BINARY_REFUSAL = refusal(Status.BAD_REQUEST, "a binary frame; APSYN messages are JSON text")


class AppSyncWsServer:
    """``await start()``, then ``address``; ``await stop()``. ``session_key``: joins must carry
    it (kept only as a salted hash); ``session_keys``: a key per named session instead; none:
    every session is accepted (logged). ``web_root``: a directory served over HTTP beside the
    protocol (a plain GET of ``/`` gets its ``index.html``: the repository's ``web/appsync``
    is the demo page and the browser client). ``zone`` this server's zone id; ``uplink`` the
    ``ws://`` URL of the master zone's server, joined as a peer of each session (with
    ``uplink_key``, its session key), so G objects are shared across the zones."""

    def __init__(self, *, host: str = "127.0.0.1", port: int = DEFAULT_PORT,
                 session_key: str | None = None,
                 session_keys: Mapping[str, str] | None = None, data_dir: Path | None = None,
                 min_ms: int = 20, max_ms: int = 200, tout: int = 50,
                 max_frame: int = 64 * 1024, max_connections: int = 2000,
                 trace: TraceSink | None = None, run: str = "appsync",
                 key_iterations: int = 100_000, web_root: Path | None = None,
                 zone: str = "0001", uplink: str | None = None,
                 uplink_key: str | None = None) -> None:
        if data_dir is not None and not Path(data_dir).is_dir():
            raise ConfigError(f"data_dir {data_dir} is not a directory")
        if web_root is not None and not (Path(web_root) / "index.html").is_file():
            raise ConfigError(f"web_root {web_root} has no index.html")
        def hashed(key: str) -> KeyHash:
            return hash_session_key(key, secrets.token_bytes(16), iterations=key_iterations)

        self.config = AppSyncConfig(
            min_ms=min_ms, max_ms=max_ms, tout=tout,
            session_key=None if session_key is None else hashed(session_key),
            session_keys={name: hashed(key) for name, key in (session_keys or {}).items()},
            zone=zone, uplink=None if uplink is None else Uplink(
                address=uplink, key=uplink_key, framing=Framing.WS))
        self.spec = ListenerSpec(name=LISTENER, host=host, port=port, framing=Framing.WS,
                                 path="/", max_frame=max_frame,
                                 max_connections=max_connections, handshake_timeout=10.0,
                                 binary_close=_BINARY_REFUSAL,
                                 static_root=None if web_root is None else str(
                                     Path(web_root).resolve()))
        self.data_dir = data_dir
        self._dir = DataDir(None if data_dir is None else Path(data_dir), STORE_FILE,
                            who="APSYN server")
        self.trace = trace
        self.run = run
        self.core: AppSyncServer | None = None
        self._node: NetNode | None = None

    @property
    def address(self) -> tuple[str, int]:
        if self._node is None:
            raise StateError("the server has not started")
        return self._node.listener_address(LISTENER)

    @property
    def url(self) -> str:
        host, port = self.address
        return f"ws://{host}:{port}/"

    @property
    def page_url(self) -> str | None:
        """The demo page (None without a ``web_root``)."""
        if self.spec.static_root is None:
            return None
        host, port = self.address
        return f"http://{host}:{port}/"

    def _build(self, env: Env) -> AppSyncServer:
        self.core = AppSyncServer(env, self.config, log=log.warning)
        return self.core

    async def start(self) -> None:
        if self._node is not None:
            raise StateError("start() called twice")
        # one server per data dir: two would write their sessions into one store
        store = self._dir.open_store()
        node = NetNode(node_id="appsync-ctrl", factory=self._build, listen=None,
                       listeners=[self.spec], store=store, trace=self.trace, run=self.run)
        await self._dir.start(node, self.spec)
        self._node = node

    async def stop(self) -> None:
        if self._node is not None:
            await self._node.close()
        self._node = None
        self.core = None
        self._dir.release()

    async def __aenter__(self) -> AppSyncWsServer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()


class Shared:
    """One shared object as the application sees it: reads give the synced value; setting a
    property requests the change (``client.result(number)`` / the returned future tells)."""

    def __init__(self, client: AppSyncClient, info: ObjectInfo) -> None:
        self._client = client
        self.info = info

    @property
    def key(self) -> str:
        return self.info.object_key

    @property
    def value(self) -> Any:
        return self._client.value(self.key)

    def __getitem__(self, name: str) -> Any:
        value = self.value
        if not isinstance(value, dict) or name not in value:
            raise KeyError(name)
        return value[name]

    def __setitem__(self, name: str, value: Any) -> None:
        self.set(name, value)

    def set(self, name: str, value: Any) -> asyncio.Future[Status | None]:
        info = ObjectInfo(self.info.scope, f"{self.info.name}.{name}", self.info.scope_id)
        return self._client.request(Update(info, value))

    def update(self, patch: dict[str, Any]) -> asyncio.Future[Status | None]:
        return self._client.request(Update(self.info, patch))

    def delete(self) -> asyncio.Future[Status | None]:
        return self._client.request(Delete(self.info))

    def on_change(self, fn: Callable[[Any], None]) -> None:
        self._client.watch(lambda key, value: fn(value) if key == self.key else None)


class AppSyncClient:
    """``async with AppSyncClient(url, session) as peer:``; ``peer.share(name, initial)`` gives
    a ``Shared``; ``await peer.synced()`` waits until every request was answered."""

    def __init__(self, url: str, session: str, *, key: str | None = None,
                 timeout: float = 10.0, node: str = "appsync-peer",
                 trace: TraceSink | None = None, run: str = "appsync",
                 gather: float = 0.0, eager: bool = False, quiet: bool = False) -> None:
        if not isinstance(url, str) or not url.startswith("ws://"):
            raise ConfigError(f"url must be ws://HOST:PORT/PATH, got {url!r}")
        self.url = url
        # gather: answer each round that fraction of its min time late, with the changes
        # made meanwhile (``PeerConfig.gather``); eager: send each change when it is made,
        # for the round open when it arrives (``PeerConfig.eager``); quiet: answer a round
        # only with requests (or every tout / 2 rounds) where rounds are of fixed length
        # (``PeerConfig.quiet``)
        self.config = PeerConfig(address=url, session=session, key=key, framing=Framing.WS,
                                 gather=gather, eager=eager, quiet=quiet,
                                 secret=secrets.token_urlsafe(24))  # proves its reconnects
        self.timeout = timeout
        self.node = node
        self.trace = trace
        self.run = run
        self.core: AppSyncPeer | None = None
        self._net: NetNode | None = None
        self._futures: dict[int, asyncio.Future[Status | None]] = {}
        self._watchers: list[Callable[[str, Any], None]] = []
        self._changed = asyncio.Event()
        self.last_close: str | None = None  # how the last connection to the server ended

    @property
    def client_id(self) -> str:
        return "" if self.core is None else self.core.client_id

    def _build(self, env: Env) -> AppSyncPeer:
        core = AppSyncPeer(env, self.config)
        core.on_result = self._result
        core.on_change = self._change
        core.on_round = lambda _n: self._changed.set()
        core.on_closed = self._closed
        self.core = core
        return core

    def _closed(self, reason: str) -> None:
        self.last_close = reason
        self._changed.set()

    def _result(self, number: int, code: int | None) -> None:
        future = self._futures.pop(number, None)
        if future is not None and not future.done():
            future.set_result(None if code is None else Status(code))
        self._changed.set()

    def _change(self, key: str, obj: SharedObject | None) -> None:
        value = None if obj is None else obj.value
        for fn in list(self._watchers):
            fn(key, value)
        self._changed.set()

    async def connect(self) -> None:
        if self._net is not None:
            raise OperationError("connect() called twice", definite=True)
        self._net = NetNode(node_id=self.node, factory=self._build, listen=None,
                            trace=self.trace, run=self.run)
        await self._net.start()
        try:
            await self.wait_until(lambda: self.core is not None and (
                self.core.phase in (PeerPhase.SYNCING, PeerPhase.CLOSED)))
        except OperationError:
            await self.close()
            why = "" if self.last_close is None else f" (the last try: {self.last_close})"
            raise OperationError(f"no init from {self.url} within {self.timeout:g} s{why}",
                                 definite=False) from None
        core = self.core
        if core is None or core.phase is PeerPhase.CLOSED:
            refused = None if core is None else core.refused
            await self.close()
            raise OperationError(f"join refused ({_refusal(refused)})", definite=True)

    async def wait_until(self, predicate: Callable[[], bool], timeout: float | None = None
                         ) -> None:
        try:
            async with asyncio.timeout(self.timeout if timeout is None else timeout):
                while not predicate():
                    self._changed.clear()
                    await self._changed.wait()
        except TimeoutError:
            raise OperationError("timed out waiting", definite=False) from None

    async def synced(self, timeout: float | None = None) -> None:
        """Every request so far was answered (and the state holds what was accepted)."""
        await self.wait_until(lambda: self.core is not None and self.core.synced, timeout)

    def request(self, action: Action) -> asyncio.Future[Status | None]:
        """Queue ``action``; the future gives its status (None: the connection broke before
        the answer, so it may or may not have been applied)."""
        net, core = self._net, self.core
        if net is None or core is None or net.state is not NodeState.RUNNING:
            raise OperationError("not connected", definite=True)
        future: asyncio.Future[Status | None] = asyncio.get_running_loop().create_future()
        numbers: list[int] = []
        net.call(lambda _p: numbers.append(core.request(action)))
        self._futures[numbers[0]] = future
        return future

    def share(self, name: str, initial: Any = None, *, scope: str = "G", mode: str = "RW",
              owner: str | None = None) -> Shared:
        """The object ``name``; created with ``initial`` when it does not exist yet (a create
        that finds it existing is answered 45 and changes nothing)."""
        scope_id = (owner or self.client_id) if scope == "C" else None
        info = ObjectInfo(Scope(scope), name, scope_id)
        if info.object_key not in self.objects():
            self.request(Create(info, Mode(mode), {} if initial is None else initial))
        return Shared(self, info)

    def objects(self) -> dict[str, Any]:
        return {} if self.core is None else self.core.visible_state()

    def value(self, key: str) -> Any:
        return None if self.core is None else self.core.value(key)

    def watch(self, fn: Callable[[str, Any], None]) -> None:
        self._watchers.append(fn)

    def _process(self) -> AppSyncPeer | P2PParticipant | None:
        """What ``close`` stops on the node's loop before closing the node."""
        return self.core

    async def close(self) -> None:
        net, process = self._net, self._process()
        if net is None:
            return
        if net.state is NodeState.RUNNING and process is not None:
            with contextlib.suppress(Exception):
                net.call(lambda _p: process.stop())
        await net.close()
        self._net = None
        # a request still unanswered: None, as when the connection breaks (it may or may
        # not have been applied); left pending, whoever awaits it would wait for ever
        futures, self._futures = self._futures, {}
        for future in futures.values():
            if not future.done():
                future.set_result(None)

    async def __aenter__(self) -> AppSyncClient:
        await self.connect()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()


def _refusal(refused: tuple[int, str] | None) -> str:
    """A refused join's close code (``4000 + status``) with the status it names."""
    if refused is None:
        return "closed"
    code = refused[0]
    try:
        status = Status(code - 4000)
    except ValueError:
        return f"close code {code}"
    return f"close code {code}: {int(status)} {status.phrase}"


class AppSyncP2PNode(AppSyncClient):
    """One participant of peer-to-peer mode (docs/appsync-zones.md) on this event loop, with
    ``AppSyncClient``'s API for the application. ``node_id`` is ``host:port`` of its peer link
    (the Multi-Paxos group of ``members``, authenticated with ``cluster_key``); ``urls`` gives
    each participant's ``ws://`` URL, where it serves APSYN when the log chooses it as CTRL
    (its own is bound here). ``data_dir`` keeps the log (the CTRL choice and every round's
    changes) in sqlite, committed in groups."""

    def __init__(self, node_id: str, members: Sequence[str], urls: Mapping[str, str],
                 session: str, *, key: str | None = None, data_dir: Path | None = None,
                 cluster_key: str | None = None, timeout: float = 10.0,
                 elect_after: float = 1.0, paxos: PaxosConfig | None = None,
                 min_ms: int = 20, max_ms: int = 200, tout: int = 50,
                 trace: TraceSink | None = None, run: str = "appsync-p2p",
                 seed: int = 0) -> None:
        if address_of(node_id) is None or node_id not in members:
            raise ConfigError(f"a participant is named host:port among the members, got "
                              f"{node_id!r}")
        missing = [m for m in members if m not in urls]
        if missing:
            raise ConfigError(f"no APSYN URL for {', '.join(missing)}")
        super().__init__(urls[node_id], session, key=key, timeout=timeout, node=node_id,
                         trace=trace, run=run)
        host, port, _path = parse_address(urls[node_id])
        self.members = tuple(members)
        self.p2p = P2PConfig(port=port, addresses=dict(urls), elect_after=elect_after,
                             server=AppSyncConfig(min_ms=min_ms, max_ms=max_ms, tout=tout),
                             paxos=paxos or PaxosConfig())
        self.spec = ListenerSpec(name=LISTENER, host=host, port=port, framing=Framing.WS,
                                 path="/", handshake_timeout=10.0,
                                 binary_close=_BINARY_REFUSAL)
        self.data_dir = data_dir
        self.cluster_key = cluster_key
        self.seed = seed
        self.participant: P2PParticipant | None = None
        self.on_ctrl: Callable[[str, int], None] | None = None  # (ctrl, epoch) when it changes

    def _build_participant(self, env: Env) -> P2PParticipant:
        self.participant = P2PParticipant(env, self.members, self.p2p, self._build)
        self.participant.on_ctrl = self._ctrl_changed
        return self.participant

    def _ctrl_changed(self, ctrl: str, epoch: int) -> None:
        if self.on_ctrl is not None:
            self.on_ctrl(ctrl, epoch)
        self._changed.set()

    @property
    def ctrl(self) -> str | None:
        """The participant the log chose as CTRL (None: none yet)."""
        return None if self.participant is None else self.participant.ctrl

    async def connect(self) -> None:
        if self._net is not None:
            raise OperationError("connect() called twice", definite=True)
        store = None
        if self.data_dir is not None:
            Path(self.data_dir).mkdir(parents=True, exist_ok=True)
            store = WriteBehindStore(Path(self.data_dir) / P2P_STORE_FILE)
        self._net = NetNode(node_id=self.node, factory=self._build_participant, codec=CODEC,
                            listen=address_of(self.node), listeners=[self.spec], store=store,
                            cluster_key=self.cluster_key, seed=self.seed, trace=self.trace,
                            run=self.run)
        self._net.resolver = address_of
        await self._net.start()
        await self.wait_until(lambda: self.core is not None
                              and self.core.phase is PeerPhase.SYNCING)

    def _process(self) -> AppSyncPeer | P2PParticipant | None:
        return self.participant
