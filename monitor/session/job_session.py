"""One job's session: the one place where every finding meets, and the one root cause.

``JobSession(paths, catalogue)`` follows the job's logs (files, directories, globs; see
``logs/follow.py``), attributes each line's rank the way ``diagnose`` does (its prefix, else
the file's name), and feeds the diagnosis engine in arrival order, completing a record that
spans lines when its file ends (rotation, truncation) or stays idle for ``IDLE_FLUSH_S``. A
follow of a file therefore finds what ``diagnose`` finds on the finished file.

Findings from outside the logs join the same engine, so they are counted, ordered and weighed
for the root cause like the others (``diagnosis/root_cause.py``):
- the stall (``possible-hang``, origin ``stall``): added while no stream has printed for the
  threshold and no error explains the silence, withdrawn when output resumes;
- metric signals and checkpoint checks, from their own threads: ``post`` (thread-safe);
- the checks before the launch and how the job exited, from the session's thread: ``add``.

The screen (``monitor/tui``), ``watch --headless``, ``run --headless``, the end report and
``run-X.diagnosis.json`` all render from a session, so a job gets the same root cause in every
mode. ``step`` and everything but ``post`` belong to one thread (the TUI's worker, the headless
loop). The clocks are injected: a test moves time instead of sleeping.
"""

from __future__ import annotations

import queue
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from monitor.diagnosis.engine import Engine
from monitor.diagnosis.root_cause import mark_requested_stop
from monitor.logs.follow import Follower
from monitor.logs.ranks import line_rank, rank_from_path
from monitor.model import Diagnosis, Finding, LogLine
from monitor.session.stall import StallDetector

# A record spanning lines (a traceback) is complete when its file has been quiet this long.
IDLE_FLUSH_S = 0.5


@dataclass(slots=True)
class SessionUpdate:
    """What one ``JobSession.step`` brought."""

    lines: list[LogLine] = field(default_factory=list)  # in arrival order, ranks attributed
    new_findings: list[Finding] = field(default_factory=list)
    cleared: list[str] = field(default_factory=list)  # Finding.id of findings withdrawn
    version: int = 0  # JobSession.version after this step
    files: list[str] = field(default_factory=list)  # every file followed so far
    problems: list[str] = field(default_factory=list)  # new input problems, one line each


