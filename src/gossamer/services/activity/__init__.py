"""activity: the seed-003 activity network as users run it: the TCP server, the asyncio client,
the CLI and the simulated workload of ``gossamer experiment``."""

from .client import ActivityClient
from .server import ActivityTcpServer

__all__ = ["ActivityClient", "ActivityTcpServer"]
