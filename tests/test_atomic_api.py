"""``AtomicGroup`` on a loopback multicast group, two members in one event loop."""

from __future__ import annotations

import asyncio
import random
import socket
from pathlib import Path

import pytest

from gossamer.core.env import DatagramTooLarge
from gossamer.core.errors import ConfigError, StateError
from gossamer.services.atomic import AtomicGroup, Delivered, Sent


def _group() -> str:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"239.255.{random.randrange(1, 255)}.{random.randrange(1, 255)}:{port}"


async def _until(condition: object, timeout: float = 20.0) -> None:
    async with asyncio.timeout(timeout):
        while not condition():  # type: ignore[operator]
            await asyncio.sleep(0.01)


def test_join_send_deliver_members_leave(tmp_path: Path) -> None:
    async def main() -> None:
        address = _group()
        a = AtomicGroup(address, data_dir=tmp_path / "a", session_period=0.1)
        b = AtomicGroup(address, data_dir=tmp_path / "b", session_period=0.1)
        await a.join()
        await b.join()
        try:
            await _until(lambda: len(a.members()) == 2 and len(b.members()) == 2)
            sent = await a.send({"text": "hi"}, timeout=20)
            assert sent == Sent(sent.mid, True)
            got = await asyncio.wait_for(anext(aiter(b)), 20)
            assert got == Delivered(sent.mid, a.name, {"text": "hi"}, 1)
            own = await asyncio.wait_for(anext(aiter(a)), 20)
            assert own.mid == sent.mid
            with pytest.raises(DatagramTooLarge):
                await a.send("x" * 10_000)
            for bad in ("x", 0, -1, True):
                with pytest.raises(ConfigError, match="acknowledge a Delivered"):
                    a.acknowledge(bad)  # type: ignore[arg-type]
            second = await a.send({"text": "again"}, timeout=20)
            await _until(lambda: b._ready)  # delivered at b, not read yet
        finally:
            await b.leave()
        # what was delivered stays readable after leave(), and then ``async for`` ends
        async def read_all(member: AtomicGroup) -> list[str]:
            return [m.mid async for m in member]

        assert await asyncio.wait_for(read_all(b), 20) == [second.mid]
        await _until(lambda: a.members() == (a.name,))
        assert (await asyncio.wait_for(anext(aiter(a)), 20)).mid == second.mid  # its own
        reader = asyncio.ensure_future(anext(aiter(a), None))  # waiting when a leaves
        await asyncio.sleep(0)
        await a.leave()
        assert await asyncio.wait_for(reader, 20) is None
        with pytest.raises(StateError):
            a.members()
        with pytest.raises(StateError, match="joins once"):
            await a.join()

    asyncio.run(main())


def test_a_delivery_not_acknowledged_is_handed_over_again_after_a_restart(
        tmp_path: Path) -> None:
    """Left (as a kill would) before asking for the next message: the restarted member hands
    the first over again, same position; once acknowledged, never again."""
    async def main() -> None:
        address = _group()
        a = AtomicGroup(address, data_dir=tmp_path / "a", session_period=0.1)
        await a.join()

        async def life() -> AtomicGroup:
            b = AtomicGroup(address, data_dir=tmp_path / "b", session_period=0.1)
            await b.join()
            await _until(lambda: b.name in a.members() and len(b.members()) == 2)
            return b

        try:
            b = await life()
            first = await a.send("one", timeout=20)
            got = await asyncio.wait_for(anext(aiter(b)), 20)
            assert got == Delivered(first.mid, a.name, "one", 1)
            await b.leave()  # not acknowledged: nothing asked for the next one
            b = await life()
            again = await asyncio.wait_for(anext(aiter(b)), 20)
            assert again == got
            b.acknowledge(again)
            with pytest.raises(ValueError, match="not delivered yet"):
                b.acknowledge(2)
            await b.leave()
            b = await life()
            second = await a.send("two", timeout=20)
            got = await asyncio.wait_for(anext(aiter(b)), 20)
            assert got == Delivered(second.mid, a.name, "two", 2)
            await b.leave()
        finally:
            await a.leave()

    asyncio.run(main())


def test_a_bad_group_address_is_refused() -> None:
    with pytest.raises(ConfigError):
        AtomicGroup("10.1.2.3:5000")


def test_a_node_trace_is_judged_by_atomicity_not_by_per_node_delivery() -> None:
    """An aborted message is published and delivered by no one: a reliability or FIFO check of
    any layer would call that a loss (``gossamer analyze`` of a kill -9 run exited 1 so)."""
    from gossamer.pipeline.checks import CheckConfig
    from gossamer.services.atomic.cli import ANALYSIS_SETTINGS

    checks = CheckConfig.from_mapping(ANALYSIS_SETTINGS["checks"], where="atomic node")
    assert checks.layers == () and checks.fifo_layers == ()
