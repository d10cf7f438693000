"""`monitor demo`: Replay a bundled real multi-rank failure through the live monitor."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("demo", help="Replay a bundled real multi-rank failure through the live monitor.", description="Replay a bundled real multi-rank failure through the live monitor.")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    raise NotImplementedError("monitor demo is not built yet")
