"""SRM: Scalable Reliable Multicast (Floyd et al. 1997), sans-I/O."""

from .srm import LAYER, Srm, SrmConfig
from .timers import AdaptiveTimers, SrmTimerConfig
from .wire import CODEC, SrmData, SrmRepair, SrmRequest, SrmSession

__all__ = ["CODEC", "LAYER", "AdaptiveTimers", "Srm", "SrmConfig", "SrmData", "SrmRepair",
           "SrmRequest", "SrmSession", "SrmTimerConfig"]
