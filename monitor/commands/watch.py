"""`monitor watch`: Follow a running job's logs live (TUI, or --headless)."""

from __future__ import annotations

import argparse

from monitor.commands.against import add_against_option, against_for
from monitor.commands.options import (
    add_bell_option, add_rules_options, add_run_options, add_stall_option, check_stall_option, headless_off_a_terminal,
    load_rules, pick_run_specs,
)


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "watch",
        help="Follow a running job's logs live (TUI, or --headless).",
        description=(
            "Follow a running job's logs live: files, folders (every log file in them, also those "
            "created later, e.g. torchrun --log-dir) or globs. --headless prints each new finding as "
            "it occurs and a summary with the root cause on Ctrl-C or SIGTERM. "
            "Exit 0: no failure found, 1: a failure, 2: usage or input error."
        ),
    )
    parser.add_argument("paths", nargs="+", metavar="PATH", help="log file, folder of logs, or glob (quote it)")
    parser.add_argument("--headless", action="store_true", help="no TUI: print findings as they occur")
    parser.add_argument(
        "--json", action="store_true",
        help="with --headless: one JSON object per new finding, and {\"diagnosis\": ...} at the end",
    )
    parser.add_argument("--poll", action="store_true", help="poll files instead of inotify events (NFS, Lustre)")
    add_bell_option(parser)
    add_stall_option(parser, "")
    add_run_options(parser)
    add_against_option(parser)
    add_rules_options(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from monitor.cli import UsageError
    from monitor.logs.sources import SourceError, parse_source

    if args.json and not args.headless:
        raise UsageError("--json needs --headless")
    check_stall_option(args)
    try:
        for path in args.paths:
            parse_source(path)
    except SourceError as exc:
        raise UsageError(str(exc)) from None
    catalogue = load_rules(args)
    # A folder of several runs: the newest run is followed (its files created later too), its new
    # lines told against the last run that ended well.
    paths, choices = pick_run_specs(args.paths, args)
    against, against_note = against_for(args.paths, args)
    headless_off_a_terminal(args)
    if not args.headless:
        from monitor.tui import launch_watch

        scope = "; ".join(choice.short for choice in choices)
        return launch_watch(paths, catalogue=catalogue, poll=args.poll, stall_after=args.stall_after, scope=scope,
                            bell=not args.no_bell, against=against)
    from monitor.session.headless import watch_headless
    from monitor.text import say

    for choice in choices:
        say(choice.note)
    if against_note is not None:
        say(against_note)
    return watch_headless(paths, catalogue, as_json=args.json, poll=args.poll, stall_after=args.stall_after,
                          against=against)
