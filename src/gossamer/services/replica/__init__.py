"""replica: the services of seed 000 (gossip over WebSockets with total order per object).

``HubServer`` runs the seed's hub on real WebSockets (with its durable snapshot keeper) and
serves the browser client's files; ``Replica`` is the asyncio Python client.
"""

from .client import JoinRefused, Replica
from .hub_server import DEFAULT_MAX_FRAME, HubServer, HubState

__all__ = ["DEFAULT_MAX_FRAME", "HubServer", "HubState", "JoinRefused", "Replica"]
