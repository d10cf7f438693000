"""Options several commands share, declared once: the rule directories, and the stall threshold.

``add_rules_options(parser)`` declares ``--rules DIR`` (repeatable) and ``--no-user-rules``;
``load_rules(args, extra=())`` loads the catalogue they name or raises ``UsageError`` with the
rule loader's one line (``file:line: rule <id>: message``): every command fails the same way on a
rule file with a typo, ``monitor run`` included, before anything is launched.
"""

from __future__ import annotations

import argparse


def add_rules_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rules", action="append", default=[], metavar="DIR",
                        help="add a directory of rule files (repeatable)")
    parser.add_argument("--no-user-rules", action="store_true", help="ignore ~/.config/monitor/rules")


def load_rules(args: argparse.Namespace, extra: tuple[str, ...] = ()):
    """The catalogue: the shipped rules, the user's (unless ``--no-user-rules``), ``--rules``
    directories and ``extra``. Raises ``UsageError`` naming the file and line of a bad rule."""
    from monitor.cli import UsageError
    from monitor.diagnosis.catalogue import RuleError, load_catalogue

    try:
        return load_catalogue([*args.rules, *extra], include_user=not args.no_user_rules)
    except RuleError as exc:
        raise UsageError(str(exc)) from None


def add_stall_option(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("--stall-after", type=float, default=None, metavar="SECONDS",
                        help=f"{what} report a possible hang after this much silence "
                             "(default: max(60, 10x the usual gap))")


def check_stall_option(args: argparse.Namespace) -> None:
    from monitor.cli import UsageError

    if args.stall_after is not None and args.stall_after <= 0:
        raise UsageError("--stall-after must be a positive number of seconds")
