"""Short human forms of numbers for narrow panels: sizes, rates, durations, rank sets, sparklines;
text fitted to a narrow column (titles cut at a word, paths broken between folders)."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence

from rich.cells import cell_len, set_cell_size
from rich.text import Text

from monitor.units import binary_size, binary_unit, clock, duration  # noqa: F401 (the panels' names for them)

SPARK_BLOCKS = "▁▂▃▄▅▆▇█"


def size(value: float | None) -> str:
    """Bytes in the binary units ``monitor metrics`` and the reports use, short: 1.2GiB / 340.0MiB
    / 512B."""
    if value is None:
        return "?"
    return binary_size(value).replace(" ", "")


def used_of(used: float | None, total: float | None) -> str:
    """"78.0/80.0GiB": used and total, the unit once where both are shown in it."""
    if used is not None and total is not None:
        unit, scale = binary_unit(total)
        if unit != "B" and binary_unit(used)[0] == unit:
            return f"{used / scale:.1f}/{total / scale:.1f}{unit}"
    return f"{size(used)}/{size(total)}"


def since_start(seconds: float) -> str:
    """Seconds since a job's start as +MM:SS (+H:MM:SS past an hour)."""
    sign = "-" if seconds < 0 else "+"
    whole = int(abs(seconds))
    hours, rest = divmod(whole, 3600)
    return f"{sign}{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{sign}{rest // 60:02d}:{rest % 60:02d}"


def ranks(values: Iterable[int]) -> str:
    """[0, 1, 2, 3, 5] as "0-3,5"."""
    numbers = sorted(set(values))
    if not numbers:
        return "—"
    parts, start, prev = [], numbers[0], numbers[0]
    for number in numbers[1:] + [None]:
        if number is not None and number == prev + 1:
            prev = number
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if number is not None:
            start = prev = number
    return ",".join(parts)


def sparkline(values: Sequence[float], width: int, low: float | None = None, high: float | None = None) -> str:
    """The last ``width`` values as block characters; non-finite values show as "!"."""
    values = list(values)[-width:] if width > 0 else []
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return "!" * len(values)
    low = min(finite) if low is None else low
    high = max(finite) if high is None else high
    span = high - low
    out = []
    for value in values:
        if not math.isfinite(value):
            out.append("!")
        elif span <= 0:
            out.append(SPARK_BLOCKS[0])
        else:
            level = int((min(max(value, low), high) - low) / span * (len(SPARK_BLOCKS) - 1) + 0.5)
            out.append(SPARK_BLOCKS[level])
    return "".join(out)


def bar(fraction: float | None, width: int) -> tuple[str, str]:
    """A filled and an empty part of a bar ``width`` cells wide."""
    if fraction is None or width <= 0:
        return "", "·" * max(width, 0)
    filled = int(round(min(max(fraction, 0.0), 1.0) * width))
    return "█" * filled, "░" * (width - filled)


def fit_words(text: str, width: int) -> str:
    """``text`` in at most ``width`` cells: whole when it fits, else cut at a word's end (when one
    is in the second half) and ended with "…", so a cut title reads as cut, not as another."""
    if cell_len(text) <= width:
        return text
    cut = set_cell_size(text, max(width - 1, 0)).rstrip()
    space = cut.rfind(" ")
    if text[len(cut):len(cut) + 1] != " " and space > len(cut) // 2:
        cut = cut[:space]  # not within a word
    return cut.rstrip(" ,;:·-(") + "…"


def break_long_paths(text: Text, width: int) -> Text:
    """``text`` with line breaks inside the words too long for a row of ``width`` (paths): after
    the last separator that fits, so a wrapped path breaks between its folders and its file name
    and line stay whole ("Raised from /home/user/project/" then "monitor/demo/train.py:125 in
    ..."); the rest wraps at spaces as before. Lines of ASCII only (character = cell)."""
    plain = text.plain
    if width < 8:
        return text
    breaks: list[int] = []
    row = 0  # where the row being filled starts
    ascii_line = _ascii_line(plain, 0)
    for word in re.finditer(r"\n|\S+", plain):
        start, end = word.span()
        if word[0] == "\n":
            row = end
            ascii_line = _ascii_line(plain, row)
            continue
        if not ascii_line or end - row <= width:
            continue  # fits on this row (or is left to the usual wrapping)
        if end - start <= width:
            row = start  # wraps whole onto the next row
            continue
        while end - row > width:
            cut = max(plain.rfind(separator, max(row, start), row + width) for separator in "/\\") + 1
            if cut > max(row, start) + 1:
                breaks.append(cut)
                row = cut
            elif start > row:
                row = start  # no separator fits in what is left of this row: the word starts the next
            else:
                break  # no separator within a whole row: cut where the row ends, as before
    if not breaks:
        return text
    return Text("\n").join(text.divide(breaks))


def _ascii_line(text: str, start: int) -> bool:
    end = text.find("\n", start)
    return text[start:end if end >= 0 else len(text)].isascii()
