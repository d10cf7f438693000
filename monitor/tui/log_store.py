"""Compact storage for millions of merged log lines, and the filters the log view applies.

Text lives in one UTF-8 ``bytearray`` (lines joined by ``\\n``) with one offset per line, and
rank, file, line number and level in typed arrays: about the size of the log itself plus ~20
bytes a line, instead of a Python object per line. A regex filter searches the whole buffer at
once, which is much faster than decoding and testing each line.
"""

from __future__ import annotations

import time
from array import array
from bisect import bisect_right
from dataclasses import dataclass

import regex

from monitor.model import LogLine
from monitor.text import clean, is_clean

LEVEL_INFO, LEVEL_WARNING, LEVEL_ERROR = 0, 1, 2
NO_RANK = -1
# Longest a user's filter regex may search before it is stopped (catastrophic backtracking).
FILTER_BUDGET_S = 1.0

_ERROR = regex.compile(
    r"Error\b|Exception\b|Traceback \(most recent|\bFATAL\b|\bCRITICAL\b|\bERROR\b|\berror:"
    r"|Segmentation fault|core dumped|\bKilled\b|SIG(?:KILL|ABRT|SEGV|BUS)|\bFAILED\b|\bfailed\b"
    r"|\[E\d{0,4}[ \d]"
)
_WARNING = regex.compile(r"\bWARN(?:ING)?\b|Warning\b|\bwarning:|\[W\d{0,4}[ \d]")


def line_level(text: str) -> int:
    if _ERROR.search(text):
        return LEVEL_ERROR
    if _WARNING.search(text):
        return LEVEL_WARNING
    return LEVEL_INFO


class FilterError(ValueError):
    """A filter regex that does not compile, or that ran out of time."""


@dataclass(frozen=True, slots=True)
class LineFilter:
    """What the log view shows: ranks (None: all), a minimum level, and a regex (empty: none)."""

    ranks: frozenset[int] | None = None
    min_level: int = LEVEL_INFO
    pattern: str = ""

    @property
    def active(self) -> bool:
        return self.ranks is not None or self.min_level > LEVEL_INFO or bool(self.pattern)


def compile_pattern(pattern: str) -> regex.Pattern[str]:
    """The user's regex, case-insensitive unless it holds a capital letter (smart case)."""
    flags = regex.MULTILINE | (0 if any(c.isupper() for c in pattern) else regex.IGNORECASE)
    try:
        return regex.compile(pattern, flags)
    except regex.error as exc:
        raise FilterError(f"bad regex: {exc}") from None


class LogStore:
    """All lines seen, in arrival order; index ``i`` is the i-th line of the merged log."""

    def __init__(self) -> None:
        self._data = bytearray()
        self._starts = array("Q")
        self._ranks = array("h")
        self._files = array("H")
        self._numbers = array("L")
        self._levels = bytearray()
        self.file_names: list[str] = []
        self._file_ids: dict[str, int] = {}
        self._by_file: list[array] = []
        self.ranks_seen: set[int] = set()
        self.longest = 0  # characters in the longest line (the view's scroll width)

    def __len__(self) -> int:
        return len(self._starts)

    def append(self, line: LogLine) -> int:
        text = line.text
        if not is_clean(text):
            # The contract says text is clean; a line that is not must still never reach the screen raw.
            text = clean(text).replace("\n", " ")
        index = len(self._starts)
        self._starts.append(len(self._data))
        self._data += text.encode("utf-8", "replace")
        self._data += b"\n"
        rank = NO_RANK if line.rank is None else line.rank
        self._ranks.append(rank)
        if rank != NO_RANK:
            self.ranks_seen.add(rank)
        file_id = self._file_ids.get(line.file)
        if file_id is None:
            file_id = self._file_ids[line.file] = len(self.file_names)
            self.file_names.append(line.file)
            self._by_file.append(array("L"))
        self._files.append(file_id)
        in_file = self._by_file[file_id]
        if in_file and line.line <= self._numbers[in_file[-1]]:
            # The file was truncated and starts again: line numbers now refer to the new copy.
            in_file = self._by_file[file_id] = array("L")
        in_file.append(index)
        self._numbers.append(line.line)
        self._levels.append(line_level(text))
        self.longest = max(self.longest, len(text))
        return index

    def text(self, index: int) -> str:
        start = self._starts[index]
        end = self._starts[index + 1] - 1 if index + 1 < len(self._starts) else len(self._data) - 1
        return self._data[start:end].decode("utf-8", "replace")

    def rank(self, index: int) -> int | None:
        rank = self._ranks[index]
        return None if rank == NO_RANK else rank

    def level(self, index: int) -> int:
        return self._levels[index]

    def location(self, index: int) -> tuple[str, int]:
        return self.file_names[self._files[index]], self._numbers[index]

    def find(self, file: str, line: int) -> int | None:
        """The index of ``file``:``line``, or None if that line has not arrived."""
        file_id = self._file_ids.get(file)
        if file_id is None:
            return None
        indices = self._by_file[file_id]
        numbers = self._numbers
        pos = bisect_right(indices, line, key=lambda i: numbers[i]) - 1
        if pos >= 0 and numbers[indices[pos]] == line:
            return indices[pos]
        return None

    def matches(self, index: int, line_filter: LineFilter, pattern: regex.Pattern[str] | None) -> bool:
        if line_filter.ranks is not None and self._ranks[index] not in line_filter.ranks:
            return False
        if self._levels[index] < line_filter.min_level:
            return False
        return pattern is None or pattern.search(self.text(index), timeout=FILTER_BUDGET_S) is not None

    def select(self, line_filter: LineFilter, start: int = 0) -> array:
        """Indices (from ``start``) of the lines the filter shows. Raises FilterError."""
        candidates: range | array = range(start, len(self))
        if line_filter.pattern:
            candidates = self._search(compile_pattern(line_filter.pattern), start)
        ranks, levels = self._ranks, self._levels
        wanted = line_filter.ranks
        min_level = line_filter.min_level
        if wanted is None and min_level == LEVEL_INFO:
            return array("L", candidates)
        return array(
            "L", (i for i in candidates if levels[i] >= min_level and (wanted is None or ranks[i] in wanted))
        )

    def _search(self, pattern: regex.Pattern[str], start: int) -> array:
        """Lines from ``start`` holding a match, found by searching the whole buffer."""
        found = array("L")
        if start >= len(self):
            return found
        try:
            source = pattern.pattern.encode("utf-8")
            # A pattern of plain ASCII means the same on the UTF-8 bytes; others are tested line by line.
            byte_pattern = regex.compile(source, pattern.flags & ~regex.UNICODE) if source.isascii() else None
        except regex.error:
            byte_pattern = None
        deadline = time.monotonic() + FILTER_BUDGET_S
        try:
            if byte_pattern is None:
                for i in range(start, len(self)):
                    if pattern.search(self.text(i), timeout=max(deadline - time.monotonic(), 0.001)):
                        found.append(i)
                return found
            data, starts, end = self._data, self._starts, len(self._data)
            pos = starts[start]
            while pos < end:
                match = byte_pattern.search(data, pos, timeout=max(deadline - time.monotonic(), 0.001))
                if match is None:
                    break
                line = bisect_right(starts, match.start()) - 1
                found.append(line)
                pos = starts[line + 1] if line + 1 < len(starts) else end
        except TimeoutError:
            raise FilterError(f"regex {pattern.pattern!r} is too slow (stopped after {FILTER_BUDGET_S:g} s)") from None
        return found
