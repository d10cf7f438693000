"""Recording the rest of a job whose recorder was killed.

The recorder is the one process the job's output depends on: if it were killed (``kill -9``)
while nobody else held the read end of the job's pipe, the job would die of SIGPIPE at its next
write. So the monitor opens the job's output channel itself, hands it to the recorder, and keeps
a copy of the read end that it does not read. If the recorder dies before the job ended, the
monitor (a subreaper, so the orphaned job is re-parented to it) reads the rest into the same log,
after one line saying so, and reaps the job for its real exit status.

Nothing is missing then: the recorder moves bytes with splice(2) from the job's output into a holding
pipe and from there into the log, so each is in the log, in the holding pipe (whose read end we hold
too, and empty first) or still in the job's output (log_writer.py). Only where the recorder had to fall
back to reading and writing (``may_miss``) can what it had read and not yet written be missing, and
the line says so.
"""

from __future__ import annotations

import errno
import os
import select
import time
from pathlib import Path

from monitor.files import open_to_append, why
from monitor.runner.processes import exit_status_code
from monitor.runner.log_writer import monitor_line
from monitor.runner.recorder import CHUNK, write_fully

# After the job exited, how long to keep reading for what its leftovers still write.
LINGER_S = 5.0


def takeover_marker(recorder_pid: int, how: str, line_open: bool, may_miss: bool) -> bytes:
    missing = " (output the recorder had read but not written may be missing)" if may_miss else ""
    return monitor_line(f"the recorder (pid {recorder_pid}) {how}; the monitor records the job's output from "
                        f"here{missing}", line_open)


def record_rest(log_path: Path, read_fd: int, job_pid: int, recorder_pid: int, how: str,
                hold_fd: int | None = None, may_miss: bool = False) -> dict:
    """Append what the holding pipe ``hold_fd`` (None: none) still holds, then the job's remaining
    output, to ``log_path`` until its end, reap the job, and return what the recorder would have
    written: ``exit_code`` (128+N for signal N; absent when the job could not be reaped here),
    ``ended``, ``recorder_killed`` and any ``log_error``."""
    state: dict = {"recorder_killed": how}
    try:
        log_fd = open_to_append(log_path)  # a link put in the log's place is refused, not followed
    except OSError as exc:
        # Still read to the end: the job must not die of SIGPIPE because its log is gone.
        log_fd = None
        state["log_error"] = f"{log_path}: {why(exc)}"
    try:
        if hold_fd is not None:
            # The recorder held these (its end of the pipe is closed now): they come first.
            while held := os.read(hold_fd, CHUNK):
                _append(log_fd, held, log_path, state)
        if log_fd is not None:
            write_fully(log_fd, takeover_marker(recorder_pid, how, _ends_mid_line(log_path), may_miss))
        status = _pump(read_fd, log_fd, log_path, job_pid, state)
    finally:
        if log_fd is not None:
            os.close(log_fd)
        os.close(read_fd)
        if hold_fd is not None:
            os.close(hold_fd)
    if status is None:
        status = _reap(job_pid, block=True)
    if status is not None:  # else not our child (no subreaper): Job falls back to "recorder lost"
        state["exit_code"] = exit_status_code(status)
    state["ended"] = time.time()
    return state


def _pump(read_fd: int, log_fd: int | None, log_path: Path, job_pid: int, state: dict) -> int | None:
    """Read until the end of output (or LINGER_S after the job exited), appending it to
    ``log_fd`` (None: no log, the output is only drained); the job's wait status if it was
    reaped meanwhile."""
    poller = select.poll()
    poller.register(read_fd, select.POLLIN)
    status = None
    gone_at = None
    while gone_at is None or time.monotonic() - gone_at < LINGER_S:
        if poller.poll(200):
            try:
                chunk = os.read(read_fd, CHUNK)
            except OSError as exc:
                if exc.errno != errno.EIO:  # EIO: every holder of the pty slave closed it
                    raise
                chunk = b""
            if not chunk:
                break
            _append(log_fd, chunk, log_path, state)
        if status is None and (status := _reap(job_pid, block=False)) is not None:
            gone_at = time.monotonic()
    return status


def _append(log_fd: int | None, data: bytes, log_path: Path, state: dict) -> None:
    if log_fd is not None:
        _, error = write_fully(log_fd, data)
        if error is not None and "log_error" not in state:
            state["log_error"] = f"{log_path}: {error.strerror}"


def _reap(pid: int, block: bool) -> int | None:
    """The job's wait status once it exited (we are its parent now, as subreaper), else None."""
    try:
        reaped, status = os.waitpid(pid, 0 if block else os.WNOHANG)
    except ChildProcessError:
        return None  # not our child: reaped elsewhere, or no subreaper on this system
    return status if reaped == pid else None


def _ends_mid_line(path: Path) -> bool:
    try:
        with open(path, "rb") as handle:
            handle.seek(-1, os.SEEK_END)
            return handle.read(1) != b"\n"
    except OSError:
        return False
