"""The job's log file, written so that no byte is ever held only in the recorder's memory.

Bytes move from a pipe into the log with splice(2): the kernel takes from the pipe exactly what
it wrote to the file, so a recorder killed at any instant leaves every byte either in the log or
still in the pipe, where the monitor, which holds a copy of the pipe's read end, reads the rest
(takeover.py). A pseudo-terminal is not a pipe: the recorder first splices its output into a
holding pipe the monitor holds too, and from there into the log.

splice needs the log opened without O_APPEND, so this is the log's one writer and keeps its
offset. Where splice cannot be used (a file system without it, an old kernel, not Linux) the bytes
are read and written, and ``fallback`` says why: then a killed recorder loses what it had read
and not yet written. A write error (a full disk) never stops the draining: the job must not
block, so what cannot be written is read, counted and marked in the log once writing works again.
"""

from __future__ import annotations

import errno
import os

# splice's errors that mean "not here" rather than "this write failed".
NO_SPLICE = (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.EXDEV)


def monitor_line(note: str, line_open: bool) -> bytes:
    """``[monitor: note]`` as a line of its own (after a newline if the output stopped mid-line):
    the one form of everything the monitor ever adds to a job's output."""
    start = "\n" if line_open else ""
    # surrogateescape: a log path that is not UTF-8 comes back as the bytes it was made of.
    return f"{start}[monitor: {note}]\n".encode("utf-8", "surrogateescape")


def log_gap_marker(lost: int, reason: str, line_open: bool) -> bytes:
    """The line put in the log where bytes could not be written (a full disk), once writing
    works again: the log says where it is incomplete."""
    return monitor_line(f"{lost} bytes lost here: {reason}", line_open)


class LogWriter:
    def __init__(self, fd: int) -> None:
        """``fd``: the log, opened read-write without O_APPEND; writing continues at its end."""
        self.fd = fd
        self.offset = os.fstat(fd).st_size
        self.fallback: str | None = None if hasattr(os, "splice") else "splice(2) is not available here"
        # Bytes not written since the last write that worked (a full disk), and why.
        self.lost = 0
        self.lost_reason = ""
        self.lost_total = 0
        self.error: OSError | None = None  # the first write error

    def take(self, pipe_fd: int, count: int, copy: bool = False) -> tuple[int, bytes]:
        """Move at most ``count`` bytes (some must be waiting, or the end) from ``pipe_fd`` into
        the log. Returns how many left the pipe (0: its end) and, when ``copy``, those bytes."""
        if self.lost and not self._mark_gap():
            return self._drain(pipe_fd, count, None)
        if self.fallback is None:
            try:
                moved = os.splice(pipe_fd, self.fd, count, offset_dst=self.offset)
            except OSError as exc:
                if exc.errno not in NO_SPLICE:
                    return self._drain(pipe_fd, count, exc)
                self.fallback = f"splice(2) into the log failed: {exc.strerror}"
            else:
                data = os.pread(self.fd, moved, self.offset) if copy and moved else b""
                self.offset += moved
                return moved, data
        return self._read_and_write(pipe_fd, count)

    def take_through(self, source_fd: int, hold: tuple[int, int], count: int,
                     copy: bool = False) -> tuple[int, bytes]:
        """``take`` for a source that is not a pipe (a pseudo-terminal): its bytes go into the
        holding pipe ``hold`` (read end, write end) first, then from there into the log."""
        if self.fallback is None:
            try:
                held = os.splice(source_fd, hold[1], count)
            except OSError as exc:
                if exc.errno not in NO_SPLICE:
                    raise  # EIO from a pseudo-terminal: its end, for the caller
                self.fallback = f"splice(2) from the terminal failed: {exc.strerror}"
            else:
                parts, taken = [], 0
                while taken < held:
                    moved, data = self.take(hold[0], held - taken, copy)
                    if not moved:
                        break
                    taken += moved
                    parts.append(data)
                return held, b"".join(parts)
        return self._read_and_write(source_fd, count)

    def _read_and_write(self, fd: int, count: int) -> tuple[int, bytes]:
        data = os.read(fd, count)
        if self.lost and not self._mark_gap():
            self._lose(len(data), None)
        else:
            self._write(data)
        return len(data), data

    def _write(self, data: bytes) -> None:
        """Write all of the job's ``data`` at the end; on an error what is left is lost."""
        left, exc = self._put(data)
        if exc is not None:
            self._lose(left, exc)

    def _put(self, data: bytes) -> tuple[int, OSError | None]:
        """Write ``data`` at the end; on an error, the bytes left and it."""
        view = memoryview(data)
        try:
            while view:
                written = os.pwrite(self.fd, view, self.offset)
                self.offset += written
                view = view[written:]
        except OSError as exc:
            return len(view), exc
        return 0, None

    def _drain(self, pipe_fd: int, count: int, exc: OSError | None) -> tuple[int, bytes]:
        """Take the bytes out of the pipe anyway (the job must never wait for our disk), lost."""
        data = os.read(pipe_fd, count)
        self._lose(len(data), exc)
        return len(data), data

    def _mark_gap(self) -> bool:
        """Say in the log how many bytes are missing there, once writing works again."""
        _, exc = self._put(log_gap_marker(self.lost, self.lost_reason, self._ends_mid_line()))
        if exc is not None:
            self.lost_reason = exc.strerror or str(exc)
            return False
        self.lost = 0
        return True

    def _ends_mid_line(self) -> bool:
        try:
            return self.offset > 0 and os.pread(self.fd, 1, self.offset - 1) != b"\n"
        except OSError:
            return False

    def _lose(self, count: int, exc: OSError | None) -> None:
        self.lost += count
        self.lost_total += count
        if exc is not None:
            self.lost_reason = exc.strerror or str(exc)
            if self.error is None:
                self.error = exc
