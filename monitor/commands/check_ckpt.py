"""`monitor check-ckpt`: Verify torch and safetensors checkpoints without loading them."""

from __future__ import annotations

import argparse
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "check-ckpt",
        help="Verify torch and safetensors checkpoints without loading them.",
        description="Verify torch (zip and legacy), torch distributed (.metadata + .distcp) and "
                    "safetensors checkpoints without loading them: structure, offsets and "
                    "per-member CRCs. One line per file. Exit code: "
                    "0 all good, 1 a checkpoint is bad, 2 a path is missing.",
    )
    parser.add_argument("paths", nargs="+", type=Path, metavar="PATH",
                        help="checkpoint files, or directories to search for them")
    parser.add_argument("--json", action="store_true", help="one JSON object per file")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import json

    from monitor.checkpoints.verify import CheckResult, check_checkpoint, checkpoint_targets

    results: list[CheckResult] = []
    for path in args.paths:
        if path.is_dir():
            files = checkpoint_targets(path)
            if not files:
                results.append(CheckResult(path, "missing", "unknown", "no checkpoint files in this directory"))
            results.extend(check_checkpoint(f) for f in files)
        else:
            results.append(check_checkpoint(path))
    for result in results:
        print(json.dumps(result.to_json()) if args.json else result.line(), flush=True)
    if any(r.status == "missing" for r in results):
        return 2
    return 0 if all(r.ok for r in results) else 1
