"""The records stage: lines in, records out (docs/architecture.md, "Stages").

A line travels read -> records -> classify -> attribute -> decide. This stage groups each
stream's lines (a file and a rank, or a file and a prefix's stream) into records (``records.py``:
a traceback, a C++ exception block, a launcher's summary, a line alone) and hands out each record
when it is complete. Besides records it says what the later stages learn from lines that are no
record of their own: a time written in a file, an early line's rank, the literals of advice
conditions, and output of several ranks run together in one line. Plain data out; the stage
keeps only the records still in progress.
"""

from __future__ import annotations

from dataclasses import dataclass

import regex

from monitor.diagnosis import pyexc, records
from monitor.diagnosis.prefilter import Prefilter
from monitor.diagnosis.records import Record
from monitor.diagnosis.timestamps import DATED_LINES, FileDate, parse_timestamp
from monitor.logs import structured
from monitor.logs.ranks import parse_prefix
from monitor.model import LogLine

# The first lines of each file are all read: where the ranks that exist are learnt (for the
# rank that hung). Past them a line matters only with a prefilter literal or inside a record.
EARLY_LINES = 2000
# A rank's prefix right after other text: two ranks' output in one terminal line.
_GLUED = regex.compile(r"(?<=\S)\[rank\d+\]:")


@dataclass(frozen=True, slots=True)
class Glued:
    """The output of several ranks ran together in this terminal line (torchrun without --tee)."""
    line: LogLine


@dataclass(frozen=True, slots=True)
class TimeWritten:
    """A time written in ``file``: what in it had no time of its own happened no later."""
    file: str
    stamp: float


@dataclass(frozen=True, slots=True)
class EarlyLine:
    """A line among its file's first ``EARLY_LINES``: its rank, and its text without the prefix."""
    rank: int | None
    body: str


@dataclass(frozen=True, slots=True)
class ConditionLiterals:
    """A line holding literals of advice conditions (``unless_log``/``if_log``), by index."""
    line: LogLine
    hits: frozenset[int]


Event = Record | Glued | TimeWritten | EarlyLine | ConditionLiterals


