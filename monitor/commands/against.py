"""`--against RUN|auto|none`: which earlier run a diagnosis is compared with ("new since the
last good run", ``diagnosis/novelty.py``), found once here for every command that takes it."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class GoodRun:
    name: str
    logs: list[Path]
    environment: dict  # what `monitor run` recorded of it ({} when nothing)
    # The failed run's recorded environment, for the changes.
    failed_environment: dict


def add_against_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--against", metavar="RUN", default="auto",
        help="compare with this earlier run (a log file or folder) and list the lines it never printed; "
             "'auto' (default): the newest earlier run of the folder that exited 0; 'none': do not compare")


def good_run(paths: list[str], args: argparse.Namespace) -> tuple[GoodRun | None, str | None]:
    """The run to compare with, and one line when there is none to be had (or None)."""
    from monitor.logs.reader import find_logs
    from monitor.logs.runs import choose, last_good, log_files, runs_in, side_record

    if args.against == "none" or (args.against == "auto" and getattr(args, "all_runs", False)):
        return None, None  # --all-runs reads every run as one job: none of them is "before"
    chosen = failed = None
    runs: list = []
    for path in map(Path, paths):
        folder = path if path.is_dir() else path.parent
        found = runs_in(folder)
        if len(found) < 2:
            continue
        runs = found
        if path.is_dir():
            failed = choose(folder, runs, getattr(args, "run", None)).run
        else:
            failed = next((run for run in runs if path in run.paths), None)
        if failed is not None:
            chosen = folder
            break
    failed_env = side_record(failed, "meta").get("environment") or {} if failed is not None else {}
    if args.against != "auto":
        target = Path(args.against)
        if not target.exists():
            return None, f"--against {args.against}: no such file or folder; not compared"
        if target.is_dir():
            target_runs = runs_in(target)
            run = target_runs[-1] if target_runs else None  # the newest, as diagnose would read it
            logs = log_files(run) if run is not None else find_logs(target)
        else:
            run = next((r for r in runs_in(target.parent) if target in r.paths), None)
            logs = [target]
        environment = side_record(run, "meta").get("environment") or {} if run is not None else {}
        return GoodRun(str(target), list(logs), environment, failed_env), None
    if failed is None:
        return None, None  # one run, or none: nothing to compare with, and nothing to say
    good = last_good(runs, failed)
    if good is None:
        return None, (f"{chosen}: no run before {failed.name} ended well (exited 0 as `monitor run` recorded it, "
                      "or got to a further step): nothing to compare with")
    return GoodRun(good.name, list(log_files(good)), side_record(good, "meta").get("environment") or {}, failed_env), None


def against_for(paths: list[str], args: argparse.Namespace):
    """What a live session compares with (``novelty.Against``), and one line when nothing."""
    from monitor.diagnosis.changes import changes
    from monitor.diagnosis.novelty import Against, run_templates

    good, note = good_run(paths, args)
    if good is None:
        return None, note
    changed = changes(good.environment, good.failed_environment) if good.environment and good.failed_environment else []
    return Against(good.name, frozenset(run_templates(good.logs)), tuple(changed)), note
