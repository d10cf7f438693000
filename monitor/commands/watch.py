"""`monitor watch`: Follow a running job's logs live (TUI, or --headless)."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("watch", help="Follow a running job's logs live (TUI, or --headless).", description="Follow a running job's logs live (TUI, or --headless).")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    raise NotImplementedError("monitor watch is not built yet")
