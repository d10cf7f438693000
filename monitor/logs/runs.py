"""The runs in a folder of logs, so that files of different jobs are never merged silently.

A folder that ``monitor run`` writes to holds one ``run-YYYYmmdd-HHMMSS.*`` family per job; a
SLURM output folder one ``slurm-<jobid>*`` family per job; a torchrun ``--log-dir`` one
``attempt_<n>`` folder per restart. Each such family is a *run*; the folder's other log files go
with the newest run (torchrun's own output, a node's dmesg), or are the one run (``other``) of a
folder with no family (the per-rank files of a job written by hand). ``choose`` takes the newest run
unless asked for one by name or for all of them.
"""

from __future__ import annotations

import glob
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from monitor.logs.nodes import node_of
from monitor.logs.ranks import rank_from_path
from monitor.logs.reader import find_logs, is_log_like

# `monitor run`'s stem; SLURM's default --output (slurm-%j.out, slurm-%A_%a.out for arrays).
_RUN_STEM = re.compile(r"^(run-\d{8}-\d{6}(?:-\d+)?)(?:\.|$)")
_SLURM = re.compile(r"^(slurm-\d+(?:_\d+)?)(?:[._-]|$)")
_ATTEMPT = re.compile(r"^attempt_\d+$")
OTHER = "other"


class RunError(Exception):
    """``--run NAME`` names no run of the folder (one line listing those it has)."""


@dataclass(slots=True)
class Run:
    """One run of a folder: its ``name``, the files and folders of it (``paths``), what a live
    follow of it watches (``specs``: globs and folders, so its files created later are seen);
    once ``log_files`` has walked it, its ``logs`` and when the newest was written."""

    name: str
    paths: list[Path] = field(default_factory=list)
    specs: list[str] = field(default_factory=list)
    logs: list[Path] | None = None
    newest: float = 0.0


@dataclass(frozen=True, slots=True)
class Choice:
    """What to read of a folder, and the one line that says so (None when it holds one run);
    ``runs``: how many the folder holds."""

    run: Run
    note: str | None
    runs: int = 1

    @property
    def short(self) -> str:
        """A few words for a status line: which run, of how many."""
        return f"{self.run.name} (1 of {self.runs} runs; --run, --all-runs)"


def runs_in(folder: Path) -> list[Run]:
    """The runs of ``folder``, oldest first. Told apart by their names alone; only a folder of
    several is walked, to leave out runs with no log file and to order them by their newest log."""
    runs: dict[str, Run] = {}
    try:
        entries = sorted(os.scandir(folder), key=lambda entry: entry.name)
    except OSError:
        return []
    for entry in entries:
        path = Path(entry.path)
        if entry.name.startswith("."):
            continue
        if stem := _RUN_STEM.match(entry.name) or _SLURM.match(entry.name):
            name = stem.group(1)
            # run-X.* only: run-X-2 (the next job in the same second) is another run.
            run = runs.setdefault(name, Run(name, specs=[glob.escape(str(folder / name)) + ".*"]))
        elif _is_dir(entry) and _ATTEMPT.match(entry.name):
            run = runs.setdefault(entry.name, Run(entry.name, specs=[str(path)]))
        elif _is_dir(entry) and (attempts := _attempts(path)):
            for attempt in attempts:
                name = f"{entry.name}/{attempt.name}"
                runs[name] = Run(name, [attempt], [str(attempt)])
            continue
        elif _is_dir(entry) or is_log_like(path):
            run = runs.setdefault(OTHER, Run(OTHER))
            run.specs.append(str(path))
        else:
            continue
        run.paths.append(path)
    if len(runs) < 2:
        return list(runs.values())
    found = sorted((run for run in runs.values() if log_files(run)), key=lambda run: run.newest)
    loose = next((run for run in found if run.name == OTHER), None)
    if loose is not None and len(found) > 1:
        # Files beside the runs that belong to none by name (torchrun's own output beside its
        # --log-dir, a node's dmesg beside slurm-<jobid>.out) speak of the latest job: they go
        # with the newest run rather than being a job of their own.
        found.remove(loose)
        newest = found[-1]
        newest.paths += loose.paths
        newest.specs += loose.specs
        newest.logs = log_files(newest) + log_files(loose)
        newest.newest = max(newest.newest, loose.newest)
    return found


