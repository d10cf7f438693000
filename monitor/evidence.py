"""What a run's folder holds beside its logs, read post-mortem: the stacks ``monitor run`` took
(``run-X.stacks.json``) and the ranks' flight-recorder dumps (``run-X.fr/``, or any folder or
file given). ``diagnose`` weighs their findings with the logs', so a hang diagnosed from the
folder names the rank the live run named.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from monitor.diagnosis import node_health
from monitor.diagnosis.tail import trains
from monitor.flight_recorder import dumps as fr_dumps
from monitor.flight_recorder import variables as fr_variables
from monitor.flight_recorder.match import analyse as analyse_dumps
from monitor.model import SEVERITY_ORDER, Finding, LogLine
from monitor.stacks import compare
from monitor.stacks import files as stacks_files
from monitor.stacks.model import Capture
from monitor.text import clean


@dataclass(slots=True)
class Evidence:
    findings: list[Finding] = field(default_factory=list)
    files: list[str] = field(default_factory=list)      # the files it came from
    problems: list[str] = field(default_factory=list)   # one line each, naming the file


def is_evidence_file(path: Path) -> bool:
    """A stacks file or a flight-recorder dump (given by name: not a log to read as text)."""
    return path.name.endswith(stacks_files.SUFFIX) or fr_dumps.looks_like_dump(path)


def recorded_beside(log: Path) -> list[Path]:
    """What `monitor run` kept beside the run ``log`` while the job ran, where it exists: its stacks
    and its flight-recorder dumps (a hang the live run named is named again from the log alone)."""
    return [path for path in (stacks_files.stacks_paths(log)[0], fr_variables.dumps_folder(log)) if path.exists()]


def read_evidence(paths: list[Path]) -> Evidence:
    """The evidence in ``paths`` (folders searched recursively, files taken as they are)."""
    evidence = Evidence()
    stacks: list[Path] = []
    dumps: list[Path] = []
    for path in paths:
        if path.is_dir():
            evidence.findings += node_health.post_mortem(path)  # a job folder: a node that went quiet
            stacks += sorted(path.rglob("*" + stacks_files.SUFFIX))
            dumps += fr_dumps.find_dumps(path)
        elif path.name.endswith(stacks_files.SUFFIX):
            stacks.append(path)
        elif fr_dumps.looks_like_dump(path):
            dumps.append(path)
    for path in dict.fromkeys(stacks):
        _read_stacks(path, evidence)
    by_folder: dict[Path, list[fr_dumps.RankDump]] = defaultdict(list)
    for path in dict.fromkeys(dumps):
        try:
            by_folder[path.parent].append(fr_dumps.load(path))
            evidence.files.append(str(path))
        except fr_dumps.DumpError as exc:
            evidence.problems.append(str(exc))
    for folder_dumps in by_folder.values():  # one job's ranks per folder
        evidence.findings += analyse_dumps(folder_dumps)
    return evidence


def _read_stacks(path: Path, evidence: Evidence) -> None:
    """The most telling capture of a stacks file: the most severe finding, the newest of equals
    (the capture taken while the ranks hung, not the one taken as they exited), of the captures
    whose silence did not pass: the live run withdrew those its job trained on after."""
    try:
        captures = stacks_files.read(path)
    except stacks_files.StacksFileError as exc:
        evidence.problems.append(str(exc))
        return
    evidence.files.append(str(path))
    log = path.with_name(path.name[:-len(stacks_files.SUFFIX)] + ".log")
    passed = _passed(log, [capture for capture, _ in captures])
    # Each capture is judged again by this version's reading of stacks (the file keeps the run's
    # own finding too, for the text beside it): what was learnt since the run applies to it.
    judged = [compare.analyse(capture, kept.fields.get("stacks_file", "") if kept else "")
              for capture, kept in captures if capture.log_bytes not in passed]
    findings = [finding for finding in judged if finding is not None]
    if findings:
        best = min(SEVERITY_ORDER[f.severity] for f in findings)
        evidence.findings.append([f for f in findings if SEVERITY_ORDER[f.severity] == best][-1])


# How much of a run's log after a capture is read for training on: a silence that passed shows its
# progress lines within the first of what followed.
AFTER_CAPTURE_BYTES = 1 << 20


def _passed(log: Path, captures: list[Capture]) -> set[int]:
    """The ``log_bytes`` of the ``captures`` after which the run's ``log`` shows training progress:
    the job trained on, and the silence they were taken in passed. Looked for after the newest
    capture first: training after it is after every earlier one too (most runs: one read)."""
    offsets = sorted({capture.log_bytes for capture in captures if capture.log_bytes is not None}, reverse=True)
    for index, offset in enumerate(offsets):
        if _trained_after(log, offset):
            return set(offsets[index:])
    return set()


def _trained_after(log: Path, offset: int) -> bool:
    """Whether ``log`` shows a line of training progress after its first ``offset`` bytes."""
    try:
        with open(log, "rb") as stream:
            stream.seek(offset)
            after = stream.read(AFTER_CAPTURE_BYTES)
    except (OSError, ValueError, OverflowError):  # an offset no file has: nothing after it
        return False
    lines = after.split(b"\n")
    if len(after) == AFTER_CAPTURE_BYTES:
        lines.pop()  # cut by the window
    return any(trains(LogLine(str(log), 0, clean(raw))) for raw in lines)
