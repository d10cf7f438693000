"""What the app reads from: a log feed (lines and findings) and a metrics feed (samples).

The app's thread workers call these and nothing else; they wrap the core objects
(LiveSession, Sampler) so the app does not depend on how each mode (watch, run, demo) builds them.
"""

from __future__ import annotations

from collections.abc import Callable
import time
from dataclasses import dataclass, field, replace
from typing import Protocol

from monitor.diagnosis.model import Diagnosis, Finding, LogLine
from monitor.metrics.model import Sample

# How often a running job is asked for per-rank log files it has created since the start.
MORE_PATHS_EVERY_S = 2.0


@dataclass(slots=True)
class LogBatch:
    """What one poll brought: new lines, and the whole findings list when it changed."""

    lines: list[LogLine] = field(default_factory=list)
    findings: list[Finding] | None = None  # None: unchanged since the last batch
    root_cause: Finding | None = None
    files: list[str] = field(default_factory=list)
    # The source will bring nothing more (the job exited, the replay ended); ``note`` says how.
    finished: bool = False
    note: str = ""
    # Problems with the input (unreadable or binary file), one line each naming the file.
    problems: list[str] = field(default_factory=list)

    def merge(self, later: LogBatch) -> None:
        """Add a later batch to this one (several polls shown as one screen update)."""
        self.lines.extend(later.lines)
        if later.findings is not None:
            self.findings, self.root_cause = later.findings, later.root_cause
        if later.files:
            self.files = later.files
        self.problems.extend(later.problems)
        if later.finished:
            self.finished, self.note = True, later.note

    @property
    def empty(self) -> bool:
        return not self.lines and self.findings is None and not self.finished and not self.problems


class LogFeed(Protocol):
    def poll(self, timeout: float) -> LogBatch:
        """Wait up to ``timeout`` seconds for news. Called from one worker thread, never concurrently."""

    def diagnosis(self) -> Diagnosis:
        """The diagnosis so far (what ``diagnose`` would say)."""

    def close(self) -> None: ...


class MetricsFeed(Protocol):
    def sample(self) -> tuple[Sample, list[Finding]]:
        """Take one sample and the metric findings it raised. Called from one worker thread."""


class SessionFeed:
    """A LiveSession as a LogFeed. ``ended`` says (in words) when the source has stopped for good
    (the job exited, the replay ended); after that, the first poll that brings no line finishes."""

    def __init__(self, session, *, ended: Callable[[], str | None] | None = None,
                 more_paths: Callable[[], list] | None = None) -> None:
        """``more_paths``: asked every few seconds for files to follow that appeared since the
        start (a job's per-rank files under torchrun --log-dir)."""
        self.session = session
        self._ended = ended
        self._more_paths = more_paths
        self._next_more_paths = 0.0
        self._version = -1

    def poll(self, timeout: float) -> LogBatch:
        note = self._ended() if self._ended is not None else None
        if self._more_paths is not None and time.monotonic() >= self._next_more_paths:
            self.session.follow([str(p) for p in self._more_paths()])
            self._next_more_paths = time.monotonic() + MORE_PATHS_EVERY_S
        update = self.session.step(timeout=timeout)
        batch = LogBatch(lines=list(update.lines), files=[str(f) for f in update.files], problems=list(update.problems))
        if note is not None and not update.lines:
            # Everything the source wrote has been read: complete the records still open.
            self.session.flush()
            batch.finished, batch.note = True, note
        engine = self.session.engine
        if engine.version != self._version or update.new_findings or update.cleared:
            self._version = engine.version
            root = self.session.root_cause()
            # Copies: the engine goes on updating its findings in this thread while the UI draws them.
            batch.findings = [self._snapshot(f) for f in engine.findings]
            batch.root_cause = self._snapshot(root) if root is not None else None
        return batch

    @staticmethod
    def _snapshot(finding: Finding) -> Finding:
        return replace(finding, ranks=list(finding.ranks), evidence=list(finding.evidence), fields=dict(finding.fields))

    def diagnosis(self) -> Diagnosis:
        return self.session.diagnosis()

    def close(self) -> None:
        self.session.close()


class SamplerFeed:
    """The metrics Sampler, its History and the SignalDetector as a MetricsFeed. With a
    ``recorder`` (monitor.metrics.record.Recorder) every sample is also kept on disk, so a
    post-mortem (or a replay) has the metrics too."""

    def __init__(self, sampler, history=None, detector=None, recorder=None) -> None:
        from monitor.metrics.history import History
        from monitor.metrics.signals import SignalDetector

        self.sampler = sampler
        self.history = history if history is not None else History()
        self.detector = detector if detector is not None else SignalDetector()
        self.recorder = recorder

    def sample(self) -> tuple[Sample, list[Finding]]:
        sample = self.sampler.sample()
        self.history.add(sample)
        if self.recorder is not None:
            self.recorder.write(sample)
        return sample, self.detector.update(sample, self.history)

    def close(self) -> None:
        self.sampler.close()
        if self.recorder is not None:
            self.recorder.close()
