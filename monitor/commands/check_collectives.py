"""`monitor check-collectives`: the collective test alone, through a launch command or srun."""

from __future__ import annotations

import argparse
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "check-collectives",
        help="Test the collectives of a job's ranks and name a slow node, rank or link.",
        description="Run a short collective test (all_reduce and all_gather at a few sizes, send/recv "
                    "between ranks) through the job's own launcher and rendezvous, in place of its "
                    "script (torchrun, python -m torch.distributed.run, srun; on every node, as the job "
                    "would be), or through srun on every task of this SLURM allocation when no command "
                    "is given. Prints the figures and names what is slow. Exit code: 0 nothing stands "
                    "out, 1 something does or the test failed, 2 usage error.",
        usage="monitor check-collectives [options] [-- CMD ARGS...]",
    )
    parser.add_argument("--log-dir", type=Path, default=Path("logs"), metavar="DIR",
                        help="where check-YYYYmmdd-HHMMSS.collectives.json and .txt go (default: ./logs)")
    parser.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                        help="stop the test after this long, rendezvous included (default 180)")
    parser.add_argument("--json", action="store_true", help="print the verdict as one JSON object")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the job's launch: -- CMD ARGS...")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import os
    from datetime import datetime

    from monitor.cli import UsageError
    from monitor.commands.options import check_seconds
    from monitor.runner.collectives_check import TIMEOUT_S, cannot_check, check
    from monitor.text import safe_json, safe_text

    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    timeout = TIMEOUT_S if args.timeout is None else args.timeout
    check_seconds("--timeout", timeout, at_least=1)
    if not command and not os.environ.get("SLURM_JOB_ID"):
        raise UsageError("check-collectives: no command given, and not inside a SLURM allocation "
                         "(monitor check-collectives -- torchrun ... train.py)")
    if command and (reason := cannot_check(command)):
        raise UsageError(f"check-collectives: {reason}")
    try:
        args.log_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"check-collectives: cannot write to {args.log_dir}: {exc.strerror}") from None
    stem = args.log_dir / f"check-{datetime.now():%Y%m%d-%H%M%S}"
    result = check(command or None, stem, timeout_s=timeout)
    if args.json:
        print(safe_json({"problem": result.problem, "seconds": result.seconds, "saved": str(result.saved),
                         "verdict": result.verdict.to_json() if result.verdict else None}), flush=True)
    else:
        for line in result.lines():
            print(safe_text(line), flush=True)
    return 0 if result.verdict is not None and result.verdict.clean else 1
