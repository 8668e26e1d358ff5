"""The rules of live checking without Spark: what the stateful operator finds in one node's
rows (FIFO, duplicates, causal order) and whom the driver's judge holds to a message."""

from __future__ import annotations

from typing import Any

from gossamer.pipeline import CheckConfig
from gossamer.pipeline.live import LiveJudge, _node_step


def deliver(seq: int, *, origin: str = "a", msg: str | None = None, t: float | None = None,
            info: str | None = None) -> dict[str, Any]:
    at = float(seq) if t is None else t
    return {"layer": "L", "node": "n", "event": "deliver", "msg": msg or f"{origin}:{seq}",
            "origin": origin, "seq": seq, "key": None, "t": at, "at": at, "row": int(at * 10),
            "info": info}


def findings(*batches: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    """(check, msg, detail) over batches fed one after the other, the state carried over."""
    state = None
    found = []
    for rows in batches:
        out, state = _node_step("r", "n", rows, state)
        found += [(o["check"], o["msg"], o["detail"]) for o in out if o["check"] != "seen"]
    return found


def test_fifo_gap_then_reordering_across_batches() -> None:
    assert findings([deliver(1), deliver(3, t=2.0)], [deliver(2, t=3.0)]) == [
        ("fifo", "a:3", "gap: seq 3 delivered, expected 2"),
        ("fifo", "a:2", "reordered: seq 2 after seq 3")]


def test_the_same_message_again_is_a_duplicate_and_another_one_breaks_fifo() -> None:
    assert findings([deliver(1), deliver(2)], [deliver(1, t=3.0)],
                    [deliver(2, t=4.0, msg="other")]) == [
        ("duplicates", "a:1", "delivered again in layer L"),
        ("fifo", "other", "seq 2 delivered again, as another message")]


def test_in_order_deliveries_find_nothing() -> None:
    assert findings([deliver(s) for s in range(1, 6)], [deliver(6)]) == []


def test_causal_past_missing() -> None:
    vector = '{"vector":{"a":1,"b":2}}'
    rows = [deliver(1, origin="a"), deliver(1, origin="b", t=2.0),
            deliver(2, origin="b", t=3.0, info=vector)]
    assert findings(rows) == []
    assert findings([deliver(1, origin="b"), deliver(2, origin="b", t=3.0, info=vector)]) == [
        ("causal", "b:2", "causal past not respected: a:1 not delivered before it")]


def member(node: str, event: str, at: float) -> dict[str, Any]:
    return {"check": "member", "run": "r", "node": node, "layer": "net", "at": at,
            "detail": event}


def owed(delivered: list[str], *, at: float = 5.0, key: str | None = None) -> dict[str, Any]:
    return {"check": "reliability", "run": "r", "layer": "L", "node": "p", "msg": "p:1",
            "origin": "p", "seq": 1, "key": key, "t": at, "at": at, "nodes": delivered}


def missing(records: list[dict[str, Any]], config: CheckConfig | None = None) -> list[str]:
    judge = LiveJudge(lambda run: config or CheckConfig(), grace=10.0)
    return sorted(v.node for v in judge.take(records) if v.check == "reliability")


def seen(*nodes: str) -> list[dict[str, Any]]:
    return [{"check": "seen", "run": "r", "node": n, "at": 0.0} for n in nodes]


def test_reliability_owed_by_the_nodes_up_at_the_publish() -> None:
    assert missing([*seen("p", "x", "y", "z"), owed(["x"])]) == ["y", "z"]
    # z crashed (owes nothing); y joined after the publish
    assert missing([*seen("p", "x", "y", "z"), member("z", "crash", 7.0),
                    member("y", "join", 6.0), owed(["x"])]) == []
    # a node that left cleanly after the publish still owed it
    assert missing([*seen("p", "x"), member("x", "leave", 7.0), owed([])]) == ["x"]


def test_reliability_on_topics_asks_only_the_subscribers() -> None:
    def sub(node: str, event: str, at: float) -> dict[str, Any]:
        return {"check": "subscription", "run": "r", "node": node, "key": "k", "at": at,
                "detail": event}

    records = [*seen("p", "x", "y"), sub("x", "subscribe", 1.0), sub("y", "subscribe", 1.0),
               sub("y", "unsubscribe", 2.0), owed([], key="k")]
    assert missing(records) == ["x"]
    assert missing(records, CheckConfig(layers=("other",))) == []


def test_a_pubsub_run_in_which_nobody_subscribed_owes_nobody_its_publishes() -> None:
    # the publish of the pub/sub layer marks the run as one of topics: a keyed message of it,
    # in the layer below too, is owed by the subscribers only, and there are none
    records = [*seen("p", "x", "y"), {**owed([], key="k"), "layer": "pubsub"},
               {**owed([], key="k"), "msg": "p:2"}]
    assert missing(records) == []
    # without a row of a topic layer, the keyed message is a broadcast one, owed by all
    assert missing([*seen("p", "x", "y"), owed([], key="k")]) == ["x", "y"]
