"""Per-client intent order survives conflicts (issue 18 item 11, ``docs/replica-wire.md``):
a client's lost write is rebased only while it is still the client's latest intent for its
key, so a rebased old intent never overwrites a newer one of the same client.

A Hypothesis property over random interleavings in the simulator: a few clients write one key
at random moments over links of random latency (so writes cross, lose and are rebased in every
order), then the run settles and every replica is compared."""

from __future__ import annotations

from typing import Any, cast

from hypothesis import given
from hypothesis import strategies as st

from gossamer.core import node_ids
from gossamer.protocols.replica import ReplicaNode
from gossamer.runtimes.sim import LinkModel, Scenario, Uniform
from test_replica_sim import HUB, HUB_LISTENER, client_of, run

KEY = "k"


def interleaving(seed: int, writers: int, times: list[list[float]],
                 latency: tuple[float, float]) -> Scenario:
    scenario = Scenario(seed=seed, nodes=[HUB, *node_ids(writers)],
                        link=LinkModel(latency=Uniform(*latency)))
    scenario.listen(HUB, HUB_LISTENER)
    for writer, moments in zip(node_ids(writers), times, strict=True):
        for intent, at in enumerate(sorted(moments)):
            scenario.at(0.2 + at, lambda sim, writer=writer, intent=intent: sim.call(
                writer, lambda p: cast(ReplicaNode, p).client.set(
                    KEY, {"by": writer, "intent": intent})))
    return scenario


def intents_out_of_order(path: list[Any]) -> list[str]:
    """Along a winning path (contents, oldest first): each client's intents increase."""
    last: dict[str, int] = {}
    found = []
    for content in path:
        if content is None:
            continue
        by, intent = content["by"], content["intent"]
        if intent <= last.get(by, -1):
            found.append(f"{by}: intent {intent} applied after intent {last[by]}")
        last[by] = intent
    return found


@given(seed=st.integers(0, 10_000), writers=st.integers(2, 3),
       times=st.lists(st.lists(st.floats(0.0, 2.0), min_size=1, max_size=25),
                      min_size=3, max_size=3),
       latency=st.tuples(st.floats(0.001, 0.05), st.floats(0.05, 0.3)))
def test_a_rebased_old_intent_never_overwrites_a_newer_one_of_the_same_client(
    seed: int, writers: int, times: list[list[float]], latency: tuple[float, float],
) -> None:
    times = times[:writers]
    sim, _sink = run(interleaving(seed, writers, times, latency), until=60.0)
    replicas = [client_of(sim, node) for node in node_ids(writers)]
    where = f"seed={seed} writers={writers} latency={latency}"
    first = replicas[0]
    assert all(r.revisions() == first.revisions() for r in replicas), f"{where}: diverged"
    path = [entry[4] for entry in first.paths()[KEY]]  # [revision, old, writer, seq, content, ..]
    assert intents_out_of_order(path) == [], where
    final = first.get(KEY)
    by = final["by"]
    last = len(times[node_ids(writers).index(by)]) - 1
    assert final["intent"] == last, f"{where}: {by}'s intent {final['intent']} is final, " \
                                    f"its last was {last}"
