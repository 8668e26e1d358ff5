"""gossamer: replicate data and messages among many peers, with a checked delivery guarantee.

The package is layered (see ARCHITECTURE.md): ``core`` <- ``runtimes`` / ``protocols`` <-
``services`` <- ``cli``; the ``pipeline`` reads traces only.
"""

__version__ = "0.1.0"
__all__ = ["__version__"]
