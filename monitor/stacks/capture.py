"""Taking the stacks of a job's ranks at one moment: which processes are ranks, and their
Python stacks, taken in parallel (a dump of 8 ranks costs about as much as one).

Ranks come from RANK / WORLD_SIZE in /proc/PID/environ, read by the metrics' ``JobReader``. A
rank's DataLoader workers inherit its environment (``JobProcess.worker``): they are not dumped
(the rank's own stack shows it waiting for them).
"""

from __future__ import annotations

import socket
import time
from concurrent.futures import ThreadPoolExecutor

import psutil

from monitor.diagnosis.secrets import mask
from monitor.metrics.job import JobReader
from monitor.metrics.model import JobProcess
from monitor.stacks.model import Capture, ProcessStack
from monitor.stacks.pyspy import StackError, dump, find_py_spy

# Enough for a node of 8 GPUs many times over; a process tree this big is not a training job.
MAX_PROCESSES = 64
PARALLEL_DUMPS = 8


def job_processes(pids: list[int]) -> tuple[list[JobProcess], int | None, int]:
    """The processes to dump among ``pids``: each rank's own process (not its workers; ranks
    read as the metrics read them); when no process has a rank (a plain ``python train.py``),
    every Python process. Also the world size, and how many of ``pids`` are alive."""
    processes = JobReader(pids).read().processes
    chosen = [p for p in processes if p.rank is not None and not p.worker]
    if not chosen:
        chosen = [p for p in processes if "python" in p.name.lower()]
    sizes = [p.env["WORLD_SIZE"] for p in chosen if p.env.get("WORLD_SIZE", "").isdigit()]
    return chosen[:MAX_PROCESSES], int(sizes[0]) if sizes else None, len(processes)


def take(pids: list[int], trigger: str, py_spy: str | None = None, wall_clock=time.time, *,
         nonblocking: bool = False) -> Capture:
    """The stacks of the job whose processes are ``pids`` (launcher and descendants). Never
    raises: what could not be taken is said per process, or in ``problem``. ``nonblocking``:
    the ranks are not paused while read (``pyspy.dump``)."""
    started = time.monotonic()
    capture = Capture(taken=wall_clock(), trigger=trigger, host=socket.gethostname())
    py_spy = py_spy or find_py_spy()
    candidates, capture.world_size, alive = job_processes(pids)
    if not candidates:
        capture.problem = (f"no Python process among the job's {alive} running process{'es' if alive > 1 else ''}" if alive
                           else "no process of the job is running")
        return capture
    with ThreadPoolExecutor(max_workers=min(PARALLEL_DUMPS, len(candidates))) as pool:
        capture.processes = list(pool.map(lambda c: _take_one(c, py_spy, nonblocking), candidates))
    capture.took_s = time.monotonic() - started
    if not any(p.threads for p in capture.processes):
        capture.problem = _common_problem(capture.processes)
    return capture


def _take_one(process: JobProcess, py_spy: str | None, nonblocking: bool = False) -> ProcessStack:
    stack = ProcessStack(process.pid, process.rank, _command(process))
    started = time.monotonic()
    try:
        stack.threads = dump(process.pid, py_spy, nonblocking=nonblocking)
    except StackError as exc:
        stack.error, stack.error_kind = str(exc), exc.kind
    stack.took_s = time.monotonic() - started
    return stack


def _command(process: JobProcess) -> str:
    """The command line, credentials masked (the process name when it cannot be read)."""
    try:
        return mask(" ".join(psutil.Process(process.pid).cmdline())) or process.name
    except psutil.Error:
        return process.name


def _common_problem(processes: list[ProcessStack]) -> str:
    """One line for a capture that got no stack: the first error (they are alike: no py-spy,
    no permission), with how many processes it concerned."""
    first = processes[0]
    return first.error if len(processes) == 1 else f"{first.error} (and {len(processes) - 1} more processes)"
