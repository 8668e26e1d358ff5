"""A NetHost in its own OS process, for the shutdown test: prints PORT when ready, GOT per note.

Usage: python net_sigterm_host.py RUN_DIR tcp|ws. Traces go to Parquet under RUN_DIR; SIGTERM
or SIGINT stops it cleanly (exit code 0).
"""

from __future__ import annotations

import asyncio
import sys

from gossamer.core import Codec, Env, Message, NodeId, message
from gossamer.core.traceio import ParquetSink, trace_path
from gossamer.runtimes.net import NetHost, NetNode, run_until_signalled

CODEC = Codec(max_frame=4096)
RUN = "sigterm"


@message("sigtest.note", codec=CODEC)
class Note(Message):
    text: str


class Printer:
    """Prints every note it gets; "a" greets "b" when it starts."""

    def __init__(self, env: Env) -> None:
        self.env = env

    def start(self) -> None:
        if self.env.node == "a":
            self.env.send("b", Note("hello from a"))

    def on_message(self, src: NodeId, msg: Message) -> None:
        assert isinstance(msg, Note)
        print(f"GOT {self.env.node} {src} {msg.text}", flush=True)

    def stop(self) -> None:
        self.env.trace("stopped", layer="sigtest")


def main(argv: list[str]) -> int:
    run_dir, transport = argv[1], argv[2]
    host = NetHost(
        NetNode(node_id=node, factory=Printer, transport=transport, codec=CODEC, run=RUN,
                verify_ids=False,  # the test speaks as "tester", which has no address
                trace=ParquetSink(trace_path(run_dir, RUN, node)))
        for node in ("a", "b")
    )

    def ready(host: NetHost) -> None:
        print(f"PORT {host.nodes['b'].address[1]}", flush=True)

    return asyncio.run(run_until_signalled(host, ready=ready))


if __name__ == "__main__":
    sys.exit(main(sys.argv))
