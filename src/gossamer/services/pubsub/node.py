"""Topic publish/subscribe on one node (seed 001, section 5): over gossip (HyParView + gossip
broadcast, every message to every node, filtered by subscription at delivery) or over Scribe
trees on Chord (only subscribers and tree forwarders see a topic's messages).

``PubSubNode`` builds its layers from ``env``; the runtime drives ``node.process`` (the bottom of
the stack: it starts the overlay and routes every message). The application hears
``on_message(topic, message)`` at subscribed nodes only.

Trace rows (layer ``pubsub``, key = topic): ``subscribe`` and ``unsubscribe`` (so a checker
knows who should receive), ``publish`` at the publisher and ``deliver`` at each subscribed
receiver, with the message id, origin and sequence number of the layer that carried it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import Any, Literal

from ...core.env import Env, Process
from ...core.errors import ConfigError, StateError
from ...core.ids import NodeId
from ...core.jsonvalue import json_copy
from ...core.messages import Codec
from ...protocols.dissemination import gossip as gossip_layer
from ...protocols.dissemination.gossip import GossipBroadcast, GossipConfig, parse_message_id
from ...protocols.dissemination.scribe import (
    MAX_TOPIC,
    PublishDoneFn,
    PublishResult,
    Scribe,
    ScribeConfig,
    check_topic,
)
from ...protocols.dissemination.scribe import messages as scribe_messages
from ...protocols.membership import hyparview as hyparview_layer
from ...protocols.membership.chord import Chord, ChordConfig, ChordHost
from ...protocols.membership.chord import messages as chord_messages
from ...protocols.membership.hyparview import HyParView, HyParViewConfig
from ...protocols.ordering.orderer import Orderer

__all__ = ["LAYER", "MessageFn", "Overloaded", "PubSubNode", "codec_for"]

LAYER = "pubsub"
TOPIC_KEY = "topic"
BODY_KEY = "message"

MessageFn = Callable[[str, Any], None]
MAX_ROOM_WAITERS = 4096  # callers waiting for room at once (one per client connection)


class Overloaded(StateError):
    """A publish refused because the node has no room for it now (nothing was sent; it is
    definite): publish again once ``PubSubNode.when_room`` calls back."""

Mode = Literal["gossip", "scribe"]


def codec_for(mode: Mode) -> Codec:
    """The codec of a node's stack: HyParView and gossip, or Chord and Scribe."""
    if mode == "gossip":
        return Codec.union(hyparview_layer.CODEC, gossip_layer.CODEC)
    if mode == "scribe":
        return Codec.union(chord_messages.CODEC, scribe_messages.CODEC)
    raise ConfigError(f"mode must be 'gossip' or 'scribe', got {mode!r}")


