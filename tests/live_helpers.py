"""Helpers for the live tests: sample logs written progressively, sessions stepped until quiet."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from monitor.logs.reader import find_logs, is_log_like

SAMPLES = Path(__file__).resolve().parent.parent / "sample_logs"


def sample_units() -> list[Path]:
    """Every sample job in sample_logs/: a log file, or a folder of logs (torchrun --log-dir).
    Not the real-log corpus (sample_logs/real/): its folders are categories of unrelated excerpts,
    no jobs, and its cases are scored by `rules eval` (tests/test_rules_eval.py)."""
    units = []
    for group in sorted(p for p in SAMPLES.iterdir() if p.is_dir() and p.name != "real") if SAMPLES.is_dir() else []:
        for entry in sorted(group.iterdir()):
            if entry.is_dir() and find_logs(entry):
                units.append(entry)
            elif entry.is_file() and is_log_like(entry) and not entry.name.endswith(".gz"):
                units.append(entry)
    return units


class ProgressiveCopy(threading.Thread):
    """Writes a sample (file or folder) into ``target`` in pieces, as a running job would: files
    appear one after another, each grows in chunks that often end mid-line."""

    def __init__(self, source: Path, target: Path, pieces: int = 6, pause: float = 0.003) -> None:
        super().__init__(daemon=True)
        self.source, self.target, self.pieces, self.pause = source, target, pieces, pause

    def files(self) -> list[tuple[Path, Path]]:
        if self.source.is_file():
            return [(self.source, self.target)]
        return [(f, self.target / f.relative_to(self.source)) for f in find_logs(self.source)]

    def run(self) -> None:
        for src, dst in self.files():
            dst.parent.mkdir(parents=True, exist_ok=True)
            data = src.read_bytes()
            step = max(1, len(data) // self.pieces + 7)
            with open(dst, "ab", buffering=0) as handle:
                for start in range(0, len(data), step):
                    handle.write(data[start:start + step])
                    time.sleep(self.pause)


def step_until_quiet(session, writers=(), quiet: float = 0.3, limit: float = 20.0):
    """Step the session while writers run and until ``quiet`` s brought nothing new."""
    lines, new, cleared = [], [], []
    quiet_since = None
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        update = session.step(timeout=0.05)
        lines += update.lines
        new += update.new_findings
        cleared += update.cleared
        if update.lines or any(w.is_alive() for w in writers):
            quiet_since = None
            continue
        quiet_since = quiet_since or time.monotonic()
        if time.monotonic() - quiet_since >= quiet:
            break
    return lines, new, cleared


def finding_key(finding, root: Path):
    return (
        finding.rule, os.path.relpath(finding.file, root), finding.line, finding.rank, tuple(finding.ranks),
        finding.count, finding.severity, finding.role, finding.title, tuple(finding.evidence),
    )
