"""One process's Python stack through ``py-spy dump --json`` (the PyPI package's binary).

py-spy reads the target's memory with ptrace: the process is paused only while its stack is
read (milliseconds). Whatever goes wrong is one line saying what to do (``StackError``), never
an exception out of here.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from monitor.stacks.model import Frame, Thread

# A dump takes about 0.1 s; a process that does not answer in this long is not waited for.
DUMP_TIMEOUT_S = 10.0
INSTALL = "pip install py-spy"
CHOSEN_BINARY = "MONITOR_PY_SPY"
# Yama's ptrace_scope=1 (Ubuntu's default) lets only an ancestor, or CAP_SYS_PTRACE, attach.
PERMISSION_FIX = (
    "run it as the job's user from the process that launched the job (`monitor run` does), or "
    "as root; in a container add --cap-add SYS_PTRACE; or allow ptrace for the user with "
    "`sudo sysctl kernel.yama.ptrace_scope=0`"
)


class StackError(Exception):
    """Why a stack could not be taken, one line with the fix. ``kind``: "missing" (no py-spy),
    "permission", "gone" (the process ended), "not-python", "timeout", "failed"."""

    def __init__(self, message: str, kind: str) -> None:
        super().__init__(message)
        self.kind = kind


def find_py_spy() -> str | None:
    """The py-spy binary: ``$MONITOR_PY_SPY`` (one given ptrace rights with setcap, say), else on
    PATH, else beside this Python (a venv not activated)."""
    if chosen := os.environ.get(CHOSEN_BINARY):
        return chosen
    found = shutil.which("py-spy")
    if found:
        return found
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.is_file() and os.access(beside, os.X_OK) else None


def dump(pid: int, py_spy: str | None, timeout: float = DUMP_TIMEOUT_S, *, nonblocking: bool = False) -> list[Thread]:
    """The Python threads of ``pid``; raises StackError. ``nonblocking``: read the stack without
    pausing the process (a sampler's many looks at a healthy job; a stack read while it changes
    may come out wrong, or fail, now and then)."""
    if py_spy is None:
        raise StackError(f"py-spy is not installed, so no stacks can be taken: {INSTALL}", "missing")
    try:
        result = subprocess.run(
            [py_spy, "dump", "--pid", str(pid), "--json", *(["--nonblocking"] if nonblocking else [])],
            capture_output=True, timeout=timeout,
            env={**os.environ, "RUST_BACKTRACE": "0"}, stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        raise StackError(f"py-spy did not answer within {timeout:g} s for pid {pid}", "timeout") from None
    except OSError as exc:
        raise StackError(f"cannot run {py_spy}: {exc.strerror or exc} ({INSTALL}, or set {CHOSEN_BINARY} to "
                         "the py-spy binary)", "missing") from None
    if result.returncode != 0:
        raise _error(pid, result.stderr.decode("utf-8", "replace"))
    try:
        threads = json.loads(result.stdout)
        return [_thread(thread) for thread in threads]
    except (ValueError, TypeError, KeyError) as exc:
        raise StackError(f"py-spy gave an unreadable stack for pid {pid} ({exc})", "failed") from None


def _thread(data: dict) -> Thread:
    frames = [Frame(str(f.get("name") or "?"), str(f.get("filename") or "?"), int(f.get("line") or 0))
              for f in data.get("frames") or []]
    return Thread(name=str(data.get("thread_name") or ""), thread_id=int(data.get("os_thread_id") or data.get("thread_id") or 0),
                  frames=frames)


def _error(pid: int, stderr: str) -> StackError:
    text = stderr.lower()
    if "permission denied" in text or "operation not permitted" in text:
        return StackError(f"not permitted to read the stack of pid {pid}: {PERMISSION_FIX}", "permission")
    if "python version" in text or "python interpreter" in text:
        return StackError(f"pid {pid} is not a Python process", "not-python")
    if "no such file" in text or "process is running" in text or "no such process" in text:
        return StackError(f"pid {pid} has ended", "gone")
    first = next((line.strip() for line in stderr.splitlines() if line.strip()), "no message")
    return StackError(f"py-spy failed on pid {pid}: {first}", "failed")
