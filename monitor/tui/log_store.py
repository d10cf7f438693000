"""Compact storage for the merged log lines on screen, and the filters the log view applies.

Text lives in one UTF-8 ``bytearray`` (lines joined by newlines) with one offset per line, and
rank, file, line number and level in typed arrays: about the size of the log itself plus ~30
bytes a line, instead of a Python object per line. A regex filter searches the whole buffer at
once, which is much faster than decoding and testing each line.

Memory is bounded: only the newest ``max_lines`` lines (and ``max_bytes`` of text) are kept.
Indices are global (line ``i`` of everything that arrived) and stay valid; ``first`` is the
oldest kept. The screen runs beside the training job, on the same machine: a job printing 100k
lines/s must not make it grow without end. The findings do not depend on it (the job session
reads every line); the older lines are in the files.
"""

from __future__ import annotations

import time
from array import array
from bisect import bisect_right
from collections.abc import Mapping
from dataclasses import dataclass

import regex
from rich.cells import cell_len

from monitor import formats
from monitor.logs.nodes import node_of
from monitor.model import LogLine
from monitor.text import clean, is_clean

LEVEL_INFO, LEVEL_WARNING, LEVEL_ERROR = 0, 1, 2
NO_RANK = -1
# What the screen keeps: about 20 MB at 70 bytes of text a line (benchmarks/tui_memory.py: the
# app stays under 150 MB while a job prints 100k lines/s).
MAX_KEPT_LINES = 200_000
MAX_KEPT_BYTES = 24 << 20
# Longest a user's filter regex may search before it is stopped (catastrophic backtracking).
FILTER_BUDGET_S = 1.0

_LEVELS = {"error": LEVEL_ERROR, "warning": LEVEL_WARNING, "info": LEVEL_INFO}


def line_level(text: str) -> int:
    """The line's level (``formats.toml``, ``[[level]]``) as the screen sorts them."""
    return _LEVELS[formats.line_level(text)]


class FilterError(ValueError):
    """A filter regex that does not compile, or that ran out of time."""


@dataclass(frozen=True, slots=True)
class LineFilter:
    """What the log view shows: ranks (None: all), a minimum level, and a regex (empty: none)."""

    ranks: frozenset[int] | None = None
    min_level: int = LEVEL_INFO
    pattern: str = ""
    # The node of a job of several nodes (None: all).
    node: str | None = None

    @property
    def active(self) -> bool:
        return self.ranks is not None or self.min_level > LEVEL_INFO or bool(self.pattern) or self.node is not None


def compile_pattern(pattern: str) -> regex.Pattern[str]:
    """The user's regex, case-insensitive unless it holds a capital letter (smart case)."""
    flags = regex.MULTILINE | (0 if any(c.isupper() for c in pattern) else regex.IGNORECASE)
    try:
        return regex.compile(pattern, flags)
    except regex.error as exc:
        raise FilterError(f"bad regex: {exc}") from None