class RecordAssembler:
    def __init__(self, prefilter: Prefilter) -> None:
        self._hits = prefilter.hits  # Prefilter.line_hits without a call per line
        self._noted = prefilter.noted  # registered classifiers' literals
        self.lines_fed = 0  # Finding.arrival: lines fed before a record's first line
        self._pending: dict[tuple, Record] = {}
        self._pending_per_file: dict[str, int] = {}
        # Per stream, the rank the next traceback is of (mp.spawn's "-- Process N terminated", Ray's
        # "[Rank N Error Snippet]:") and what named it (``records.spawned_rank``).
        self._spawned: dict[tuple, tuple[int, str]] = {}
        # Per stream, the last line that announced a handled error's traceback (line number, text).
        self._handled_intro: dict[tuple, tuple[int, str, str]] = {}
        self._glued_seen = False
        # Per file, the stream of its collective's stack in progress (``records.COLLECTIVE_STACK``),
        # while it is in progress.
        self._collective_stacks: dict[str, tuple] = {}
        # Files whose times the later stages wait for (a finding there had none of its own).
        self.times_wanted: set[str] = set()
        # The first time with a year the logs wrote (``timestamps.FileDate``): a time written
        # without one (glog's "I1121 02:35:53") takes the year nearest it. Per file, its look.
        self.dated: float | None = None
        self.file_dates: dict[str, FileDate] = {}

    def note_dated(self, seconds: float | None) -> None:
        """The logs' first dated time, once found (``dated``): the first one is kept."""
        if self.dated is None:
            self.dated = seconds

    def feed(self, line: LogLine) -> list[Event]:
        """What this line completes or tells (most lines: nothing)."""
        events: list[Event] = []
        arrival = self.lines_fed
        self.lines_fed += 1
        if line.line <= DATED_LINES:  # a file's year is in its first lines: no look per line after
            look = self.file_dates.get(line.file)
            if look is None:
                look = self.file_dates[line.file] = FileDate()
            if not (look.done or look.bulk):
                self.note_dated(look.look(line.text))
        self._feed(line, arrival, events)
        return events

    def _feed(self, line: LogLine, arrival: int, events: list[Event]) -> None:
        first_event = len(events)
        file_pending = self._pending_per_file.get(line.file, 0)
        if file_pending:
            self._expire(line, events)
            file_pending = self._pending_per_file.get(line.file, 0)
        rule_hits, log_hits, starter = self._hits(line.text.encode("utf-8", "surrogatepass"))
        if log_hits:
            events.append(ConditionLiterals(line, frozenset(log_hits)))
        read_for_content = bool(rule_hits or starter or file_pending)
        if not (read_for_content or line.line <= EARLY_LINES):
            return
        if (lines := structured.expanded(line)) is not None:
            # A JSON logger's line (parsed only where it may matter, as any line is read): its
            # message and exception, read as the lines they were.
            for piece in lines:
                self._feed(piece, arrival, events)
            return
        prefix = parse_prefix(line.text)
        if read_for_content and "[rank" in prefix.body and (glued := _GLUED.search(prefix.body)):
            # "step 3 loss nan[rank3]: Traceback ...": two ranks wrote into one terminal line
            # (torchrun without --tee). Each part is read as the line it should have been. Not a
            # line among a file's first ones that no literal marks: the fast scan reads those only
            # for their ranks (scan.py), so neither path notes the glue there.
            cut = len(line.text) - len(prefix.body) + glued.start()
            if not self._glued_seen:
                self._glued_seen = True
                events.append(Glued(line))
            self._feed(LogLine(line.file, line.line, line.text[:cut], line.rank), arrival, events)
            self._feed(LogLine(line.file, line.line, line.text[cut:], None), arrival, events)
            return
        if starter and (cut := _glued_traceback(prefix.body)) is not None:
            # "name? Traceback (most recent call last):", or a tqdm bar redrawn with \r and never
            # ended: the header starts a line of its own (with the line's prefix), as on a terminal.
            lead = line.text[:len(line.text) - len(prefix.body)]
            self._feed(LogLine(line.file, line.line, lead + prefix.body[:cut], line.rank), arrival, events)
            self._feed(LogLine(line.file, line.line, lead + prefix.body[cut:], line.rank), arrival, events)
            return
        # The line's rank as its reader attributed it (a node's local rank made global), else its prefix's.
        rank = line.rank if line.rank is not None else prefix.rank
        if line.line <= EARLY_LINES:
            events.append(EarlyLine(rank, prefix.body))
        key = (line.file, rank if rank is not None else prefix.stream)
        self._take(line, key, prefix.body, rank, rule_hits, starter, arrival, events, bool(prefix.lead))
        # Records this line completed: what they tell may have no time of its own either.
        untimed = [e for e in events[first_event:] if isinstance(e, Record) and e.time_after is None]
        if (untimed or line.file in self.times_wanted or self._pending_per_file.get(line.file)) and \
                (stamp := parse_timestamp(prefix.lead or prefix.body, self.dated)) is not None:
            for record in untimed:
                record.time_after = stamp
            self._note_time(key, stamp, events)

    def _note_time(self, key: tuple, stamp: float, events: list[Event]) -> None:
        """A time written in a file, by the stream ``key``: the file's findings without a time, and
        the records of its other streams still open (completed later: at the file's end), came
        before it. (A record's own lines say when it was written, not when it happened.)"""
        file = key[0]
        if file in self.times_wanted:
            self.times_wanted.discard(file)
            events.append(TimeWritten(file, stamp))
        for record_key, record in self._pending.items():
            if record_key[0] == file and record_key != key and record.time_after is None:
                record.time_after = stamp

    def _take(self, line: LogLine, key: tuple, body: str, rank: int | None, rule_hits, starter: bool,
              arrival: int, events: list[Event], stamped: bool) -> None:
        """A candidate line into its stream's record (continuing, completing or starting one), or
        a record alone. ``stamped``: a time or a logger's head came before ``body``."""
        record = self._pending.get(key)
        if record is None and (stack := self._collective_stacks.get(line.file)) is not None \
                and records.continues(self._pending[stack], body):
            # torch prefixes only the first line of its message with the rank ("[rank0]:"): the
            # frames of the collective's stack follow unprefixed, in another stream.
            records.append(self._pending[stack], line, body, rule_hits)
            return
        if record is not None:
            if records.continues(record, body, stamped):
                records.append(record, line, body, rule_hits)
                if record.state == "done" or (record.kind == "headed" and len(record.lines) == 2):
                    events.append(self._complete(key))
                return
            record.followed_by = body
            events.append(self._complete(key))
        kind = records.starter_kind(body) if starter else None
        if starter and kind is None and (said := records.intro_of(body)) is not None:
            self._handled_intro[key] = (line.line, said, body)
        if kind == "spawned":
            # torch.multiprocessing.spawn's "-- Process N terminated with the following error:" (its
            # rank, under mp.spawn's usual use), Ray Train's "[Rank N Error Snippet]:": the
            # traceback that follows is that rank's.
            self._spawned[key] = records.spawned_rank(body.strip())
        elif kind is not None:
            if kind == "collective_stack":
                self._collective_stacks[line.file] = key
            record = records.start(kind, line, body, rank, arrival, stamped)
            if rank is None and kind == "traceback" and (spawned := self._spawned.pop(key, None)) is not None:
                record.rank, record.rank_from = spawned
            if kind == "traceback" and (reported := records.REPORTED_RANK.match(body.lstrip())) is not None:
                record.rank, record.rank_from = int(reported[1]), "message"
            intro = self._handled_intro.pop(key, None) if kind == "traceback" else None
            if intro is not None and line.line - intro[0] <= records.HANDLED_WITHIN:
                record.handled_by, record.intro = intro[1], intro[2]
            record.rule_hits.append(rule_hits)
            self._pending[key] = record
            self._pending_per_file[line.file] = self._pending_per_file.get(line.file, 0) + 1
        elif rule_hits or (starter and (pyexc.parse_exception_line(body) is not None
                                        or any(literal in body for literal in self._noted))):
            events.append(Record("line", [line], [body], rank, rule_hits=[rule_hits], arrival=arrival))

    def flush(self, file: str | None = None) -> list[Record]:
        """Completes the records in progress (of ``file``, or all): end of file, or idle."""
        return [self._complete(key) for key in [k for k in self._pending if file is None or k[0] == file]]

    def has_pending(self, file: str) -> bool:
        return bool(self._pending_per_file.get(file))

    def _expire(self, line: LogLine, events: list[Event]) -> None:
        for key, record in list(self._pending.items()):
            if key[0] == line.file and line.line - record.last_line > record.silence_limit:
                events.append(self._complete(key))

    def _complete(self, key: tuple) -> Record:
        record = self._pending.pop(key)
        if self._collective_stacks.get(key[0]) == key:
            del self._collective_stacks[key[0]]
        self._pending_per_file[key[0]] -= 1
        return records.trim(record)


def _glued_traceback(body: str) -> int | None:
    """Where a traceback header starts in ``body`` when other text comes before it, else None.
    torch's "Original Traceback" (a DataLoader worker's, re-raised) is one line, not two; nor is
    PaddlePaddle's "C++ Traceback (most recent call last):", part of the message of the Python
    exception before it."""
    at = body.find(records.TRACEBACK_HEADER)
    if at <= 0 or not body[:at].strip() or body.lstrip().startswith((records.ORIGINAL_TRACEBACK, records.CPP_TRACEBACK)):
        return None
    return at
