"""Replicated topic owners in ``gossamer pubsub node`` (seed 001, phase 3): the options that
turn them on and the stack they build (Chord, Scribe ordering through ``TopicOwners``).

With ``OwnersOptions`` a node runs Scribe over Chord with ``TopicOwners`` as its orderer: each
founding node of the ring (``ring``, the same list at every node, this node among them) leads
a Multi-Paxos group of itself and its next ``backups`` ring nodes, and a topic's publish is
acknowledged to its publisher only once its group decided it, a majority of the group having
committed it to its store (``docs/pubsub.md``, "Replicated topic owners").
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from ...core.env import Env, Process
from ...core.errors import ConfigError
from ...core.ids import NodeId, check_node_id
from ...core.messages import Codec
from ...protocols.dissemination.scribe import ScribeConfig
from ...protocols.dissemination.scribe.owners import OwnedProcess, TopicOwners, spare_groups
from ...protocols.dissemination.scribe.placement import OwnerProcess
from ...protocols.membership.chord import Chord, ChordConfig
from ...protocols.ordering.paxos import PaxosConfig
from ...protocols.ordering.paxos.groups import GROUP_CODEC
from ...runtimes.net import host_port_address
from .node import MessageFn, PubSubNode, codec_for

__all__ = ["OwnersOptions", "build_owned", "owned_analysis_checks", "owned_codec", "owned_stack",
           "owners_status", "placed_stack"]


@dataclasses.dataclass(frozen=True, slots=True)
class OwnersOptions:
    """Either ``ring`` (every founding node, ``host:port``) with ``backups`` ring nodes
    replicating each founding owner, or ``spares`` (the seed's placement: each active node
    ``host:port`` with its spare processes outside the ring, ``spare_groups``); the Paxos
    timers are the seed's defaults: the leader's NOOP every ``heartbeat`` seconds, a follower
    suspects it after ``suspect`` seconds."""

    ring: tuple[NodeId, ...] = ()
    backups: int = 2
    heartbeat: float = 1.0
    suspect: float = 2.0
    spares: tuple[tuple[NodeId, tuple[NodeId, ...]], ...] = ()
    # the seed's placement: processes that join an active node's group through its log after
    # a take-over (a new spare), by active node
    reserves: tuple[tuple[NodeId, tuple[NodeId, ...]], ...] = ()
    # the seed's placement: active nodes whose groups join a running placement (each takes
    # its key range from the group after it through both logs, ``scribe.handover``)
    grown: tuple[NodeId, ...] = ()

    def __post_init__(self) -> None:
        if (self.reserves or self.grown) and not self.spares:
            raise ConfigError("reserves (--reserve) and grown groups (--grown) belong to the "
                              "seed's placement: give --spares too")
        if not set(self.grown) <= {active for active, _ in self.spares}:
            raise ConfigError(f"a grown group (--grown) is an active node named by --spares, "
                              f"got {list(self.grown)}")
        if self.spares:
            if self.ring:
                raise ConfigError("give the founding ring with backups on it (--ring) or the "
                                  "seed's placement (--spares), not both")
            for node in self.processes():
                if host_port_address(check_node_id(node)) is None:
                    raise ConfigError(f"process {node!r} of the placement is not HOST:PORT")
            self.placement()  # says what is wrong with the groups
            named = self.processes()
            if len(named) != len(set(named)) or not set(dict(self.reserves)) <= set(
                    dict(self.spares)):
                raise ConfigError("a reserve belongs to an active node named by --spares and "
                                  "is named once, nowhere else")
        else:
            if self.backups < 1:
                raise ConfigError(f"replicated owners need backups >= 1, got {self.backups}")
            if not self.ring:
                raise ConfigError("replicated owners need the founding ring (--ring "
                                  "HOST:PORT, one for each founding node, this one too) or "
                                  "the seed's placement (--spares)")
            for node in self.ring:
                check_node_id(node)
                if host_port_address(node) is None:
                    raise ConfigError(f"ring node {node!r} is not HOST:PORT")
            if len(set(self.ring)) != len(self.ring):
                raise ConfigError(f"a ring node is named twice: {sorted(self.ring)}")
        # PaxosConfig says what is wrong with the timers
        self.paxos()

    def paxos(self) -> PaxosConfig:
        return PaxosConfig(heartbeat_interval=self.heartbeat, suspect_timeout=self.suspect)

    def placement(self) -> dict[NodeId, tuple[NodeId, ...]] | None:
        """The groups of the seed's placement (None: backups on the ring)."""
        return spare_groups(dict(self.spares)) if self.spares else None

    def processes(self) -> list[NodeId]:
        """Every process named: the ring, or the active nodes and their spares."""
        if not self.spares:
            return list(self.ring)
        return [*(n for active, spares in self.spares for n in (active, *spares)),
                *(n for _, reserves in self.reserves for n in reserves)]

    def is_spare(self, node: NodeId) -> bool:
        """A spare or a reserve of the seed's placement (off the ring until it takes a node's
        place)."""
        return any(node in spares for _, spares in (*self.spares, *self.reserves))

    def check_member(self, node: NodeId) -> None:
        """A node with replicated owners is named by the ring or the placement."""
        if node not in self.processes():
            flag = "--spares" if self.spares else "--ring"
            raise ConfigError(f"{node} is not in {', '.join(self.processes())}: with "
                              f"replicated owners every process is named by {flag} and "
                              f"listens on a fixed --port")


