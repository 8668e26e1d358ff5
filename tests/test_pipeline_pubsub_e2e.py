"""End to end: a tiny simulated seed-001 experiment (topic pub/sub over Scribe and over gossip,
some nodes subscribing to some topics) through ``gossamer experiment``: the reliability check
judges each message against its topic's subscribers and finds no violation; the topic-balance
metric counts the owners."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gossamer.cli.main import main

pytestmark = pytest.mark.spark

SPARK_ARGS = ["--master", "local[2]", "--conf", "spark.sql.shuffle.partitions=1"]


def table(spark: Any, out: Path, name: str) -> list[Any]:
    return spark.read.parquet(str(out / "analysis" / name)).collect()  # type: ignore[no-any-return]


def test_pubsub_experiment_has_no_violations(spark: Any, tmp_path: Path) -> None:
    toml, out = tmp_path / "topics.toml", tmp_path / "run"
    toml.write_text("""
name = "topics"
workload = "pubsub"
seeds = [5]

[options]
nodes = 8
topics = 3
subscribe_probability = 0.5
publishes_per_node = 3
rate = 20.0
settle = 3.0

[sweep]
mode = ["scribe", "gossip"]

[analysis]
layers = ["pubsub"]
fifo_layers = []
""")
    assert main(["experiment", str(toml), "--out", str(out), *SPARK_ARGS]) == 0

    checks = {r.check: r for r in table(spark, out, "checks")}
    assert checks["reliability"].status == "pass", checks["reliability"]
    assert checks["fifo"].status == "not applicable"
    assert sum(r.violations for r in checks.values()) == 0
    runs = {r.run: r for r in table(spark, out, "runs")}
    assert set(runs) == {"topics-modescribe-s5", "topics-modegossip-s5"}
    for run in runs.values():
        assert run.reliability == 1.0, run.run
        assert (run.topics, run.owned_expected) == (3, 3 / 8), run.run
        assert 0 <= run.owned_min <= run.owned_max <= 3, run.run
    assert runs["topics-modescribe-s5"].per_publish_scribe > 0
    assert runs["topics-modegossip-s5"].per_publish_gossip > 0
    # only subscribers were expected: fewer pairs than every node for every message
    assert all(run.expected < run.published * 8 for run in runs.values())
