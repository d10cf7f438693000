"""Following log files live: every file a PATH names, now and later, through rotation.

``Follower(paths, poll=False)`` reads every followed file from its start (so a live follow sees
the same lines as ``diagnose`` on the finished file), then whatever is appended. ``read(timeout)``
returns the new lines of all files in the order they were read, each once:

- a line is emitted when its newline arrives; a partial last line is held (``pending()`` shows
  it for display) and emitted only when its generation ends: rotation, truncation, deletion,
  or ``close()``. So bytes are never emitted twice, and line numbers match the finished file;
- line numbers count from 1 in each generation of a file (see ``tracked_file.py``);
- ``rank`` is left None here: the live session attributes ranks like ``diagnose`` does.

Change detection: file events (``fs_events``: inotify on Linux, else watchdog) wake the reader
at once; a safety poll stats every file every ``SAFETY_POLL_S`` seconds anyway and rescans
directories and globs. With ``poll=True`` (NFS, Lustre) or where events cannot be set up, only
polling is used, every ``POLL_S``.
"""

from __future__ import annotations

import os
import resource
import stat
import time
from dataclasses import dataclass, field
from typing import Literal

from monitor.model import LogLine
from monitor.logs.clock import SYSTEM_CLOCK, Clock
from monitor.logs.tracked_file import (
    FROM_START, HEAD_BYTES, DescriptorCache, FollowedFile, Identity, ReadOutput, ReadUpTo, is_rotated_name,
    rotations_by_base,
)
from monitor.logs.fs_events import OVERFLOW, RESCAN, FileEvents, open_file_events
from monitor.logs.sources import GlobTooWide, Source, parse_source

POLL_S = 0.5
SAFETY_POLL_S = 2.0
RESCAN_S = 2.0
# One read() returns after about this many lines even if more are waiting (a big file read
# from its start arrives over several calls, so the caller stays responsive).
MAX_LINES_PER_READ = 20_000
CLOSE_ROUNDS = 64
# New lines found by the safety poll in a file this long after it was written, with no event
# for it: events do not arrive, so the follower switches to polling.
MISSED_EVENT_S = 1.0
# A rotated file last written this long before the last write seen before the rotation is still
# read as a generation we never saw (file systems with coarse modification times).
MTIME_SLACK_S = 2.0


@dataclass(slots=True)
class FollowUpdate:
    """What one ``Follower.read`` call found."""

    lines: list[LogLine] = field(default_factory=list)
    # Files whose generation ended (rotation, truncation, deletion, close), each with the number
    # of ``lines`` that came before the end: the file's pending records are complete there.
    ended: list[tuple[int, str]] = field(default_factory=list)
    # New problems with the input, one line each (unreadable, binary, no inotify).
    problems: list[str] = field(default_factory=list)
    # Files followed for the first time since the last call.
    new_files: list[str] = field(default_factory=list)


