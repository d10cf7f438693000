"""The `monitor` command line: one sub-command per module in monitor/commands/.

Each command module is imported here only to declare its arguments, so it must stay light at
import time: heavy imports (textual, torch, pynvml) happen inside its ``run(args)``.
Exit codes: 0 nothing wrong, 1 the job failed (or a check failed), 2 usage or input errors.
"""

from __future__ import annotations

import argparse

from monitor import __version__
from monitor.commands import check_ckpt, check_collectives, demo, diagnose, metrics, rules, run, stacks, watch

COMMANDS = (diagnose, watch, run, stacks, metrics, rules, check_ckpt, check_collectives, demo)


class UsageError(Exception):
    """A problem with what the user asked for: printed as one line, exit code 2."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="monitor",
        description="Watch multi-GPU training jobs live and explain why they failed.",
    )
    parser.add_argument("--version", action="version", version=f"monitor {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in COMMANDS:
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except UsageError as exc:
        from monitor.text import say

        say(str(exc))
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (`monitor rules list | head`): stop quietly, as cat does. stdout
        # points at /dev/null so that the interpreter's own flush at exit does not fail again.
        import os
        import sys

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
