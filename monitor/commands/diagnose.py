"""`monitor diagnose`: Explain why a training job failed, from its logs (post-mortem)."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("diagnose", help="Explain why a training job failed, from its logs (post-mortem).", description="Explain why a training job failed, from its logs (post-mortem).")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    raise NotImplementedError("monitor diagnose is not built yet")