class Follower:
    """Follows files, directories and globs; ``read`` is called from one thread only."""

    def __init__(
        self, paths: list[str], poll: bool = False, *, poll_interval: float = POLL_S, max_open: int | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        """Raises ``monitor.logs.sources.SourceError`` for a PATH that can never name a file.
        ``poll_interval``: seconds between polls where events are not used. ``clock``: when the
        safety poll and the rescan are due, how long a ``read`` waits, how old a file's last write
        is (a test moves time: see ``logs/clock.py``)."""
        self._clock = clock
        self.sources: list[Source] = [parse_source(p) for p in paths]
        self.polling = poll
        self.poll_interval = poll_interval
        self._files: dict[str, FollowedFile] = {}
        self._names: list[str] = []
        self._event_names: dict[str, str] = {}  # absolute path (as events name it) -> our name
        self._by_identity: dict[Identity, FollowedFile] = {}  # may be stale: check .identity
        self._evented: set[str] = set()  # files announced by an event since the last safety poll
        self._unannounced: set[str] = set()
        self._consumed: dict[Identity, ReadUpTo] = {}
        self._dirty: set[str] = set()
        self._fds = DescriptorCache(max_open or _default_max_open())
        self._problems: list[str] = []
        self._new_files: list[str] = []
        self._too_wide: set[Source] = set()  # globs not walked again at each rescan
        self._events: FileEvents | None = None
        if not poll:
            self._start_events()
        self._discover()
        now = clock.monotonic()
        self._next_stat_all = now
        self._next_rescan = now + self._rescan_every

    # -- public ----------------------------------------------------------------------------
    @property
    def files(self) -> list[str]:
        """Every file followed so far (also those that have since disappeared): a live list,
        to be copied by a caller that keeps it."""
        return self._names

    @property
    def never_appeared(self) -> list[str]:
        """The files named as such (not found in a folder or by a glob) that have not existed
        since the follow began: a mistyped name, or a job that never started writing."""
        return [path for path, followed in self._files.items() if followed.named and not followed.appeared]

    def add(self, paths: list[str]) -> None:
        """Follow more PATHs from now on: the per-rank files a launcher (torchrun --log-dir)
        creates after the job started. A file already followed is not read twice."""
        known = {source.spec for source in self.sources}
        fresh = [parse_source(str(p)) for p in paths if str(p) not in known]
        if not fresh:
            return
        self.sources.extend(fresh)
        if self._events is not None:
            # The new files may sit under directories not watched yet.
            self._events.close()
            self._start_events()
        self._discover()

    def start_after(self, path: str, identity: Identity, offset: int, lines: int) -> bool:
        """The first ``offset`` bytes (``lines`` lines) of ``path`` were read by someone else (a
        fast scan of a big file at attach): its first visit goes on from there. Only before that
        visit; False when the file is not followed or no longer the one that was read."""
        followed = self._files.get(path)
        if followed is None or followed.identity is not None:
            return False
        try:
            with open(path, "rb") as handle:
                head = handle.read(HEAD_BYTES)
        except OSError:
            return False
        self._consumed[identity] = ReadUpTo(offset, lines, head)
        return True

    def pending(self) -> dict[str, str]:
        """Each file's partial last line (no newline yet), cleaned, for display only. Asked on every
        step of a session: a file without one costs a look, not a copy and a clean."""
        return {path: text for path, f in self._files.items() if f.assembler.has_partial and (text := f.pending_text())}

    def read(self, timeout: float = 0.2) -> FollowUpdate:
        """New lines (and ends, problems) of all files; blocks at most ``timeout`` seconds."""
        deadline = self._clock.monotonic() + timeout
        update = FollowUpdate()
        while True:
            self._take_events()
            now = self._clock.monotonic()
            if now >= self._next_rescan:
                self._discover()
                self._next_rescan = self._clock.monotonic() + self._rescan_every
            if now >= self._next_stat_all:
                if not self.polling:
                    # Files with no event since the last safety poll: new lines found in them
                    # now mean events do not arrive (see _check_missed_event).
                    self._unannounced = {p for p in self._files if p not in self._dirty and p not in self._evented}
                    self._evented.clear()
                self._dirty.update(self._files)
                self._next_stat_all = self._clock.monotonic() + self._stat_every
            self._visit_dirty(update)
            now = self._clock.monotonic()
            if update.lines or update.ended or update.problems or update.new_files or now >= deadline:
                return update
            if self._dirty:
                continue  # a file has more waiting (a long line read chunk by chunk): no sleep
            wake = min(deadline, self._next_stat_all, self._next_rescan)
            self._wait(wake - now)

    def close(self) -> FollowUpdate:
        """Stop following; returns the partial last lines, now complete, and the last reads."""
        update = FollowUpdate()
        if self._events is not None:
            self._events.close()
            self._events = None
        self._dirty.update(self._files)
        for _ in range(CLOSE_ROUNDS):  # bounded: a writer may outpace us forever
            if not self._dirty:
                break
            self._visit_dirty(update)
        out = ReadOutput(consumed=self._consumed)
        for followed in self._files.values():
            followed.finish(self._fds, out)
        self._collect(out, update)
        self._fds.close_all()
        return update

    # -- discovery -------------------------------------------------------------------------
    @property
    def _stat_every(self) -> float:
        return self.poll_interval if self.polling else SAFETY_POLL_S

    @property
    def _rescan_every(self) -> float:
        return self.poll_interval if self.polling else RESCAN_S

    def _start_events(self) -> None:
        try:
            self._events = open_file_events(self._watches())
        except OSError as exc:
            self._events = None
            self._fall_back_to_polling(f"file events unavailable ({exc.strerror or exc})")

    def _fall_back_to_polling(self, why: str) -> None:
        if self._events is not None:
            self._events.close()
            self._events = None
        self.polling = True
        self._next_stat_all = self._next_rescan = 0.0
        self._problems.append(f"{why}; polling every {self.poll_interval:g} s")

    def _watches(self) -> list[tuple[str, bool]]:
        watches: dict[str, bool] = {}
        for source in self.sources:
            root = os.path.abspath(source.root)
            watches[root] = watches.get(root, False) or source.kind != "file"
        return sorted(watches.items())

    def _discover(self) -> None:
        for source in self.sources:
            if source in self._too_wide:
                continue  # walked to its bounds once: its new files come by their events only
            try:
                paths = source.expand()
            except GlobTooWide as cut:
                self._too_wide.add(source)
                self._problems.append(str(cut))
                paths = cut.found
            except OSError:
                continue
            for path in paths:
                if path not in self._files:
                    self._adopt(path, named=source.kind == "file")

    def _adopt(self, path: str, family: str | None = None, named: bool = False) -> None:
        self._files[path] = FollowedFile(path, family=family, named=named)
        self._names.append(path)
        self._event_names[os.path.abspath(path)] = path
        self._dirty.add(path)
        self._new_files.append(path)

    def _start_for(self, path: str, identity: Identity) -> ReadUpTo | None:
        """Where to read a new inode at ``path`` from (see ``FollowedFile.visit``)."""
        consumed = self._consumed.get(identity)
        if consumed is not None:
            still = _starts_with(path, identity, consumed)
            if still is None:
                return None  # the path moved on since its stat (a rotation right now): next visit
            del self._consumed[identity]
            if still:
                return consumed  # renamed or copied: read up to there already
        holder = self._by_identity.get(identity)
        if holder is not None and holder.path != path and holder.identity == identity:
            return None  # renamed while followed: the old path's next visit drains it first
        copy_of = self._copy_start(path, identity)
        if copy_of is False:
            return None  # logrotate's copy of a file not yet truncated: its lines are read there
        return copy_of or FROM_START

    def _copy_start(self, path: str, identity: Identity) -> ReadUpTo | Literal[False] | None:
        """For a rotated copy (copytruncate) of a followed file: False while the original still
        holds the same bytes (or the copy is too short to tell), or where the copy's unread part
        starts; None if not a copy. False too when ``path`` no longer names ``identity``: copies
        shift on (.1 -> .2) between our stat and this look, and what is judged must be the inode
        that will be read."""
        folder, name = os.path.split(path)
        # app.log.1 can be a copy of app.log or of app.log.1's own earlier names: every prefix
        # that ends before a separator names a possible original.
        originals = [
            self._files[candidate]
            for end, char in enumerate(name)
            if char in ".-_" and (candidate := os.path.join(folder, name[:end])) in self._files
        ]
        if not originals:
            return None
        try:
            with open(path, "rb") as handle:
                st = os.fstat(handle.fileno())
                if (st.st_dev, st.st_ino) != identity:
                    return False
                return self._copy_of(handle.fileno(), st.st_size, originals)
        except FileNotFoundError:
            return False  # moved on since our stat: looked at again under its new name
        except OSError:
            return None

    @staticmethod
    def _copy_of(copy: int, size: int, originals: list[FollowedFile]) -> ReadUpTo | Literal[False] | None:
        head = os.pread(copy, 256, 0)
        for original in originals:
            if len(head) < len(original.head) and original.head.startswith(head):
                return False  # a copy still being written (shorter than the head): not yet
            if original.head and head.startswith(original.head) and _is_copy_of_current(copy, size, original):
                return False
            for ended in original.ended:
                if ended.head and head.startswith(ended.head):
                    # Shorter than what we read of it: a copy still being written, or one with
                    # nothing new (a copy holds at most what the original had when copied).
                    return ended if size >= ended.offset else False
                if len(head) < len(ended.head) and ended.head.startswith(head):
                    return False
            if _holds_what_the_original_holds(copy, size, original.path):
                # Copied, not yet truncated, and not read yet: its lines are read in the
                # original, or taken from this copy once the truncation is seen.
                return False
        return None

    def _adopt_rotated(self, identity: Identity, origin: str) -> None:
        """Keep following a rotated-away file under its new name (``app.log.1``): its writer may
        go on writing there until it reopens the log."""
        folder, base = os.path.split(origin)
        try:
            names = os.listdir(folder or os.curdir)
        except OSError:
            return
        for name in names:
            path = os.path.join(folder, name)
            if path in self._files or not is_rotated_name(base, name):
                continue
            try:
                st = os.stat(path)
            except OSError:
                continue
            if (st.st_dev, st.st_ino) == identity:
                self._adopt(path, family=origin)
                return

    def _adopt_rotations_since(self, rotations: list[tuple[str, float, bool]]) -> None:
        """Generations of each live path (origin) written and rotated away between two visits:
        rotated files beside it, written since the last write we saw of it (``since``), that no
        followed file holds. Each is read from where it was left (an inode we read under another
        name), or whole (never seen; a copy of what we read is told apart by ``_start_for``). One
        listing per folder: thousands of files first written in one round ask at once."""
        held = {f.identity for f in self._files.values() if f.identity is not None}
        by_folder: dict[str, list[tuple[str, float, bool]]] = {}
        for rotation in rotations:
            by_folder.setdefault(os.path.dirname(rotation[0]), []).append(rotation)
        for folder, asked in by_folder.items():
            try:
                rotated = rotations_by_base(os.listdir(folder or os.curdir))
            except OSError:
                continue
            for origin, since, strict in asked:
                for name in sorted(rotated.get(os.path.basename(origin), ())):
                    path = os.path.join(folder, name)
                    if path in self._files:
                        continue
                    try:
                        st = os.stat(path)
                    except OSError:
                        continue
                    identity = (st.st_dev, st.st_ino)
                    if identity in held or not stat.S_ISREG(st.st_mode):
                        continue
                    if identity in self._consumed or st.st_mtime >= since - (0.0 if strict else MTIME_SLACK_S):
                        self._adopt(path, family=origin)

    # -- reading ---------------------------------------------------------------------------
    def _take_events(self) -> None:
        if self._events is None:
            return
        for path in self._events.drain():
            self._note_event(path)
        if problems := self._events.take_problems():
            self._fall_back_to_polling(problems[0])

    def _note_event(self, path: str) -> None:
        if path == RESCAN:
            self._next_rescan = 0.0
        elif path == OVERFLOW:
            self._dirty.update(self._files)
        elif path in self._event_names:
            known = self._event_names[path]
            self._dirty.add(known)
            self._evented.add(known)
        else:
            for source in self.sources:
                name = source.name_of(path)
                if name is not None:
                    if name in self._files:
                        self._dirty.add(name)
                    else:
                        self._adopt(name)
                    break

    def _wait(self, seconds: float) -> None:
        if seconds <= 0:
            return
        if self._events is None:
            self._clock.wait(seconds, time.sleep)
            return
        path = self._clock.wait(seconds, self._events.get)
        if path is not None:
            self._note_event(path)

    def _visit_dirty(self, update: FollowUpdate) -> None:
        out = ReadOutput(consumed=self._consumed)
        for path in sorted(self._dirty):
            if len(out.lines) >= MAX_LINES_PER_READ:
                break
            self._dirty.discard(path)
            before = len(out.lines)
            followed = self._files[path]
            if followed.visit(self._fds, out, self._start_for):
                self._dirty.add(path)
            if followed.identity is not None:
                self._by_identity[followed.identity] = followed
            if path in self._unannounced:
                self._check_missed_event(path, len(out.lines) > before)
        self._collect(out, update)

    def _check_missed_event(self, path: str, had_lines: bool) -> None:
        """Lines written over ``MISSED_EVENT_S`` ago that no event announced: the file system
        does not deliver events for this file (NFS or Lustre written from another node)."""
        self._unannounced.discard(path)
        if had_lines and self._clock.wall() - self._files[path].mtime > MISSED_EVENT_S:
            self.polling = True
            self._next_stat_all = self._next_rescan = 0.0
            self._problems.append(
                f"{path}: no file events for new lines (network file system?); polling every {self.poll_interval:g} s"
            )

    def _collect(self, out: ReadOutput, update: FollowUpdate) -> None:
        for identity, origin in out.rotated_from.items():
            self._adopt_rotated(identity, origin)
        if out.rotations:
            self._adopt_rotations_since(out.rotations)
        update.ended.extend((before + len(update.lines), path) for before, path in out.ended)
        update.lines.extend(out.lines)
        update.problems.extend(self._problems)
        update.problems.extend(out.problems)
        update.new_files.extend(self._new_files)
        self._problems.clear()
        self._new_files.clear()


def _is_copy_of_current(copy: int, size: int, original: FollowedFile) -> bool:
    """Whether the file open at ``copy`` (same first bytes as ``original``) is a copy of what ``original`` holds
    now, rather than a file that merely starts with the same banner: its bytes where we stopped
    reading the original are those we read, or its last bytes are in the original at the same
    place. While the original looks truncated and we have not seen that yet, it may be a copy."""
    try:
        if size >= original.offset and original.tail:
            start = original.offset - len(original.tail)
            return os.pread(copy, len(original.tail), start) == original.tail
        with open(original.path, "rb") as source:
            if os.fstat(source.fileno()).st_size < original.offset or original.rewritten(source.fileno()):
                return True  # truncated since our last visit: decided after the next one
            return _same_start(copy, source.fileno(), size)
    except OSError:
        return False


def _holds_what_the_original_holds(copy: int, size: int, original: str) -> bool:
    """Whether the file open at ``copy`` is a copy of the start of what ``original`` holds on
    disk now (found before we read that part of the original)."""
    try:
        with open(original, "rb") as source:
            return _same_start(copy, source.fileno(), size)
    except OSError:
        return False


def _same_start(copy: int, source: int, size: int) -> bool:
    """Whether the first ``size`` bytes of ``copy`` look like those of ``source``: the same
    first and last 256 bytes, at the same places."""
    if not size or os.fstat(source).st_size < size:
        return False
    edge = min(256, size)
    return (
        os.pread(copy, edge, 0) == os.pread(source, edge, 0)
        and os.pread(copy, edge, size - edge) == os.pread(source, edge, size - edge)
    )


def _starts_with(path: str, identity: Identity, read: ReadUpTo) -> bool | None:
    """Whether the file at ``path`` is (still) what was read: as long, with the same first
    bytes (a deleted file's inode number is soon given to a new file); None if ``path`` no longer
    names ``identity``."""
    try:
        with open(path, "rb") as handle:
            st = os.fstat(handle.fileno())
            if (st.st_dev, st.st_ino) != identity:
                return None
            return handle.read(len(read.head)) == read.head and st.st_size >= read.offset
    except FileNotFoundError:
        return None
    except OSError:
        return False


def _default_max_open() -> int:
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return max(16, min(512, soft // 4))
