"""A paste indented as a whole, read at its own margin.

A log pasted into Markdown as an indented code block (four spaces before every line), or under a
list item, moves every line right: "    [rank0]: KeyError: 'x'". Nothing that heads a line is
then at its start (a rank's prefix, a time, a traceback's header), and an exception's line reads
as a traceback's indented source. A file is taken as indented by its margin when every line of
its head that holds anything starts with the same run of at least ``MIN_MARGIN`` spaces (or a
tab), over ``MIN_LINES`` such lines at least: programs print unindented lines among their
indented ones (a traceback's header and exception, a step's line); a paste's margin is on all.
An excerpt of a traceback's frames alone is indented by the frames' own two spaces: those stay.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import replace

from monitor.model import LogLine

# A list item's continuation indents by two, Markdown's code block by four.
MIN_MARGIN = 2
# Fewer lines than this say nothing of a file's margin (one traceback's frame and its source).
MIN_LINES = 4
_FRAME, _FRAME_INDENT = 'File "', "  "


def margin_of(head: bytes) -> str:
    """The run of blanks every line of ``head`` (a file's first bytes) that holds anything starts
    with, where it is a paste's margin (see the module's docstring); "" otherwise."""
    lines = [line for line in head.decode("utf-8", "replace").lstrip("\ufeff").replace("\r\n", "\n").split("\n")[:-1]
             if line.strip()]
    if len(lines) < MIN_LINES:
        return ""
    first = lines[0]
    margin = first[:len(first) - len(first.lstrip(" \t"))]
    for line in lines[1:]:
        while margin and not line.startswith(margin):
            margin = margin[:-1]
    # A traceback's frames are indented within it: an excerpt of frames alone keeps theirs.
    if any(line[len(margin):].startswith(_FRAME) for line in lines):
        margin = margin[:-len(_FRAME_INDENT)] if margin.endswith(_FRAME_INDENT) else ""
    return margin if margin.startswith("\t") or len(margin) >= MIN_MARGIN else ""


def at_margin(lines: Iterable[LogLine], margin: str) -> Iterator[LogLine]:
    """``lines`` with ``margin`` taken off each that starts with it, up to the first line holding
    anything that does not: the indented block ended there (the head judged it; what follows a
    block is read as written)."""
    inside = True
    for line in lines:
        if inside and line.text.strip() and not line.text.startswith(margin):
            inside = False
        yield replace(line, text=line.text[len(margin):]) if inside and line.text.startswith(margin) else line
