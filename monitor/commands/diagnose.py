"""`monitor diagnose`: Explain why a training job failed, from its logs (post-mortem)."""

from __future__ import annotations

import argparse

from monitor.commands.against import add_against_option
from monitor.commands.options import add_rules_options, add_run_options, load_rules, pick_runs


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("diagnose", help="Explain why a training job failed, from its logs (post-mortem).", description="Explain why a training job failed, from its logs (post-mortem). Exit 0: no failure found, 1: a failure, 2: usage or input error.")
    parser.add_argument("paths", nargs="+", metavar="LOG_OR_DIR",
                        help="log files (.gz too) or folders of logs (torchrun --log-dir, SLURM outputs, a "
                             "`monitor run` log folder with its stacks and flight-recorder dumps); "
                             "flight-recorder dump files and run-X.stacks.json may be given too")
    parser.add_argument("--json", action="store_true", help="print the diagnosis as JSON")
    parser.add_argument("--one-job", action="store_true",
                        help="read every file given as one job's, even when their names and folders say they "
                             "come from several (each is then diagnosed on its own)")
    add_run_options(parser)
    add_against_option(parser)
    add_rules_options(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import sys

    from pathlib import Path

    from monitor.cli import UsageError
    from monitor.diagnosis.diagnose import MissingPath, diagnose_paths
    from monitor.logs.reader import is_log_like, path_error
    from monitor.logs.runs import recorded_by_run
    from monitor.text import safe_json, say

    # As grep does: a path that does not exist is said on stderr and makes the exit code 2, and
    # the others are still diagnosed (a glob of logs where one rotated away still gets its answer).
    errors = {path: path_error(path) for path in args.paths}
    missing = [f"{path}: {error}" for path, error in errors.items() if error is not None]
    for problem in missing:
        say(problem)
    present = [path for path, error in errors.items() if error is None]
    if not present:
        return 2
    catalogue = load_rules(args)
    # A folder of several runs is read as its newest run (or the one named), never merged unasked.
    present_before_pick = present
    present, beside, notes = pick_runs(present, args)
    # Stacks and dumps are looked for in folders and files not named like logs, and beside a log
    # `monitor run` recorded (what the run kept beside it): a plain log costs nothing more.
    run_logs = [Path(p) for p in present if Path(p).is_file() and recorded_by_run(Path(p))]
    if run_logs:
        from monitor.evidence import recorded_beside

        beside += [path for log in run_logs for path in recorded_beside(log)]
    evidence, logs = None, present
    if maybe := [Path(p) for p in present if Path(p).is_dir() or not is_log_like(Path(p))] + beside:
        from monitor.evidence import is_evidence_file, read_evidence

        evidence = read_evidence(maybe)
        logs = [path for path in present if not is_evidence_file(Path(path))]
    try:
        diagnosis = diagnose_paths(logs, catalogue, evidence=evidence.findings if evidence else [])
    except MissingPath as exc:  # MissingPath: deleted since we looked
        raise UsageError(str(exc)) from None
    logs_read = list(diagnosis.files)  # the jobs are told by the logs, not by the stacks and dumps beside them
    if evidence is not None:
        diagnosis.problems = evidence.problems + diagnosis.problems
        diagnosis.files += [f for f in evidence.files if f not in diagnosis.files]
    diagnosis.problems = missing + diagnosis.problems
    diagnosis.notes = notes
    if not args.one_job and len(jobs := _separate_jobs(diagnosis, logs_read, catalogue)) > 1:
        _print_jobs(diagnosis, jobs, args.json)
        return 2 if missing or diagnosis.unread else 1
    diagnosis = _against(diagnosis, present_before_pick, args)
    if not diagnosis.files:  # not one log could be read: an input error, said on stderr
        for problem in diagnosis.problems[len(missing):] or ["no log files found"]:
            say(problem)
        return 2
    if args.json:
        print(safe_json(diagnosis.to_json(), indent=2))
    else:
        from monitor.diagnosis.report import write_report

        write_report(diagnosis, sys.stdout)
    if missing or diagnosis.unread:
        return 2
    return 1 if diagnosis.failed else 0


def _separate_jobs(diagnosis, logs: list[str], catalogue) -> list:
    """The diagnoses of each job when the ``logs`` read look like several jobs' (``logs.runs.
    separate_jobs``) of which more than one failed: merged, one of their root causes would be
    named as the cause of all. [] when the files are one job, or only one of them failed (its
    root cause is then the merged one)."""
    from pathlib import Path

    from monitor.diagnosis.diagnose import diagnose_paths
    from monitor.logs.runs import separate_jobs

    groups = separate_jobs([Path(file) for file in logs])
    failed_files = {finding.file for finding in diagnosis.findings if finding.severity == "error"}
    if sum(any(str(file) in failed_files for file in group) for group in groups) < 2:
        return []
    return [diagnose_paths(group, catalogue) for group in groups]


def _print_jobs(diagnosis, jobs: list, as_json: bool) -> None:
    import sys

    from monitor.text import safe_json

    if as_json:
        print(safe_json({**diagnosis.to_json(), "root_cause": None,
                         "notes": [*diagnosis.notes, f"{len(diagnosis.files)} files of {len(jobs)} separate jobs: "
                                                     "each is diagnosed on its own under jobs"],
                         "jobs": [job.to_json() for job in jobs]}, indent=2))
    else:
        from monitor.diagnosis.report import render_jobs

        for note in diagnosis.notes:
            print(note)
        sys.stdout.write(render_jobs(jobs, len(diagnosis.files)))


def _against(diagnosis, paths: list[str], args: argparse.Namespace):
    """The diagnosis compared with the last good run (``--against``), or with one line why not."""
    from monitor.commands.against import good_run
    from monitor.diagnosis.changes import changes
    from monitor.diagnosis.conclude import compared
    from monitor.diagnosis.novelty import Against, run_templates

    good, note = good_run(paths, args)
    if note is not None:
        diagnosis.notes = [*diagnosis.notes, note]
    if good is None:
        return diagnosis
    changed = changes(good.environment, good.failed_environment) if good.environment and good.failed_environment else []
    return compared(diagnosis, Against(good.name, frozenset(run_templates(good.logs)), tuple(changed)))
