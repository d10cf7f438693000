"""`monitor rules`: List or test the rule catalogue."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("rules", help="List or test the rule catalogue.", description="List or test the rule catalogue.")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    raise NotImplementedError("monitor rules is not built yet")
