"""Lines a terminal or a paste hard-wrapped at a fixed width, joined again.

A log copied out of a terminal (or a paste a forum folded) breaks every line longer than the
terminal's width into pieces of exactly that width, mid-word: "CUDA error: uncorrectable ECC er" /
"ror encountered". No rule matches either piece. A file is taken as wrapped at W when W is its
longest line and at least ``MIN_WRAPPED`` lines of exactly W characters are followed by a line that
starts nothing of its own (no rank prefix, time, host, traceback or indented line, nor the same
format again). Such a line and the ones that continue it are read as one, numbered as its first.
A line that ends in padding did not wrap: two spaces or more, or, in a capture that pads every
line to W (most lines of W end in a space), any space. Programs do not wrap what they write, so
only pastes and terminal captures are ever joined.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from monitor.formats import LEAD_ALTERNATION, NOTEBOOK_HEADER, PREFIX_ALTERNATION
from monitor.model import LogLine

# Terminals are never narrower; a file whose longest line is shorter is wrapped nowhere that matters.
MIN_WIDTH = 60
# Lines of the width that must wrap (different lines, not one repeated) before a file counts as
# wrapped: one long line at the maximum is any file's longest line.
MIN_WRAPPED = 2
# What the head of a file is judged by: the wrap width is the terminal's, the same all through.
HEAD_BYTES = 16 << 10
# Lines at the width looked at, at most (a log of one format has many).
_LOOKED_AT = 64
# Two lines that begin with this many characters alike are two lines of one format.
_SAME_START = 6
# A logical line is not joined past this many characters (the engine caps lines anyway).
MAX_JOINED = 64 << 10

_BOX = "│╭╰┃┏┗"
_OWN_START = re.compile(
    "|".join([
        PREFIX_ALTERNATION, LEAD_ALTERNATION,
        r"Traceback \(most recent call last\)", r"\s*File \"", r"During handling of", r"The above exception",
        r"[\w.-]+:\d+:\d+ \[\d+\] NCCL ",  # NCCL's host:pid:tid [device]
        r"[IWEF]\d{4} \d\d:\d\d:\d\d",  # glog
        r"\[[IWEF] ",  # c10d's "[E ProcessGroupNCCL.cpp:...]"
        f"[{_BOX}]",  # a box rich draws around a traceback: its lines are as wide as the box
        r"(?:DEBUG|INFO|WARNING|ERROR|CRITICAL):[\w.]*:",  # logging's default format
        r"\s\s|\t",  # an indented line: a frame's source, a logger's continuation
        r"\[\d{4}-\d\d-\d\d",  # a bracketed time
        r"\[\s*[+\d.]+\]",  # the kernel's uptime (dmesg)
    ])
)
_PROGRESS_END = re.compile(r"(?:it/s|s/it|B/s|\?it/s)[^\]]*\]$")
# Lines complete at any width: a ruler (one character repeated), and a traceback's header line
# (IPython pads its header to 75 columns under a ruler as wide; Python's own header ends in its
# colon, so a wrap cut before the colon still joins).
_COMPLETE = re.compile(rf"(.)\1*$|.*Traceback \(most recent call last\):$|{NOTEBOOK_HEADER}$")
_DIGITS = re.compile(r"\d+")


@dataclass(frozen=True, slots=True)
class Wrap:
    """How a file was wrapped: at ``width`` columns, its short lines padded with spaces or not."""
    width: int
    padded: bool = False

    def wraps(self, text: str) -> bool:
        """Whether a line of the file was cut at the width (the next line continues it)."""
        return (len(text) == self.width and not text.endswith(("  ", "\t") if not self.padded else (" ", "\t"))
                and _PROGRESS_END.search(text) is None and not text.startswith(tuple(_BOX))
                and _COMPLETE.match(text) is None)


def _starts_own_line(text: str, before: str) -> bool:
    """Whether ``text``, after a line cut at the width (``before``), is a line of its own: one
    that starts as lines start, or as ``before`` did (the same format printed again)."""
    return not text or text[:_SAME_START] == before[:_SAME_START] or _OWN_START.match(text) is not None


def wrap_of(head: bytes) -> Wrap | None:
    """How the lines of ``head`` (a file's first bytes) were hard-wrapped, or None."""
    lines = head.decode("utf-8", "replace").replace("\r\n", "\n").split("\n")[:-1]  # the last may be cut
    lengths = list(map(len, lines))
    width = max(lengths, default=0)
    if width < MIN_WIDTH or lengths.count(width) < MIN_WRAPPED:
        return None  # (most files: the costly look below is for the few that may be wrapped)
    at_width = [i for i, length in enumerate(lengths) if length == width]
    # A padded capture has every line as wide as the screen, most of them ending in spaces (a hard
    # wrap ends a piece on a space only as often as text has spaces).
    padded = len(at_width) * 10 >= len(lines) * 9 and \
        sum(lines[i].endswith((" ", "\t")) for i in at_width) * 2 > len(at_width)
    wrap = Wrap(width, padded)
    # The same line printed again and again (one format, other numbers) is no sign of a wrap.
    wrapped: set[str] = set()
    for i in at_width[:_LOOKED_AT]:
        if i + 1 < len(lines) and wrap.wraps(lines[i]) and not _starts_own_line(lines[i + 1], lines[i]):
            wrapped.add(_DIGITS.sub("", lines[i]))
            if len(wrapped) >= MIN_WRAPPED:
                return wrap
    return None


def unwrap(lines: Iterable[LogLine], wrap: Wrap) -> Iterator[LogLine]:
    """``lines`` with each line ``wrap`` cut joined to the lines that continue it."""
    held: LogLine | None = None
    for line in lines:
        if held is not None:
            if not _starts_own_line(line.text, held.text) and len(held.text) + len(line.text) <= MAX_JOINED:
                joined = LogLine(held.file, held.line, held.text + line.text, held.rank,
                                 held.left_out + line.left_out)
                if wrap.wraps(line.text):
                    held = joined
                    continue
                yield joined
                held = None
                continue
            yield held
            held = None
        if wrap.wraps(line.text):
            held = line
        else:
            yield line
    if held is not None:
        yield held
