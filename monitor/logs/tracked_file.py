"""One followed file: where we are in it, which inode that is, and how to go on after rotation.

A followed file is known by its path. What sits at that path is an inode, ``(st_dev, st_ino)``;
each inode read from the start (or from zero after a truncation) is one *generation*, with line
numbers from 1. On every visit the path is stat'ed:

- another inode at the path (logrotate ``create``: rename, then a new file; or delete and
  recreate): the old inode is read to its end through the descriptor still held (or found again
  beside the path under its new name), its partial last line is emitted, and the new inode is
  read from its start;
- the same inode but smaller than what was read, or with other bytes where we stopped
  (``copytruncate``, truncation to zero or to a smaller size, rewritten in place): the lines
  written between our last read and the truncation are read from the copy logrotate left beside
  the file (recognised by the bytes around our offset); then reading goes on after the part of
  the file that is still what we read (the prefix a ``truncate -s`` kept: its lines are not
  emitted twice), or from the start of a file written anew;
- bigger: the new bytes are read, split into lines (a partial last line is held until its
  newline arrives or the generation ends), and emitted once.

NUL bytes are dropped on reading: they come from preallocated files and from a writer without
``O_APPEND`` that goes on writing at its old offset after a truncation.
"""

from __future__ import annotations

import os
import stat
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Callable

from monitor.model import LogLine
from monitor.logs.decode import SNIFF_BYTES, LineAssembler, left_out, looks_binary
from monitor.logs.line_sums import LineSums
from monitor.text import clean
from monitor.logs.sources import COMPRESSED_SUFFIXES

Identity = tuple[int, int]

READ_CHUNK = 1024 * 1024
# Bytes kept from the start of a generation and from the end of what was read: enough to tell
# a file rewritten in place, and to recognise logrotate's copy of a file it then truncated.
HEAD_BYTES = 256
TAIL_BYTES = 256
MARK_BYTES = 64
# The last bytes read, raw, to find where a file truncated to a smaller size (and maybe grown
# again) stops being what we read; and sparse marks further back, at line ends, for a file cut
# further than that. Small: thousands of files are followed at once.
RECENT_BYTES = 4096
CHECKPOINTS = 16
ENDED_KEPT = 32
CHECKPOINT_SPACING = 16 * 1024
CHECKPOINT_SAMPLE = 32
# Looks for a rotated file beside ours while the folder keeps changing under the look.
FIND_ATTEMPTS = 4


