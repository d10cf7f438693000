"""``monitor watch --headless``: findings printed as they occur, a summary at the end.

Each new finding is one line (``--json``: one ``Finding.to_json()`` object), flushed at once so
a pipe or a log collector sees it immediately. Ctrl-C or SIGTERM ends the watch (never the job:
we only read its files) with the summary and the root cause; the exit code is ``diagnose``'s.
"""

from __future__ import annotations

import signal
import sys
import threading

from monitor.diagnosis.model import Diagnosis, Finding
from monitor.live.session import LiveSession
from monitor.logs.decode import safe_json, safe_text


def format_finding(finding: Finding) -> str:
    finding = finding.for_display()
    who = f"rank {finding.rank}" if finding.rank is not None else "rank ?"
    if len(finding.ranks) > 1:
        who = "ranks " + ",".join(map(str, finding.ranks))
    return f"{finding.severity.upper():<7} {who}: {finding.title}  ({finding.file}:{finding.line})"


def watch_headless(paths, catalogue, *, as_json: bool = False, poll: bool = False,
                   stall_after: float | None = None, out=None, stop: threading.Event | None = None) -> int:
    """Runs until ``stop`` is set, or SIGINT/SIGTERM (in the main thread); returns the exit code."""
    out = out or sys.stdout
    stop = stop or threading.Event()
    restore = _stop_on_signals(stop)
    session = LiveSession(paths, catalogue, poll=poll, stall_after=stall_after)
    try:
        for problem in session.problems:
            print(f"monitor: {safe_text(problem)}", file=sys.stderr, flush=True)
        # On stderr so that stdout stays one finding per line; also tells a supervising script
        # that the watch is up and a SIGTERM now gets the summary.
        print(f"monitor: watching {len(session.follower.files)} file(s); Ctrl-C or SIGTERM ends the watch with a summary",
              file=sys.stderr, flush=True)
        while not stop.is_set():
            update = session.step(timeout=0.25)
            for problem in update.problems:
                print(f"monitor: {safe_text(problem)}", file=sys.stderr, flush=True)
            for finding in update.new_findings:
                out.write((safe_json(finding.to_json()) if as_json else format_finding(finding)) + "\n")
                out.flush()
            if update.cleared and not as_json:
                out.write(f"cleared  {', '.join(update.cleared)}: output resumed\n")
                out.flush()
    finally:
        session.close()
        restore()
    diagnosis = session.diagnosis()
    _summary(diagnosis, out, as_json)
    return 1 if diagnosis.failed else 0


def _summary(diagnosis: Diagnosis, out, as_json: bool) -> None:
    if as_json:
        out.write(safe_json({"diagnosis": diagnosis.to_json()}) + "\n")
    else:
        from monitor.diagnosis.report import render_text

        out.write("\n" + render_text(diagnosis))
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
