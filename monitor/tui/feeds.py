"""What the app reads from: a log feed (lines and findings) and a metrics feed (samples).

The app's thread workers call these and nothing else; they wrap the core objects
(LiveSession, Sampler) so the app does not depend on how each mode (watch, run, demo) builds them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from monitor.diagnosis.model import Diagnosis, Finding, LogLine
from monitor.metrics.model import Sample


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

    @property
    def empty(self) -> bool:
        return not self.lines and self.findings is None and not self.finished


class LogFeed(Protocol):
    def poll(self, timeout: float) -> LogBatch:
        """Wait up to ``timeout`` seconds for news. Called from one worker thread, never concurrently."""

    def diagnosis(self) -> Diagnosis:
        """The diagnosis so far (what ``diagnose`` would say)."""

    def close(self) -> None: ...


class MetricsFeed(Protocol):
    # True when GPU rows are a labelled synthetic track (no GPU here): the panel says so.
    simulated_gpus: bool

    def sample(self) -> tuple[Sample, list[Finding]]:
        """Take one sample and the metric findings it raised. Called from one worker thread."""