@dataclass(slots=True)
class ReadOutput:
    """What a round of reading produced, in the order it was read."""

    lines: list[LogLine] = field(default_factory=list)
    # Files whose generation ended (rotated, truncated, deleted), each with the number of lines
    # read before that end: their open records are complete there.
    ended: list[tuple[int, str]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    # Inodes read under another name: a later discovery of them resumes there. The follower
    # passes its own map, so that a visit later in the same round sees it.
    consumed: dict[Identity, ReadUpTo] = field(default_factory=dict)
    # Inodes that left a followed path (renamed by rotation, or copied before a truncation),
    # with that path: the follower looks for them beside it.
    rotated_from: dict[Identity, str] = field(default_factory=dict)
    # Live paths that were rotated or truncated, each with the time of the last write seen
    # before (the mtime at the visit before): files rotated beside them since then (whole
    # generations written and rotated away between two visits) are read too. With ``strict``,
    # only those written at that time or later (no slack before it): the path was empty then,
    # and a copy made since may hold a generation it had in between. At, not only after: file
    # times move in clock ticks of milliseconds, so a copy made right after has the same time.
    rotations: list[tuple[str, float, bool]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class ReadUpTo:
    """How far an inode was read: ``offset`` bytes, ``lines`` lines; ``head`` (its first bytes)
    tells it from a later file that got the same inode number."""

    offset: int
    lines: int
    head: bytes


FROM_START = ReadUpTo(0, 0, b"")
StartFor = Callable[[str, Identity], "ReadUpTo | None"]


class DescriptorCache:
    """Open descriptors of the most recently read files, at most ``limit``: thousands of rank
    files are followed without holding a descriptor for each idle one."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._open: OrderedDict[int, int] = OrderedDict()  # id(FollowedFile) -> fd

    @property
    def full(self) -> bool:
        return len(self._open) >= self.limit

    def held(self, followed: FollowedFile) -> int | None:
        return self._open.get(id(followed))

    def open(self, followed: FollowedFile) -> int | None:
        """A descriptor on the followed file's current inode (None if the path now names another)."""
        key = id(followed)
        fd = self._open.get(key)
        if fd is not None:
            self._open.move_to_end(key)
            return fd
        fd = os.open(followed.path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != followed.identity:
            os.close(fd)
            return None
        self._open[key] = fd
        while len(self._open) > self.limit:
            _, old = self._open.popitem(last=False)
            os.close(old)
        return fd

    def close(self, followed: FollowedFile) -> None:
        fd = self._open.pop(id(followed), None)
        if fd is not None:
            os.close(fd)

    def close_all(self) -> None:
        while self._open:
            os.close(self._open.popitem()[1])


class FollowedFile:
    """The state of one followed path across the generations of what it names."""

    def __init__(self, path: str, family: str | None = None, named: bool = False) -> None:
        self.path = path
        # Named by the user, not found in a folder: while it does not exist, that is said once
        # and it is waited for, as ``tail -F`` does ("has appeared" once it does).
        self.named = named
        self.appeared = False
        # The live path whose rotations this file is one of (``app.log`` for ``app.log.3``):
        # its inode is looked for beside that one when it moves on (``.3`` -> ``.4``).
        self.family = family or path
        self.identity: Identity | None = None
        self.offset = self.lines = 0
        self.assembler = LineAssembler()
        self.head = b""
        # Where the first text (not NUL) of this generation was read, and its first bytes.
        self.mark: tuple[int, bytes] | None = None
        self.recent = b""  # the last RECENT_BYTES read, ending at offset
        # (offset of a line end, lines up to there, the bytes just before it), oldest first.
        self.checkpoints: list[tuple[int, int, bytes]] = []
        self.checkpoint_spacing = CHECKPOINT_SPACING
        self.sums = LineSums(0)  # of the last lines read, for a cut further back than ``recent``
        self.line_start = 0  # offset where the partial last line starts
        # Generations read to their end, newest last: a copy of one found later (logrotate's
        # .1 shifted to .2 ...) is read from where it ended, not again.
        self.ended: deque[ReadUpTo] = deque(maxlen=ENDED_KEPT)
        self.binary = False
        self.problem: str | None = None
        self.mtime = 0.0  # of the last stat: when the file was last written
        self.cut_while_reading = False

    # -- one visit -------------------------------------------------------------------------
    def visit(self, fds: DescriptorCache, out: ReadOutput, start_for: StartFor, budget: int = READ_CHUNK) -> bool:
        """Read what is new; returns True if more is waiting (the budget was used up).
        ``start_for(path, identity)`` says where a new inode at the path is to be read from:
        how far it was read under another name, or None to leave it for now."""
        since = self.mtime  # rotations found now happened after that write
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            st = None
        except OSError as exc:
            self._report(out, f"{self.path}: cannot read: {exc.strerror or exc}")
            return False
        if st is not None and not stat.S_ISREG(st.st_mode):
            self._report(out, f"{self.path}: not a regular file, not followed")
            return False
        identity = (st.st_dev, st.st_ino) if st is not None else None
        if self.identity is not None and identity != self.identity:
            out.rotations.append((self.family, since, False))
            self._drain_replaced(fds, out)
            # Renamed beside us (app.log.1): it is followed on under that name from the start
            # of its partial last line, which its writer may complete there.
            carry = self._find_beside(lambda st: (st.st_dev, st.st_ino) == self.identity, close=True)
            self._end_generation(fds, out, keep_identity=False, carry=carry is not None)
        if st is None:
            if self.named and not self.appeared:
                self._report(out, f"{self.path}: no such file yet; waiting for it to appear")
            return False
        self.mtime = st.st_mtime
        if self.identity is None:
            assert identity is not None  # st is not None here
            start = start_for(self.path, identity)
            if start is None:
                return False
            self._start_generation(identity, start)
            if self.named and not self.appeared and self.problem is not None:
                self._report(out, f"{self.path} has appeared; following it")
            self.appeared = True
        elif self.offset == 0 and since and st.st_mtime != since:
            # Empty at the last visit, written since (empty again, maybe): nothing read tells
            # whether a whole generation was written, copied away (copytruncate) and truncated
            # in between.
            out.rotations.append((self.family, since, True))
        # Written since the last visit yet no bigger: truncated and written again to the size
        # we had read (or further, but the same size by chance): the bytes tell.
        same_size_written = st.st_size == self.offset and st.st_mtime != since and self.offset > 0
        if st.st_size == self.offset and not same_size_written and fds.held(self) is None and fds.full:
            return False  # unchanged, and no descriptor to spare: thousands of idle files
        try:
            fd = fds.open(self)
        except OSError as exc:
            self._report(out, f"{self.path}: cannot read: {exc.strerror or exc}")
            return False
        if fd is None:
            return True  # replaced between stat and open: the next visit sees the new inode
        self.problem = None
        # A grown file is checked by the read itself, after it has the bytes (a cut between this
        # look and the read is seen there); here only what that read cannot see, or saw.
        if st.st_size < self.offset or (same_size_written or self.cut_while_reading) and self.rewritten(fd, at_offset=True):
            out.rotations.append((self.family, since, False))
            kept = self._kept_prefix(fd, st.st_size)
            self._recover_from_copy(out)
            self._end_generation(fds, out, keep_identity=True)
            self._start_generation(identity, kept or FROM_START)
            fd = fds.open(self)
            if fd is None:
                return True
        self.cut_while_reading = False
        return self._read(fd, st.st_size, out, budget) or self.cut_while_reading

    @property
    def tail(self) -> bytes:
        return self.recent[-TAIL_BYTES:]

    def pending_text(self) -> str:
        """The partial last line (no newline yet), cleaned: for display, never fed to rules."""
        return clean(self.assembler.pending)

    def finish(self, fds: DescriptorCache, out: ReadOutput) -> None:
        """The follower stops: the partial last line becomes a line."""
        self._end_generation(fds, out, keep_identity=True)

    # -- generations -----------------------------------------------------------------------
    def _start_generation(self, identity: Identity | None, start: ReadUpTo | KeptPrefix) -> None:
        self.identity = identity
        self.offset, self.lines, self.head = start.offset, start.lines, start.head
        self.line_start = start.offset
        self.assembler.reset()
        if isinstance(start, KeptPrefix):
            self.mark, self.recent, self.checkpoints = start.mark, start.recent, start.checkpoints
            self.sums = start.sums
        else:
            self.mark, self.recent, self.checkpoints = None, b"", []
            self.checkpoint_spacing = CHECKPOINT_SPACING
            self.sums = LineSums(start.offset)
        self.binary = False

    def _kept_prefix(self, fd: int, size: int) -> KeptPrefix | None:
        """After a truncation to ``size`` (maybe grown since): the line end up to which the file
        still holds what we read, with the lines up to there; None if it holds nothing of it."""
        if self.binary or not self.head:
            return None
        same_head = _common_prefix(os.pread(fd, len(self.head), 0), self.head)
        if same_head < len(self.head):
            # Cut (or written anew) within the first bytes: the kept lines are in the head.
            end = self.head.rfind(b"\n", 0, same_head) + 1
            if not end:
                return None
            return KeptPrefix(end, self.head.count(b"\n", 0, end), self.head[:end], None, b"", [], self.sums.kept_until(end))
        start = self.offset - len(self.recent)
        end = 0
        if held := self.sums.still_held(fd, size):
            # The last lines read, each by its sum: exact, and sure of a cut before the last bytes.
            offset, after = held
            lines = self.lines - after
            recent = os.pread(fd, min(offset, RECENT_BYTES), offset - min(offset, RECENT_BYTES))
        elif not self.sums.ends or self.sums.start > start:
            # No line summed where the last bytes read begin (one long line): those bytes tell.
            same = _common_prefix(os.pread(fd, min(size, self.offset) - start, start), self.recent) if size > start else 0
            end = self.recent.rfind(b"\n", 0, same) + 1
            offset, lines, recent = start + end, self.lines - self.recent.count(b"\n", end), self.recent[:end]
        if held or end:
            checkpoints = [c for c in self.checkpoints if c[0] <= offset]
        else:  # cut before the last lines summed: from the last line-end mark still there
            recent = b""
            checkpoints = [c for c in self.checkpoints if c[0] <= min(start, size)]
            while checkpoints:
                offset, lines, sample = checkpoints[-1]
                if os.pread(fd, len(sample), offset - len(sample)) == sample:
                    break
                checkpoints.pop()
            else:
                return None
        mark = self.mark if self.mark is not None and self.mark[0] + len(self.mark[1]) <= offset else None
        return KeptPrefix(offset, lines, self.head, mark, recent, checkpoints, self.sums.kept_until(offset))

    def _end_generation(self, fds: DescriptorCache, out: ReadOutput, *, keep_identity: bool, carry: bool = False) -> None:
        """``carry``: the partial last line is not emitted here; the inode is read on (under its
        new name) from where that line starts."""
        last = self.assembler.flush()
        if last is not None and not self.binary and not carry:
            self._emit([last], out)
        if self.identity is not None and (self.offset or self.lines):
            out.ended.append((len(out.lines), self.path))
            self.ended.append(ReadUpTo(self.offset, self.lines, self.head))
            if not keep_identity:
                resume = self.line_start if carry else self.offset
                out.consumed[self.identity] = ReadUpTo(resume, self.lines, self.head)
                out.rotated_from[self.identity] = self.path
        fds.close(self)
        if not keep_identity:
            self.identity = None

    def _drain_replaced(self, fds: DescriptorCache, out: ReadOutput) -> None:
        """Our inode left the path: read what its writer added since our last visit."""
        fd = fds.held(self)
        opened = None
        if fd is None:
            opened = fd = self._find_beside(lambda st: (st.st_dev, st.st_ino) == self.identity)
        if fd is None:
            return
        try:
            while self._read(fd, os.fstat(fd).st_size, out, READ_CHUNK):
                pass
        finally:
            if opened is not None:
                os.close(opened)

    def _recover_from_copy(self, out: ReadOutput) -> None:
        """A truncation: logrotate's copytruncate left a copy whose bytes up to our offset are
        those we read; the lines after our offset exist only there."""
        if not self.tail or not self.head:
            return
        offset = self.offset

        def is_copy(st: os.stat_result, fd: int) -> bool:
            return (
                st.st_size >= offset
                and os.pread(fd, len(self.head), 0) == self.head
                and os.pread(fd, len(self.tail), offset - len(self.tail)) == self.tail
            )

        fd = self._find_beside(lambda st: st.st_size >= offset, confirm=is_copy)
        if fd is None:
            return
        try:
            st = os.fstat(fd)
            while self._read(fd, st.st_size, out, READ_CHUNK):
                pass
            out.consumed[(st.st_dev, st.st_ino)] = ReadUpTo(self.offset, self.lines, self.head)
            out.rotated_from[(st.st_dev, st.st_ino)] = self.path
        finally:
            os.close(fd)

    def _find_beside(self, wanted, confirm=None, close: bool = False) -> int | None:
        """An open descriptor on a rotated sibling (``app.log.1``, ``app.log-20250101``...);
        with ``close``, only whether there is one (the descriptor is closed: -1). Looked for
        again (a few times) when the folder changed during the look: logrotate shifting its
        copies (.1 -> .2 -> ...) moves a file past a name after we listed it."""
        folder = os.path.split(self.family)[0] or os.curdir
        for _ in range(FIND_ATTEMPTS):
            try:
                before = os.stat(folder).st_mtime_ns
                found = self._look_beside(wanted, confirm, close)
                if found is not None or os.stat(folder).st_mtime_ns == before:
                    return found
            except OSError:
                return None
        return None

    def _look_beside(self, wanted, confirm, close: bool) -> int | None:
        folder, base = os.path.split(self.family)
        names = os.listdir(folder or os.curdir)
        for name in sorted(names):
            if not is_rotated_name(base, name) or os.path.join(folder, name) == self.path:
                continue
            path = os.path.join(folder, name)
            try:
                fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
            except OSError:
                continue
            try:
                st = os.fstat(fd)
                if stat.S_ISREG(st.st_mode) and wanted(st) and (confirm is None or confirm(st, fd)):
                    if close:
                        os.close(fd)
                        return -1
                    return fd
            except OSError:
                pass
            os.close(fd)
        return None

    # -- reading ---------------------------------------------------------------------------
    def rewritten(self, fd: int, at_offset: bool = False) -> bool:
        """Whether the first text read of this generation is no longer where it was: truncated
        and written again (by a writer without O_APPEND, over a hole of NUL bytes). With
        ``at_offset``, also whether the bytes just before our offset changed: truncated and
        grown past our offset between two visits, under a first line that did not change (a
        banner, a header every run prints)."""
        if self.mark is not None:
            if os.pread(fd, len(self.mark[1]), self.mark[0]) != self.mark[1]:
                return True
        elif self.head and os.pread(fd, len(self.head), 0) != self.head:
            return True
        return at_offset and bool(self.tail) and os.pread(fd, len(self.tail), self.offset - len(self.tail)) != self.tail

    def _read(self, fd: int, size: int, out: ReadOutput, budget: int) -> bool:
        if size <= self.offset:
            return False
        if self.binary:
            self.offset = size  # skipped, not read
            return False
        at_start = self.offset == 0
        data = os.pread(fd, min(size - self.offset, budget), self.offset)
        if not data:
            return False
        if not at_start and self.rewritten(fd, at_offset=True):
            # Cut and written again since what we read last (before this visit, or between its
            # look and this read): these bytes may be the new text's. Left unread; the next
            # visit (at once) handles the cut.
            self.cut_while_reading = True
            return False
        self.sums.add(data, self.offset)
        if self.offset < HEAD_BYTES:
            self.head = (self.head + data)[:HEAD_BYTES]
        if self.mark is None and (text_at := len(data) - len(data.lstrip(b"\0"))) < len(data):
            self.mark = (self.offset + text_at, data[text_at:text_at + MARK_BYTES])
        newline = data.rfind(b"\n")
        if newline >= 0:
            self.line_start = self.offset + newline + 1
        self.offset += len(data)
        self.recent = data[-RECENT_BYTES:] if len(data) >= RECENT_BYTES else (self.recent + data)[-RECENT_BYTES:]
        if b"\0" in data:
            data = data.replace(b"\0", b"")
        if at_start and looks_binary(data[:SNIFF_BYTES]):
            self.binary = True
            self._report(out, f"{self.path}: binary file, not read as a log")
        if not self.binary:
            self._emit(self.assembler.feed(data), out)
            if newline >= 0:
                self._checkpoint()
        return self.offset < size

    def _checkpoint(self) -> None:
        """Mark the last line end read, if far enough from the last mark; when the marks are
        full, every other one goes and they are spaced twice as far."""
        last = self.checkpoints[-1][0] if self.checkpoints else 0
        if self.line_start - last < self.checkpoint_spacing or self.line_start < CHECKPOINT_SAMPLE:
            return
        cut = self.line_start - (self.offset - len(self.recent))
        if cut < CHECKPOINT_SAMPLE:
            return
        self.checkpoints.append((self.line_start, self.lines, self.recent[cut - CHECKPOINT_SAMPLE:cut]))
        if len(self.checkpoints) > CHECKPOINTS:
            del self.checkpoints[::2]
            self.checkpoint_spacing *= 2

    def _emit(self, raws: list[bytes], out: ReadOutput) -> None:
        path = self.path
        number = self.lines
        append = out.lines.append
        for raw in raws:
            number += 1
            append(LogLine(path, number, clean(raw), left_out=left_out(raw)))
        self.lines = number

    def _report(self, out: ReadOutput, problem: str) -> None:
        if problem != self.problem:
            self.problem = problem
            out.problems.append(problem)


@dataclass(frozen=True, slots=True)
class KeptPrefix:
    """Where reading goes on in a file truncated to a part of what was read."""

    offset: int
    lines: int
    head: bytes
    mark: tuple[int, bytes] | None
    recent: bytes
    checkpoints: list[tuple[int, int, bytes]]
    sums: LineSums


def _common_prefix(a: bytes, b: bytes) -> int:
    """The length of the longest common start of ``a`` and ``b`` (a binary search on slices)."""
    low, high = 0, min(len(a), len(b))
    while low < high:
        middle = (low + high + 1) // 2
        if a[:middle] == b[:middle]:
            low = middle
        else:
            high = middle - 1
    return low


def is_rotated_name(base: str, name: str) -> bool:
    """``app.log.1``, ``app.log-20250101``, ``app.log_old`` are rotations of ``app.log``."""
    return (
        len(name) > len(base) and name.startswith(base) and name[len(base)] in ".-_"
        and not name.lower().endswith(COMPRESSED_SUFFIXES)
    )


def rotations_by_base(names: list[str]) -> dict[str, list[str]]:
    """The names that are rotations of another (``is_rotated_name``), under each name they may be
    a rotation of: ``app.log.1`` under ``app`` and ``app.log``."""
    found: dict[str, list[str]] = {}
    for name in names:
        if name.lower().endswith(COMPRESSED_SUFFIXES):
            continue
        for end in range(1, len(name)):
            if name[end] in ".-_":
                found.setdefault(name[:end], []).append(name)
    return found