class PubSubNode:
    """subscribe / unsubscribe / publish over the dissemination layer ``mode`` names.

    ``contacts`` are the overlay's entry points; in scribe mode ``create`` makes this node the
    ring's first member; ``orderer`` orders the publishes this node takes as a topic's root
    (scribe; default: accepted at once). A prebuilt overlay (``HyParView`` for gossip, a
    ``ChordHost`` for scribe) may be passed as ``overlay`` instead.
    """

    def __init__(
        self,
        env: Env,
        mode: Mode = "gossip",
        *,
        contacts: Iterable[NodeId] = (),
        create: bool = False,
        overlay: HyParView | ChordHost | None = None,
        hyparview_config: HyParViewConfig | None = None,
        gossip_config: GossipConfig | None = None,
        chord_config: ChordConfig | None = None,
        scribe_config: ScribeConfig | None = None,
        orderer: Orderer | None = None,
        max_topics: int = 4096,
        on_message: MessageFn | None = None,
    ) -> None:
        if mode not in ("gossip", "scribe"):
            raise ConfigError(f"mode must be 'gossip' or 'scribe', got {mode!r}")
        if max_topics < 1:
            raise ConfigError("max_topics must be >= 1")
        self.env = env
        self.mode = mode
        self.max_topics = max_topics
        self.on_message = on_message
        self._subscriptions: dict[str, None] = {}
        self._room_waiters: dict[Callable[[], None], None] = {}  # see ``when_room``
        self._gossip: GossipBroadcast | None = None
        self._scribe: Scribe | None = None
        if mode == "gossip":
            if overlay is not None and not isinstance(overlay, HyParView):
                raise ConfigError("gossip mode runs over a HyParView overlay")
            view = overlay if overlay is not None else HyParView(
                env, contacts=contacts, config=hyparview_config)
            self._gossip = GossipBroadcast(env, view, config=gossip_config,
                                           on_deliver=self._gossip_delivered)
            self._gossip.on_room = self._room
        else:
            if overlay is not None and not isinstance(overlay, ChordHost):
                raise ConfigError("scribe mode runs over a Chord ring")
            chord = overlay if overlay is not None else Chord(
                env, contacts=contacts, create=create, config=chord_config)
            self._scribe = Scribe(env, chord, config=scribe_config, orderer=orderer,
                                  on_deliver=self._scribe_delivered)

    @property
    def process(self) -> Process:
        """What the runtime drives: the bottom layer of this node's stack."""
        if self._gossip is not None:
            return self._gossip
        assert self._scribe is not None
        return self._scribe

    @property
    def gossip(self) -> GossipBroadcast | None:
        return self._gossip

    @property
    def scribe(self) -> Scribe | None:
        return self._scribe

    # -- requests --------------------------------------------------------------------------------

    def subscriptions(self) -> list[str]:
        return list(self._subscriptions)

    def is_subscribed(self, topic: str) -> bool:
        return topic in self._subscriptions

    def subscribe(self, topic: str) -> None:
        check_topic(topic)
        if topic in self._subscriptions:
            return
        if len(self._subscriptions) >= self.max_topics:
            raise StateError(f"already subscribed to {self.max_topics} topics")
        self._subscriptions[topic] = None
        self.env.trace("subscribe", layer=LAYER, key=topic)
        if self._scribe is not None:
            self._scribe.subscribe(topic)

    def unsubscribe(self, topic: str) -> None:
        check_topic(topic)
        if topic not in self._subscriptions:
            return
        del self._subscriptions[topic]
        self.env.trace("unsubscribe", layer=LAYER, key=topic)
        if self._scribe is not None:
            self._scribe.unsubscribe(topic)

    # -- back-pressure -----------------------------------------------------------------------------

    def has_room(self) -> bool:
        """Whether this node takes a new publish now. Over Scribe: fewer than ``max_pending``
        publishes await their root's acknowledgement; over gossip: no neighbour's link is
        full (``GossipBroadcast.has_room``). A publish made without room is refused
        (``Overloaded``); ``when_room`` says when to try again."""
        if self._gossip is not None:
            return self._gossip.has_room()
        assert self._scribe is not None
        return self._scribe.pending_publishes < self._scribe.config.max_pending

    def when_room(self, fn: Callable[[], None]) -> None:
        """Call ``fn`` once when ``has_room()`` may be true again (at once, later, if it is
        now). One call per ``fn`` is kept, however often it asks."""
        if len(self._room_waiters) >= MAX_ROOM_WAITERS and fn not in self._room_waiters:
            raise StateError(f"{MAX_ROOM_WAITERS} callers wait for room already")
        self._room_waiters[fn] = None
        if self.has_room():
            self.env.set_timer(0.0, self._room)

    def _room(self) -> None:
        if not self._room_waiters or not self.has_room():
            return
        waiters, self._room_waiters = self._room_waiters, {}
        for fn in waiters:
            fn()

    def _scribe_done(self, on_done: PublishDoneFn | None, result: PublishResult) -> None:
        if on_done is not None:
            on_done(result)
        if self._room_waiters:
            self._room()

    # -- requests (continued) ----------------------------------------------------------------------

    def publish(self, topic: str, message: Any, *, on_done: PublishDoneFn | None = None) -> str:
        """Send ``message`` to every subscriber of ``topic`` (this node too, if subscribed);
        returns the message id. Without room (``has_room``) it raises ``Overloaded`` and
        sends nothing. ``on_done`` hears once how it ended: over Scribe, accepted
        once the topic's root acknowledged it (its orderer took it), else refused or failed
        (``PublishResult``); over gossip, which has no root, accepted once it is sent. It
        may be called before this returns."""
        check_topic(topic)
        # what every subscriber will hold (a set stopped the node that tried to send it)
        message = json_copy(message, "a message")
        if not self.has_room():
            raise Overloaded(self._overload_reason())
        env = self.env
        # the layer below may deliver here before it returns: trace the publish first
        if self._gossip is not None:
            seq = self._gossip.next_seq
            mid = f"{env.node}:{seq}"
            env.trace("publish", layer=LAYER, msg=mid, origin=env.node, seq=seq, key=topic)
            sent = self._gossip.broadcast({TOPIC_KEY: topic, BODY_KEY: message})
            if sent == mid and on_done is not None:
                on_done(PublishResult(mid, topic, True))
        else:
            assert self._scribe is not None
            seq = self._scribe.next_seq
            mid = f"{env.node}:{seq}"
            env.trace("publish", layer=LAYER, msg=mid, origin=env.node, seq=seq, key=topic)
            sent = self._scribe.publish(topic, message,
                                        on_done=functools.partial(self._scribe_done, on_done))
        if sent != mid:
            raise StateError(f"the layer below named the message {sent}, not {mid}")
        return mid

    def _overload_reason(self) -> str:
        if self._scribe is not None:
            return (f"overloaded: {self._scribe.pending_publishes} publishes await their "
                    f"root's acknowledgement; publish again once some are answered")
        return "overloaded: the links to this node's neighbours are full; publish again later"

    # -- indications from below ------------------------------------------------------------------

    def _gossip_delivered(self, mid: str, origin: NodeId, payload: Any) -> None:
        if (not isinstance(payload, dict) or set(payload) != {TOPIC_KEY, BODY_KEY}
                or not isinstance(payload[TOPIC_KEY], str)
                or not 1 <= len(payload[TOPIC_KEY]) <= MAX_TOPIC):
            self.env.trace("drop", layer=LAYER, msg=mid, origin=origin, reason="bad_payload")
            return
        self._deliver(payload[TOPIC_KEY], mid, origin, payload[BODY_KEY])

    def _scribe_delivered(self, topic: str, mid: str, origin: NodeId, payload: Any) -> None:
        self._deliver(topic, mid, origin, payload)

    def _deliver(self, topic: str, mid: str, origin: NodeId, message: Any) -> None:
        if topic not in self._subscriptions:
            return  # gossip carries every topic to every node: not ours
        try:
            seq: int | None = parse_message_id(mid)[1]
        except ValueError:
            seq = None
        self.env.trace("deliver", layer=LAYER, msg=mid, origin=origin, seq=seq, key=topic)
        if self.on_message is not None:
            self.on_message(topic, message)
