"""argparse ``type=`` converters shared by the command-line verbs: each turns the option's text
into a value or raises ``argparse.ArgumentTypeError`` saying what was wrong."""

from __future__ import annotations

import argparse
from pathlib import Path

__all__ = ["directory", "host_port", "non_negative_int", "port", "positive_int", "probability",
           "seconds"]


def directory(text: str) -> Path:
    """A directory for a node's files: made if missing (with its parents); a file in its way,
    or one that cannot be made, is an error."""
    path = Path(text)
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text}: not a directory")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise argparse.ArgumentTypeError(f"{text}: {exc.strerror or exc}") from None
    return path


def port(text: str) -> int:
    """A TCP port, 0 meaning "pick a free one"."""
    value = int(text)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be in 0..65535, got {value}")
    return value


def host_port(text: str) -> tuple[str, int]:
    """``HOST:PORT`` with a port in 1..65535."""
    host, sep, port_text = text.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port_text.isdigit() or not 0 < int(port_text) <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not HOST:PORT")
    return host, int(port_text)


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def probability(text: str) -> float:
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be in [0, 1], got {value}")
    return value


def seconds(text: str) -> float:
    """A duration: finite-or-infinite but not negative and not NaN."""
    value = float(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value
