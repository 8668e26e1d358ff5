"""Simulated IP multicast groups: who receives one ``env.multicast`` and after what delay.

A flat group gives each member its own copy through the network's link model (independent
loss, duplication, reordering per member). A ``RouterTree`` group sends one copy along a tree
of named routers and links, each link with its own delay and loss, so a loss on a link near the
source is a loss for the whole subtree behind it (the topology of the SRM paper, Floyd et al.).
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Iterable

from ...core.errors import ConfigError
from ...core.ids import NodeId

__all__ = ["MulticastGroup", "RouterTree", "TreeLink"]


@dataclasses.dataclass(frozen=True, slots=True)
class TreeLink:
    """An undirected link between two vertices (routers or member nodes)."""

    a: str
    b: str
    delay: float = 0.01
    loss: float = 0.0

    def __post_init__(self) -> None:
        if self.a == self.b:
            raise ConfigError(f"a link joins two different vertices, got {self.a!r} twice")
        if not self.delay >= 0:
            raise ConfigError(f"link delay must be >= 0, got {self.delay}")
        if not 0.0 <= self.loss <= 1.0:
            raise ConfigError(f"link loss must be in [0, 1], got {self.loss}")


class RouterTree:
    """A tree of links over routers and members. A packet floods the tree from its sender's
    vertex; each link it crosses may drop it (for everything behind that link) and adds its
    delay. A member not in the tree hears nothing."""

    def __init__(self, links: Iterable[TreeLink]) -> None:
        self.links = tuple(links)
        self._adjacent: dict[str, list[TreeLink]] = {}
        for link in self.links:
            self._adjacent.setdefault(link.a, []).append(link)
            self._adjacent.setdefault(link.b, []).append(link)
        edges = len(self.links)
        if self.links and edges != len(self._adjacent) - 1:
            raise ConfigError(f"not a tree: {len(self._adjacent)} vertices and {edges} links")
        if self.links and len(self._reach(self.links[0].a)) != len(self._adjacent):
            raise ConfigError("not a tree: its links are not all connected")

    def _reach(self, start: str, blocked: str | None = None) -> set[str]:
        """The vertices reachable from ``start`` (without passing ``blocked``)."""
        seen = {start} if blocked is None else {start, blocked}
        todo = [start]
        while todo:
            vertex = todo.pop()
            for link in self._adjacent.get(vertex, ()):
                other = link.b if link.a == vertex else link.a
                if other not in seen:
                    seen.add(other)
                    todo.append(other)
        seen.discard(blocked)  # a no-op without one
        return seen

    def vertices(self) -> set[str]:
        return set(self._adjacent)

    def spread(self, source: str, rng: random.Random) -> dict[str, float]:
        """Every vertex one packet from ``source`` reaches, with its delay (the source not
        included); the links are drawn in a fixed order, so one rng state gives one result."""
        if source not in self._adjacent:
            return {}
        reached: dict[str, float] = {}
        todo = [(source, 0.0, "")]
        while todo:
            vertex, delay, came_from = todo.pop()
            for link in self._adjacent[vertex]:
                other = link.b if link.a == vertex else link.a
                if other == came_from:
                    continue
                if link.loss and rng.random() < link.loss:
                    continue  # dropped here: the whole subtree behind this link misses it
                reached[other] = delay + link.delay
                todo.append((other, delay + link.delay, vertex))
        return reached

    @classmethod
    def two_level(cls, source: NodeId, members: Iterable[NodeId], *, fanout: int = 4,
                       delay: float = 0.01, loss: float = 0.0,
                       lossy_link_loss: float = 0.0) -> RouterTree:
        """A ready tree: ``source`` under router ``r0``, the other members spread over
        ``fanout`` routers ``r1..`` below ``r0``; the ``r0``-``r1`` link drops with
        ``lossy_link_loss`` (the "lossy link near the source" of the SRM paper), every other
        link with ``loss``."""
        if fanout < 1:
            raise ConfigError(f"fanout must be >= 1, got {fanout}")
        links = [TreeLink(source, "r0", delay, loss)]
        links += [TreeLink("r0", f"r{i}", delay, lossy_link_loss if i == 1 else loss)
                  for i in range(1, fanout + 1)]
        others = [m for m in members if m != source]
        links += [TreeLink(f"r{1 + i % fanout}", member, delay, loss)
                  for i, member in enumerate(others)]
        return cls(links)

    @classmethod
    def bounded_degree(cls, source: NodeId, members: Iterable[NodeId], *, vertices: int,
                       degree: int = 4, delay: float = 0.01, loss: float = 0.0,
                       lossy_link_loss: float = 0.0, rng: random.Random) -> RouterTree:
        """The SRM paper's topology: a random tree of ``vertices`` vertices, none with more
        than ``degree`` links, grown by attaching each new vertex to a random one with a link
        free; the source is its root and the other members sit on distinct random vertices
        (the rest are routers ``r1..``), so members are at every depth and their distances
        differ. Of the source's links, the one with the most members behind it drops with
        ``lossy_link_loss`` (a lossy link next to the source), every other link with
        ``loss``."""
        names = list(dict.fromkeys(members))
        if source not in names:
            raise ConfigError(f"the source {source!r} is not among the members")
        if degree < 3:
            raise ConfigError(f"degree must be >= 3, got {degree}")
        if vertices < len(names) or vertices < 3:
            raise ConfigError(f"{vertices} vertices cannot hold {len(names)} members")
        edges: list[tuple[int, int]] = []
        links_of = [0] * vertices
        open_vertices = [0]  # those with a free link
        for vertex in range(1, vertices):
            parent = open_vertices[rng.randrange(len(open_vertices))]
            edges.append((parent, vertex))
            links_of[parent] += 1
            links_of[vertex] = 1
            if links_of[parent] == degree:
                open_vertices.remove(parent)
            open_vertices.append(vertex)
        if links_of[0] < 2:
            raise ConfigError("the tree's root has one link: no link next to it loses for a part")
        rest = rng.sample(range(1, vertices), len(names) - 1)
        label = [f"r{v}" for v in range(vertices)]
        label[0] = source  # the root: its subtrees split the members
        for vertex, name in zip(rest, [n for n in names if n != source], strict=True):
            label[vertex] = name
        plain = cls([TreeLink(label[a], label[b], delay, loss) for a, b in edges])
        member_set = set(names)

        def members_behind(link: TreeLink) -> int:
            far = link.b if link.a == source else link.a
            return len(plain._reach(far, source) & member_set)

        own = [link for link in plain.links if source in (link.a, link.b)]
        lossy = max(own, key=members_behind)  # the root has >= 2 links: never all of them
        return cls([TreeLink(link.a, link.b, delay,
                             lossy_link_loss if link is lossy else loss)
                    for link in plain.links])


@dataclasses.dataclass(frozen=True, slots=True)
class MulticastGroup:
    """One simulated group: its ``members`` (node ids), and either ``tree`` (a ``RouterTree``
    over them) or None (flat: each copy through the network's link model); ``member_loss``
    drops each copy once more, independently per member (a receiver's own lossy access)."""

    members: frozenset[NodeId]
    tree: RouterTree | None = None
    member_loss: float = 0.0

    def __post_init__(self) -> None:
        if not 0.0 <= self.member_loss <= 1.0:
            raise ConfigError(f"member_loss must be in [0, 1], got {self.member_loss}")
        if self.tree is not None:
            missing = self.members - self.tree.vertices()
            if missing:
                raise ConfigError(f"members not in the router tree: {sorted(missing)[:5]}")
