"""`monitor stacks`: Every rank's Python stack now, and the rank that is somewhere else."""

from __future__ import annotations

import argparse
from pathlib import Path

from monitor.commands.options import PID, check_number


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "stacks", help="Every rank's Python stack now (py-spy), and the rank that is somewhere else.",
        description="Take the Python stack of every rank of a running job with py-spy, group the ranks by "
                    "where they are and name the odd ones out (a rank in user code while the others wait in a "
                    "collective). Ranks that answer flight-recorder dump requests are asked for a dump too. "
                    "Exit 0: taken, 1: a rank is stuck or the ranks disagree, 2: no stack could be taken.",
        usage="monitor stacks (--pid PID | --run LOG) [--json]",
    )
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--pid", type=int, metavar="PID",
                        help="the job's launcher (torchrun) or any rank: it and every process under it")
    target.add_argument("--run", type=Path, metavar="LOG",
                        help="a job started with `monitor run`: its run-X.log; the stacks are also kept "
                             "beside it (run-X.stacks.json, .txt)")
    parser.add_argument("--json", action="store_true", help="print the stacks and the finding as JSON")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from monitor.cli import UsageError
    from monitor.flight_recorder.variables import recorder_of
    from monitor.model import any_error, one_line
    from monitor.runner.job import side_file
    from monitor.runner.processes import descendants
    from monitor.session.hang_probe import Look
    from monitor.stacks import files
    from monitor.text import safe_json, safe_text, say

    import psutil

    if args.run is not None:
        root = _job_pid(args.run, side_file(args.run, "job"))
    else:
        check_number("--pid", args.pid, **PID)
        root = args.pid
    if not psutil.pid_exists(root):
        raise UsageError(f"stacks: pid {root}: no such process" + (" (the job has ended)" if args.run else ""))
    pids = [root, *descendants(root)]
    stacks_text = str(files.stacks_paths(args.run)[1]) if args.run is not None else ""
    look = Look(pids, "request", recorder_of(pids), stacks_file=stacks_text)
    if not look.capture.ranked():
        say(f"stacks: {look.capture.problem}")
        return 2
    found = [look.finding] if look.finding is not None else []
    found += look.read_dumps()
    if args.run is not None and (error := files.save(args.run, look.capture, look.finding)):
        say(error)
    if args.json:
        print(safe_json({**files.capture_to_json(look.capture, look.finding),
                         "findings": [f.to_json() for f in found]}, indent=1))
    else:
        print(safe_text(files.render(look.capture, look.finding), keep_newlines=True))
        for finding in found:
            print(one_line(finding))
            print(finding.for_display().remedy, end="\n\n")
    return 1 if any_error(found) else 0


def _job_pid(log: Path, state_path: Path) -> int:
    import json

    from monitor.cli import UsageError

    try:
        state = json.loads(state_path.read_text())
        return int(state["job_pid"])
    except OSError as exc:
        raise UsageError(f"stacks: {state_path}: {(exc.strerror or str(exc)).lower()} "
                         f"(is {log} a log written by `monitor run`?)") from None
    except (ValueError, KeyError, TypeError):
        raise UsageError(f"stacks: {state_path}: no job pid in it") from None
