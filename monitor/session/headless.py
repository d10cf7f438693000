"""``monitor watch --headless``: findings printed as they occur, a summary at the end.

Each new finding is one line (``model.one_line``; ``--json``: one ``Finding.to_json()``
object), flushed at once so a pipe or a log collector sees it immediately. The metrics are
sampled as on the screen (``feeds.MetricsPump``), so an Xid or GPU memory near full is reported
here too. Ctrl-C or SIGTERM ends the watch (never the job: we only read its files) with the
summary and the root cause; the exit code is ``diagnose``'s: 2 when a file named never appeared
(as for a missing file there) or no log file appeared at all, with no summary when none did.
"""

from __future__ import annotations

import signal
import sys
import threading

from monitor.model import Diagnosis, one_line
from monitor.session.feeds import MetricsPump, SamplerFeed, watch_sampler
from monitor.session.job_session import JobSession
from monitor.text import safe_json, say


def watch_headless(paths, catalogue, *, as_json: bool = False, poll: bool = False,
                   stall_after: float | None = None, out=None, stop: threading.Event | None = None,
                   sampler=None, against=None, recorded=None) -> int:
    """Runs until ``stop`` is set, or SIGINT/SIGTERM (in the main thread), or the job ``recorded``
    (the job `monitor run` started whose log this is: ``commands.watch.RecordedJob``) has ended
    and all it wrote is read; returns the exit code. ``sampler``: the metrics Sampler (default:
    this machine's, watching the logs' folders)."""
    out = out or sys.stdout
    stop = stop or threading.Event()
    # Until the session is up (a glob walked, big files scanned), Ctrl-C and SIGTERM end the
    # start-up as they end any command: there is nothing to summarise yet.
    session: JobSession  # made below: the probe posts to it once it runs
    probe = recorded.hang_probe(lambda findings: session.post(findings)) if recorded is not None else None
    straggler = recorded.straggler_watch(lambda findings: session.post(findings)) if recorded is not None else None
    session = JobSession(paths, catalogue, poll=poll, stall_after=stall_after, attach=True, against=against,
                         probe=probe, on_step=straggler.lines if straggler is not None else None)
    restore = _stop_on_signals(stop)
    job_pids = recorded.pids if recorded is not None else None
    feed = SamplerFeed(sampler or watch_sampler(paths, job_pids), session.post, straggler=straggler)
    pump = MetricsPump(feed, warn=say).start()
    try:
        for problem in session.problems:
            say(problem)
        # On stderr so that stdout stays one finding per line; also tells a supervising script
        # that the watch is up and a SIGTERM now gets the summary.
        say(f"watching {len(session.follower.files)} file(s); Ctrl-C or SIGTERM ends the watch with a summary")
        while not stop.is_set():
            ending = recorded.ending() if recorded is not None else None
            update = session.step(timeout=0.25)
            for problem in update.problems:
                say(problem)
            for finding in update.new_findings:
                out.write((safe_json(finding.to_json()) if as_json else one_line(finding)) + "\n")
                out.flush()
            if update.cleared and not as_json:
                out.write(f"cleared  {', '.join(update.cleared)}: no longer true (output resumed, or a newer look)\n")
                out.flush()
            if ending is not None and not update.lines:  # the job ended before this read: all is read
                said = recorded.finish(session)
                say(f"{ending}; {said}" if said else ending)
                break
    finally:
        pump.stop()
        feed.close()
        session.close()
        restore()
    never_appeared = session.follower.never_appeared
    read_some = len(never_appeared) < len(session.follower.files)
    if read_some:  # else there is no summary to give ("No failure found in 0 files" would mislead)
        diagnosis = session.diagnosis()
        _summary(diagnosis, out, as_json)
    for path in never_appeared:
        say(f"{path}: no such file; it never appeared")
    if not session.follower.files:
        say(f"no log file appeared in {', '.join(map(str, paths))}")
    if not read_some or never_appeared:
        return 2
    return 1 if diagnosis.failed else 0


def _summary(diagnosis: Diagnosis, out, as_json: bool) -> None:
    if as_json:
        out.write(safe_json({"diagnosis": diagnosis.to_json()}) + "\n")
    else:
        from monitor.diagnosis.report import write_report

        out.write("\n")
        write_report(diagnosis, out)
    out.flush()


def _stop_on_signals(stop: threading.Event):
    """SIGINT and SIGTERM set ``stop`` (the loop then prints the summary); returns the undo."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    for sig in previous:
        signal.signal(sig, lambda signum, frame: stop.set())

    def restore() -> None:
        for sig, handler in previous.items():
            signal.signal(sig, handler)

    return restore
