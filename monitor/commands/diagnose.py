"""`monitor diagnose`: Explain why a training job failed, from its logs (post-mortem)."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("diagnose", help="Explain why a training job failed, from its logs (post-mortem).", description="Explain why a training job failed, from its logs (post-mortem). Exit 0: no failure found, 1: a failure, 2: usage or input error.")
    parser.add_argument("paths", nargs="+", metavar="LOG_OR_DIR", help="log files (.gz too) or folders of logs (torchrun --log-dir, SLURM outputs)")
    parser.add_argument("--json", action="store_true", help="print the diagnosis as JSON")
    parser.add_argument("--rules", action="append", default=[], metavar="DIR", help="add a directory of rule files (repeatable)")
    parser.add_argument("--no-user-rules", action="store_true", help="ignore ~/.config/monitor/rules")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import json

    from monitor.cli import UsageError
    from monitor.diagnosis.catalogue import RuleError, load_catalogue
    from monitor.diagnosis.diagnose import MissingPath, diagnose_paths

    try:
        catalogue = load_catalogue(args.rules, include_user=not args.no_user_rules)
        diagnosis = diagnose_paths(args.paths, catalogue)
    except (RuleError, MissingPath) as exc:
        raise UsageError(str(exc)) from None
    if not diagnosis.files:  # not one log could be read: an input error, said on stderr
        import sys

        for problem in diagnosis.problems or ["no log files found"]:
            print(f"monitor: {problem}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(diagnosis.to_json(), indent=2, ensure_ascii=False))
    else:
        import sys

        from monitor.diagnosis.report import write_report

        write_report(diagnosis, sys.stdout)
    return 1 if diagnosis.failed else 0
