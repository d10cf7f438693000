"""`monitor watch`: Follow a running job's logs live (TUI, or --headless)."""

from __future__ import annotations

import argparse
from pathlib import Path

from monitor.commands.against import add_against_option, against_for
from monitor.commands.options import (
    add_bell_option, add_rules_options, add_run_options, add_stall_option, check_stall_option, headless_off_a_terminal,
    load_rules, pick_run_specs,
)


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "watch",
        help="Follow a running job's logs live (TUI, or --headless).",
        description=(
            "Follow a running job's logs live: files, folders (every log file in them, also those "
            "created later, e.g. torchrun --log-dir) or globs. --headless prints each new finding as "
            "it occurs and a summary with the root cause on Ctrl-C or SIGTERM. "
            "Exit 0: no failure found, 1: a failure, 2: usage or input error."
        ),
    )
    parser.add_argument("paths", nargs="+", metavar="PATH", help="log file, folder of logs, or glob (quote it)")
    parser.add_argument("--headless", action="store_true", help="no TUI: print findings as they occur")
    parser.add_argument(
        "--json", action="store_true",
        help="with --headless: one JSON object per new finding, and {\"diagnosis\": ...} at the end",
    )
    parser.add_argument("--poll", action="store_true", help="poll files instead of inotify events (NFS, Lustre)")
    add_bell_option(parser)
    add_stall_option(parser, "")
    add_run_options(parser)
    add_against_option(parser)
    add_rules_options(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from monitor.cli import UsageError
    from monitor.logs.sources import SourceError, parse_source

    if args.json and not args.headless:
        raise UsageError("--json needs --headless")
    check_stall_option(args)
    try:
        for path in args.paths:
            parse_source(path)
    except SourceError as exc:
        raise UsageError(str(exc)) from None
    catalogue = load_rules(args)
    # A folder of several runs: the newest run is followed (its files created later too), its new
    # lines told against the last run that ended well.
    paths, choices = pick_run_specs(args.paths, args)
    against, against_note = against_for(args.paths, args)
    headless_off_a_terminal(args)
    recorded = RecordedJob.among(paths)
    if not args.headless:
        from monitor.tui import launch_watch

        scope = "; ".join(choice.short for choice in choices)
        return launch_watch(paths, catalogue=catalogue, poll=args.poll, stall_after=args.stall_after, scope=scope,
                            bell=not args.no_bell, against=against, recorded=recorded)
    from monitor.session.headless import watch_headless
    from monitor.text import say

    for choice in choices:
        say(choice.note)
    if against_note is not None:
        say(against_note)
    return watch_headless(paths, catalogue, as_json=args.json, poll=args.poll, stall_after=args.stall_after,
                          against=against, recorded=recorded)


class RecordedJob:
    """A job `monitor run` started, watched by another monitor: the one that started it was
    quit with "Leave it running" (or died), so nobody else will report its end. Its recorder
    goes on and writes beside the log (run-X.job.json) the job's pid and, once it ended, its
    exit code: from those the watch takes the job's stacks, tells its end, and writes the end
    report `monitor run` would have written."""

    def __init__(self, log_path: Path) -> None:
        self.log_path = log_path

    @classmethod
    def among(cls, paths: list[str]) -> RecordedJob | None:
        """The job of the one `monitor run` log among what a watch follows, if there is one."""
        from monitor.logs.runs import recorded_job_log

        log = recorded_job_log(paths)
        return cls(log) if log is not None else None

    def exit_code(self) -> int | None:
        from monitor.logs.runs import job_record

        code = job_record(self.log_path).get("exit_code")
        return code if isinstance(code, int) else None

    def ending(self) -> str | None:
        """How the job ended, in the words of `monitor run`'s screen; None while it runs."""
        from monitor.tui import job_ending  # light: the package imports textual only when a screen starts

        return job_ending(self.exit_code())

    def pids(self) -> list[int]:
        """The job's live processes: its launcher (the recorder's child) and all under it."""
        import psutil

        from monitor.logs.runs import job_record
        from monitor.runner.processes import descendants

        root = job_record(self.log_path).get("job_pid")
        return [root, *descendants(root)] if isinstance(root, int) and psutil.pid_exists(root) else []

    def hang_probe(self, post):
        """The probe that takes the job's stacks (`s`, and a silence that looks like a hang), as
        `monitor run`'s session has; findings go to ``post`` (the session's)."""
        from monitor.flight_recorder.variables import recorder_of
        from monitor.session.hang_probe import HangProbe

        return HangProbe(self.pids, self.log_path, post, recorder_of(self.pids()))

    def straggler_watch(self, post):
        """The straggler scores of the job (started), as `monitor run` samples them; findings go
        to ``post`` (the session's). Its ``lines`` is the session's ``on_step``."""
        from monitor.session.straggler_watch import StragglerWatch
        from monitor.text import say

        return StragglerWatch(self.pids, post, warn=say).start()

    def finish(self, session) -> str:
        """The job has ended and its log is read (in the session's thread): how it exited joins
        the session's findings, and the end report is written unless `monitor run` wrote it.
        Returns what was done, in a few words ("" when nothing was written)."""
        from monitor.logs.runs import Run, job_record, side_record
        from monitor.runner.explain import exit_finding
        from monitor.runner.job import side_file
        from monitor.runner.recorder import write_state

        state = job_record(self.log_path)
        code = state["exit_code"]
        session.job_ended(exit_finding(self.log_path, code, state.get("stop_signal"), bool(state.get("killed"))))
        report = side_file(self.log_path, "diagnosis")
        if report.exists():
            return ""
        meta_path = side_file(self.log_path, "meta")
        meta = side_record(Run(self.log_path.stem, [meta_path]), "meta")
        run = {"command": state.get("command", meta.get("command")), "launcher": meta.get("launcher"),
               "exit_code": code, "log": str(self.log_path), "slurm": meta.get("slurm"),
               "attempt": meta.get("attempt"),
               "reported_by": "monitor watch: the monitor that started the job left it running"}
        error = write_state(report, {"run": run, **session.diagnosis().to_json()})
        return error or f"diagnosis saved to {report.name}"
