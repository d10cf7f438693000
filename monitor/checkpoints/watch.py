"""``monitor run --watch-ckpt DIR``: check each new checkpoint once it is complete.

A file counts as complete when no process of the job has it open for writing and its size and
modification time stayed the same over ``settle_polls`` scans. Each complete version of a file
is checked once (a ``last.pt`` rewritten every epoch is checked every time). While a file is
still being written, another process of the job opening it for reading is the classic
checkpoint race (rank 1 loads what rank 0 has half written): that is reported as it happens.
Scans run one after another on a thread (the next starts after the last finished).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path

import psutil

from monitor.checkpoints.verify import SUFFIXES, CheckResult, check_checkpoint
from monitor.diagnosis.advice import advice
from monitor.model import Category, Finding

# Checkpoints up to this size get every CRC checked; bigger ones only their structure (which
# already catches truncation), so the check never competes with training for minutes of I/O.
DEEP_CHECK_MAX_BYTES = 1 << 30

def _finding(rule: str, title: str, path: Path, remedy: str, evidence: list[str], **fields: str) -> Finding:
    return Finding(rule=rule, category=Category.CORRUPT_CHECKPOINT, severity="warning", role="root",
                   title=title, file=str(path), evidence=evidence, fields={"path": str(path), **fields},
                   remedy=remedy, origin="checkpoint")


def bad_checkpoint_finding(result: CheckResult) -> Finding:
    return _finding("ckpt-watch-bad", advice("title-checkpoint-bad", name=result.path.name, detail=result.detail),
                    result.path, advice("checkpoint-bad", path=str(result.path), atomic=advice("atomic-save")),
                    [result.line()])


class CheckpointWatcher:
    def __init__(self, dirs: list[Path], on_finding: Callable[[Finding], None], since: float,
                 job_pids: Callable[[], list[int]] = list, poll_s: float = 1.0,
                 settle_polls: int = 2) -> None:
        self.dirs = [Path(d) for d in dirs]
        self.on_finding = on_finding
        self.since = since
        self.job_pids = job_pids
        self.poll_s = poll_s
        self.settle_polls = settle_polls
        self.checked: dict[Path, CheckResult] = {}
        self._seen: dict[Path, tuple[tuple[int, int], int]] = {}  # path -> (signature, stable scans)
        self._done: dict[Path, tuple[int, int]] = {}              # path -> signature checked
        self._raced: set[tuple[Path, int]] = set()
        self._findings: list[Finding] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="ckpt-watch", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop watching; files that never settled are checked now (the job is over)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        self.scan(final=True)

    def findings(self) -> list[Finding]:
        return list(self._findings)

    def _loop(self) -> None:
        try:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)  # this thread only (Linux)
        except (OSError, AttributeError):
            pass
        while not self._stop.wait(self.poll_s):
            self.scan()

    def _candidates(self) -> dict[Path, tuple[int, int]]:
        found = {}
        for directory in self.dirs:
            if not directory.is_dir():
                continue
            for path in directory.rglob("*"):
                if path.suffix not in SUFFIXES:
                    continue
                try:
                    stat = path.stat()
                except OSError:
                    continue
                if stat.st_mtime >= self.since - 1 and path.is_file():
                    found[path] = (stat.st_size, stat.st_mtime_ns)
        return found

    def _open_by_job(self) -> dict[Path, list[tuple[int, str]]]:
        """Checkpoint files the job has open: path -> [(pid, mode)]."""
        opened: dict[Path, list[tuple[int, str]]] = {}
        for pid in self.job_pids():
            try:
                files = psutil.Process(pid).open_files()
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
            for f in files:
                path = Path(f.path)
                if path.suffix in SUFFIXES:
                    opened.setdefault(path, []).append((pid, getattr(f, "mode", "r")))
        return opened

    def scan(self, final: bool = False) -> None:
        candidates = self._candidates()
        pending = {p: sig for p, sig in candidates.items() if self._done.get(p) != sig}
        if not pending:
            return
        opened = {} if final else self._open_by_job()
        for path, signature in pending.items():
            holders = opened.get(path.resolve(), [])
            writers = [pid for pid, mode in holders if mode != "r"]
            readers = [pid for pid, mode in holders if mode == "r" and pid not in writers]
            if writers and readers and (path, signature[1]) not in self._raced:
                self._raced.add((path, signature[1]))
                self._report(_finding(
                    "ckpt-read-while-writing",
                    advice("title-checkpoint-race", name=path.name),
                    path, advice("checkpoint-race", readers=", ".join(map(str, readers)), path=str(path),
                                 writers=", ".join(map(str, writers)), atomic=advice("atomic-save")),
                    [f"writer pids {writers}", f"reader pids {readers}", f"size {signature[0]}"]))
            previous, stable = self._seen.get(path, (None, 0))
            stable = stable + 1 if previous == signature else 0
            self._seen[path] = (signature, stable)
            if final or (not writers and stable >= self.settle_polls):
                self._check(path, signature)

    def _check(self, path: Path, signature: tuple[int, int]) -> None:
        result = check_checkpoint(path, deep=signature[0] <= DEEP_CHECK_MAX_BYTES)
        try:
            stat = path.stat()
            changed = (stat.st_size, stat.st_mtime_ns) != signature
        except OSError:
            return  # gone (renamed or rotated away): nothing to say about it
        if changed:
            return  # still being written after all: check the next settled version
        self._done[path] = signature
        self.checked[path] = result
        if not result.ok:
            self._report(bad_checkpoint_finding(result))

    def _report(self, finding: Finding) -> None:
        self._findings.append(finding)
        self.on_finding(finding)
