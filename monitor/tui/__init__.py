"""The Textual UI (the only package that imports textual).

The entry points below are what the commands call; they import textual (and the app) only
when called, so ``monitor --help`` and ``monitor diagnose`` never load it. ``launch_*`` run the
app and return the exit code: 1 when a failure was found, 0 otherwise. ``*_app`` build the same
app without running it (tests drive it with ``App.run_test``).
"""

from __future__ import annotations


def launch_watch(paths, *, catalogue, poll: bool = False, stall_after: float | None = None, scope: str = "",
                 bell: bool = True, against=None, recorded=None) -> int:
    """Follow ``paths`` (files, folders, globs) live until the user quits; ``scope`` says on the
    status line which run of a folder is followed; ``bell``: ring it when a root cause appears;
    ``against``: the last good run (``diagnosis.novelty.Against``) whose unseen lines are told;
    ``recorded``: the job `monitor run` started whose log this is (``commands.watch.RecordedJob``):
    its stacks are taken, its end is shown and reported."""
    return _run(watch_app(paths, catalogue=catalogue, poll=poll, stall_after=stall_after, scope=scope, bell=bell,
                          against=against, recorded=recorded))


def launch_run(job, session, metrics, *, bell: bool = True) -> int:
    """Show a job started by ``monitor run``: its session (``session.JobSession``, which the
    runner goes on with after the screen) and its metrics feed (``session.feeds.SamplerFeed``).
    Quitting asks whether to stop the job, and never stops it unless the user says so."""
    return _run(run_app(job, session, metrics, bell=bell))


def launch_demo(replayer, *, catalogue) -> int:
    """Show a replay (``monitor.demo.replay.Replayer``, already started) through the live pipeline."""
    return _run(demo_app(replayer, catalogue=catalogue))


def watch_app(paths, *, catalogue, poll: bool = False, stall_after: float | None = None, scope: str = "",
              bell: bool = True, against=None, recorded=None):
    from monitor.session.feeds import SamplerFeed, SessionFeed, watch_sampler
    from monitor.session.job_session import JobSession
    from monitor.tui.app import MonitorApp

    probe = recorded.hang_probe(lambda findings: session.post(findings)) if recorded is not None else None
    straggler = recorded.straggler_watch(lambda findings: session.post(findings)) if recorded is not None else None
    session = JobSession(paths, catalogue, poll=poll, stall_after=stall_after, attach=True, against=against,
                         probe=probe, on_step=straggler.lines if straggler is not None else None)
    metrics = SamplerFeed(watch_sampler(paths, recorded.pids if recorded is not None else None), session.post,
                          straggler=straggler)
    title = "watching " + " ".join(str(p) for p in paths)
    feed = SessionFeed(session) if recorded is None else SessionFeed(session, ended=recorded.ending,
                                                                     at_end=recorded.finish)
    return MonitorApp(feed, metrics, title=title, scope=scope, bell=bell, probe=probe)


def run_app(job, session, metrics, *, bell: bool = True):
    from monitor.session.feeds import SessionFeed
    from monitor.tui.app import MonitorApp

    feed = SessionFeed(session, ended=lambda: job_ending(job.exit_code()), close_session=False)
    return MonitorApp(feed, metrics, title=" ".join(job.command), job=job, probe=session.probe, bell=bell)


def demo_app(replayer, *, catalogue):
    from monitor.demo.replay import RecordedMetrics
    from monitor.session.feeds import SessionFeed
    from monitor.session.job_session import JobSession
    from monitor.tui.app import MonitorApp
    from monitor.tui.findings_panel import JobTimeline

    session = JobSession([replayer.target], catalogue)
    recording = replayer.recording

    def ended() -> str | None:
        if not replayer.done.is_set():
            return None
        return f"replay ended: the recorded job exited with code {recording.meta.get('exit_code', '?')}"

    title = f"demo (replay ×{replayer.speed:g}): {recording.meta.get('what', 'recorded job')}"
    # Times since the recorded job's start, for its log stamps and the replay's "seen" times alike.
    timeline = JobTimeline(float(recording.meta.get("started", 0.0)), replayer.elapsed, replayer.line_time)
    return MonitorApp(SessionFeed(session, ended=ended), RecordedMetrics(recording, replayer), title=title,
                      timeline=timeline)


def job_ending(code: int | None) -> str | None:
    """How a job ended, in words (None while it runs). Codes above 128 are 128 + a signal."""
    from monitor.runner.processes import signal_name

    if code is None:
        return None
    name = signal_name(code)
    return f"job exited with code {code} ({name})" if name else f"job exited with code {code}"


def _run(app) -> int:
    """Run the app; a feed the app was given to own (watch, demo) is closed after it."""
    try:
        result = app.run()
    finally:
        app.wait_log_reader()
        if app.job is None:
            close = getattr(app.metrics_feed, "close", None)
            if close is not None:
                close()
    if app.return_code:
        return app.return_code
    return int(result or 0)


__all__ = ["demo_app", "job_ending", "launch_demo", "launch_run", "launch_watch", "run_app", "watch_app"]
