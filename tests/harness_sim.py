"""The simulator behind the conformance suite's cluster facade (see ``harness_net.NetCluster``)."""

from __future__ import annotations

from collections.abc import Callable

from gossamer.core import Framing, ListenerSpec, MemorySink, Process, ProcessFactory
from gossamer.runtimes.sim import LinkModel, Simulation, Uniform


class SimCluster:
    def __init__(
        self,
        node_ids: list[str],
        factory: ProcessFactory,
        *,
        seed: int = 0,
        loss: float = 0.0,
        run: str = "test",
        listeners: dict[str, list[ListenerSpec]] | None = None,
        sees_cluster: bool = False,
    ) -> None:
        """``sees_cluster``: ``factory(env, cluster)``, so a process can find the others'
        listeners (``listener_address``) when it starts."""
        self.node_ids = list(node_ids)
        if sees_cluster:
            inner = factory
            factory = lambda env: inner(env, self)  # type: ignore[call-arg,misc]  # noqa: E731
        self.trace = MemorySink()
        self.listeners = listeners or {}
        link = LinkModel(latency=Uniform(0.001, 0.01), loss=loss)
        self.sim = Simulation(seed=seed, link=link, run=run, trace=self.trace)
        for node in self.node_ids:
            self.sim.add_node(node, factory, listeners=self.listeners.get(node, ()))

    def listener_address(self, node: str, name: str) -> str:
        """Where a process dials ``node``'s listener ``name`` (``ws://`` for a WebSocket)."""
        spec = next(s for s in self.listeners[node] if s.name == name)
        if spec.framing is Framing.WS:
            return f"ws://{node}:{spec.port}{spec.path}"
        return f"{node}:{spec.port}"

    def process(self, node: str) -> Process:
        return self.sim.process(node)

    def call(self, node: str, fn: Callable[[Process], None]) -> None:
        self.sim.call(node, fn)

    def run_until(self, predicate: Callable[[], bool], timeout: float) -> bool:
        """Run virtual time until ``predicate()`` holds or ``timeout`` virtual seconds pass."""
        if predicate():
            return True
        self.sim.run(until=self.sim.now + timeout, stop_when=predicate)
        return predicate()

    def close(self) -> None:
        self.trace.flush()
