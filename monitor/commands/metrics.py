"""`monitor metrics`: Print GPU and host metrics samples."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("metrics", help="Print GPU and host metrics samples.", description="Print GPU and host metrics samples.")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    raise NotImplementedError("monitor metrics is not built yet")
