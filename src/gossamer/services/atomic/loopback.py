"""Seed 004 over real processes: ``members`` ``gossamer atomic node`` processes on one
loopback IP multicast group, one of them sending, each member's trace written for the
pipeline. The loopback mode of the ``atomic`` workload of ``gossamer experiment``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import random
import time
from collections import Counter
from pathlib import Path

from ...core.errors import ConfigError
from .processes import ProcessGroup, loopback_group_address

__all__ = ["AtomicLoopbackOptions", "AtomicLoopbackResult", "run_atomic_loopback"]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class AtomicLoopbackOptions:
    """The first member sends ``messages``, at most ``inflight`` of them undecided at a
    time; every member drops ``drop_rate`` of the datagrams it receives (loopback itself loses
    none); ``timeout``: seconds each stage may take (the group forming, every decision, every
    delivery)."""

    members: int = 5
    messages: int = 40
    inflight: int = 4
    session_period: float = 0.5
    drop_rate: float = 0.0
    timeout: float = 120.0
    seed: int = 0
    run: str = "atomic-loopback"

    def __post_init__(self) -> None:
        if self.members < 2 or self.messages < 0 or self.inflight < 1:
            raise ConfigError(f"need members >= 2, messages >= 0 and inflight >= 1, got {self}")
        if not 0.0 <= self.drop_rate < 1.0:
            raise ConfigError(f"drop_rate must be in [0, 1), got {self.drop_rate}")
        if self.session_period <= 0 or self.timeout <= 0:
            raise ConfigError(f"session_period and timeout must be > 0, got {self}")


@dataclasses.dataclass(frozen=True, slots=True)
class AtomicLoopbackResult:
    """What the processes printed: the sender's decisions, every member's deliveries
    (``missing``: pairs of a member and a committed message it had not delivered when the run
    ended, counting members outside that message's snapshot (booted while it was sent) too:
    the pipeline's atomicity check judges by snapshot; ``twice``: deliveries of a message a
    member had delivered already)."""

    members: int
    published: int
    committed: int
    aborted: int
    deliveries: int
    missing: int
    twice: int
    errors: int
    commits_per_s: float
    wall_seconds: float


async def run_atomic_loopback(options: AtomicLoopbackOptions, *,
                              out_dir: str | Path) -> AtomicLoopbackResult:
    o = options
    group = loopback_group_address(random.Random(f"{o.seed}/{o.run}"))
    net = ProcessGroup(Path(out_dir), group, o.session_period, run=o.run,
                       node_args=("--drop-rate", str(o.drop_rate)))
    labels = [f"m{i:02d}" for i in range(o.members)]
    started = time.monotonic()
    try:
        members = await asyncio.gather(*(net.spawn(label) for label in labels))
        names = {m.name for m in members if m.name is not None}
        await net.until(lambda: all(m.members >= names - {m.name} for m in members),
                        "every member sees the whole group", o.timeout)
        sender = members[0]
        began = time.monotonic()
        for i in range(o.messages):
            await net.until(functools.partial(_has_room, sender.decided, i, o.inflight),
                            f"room for message {i}", o.timeout)
            sender.write(f'send {{"i":{i}}}')
        await net.until(lambda: len(sender.decided) == o.messages, "every decision", o.timeout)
        decided_in = time.monotonic() - began
        committed = {mid for mid, ok in sender.decided.items() if ok}
        # a member still missing some by the timeout is counted below (``missing``), and
        # the pipeline judges the trace
        with contextlib.suppress(TimeoutError):
            await net.until(lambda: all(set(m.delivered) >= committed for m in members),
                            "every member delivers every committed message", o.timeout)
    finally:
        await net.stop()
    deliveries = sum(len(m.delivered) for m in members)
    return AtomicLoopbackResult(
        members=o.members, published=o.messages, committed=len(committed),
        aborted=o.messages - len(committed), deliveries=deliveries,
        missing=sum(len(committed - set(m.delivered)) for m in members),
        twice=sum(n - 1 for m in members for n in Counter(m.delivered).values() if n > 1),
        errors=sum(len(m.errors) for m in net.lives),
        commits_per_s=len(committed) / decided_in if decided_in > 0 else 0.0,
        wall_seconds=time.monotonic() - started)


def _has_room(decided: dict[str, bool], sent: int, inflight: int) -> bool:
    return sent - len(decided) < inflight