class LogStore:
    """The newest lines seen, in arrival order; index ``i`` is the i-th line of the merged log."""

    def __init__(self, max_lines: int = MAX_KEPT_LINES, max_bytes: int = MAX_KEPT_BYTES) -> None:
        self.max_lines = max_lines
        self.max_bytes = max_bytes
        self.first = 0  # global index of the oldest line kept
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
        # The node of each file (``logs/nodes.py``; None on one machine), and the nodes seen.
        self.file_nodes: list[str | None] = []
        self.nodes_seen: list[str] = []
        self.longest = 0  # cells of the longest line (the view's scroll width)

    def __len__(self) -> int:
        """Every line that arrived, kept or not."""
        return self.first + len(self._starts)

    def skip(self, count: int) -> None:
        """``count`` lines arrived that the screen will never show (it fell behind by more than
        it keeps): everything kept now is older than them, so it goes too."""
        if count <= 0:
            return
        self.first = len(self) + count
        self._data = bytearray()
        for name in ("_starts", "_ranks", "_files", "_numbers"):
            setattr(self, name, array(getattr(self, name).typecode))
        self._levels = bytearray()
        self._by_file = [array("L") for _ in self._by_file]

    def append(self, line: LogLine) -> int:
        text = line.text
        if not is_clean(text):
            # The contract says text is clean; a line that is not must still never reach the screen raw.
            text = clean(text).replace("\n", " ")
        if len(self._starts) >= self.max_lines or len(self._data) >= self.max_bytes:
            self._evict()
        index = len(self)
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
            node = node_of(line.file)
            self.file_nodes.append(node.name if node is not None else None)
            if node is not None and node.name not in self.nodes_seen:
                self.nodes_seen = sorted([*self.nodes_seen, node.name])
            self._by_file.append(array("L"))
        self._files.append(file_id)
        in_file = self._by_file[file_id]
        if in_file and line.line <= self._numbers[in_file[-1] - self.first]:
            # The file was truncated and starts again: line numbers now refer to the new copy.
            in_file = self._by_file[file_id] = array("L")
        in_file.append(index)
        self._numbers.append(line.line)
        self._levels.append(line_level(text))
        self.longest = max(self.longest, len(text) if text.isascii() else cell_len(text))
        return index

    def _evict(self) -> None:
        """Drop the oldest quarter of what is kept (a copy of the rest: the memory is returned)."""
        drop = max(1, len(self._starts) // 4)
        while drop < len(self._starts) and len(self._data) - self._starts[drop] > self.max_bytes * 3 // 4:
            drop += max(1, len(self._starts) // 16)  # a few huge lines: drop by bytes, not count
        drop = min(drop, len(self._starts))
        cut = self._starts[drop] if drop < len(self._starts) else len(self._data)
        self._data = self._data[cut:]
        self._starts = array("Q", (start - cut for start in self._starts[drop:]))
        self._ranks = self._ranks[drop:]
        self._files = self._files[drop:]
        self._numbers = self._numbers[drop:]
        self._levels = self._levels[drop:]
        self.first += drop
        for file_id, indices in enumerate(self._by_file):
            self._by_file[file_id] = indices[bisect_right(indices, self.first - 1):]

    def line(self, index: int) -> LogLine:
        """A kept line as it arrived."""
        local = index - self.first
        return LogLine(self.file_names[self._files[local]], self._numbers[local], self.text(index), self.rank(index))

    def with_earlier(self, earlier: list[LogLine]) -> LogStore:
        """A store of ``earlier`` lines followed by the lines this one keeps (as many earlier ones as
        fit beside them): lines read back from a file opened at its end."""
        store = LogStore(self.max_lines, self.max_bytes)
        room = max(0, self.max_lines - (len(self) - self.first))
        for line in earlier[len(earlier) - room:] if room else []:
            store.append(line)
        for index in range(self.first, len(self)):
            store.append(self.line(index))
        return store

    def first_line(self, file: str) -> int | None:
        """The line number of the oldest kept line of ``file``, or None when none is kept."""
        file_id = self._file_ids.get(file)
        if file_id is None or not self._by_file[file_id]:
            return None
        return self._numbers[self._by_file[file_id][0] - self.first]

    def text(self, index: int) -> str:
        """The line's text ("" for a line no longer kept)."""
        local = index - self.first
        if local < 0:
            return ""
        start = self._starts[local]
        end = self._starts[local + 1] - 1 if local + 1 < len(self._starts) else len(self._data) - 1
        return self._data[start:end].decode("utf-8", "replace")

    def rank(self, index: int) -> int | None:
        if index < self.first:
            return None
        rank = self._ranks[index - self.first]
        return None if rank == NO_RANK else rank

    def node(self, index: int) -> str | None:
        return self.file_nodes[self._files[index - self.first]] if index >= self.first else None

    def level(self, index: int) -> int:
        return self._levels[index - self.first] if index >= self.first else LEVEL_INFO

    def find(self, file: str, line: int) -> int | None:
        """The index of ``file``:``line``, or None if that line has not arrived or is no longer kept."""
        file_id = self._file_ids.get(file)
        if file_id is None:
            return None
        indices = self._by_file[file_id]
        numbers, first = self._numbers, self.first
        pos = bisect_right(indices, line, key=lambda i: numbers[i - first]) - 1
        if pos >= 0 and numbers[indices[pos] - first] == line:
            return indices[pos]
        return None

    def select(self, line_filter: LineFilter, start: int = 0, raised: Mapping[int, int] | None = None) -> array:
        """Indices (from ``start``; kept lines only) of the lines the filter shows; ``raised``: lines
        at a higher level than their own words say (a finding's line), by index. Raises FilterError."""
        start = max(start, self.first)
        candidates: range | array = range(start, len(self))
        if line_filter.pattern:
            candidates = self._search(compile_pattern(line_filter.pattern), start)
        ranks, levels, first = self._ranks, self._levels, self.first
        wanted = line_filter.ranks
        min_level = line_filter.min_level
        if line_filter.node is not None:
            files, node = self._files, line_filter.node
            in_node = {i for i, name in enumerate(self.file_nodes) if name == node}
            candidates = [i for i in candidates if files[i - first] in in_node]
        if wanted is None and min_level == LEVEL_INFO:
            return array("L", candidates)
        raised = raised or {}
        return array(
            "L", (i for i in candidates
                  if (levels[i - first] >= min_level or raised.get(i, LEVEL_INFO) >= min_level)
                  and (wanted is None or ranks[i - first] in wanted))
        )

    def _search(self, pattern: regex.Pattern[str], start: int) -> array:
        """Lines from ``start`` (a kept line) holding a match, found by searching the whole buffer."""
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
            data, starts, end, first = self._data, self._starts, len(self._data), self.first
            pos = starts[start - first]
            while pos < end:
                match = byte_pattern.search(data, pos, timeout=max(deadline - time.monotonic(), 0.001))
                if match is None:
                    break
                line = bisect_right(starts, match.start()) - 1
                found.append(line + first)
                pos = starts[line + 1] if line + 1 < len(starts) else end
        except TimeoutError:
            raise FilterError(f"regex {pattern.pattern!r} is too slow (stopped after {FILTER_BUDGET_S:g} s)") from None
        return found
