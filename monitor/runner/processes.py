"""Finding and signalling every process of a job, including ranks that left its process group.

A job's processes are its process group (what torchrun starts shares it) plus every descendant
found by walking the tree: a rank or a DataLoader worker that called ``setsid`` is no longer in
the group but is still a descendant. The recorder is a child subreaper, so even processes that
double-forked away from their parent are re-parented under it and stay in the walk.
"""

from __future__ import annotations

import ctypes
import os
import signal

import psutil

_PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> bool:
    """Make orphaned descendants re-parent to this process instead of init (Linux only)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def descendants(pid: int) -> list[int]:
    """Pids of every live descendant of ``pid`` (not ``pid`` itself), parents first."""
    try:
        children = psutil.Process(pid).children(recursive=True)
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return []
    return [child.pid for child in children if _alive(child)]


def command_line(pid: int) -> str:
    """What ``pid`` runs, as ``ps`` shows it ("" once it is gone)."""
    try:
        process = psutil.Process(pid)
        return " ".join(process.cmdline()) or process.name()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return ""


def _alive(process: psutil.Process) -> bool:
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def signal_job(group: int, pids: list[int], signum: int) -> None:
    """Send ``signum`` once to every process: the job's process group, then each pid that has
    left it. (Twice would hurt: a second SIGINT interrupts the job's own clean-up handler.)"""
    try:
        os.killpg(group, signum)
    except (ProcessLookupError, PermissionError):
        pass
    for pid in pids:
        try:
            if os.getpgid(pid) != group:
                os.kill(pid, signum)
        except (ProcessLookupError, PermissionError):
            pass


def exit_status_code(status: int) -> int:
    """A ``waitpid`` status as a shell reports it: the exit code, or 128+N for signal N."""
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.waitstatus_to_exitcode(status)


def signal_name(code: int) -> str | None:
    """'SIGKILL' for exit code 137 and the like; None when the code is not 128+signal."""
    if code <= 128:
        return None
    try:
        return signal.Signals(code - 128).name
    except ValueError:
        return None
