"""Reading the time a log line was written, when the line says so.

Used to order root causes found in different files (per-rank logs are read one after the
other, so arrival order means nothing across files). Understood: ISO-like dates
(``2024-12-26 02:11:16,123``, ``2024-12-26T02:11:16.5Z``, torchelastic's ``2024-12-26_02:11:16``)
and glog headers (``[E1218 20:27:21.426415540 ...]``, which have no year: the current UTC
year is assumed). Times without a zone are taken as UTC: only differences matter.
"""

from __future__ import annotations

import calendar
import time

import regex

_ISO = regex.compile(
    r"(?<!\d)(?P<y>\d{4})-(?P<mo>\d\d)-(?P<d>\d\d)[ T_](?P<h>\d\d):(?P<mi>\d\d):(?P<s>\d\d)(?:[.,](?P<f>\d{1,9}))?"
)
_GLOG = regex.compile(r"(?:^|[\[\s:])[IWEF](?P<mo>\d\d)(?P<d>\d\d) (?P<h>\d\d):(?P<mi>\d\d):(?P<s>\d\d)(?:\.(?P<f>\d{1,9}))?\b")
# Only look near the start of a line: a date later in the text is usually data, not a header.
_HEAD = 80


def parse_timestamp(text: str) -> float | None:
    """Seconds since the epoch for the timestamp at the head of ``text``, or None."""
    head = text[:_HEAD]
    match = _ISO.search(head)
    year = None
    if match is None:
        match = _GLOG.search(head)
        if match is None:
            return None
        year = time.gmtime().tm_year
    try:
        seconds = calendar.timegm((
            year or int(match["y"]), int(match["mo"]), int(match["d"]),
            int(match["h"]), int(match["mi"]), int(match["s"]), 0, 0, 0,
        ))
    except (ValueError, OverflowError):
        return None
    fraction = match["f"]
    return seconds + (int(fraction) / 10 ** len(fraction) if fraction else 0.0)
