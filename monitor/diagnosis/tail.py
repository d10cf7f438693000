"""A log file's last lines, read from its end and bounded: what a job printed last (the rank
that hung, a wait the log ends in, training still going on when the log stops)."""

from __future__ import annotations

from collections.abc import Iterator

from monitor.logs.decode import LineAssembler
from monitor.logs.ranks import FileRanks
from monitor.logs.reader import make_line
from monitor.model import LogLine

# How much of a file's end is read for its last lines.
TAIL_BYTES = 256 * 1024


def tail_lines(path: str) -> tuple[Iterator[LogLine], int]:
    """The complete lines in the last ``TAIL_BYTES`` of ``path``, last first, blank ones and a
    paste's lone closing marks (a line of backticks) left out, each read as the engine reads it
    (prefixes and leads taken off, its rank known) as it is asked for; and the bytes read.
    Nothing, when it cannot be read."""
    try:
        with open(path, "rb") as stream:
            size = stream.seek(0, 2)
            stream.seek(max(0, size - TAIL_BYTES))
            tail = stream.read(TAIL_BYTES)
    except OSError:
        return iter(()), 0
    ranks = FileRanks(path)
    raws = tail.split(b"\n")[1 if size > TAIL_BYTES else 0:]
    return (make_line(path, 0, LineAssembler().feed(raw + b"\n")[0], ranks)
            for raw in reversed(raws) if raw.strip(b" \t\r`")), len(tail)


def last_line(path: str) -> LogLine | None:
    """The last line of ``path`` that holds anything (see ``tail_lines``), or None."""
    lines, _ = tail_lines(path)
    return next(lines, None)
