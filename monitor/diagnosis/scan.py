"""The fast path for finished files: search big byte chunks for the prefilter's literals and
feed the engine only the lines that can matter.

Equivalence with feeding every line (``reader.read_log`` + ``Engine.feed``) rests on three facts:

- a line the engine would act on contains a prefilter literal in its clean text, and clean
  text is a substring of the raw bytes, except where cleaning removed escape or control bytes,
  which the chunk search also reports; a candidate line is fed unless its raw bytes already
  fail the same per-line test (``Prefilter.raw_line_matters``, a superset of the clean test);
- while a file has a record in progress (or waits for a time written after a finding), every
  line is fed, in order; of its first ``EARLY_LINES`` lines, those no literal marks only teach
  which ranks exist, which is all feeding them would do (``Engine.early_line``);
- lines are split and cut exactly as ``LineAssembler`` does, and numbered the same; a line cut
  is always fed (the engine notes every line it could not read whole).

Skipped lines would have been no-ops, so the findings are the same, in the same order. One
exception, on purpose: the note that ranks' lines ran together (``Glued``, a `[rankN]:` in the
middle of a line) comes from the lines that are fed; a glued line holding no literal at all is not
looked at, since finding a tag after any non-space byte costs a regex pass over every chunk (1.2 s
on 100 MB, more than the rest of the scan). The note is information only, never a root cause.
"""

from __future__ import annotations

import os
import re

from monitor.diagnosis.attribute import WORLD_SIZE, process_claim
from monitor.diagnosis.engine import EARLY_LINES, Engine
from monitor.diagnosis.prefilter import has_control
from monitor.diagnosis.timestamps import FileDate
from monitor.formats import LEAD_ALTERNATION, PREFIX_ALTERNATION
from monitor.logs import structured
from monitor.logs.ranks import FileRanks
from monitor.logs.reader import make_line, open_log, read_chunks
from monitor.logs.decode import MAX_LINE_BYTES, LineAssembler, left_out
from monitor.text import clean

CHUNK_BYTES = 4 << 20
# At a line's start: its (stacked) rank prefixes, or a lead (a time, a pdsh host) that a prefix may
# follow; without the prefixes' groups, for finding them fast over a region.
# (The standard library's engine: three times faster than regex's at these line-start searches.)
_STACKED_PREFIX = re.compile(f"(?m)^(?:{PREFIX_ALTERNATION})(?:{PREFIX_ALTERNATION})?")
_LEAD_LINE = re.compile(f"(?m)^(?!(?:{PREFIX_ALTERNATION}))(?:{LEAD_ALTERNATION}).*$")


def _cut(raw: bytes) -> bytes:
    """A complete raw line as ``LineAssembler`` keeps it (rare: only overlong lines differ)."""
    return LineAssembler().feed(raw + b"\n")[0] if len(raw) > MAX_LINE_BYTES else raw


def _long_lines(block: bytes, size: int) -> list[int]:
    """Where the lines over ``MAX_LINE_BYTES`` among ``block[:size]``'s complete lines start. Such
    a line holds a whole stretch of half that length, counted from the end of the line before
    it, with no newline: a look at each stretch finds them (~128 looks in a 4 MiB chunk)."""
    starts: list[int] = []
    stretch = MAX_LINE_BYTES // 2
    at = 0
    while at + stretch <= size:
        if block.find(b"\n", at, at + stretch) >= 0:
            at += stretch
            continue
        start = block.rfind(b"\n", 0, at) + 1
        end = block.index(b"\n", at + stretch, size)
        if end - start > MAX_LINE_BYTES:
            starts.append(start)
        at = end + 1
    return starts


def _has_control_hit(hits: list[int], first: int, end: int, controls: set[int]) -> bool:
    """Whether a control byte is among the hits from index ``first`` up to offset ``end``:
    cleaning removes it and may join the text around it into a literal, so the line is fed."""
    if not controls:
        return False
    while first < len(hits) and hits[first] < end:
        if hits[first] in controls:
            return True
        first += 1
    return False


class EarlyLines:
    """What the first ``EARLY_LINES`` lines of a file, among those in ``block[:size]`` from line
    ``number`` on, teach besides their findings: which ranks exist (each line's rank, as the
    line-by-line path reads it) and the world sizes they say. Read from the whole region at
    once, each distinct prefix parsed once: the per-line path cost ~25 us a line, ~50 ms a file."""

    def __init__(self, file_rank: FileRanks, number: int, block: bytes, size: int, file_date: FileDate) -> None:
        end = _after_lines(block, size, EARLY_LINES - number)
        region = block[:end - 1] if end else b""  # complete lines only, without the last newline
        self.count = region.count(b"\n") + 1 if end else 0
        if has_control(region):
            text = "\n".join(clean(raw) for raw in region.split(b"\n"))
        else:
            text = region.decode("utf-8", "replace")
        self.world_sizes = [int(m[1]) for m in WORLD_SIZE.finditer(text)] if "orld" in text or "ORLD" in text else []
        prefixes = _STACKED_PREFIX.findall(text)
        led = _LEAD_LINE.findall(text) if len(prefixes) < self.count else []  # every line has a prefix
        ranks = {file_rank.of(prefix) for prefix in set(prefixes)} | {file_rank.of(line) for line in led}
        if len(prefixes) + len(led) < self.count:
            ranks.add(file_rank.file_rank)  # a line with no prefix: its file's rank
        if '{"' in text:  # a JSON logger's records: their rank fields, as the line-by-line path reads them
            ranks.update(structured.rank_of(line) for line in text.split("\n") if line[:1] == "{")
        ranks.discard(None)
        self.ranks = ranks
        # The ranks NCCL processes set up with (``attribute.process_claim``).
        claims = (process_claim(line) for line in text.split("\n") if " NCCL INFO " in line) if " NCCL INFO " in text else ()
        self.claims = [claim for claim in claims if claim is not None]
        # The logs' own year, for the times written without one, from the file's first lines.
        self.dated = None
        for line in text.split("\n") if not file_date.done else ():
            self.dated = file_date.look(line)
            if file_date.done:
                break


