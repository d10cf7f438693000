"""The recorder: a small detached process that owns the job's output and writes the log file.

``monitor run`` starts it in a session of its own (``job.RECORDER_BOOT``); it starts the job,
moves every byte from the job's pipe or pseudo-terminal into the log file unchanged (log_writer.py:
never held only in its memory) and, in headless mode, copies the bytes to its own stdout: to a
regular file (SLURM's .out) in the read loop, every byte like the log; to a terminal, pipe or socket
from a separate thread that drops output rather than ever blocking the read loop. Because the recorder, not the
monitor, is the job's parent and holds its output, the job keeps running and logging when the
monitor or its UI dies (even by SIGKILL), and the exit status is still written to the state file.

Signals: SIGTERM, SIGINT or SIGHUP sent to the recorder are passed on to the whole job (its
process group and every descendant); if the job is still there after ``--grace`` seconds, or a
second such signal arrives, everything left gets SIGKILL. The recorder ignores nothing itself so
that the job inherits default signal dispositions.
"""

from __future__ import annotations

import argparse
import errno
import fcntl
import json
import os
import queue
import select
import signal
import stat
import struct
import subprocess
import sys
import termios
import threading
import time
import tty
from pathlib import Path

from monitor.diagnosis.secrets import mask_data
from monitor.files import open_read_write, replace_file, why
from monitor.runner.log_writer import LogWriter, monitor_line
from monitor.runner.processes import become_subreaper, command_line, descendants, exit_status_code, signal_job

CHUNK = 1 << 20
# From a pseudo-terminal: splice allocates pages for the whole count on each call, and a tty hands
# over at most its 4 KiB line buffer at a time.
TERMINAL_CHUNK = 64 << 10
# A bigger pipe lets the job write more before it waits for us (Linux F_SETPIPE_SZ).
PIPE_BYTES = 1 << 20
# Reaping and deadline checks run at most this often, not once per chunk read.
HOUSEKEEPING_S = 0.1
# Terminal copy: at most this many chunks wait for a slow terminal; beyond that they are dropped.
TEE_QUEUE_CHUNKS = 256
# A file on a network file system (SLURM's .out on Lustre or NFS) can stall a write for as long
# as its server does: it is written from a thread too, with this much allowed to wait.
NETWORK_COPY_BYTES = 256 << 20
NETWORK_FILE_SYSTEMS = ("nfs", "nfs4", "lustre", "gpfs", "cifs", "smb3", "smbfs", "beegfs", "ceph",
                        "glusterfs", "fuse.glusterfs", "fuse.sshfs", "9p", "afs", "panfs", "wekafs")
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
# The exit code when the log cannot be opened and the job is therefore not started: the one
# `monitor run` has when it cannot write its log folder at all.
NO_LOG_EXIT = 2


def write_state(path: Path, state: dict) -> str | None:
    """Replace a JSON side file atomically (``files.replace_file``), credentials in it (the job's
    command line, environment) masked. Never raises: returns None or one line saying why not."""
    return replace_file(path, json.dumps(mask_data(state), indent=1, default=str).encode())


def destination_name(fd: int) -> str:
    """What our stdout is, as the end message names it ("the pipe", "the terminal")."""
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return "the output"
    if stat.S_ISREG(mode):
        return "the file"
    if stat.S_ISFIFO(mode):
        return "the pipe"
    if stat.S_ISSOCK(mode):
        return "the socket"
    if stat.S_ISCHR(mode):
        return "the terminal" if os.isatty(fd) else "the device"
    return "the output"


