"""The Textual UI (the only package that imports textual).

The entry points below are what the commands call; they import textual (and the app) only
when called, so ``monitor --help`` and ``monitor diagnose`` never load it. Each returns the
exit code: 1 when a failure was found, 0 otherwise (a crash of the UI itself: its own code).
"""

from __future__ import annotations

from pathlib import Path


def launch_watch(paths, *, catalogue, poll: bool = False, stall_after: float | None = None) -> int:
    """Follow ``paths`` (files or folders) live until the user quits."""
    from monitor.live.session import LiveSession
    from monitor.metrics.sampler import Sampler
    from monitor.tui.feeds import SamplerFeed, SessionFeed

    session = LiveSession(paths, catalogue, poll=poll, stall_after=stall_after)
    watch_dirs = sorted({str(p if Path(p).is_dir() else Path(p).parent) for p in paths})
    metrics = SamplerFeed(Sampler(watch_dirs=watch_dirs))
    title = "watching " + " ".join(str(p) for p in paths)
    return _run_app(SessionFeed(session), metrics, title=title)


def launch_run(job, *, catalogue) -> int:
    """Watch a job started by ``monitor run``. Quitting asks whether to stop the job, and never
    stops it unless the user says so."""
    from monitor.live.session import LiveSession
    from monitor.metrics.sampler import Sampler
    from monitor.tui.feeds import SamplerFeed, SessionFeed

    session = LiveSession([job.log_path, *job.extra_log_paths()], catalogue)
    metrics = SamplerFeed(Sampler(job_pids=job.pids, watch_dirs=[str(Path(job.log_path).parent)]))
    feed = SessionFeed(session, ended=lambda: job_ending(job.exit_code()))
    return _run_app(feed, metrics, title=" ".join(job.command), job=job)


def launch_demo(replayer, *, catalogue) -> int:
    """Show a replay (``monitor.demo.replay.Replayer``, already started) through the live pipeline."""
    from monitor.demo.replay import RecordedMetrics
    from monitor.live.session import LiveSession
    from monitor.tui.feeds import SessionFeed

    session = LiveSession([replayer.target], catalogue)
    recording = replayer.recording

    def ended() -> str | None:
        if not replayer.done.is_set():
            return None
        return f"replay ended: the recorded job exited with code {recording.meta.get('exit_code', '?')}"

    title = f"demo (replay ×{replayer.speed:g}): {recording.meta.get('what', 'recorded job')}"
    return _run_app(SessionFeed(session, ended=ended), RecordedMetrics(recording, replayer), title=title)


def job_ending(code: int | None) -> str | None:
    """How a job ended, in words (None while it runs)."""
    if code is None:
        return None
    if code < 0:
        return f"job killed by signal {-code}"
    return f"job exited with code {code}"


def _run_app(log_feed, metrics_feed, *, title: str, job=None) -> int:
    from monitor.tui.app import MonitorApp

    app = MonitorApp(log_feed, metrics_feed, title=title, job=job)
    try:
        result = app.run()
    finally:
        close = getattr(metrics_feed, "close", None)
        if close is not None:
            close()
    if app.return_code:
        return app.return_code
    return int(result or 0)


__all__ = ["launch_demo", "launch_run", "launch_watch", "job_ending"]