class JobSession:
    def __init__(self, paths, catalogue, *, poll: bool = False, stall_after: float | None = None,
                 clock: Callable[[], float] = time.monotonic, wall_clock: Callable[[], float] = time.time,
                 stop_requested: Callable[[], bool] | None = None) -> None:
        """``stop_requested``: asked on every step whether the job was asked to stop (``Job.
        stop_requested``; see ``request_stop``). Raises ``monitor.logs.sources.SourceError`` for a
        PATH that can never name a file."""
        self.follower = Follower([str(p) for p in paths], poll=poll)
        self.engine = Engine(catalogue)
        self.stall = StallDetector(stall_after)
        self.problems: list[str] = []
        self.stop_requested = False
        self._asked_to_stop = stop_requested
        self._clock = clock
        self._wall_clock = wall_clock
        self._posted: queue.SimpleQueue[Finding] = queue.SimpleQueue()
        self._file_ranks: dict[str, int | None] = {}
        self._quiet_since: dict[str, float] = {}  # files fed since their records were completed
        self._closed = False

    # -- sources -----------------------------------------------------------------------------
    def follow(self, paths) -> None:
        """Follow more files from now on (see ``Follower.add``)."""
        self.follower.add([str(p) for p in paths])

    def post(self, findings: list[Finding]) -> None:
        """Findings from another thread (metric signals, checkpoint checks); the next ``step``
        takes them in. A finding posted again (a signal re-raised, its ``count`` up) is the
        same finding, updated, not a new one."""
        for finding in findings:
            self._posted.put(finding)

    def add(self, findings: list[Finding]) -> None:
        """Findings from the session's own thread (preflight checks, the job's exit)."""
        for finding in findings:
            self._take_in(finding)

    def job_ended(self, exit_finding: Finding | None) -> None:
        """How the job exited (``runner.explain.exit_finding``; None: a clean exit). It is the
        root cause only when nothing else is; otherwise it only confirms the cause."""
        if exit_finding is None:
            return
        if self.root_cause() is not None:
            exit_finding.role = "confirm"
        self.add([exit_finding])

    def request_stop(self) -> None:
        """The user (or ``monitor run`` forwarding a signal) asked the job to stop: the
        launcher's report of that stop is no failure (``root_cause.mark_requested_stop``)."""
        self.stop_requested = True
        for finding in self.engine.findings:
            if mark_requested_stop(finding):
                self.engine.version += 1

    # -- stepping ----------------------------------------------------------------------------
    def step(self, timeout: float = 0.2) -> SessionUpdate:
        """Read what is new (blocking at most ``timeout`` s) and diagnose it."""
        if not self.stop_requested and self._asked_to_stop is not None and self._asked_to_stop():
            self.request_stop()
        update = self.follower.read(timeout)
        now = self._clock()
        step = SessionUpdate(problems=list(update.problems))
        self.problems += update.problems
        step.lines = self._feed(update.lines, update.ended, now, step.new_findings)
        for file, since in list(self._quiet_since.items()):
            if now - since >= IDLE_FLUSH_S:
                if self.engine.has_pending(file):  # else there is nothing to complete
                    step.new_findings += self._taken(self.engine.flush(file))
                del self._quiet_since[file]
        step.new_findings += self._take_posted()
        self._update_stall(step, now)
        step.version = self.version
        step.files = self.follower.files
        return step

    def flush(self) -> None:
        """Complete every record in progress (the source has ended)."""
        self._taken(self.engine.flush())
        self._quiet_since.clear()

    def close(self) -> None:
        """Stop following; partial last lines are diagnosed as complete lines."""
        if self._closed:
            return
        self._closed = True
        update = self.follower.close()
        self._feed(update.lines, update.ended, self._clock(), [])
        self.problems += update.problems
        self._take_posted()

    # -- results -----------------------------------------------------------------------------
    @property
    def version(self) -> int:
        """Bumped on every change of the findings, so a UI can redraw only then."""
        return self.engine.version

    @property
    def findings(self) -> list[Finding]:
        """Every finding, from every source, in the order taken in."""
        return self.engine.findings

    def root_cause(self) -> Finding | None:
        """The one root cause of everything seen so far (``diagnosis/root_cause.py``)."""
        return self.engine.root_cause()

    def diagnosis(self) -> Diagnosis:
        """The diagnosis so far, with every record in progress completed."""
        self.flush()
        diagnosis = self.engine.diagnosis(self.follower.files)
        diagnosis.problems = self.problems + diagnosis.problems
        return diagnosis

    # -- internals ---------------------------------------------------------------------------
    def _take_posted(self) -> list[Finding]:
        """Take in what other threads posted; returns the findings that are new."""
        new = []
        while True:
            try:
                finding = self._posted.get_nowait()
            except queue.Empty:
                return new
            if self._take_in(finding):
                new.append(finding)

    def _take_in(self, finding: Finding) -> bool:
        """A finding from outside the logs joins the engine (ordered at this point of the
        logs); one it holds already only changed."""
        if any(known is finding for known in self.engine.findings):
            self.engine.version += 1
            return False
        if finding.first_seen is None:
            finding.first_seen = self._wall_clock()
        self.engine.add_external(finding)
        self._taken([finding])
        return True

    def _taken(self, findings: list[Finding]) -> list[Finding]:
        if self.stop_requested:
            for finding in findings:
                mark_requested_stop(finding)
        return findings

    def _feed(self, lines: list[LogLine], ended: list[tuple[int, str]], now: float, new: list[Finding]) -> list[LogLine]:
        engine = self.engine
        attributed: list[LogLine] = []
        ends = iter(ended)
        next_end = next(ends, None)
        for index, line in enumerate(lines):
            while next_end is not None and next_end[0] <= index:
                new += self._taken(engine.flush(next_end[1]))
                next_end = next(ends, None)
            line = self._attribute(line)
            attributed.append(line)
            new += self._taken(engine.feed(line))
            self._quiet_since[line.file] = now
        while next_end is not None:
            new += self._taken(engine.flush(next_end[1]))
            next_end = next(ends, None)
        return attributed

    def _attribute(self, line: LogLine) -> LogLine:
        """The rank as ``diagnose`` gives it (``ranks.line_rank``)."""
        file_rank = self._file_ranks.get(line.file, -1)
        if file_rank == -1:
            file_rank = self._file_ranks[line.file] = rank_from_path(line.file)
        rank = line_rank(line.text, file_rank)
        return LogLine(line.file, line.line, line.text, rank) if rank is not None else line

    def _update_stall(self, step: SessionUpdate, now: float) -> None:
        cleared = self.stall.observe(step.lines, now)
        if cleared is not None:
            self.engine.withdraw(cleared)
            step.cleared.append(cleared.id)
        if self.stall.active is None and not step.lines and self._silence_unexplained():
            finding = self.stall.check(now, self._wall_clock())
            if finding is not None:
                self.engine.add_external(finding)
                step.new_findings.append(finding)

    def _silence_unexplained(self) -> bool:
        return not any(f.severity == "error" for f in self.engine.findings)
