"""Post-mortem diagnosis of finished log files and folders: ``diagnose_paths``."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from monitor.diagnosis.catalogue import Catalogue
from monitor.diagnosis.engine import Engine
from monitor.model import Diagnosis, Finding
from monitor.logs.nodes import nodes_from_names
from monitor.logs.runs import run_record
from monitor.logs.reader import UnreadableLog, find_logs, path_error, read_head, read_log
from monitor.logs.margin import at_margin, margin_of
from monitor.logs.unwrap import HEAD_BYTES, Wrap, unwrap, wrap_of
from monitor.diagnosis.scan import scan_file
from monitor.diagnosis.conclude import conclude, exited_zero
from monitor.diagnosis.timestamps import FileDate


class MissingPath(Exception):
    """A path given on the command line does not exist (a usage error)."""


@dataclass(frozen=True, slots=True)
class PasteShape:
    """How a paste moved a file's lines, judged from its head: hard-wrapped by a terminal
    (``wrap_of``), indented as a whole (``margin_of``). A file of neither is read as written."""
    wrap: Wrap | None = None
    margin: str = ""

    def plain(self) -> bool:
        return self.wrap is None and not self.margin


def diagnose_paths(paths, catalogue: Catalogue, fast: bool = True, evidence: Sequence[Finding] = ()) -> Diagnosis:
    """Reads every log file of ``paths`` (files, .gz, folders) and diagnoses the job.
    ``evidence``: findings from beside the logs (``monitor.evidence``: stacks, flight-recorder
    dumps), weighed with the logs' for the root cause.

    ``fast`` scans chunks with the prefilter (``scan.py``); ``fast=False`` feeds every line, the
    reference path. Both give the same findings. Raises MissingPath before reading anything.
    ``files`` lists the files read (a binary or unreadable one is only in ``problems``).
    """
    paths = [Path(p) for p in paths]
    for path in paths:
        if (error := path_error(path)) is not None:
            raise MissingPath(f"{path}: {error}")
    found_in = [(path, find_logs(path)) for path in paths]
    # What `monitor run` recorded beside a run's log, read once per file.
    records = {file: run_record(file) for _, found in found_in for file in found}
    # The per-rank files a run read beside its log are the job's too (under torchrun --redirects
    # without --tee, the only place a rank's traceback is).
    found_in += [(extra, [extra]) for record in records.values() for extra in record.extra_logs]
    # SLURM's --output=%N.out: a file per node, named after it.
    engine = Engine(catalogue, node_of=nodes_from_names([file for _, found in found_in for file in found]).get)
    # Every file's head, read once before any file is read: a rank's file of glog times alone, read
    # first, takes the year another file's dated lines give.
    shapes, dated = _heads([file for _, found in found_in for file in found])
    engine.note_dated(dated)
    # The job's ranks as `monitor run` recorded them (ranks that printed nothing exist too).
    for size in {record.world_size for record in records.values() if record.world_size is not None}:
        engine.note_world_size(size)
    files: list[str] = []
    problems: list[str] = []
    unread: list[str] = []
    empty: list[str] = []
    read: set[Path] = set()
    for path, found in found_in:
        if path.is_dir() and not found:
            problems.append(f"{path}: no log files in this directory")
        for file in found:
            # realpath, not resolve: a symlink loop is read (and said unreadable), not raised on
            if (real := Path(os.path.realpath(file))) in read:
                continue  # named twice (a file and its folder): read once
            read.add(real)
            name = str(file)
            try:
                # A paste a terminal wrapped or indented as a whole is read line by line, its
                # pieces joined, at its margin.
                if isinstance(shape := shapes[file], UnreadableLog):
                    raise shape
                if fast and shape.plain():
                    scan_file(file, engine)
                else:
                    lines = read_log(file)
                    lines = lines if shape.wrap is None else unwrap(lines, shape.wrap)
                    for line in at_margin(lines, shape.margin) if shape.margin else lines:
                        engine.feed(line)
                files.append(name)
                if file.stat().st_size == 0:
                    empty.append(name)
            except UnreadableLog as exc:
                problems.append(str(exc))
                if exc.partial:
                    files.append(name)
                if not exc.binary:
                    unread.append(name)
            finally:
                engine.flush(name)
    for finding in evidence:
        engine.add_external(finding)
    # A run `monitor run` recorded as exited 0 is read as its end was (``JobSession.job_ended``).
    exited_ok = {record.exit_code for file, record in records.items() if str(file) in files} == {0}
    if exited_ok:
        for finding in exited_zero(engine.findings):
            engine.revise(finding)
    diagnosis = conclude(engine.diagnosis(files), catalogue, finished=True, ranks=engine.rank_evidence(),
                         exited_ok=exited_ok)
    diagnosis.problems = problems + diagnosis.problems
    diagnosis.unread = unread
    diagnosis.empty = empty
    return diagnosis


def _heads(files: list[Path]) -> tuple[dict[Path, PasteShape | UnreadableLog], float | None]:
    """Each file's head, read once: how a paste moved its lines (``PasteShape``; the
    UnreadableLog its read raised), and the first dated time among the files' first lines
    (``timestamps.FileDate``), in their order."""
    shapes: dict[Path, PasteShape | UnreadableLog] = {}
    dated: float | None = None
    for file in files:
        try:
            head = read_head(file, HEAD_BYTES)
        except UnreadableLog as exc:
            shapes[file] = exc
            continue
        shapes[file] = PasteShape(wrap_of(head), margin_of(head))
        if dated is None:
            look = FileDate(until_yearless=False)
            for line in head.decode("utf-8", "replace").split("\n"):
                if (dated := look.look(line)) is not None or look.done:
                    break
    return shapes, dated
