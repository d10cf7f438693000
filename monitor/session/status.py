"""A snapshot of one job session for readers on other threads (the Prometheus endpoint).

The session belongs to one thread; a scrape comes on another. ``StatusPublisher`` runs on the
session's thread after each step (``JobSession(on_step=...)``) and at most once a second swaps in a new frozen ``JobStatus`` that any
thread may read (one attribute assignment: a reader sees the old snapshot or the new one).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from monitor.logs.clock import SYSTEM_CLOCK, Clock
from monitor.model import Finding
from monitor.progress import ProgressState

PUBLISH_EVERY_S = 1.0


@dataclass(frozen=True, slots=True)
class JobStatus:
    """What the session knows, at ``time`` (seconds since the epoch)."""

    time: float = 0.0
    # (category, severity) -> how many findings of that kind.
    findings: dict[tuple[str, str], int] = field(default_factory=dict)
    root_cause: Finding | None = None
    # rank -> when it last printed a line (seconds since the epoch).
    rank_last_line: dict[int, float] = field(default_factory=dict)
    possible_hang: bool = False
    progress: ProgressState = field(default_factory=ProgressState)
    # Steps per second over the recent steps; None until two steps were seen.
    steps_per_s: float | None = None
    running: bool = True
    exit_code: int | None = None


class StatusPublisher:
    def __init__(self, clock: Clock = SYSTEM_CLOCK) -> None:
        self._clock = clock
        self._next = 0.0
        self.latest = JobStatus(time=clock.wall())

    def __call__(self, session, lines) -> None:
        """After one step of ``session`` (on its thread): ``lines``, the lines it brought."""
        now = self._clock.monotonic()
        if now >= self._next:
            self._next = now + PUBLISH_EVERY_S
            self.publish(session)

    def publish(self, session, exit_code: int | None = None) -> None:
        """A new snapshot now (also at the job's end, with its exit code)."""
        wall = self._clock.wall()
        counts: dict[tuple[str, str], int] = {}
        for finding in session.findings:
            key = (str(finding.category), finding.severity)
            counts[key] = counts.get(key, 0) + 1
        root = session.root_cause()
        self.latest = JobStatus(
            time=wall, findings=counts, root_cause=root,
            rank_last_line=session.last_line_times(), possible_hang=session.stall.active is not None,
            progress=session.progress.state, steps_per_s=session.progress.steps_per_s(), running=exit_code is None,
            exit_code=exit_code,
        )
