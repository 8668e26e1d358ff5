"""runtimes: the two drivers of sans-I/O protocols, ``sim`` (virtual time) and ``net`` (asyncio).

They depend on ``gossamer.core`` only.
"""