def open_output(use_pty: bool, winsize: str | None = None) -> tuple[int, int]:
    """The job's output channel (read end, write end): a pseudo-terminal in raw mode, or a pipe
    enlarged to PIPE_BYTES."""
    if not use_pty:
        return open_pipe()
    read_fd, write_fd = os.openpty()
    # Raw mode: no output processing (ONLCR would turn \n into \r\n), no echo, no signals.
    tty.setraw(write_fd)
    if winsize:
        rows, cols = (int(x) for x in winsize.split("x"))
        fcntl.ioctl(write_fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    return read_fd, write_fd


def open_pipe() -> tuple[int, int]:
    """A pipe (read end, write end) enlarged to PIPE_BYTES: the job's output channel, or the
    holding pipe its output passes through on its way to the log (log_writer.py)."""
    read_fd, write_fd = os.pipe()
    try:
        fcntl.fcntl(write_fd, getattr(fcntl, "F_SETPIPE_SZ", 1031), PIPE_BYTES)
    except OSError:
        pass  # over the system's pipe-max-size: the default pipe still works
    return read_fd, write_fd


def write_fully(fd: int, data: bytes) -> tuple[int, OSError | None]:
    """Writes all of ``data`` (a write may take only part); on an error, the bytes left and it."""
    view = memoryview(data)
    try:
        while view:
            view = view[os.write(fd, view):]
    except OSError as exc:
        return len(view), exc
    return 0, None


def gap_marker(dropped: int, log: str, line_open: bool) -> bytes:
    """The line put in the copy (never in the log) where bytes were left out."""
    return monitor_line(f"{dropped} bytes not shown here; all are in {log}", line_open)


class FileCopy:
    """Copies chunks to a regular file in the read loop itself, like the log: every byte, in
    order. A file on a local disk never waits for a reader, so this cannot stall the job (on
    a network file system it can: ``open_copy`` uses a ``QueuedCopy`` there)."""

    destination = "the file"

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.dropped_bytes = 0
        self.error: str | None = None

    def put(self, chunk: bytes) -> None:
        if self.error is not None:
            self.dropped_bytes += len(chunk)
            return
        left, error = write_fully(self.fd, chunk)
        if error is not None:
            # Disk full or similar: the log still has everything; stop here rather than leave holes.
            self.error = error.strerror
            self.dropped_bytes += left

    def miss(self, count: int) -> None:
        """``count`` bytes the copy will not get (the log has them)."""
        self.dropped_bytes += count

    def close(self, timeout: float) -> None:
        """Nothing waits: every byte was written in the read loop."""


class QueuedCopy:
    """Copies chunks to a terminal, pipe or socket from its own thread: a stopped reader (Ctrl-S,
    a full pipe) would block a write, so chunks are dropped when it falls behind, and the copy
    gets one marker line where they are missing."""

    def __init__(self, fd: int, destination: str, log: str, max_bytes: int | None = None) -> None:
        """``max_bytes``: bound what waits by bytes (a file) instead of by chunks (a terminal)."""
        self.fd = fd
        self.destination = destination
        self.log = log
        self.dropped_bytes = 0
        self.error: str | None = None
        self._max_bytes = max_bytes
        self._waiting_bytes = 0
        self._lock = threading.Lock()
        # (bytes dropped just before this chunk, the chunk); chunk None: the end.
        self._queue: queue.Queue[tuple[int, bytes | None]] = queue.Queue(0 if max_bytes else TEE_QUEUE_CHUNKS)
        self._gap = 0  # dropped since the last chunk that made it into the queue
        self._unwritten = 0  # of the chunk whose write failed (counted by close, not the thread)
        self._thread = threading.Thread(target=self._copy, name="tee", daemon=True)
        self._thread.start()

    def put(self, chunk: bytes) -> None:
        if self.error is None:
            try:
                if self._max_bytes is not None:
                    with self._lock:
                        if self._waiting_bytes + len(chunk) > self._max_bytes:
                            raise queue.Full
                        self._waiting_bytes += len(chunk)
                self._queue.put_nowait((self._gap, chunk))
                self._gap = 0
                return
            except queue.Full:
                self._gap += len(chunk)
        self.dropped_bytes += len(chunk)

    def miss(self, count: int) -> None:
        """``count`` bytes the copy will not get (the log has them): marked where they are missing."""
        self._gap += count
        self.dropped_bytes += count

    def close(self, timeout: float) -> None:
        """Let the reader catch up for at most ``timeout`` seconds, then give up on it (what
        it did not get counts as dropped)."""
        deadline = time.monotonic() + timeout
        try:
            if self.error is None:
                self._queue.put((self._gap, None), timeout=timeout)
        except queue.Full:
            pass
        self._thread.join(max(0.0, deadline - time.monotonic()))
        self.dropped_bytes += self._unwritten
        while True:
            try:
                _, chunk = self._queue.get_nowait()
            except queue.Empty:
                return
            self.dropped_bytes += len(chunk or b"")

    def _copy(self) -> None:
        line_open = False  # the last byte written was not a newline
        while True:
            gap, chunk = self._queue.get()
            data = chunk or b""
            out = (gap_marker(gap, self.log, line_open) if gap else b"") + data
            left, error = write_fully(self.fd, out)
            if error is not None:
                # Reader gone (closed window, EIO, EPIPE): stop copying, keep recording.
                self._unwritten = min(left, len(data))
                self.error = error.strerror
                return
            if out:
                line_open = not out.endswith(b"\n")
            if self._max_bytes is not None:
                with self._lock:
                    self._waiting_bytes -= len(data)
            if chunk is None:
                return


def open_copy(fd: int, log: str) -> FileCopy | QueuedCopy:
    """The headless copy of the output to ``fd``: written in step where that is safe (a file
    on a local disk), else from a thread that drops what waits too long."""
    destination = destination_name(fd)
    if destination != FileCopy.destination:
        return QueuedCopy(fd, destination, log)
    if on_network_file_system(fd):
        return QueuedCopy(fd, destination, log, max_bytes=NETWORK_COPY_BYTES)
    return FileCopy(fd)


def on_network_file_system(fd: int) -> bool:
    """Whether the file open at ``fd`` lies on a network file system (its mount's type)."""
    import psutil

    try:
        path = os.path.realpath(f"/proc/self/fd/{fd}")
        mounts = psutil.disk_partitions(all=True)
    except OSError:
        return False
    best = max((m for m in mounts if path == m.mountpoint or path.startswith(m.mountpoint.rstrip("/") + "/")),
               key=lambda m: len(m.mountpoint), default=None)
    return best is not None and best.fstype in NETWORK_FILE_SYSTEMS


class Recorder:
    """The recording process: starts the job, copies every byte it prints to the log and the
    terminal, and keeps its state file (the job's pid, its exit) for the monitor."""

    def __init__(self, opts: argparse.Namespace) -> None:
        self.opts = opts
        self.state_path = Path(opts.state)
        self.state: dict = {"recorder_pid": os.getpid(), "command": opts.command}
        self.job: subprocess.Popen | None = None
        self.job_status: int | None = None
        self.stop_signal: int | None = None
        self.stop_at = 0.0
        self.killed = False
        self.log: LogWriter | None = None

    # -- signals ---------------------------------------------------------------------------
    def on_stop_signal(self, signum: int, _frame) -> None:
        if self.stop_signal is not None:
            self.kill_all()
            return
        self.stop_signal = signum
        self.stop_at = time.monotonic()
        self.state["stop_signal"] = signal.Signals(signum).name
        if self.job is not None:  # otherwise start() passes it on as soon as the job exists
            signal_job(self.job.pid, descendants(os.getpid()), signum)

    def kill_all(self) -> None:
        self.killed = True
        self.state["killed"] = True
        if self.job is not None:
            signal_job(self.job.pid, descendants(os.getpid()), signal.SIGKILL)

    # -- the job -----------------------------------------------------------------------------
    def start(self) -> int | None:
        """Open the log, then start the job; return the read end of its output, or None when
        either could not be done (the state says why)."""
        if self.opts.output_fds:
            read_fd, write_fd = (int(fd) for fd in self.opts.output_fds.split(","))
        else:
            read_fd, write_fd = open_output(self.opts.pty, self.opts.winsize)
        if self.opts.hold_fds:
            hold_read, hold_write = (int(fd) for fd in self.opts.hold_fds.split(","))
        else:
            hold_read, hold_write = open_pipe()
        try:
            # Before the job: a log that cannot be written (a link put at its name) is one line
            # and no job, never a job whose output goes nowhere or through the link.
            self.log = LogWriter(open_read_write(Path(self.opts.log)), (hold_read, hold_write), self.note_fallback)
        except OSError as exc:
            self.not_started(read_fd, write_fd, f"cannot write the log {self.opts.log}: {why(exc)}", NO_LOG_EXIT)
            return None
        try:
            # stdin: ours, which the monitor gives us (its own when headless, else /dev/null).
            self.job = subprocess.Popen(
                self.opts.command, stdout=write_fd, stderr=write_fd, start_new_session=True,
            )
        except OSError as exc:
            os.close(self.log.fd)
            code = 126 if isinstance(exc, PermissionError) else 127
            self.not_started(read_fd, write_fd, f"cannot start {self.opts.command[0]}: {exc.strerror}", code)
            return None
        os.close(write_fd)
        self.state.update(job_pid=self.job.pid, started=time.time(), pty=bool(self.opts.pty))
        self.save_state()
        if self.stop_signal is not None:  # asked to stop while the job was starting
            signal_job(self.job.pid, [], signal.SIGKILL if self.killed else self.stop_signal)
        return read_fd

    def not_started(self, read_fd: int, write_fd: int, error: str, code: int) -> None:
        os.close(write_fd)
        os.close(read_fd)
        self.state.update(error=error, exit_code=code, ended=time.time())
        self.save_state(final=True)

    def reap(self) -> None:
        """Collect every exited child: the job itself and orphans re-parented to us."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if self.job is not None and pid == self.job.pid:
                self.job_status = status
                self.job.returncode = exit_status_code(status)
                self.state["job_exited"] = time.time()

    def enforce_deadlines(self, job_gone_at: float | None) -> bool:
        """Escalate a stop, and clear out leftovers after the job ended. True: stop reading."""
        now = time.monotonic()
        if self.stop_signal is not None and not self.killed and now - self.stop_at > self.opts.grace:
            self.kill_all()
        if job_gone_at is None:
            return False
        left = descendants(os.getpid())
        if left and not self.killed and now - job_gone_at > self.opts.linger:
            # The launcher is gone but something it started still holds the output open: named
            # while they are there, for the monitor to say what it stopped.
            if "leftovers" not in self.state:
                self.state["leftovers"] = [{"pid": pid, "command": command_line(pid)} for pid in left]
            if self.stop_signal is None:
                assert self.job is not None  # the job's end was seen (job_gone_at), so it was started
                self.stop_signal, self.stop_at = signal.SIGTERM, now
                signal_job(self.job.pid, left, signal.SIGTERM)
        # Nothing alive can write any more, yet no end of file: stop waiting for it.
        return not left and now - job_gone_at > self.opts.linger + self.opts.grace

    # -- the pump ----------------------------------------------------------------------------
    def pump(self, read_fd: int) -> None:
        log = self.log
        assert log is not None  # start() opened it before it returned the read end
        tee = open_copy(sys.stdout.fileno(), self.opts.log) if self.opts.tee else None
        poller = select.poll()
        poller.register(read_fd, select.POLLIN)
        job_gone_at: float | None = None
        total = 0
        next_housekeeping = 0.0
        while True:
            if poller.poll(200):
                try:
                    moved, chunk = log.take(read_fd, TERMINAL_CHUNK if self.opts.pty else CHUNK, copy=tee is not None)
                except OSError as exc:
                    if exc.errno != errno.EIO:  # EIO: every holder of the pty slave closed it
                        raise
                    moved = 0
                if not moved:
                    break
                total += moved
                if tee:
                    tee.put(chunk)
                    if len(chunk) < moved:  # in the log, but it could not be read back
                        tee.miss(moved - len(chunk))
            if time.monotonic() < next_housekeeping:
                continue
            next_housekeeping = time.monotonic() + HOUSEKEEPING_S
            self.note_log_faults()
            log.follow_truncation()
            self.reap()
            if job_gone_at is None and self.job_status is not None:
                job_gone_at = time.monotonic()
            if self.enforce_deadlines(job_gone_at):
                break
        os.close(read_fd)
        os.close(log.fd)
        self.note_log_faults()
        if tee:
            tee.close(timeout=2.0)
            self.state.update(tee_destination=tee.destination, tee_dropped_bytes=tee.dropped_bytes)
            if tee.error:
                self.state["tee_error"] = tee.error
        self.state["bytes"] = total

    def note_log_faults(self) -> None:
        """Put the bytes lost to write errors into the state."""
        log = self.log
        assert log is not None
        if log.lost_total:
            self.state["log_lost_bytes"] = log.lost_total
        if log.error is not None and "log_error" not in self.state:
            self.state["log_error"] = f"{self.opts.log}: {log.error.strerror or log.error}"

    def note_fallback(self, why: str) -> None:
        """Saved before the first byte is read instead of spliced: a recorder killed from then on
        can lose what it read, and the monitor's takeover line must say so."""
        self.state["log_fallback"] = why
        self.save_state()

    def finish(self) -> int:
        """Wait for the job (it may have closed its output and still run), then record its end."""
        while self.job_status is None:
            self.reap()
            self.enforce_deadlines(None)  # a stop request still escalates while we wait
            time.sleep(HOUSEKEEPING_S)
        code = exit_status_code(self.job_status)
        self.reap()
        self.state.update(exit_code=code, ended=time.time())
        self.save_state(final=True)
        return code

    def save_state(self, final: bool = False) -> None:
        """Write the state file; the final state also goes down the status pipe to the monitor,
        so the job's exit code reaches it even when no file can be written (a full disk)."""
        if (error := write_state(self.state_path, self.state)) is not None:
            self.state["state_error"] = error
        if final and self.opts.status_fd is not None:
            try:
                write_fully(self.opts.status_fd, json.dumps(mask_data(self.state), default=str).encode() + b"\n")
                os.close(self.opts.status_fd)
            except OSError:
                pass  # the monitor is gone: the state file is all there is


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m monitor.runner.recorder")
    parser.add_argument("--log", required=True)
    parser.add_argument("--state", required=True)
    parser.add_argument("--tee", action="store_true")
    parser.add_argument("--pty", action="store_true")
    parser.add_argument("--winsize", help="ROWSxCOLS for the pseudo-terminal")
    parser.add_argument("--grace", type=float, default=10.0)
    parser.add_argument("--linger", type=float, default=5.0)
    parser.add_argument("--status-fd", type=int, help="a pipe to the monitor for the final state")
    parser.add_argument("--output-fds", metavar="READ,WRITE",
                        help="the job's output channel, opened by the monitor (which keeps a copy of the read end)")
    parser.add_argument("--hold-fds", metavar="READ,WRITE",
                        help="the holding pipe, opened by the monitor (which keeps a copy of the read end)")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    opts = parser.parse_args(argv)
    if opts.command[:1] == ["--"]:
        opts.command = opts.command[1:]
    if not opts.command:
        parser.error("no command given")
    return opts


def main(argv: list[str] | None = None) -> int:
    recorder = Recorder(parse_args(sys.argv[1:] if argv is None else argv))
    for signum in STOP_SIGNALS:
        signal.signal(signum, recorder.on_stop_signal)
    become_subreaper()
    read_fd = recorder.start()
    if read_fd is None:
        return recorder.state["exit_code"]
    recorder.pump(read_fd)
    return recorder.finish()


if __name__ == "__main__":
    raise SystemExit(main())