# Logs that speak for a host or a whole launch, not for one of several jobs: a node's kernel log,
# the launcher's own output beside its --log-dir. They go with every job of their folder.
_WHOLE_HOST = re.compile(r"^(kern|dmesg|syslog|messages|torchrun|launcher)\b", re.IGNORECASE)
# What the files of one job differ in: their numbers (rank0, rank1; node-07) and which stream
# they hold (job.out, job.err; stdout.log, stderr.log), and the names' endings.
_STREAM_WORDS = re.compile(r"\b(std)?(out|err)\b")
_ENDINGS = re.compile(r"(\.(log|out|err|txt|gz))+$")


def separate_jobs(files: list[Path]) -> list[list[Path]]:
    """``files`` (the logs a ``diagnose`` reads) grouped by the job each looks like it comes from:
    one group unless their names and folders say otherwise. Files beside each other are one job
    when their names differ only in numbers or stream (rank0.log and rank1.log, job.out and
    job.err); a subfolder whose files are one job is that job's folder (folders named alike, such
    as rank0/ and rank1/, one job); the folders of one job's nodes (``node.json``) are one job; a
    kernel log or a launcher's output goes with every job beside it. Told by names alone, as the
    runs of a folder are."""
    if len(files) < 2:
        return [files]
    # The per-rank files a run `monitor run` recorded read beside its log are its job's, wherever they
    # lie; and the files its job wrote in its folder while it ran (a logger's own per-rank files).
    records = {run: run_record(run) for run in files}
    owners = {os.path.realpath(extra): run for run, record in records.items() for extra in record.extra_logs}
    owned = {file: owners[os.path.realpath(file)] for file in files if os.path.realpath(file) in owners}
    runs = {run: record for run, record in records.items() if record.ran is not None}  # recorded runs
    for file in files:
        if file not in owned and file not in runs:
            if (run := next((run for run, record in runs.items() if record.wrote(file)), None)) is not None:
                owned[file] = run
    rest = [file for file in files if file not in owned]
    if len(rest) < 2:
        return [files]
    top = os.path.commonpath([os.path.abspath(file) for file in rest])
    groups = _jobs([(file, Path(os.path.abspath(file)).relative_to(top).parts) for file in rest])
    for file, run in owned.items():
        next((group for group in groups if run in group), groups[0]).append(file)
    return groups


def _jobs(files: list[tuple[Path, tuple[str, ...]]]) -> list[list[Path]]:
    """``separate_jobs`` for files given with their path below the folder they share."""
    groups: dict[str, list[Path]] = {}
    shared: list[Path] = []
    folders: dict[str, list[tuple[Path, tuple[str, ...]]]] = {}
    for file, parts in files:
        if node_of(str(file)) is not None:
            groups.setdefault("nodes", []).append(file)
        elif len(parts) > 1:
            folders.setdefault(parts[0], []).append((file, parts[1:]))
        elif _WHOLE_HOST.match(parts[0]):
            shared.append(file)
        else:
            groups.setdefault(_alike(parts[0]), []).append(file)
    for name, inside in folders.items():
        jobs = _jobs(inside)
        if len(jobs) == 1:
            groups.setdefault(_alike(name) + "/", []).extend(jobs[0])
        else:
            groups.update((f"{name}/{number}", job) for number, job in enumerate(jobs))
    if len(groups) < 2:
        return [[file for file, _ in files]]
    return [group + shared for group in groups.values()]


def _alike(name: str) -> str:
    """The part of a file or folder name that the files of one job share. A run's name is one
    number whatever it holds: ``run-<stamp>-1`` is the second run started in the same second."""
    if (stem := _RUN_STEM.match(name)) is not None:
        name = "run-#" + name[stem.end(1):]
    return re.sub(r"\d+", "#", _STREAM_WORDS.sub("", _ENDINGS.sub("", name.lower())))


