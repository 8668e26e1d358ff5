"""One atomic-multicast member as a runtime sees it: SRM, its group state and the atomic layer
composed on one env, each message handed to the layer it belongs to."""

from __future__ import annotations

import dataclasses

from ....core.env import Env
from ....core.ids import NodeId
from ....core.messages import Codec, Message
from ...dissemination.srm import CODEC as SRM_CODEC
from ...dissemination.srm import Srm, SrmConfig, SrmTimerConfig
from ...membership.srm_group import CODEC as GROUP_CODEC
from ...membership.srm_group import GroupConfig, SrmGroup
from .commit import AtomicConfig, AtomicMember
from .records import CODEC as ATOMIC_CODEC

__all__ = ["CODEC", "AtomicProcess", "AtomicProcessConfig"]

CODEC = Codec.union(SRM_CODEC, GROUP_CODEC, ATOMIC_CODEC)
"""Every message an atomic member sends or hears."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class AtomicProcessConfig:
    group: str
    session_period: float = 1.0
    min_distance: float = 0.002
    timers: SrmTimerConfig = dataclasses.field(default_factory=SrmTimerConfig)
    membership: GroupConfig = dataclasses.field(default_factory=GroupConfig)
    atomic: AtomicConfig = dataclasses.field(default_factory=AtomicConfig)


class AtomicProcess:
    """A process for ``Simulation.add_node`` or a ``MulticastEnv``."""

    def __init__(self, env: Env, config: AtomicProcessConfig) -> None:
        self.env = env
        self.srm = Srm(env, SrmConfig(group=config.group, session_period=config.session_period,
                                      min_distance=config.min_distance, timers=config.timers))
        self.group = SrmGroup(env, self.srm, config.membership)
        self.atomic = AtomicMember(env, self.srm, self.group, config.atomic)

    def start(self) -> None:
        self.group.start()  # JOIN first: what we reload may multicast outcomes at once
        self.srm.start()
        self.atomic.start()

    def stop(self) -> None:
        """Leave the group (LEAVE and a last session message), then go quiet."""
        self.group.stop()
        self.srm.stop()
        self.atomic.stop()

    def on_message(self, src: NodeId, msg: Message) -> None:
        if not (self.srm.on_message(src, msg) or self.group.on_message(src, msg)
                or self.atomic.on_message(src, msg)):
            self.env.trace("drop", layer="atomic", peer=src, reason="unknown_type")
