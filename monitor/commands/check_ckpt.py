"""`monitor check-ckpt`: Verify torch and safetensors checkpoints without loading them."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("check-ckpt", help="Verify torch and safetensors checkpoints without loading them.", description="Verify torch and safetensors checkpoints without loading them.")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    raise NotImplementedError("monitor check-ckpt is not built yet")
