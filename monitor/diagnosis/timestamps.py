"""Reading the time a log line was written, when the line says so.

Used to order root causes found in different files (per-rank logs are read one after the
other, so arrival order means nothing across files) and as ``Finding.first_seen``. The formats
are data (``formats.toml``); understood today, near the start of the line: ISO-like dates (``2024-12-26 02:11:16,123``,
``2024-12-26T02:11:16.5+02:00``, torchelastic's ``2024-12-26_02:11:16``), glog headers
(``E1121 10:40:02.118``, torchelastic's ``W1121 10:10:35.644000``, ``[E1218 20:27:21.426415540``),
syslog (``Mar 02 10:44:01 host kernel: ...``) and ``dmesg -T`` (``[Sat Mar  2 11:04:18 2024]``).
A date without a year (glog, syslog) is taken in the year that puts it nearest the logs' own
first dated time (``FileDate``: torchelastic's and Python logging's lines beside torch's glog ones,
in a log read years later), else in the current year, or the one before when that would put it
more than a day in the future. Times without a zone are local time, as glog,
Python's logging and syslog write them: a finding's time is shown as the log says it, and
compares right with times the monitor took itself (a metric finding, a stall). Impossible dates
(``I0230``) are not timestamps.
"""

from __future__ import annotations

import calendar
import time

import regex

from monitor.formats import TIMESTAMPS

_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
# Only look near the start of a line: a date later in the text is usually data, not a header.
_HEAD = 80
_DAY = 86400


# How far into a line, and into a file, the year it writes is looked for (a logger's head, the
# file's first lines).
DATED_HEAD = 120
DATED_LINES = 20
# A date with its year and a time after it ("2022-11-21 02:35:41", "2024/05/01T10:11"): what a log
# says of its own year, for the times it writes without one.
_DATED = regex.compile(r"(?<![\d.])(?:19|20)\d\d[-/]\d\d[-/]\d\d[ T_]\d\d:\d\d")


class FileDate:
    """The year a file writes, from its first ``DATED_LINES`` lines: the first date with a year and
    a time near a line's start that a timestamp format reads, unless a time without a year comes
    first (times parsed before it was known took another year; a file's lines are looked at in
    order, so reading a file whole and line by line agree). Fed one line at a time."""

    __slots__ = ("done", "bulk", "_lines", "_until_yearless")

    def __init__(self, bulk: bool = False, until_yearless: bool = True) -> None:
        self.done = False
        self.bulk = bulk  # fed by the fast scan's first blocks (scan.py), not line by line
        self._lines = 0
        # Read before any time is (``diagnose`` looks at every file's head first): a time without a
        # year, or a banner's ("date", nvidia-smi's header), need not stop the look.
        self._until_yearless = until_yearless

    def look(self, line: str) -> float | None:
        """The file's dated time, where ``line`` (its next one) settles it; else None."""
        if self.done:
            return None
        self._lines += 1
        self.done = self._lines >= DATED_LINES
        head = line[:DATED_HEAD + 40]
        if (match := _DATED.search(head)) is not None and match.start() <= DATED_HEAD:
            if (seconds := parse_timestamp(head[max(0, match.start() - 1):])) is not None:
                self.done = True
                return seconds
        if self._until_yearless and parse_timestamp(head) is not None:
            self.done = True  # a time without a year came first
        return None


def parse_timestamp(text: str, near: float | None = None) -> float | None:
    """Seconds since the epoch for the timestamp at the head of ``text``, or None. The formats
    (``formats.toml``, ``[[timestamp]]``) are tried in order; the first found decides. ``near``: the
    log's own dated time, whose year a date without one takes (the nearest of it and its neighbours)."""
    head = text[:_HEAD]
    for stamp in TIMESTAMPS:
        match = stamp.pattern.match(head) if stamp.anchored else stamp.pattern.search(head)
        if match is None:
            continue
        found = match.groupdict()
        month = int(found["mo"]) if found.get("mo") else _MONTHS.index(found["mon"]) + 1
        if not found.get("y"):
            return _without_year(month, match, near)
        zoned = bool(found.get("utc") or found.get("sign"))
        seconds = _seconds(int(found["y"]), month, match, local=not zoned)
        if seconds is not None and found.get("sign"):
            offset = int(found["oh"]) * 3600 + int(found["om"]) * 60
            seconds -= offset if found["sign"] == "+" else -offset
        return seconds
    return None


def _without_year(month: int, match: regex.Match, near: float | None = None) -> float | None:
    if near is not None:
        year = time.localtime(near).tm_year
        options = [s for y in (year - 1, year, year + 1) if (s := _seconds(y, month, match)) is not None]
        return min(options, key=lambda seconds: abs(seconds - near)) if options else None
    now = time.time()
    year = time.localtime(now).tm_year
    seconds = _seconds(year, month, match)
    if seconds is not None and seconds > now + _DAY:
        seconds = _seconds(year - 1, month, match)
    return seconds


def _seconds(year: int, month: int, match: regex.Match, local: bool = True) -> float | None:
    day, hour, minute, second = int(match["d"]), int(match["h"]), int(match["mi"]), int(match["s"])
    if not (1 <= year and 1 <= month <= 12 and 1 <= day <= calendar.monthrange(year, month)[1]
            and hour < 24 and minute < 60 and second < 61):
        return None
    fields = (year, month, day, hour, minute, min(second, 59), 0, 0, -1)  # -1: DST as it was then
    try:
        seconds = time.mktime(fields) if local else calendar.timegm(fields)
    except (OverflowError, ValueError):
        return None
    fraction = match.groupdict().get("f")
    return seconds + (int(fraction) / 10 ** len(fraction) if fraction else 0.0)
