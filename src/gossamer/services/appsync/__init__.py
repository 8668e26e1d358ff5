"""appsync (seed 002): the APSYN sync server and peers as runnable services: in the simulator
(``sim``), over WebSocket (``net``: server and asyncio client) and from the command line."""
