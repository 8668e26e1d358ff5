"""The seed-001 client's commands (section 6): one a line, parsed here once for every client
(the node's stdin, its command port, ``gossamer pubsub node --interactive``)."""

from __future__ import annotations

import dataclasses
from typing import Literal

from ...core.errors import GossamerError
from ...protocols.dissemination.scribe import MAX_TOPIC

__all__ = ["HELP", "MAX_LINE", "MAX_MESSAGE", "Command", "CommandError", "parse_command"]

MAX_MESSAGE = 16_384  # characters of one published message (well under the wire's frame limit)
MAX_LINE = MAX_TOPIC + MAX_MESSAGE + 64  # one command line


# -- commands --------------------------------------------------------------------------------


class CommandError(GossamerError):
    """A client command that cannot be carried out; the node answers with an error line."""


@dataclasses.dataclass(frozen=True, slots=True)
class Command:
    verb: Literal["subscribe", "unsubscribe", "publish", "status", "help", "exit"]
    topic: str | None = None
    message: str | None = None


HELP = ("commands: subscribe TOPIC | unsubscribe TOPIC | publish TOPIC MESSAGE | status | help "
        "| exit")


def _topic(word: str) -> str:
    if len(word) > MAX_TOPIC:
        raise CommandError(f"a topic has at most {MAX_TOPIC} characters")
    return word


def parse_command(line: str) -> Command | None:
    """One interactive command; None for a blank line; ``CommandError`` if it is not one.

    Words are separated by whitespace; a published message is the rest of the line after the
    topic and the whitespace that follows it, kept verbatim up to the line break (inner and
    trailing spaces included; to start a message with a space, publish through the command
    port, whose JSON carries any text)."""
    text = line.rstrip("\r\n").lstrip()
    if not text.strip():
        return None
    if len(text) > MAX_LINE:
        raise CommandError(f"line longer than {MAX_LINE} characters")
    parts = text.split(None, 2)  # the third part keeps its trailing spaces
    verb = parts[0].lower()
    if verb in ("subscribe", "unsubscribe", "sub", "unsub"):
        if len(parts) != 2:
            raise CommandError(f"usage: {verb} TOPIC")
        return Command("subscribe" if verb in ("subscribe", "sub") else "unsubscribe",
                       _topic(parts[1]))
    if verb in ("publish", "pub"):
        if len(parts) != 3:
            raise CommandError(f"usage: {verb} TOPIC MESSAGE")
        if len(parts[2]) > MAX_MESSAGE:
            raise CommandError(f"a message has at most {MAX_MESSAGE} characters")
        return Command("publish", _topic(parts[1]), parts[2])
    if verb in ("status", "help", "exit", "quit"):
        if len(parts) != 1:
            raise CommandError(f"{verb} takes no arguments")
        return Command("exit" if verb == "quit" else verb)  # type: ignore[arg-type]
    raise CommandError(f"unknown command {parts[0]!r}; {HELP}")
