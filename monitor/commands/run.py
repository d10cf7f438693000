"""`monitor run`: Launch a training job, record its output, watch it and explain how it ended."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("run", help="Launch a training job, record its output, watch it and explain how it ended.", description="Launch a training job, record its output, watch it and explain how it ended.")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    raise NotImplementedError("monitor run is not built yet")