def owned_codec() -> Codec:
    """The codec of a scribe node with replicated owners: Chord, Scribe and the groups."""
    return Codec.union(codec_for("scribe"), GROUP_CODEC)


def build_owned(env: Env, options: OwnersOptions, *, contacts: tuple[NodeId, ...],
                chord_config: ChordConfig, scribe_config: ScribeConfig | None = None,
                on_message: MessageFn | None = None) -> tuple[PubSubNode, OwnedProcess]:
    """The pub/sub node over Chord + Scribe with ``TopicOwners`` as Scribe's orderer, and the
    process the runtime drives (the groups beside the stack)."""
    options.check_member(env.node)
    return owned_stack(env, options.ring, backups=options.backups, paxos=options.paxos(),
                       contacts=contacts, chord_config=chord_config,
                       scribe_config=scribe_config, on_message=on_message)


def owned_stack(env: Env, ring: tuple[NodeId, ...], *, backups: int, paxos: PaxosConfig,
                contacts: tuple[NodeId, ...], chord_config: ChordConfig,
                scribe_config: ScribeConfig | None = None,
                on_message: MessageFn | None = None) -> tuple[PubSubNode, OwnedProcess]:
    """``build_owned`` for any node ids (the simulator's too): Chord (created here when
    ``contacts`` is empty), ``TopicOwners`` over the founding ``ring`` as Scribe's orderer,
    the pub/sub node and the process the runtime drives."""
    scribe_config = scribe_config if scribe_config is not None else ScribeConfig()
    chord = Chord(env, contacts=contacts, create=not contacts, config=chord_config)
    owners = TopicOwners(env, ring, bits=chord_config.bits, backups=backups, config=paxos,
                         history_limit=scribe_config.topic_log_limit,
                         max_topics=scribe_config.max_topics)
    pubsub = PubSubNode(env, "scribe", overlay=chord, scribe_config=scribe_config,
                        orderer=owners, on_message=on_message)
    return pubsub, OwnedProcess(owners, pubsub.process)


def placed_stack(env: Env, groups: dict[NodeId, tuple[NodeId, ...]], *, paxos: PaxosConfig,
                 reserves: dict[NodeId, tuple[NodeId, ...]] | None = None,
                 grown: tuple[NodeId, ...] = (),
                 contacts: tuple[NodeId, ...], create: bool, chord_config: ChordConfig,
                 scribe_config: ScribeConfig | None = None,
                 on_message: MessageFn | None = None,
                 on_build: Callable[[PubSubNode], None] | None = None) -> OwnerProcess:
    """A process of the seed's placement (``placement.OwnerProcess``): the replica of its
    owner's group (``groups``: ``spare_groups``), and a pub/sub node over Chord + Scribe whose
    Chord node has the owner's identity, on the ring while the group's log names this process
    active; ``reserves``: processes that a group adds through its log after a take-over;
    ``grown``: groups that join a running placement (``TopicOwners(grown=...)``).
    ``on_build(app)`` hears each pub/sub node built (a fresh one after leaving the
    ring)."""
    scribe_config = scribe_config if scribe_config is not None else ScribeConfig()
    owners = TopicOwners(env, groups=groups, reserves=reserves, bits=chord_config.bits,
                         config=paxos, grown=grown,
                         history_limit=scribe_config.topic_log_limit,
                         max_topics=scribe_config.max_topics)
    chord_config = dataclasses.replace(chord_config, identity=owners.group_of(env.node))

    current: list[PubSubNode] = []

    def build() -> Process:
        chord = Chord(env, contacts=contacts, create=create, config=chord_config)
        app = PubSubNode(env, "scribe", overlay=chord, scribe_config=scribe_config,
                         orderer=owners, on_message=on_message)
        current[:] = [app]
        if on_build is not None:
            on_build(app)
        return app.process

    def leave() -> None:  # off the ring, nothing reaches its subscriptions: they end
        for topic in current[0].subscriptions():
            current[0].unsubscribe(topic)

    return OwnerProcess(env, owners, build, on_leave=leave)


def owned_analysis_checks(checks: dict[str, Any]) -> dict[str, Any]:
    """A scribe run's check settings with what replicated owners add: every subscriber of a
    topic delivers its publishes in one order (total order per topic, both layers); the Paxos
    checks (agreement, the decided order, nothing acknowledged lost) apply by themselves."""
    return {**checks, "total_order_layers": ["pubsub", "scribe"], "total_order_per_key": True}


def owners_status(owners: TopicOwners, topics: list[str]) -> dict[str, Any]:
    """For ``status``: each topic's founding owner, and the groups this node is a member of
    with the leader it knows, how far it decided and whether it still claims its key range
    (a grown group before its log took it)."""
    groups: dict[str, Any] = {}
    for owner in owners.owners:
        replica = owners.replica(owner)
        if replica is None:
            continue
        groups[owner] = {"members": sorted(replica.members), "leader": replica.current_leader,
                         "decided": replica.decided_upto,
                         "claiming": owners.claiming(owner)}
    return {"owners": {topic: owners.owner_of(topic) for topic in topics}, "groups": groups}
