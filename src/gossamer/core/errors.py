"""Exception types of gossamer.

Peer mistakes (``ProtocolError``) and local bugs or misuse (``LocalError``) are separate trees, so
a node can drop what a peer sent without ever hiding a bug of its own.
"""

from __future__ import annotations

__all__ = [
    "ConfigError",
    "CorruptMessage",
    "DecodeError",
    "FrameTooLarge",
    "GossamerError",
    "InvalidMessage",
    "LocalError",
    "OperationError",
    "ProtocolError",
    "StateError",
    "UnknownMessageType",
    "check_fractions",
]


class GossamerError(Exception):
    """Base of every error gossamer raises on purpose."""


class ProtocolError(GossamerError):
    """A peer sent something we refuse. The node's state is unchanged; drop and trace it."""

    #: short machine-readable reason written to the trace's ``info``
    reason: str = "protocol"


class DecodeError(ProtocolError):
    """Bytes that are not a well-formed message (not JSON, not an object, wrong envelope)."""

    reason = "decode"


class FrameTooLarge(ProtocolError):
    """A frame larger than the configured maximum."""

    reason = "too_large"


class UnknownMessageType(ProtocolError):
    """A message whose type no codec knows."""

    reason = "unknown_type"


class InvalidMessage(ProtocolError):
    """A message of a known type with missing, extra or wrongly typed fields."""

    reason = "invalid"


class CorruptMessage(InvalidMessage):
    """A well-formed message whose checksum does not match its content."""

    reason = "crc"


class LocalError(GossamerError):
    """Our own side is wrong: misuse of an API, a bad configuration, or a broken invariant."""


class ConfigError(LocalError, ValueError):
    """A bad argument or configuration value, reported at once."""


def check_fractions(owner: object, *names: str, below_one: tuple[str, ...] = ("loss",)) -> None:
    """``ConfigError`` unless each named field of ``owner`` (an options object) is a fraction:
    in [0, 1], or [0, 1) for those in ``below_one`` (at loss 1 nothing would ever arrive)."""
    for name in names:
        value = getattr(owner, name)
        if name in below_one and not 0 <= value < 1:
            raise ConfigError(f"{name} must be in [0, 1) (at 1 nothing arrives), got {value!r}")
        if not 0 <= value <= 1:
            raise ConfigError(f"{name} must be in [0, 1], got {value!r}")


class StateError(LocalError):
    """An operation that the current state does not allow (names state and operation)."""


class OperationError(GossamerError):
    """A client-visible failure of an operation.

    ``definite`` says whether the operation certainly did not happen (a rejection) or might
    still have happened (a timeout), in the manner of Maelstrom's ``Error.is_definite``.
    """

    def __init__(self, message: str, *, definite: bool) -> None:
        super().__init__(message)
        self.definite = definite
