"""The job's log file, written so that no byte is ever held only in the recorder's memory.

Bytes move with splice(2), from the job's output (its pipe or pseudo-terminal) into a holding pipe,
and from there into the log: the kernel takes from a pipe exactly what it wrote on, so a recorder
killed at any instant leaves every byte in the log, in the holding pipe or in the job's output,
all three of which the monitor holds too (it reads the holding pipe first when it takes over,
takeover.py). The holding pipe also keeps the job from waiting on the disk: splicing from the
job's pipe straight into a file would lock that pipe for as long as the file system takes to write
(a stalled NFS server), and every print of the job's would wait on the lock.

splice needs the log opened without O_APPEND, so this is the log's one writer and keeps its
offset. Where splice cannot be used (a file system without it, an old kernel, not Linux) the bytes
are read and written, and ``fallback`` says why: then a killed recorder loses what it had read
and not yet written. A write error (a full disk) never stops the draining: the job must not
block, so what cannot be written is read, counted and marked in the log once writing works again.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable

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
    def __init__(self, fd: int, hold: tuple[int, int], on_fallback: Callable[[str], None]) -> None:
        """``fd``: the log, opened read-write without O_APPEND; writing continues at its end.
        ``hold``: the holding pipe (read end, write end). ``on_fallback``: told why, before the
        first byte is read instead of spliced."""
        self.fd = fd
        self.hold = hold
        self.offset = os.fstat(fd).st_size
        self.fallback: str | None = None
        self._on_fallback = on_fallback
        # Bytes not written since the last write that worked (a full disk), and why.
        self.lost = 0
        self.lost_reason = ""
        self.lost_total = 0
        self.error: OSError | None = None  # the first write error
        if not hasattr(os, "splice"):
            self._fall_back("splice(2) is not available here")

    def take(self, source_fd: int, count: int, copy: bool = False) -> tuple[int, bytes]:
        """Move at most ``count`` bytes (some must be waiting, or the end) from the job's output
        ``source_fd`` into the log. Returns how many left it (0: its end) and, when ``copy``,
        those bytes (none of a part the log could not be read back from). Raises EIO from a
        pseudo-terminal: its end, for the caller."""
        if self.fallback is None:
            try:
                held = os.splice(source_fd, self.hold[1], count)
            except OSError as exc:
                if exc.errno not in NO_SPLICE:
                    raise
                self._fall_back(f"splice(2) from the job's output failed: {exc.strerror}")
            else:
                parts, moved = [], 0
                while moved < held:
                    taken, data = self._take_held(held - moved, copy)
                    if not taken:
                        break
                    moved += taken
                    parts.append(data)
                return held, b"".join(parts)
        return self._read_and_write(source_fd, count)

    def follow_truncation(self) -> None:
        """Go on at the log's end where someone cut it shorter (logrotate's copytruncate, ``: > log``):
        writing on at the old offset would leave a hole of NUL bytes before the job's next line."""
        try:
            size = os.fstat(self.fd).st_size
        except OSError:
            return
        if size < self.offset:
            self.offset = size

    def _take_held(self, count: int, copy: bool) -> tuple[int, bytes]:
        """Move at most ``count`` bytes from the holding pipe into the log."""
        if self.lost and not self._mark_gap():
            return self._drain(self.hold[0], count, None)
        if self.fallback is None:
            try:
                moved = os.splice(self.hold[0], self.fd, count, offset_dst=self.offset)
            except OSError as exc:
                if exc.errno not in NO_SPLICE:
                    return self._drain(self.hold[0], count, exc)
                self._fall_back(f"splice(2) into the log failed: {exc.strerror}")
            else:
                data = self._read_back(moved) if copy and moved else b""
                self.offset += moved
                return moved, data
        return self._read_and_write(self.hold[0], count)

    def _read_back(self, count: int) -> bytes:
        """The ``count`` bytes just spliced at the offset, for the copy; b"" where the log cannot
        be read (the log has them: only the copy misses them)."""
        try:
            return os.pread(self.fd, count, self.offset)
        except OSError:
            return b""

    def _fall_back(self, why: str) -> None:
        self.fallback = why
        self._on_fallback(why)

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
