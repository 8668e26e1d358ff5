"""Scribe over Chord: one multicast tree per topic, rooted at the topic's Chord root (seed 001,
sections 3.3-3.4; Rowstron et al., NGC 2001).

Subscribing routes a JOIN towards the topic's root through Chord. Every node the JOIN passes
becomes a forwarder: it adopts the previous hop as a child and, if it was not in the tree yet,
joins it itself with a JOIN of its own (the one it received stops there). A node whose JOIN
leaves it takes the next hop as its parent. Unsubscribing prunes: a node with no children that
is not subscribed LEAVEs its parent.

Publishing finds the topic's root (Chord ``find_root``, then cached), sends it the message and
waits for an acknowledgement, retrying through a fresh lookup. The root hands the message to its
``Orderer`` (given at construction; the default ``ImmediateOrderer`` accepts at once, a
replicated topic owner such as Multi-Paxos answers once a majority decided) and acts only on its
decision: accepted, the message is numbered at the decided position, acknowledged and sent down
the tree; redirected, the publisher is told where to publish (``PublishRedirect``: a traced
``publish_redirect``, then a retry there); refused, the publisher is told why
(``PublishRefused``: a traced ``publish_refused``, and the publish ends). Nothing is
acknowledged before the orderer accepted it. Only subscribed nodes deliver, each message once.
While the ring settles Chord's view and the tree can disagree: a tree member named root passes a
publish up to its parent (``hops`` bounds a cycle); a node named root with no tree yet takes it
into a stream of its own, which the tree fetches when it moves there; and a root Chord stops
naming (it took messages while the tree was elsewhere) publishes them again in the tree it
joins, until they come down to it.

Tree repair: tree neighbours exchange heartbeats. A child that does not hear its parent within
``parent_timeout`` joins again through Chord, which routes around the failed node; a parent
forgets silent children. Heartbeats carry the parent's depth, so a cycle (possible while the ring
is inconsistent) grows without bound and is broken by a fresh join past ``max_depth``; a root
that Chord no longer names root joins the new one.

Loss recovery: each root numbers the topic's messages in a stream of its own, named by a random
``epoch`` drawn when it becomes root, at positions 1, 2, ...: its orderer's positions for the
topic, counted from the first message the stream took (the message id, origin:seq, stays the
delivery identity). Every tree node keeps the last ``topic_log_limit`` messages by position
and the highest position it knows of; heartbeats carry the parent's epoch, highest position and
the lowest position it can get (from its log, or from its own parent). A gap (a position jump,
or a heartbeat above what we have) is NACKed to the parent after ``nack_delay``, again every
``nack_interval`` while it lasts; the parent resends from its log, or asks its own parent for
what it never had (it joined the tree later than the child), and a node forwards a repair it
did not have to its children like any data, so the whole subtree is repaired. A node new to a
tree starts at its parent's position; if it subscribed a while ago (its JOIN was lost, or the
ring was settling) it asks its parent (``ScribeSince``, a few times: loss) for what reached the
parent since then, passed up by forwarders that joined later still; a node that changes
parent in the same stream keeps its position and fetches what it missed; a node that sees a new
epoch (the tree moved under a new root: the old one failed, or Chord now names another node)
fetches the new stream from its start, so what the new root took before the old tree joined it
is delivered too. Positions nobody up the tree can resend, or still missing after
``nack_retries`` rounds without progress, are given up with a traced ``drop``.

What loss recovery cannot repair: messages an old root accepted and that reached no node of the
new tree. Closing that window is the replicated topic owner's job (Multi-Paxos).

``messages``, ``base`` (configuration, per-topic state), ``stream`` (the root's numbered stream,
bounded logs, NACK repair and catch-up), ``tree`` (tree membership and heartbeats) and ``node``
(``Scribe``: the process, subscribe/publish, the root's hand-off to its orderer).
"""

from .base import LAYER, PublishDoneFn, PublishResult, ScribeConfig, TreeRole
from .messages import (
    MAX_TOPIC,
    Heartbeat,
    Publish,
    PublishAck,
    PublishRedirect,
    PublishRefused,
    ScribeData,
    ScribeLeave,
    ScribeMessage,
    ScribeNack,
    ScribeSince,
    check_topic,
)
from .node import Scribe

__all__ = [
    "LAYER",
    "MAX_TOPIC",
    "Heartbeat",
    "Publish",
    "PublishAck",
    "PublishDoneFn",
    "PublishRedirect",
    "PublishRefused",
    "PublishResult",
    "Scribe",
    "ScribeConfig",
    "ScribeData",
    "ScribeLeave",
    "ScribeMessage",
    "ScribeNack",
    "ScribeSince",
    "TreeRole",
    "check_topic",
]