def _after_lines(block: bytes, size: int, count: int) -> int:
    """The offset just after the ``count``-th newline of ``block[:size]`` (or after its last one,
    where it holds fewer), 0 where it holds none: found without copying the block."""
    end = 0
    for _ in range(count):
        newline = block.find(b"\n", end, size)
        if newline < 0:
            break
        end = newline + 1
    return end


def scan_file(path: str | os.PathLike, engine: Engine, chunk_bytes: int = CHUNK_BYTES) -> int:
    """Feeds ``engine`` the lines of one file that can matter; returns the number of lines.
    The caller flushes the file's records. Raises UnreadableLog (after feeding what it read)."""
    return _scan(path, engine, chunk_bytes, None)[0]


def scan_prefix(path: str | os.PathLike, engine: Engine, size: int, chunk_bytes: int = CHUNK_BYTES) -> tuple[int, int]:
    """The same for the first ``size`` bytes of a file still being written, up to its last
    complete line (a partial last line is left to whoever follows the file on): returns (lines
    fed or skipped, bytes they span). Raises UnreadableLog."""
    return _scan(path, engine, chunk_bytes, size)


def _scan(path, engine: Engine, chunk_bytes: int, limit: int | None) -> tuple[int, int]:
    name = str(path)
    file_rank = FileRanks(name)
    # The file's year, looked for in its first blocks, not line by line as the engine would.
    file_date = engine.read_date_in_bulk(name)
    prefilter = engine.prefilter
    number = 0
    carry = b""
    # A line longer than MAX_LINE_BYTES whose end is not read yet, cut as LineAssembler cuts it.
    long_line: LineAssembler | None = None

    def feed(raw: bytes) -> None:
        engine.feed(make_line(name, number, raw, file_rank))

    # A finished file read post-mortem may be searched on two threads; one a running job still
    # writes (``scan_prefix``, the screen attaching to it) shares the machine with the job.
    finished = limit is None
    done = 0  # bytes of the complete lines so far (the end of the last newline)
    read = 0
    with open_log(path) as handle:
        for data in read_chunks(handle, name, lambda: number, chunk_bytes):
            if limit is not None:
                data = data[:max(0, limit - read)]
                if not data:
                    break
            read += len(data)
            if long_line is not None:
                end = data.find(b"\n")
                if end < 0:
                    long_line.feed(data)  # still inside the overlong line
                    continue
                number += 1
                feed(long_line.feed(data[:end + 1])[0])
                long_line, data = None, data[end + 1:]
                done = read - len(data)
            block = carry + data
            cut = block.rfind(b"\n")
            size = cut + 1  # the block's complete lines; the rest is carried over
            carry = block[size:]
            if cut >= 0:
                done = read - len(carry)
            if len(carry) > MAX_LINE_BYTES:
                long_line, carry = LineAssembler(), b""
                long_line.feed(block[size:])
            if cut < 0:
                continue
            if number < EARLY_LINES:
                early = EarlyLines(file_rank, number, block, size, file_date)
                engine.early_lines(early.ranks, early.world_sizes, early.count, early.claims, early.dated)
            view = memoryview(block)
            seen = engine.log_seen
            hits, controls = prefilter.chunk_hits(view[:size], seen, halves=finished)
            long_lines = _long_lines(block, size)
            if long_lines:
                hits = sorted(hits + long_lines)
            pos = hit = 0
            while pos < size:
                if engine.log_seen_count != len(seen):
                    # A log-condition pattern was found: stop looking for its literals.
                    seen = engine.log_seen
                    found, more = prefilter.chunk_hits(view[pos:size], seen, halves=finished)
                    hits, hit = sorted([pos + h for h in found] + [at for at in long_lines if at >= pos]), 0
                    controls = controls | {pos + c for c in more}
                everything = engine.has_pending(name) or (number < EARLY_LINES and engine.wants_time(name))
                if everything:
                    start = pos
                else:
                    while hit < len(hits) and hits[hit] < pos:
                        hit += 1
                    if hit == len(hits):
                        number += block.count(b"\n", pos, size)
                        break
                    newline = block.rfind(b"\n", pos, hits[hit])
                    start = pos if newline < 0 else newline + 1
                    number += block.count(b"\n", pos, start)
                end = block.index(b"\n", start)
                number += 1
                raw = _cut(block[start:end])
                if everything or left_out(raw) or _has_control_hit(hits, hit, end, controls) \
                        or prefilter.raw_line_matters(raw, seen, check_control=False):
                    feed(raw)
                pos = end + 1
        if limit is not None:
            return number, done  # the partial last line is the follower's
        if long_line is not None:
            number += 1
            last = long_line.flush()
            assert last is not None  # it holds more than MAX_LINE_BYTES
            feed(last)
        elif carry:
            number += 1
            feed(carry)
    return number, read
