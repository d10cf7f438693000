"""A log file's last lines, read from its end and bounded: what a job printed last (the rank
that hung, a wait the log ends in, training still going on when the log stops)."""

from __future__ import annotations

from collections.abc import Iterator

import regex

from monitor.logs import structured
from monitor.logs.decode import LineAssembler
from monitor.logs.ranks import FileRanks
from monitor.logs.reader import make_line
from monitor.model import LogLine
from monitor.progress.parse import parse_progress

# How much of a file's end is read for its last lines.
TAIL_BYTES = 256 * 1024
# The most files whose ends are read to see that a job went on training (``all_end_training``).
TRAINING_FILES = 16
# A line that holds a letter or a digit; the others (blanks, a banner's ruler, a paste's closing
# fence, a row of dots, the NUL bytes a crashed node leaves at a file's end) say nothing of what a
# process did last, and are left out.
_SAYS_SOMETHING = regex.compile(r"[\p{L}\p{N}]")


def tail_lines(path: str, size: int = TAIL_BYTES) -> tuple[Iterator[LogLine], int]:
    """The complete lines in the last ``size`` bytes of ``path``, last first, those with no
    letter or digit left out, each read as the engine reads it (prefixes and leads taken off, its
    rank known, a JSON logger's record as its lines) as it is asked for; and the bytes read.
    Nothing, when it cannot be read or is compressed (a gzip's end is no text)."""
    try:
        with open(path, "rb") as stream:
            if stream.read(2) == b"\x1f\x8b":
                return iter(()), 0
            end = stream.seek(0, 2)
            stream.seek(max(0, end - size))
            tail = stream.read(size)
    except OSError:
        return iter(()), 0
    ranks = FileRanks(path)
    raws = tail.split(b"\n")
    if end > size:
        # The first line is cut at its start, except what follows its last carriage return: a
        # progress bar redrawn with "\r" alone (tqdm) is one line longer than the window, and the
        # text after its last "\r" is the whole of what the terminal showed last.
        cut = raws[0].rstrip(b"\r")  # a bar drawn as "bar\r", or a pty's "\r\n"
        raws[0] = cut[cut.rfind(b"\r") + 1:] if b"\r" in cut else b""
    lines = (make_line(path, 0, LineAssembler().feed(raw + b"\n")[0], ranks) for raw in reversed(raws))
    return (line for line in _expanded(lines) if _SAYS_SOMETHING.search(line.text)), len(tail)


def _expanded(lines: Iterator[LogLine]) -> Iterator[LogLine]:
    """``lines`` (last first) with a JSON logger's line read as the lines it stands for, as the
    engine reads it (``structured.expanded``): its message and exception, last first."""
    for line in lines:
        pieces = structured.expanded(line)
        yield from reversed(pieces) if pieces is not None else (line,)


def last_line(path: str, size: int = TAIL_BYTES) -> LogLine | None:
    """The last line of ``path`` that holds anything (see ``tail_lines``), or None."""
    lines, _ = tail_lines(path, size)
    return next(lines, None)


def step_of(line: LogLine) -> int | None:
    """The training step ``line`` reports as progress (a step, a loss beside it), or None."""
    progress = parse_progress(line.text)
    return progress.step if progress is not None else None


def trains(line: LogLine) -> bool:
    """Whether ``line`` is training progress (a step or a loss): a stop's or a kill's own lines,
    which also end a silence, are not."""
    progress = parse_progress(line.text)
    return progress is not None and (progress.step is not None or progress.loss is not None)


def ends_training(path: str) -> bool:
    """Whether ``path``'s last line is training progress."""
    last = last_line(path)
    return last is not None and step_of(last) is not None


def all_end_training(files: list[str]) -> bool:
    """Whether every one of ``files`` ends with a line of training progress: the job went on. One
    file that ends otherwise (a rank's traceback beside a peer's progress) may hold a failure; more
    than ``TRAINING_FILES`` files (each end read costs ``TAIL_BYTES``) is not known, so no."""
    return bool(files) and len(files) <= TRAINING_FILES and all(ends_training(path) for path in files)
