"""``gossamer pubsub node --backups N``: the options that turn replicated topic owners on, the
stack they build on a fake env (a single-node ring orders and acknowledges a publish only once
its group decided it; group messages reach the groups), the analysis settings they store and
the command line. The real-process run is in tests/test_pubsub_kill_analyze.py."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest

from gossamer.core.errors import ConfigError
from gossamer.protocols.dissemination.scribe import PublishResult
from gossamer.protocols.membership.chord import ChordConfig
from gossamer.protocols.ordering.paxos.groups import GroupMessage
from gossamer.services.pubsub.cli import add_pubsub_parser
from gossamer.services.pubsub.net import NodeOptions, analysis_settings
from gossamer.services.pubsub.owned import (
    OwnersOptions,
    build_owned,
    owned_codec,
    owners_status,
)
from gossamer.testing import FakeEnv

RING = ("127.0.0.1:4000", "127.0.0.1:4001", "127.0.0.1:4002")


def test_owners_options_refuse_what_cannot_run() -> None:
    assert OwnersOptions(ring=RING).paxos().heartbeat_interval == 1.0  # the seed's timers
    assert OwnersOptions(ring=RING).paxos().suspect_timeout == 2.0
    bad: dict[str, Any]
    for bad in (dict(ring=RING, backups=0), dict(ring=()),
                dict(ring=(RING[0], RING[0])), dict(ring=("n1",)),
                dict(ring=RING, heartbeat=2.0, suspect=1.0), dict(ring=RING, heartbeat=0.0)):
        with pytest.raises(ConfigError):
            OwnersOptions(**bad)
    OwnersOptions(ring=RING).check_member(RING[1])
    with pytest.raises(ConfigError, match="is not in"):
        OwnersOptions(ring=RING).check_member("127.0.0.1:4999")


def test_node_options_need_scribe_a_fixed_port_and_a_data_dir() -> None:
    owners = OwnersOptions(ring=RING)
    data = Path("unused")  # options only: nothing is created
    NodeOptions(mode="scribe", port=4000, owners=owners, data_dir=data)
    with pytest.raises(ConfigError, match="--mode scribe"):
        NodeOptions(mode="gossip", port=4000, owners=owners, data_dir=data)
    with pytest.raises(ConfigError, match="fixed --port"):
        NodeOptions(mode="scribe", port=0, owners=owners, data_dir=data)
    with pytest.raises(ConfigError, match="--data-dir"):
        NodeOptions(mode="scribe", port=4000, owners=owners)


def test_the_stored_settings_add_total_order_per_topic() -> None:
    plain = analysis_settings("scribe")["checks"]
    owned = analysis_settings("scribe", owned=True)["checks"]
    assert "total_order_layers" not in plain
    assert owned == {**plain, "total_order_layers": ["pubsub", "scribe"],
                     "total_order_per_key": True}


def test_a_publish_is_acknowledged_once_its_group_decided_it() -> None:
    me = RING[0]
    env = FakeEnv(me)
    pubsub, process = build_owned(env, OwnersOptions(ring=(me,), heartbeat=0.2, suspect=0.5),
                                  contacts=(), chord_config=ChordConfig())
    process.start()
    env.advance(1.0)  # the ring of one and its group's leader
    pubsub.subscribe("news")
    env.advance(1.0)
    results: list[PublishResult] = []
    mid = pubsub.publish("news", "hello", on_done=results.append)
    env.advance(1.0)
    assert [(r.msg, r.accepted) for r in results] == [(mid, True)]
    [ordered] = env.traced("ordered", layer="paxos")
    assert ordered.msg == mid and ordered.key == "news" and ordered.seq == 1
    decided = [row for row in env.traced("decide", layer="paxos")]
    assert decided, "acknowledged without a decision"
    [delivered] = env.traced("deliver", layer="pubsub")
    assert delivered.msg == mid
    status = owners_status(process.owners, ["news"])
    assert status["owners"] == {"news": me}
    assert status["groups"][me]["leader"] == me and status["groups"][me]["decided"] >= 1
    # a group's message goes to the groups (an unknown group is dropped there, traced)
    process.on_message(RING[1], GroupMessage(group="nobody", body={"type": "paxos.nack"}))
    assert any("unknown_group" in str(row.info) for row in env.traced("drop", layer="paxos"))
    assert owned_codec().decode(owned_codec().encode(
        GroupMessage(group="g", body={"type": "x"}))) == GroupMessage(group="g",
                                                                      body={"type": "x"})


def _parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_pubsub_parser(parser.add_subparsers(dest="verb"))
    return parser.parse_args(["pubsub", "node", *argv])


def test_the_command_line_defaults_to_unreplicated_owners() -> None:
    args = _parse("--mode", "scribe")
    assert args.backups == 0 and args.ring is None
    assert (args.paxos_heartbeat, args.paxos_suspect) == (1.0, 2.0)
    args = _parse("--mode", "scribe", "--port", "4000", "--backups", "2", "--ring", RING[0],
                  "--ring", RING[1], "--paxos-suspect", "3")
    assert args.backups == 2 and args.ring == list(RING[:2]) and args.paxos_suspect == 3.0


SPARES = (("127.0.0.1:4000", ("127.0.0.1:5000", "127.0.0.1:5001")),
          ("127.0.0.1:4001", ("127.0.0.1:5002", "127.0.0.1:5003")))


def test_the_seeds_placement_on_the_command_line_and_what_it_refuses() -> None:
    args = _parse("--mode", "scribe", "--port", "4000",
                  "--spares", "127.0.0.1:4000=127.0.0.1:5000,127.0.0.1:5001",
                  "--spares", "127.0.0.1:4001=127.0.0.1:5002,127.0.0.1:5003")
    assert tuple(args.spares) == SPARES
    owners = OwnersOptions(spares=SPARES)
    assert owners.placement() == {a: (a, *s) for a, s in SPARES}
    assert owners.is_spare("127.0.0.1:5002") and not owners.is_spare("127.0.0.1:4001")
    owners.check_member("127.0.0.1:5003")
    with pytest.raises(ConfigError, match="not in"):
        owners.check_member("127.0.0.1:4002")
    for bad in (dict(spares=SPARES, ring=RING),  # both placements
                dict(spares=((RING[0], (RING[1],)), (RING[2], (RING[1],)))),  # in two groups
                dict(spares=(("n1", ("n2",)),)),  # not HOST:PORT
                dict(spares=SPARES, grown=("127.0.0.1:5000",)),  # a grown spare
                dict(ring=RING, grown=(RING[0],))):  # grown without the seed's placement
        with pytest.raises(ConfigError):
            OwnersOptions(**bad)  # type: ignore[arg-type]
    grown = _parse("--mode", "scribe", "--port", "4000", "--grown", "127.0.0.1:4001",
                   "--spares", "127.0.0.1:4000=127.0.0.1:5000,127.0.0.1:5001")
    assert grown.grown == ["127.0.0.1:4001"]
    assert OwnersOptions(spares=SPARES, grown=("127.0.0.1:4001",)).grown == ("127.0.0.1:4001",)
    for text in ("127.0.0.1:4000", "127.0.0.1:4000=", "nohost=127.0.0.1:5000"):
        with pytest.raises(SystemExit):
            _parse("--mode", "scribe", "--spares", text)
