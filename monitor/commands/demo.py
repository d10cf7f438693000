"""`monitor demo`: Replay a bundled real multi-rank failure through the live monitor."""

from __future__ import annotations

import argparse
import contextlib

from monitor.commands.options import add_language_option, check_number, headless_off_a_terminal, language


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "demo",
        help="Replay a bundled real multi-rank failure through the live monitor.",
        description=(
            "Replay a bundled recording of a real 4-rank torchrun job that crashed (rank 2 raised, the "
            "others lost their peer) through the same follower, engine and screen as `monitor watch`; "
            "silences over 2 s (the job's start-up) are cut to 2 s, the times shown stay the recording's. "
            "No GPU and no torch needed. Exit code as `monitor diagnose`: 1 when a failure was found."
        ),
    )
    parser.add_argument("--speed", type=float, default=2.0, help="replay speed: 1 = as recorded, 10 = ten times faster (default 2)")
    parser.add_argument("--headless", action="store_true", help="print the findings as they appear and the diagnosis, no screen")
    parser.add_argument("--recording", metavar="DIR", help="replay this recording instead of the bundled one")
    parser.add_argument("--keep", metavar="DIR", help="write the replayed logs into DIR (kept) instead of a temporary folder")
    add_language_option(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import tempfile
    from pathlib import Path

    from monitor.cli import UsageError
    from monitor.demo.replay import BUNDLED, RecordingFormatError, Replayer, load_recording
    from monitor.diagnosis.advice import use_language
    from monitor.diagnosis.catalogue import RuleError, load_catalogue

    # From a hundredth of the recorded speed (slower, the replay's waits overflow) to a thousand
    # times it (a recording of minutes then replays in a blink).
    check_number("--speed", args.speed, at_least=0.01, at_most=1000)
    try:
        recording = load_recording(args.recording or BUNDLED)
        use_language(language(args))
        catalogue = load_catalogue()
    except (RecordingFormatError, RuleError) as exc:
        raise UsageError(str(exc)) from None
    headless_off_a_terminal(args)
    with tempfile.TemporaryDirectory(prefix="monitor-demo-") as scratch, _removed_on_stop_signals(scratch):
        target = Path(args.keep) if args.keep else Path(scratch)
        if args.keep and target.exists() and any(target.iterdir()):
            raise UsageError(f"{target}: --keep needs an empty or new folder")
        target.mkdir(parents=True, exist_ok=True)
        replayer = Replayer(recording, target, speed=args.speed)
        replayer.start()
        try:
            if args.headless:
                return _headless(replayer, catalogue)
            from monitor.tui import launch_demo

            return launch_demo(replayer, catalogue=catalogue)
        finally:
            replayer.stop()


@contextlib.contextmanager
def _removed_on_stop_signals(scratch: str):
    """SIGTERM and SIGHUP (the terminal closed) end the process without running ``finally``:
    remove the scratch folder first, then die of the signal as before."""
    import os
    import shutil
    import signal

    def remove_and_die(signum: int, _frame) -> None:
        shutil.rmtree(scratch, ignore_errors=True)
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    previous = {}
    for signum in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(signum) != signal.SIG_IGN:  # nohup: stay deaf to it
            previous[signum] = signal.signal(signum, remove_and_die)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _headless(replayer, catalogue) -> int:
    import sys
    import time

    from monitor.diagnosis.report import write_report
    from monitor.model import one_line
    from monitor.session.job_session import IDLE_FLUSH_S, JobSession

    meta = replayer.recording.meta
    print(f"monitor demo: replaying {meta.get('what', 'a recorded job')} (×{replayer.speed:g})", flush=True)
    session = JobSession([replayer.target], catalogue)
    last_line = time.monotonic()
    try:
        try:
            while True:
                finished = replayer.done.is_set()
                update = session.step(timeout=0.2)
                for finding in update.new_findings:
                    # When the recorded job wrote it (a record completes a little later, and at a
                    # high replay speed that little is many recorded seconds).
                    written = replayer.line_time(finding.file, finding.line) if finding.file else None
                    at = replayer.elapsed() if written is None else written
                    print(f"[{at:6.1f}s] {one_line(finding)}", flush=True)
                if update.lines:
                    last_line = time.monotonic()
                elif finished and time.monotonic() - last_line > IDLE_FLUSH_S:
                    break  # all read, and the last records completed by the session's idle flush
        except KeyboardInterrupt:
            # As Ctrl-C on the demo's screen and in watch --headless: the replay ends with the
            # diagnosis of what it showed, and its exit code.
            print(f"monitor demo: stopped (Ctrl-C) at {replayer.elapsed():.1f}s of the recording", flush=True)
        diagnosis = session.diagnosis()
    finally:
        session.close()
    print()
    write_report(diagnosis, sys.stdout)
    return 1 if diagnosis.failed else 0