def choose(folder: Path, runs: list[Run], name: str | None = None) -> Choice:
    """The run to read: the one named (exactly, or the only one whose name contains ``name``),
    else the newest; raises RunError for a name that matches none or several."""
    if name is not None:
        exact = [run for run in runs if run.name == name]
        matches = exact or [run for run in runs if name in run.name]
        if len(matches) != 1:
            listed = ", ".join(run.name for run in reversed(runs)) or "none"
            why = "no run" if not matches else f"{len(matches)} runs"
            raise RunError(f"{folder}: {why} named like {name!r}; its runs, newest first: {listed}")
        chosen = matches[0]
    else:
        chosen = runs[-1]
    if len(runs) < 2:
        return Choice(chosen, None)
    others = [run.name for run in reversed(runs) if run is not chosen]
    shown = ", ".join(others[:3]) + (f" and {len(others) - 3} more" if len(others) > 3 else "")
    which = "the one asked for" if name is not None else "the newest"
    return Choice(chosen, (
        f"{folder}: {len(runs)} runs; reading {which}, {chosen.name} "
        f"(others: {shown}; --run NAME for another, --all-runs to merge them)"
    ), len(runs))


def _is_dir(entry: os.DirEntry) -> bool:
    """Whether the entry is a folder; a symlink loop is none (``is_dir`` raises ELOOP for it)."""
    try:
        return entry.is_dir()
    except OSError:
        return False


def _attempts(folder: Path) -> list[Path]:
    """torchrun ``--log-dir`` layout: ``<run_id>/attempt_<n>/<rank>/std{out,err}.log``."""
    try:
        return sorted(
            (Path(e.path) for e in os.scandir(folder) if _is_dir(e) and _ATTEMPT.match(e.name)),
            key=lambda p: int(p.name.split("_")[1]),
        )
    except OSError:
        return []


def log_files(run: Run) -> list[Path]:
    """The log files of a run (its other files: stacks, dumps, metrics, are evidence), found
    once; ``run.newest`` is set from them."""
    if run.logs is None:
        run.logs = [
            log for path in run.paths for log in (find_logs(path) if path.is_dir() else [path]) if is_log_like(log)
        ]
        run.newest = max((_mtime(log) for log in run.logs), default=0.0)
    return run.logs


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


# What `monitor run` records of how a job ended, beside its log: run-X.job.json (the recorder) and
# run-X.meta.json (the launch); bounded reads, a few KB each.
MAX_SIDE_BYTES = 1024 * 1024


def side_record(run: Run, kind: str) -> dict:
    """``run-X.<kind>.json`` of a run (``job`` or ``meta``) as a dict; {} when it has none."""
    import json

    for path in run.paths:
        if path.name.endswith(f".{kind}.json") and path.is_file():
            try:
                with open(path, "rb") as stream:
                    data = json.loads(stream.read(MAX_SIDE_BYTES))
            except (OSError, ValueError, RecursionError):  # RecursionError: JSON nested past Python's stack
                return {}
            return data if isinstance(data, dict) else {}
    return {}


def job_record(log: Path) -> dict:
    """What `monitor run`'s recorder wrote beside its ``log`` (run-X.job.json: the job's pid, its
    exit code once it ended); {} when there is none."""
    return side_record(Run(log.stem, [log.with_name(f"{log.stem}.job.json")]), "job")


# The most per-rank files of a run `diagnose` adds to its log (a node's ranks, many times over).
MAX_RECORDED_LOGS = 1024


@dataclass(frozen=True, slots=True)
class RunRecord:
    """What `monitor run` recorded beside a run's log that `diagnose` and a watch read: the job's
    number of ranks as the run resolved it from its launch command and environment (torchrun on one
    machine), the per-rank files it read beside the log (torchrun --log-dir, those still files), and
    how the job exited (None before it ended). Empty for a log no run recorded."""

    world_size: int | None = None
    extra_logs: tuple[Path, ...] = ()
    exit_code: int | None = None
    # Where the job ran (its working folder) and when (seconds since the epoch, start and end):
    # what ties the files it wrote itself (a logger's per-rank files) to it.
    cwd: Path | None = None
    ran: tuple[float, float] | None = None

    def wrote(self, file: Path) -> bool:
        """Whether ``file`` is a rank's file (its name says which: rank1.log) in the job's folder,
        last written while the job ran: the job's own logger wrote it, not another job."""
        if self.cwd is None or self.ran is None or rank_from_path(str(file)) is None:
            return False
        try:
            inside = Path(os.path.realpath(file)).is_relative_to(os.path.realpath(self.cwd))
            return inside and self.ran[0] <= file.stat().st_mtime <= self.ran[1] + WROTE_AFTER_END_S
        except (OSError, ValueError):
            return False


# How long after a run's end a file its job wrote may still be written (a rank's logger closing its
# file as the process exits, after the recorder saw the launcher end).
WROTE_AFTER_END_S = 5.0


