"""Lines of several files in the order their own clocks say, for the screen (as lnav shows
several logs): the lines of one read come file by file, so rank 3's error read after rank 0's
whole file would show below rank 0's later timeouts.

Only the display is reordered: the engine reads each file in its own order. Each file's lines
keep their order; a line without a time takes the time of the line before it in its file (the
rest of a traceback goes with its first line), and lines before a file's first time take that
first time. A read whose files carry no time at all (plain prints) is left as it came, at the
cost of a look at a few lines per file.
"""

from __future__ import annotations

from typing import cast

from monitor.diagnosis.timestamps import parse_timestamp
from monitor.model import LogLine

# Lines of each file looked at for a time before deciding a read carries none.
PROBE_LINES = 3


def in_time_order(lines: list[LogLine]) -> list[LogLine]:
    files: dict[str, list[int]] = {}
    for position, line in enumerate(lines):
        files.setdefault(line.file, []).append(position)
    if len(files) < 2 or not any(parse_timestamp(lines[p].text) for positions in files.values()
                                 for p in positions[:PROBE_LINES]):
        return lines
    keys: list[float | None] = [None] * len(lines)
    for positions in files.values():
        carried = None
        for p in positions:
            carried = parse_timestamp(lines[p].text) or carried
            keys[p] = carried
        first = next((keys[p] for p in positions if keys[p] is not None), None)
        if first is None:
            continue
        for p in positions:
            if keys[p] is not None:
                break
            keys[p] = first
    # A file with no time at all keeps its place among the others: the time of the line before it.
    previous = min((k for k in keys if k is not None), default=0.0)
    for p, key in enumerate(keys):
        if key is None:
            keys[p] = key = previous
        previous = key
    # Every key is a time now: the loops above filled each None.
    order = sorted(range(len(lines)), key=lambda p: cast(float, keys[p]))  # stable: a file's lines keep their order
    return [lines[p] for p in order]
