"""appsync: seed 002, APSYN/01 application state sync (wire format, sync server, peer core).

``wire`` speaks the seed's grammar exactly (docs/appsync-wire.md); ``server`` is the sans-I/O
sync server (CTRL) and ``peer`` the peer core, both services of the connection contract, so they
run unchanged in the simulator and over WebSocket (``gossamer.services.appsync``).
"""

from .wire import (
    CODES,
    PROTOCOL,
    Action,
    AppSyncCodec,
    AppSyncMessage,
    AppSyncProtocolError,
    BadRequest,
    Create,
    Delete,
    Header,
    Init,
    Join,
    Mode,
    ObjectInfo,
    Rqst,
    Scope,
    SessionConfig,
    Status,
    Sync,
    Update,
    VersionNotSupported,
    next_round,
)

__all__ = [
    "CODES",
    "PROTOCOL",
    "Action",
    "AppSyncCodec",
    "AppSyncMessage",
    "AppSyncProtocolError",
    "BadRequest",
    "Create",
    "Delete",
    "Header",
    "Init",
    "Join",
    "Mode",
    "ObjectInfo",
    "Rqst",
    "Scope",
    "SessionConfig",
    "Status",
    "Sync",
    "Update",
    "VersionNotSupported",
    "next_round",
]
