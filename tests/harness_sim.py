"""The simulator behind the conformance suite's cluster facade (see ``harness_net.NetCluster``)."""

from __future__ import annotations

from collections.abc import Callable

from gossamer.core import MemorySink, Process, ProcessFactory
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
    ) -> None:
        self.node_ids = list(node_ids)
        self.trace = MemorySink()
        link = LinkModel(latency=Uniform(0.001, 0.01), loss=loss)
        self.sim = Simulation(seed=seed, link=link, run=run, trace=self.trace)
        self.sim.add_nodes(self.node_ids, factory)

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
