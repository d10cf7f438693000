"""What front ends read from: a log feed (lines, and the session's findings) and a metrics feed
(samples, whose findings go into the session), plus ``MetricsPump``, the sampling loop of the
headless modes.

Plain Python: the TUI's thread workers call these feeds, and ``watch --headless`` and ``monitor
run`` use the same ones, so no mode sees findings another does not.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from monitor.metrics.model import Sample
from monitor.model import Diagnosis, Finding, LogLine
from monitor.progress.tracker import ProgressState
from monitor.session.time_order import in_time_order

# How often a running job is asked for per-rank log files it has created since the start.


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
    # Lines read and diagnosed before ``lines`` that the screen will not draw (it fell behind).
    skipped: int = 0
    # The progress the lines brought (the screen's log worker parses it); None: unchanged.
    progress: ProgressState | None = None

    def merge(self, later: LogBatch) -> None:
        """Add a later batch to this one (several polls shown as one screen update)."""
        self.lines.extend(later.lines)
        self.skipped += later.skipped
        if later.findings is not None:
            self.findings, self.root_cause = later.findings, later.root_cause
        if later.progress is not None:
            self.progress = later.progress
        if later.files:
            self.files = later.files
        self.problems.extend(later.problems)
        if later.finished:
            self.finished, self.note = True, later.note

    @property
    def empty(self) -> bool:
        return not self.lines and self.findings is None and not self.finished and not self.problems and not self.skipped


class LogFeed(Protocol):
    def poll(self, timeout: float) -> LogBatch:
        """Wait up to ``timeout`` seconds for news. Called from one worker thread, never concurrently."""

    def diagnosis(self) -> Diagnosis:
        """The diagnosis so far (what ``diagnose`` would say)."""

    def close(self) -> None: ...


class MetricsFeed(Protocol):
    def sample(self) -> Sample:
        """Take one sample; the findings it raised go to the job session. Called from one
        worker thread, the next call after this one returned."""


def retry_after_failed_sample(interval: float) -> float:
    """Seconds before sampling again after a sample failed (NVML or psutil raised): no sooner
    than 5 s, so a broken driver is not asked again every second."""
    return max(interval, 5.0)


class SessionFeed:
    """A JobSession as a LogFeed. ``ended`` says (in words) when the source has stopped for good
    (the job exited, the replay ended); after that, the first poll that brings no line finishes.
    ``close_session``: whether ``close`` closes the session too (False when someone else goes
    on with it: ``monitor run`` waits for the job's end and explains it after the screen)."""

    def __init__(self, session, *, ended: Callable[[], str | None] | None = None,
                 close_session: bool = True, at_end: Callable[[object], str] | None = None) -> None:
        """``at_end``: called with the
        session once, when the source has ended and all it wrote is read, before the findings
        are handed out (a watched job's exit finding and end report); what it says is added
        to the note."""
        self.session = session
        session.track_progress()  # the screen shows it
        self._ended = ended
        self._at_end = at_end
        self._close_session = close_session
        self._version = -1
        self._progress_version = 0

    def poll(self, timeout: float) -> LogBatch:
        note = self._ended() if self._ended is not None else None
        update = self.session.step(timeout=timeout)
        batch = LogBatch(lines=in_time_order(update.lines), files=[str(f) for f in update.files],
                         problems=list(update.problems))
        if note is not None and not update.lines:
            # Everything the source wrote has been read: complete the records still open.
            self.session.flush()
            said = self._at_end(self.session) if self._at_end is not None else ""
            batch.finished, batch.note = True, f"{note}; {said}" if said else note
        if self.session.progress.version != self._progress_version:
            self._progress_version = self.session.progress.version
            batch.progress = self.session.progress.state
        if self.session.version != self._version:
            self._version = self.session.version
            root = self.session.root_cause()
            # Findings are frozen: the session's next step makes new values, never edits these.
            batch.findings = list(self.session.findings)
            batch.root_cause = root
        return batch

    def diagnosis(self) -> Diagnosis:
        return self.session.diagnosis()

    def earlier(self, count: int) -> list[LogLine]:
        """Lines from before those shown of files opened big (see ``JobSession.earlier_lines``),
        in the order of their times."""
        return in_time_order(self.session.earlier_lines(count))

    def around(self, file: str, line: int, count: int) -> list[LogLine]:
        """Lines around ``file``:``line`` when it lies before those shown of a file opened big
        (see ``JobSession.lines_around``): [] otherwise."""
        return self.session.lines_around(file, line, count)

    def close(self) -> None:
        if self._close_session:
            self.session.close()


class SamplerFeed:
    """The metrics Sampler, its History and the SignalDetector as a MetricsFeed: each sample's
    findings are ``post``ed to the job session. With a ``samples_file``
    (``metrics.samples_file.SamplesFile``) every sample is also kept on disk, so a post-mortem (or a replay) has the
    metrics too."""

    def __init__(self, sampler, post: Callable[[list[Finding]], None], *, history=None, detector=None,
                 samples_file=None, observers: Sequence[Callable[[Sample], None]] = (),
                 warn: Callable[[str], None] | None = None, straggler=None) -> None:
        """``observers``: called with each sample after it was kept (a node's rank map, the
        Prometheus endpoint); they must not raise. ``warn``: told once, in one line naming the
        file, when the samples file can no longer be written (a full disk): sampling goes on.
        ``straggler``: the job's ``straggler_watch.StragglerWatch`` (started), which gets each
        sample (its ranks' GPUs), is stopped with the feed, and whose scores the screen shows."""
        from monitor.metrics.history import History
        from monitor.metrics.signals import SignalDetector

        self.sampler = sampler
        self.post = post
        self.history = history if history is not None else History()
        self.detector = detector if detector is not None else SignalDetector()
        self.samples_file = samples_file
        self.straggler = straggler
        self.observers = list(observers) + ([straggler.observe] if straggler is not None else [])
        self._warn = warn

    def sample(self) -> Sample:
        sample = self.sampler.sample()
        self.history.add(sample)
        if self.samples_file is not None and not self.samples_file.write(sample):
            if self._warn is not None and self.samples_file.error:
                self._warn(self.samples_file.error)
            self.samples_file = None
        for observe in self.observers:
            observe(sample)
        findings = self.detector.update(sample, self.history)
        # Raised before and changed since (a count up): their new values replace the ones held.
        findings += [f for f in self.detector.take_changed() if f not in findings]
        if findings:
            self.post(findings)
        return sample

    def close(self) -> None:
        if self.straggler is not None:
            self.straggler.stop()
        self.sampler.close()
        if self.samples_file is not None:
            self.samples_file.close()


def watch_sampler(paths, job_pids: Callable[[], list[int]] | None = None):
    """This machine's metrics Sampler for a watch of ``paths`` (no job of ours): the disk space
    of the folders the logs are in; and the GPUs of the nodes of a job folder among them.
    ``job_pids``: the processes of the job the logs are of, when they are known (a job that
    `monitor run` started: the pids its recorder wrote down), sampled as `monitor run` does."""
    from pathlib import Path

    from monitor.metrics.sampler import Sampler
    from monitor.session.node_metrics import NodesSampler

    local = Sampler(job_pids=job_pids,
                    watch_dirs=sorted({str(p if Path(p).is_dir() else Path(p).parent) for p in paths}))
    return NodesSampler(local, [str(p) for p in paths if Path(p).is_dir()])


class MetricsPump:
    """Samples a MetricsFeed every ``interval`` s in a thread of its own, for the modes with no
    screen (the screen's worker does the same). The next sample is taken ``interval`` after the
    last one finished, so samples never overlap. A failing sample is said once through ``warn``
    (one line) and retried, less often."""

    def __init__(self, feed: MetricsFeed, *, interval: float = 1.0, warn: Callable[[str], None] | None = None) -> None:
        self.feed = feed
        self.interval = interval
        self._warn = warn
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="monitor-metrics", daemon=True)

    def start(self) -> MetricsPump:
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Stop sampling; a sample in progress (NVML can block in the driver) is waited for
        at most ``timeout`` s, then left to its daemon thread."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _run(self) -> None:
        warned = False
        pause = self.interval
        while not self._stop.is_set():
            try:
                self.feed.sample()
                pause = self.interval
            except Exception as exc:  # the metrics must never end the watch of the job
                if not warned and self._warn is not None:
                    self._warn(f"metrics sampling failed ({type(exc).__name__}: {exc}); retrying")
                warned = True
                pause = retry_after_failed_sample(self.interval)
            self._stop.wait(pause)
