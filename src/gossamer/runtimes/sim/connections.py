"""Connections in the simulator: what TCP and WebSocket give a service, in virtual time.

A connection is a pair of ends, one per node incarnation. Frames in one direction arrive in
the order they were written, each after a link delay (never before the one written earlier);
duplication and reordering of the link model do not apply (TCP repairs those), and loss costs
only time, when the simulation is given a retransmission timeout (``connection_rto``: a lost
frame is sent again, and what follows waits behind it). A
connection loses data only by being cut: ``Simulation.cut`` or a crash resets it (frames in
flight are lost and the other end hears ``reset`` one link delay later); a graceful close
delivers everything written before it. Across a partition frames are held, in order, and
delivered at the heal, unless a timeout or the sender's queue limit ends the connection first.
Listeners (``ListenerSpec``) belong to a node and enforce the same limits as on a network.
"""

from __future__ import annotations

import enum
import itertools
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from ...core.conn import (
    CloseCode,
    CloseReason,
    ConnGroup,
    Framing,
    ListenerSpec,
    first_frame_deadline,
    parse_address,
)
from ...core.errors import ConfigError, ProtocolError, StateError
from ...core.ids import NodeId
from .network import Network


class SimEnv(Protocol):
    """What a connection needs of the env of the node incarnation that owns it."""

    node: NodeId
    alive: bool
    process: Any

    def trace(self, event: str, *, layer: str, **fields: Any) -> None: ...


class Simulation(Protocol):
    """What the connections need of their ``Simulation`` (kept here, so that they depend on
    this, not on the kernel's module)."""

    now: float
    network: Network

    def schedule(self, delay: float, fn: Callable[..., object], *args: Any) -> Any: ...

    def schedule_at(self, at: float, fn: Callable[..., object], *args: Any) -> Any: ...

    def link_delay(self, src: NodeId, dst: NodeId) -> float: ...

    def connection_delay(self, src: NodeId, dst: NodeId) -> float: ...

    def current_env(self, node: NodeId) -> SimEnv | None: ...

    def failure(self, node: str, exc: BaseException) -> Exception: ...

__all__ = ["ConnState", "SimConn", "SimConnections"]

LAYER = "conn"
CONNECT_TIMEOUT = 3.0  # virtual seconds before a dial across a partition is refused
DIALED_SEND_QUEUE = 10_000  # frames in flight on a dialed connection before it is reset


class ConnState(enum.Enum):
    CONNECTING = "connecting"  # dialed, not yet accepted
    OPEN = "open"
    CLOSED = "closed"


class SimConn:
    """One end of a simulated connection (the ``Conn`` a service holds)."""

    __slots__ = ("_listener", "_remote", "arrival", "close_code", "env", "frames_in",
                 "frames_out", "handshook", "held", "id", "in_flight", "last_heard", "limit",
                 "max_frame", "peer", "probation", "promoted", "reheld", "reset", "spec",
                 "state")

    def __init__(self, conn_id: str, env: SimEnv, *, listener: str | None, remote: str,
                 max_frame: int, spec: ListenerSpec | None) -> None:
        self.id = conn_id
        self._listener = listener
        self._remote = remote
        self.env = env
        self.spec = spec
        self.max_frame = max_frame
        self.state = ConnState.CONNECTING
        self.peer: SimConn | None = None
        self.arrival = 0.0  # when the last frame written here reaches the peer
        self.in_flight = 0  # frames written here, not yet at the peer
        self.held: deque[tuple[str, Any]] = deque()  # what waits for a partition to heal
        self.reheld = 0  # of those, how many had left before the partition (they go first)
        self.limit = spec.send_queue_limit if spec is not None else DIALED_SEND_QUEUE
        self.reset = False  # frames still in flight from a reset end are lost
        self.handshook = False
        self.promoted = False
        self.probation = False
        self.last_heard = 0.0
        self.close_code: int | None = None
        self.frames_in = 0
        self.frames_out = 0

    @property
    def listener(self) -> str | None:
        return self._listener

    @property
    def remote(self) -> str:
        return self._remote

    @property
    def node(self) -> NodeId:
        return self.env.node

    def __repr__(self) -> str:
        return f"<SimConn {self.id} {self.state.value} {self.node}<->{self._remote}>"


