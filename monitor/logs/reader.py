"""Reading finished log files (plain or .gz) as ``LogLine`` streams, and finding them in folders.

Files are streamed in chunks through ``logs.decode.LineAssembler`` (bounded memory whatever
the line lengths) and ``clean``. A rank comes from the line's prefix, else the file's name.
"""

from __future__ import annotations

import errno
import gzip
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

from monitor.model import LogLine
from monitor.logs.ranks import FileRanks
from monitor.logs.decode import SNIFF_BYTES, LineAssembler, left_out, looks_binary
from monitor.text import clean

CHUNK_BYTES = 1 << 20
LOG_SUFFIXES = {".log", ".txt", ".out", ".err", ".stdout", ".stderr"}
LOG_NAMES = {"stdout", "stderr", "log", "output"}


class UnreadableLog(Exception):
    """A file that is not a readable text log; ``str()`` is one line naming it. ``partial``:
    some of it was read (a truncated .gz) before the error. ``binary``: a binary file, skipped on
    purpose (as grep skips one); any other is an input error (exit 2, as grep)."""

    def __init__(self, message: str, partial: bool = False, binary: bool = False) -> None:
        super().__init__(message)
        self.partial = partial
        self.binary = binary


def path_error(path: str | os.PathLike) -> str | None:
    """Why ``path`` cannot be read at all ("no such file or directory", "too many levels of
    symbolic links", "permission denied"), or None."""
    try:
        os.stat(path)
    except OSError as exc:
        return (exc.strerror or str(exc)).lower()
    return None


_SPECIAL_FILES = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                  (stat.S_ISSOCK, "a socket"))


# What ``monitor run`` writes beside a log that reads like one but is not the job's output (the
# collectives check's own launch: ``runner/collectives_check.py``).
NOT_LOGS = (".stacks.txt", ".collectives.txt")


def is_log_like(path: Path) -> bool:
    name = path.name.lower()
    if name.startswith(".") or name.endswith(NOT_LOGS):
        return False
    if name.endswith(".gz"):
        name = name[:-3]
    return Path(name).suffix in LOG_SUFFIXES or name in LOG_NAMES


def is_link_loop(path: str | os.PathLike) -> bool:
    """A symlink that leads back to itself (``ln -s self d/self``): neither a file nor a folder.
    A folder's walk lists it with its logs, so that reading it says why it cannot be read (it
    may have been meant for a folder of logs) instead of leaving it out unsaid."""
    try:
        os.stat(path)
    except OSError as exc:
        return exc.errno == errno.ELOOP
    return False


def find_logs(path: str | os.PathLike) -> list[Path]:
    """The log-like files under a directory (recursive, sorted) with its symlink loops, or the file itself."""
    root = Path(path)
    if not root.is_dir():
        return [root]
    found: list[Path] = []
    for directory, subdirs, files in os.walk(root):
        subdirs[:] = sorted(d for d in subdirs if not d.startswith("."))
        found.extend(path for f in sorted(files) if is_log_like(path := Path(directory) / f) or is_link_loop(path))
    return found


def open_log(path: str | os.PathLike):
    """A binary file object for ``path`` (decompressing .gz); raises UnreadableLog."""
    path = Path(path)
    try:
        # Opening a FIFO blocks until a writer comes, and /dev/zero never ends: only regular files.
        mode = os.stat(path).st_mode
    except OSError as exc:
        raise UnreadableLog(f"{path}: cannot read: {(exc.strerror or str(exc)).lower()}") from None
    if not stat.S_ISREG(mode):
        kind = next((name for test, name in _SPECIAL_FILES if test(mode)), "not a regular file")
        raise UnreadableLog(f"{path}: {kind}, not a log file: skipped")
    try:
        handle = gzip.open(path, "rb") if path.name.endswith(".gz") else open(path, "rb")
        head = handle.peek(SNIFF_BYTES)[:SNIFF_BYTES] if hasattr(handle, "peek") else b""
    except (OSError, EOFError) as exc:  # EOFError: a .gz cut short; it has no strerror
        strerror = exc.strerror if isinstance(exc, OSError) else None
        raise UnreadableLog(f"{path}: cannot read: {(strerror or str(exc)).lower()}") from None
    if looks_binary(head):
        handle.close()
        raise UnreadableLog(f"{path}: binary file, skipped", binary=True)
    return handle


