"""Acceptance (issue 21, seed 004): ``--members`` (10) ``gossamer atomic node`` processes on a
loopback IP multicast group; one sends ``--messages`` (1,000) with ``--inflight`` (10)
undecided at a time; after ``--kill-after`` decisions one other member is killed with SIGKILL
the moment it prints that a YES of its own has left (``--print-votes``: its write of the
message is on disk; with ``--kill-on delivered`` the moment it prints a delivery), and
restarted at once on its data dir. When every message is decided and
every member delivered what it must, each process leaves cleanly and ``gossamer analyze`` judges
the trace (the killed life's segments recovered): its atomicity check says every confirmed
message was delivered by every member of its snapshot and by no one else, exactly once, and no
aborted message anywhere.

The script checks the processes' own records too, each member's delivery journal
(``DATA_DIR/delivered.jsonl``, written before a delivery is printed or acknowledged): no member
delivered a message twice (the killed member's two lives counted together), nothing aborted or
undecided was delivered, every member that was never killed delivered every committed message,
and the killed member delivered every committed message it had voted YES for, in either life
(the one it was killed on included: it learned that outcome only after its restart); and every
line a member printed is in its journal.

    .venv/bin/python scripts/atomic_kill_acceptance.py [--members 10] [--messages 1000]
        [--inflight 10] [--kill-after 300] [--kill-on yes|delivered] [--session-period 0.5]
        [--out DIR] [--no-analyze]

Exit code 0 when every check holds (and the analysis exits 0), 1 otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from gossamer.services.atomic.processes import (
    MemberProcess,
    ProcessGroup,
    loopback_group_address,
)

RUN = "atomic-kill"


async def scenario(args: argparse.Namespace, out: Path) -> list[str]:
    """Run the processes; returns what went wrong, judged from their output."""
    net = ProcessGroup(out, loopback_group_address(), args.session_period, run=RUN)
    labels = [f"m{i:02d}" for i in range(args.members)]
    try:
        members = {label: await net.spawn(label) for label in labels}
        names = {m.name for m in members.values() if m.name is not None}
        await net.until(lambda: all(m.members >= names - {m.name} for m in members.values()),
                        "every member sees the whole group")
        sender, victim_label = members[labels[0]], labels[len(labels) // 2]
        first_life = members[victim_label]
        killed_on: list[str] = []

        def kill_at_the_moment(member: MemberProcess, line: str) -> None:
            moment = (line.startswith("voted ") and line.endswith(" yes")
                      if args.kill_on == "yes" else line.startswith("delivered "))
            if moment and not killed_on and len(sender.decided) >= args.kill_after:
                member.proc.send_signal(signal.SIGKILL)  # right after its YES left
                killed_on.append(line.split()[1])

        first_life.on_line = kill_at_the_moment

        async def restart_once_killed() -> None:
            if killed_on and members[victim_label] is first_life:
                await first_life.proc.wait()
                print(f"killed {victim_label} ({first_life.name}) right after it printed "
                      f"{args.kill_on!r} for {killed_on[0]}, after {len(sender.decided)} "
                      f"decisions; restarting it")
                members[victim_label] = await net.spawn(victim_label)

        def has_room(sent: int) -> bool:
            return sent - len(sender.decided) < int(args.inflight)

        began = time.monotonic()
        for i in range(args.messages):
            await net.until(functools.partial(has_room, i), f"a decision (message {i})")
            sender.write(f'send {{"i":{i}}}')
            await restart_once_killed()
        await net.until(lambda: len(sender.decided) == args.messages, "every decision")
        await restart_once_killed()
        elapsed = time.monotonic() - began
        if not killed_on:
            return [f"{victim_label} was never killed (no YES after {args.kill_after} "
                    f"decisions)"]
        committed = {mid for mid, ok in sender.decided.items() if ok}
        aborted = set(sender.decided) - committed
        victim_yes = set(first_life.voted_yes) | set(members[victim_label].voted_yes)
        others = [m for label, m in members.items() if label != victim_label]
        await net.until(lambda: all(set(m.delivered) >= committed for m in others),
                        "every member never killed delivers every committed message")
        owed = committed & victim_yes

        def victim_delivered() -> set[str]:
            return set(net.journal(victim_label))

        await net.until(lambda: victim_delivered() >= owed,
                        "the killed member delivers every committed message it voted YES for",
                        on_timeout=lambda: f"missing {sorted(owed - victim_delivered())}")
        print(f"{args.messages} messages decided in {elapsed:.1f} s "
              f"({args.messages / elapsed:.1f}/s): {len(committed)} committed, "
              f"{len(aborted)} aborted")
        problems: list[str] = []
        for label in members:
            delivered = net.journal(label)
            printed = [d for life in net.lives if life.label == label for d in life.delivered]
            if set(printed) - set(delivered):
                problems.append(f"{label} printed deliveries its journal lacks: "
                                f"{sorted(set(printed) - set(delivered))[:5]}")
            if len(printed) < len(delivered):
                print(f"({label}: {len(delivered) - len(printed)} journaled and not printed, "
                      f"the kill came between)")
            if len(set(printed)) < len(printed):
                problems.append(f"{label} printed a delivery twice")
            twice = [mid for mid, n in Counter(delivered).items() if n > 1]
            if twice:
                problems.append(f"{label} delivered {len(twice)} messages twice: {twice[:5]}")
            if set(delivered) - committed:
                problems.append(f"{label} delivered what did not commit: "
                                f"{sorted(set(delivered) - committed)[:5]}")
        for life in net.lives:
            problems += [f"{life.label}: {error}" for error in life.errors]
        if killed_on[0] in first_life.delivered:
            print(f"(the outcome of {killed_on[0]} reached {victim_label} before the kill)")
        recovered = [mid for mid in members[victim_label].delivered
                     if mid in first_life.voted_yes]
        print(f"{victim_label}: {len(first_life.delivered)} delivered before the kill, "
              f"{len(members[victim_label].delivered)} after, {len(recovered)} of them voted "
              f"YES before the kill ({killed_on[0]} among them: "
              f"{killed_on[0] in recovered}); never twice: "
              f"{not any('twice' in p for p in problems)}")
        return problems
    finally:
        await net.stop()


def analyze(out: Path) -> int:
    """``gossamer analyze`` on the trace, in a process of its own, as a user runs it."""
    result = subprocess.run(
        [sys.executable, "-m", "gossamer.cli.main", "analyze", str(out), "--out",
         str(out / "analysis"), "--master", "local[2]", "--conf",
         "spark.sql.shuffle.partitions=2"], capture_output=True, text=True, timeout=1800)
    print(result.stdout[-12000:])
    if result.returncode != 0:
        print(result.stderr[-3000:])
    return result.returncode


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--members", type=int, default=10)
    parser.add_argument("--messages", type=int, default=1000)
    parser.add_argument("--inflight", type=int, default=10)
    parser.add_argument("--kill-after", type=int, default=300,
                        help="decisions before the kill (the next YES of the victim)")
    parser.add_argument("--kill-on", choices=["yes", "delivered"], default="yes",
                        help="the line of the victim's on which it is killed: a YES of its "
                             "own left, or it printed a delivery (the rest of that commit's "
                             "deliveries then in the middle of their journaling)")
    parser.add_argument("--session-period", type=float, default=0.5)
    parser.add_argument("--out", type=Path, default=None, help="default: a temp dir, kept")
    parser.add_argument("--no-analyze", action="store_true")
    args = parser.parse_args(argv)
    if args.members < 3 or not 0 < args.kill_after < args.messages:
        parser.error("at least 3 members, and 0 < --kill-after < --messages")
    out = args.out if args.out is not None else Path(tempfile.mkdtemp(prefix="atomic-kill-"))
    print(f"out: {out}; load {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    try:
        problems = asyncio.run(scenario(args, out))
    except TimeoutError as exc:
        problems = [str(exc)]
    for problem in problems:
        print("FAILED:", problem)
    analysis = 0 if args.no_analyze else analyze(out)
    print(f"analysis exit code {analysis}; load "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 1 if problems or analysis else 0


if __name__ == "__main__":
    sys.exit(main())