class SimConnections:
    """The connections of one ``Simulation`` (the kernel forwards env calls and faults here)."""

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self._numbers = itertools.count(1)
        self.listeners: dict[NodeId, dict[int, ListenerSpec]] = {}
        # every open or connecting end per node (dicts: ordered, so a run replays exactly)
        self.ends: dict[NodeId, dict[SimConn, None]] = {}
        self._held: dict[SimConn, None] = {}  # ends whose outgoing frames wait for a heal

    # -- listeners -------------------------------------------------------------------------

    def add_listeners(self, node: NodeId, specs: Iterable[ListenerSpec]) -> None:
        specs = tuple(specs)
        if not specs:
            return  # most nodes listen on nothing: no table for them (memory per node)
        ports = self.listeners.setdefault(node, {})
        for spec in specs:
            if not isinstance(spec, ListenerSpec):
                raise ConfigError(f"expected a ListenerSpec, got {spec!r}")
            if spec.port == 0 or spec.port in ports:
                raise ConfigError(f"node {node}: listener {spec.name!r} needs a port of its "
                                  f"own (got {spec.port})")
            ports[spec.port] = spec

    def address(self, node: NodeId, name: str) -> str:
        """``node:port`` of the listener ``name`` of ``node``."""
        for port, spec in self.listeners.get(node, {}).items():
            if spec.name == name:
                return f"{node}:{port}"
        raise ConfigError(f"node {node} has no listener {name!r}")

    # -- env calls -------------------------------------------------------------------------

    def connect(self, env: SimEnv, address: str, framing: Framing, max_frame: int) -> SimConn:
        host, port, _path = parse_address(address)
        if isinstance(max_frame, bool) or max_frame < 64:
            raise ConfigError(f"max_frame must be >= 64, got {max_frame!r}")
        conn = SimConn(f"{env.node}>{next(self._numbers)}", env, listener=None,
                       remote=address, max_frame=max_frame, spec=None)
        conn.promoted = True  # a dialed connection is a peer by definition
        self.ends.setdefault(env.node, {})[conn] = None
        sim = self.sim
        if not sim.network.connected(env.node, host):
            sim.schedule(CONNECT_TIMEOUT, self._refused, conn)
        else:
            sim.schedule(self._delay(env.node, host), self._syn, conn, host, port)
        return conn

    def write(self, env: SimEnv, conn: object, frame: bytes) -> None:
        end = self._own(env, conn)
        if end is None or end.state is not ConnState.OPEN:
            return
        if not isinstance(frame, bytes | bytearray | memoryview):
            raise ConfigError(f"a frame is bytes, got {type(frame).__name__}")
        if end.in_flight >= end.limit:
            self._runtime_close(end, CloseReason.SLOW_CONSUMER, CloseCode.POLICY, reset=True)
            return
        end.frames_out += 1
        self._transmit(end, "data", bytes(frame))

    def write_many(self, env: SimEnv, conns: ConnGroup | Iterable[object], frame: bytes,
                   exclude: object | None) -> None:
        for conn in list(conns):
            if conn is not exclude:
                self.write(env, conn, frame)

    def close(self, env: SimEnv, conn: object, code: int, reason: str) -> None:
        end = self._own(env, conn)
        if end is None or end.state is ConnState.CLOSED:
            return
        if end.state is ConnState.CONNECTING:
            end.state = ConnState.CLOSED
            end.reset = True
            self._forget(end)
            self._later(end, CloseReason.CLOSED)
            return
        end.close_code = int(code)
        self._shut(end)
        self._later(end, CloseReason.CLOSED)

    def promote(self, env: SimEnv, conn: object) -> None:
        end = self._own(env, conn)
        if end is not None:
            end.promoted = True
            end.probation = False

    def group(self) -> ConnGroup:
        return ConnGroup()

    # -- faults ----------------------------------------------------------------------------

    def crashed(self, node: NodeId) -> None:
        """The node's process died: its ends vanish, peers hear ``reset``."""
        for end in list(self.ends.pop(node, ())):
            if end.state is not ConnState.CLOSED:
                end.state = ConnState.CLOSED
                self._abort(end)

    def left(self, node: NodeId) -> None:
        """The node stopped cleanly (after ``stop()``): the OS closes what is still open."""
        for end in list(self.ends.pop(node, ())):
            if end.state is ConnState.OPEN:
                self._shut(end)
            elif end.state is ConnState.CONNECTING:
                end.state = ConnState.CLOSED
                end.reset = True

    def cut(self, a: NodeId, b: NodeId | None = None) -> int:
        """Reset every connection between ``a`` and ``b`` (or all of ``a``'s): both ends hear
        ``reset`` now and what was in flight is lost. Returns how many were cut."""
        cut = 0
        for end in list(self.ends.get(a, ())):
            peer = end.peer
            if end.state is not ConnState.OPEN:
                continue
            if b is not None and (peer is None or peer.node != b):
                continue
            cut += 1
            for side in (end, peer):
                if side is not None and side.state is ConnState.OPEN:
                    side.state = ConnState.CLOSED
                    side.reset = True
                    side.held.clear()
                    side.reheld = 0
                    self._forget(side)
                    self._later(side, CloseReason.RESET)
        return cut

    def healed(self) -> None:
        """Release what waited for the partition, in order, on every end that can now talk."""
        waiting, self._held = list(self._held), {}
        for end in waiting:
            self._release(end)

    # -- the wire --------------------------------------------------------------------------

    def _delay(self, src: NodeId, dst: NodeId) -> float:
        sim = self.sim
        return sim.link_delay(src, dst)

    def _transmit(self, end: SimConn, kind: str, payload: Any) -> None:
        """Put one item (data, fin or rst) on the wire from ``end`` to its peer, in order."""
        peer = end.peer
        if peer is None:
            return
        if kind == "data":
            end.in_flight += 1
        if end.held or not self.sim.network.connected(end.node, peer.node):
            end.held.append((kind, payload))
            self._held[end] = None
            return
        self._schedule(end, kind, payload)

    def _schedule(self, end: SimConn, kind: str, payload: Any) -> None:
        peer = end.peer
        assert peer is not None
        sim = self.sim
        at = max(sim.now + sim.connection_delay(end.node, peer.node), end.arrival)
        end.arrival = at
        # at ``at`` itself: frames due together arrive in the order written
        sim.schedule_at(at, self._arrive, end, kind, payload)

    def _release(self, end: SimConn) -> None:
        peer = end.peer
        if peer is None or not self.sim.network.connected(end.node, peer.node):
            if end.held:
                self._held[end] = None
            return
        held, end.held = end.held, deque()
        end.reheld = 0
        for kind, payload in held:
            self._schedule(end, kind, payload)

    def _arrive(self, end: SimConn, kind: str, payload: Any) -> None:
        if kind == "data":
            end.in_flight -= 1
        if end.reset and kind == "data":
            return  # lost with the connection
        peer = end.peer
        if peer is None:
            return
        if not self.sim.network.connected(end.node, peer.node):
            # the partition began while it travelled: it waits, and so does what follows
            if kind == "data":
                end.in_flight += 1
            end.held.insert(end.reheld, (kind, payload))
            end.reheld += 1
            self._held[end] = None
            return
        if kind == "synack":
            self._established(peer)
            return
        if peer.state is not ConnState.OPEN:
            return
        if kind == "data":
            self._deliver(peer, payload)
        else:
            peer.state = ConnState.CLOSED
            self._forget(peer)
            reason = CloseReason.PEER_CLOSED if kind == "fin" else CloseReason.RESET
            self._ended(peer, reason)

    def _deliver(self, end: SimConn, frame: bytes) -> None:
        if len(frame) > end.max_frame:
            self._trace(end, "drop", size=len(frame), reason=CloseReason.TOO_LARGE)
            hook = getattr(end.env.process, "oversized", None)
            if hook is not None:
                self._call(end, lambda: hook(end, len(frame)))
            self._runtime_close(end, CloseReason.TOO_LARGE, CloseCode.TOO_BIG)
            return
        end.handshook = True
        end.frames_in += 1
        end.last_heard = self.sim.now
        self._handler(end, "received", end, frame)
        if end.probation and end.state is ConnState.OPEN and not end.promoted:
            self._runtime_close(end, CloseReason.FULL, CloseCode.TRY_AGAIN_LATER)

    # -- opening ---------------------------------------------------------------------------

    def _syn(self, dialer: SimConn, host: NodeId, port: int) -> None:
        if dialer.state is not ConnState.CONNECTING:
            return
        sim = self.sim
        target = sim.current_env(host)
        spec = self.listeners.get(host, {}).get(port)
        if target is None or spec is None or not sim.network.connected(dialer.node, host):
            sim.schedule(self._delay(host, dialer.node), self._refused, dialer)
            return
        accepted = SimConn(f"{host}<{next(self._numbers)}", target, listener=spec.name,
                           remote=f"{dialer.node}:{dialer.id.rpartition('>')[2]}",
                           max_frame=spec.max_frame, spec=spec)
        accepted.peer = dialer
        dialer.peer = accepted
        accepted.state = ConnState.OPEN
        accepted.last_heard = sim.now
        self.ends.setdefault(host, {})[accepted] = None
        # the answer travels ahead of anything the service writes, in the same order
        self._transmit(accepted, "synack", None)
        mine = [e for e in self.ends[host] if e.spec is spec and e.state is ConnState.OPEN]
        if len(mine) > spec.max_connections:
            self._trace(accepted, "drop", reason=CloseReason.FULL)
            self._shut(accepted)  # the service never hears of it
            return
        if sum(1 for e in mine if not e.promoted) > spec.max_connections - spec.reserved_for_peers:
            accepted.probation = True
        deadline = first_frame_deadline(spec, accepted.probation)
        if deadline is not None:
            sim.schedule(deadline, self._handshake_due, accepted)
        if spec.idle_timeout is not None:
            sim.schedule(spec.idle_timeout, self._idle_due, accepted)
        self._handler(accepted, "opened", accepted, accepted.remote)

    def _established(self, dialer: SimConn) -> None:
        if dialer.state is not ConnState.CONNECTING:
            return
        dialer.state = ConnState.OPEN
        dialer.last_heard = self.sim.now
        self._handler(dialer, "opened", dialer, dialer.remote)

    def _refused(self, dialer: SimConn) -> None:
        if dialer.state is not ConnState.CONNECTING:
            return
        dialer.state = ConnState.CLOSED
        self._forget(dialer)
        self._ended(dialer, CloseReason.REFUSED)

    def _handshake_due(self, end: SimConn) -> None:
        if end.state is ConnState.OPEN and not end.handshook:
            self._runtime_close(end, CloseReason.HANDSHAKE_TIMEOUT, CloseCode.POLICY)

    def _idle_due(self, end: SimConn) -> None:
        spec = end.spec
        if end.state is not ConnState.OPEN or spec is None or spec.idle_timeout is None:
            return
        quiet = self.sim.now - end.last_heard
        if quiet >= spec.idle_timeout:
            self._runtime_close(end, CloseReason.IDLE_TIMEOUT, CloseCode.POLICY)
        else:
            self.sim.schedule(spec.idle_timeout - quiet, self._idle_due, end)

    # -- closing ---------------------------------------------------------------------------

    def _shut(self, end: SimConn) -> None:
        """Graceful: no more writes; the peer hears it after what was written before."""
        end.state = ConnState.CLOSED
        self._forget(end)
        self._transmit(end, "fin", None)

    def _abort(self, end: SimConn) -> None:
        end.reset = True
        end.held.clear()
        end.reheld = 0
        self._forget(end)
        self._transmit(end, "rst", None)

    def _runtime_close(self, end: SimConn, reason: str, code: int, *, reset: bool = False) -> None:
        if end.state is not ConnState.OPEN:
            return
        self._trace(end, "drop", reason=reason, code=int(code))
        end.close_code = int(code)
        end.state = ConnState.CLOSED
        if reset:
            self._abort(end)
        else:
            self._forget(end)
            self._transmit(end, "fin", None)
        self._later(end, reason)

    def _forget(self, end: SimConn) -> None:
        ends = self.ends.get(end.node)
        if ends is not None and end.env.alive:
            ends.pop(end, None)

    def _later(self, end: SimConn, reason: str) -> None:
        """``closed(end, reason)`` as its own event: never from inside the env call."""
        self.sim.schedule(0.0, self._ended, end, reason)

    def _ended(self, end: SimConn, reason: str) -> None:
        if end.env.alive:
            self._trace(end, "close", reason=reason, code=end.close_code,
                        frames_in=end.frames_in, frames_out=end.frames_out)
        self._handler(end, "closed", end, reason)

    # -- calling the service ---------------------------------------------------------------

    def _handler(self, end: SimConn, name: str, *args: Any) -> None:
        env = end.env
        if not env.alive:
            return
        fn = getattr(env.process, name, None)
        if fn is None:
            raise StateError(f"node {env.node} has a connection but its process has no "
                             f"{name}() (see gossamer.core.conn.ConnectionHandler)")
        self._call(end, lambda: fn(*args))

    def _call(self, end: SimConn, fn: Callable[[], object]) -> None:
        try:
            fn()
        except ProtocolError as exc:
            end.env.trace("drop", layer=LAYER, peer=end.remote, reason=exc.reason,
                          error=str(exc))
        except Exception as exc:
            raise self.sim.failure(end.node, exc) from exc

    def _own(self, env: SimEnv, conn: object) -> SimConn | None:
        if not isinstance(conn, SimConn):
            raise ConfigError(f"not a connection of this simulation: {conn!r}")
        if conn.env is not env:
            if conn.env.node == env.node:
                return None  # an end of an earlier incarnation: gone with it
            raise ConfigError(f"connection {conn.id} belongs to node {conn.node}, not {env.node}")
        return conn

    def _trace(self, end: SimConn, event: str, **info: Any) -> None:
        end.env.trace(event, layer=LAYER, peer=end.remote, conn=end.id, **info)
