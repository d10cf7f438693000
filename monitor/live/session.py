"""The live pipeline: the follower's lines through the diagnosis engine, plus stall detection.

``LiveSession(paths, catalogue)`` follows files, directories and globs (see ``logs/follow.py``),
attributes each line's rank the way ``diagnose`` does (its prefix, else the file's name), feeds
the engine in arrival order and completes a record spanning lines when its file ends (rotation,
truncation) or stays idle for ``IDLE_FLUSH_S``. A follow of a file therefore finds what
``diagnose`` finds on the finished file.

``step(timeout)`` is called from one thread (the TUI's worker, the headless loop); watchdog's
observer thread only queues paths and never touches the engine.

The stall finding (``possible-hang``, a warning) is added with ``engine.add_external`` while the
silence lasts and removed when output resumes; the engine never picks a warning as the root
cause, so it cannot outrank a real root. It is raised only while no error explains the silence
(a crashed job is silent because it is dead, not hung).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from monitor.diagnosis.engine import Engine
from monitor.diagnosis.model import Diagnosis, Finding, LogLine
from monitor.diagnosis.ranks import line_rank, rank_from_path
from monitor.live.stall import StallDetector
from monitor.logs.follow import Follower

# A record spanning lines (a traceback) is complete when its file has been quiet this long.
IDLE_FLUSH_S = 0.5


def finding_id(finding: Finding) -> str:
    """A finding's identity within one session (``LiveUpdate.cleared`` lists these)."""
    return f"{finding.rule}#{finding.seq}"


@dataclass(slots=True)
class LiveUpdate:
    """What one ``LiveSession.step`` brought."""

    lines: list[LogLine] = field(default_factory=list)  # in arrival order, ranks attributed
    new_findings: list[Finding] = field(default_factory=list)
    cleared: list[str] = field(default_factory=list)  # finding_id() of findings withdrawn
    version: int = 0  # engine.version after this step
    files: list[str] = field(default_factory=list)  # every file followed so far
    problems: list[str] = field(default_factory=list)  # new input problems, one line each


class LiveSession:
    def __init__(self, paths, catalogue, *, poll: bool = False, stall_after: float | None = None) -> None:
        """Raises ``monitor.logs.sources.SourceError`` for a PATH that can never name a file."""
        self.follower = Follower([str(p) for p in paths], poll=poll)
        self.engine = Engine(catalogue)
        self.stall = StallDetector(stall_after)
        self.problems: list[str] = []
        self._file_ranks: dict[str, int | None] = {}
        self._quiet_since: dict[str, float] = {}  # files fed since their records were completed
        self._closed = False

    def follow(self, paths: list[str]) -> None:
        """Follow more files from now on (see ``Follower.add``)."""
        self.follower.add(paths)

    def step(self, timeout: float = 0.2) -> LiveUpdate:
        """Read what is new (blocking at most ``timeout`` s) and diagnose it."""
        update = self.follower.read(timeout)
        now = time.monotonic()
        live = LiveUpdate(problems=list(update.problems))
        self.problems += update.problems
        live.lines = self._feed(update.lines, update.ended, now, live.new_findings)
        for file, since in list(self._quiet_since.items()):
            if now - since >= IDLE_FLUSH_S:
                if self.engine.has_pending(file):  # else there is nothing to complete
                    live.new_findings += self.engine.flush(file)
                del self._quiet_since[file]
        self._update_stall(live, now)
        live.version = self.engine.version
        live.files = self.follower.files
        return live

    def flush(self) -> None:
        """Complete every record in progress (the source has ended)."""
        self.engine.flush()
        self._quiet_since.clear()

    def root_cause(self) -> Finding | None:
        """The engine's root cause; when nothing failed but the job went silent, the stall."""
        return self.engine.root_cause() or self.stall.active

    def diagnosis(self) -> Diagnosis:
        """The diagnosis so far, with every record in progress completed."""
        self.flush()
        diagnosis = self.engine.diagnosis(self.follower.files)
        diagnosis.root_cause = self.root_cause()
        diagnosis.problems = self.problems + diagnosis.problems
        return diagnosis

    def close(self) -> None:
        """Stop following; partial last lines are diagnosed as complete lines."""
        if self._closed:
            return
        self._closed = True
        update = self.follower.close()
        self._feed(update.lines, update.ended, time.monotonic(), [])
        self.problems += update.problems

    # -- internals -------------------------------------------------------------------------
    def _feed(self, lines: list[LogLine], ended: list[tuple[int, str]], now: float, new: list[Finding]) -> list[LogLine]:
        engine = self.engine
        attributed: list[LogLine] = []
        ends = iter(ended)
        next_end = next(ends, None)
        for index, line in enumerate(lines):
            while next_end is not None and next_end[0] <= index:
                new += engine.flush(next_end[1])
                next_end = next(ends, None)
            line = self._attribute(line)
            attributed.append(line)
            new += engine.feed(line)
            self._quiet_since[line.file] = now
        while next_end is not None:
            new += engine.flush(next_end[1])
            next_end = next(ends, None)
        return attributed

    def _attribute(self, line: LogLine) -> LogLine:
        """The rank as ``diagnose`` gives it (``ranks.line_rank``)."""
        file_rank = self._file_ranks.get(line.file, -1)
        if file_rank == -1:
            file_rank = self._file_ranks[line.file] = rank_from_path(line.file)
        rank = line_rank(line.text, file_rank)
        return LogLine(line.file, line.line, line.text, rank) if rank is not None else line

    def _update_stall(self, live: LiveUpdate, now: float) -> None:
        cleared = self.stall.observe(live.lines, now)
        if cleared is not None:
            self.engine.withdraw(cleared)
            live.cleared.append(finding_id(cleared))
        if self.stall.active is None and not live.lines and self._silence_unexplained():
            finding = self.stall.check(now)
            if finding is not None:
                self.engine.add_external(finding)
                live.new_findings.append(finding)

    def _silence_unexplained(self) -> bool:
        return not any(f.severity == "error" for f in self.engine.findings)