def run_record(log: Path) -> RunRecord:
    """``log``'s run-X.meta.json and run-X.job.json, each read once."""
    meta = side_record(Run(log.stem, [log.with_name(f"{log.stem}.meta.json")]), "meta")
    job = job_record(log)
    named = meta.get("extra_logs")
    extra = [Path(name) for name in named[:MAX_RECORDED_LOGS] if isinstance(name, str)] if isinstance(named, list) else []
    size = _integer(meta.get("world_size"))
    started, ended = _seconds(job.get("started")), _seconds(job.get("ended"))
    ran = (started, ended) if started is not None and ended is not None and started <= ended else None
    cwd = meta.get("cwd")
    return RunRecord(world_size=size if size is not None and size > 0 else None,
                     extra_logs=tuple(path for path in extra if path.is_file()),
                     exit_code=_integer(job.get("exit_code")),
                     cwd=Path(cwd) if isinstance(cwd, str) and os.path.isabs(cwd) else None, ran=ran)


def recorded_by_run(log: Path) -> bool:
    """Whether ``log`` is a run's log that `monitor run` recorded (its recorder's run-X.job.json
    beside it)."""
    return log.with_name(f"{log.stem}.job.json").is_file()


def _seconds(value: object) -> float | None:
    """A JSON number of seconds (not a bool), else None."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _integer(value: object) -> int | None:
    """A JSON integer (not a bool, a float or a string of digits), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def recorded_job_log(specs: list[str]) -> Path | None:
    """The log of the one job `monitor run` recorded among what a watch follows (its run-X.log,
    a folder holding its files, or the glob of them a folder of several runs is followed by),
    when the recorder's run-X.job.json lies beside it; None when none does, or several jobs do."""
    logs = set()
    for spec in specs:
        path = Path(spec)
        if path.is_file():
            candidates = [path]
        elif path.is_dir():
            candidates = [Path(entry.path) for entry in _entries(path)]
        else:
            candidates = [Path(name) for name in glob.glob(spec)]
        for candidate in candidates:
            if (stem := _RUN_STEM.match(candidate.name)) is None:
                continue
            log = candidate.with_name(f"{stem.group(1)}.log")
            if log.is_file() and recorded_by_run(log):
                logs.add(log)
    return logs.pop() if len(logs) == 1 else None


def _entries(folder: Path) -> list[os.DirEntry]:
    try:
        return list(os.scandir(folder))
    except OSError:
        return []


# How much of each log's end is read for the furthest step a run reached, and how many earlier
# runs are looked at: a folder of many runs costs a bounded time.
STEP_TAIL_BYTES = 1024 * 1024
MAX_RUNS_LOOKED_AT = 20


def exit_code(run: Run) -> int | None:
    """The run's job's exit code as `monitor run` recorded it, or None (a run it did not record)."""
    for kind in ("job", "meta"):
        if isinstance(code := side_record(run, kind).get("exit_code"), int):
            return code
    return None


def furthest_step(run: Run) -> int | None:
    """The highest training step the end of the run's logs reports (``progress.parse``)."""
    from monitor.progress.parse import parse_progress

    best = None
    for path in log_files(run):
        try:
            with open(path, "rb") as stream:
                stream.seek(max(0, os.fstat(stream.fileno()).st_size - STEP_TAIL_BYTES))
                tail = stream.read(STEP_TAIL_BYTES).decode("utf-8", "replace")
        except OSError:
            continue
        for line in tail.splitlines():
            if (event := parse_progress(line)) is not None and event.step is not None:
                best = event.step if best is None else max(best, event.step)
    return best


def last_good(runs: list[Run], before: Run) -> Run | None:
    """The newest run older than ``before`` (``runs`` oldest first) that ended well: exited 0 as
    `monitor run` recorded it, or, where nothing recorded how it ended (a SLURM output), got to a
    further step than ``before``."""
    older = runs[:runs.index(before)] if before in runs else []
    reached: int | None = None  # ``before``'s furthest step, read only when a run without a record needs it
    looked = False
    for run in list(reversed(older))[:MAX_RUNS_LOOKED_AT]:
        code = exit_code(run)
        if code == 0:
            return run
        if code is None:
            if not looked:
                reached, looked = furthest_step(before), True
            step = furthest_step(run)
            if step is not None and (reached is None or step > reached):
                return run
    return None
