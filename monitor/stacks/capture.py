"""Taking the stacks of a job's ranks at one moment: which processes are ranks, and their
Python stacks, taken in parallel (a dump of 8 ranks costs about as much as one).

Ranks come from RANK / LOCAL_RANK / WORLD_SIZE in /proc/PID/environ, as the metrics read them.
A rank's DataLoader workers inherit its environment: the rank is the topmost process of its
RANK; its workers are not dumped (the rank's own stack shows it waiting for them).
"""

from __future__ import annotations

import socket
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import psutil

from monitor.diagnosis.secrets import mask
from monitor.stacks.pyspy import StackError, Thread, dump, find_py_spy

# Enough for a node of 8 GPUs many times over; a process tree this big is not a training job.
MAX_PROCESSES = 64
PARALLEL_DUMPS = 8


@dataclass(slots=True)
class ProcessStack:
    pid: int
    rank: int | None
    command: str                  # the command line, credentials masked
    threads: list[Thread] = field(default_factory=list)
    error: str = ""               # why there is no stack (StackError's line)
    error_kind: str = ""
    took_s: float = 0.0           # how long py-spy took for this process

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

    def ranked(self) -> list[ProcessStack]:
        """The processes with a stack, by rank."""
        return sorted((p for p in self.processes if p.threads), key=lambda p: (p.rank is None, p.rank or 0, p.pid))


@dataclass(slots=True)
class _Candidate:
    pid: int
    ppid: int
    rank: int | None
    world_size: int | None
    command: str


def job_processes(pids: list[int]) -> tuple[list[_Candidate], int | None]:
    """The processes to dump among ``pids``: the topmost process of each rank; when no process
    has a rank (a plain ``python train.py``), every Python process. Also the world size."""
    candidates = [c for pid in pids if (c := _candidate(pid)) is not None]
    ranked = [c for c in candidates if c.rank is not None]
    if ranked:
        by_pid = {c.pid: c for c in ranked}
        chosen = [c for c in ranked if not (c.ppid in by_pid and by_pid[c.ppid].rank == c.rank)]
    else:
        chosen = [c for c in candidates if "python" in c.command.split(" ", 1)[0].lower()]
    world = next((c.world_size for c in chosen if c.world_size), None)
    return chosen[:MAX_PROCESSES], world


def _candidate(pid: int) -> _Candidate | None:
    try:
        process = psutil.Process(pid)
        command = " ".join(process.cmdline()) or process.name()
        ppid = process.ppid()
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return None
    except psutil.AccessDenied:
        return _Candidate(pid, 0, None, None, "?")
    try:
        env = process.environ()
    except (psutil.AccessDenied, psutil.NoSuchProcess, psutil.ZombieProcess):
        env = {}
    return _Candidate(pid, ppid, _int(env.get("RANK")), _int(env.get("WORLD_SIZE")), mask(command))


def take(pids: list[int], trigger: str, py_spy: str | None = None, wall_clock=time.time) -> Capture:
    """The stacks of the job whose processes are ``pids`` (launcher and descendants). Never
    raises: what could not be taken is said per process, or in ``problem``."""
    started = time.monotonic()
    capture = Capture(taken=wall_clock(), trigger=trigger, host=socket.gethostname())
    py_spy = py_spy or find_py_spy()
    candidates, capture.world_size = job_processes(pids)
    if not candidates:
        capture.problem = "no process of the job is running"
        return capture
    with ThreadPoolExecutor(max_workers=min(PARALLEL_DUMPS, len(candidates))) as pool:
        capture.processes = list(pool.map(lambda c: _take_one(c, py_spy), candidates))
    capture.took_s = time.monotonic() - started
    if not any(p.threads for p in capture.processes):
        capture.problem = _common_problem(capture.processes)
    return capture


def _take_one(candidate: _Candidate, py_spy: str | None) -> ProcessStack:
    stack = ProcessStack(candidate.pid, candidate.rank, candidate.command)
    started = time.monotonic()
    try:
        stack.threads = dump(candidate.pid, py_spy)
    except StackError as exc:
        stack.error, stack.error_kind = str(exc), exc.kind
    stack.took_s = time.monotonic() - started
    return stack


def _common_problem(processes: list[ProcessStack]) -> str:
    """One line for a capture that got no stack: the first error (they are alike: no py-spy,
    no permission), with how many processes it concerned."""
    first = processes[0]
    return first.error if len(processes) == 1 else f"{first.error} (and {len(processes) - 1} more processes)"


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None
