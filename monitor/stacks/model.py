"""The stacks of a job as plain data: each rank's threads and frames at one moment.

Light to import (``diagnose`` reads saved stacks): taking them (``capture.py``) needs psutil
and py-spy, reading them does not.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True, slots=True)
class Frame:
    function: str
    file: str       # as py-spy gives it (absolute when the target knows it)
    line: int

    def short(self) -> str:
        return f"{self.function} ({Path(self.file).name}:{self.line})"


@dataclass(slots=True)
class Thread:
    name: str
    thread_id: int        # the OS thread id
    frames: list[Frame] = field(default_factory=list)  # innermost first, as py-spy prints them


@dataclass(slots=True)
class ProcessStack:
    pid: int
    rank: int | None
    command: str                  # the command line, credentials masked
    threads: list[Thread] = field(default_factory=list)
    error: str = ""               # why there is no stack (StackError's line)
    error_kind: str = ""
    took_s: float = 0.0           # how long py-spy took for this process

    def error_line(self) -> str:
        """Why there is no stack, naming the rank (the error names the pid already)."""
        return f"rank {self.rank}: {self.error}" if self.rank is not None else self.error

    def main_thread(self) -> Thread | None:
        """The thread that runs the training loop: Python's main thread."""
        for thread in self.threads:
            if thread.name == "MainThread" or thread.thread_id == self.pid:
                return thread
        return self.threads[0] if self.threads else None


@dataclass(slots=True)
class Capture:
    """Every rank's stack at one moment."""

    taken: float                  # wall-clock time, seconds since the epoch
    trigger: str                  # why: "stall", "timeout", "request", ...
    host: str
    processes: list[ProcessStack] = field(default_factory=list)
    world_size: int | None = None
    took_s: float = 0.0
    problem: str = ""             # why nothing could be taken (no py-spy, no process), one line
    # How much of the run's log was written when it was taken (``monitor run``'s probe): what the
    # log says after it (training on) tells, after the run, whether the silence it was taken in passed.
    log_bytes: int | None = None

    def ranked(self) -> list[ProcessStack]:
        """The processes with a stack, by rank."""
        return sorted((p for p in self.processes if p.threads), key=lambda p: (p.rank is None, p.rank or 0, p.pid))