def read_head(path: str | os.PathLike, size: int) -> bytes:
    """A log's first ``size`` bytes (decompressed), to judge its shape by; what a damaged file
    yields before its error. Raises UnreadableLog where ``open_log`` does."""
    with open_log(path) as handle:
        try:
            return handle.read(size)
        except (OSError, EOFError):
            return b""  # the read that follows says what is wrong, and where


def read_chunks(handle, name: str, lines_read: Callable[[], int], size: int = CHUNK_BYTES) -> Iterator[bytes]:
    """The file's bytes in chunks of about ``size``. On a read error (a truncated .gz), first
    yields everything read before it, then raises ``UnreadableLog`` naming the file and how many
    lines were read (``lines_read()``): nothing readable is lost."""
    while True:
        parts: list[bytes] = []
        got = 0
        error = None
        eof = False
        try:
            while got < size:
                part = handle.read1(size - got)
                if not part:
                    eof = True
                    break
                parts.append(part)
                got += len(part)
        except (OSError, EOFError) as exc:
            error = exc
        if parts:
            yield b"".join(parts)
        if error is not None:
            raise UnreadableLog(f"{name}: read error after line {lines_read()}: {error}", partial=True) from None
        if eof:
            return


def make_line(file: str, number: int, raw: bytes, ranks: FileRanks) -> LogLine:
    text = clean(raw)
    return LogLine(file, number, text, ranks.of(text), left_out(raw))


def read_log(path: str | os.PathLike) -> Iterator[LogLine]:
    """Every line of a log file (or .gz) in order, streamed; raises UnreadableLog."""
    name = str(path)
    file_rank = FileRanks(name)
    assembler = LineAssembler()
    number = 0
    with open_log(path) as handle:
        for chunk in read_chunks(handle, name, lambda: number):
            for raw in assembler.feed(chunk):
                number += 1
                yield make_line(name, number, raw, file_rank)
        last = assembler.flush()
        if last is not None:
            number += 1
            yield make_line(name, number, last, file_rank)


def last_lines(path: str, end: int, lines: int, count: int, window: int = 1 << 20) -> tuple[list[LogLine], int]:
    """The last ``count`` complete lines before byte ``end`` of ``path`` (which holds ``lines``
    lines up to there), numbered as a whole read would number them, and the byte where the first
    of them starts; at most ``window`` bytes are read. ([], end) when the file cannot be read."""
    try:
        with open(path, "rb") as handle:
            start = max(0, end - window)
            data = os.pread(handle.fileno(), end - start, start)
    except OSError:
        return [], end
    raws = data.split(b"\n")[:-1] if data.endswith(b"\n") else data.split(b"\n")
    if start > 0:
        raws = raws[1:]  # the first is cut by the window
    raws = raws[-count:] if count else []
    ranks = FileRanks(path)
    first = lines - len(raws) + 1
    begins = end - sum(len(raw) + 1 for raw in raws)
    return [make_line(path, first + i, LineAssembler().feed(raw + b"\n")[0], ranks) for i, raw in enumerate(raws)], begins


def line_end(path: str, line: int) -> int | None:
    """The byte just after line ``line`` (from 1) of ``path``, lines counted by their newlines as
    ``last_lines`` counts them; None when the file holds fewer lines or cannot be read."""
    seen = offset = 0
    try:
        with open(path, "rb") as handle:
            while chunk := handle.read(CHUNK_BYTES):
                newlines = chunk.count(b"\n")
                if seen + newlines >= line:
                    pos = -1
                    for _ in range(line - seen):
                        pos = chunk.index(b"\n", pos + 1)
                    return offset + pos + 1
                seen, offset = seen + newlines, offset + len(chunk)
    except OSError:
        return None
    return None
