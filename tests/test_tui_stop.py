"""Fixes from a user walkthrough: Ctrl-C and stop signals, keys typed fast after "/", Esc after a bad
regex, the job row and the findings' times in a replay."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import pytest

from tests.runner_helpers import run_session
from monitor.tui import run_app
from monitor.tui.app import MonitorApp
from tests.tui_helpers import FixedMetricsFeed, ScriptedLogFeed, host_sample


class StoppableJob:
    """Behaves like runner.job.Job for the app: the first stop asks, the second kills."""

    command = ["torchrun", "--nproc-per-node", "2", "train.py"]

    def __init__(self) -> None:
        self.stops = 0
        self.signals: list[int] = []
        self.stop_requested = False
        self.code: int | None = None

    def exit_code(self):
        return self.code

    def stop(self, signum: int = signal.SIGTERM) -> None:
        self.stops += 1
        self.signals.append(signum)
        self.stop_requested = True


def make_app(job=None) -> MonitorApp:
    return MonitorApp(ScriptedLogFeed(), FixedMetricsFeed(host_sample()), clock=lambda: 0.0, job=job)


async def wait_until(pilot, condition, tries: int = 100) -> None:
    for _ in range(tries):
        if condition():
            return
        await pilot.pause(0.05)
    raise AssertionError("condition not reached")


def status_text(app) -> str:
    return str(app.query_one("#log-status").render())


async def test_ctrl_c_stops_the_job_a_second_kills_and_the_app_exits_at_its_end():
    job = StoppableJob()
    app = make_app(job)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("ctrl+c")
        assert job.stops == 1 and app.stopping and app.is_running
        assert job.signals == [signal.SIGINT]  # as Ctrl-C in a terminal: the job exits 130, not 143
        assert "stopping the job" in status_text(app)
        assert not any("ctrl+q" in n.message for n in app._notifications)
        await pilot.press("ctrl+c")
        assert job.stops == 2 and app.is_running
        job.code = 137
        await wait_until(pilot, lambda: not app.is_running)
    assert app.return_value == 0


async def test_a_stop_signal_to_the_monitor_closes_the_app_when_the_job_ended():
    # The runner's StopForwarder calls job.stop() from the signal handler; the app sees it.
    job = StoppableJob()
    app = make_app(job)
    async with app.run_test(size=(100, 30)) as pilot:
        job.stop()
        await wait_until(pilot, lambda: app.stopping)
        assert app.is_running and "stopping the job" in status_text(app)
        job.code = 143
        await wait_until(pilot, lambda: not app.is_running)
    assert job.stops == 1


async def test_ctrl_c_quits_watch_and_an_ended_job():
    app = make_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("ctrl+c")
        await wait_until(pilot, lambda: not app.is_running)
    job = StoppableJob()
    job.code = 0
    app = make_app(job)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("ctrl+c")
        await wait_until(pilot, lambda: not app.is_running)
    assert job.stops == 0


async def test_ctrl_c_stops_a_real_job(tmp_path: Path):
    from monitor.runner.job import Job, CaptureOptions, new_log_path

    code = "import time\nprint('step 1 loss 1.0', flush=True)\ntime.sleep(60)\n"
    job = Job.start([sys.executable, "-c", code], new_log_path(tmp_path), CaptureOptions(use_pty=False, grace_s=2))
    app = run_app(job, *run_session(job))
    try:
        async with app.run_test(size=(100, 30)) as pilot:
            await wait_until(pilot, lambda: len(app.store) >= 1, tries=200)
            await pilot.press("ctrl+c")
            await wait_until(pilot, lambda: not app.is_running, tries=200)
        assert job.exit_code() is not None and job.exit_code() != 0
    finally:
        app.metrics_feed.close()
        app.log_feed.session.close()
        job.stop()
        job.wait(10)


async def test_keys_typed_in_one_burst_after_slash_go_into_the_filter():
    # tmux send-keys '/error' delivers all keys at once: none may run as a command (e, r).
    from textual import events

    from monitor.tui.log_view import LogView

    app = make_app()
    async with app.run_test(size=(100, 30)) as pilot:
        for key, char in [("slash", "/"), ("e", "e"), ("r", "r"), ("r", "r"), ("o", "o"), ("r", "r")]:
            event = events.Key(key, char)
            event.set_sender(app)
            app._driver.send_message(event)  # as the terminal driver does, with no pause between
        # The keys are messages, handled in turn: until the filter took them or a deadline (a
        # loaded machine, or pytest -n 2, takes longer than a fixed pause).
        for _ in range(200):
            await pilot.pause(0.05)
            if app.query_one(LogView).line_filter.pattern == "error":
                break
        assert app.query_one("#filter-input").value == "error"
        line_filter = app.query_one(LogView).line_filter
        assert line_filter.pattern == "error" and line_filter.ranks is None and line_filter.min_level == 0
        await pilot.press("slash", "x")  # a "/" inside the regex is text
        assert app.query_one("#filter-input").value == "error/x"
        await pilot.press("escape", "question_mark", "slash")
        assert not app.query_one("#filter-input").display  # not opened behind the help screen


async def test_escape_closes_the_filter_after_a_bad_regex():
    app = make_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("slash", "(", "x", "enter")
        filter_input = app.query_one("#filter-input")
        assert "bad regex" in status_text(app) and filter_input.display
        await pilot.press("escape")
        assert not filter_input.display and filter_input.value == ""
        assert not filter_input.has_class("-invalid") and "bad regex" not in status_text(app)
        await pilot.press("slash", "(", "escape")  # also while still typing in it
        assert not filter_input.display and "bad regex" not in status_text(app)


def test_job_count_row_says_process_and_the_end():
    from monitor.metrics.model import JobSample
    from monitor.tui.metrics_panel import MetricsPanel

    panel = MetricsPanel()
    job = JobSample(root_pids=[1], alive=True, processes=[])
    assert panel._job_rows(job, 100)[0].plain == "job    0 processes, running"
    panel.job_ended = "replay ended: the recorded job exited with code 1"
    assert panel._job_rows(job, 100)[0].plain == "job    replay ended: the recorded job exited with code 1"


def test_timeline_shows_stamps_and_seen_times_since_the_job_start():
    from monitor.tui import text_format as fmt
    from monitor.tui.findings_panel import JobTimeline

    assert (fmt.since_start(26.4), fmt.since_start(3725), fmt.since_start(-3)) == ("+00:26", "+1:02:05", "-00:03")
    timeline = JobTimeline(started=1795256034.13, elapsed=lambda: 30.0)
    assert timeline.stamp(1795256060.56) == pytest.approx(26.43)
    # a year-less stamp read in a later year is still placed within the job
    assert timeline.stamp(1795256060.56 + 365 * 86400) == pytest.approx(26.43)


def test_invisible_format_characters_never_reach_the_screen():
    from monitor.model import LogLine
    from monitor.tui.log_store import LogStore

    store = LogStore()
    # The contract says LogLine.text is clean; the store still cleans a line that is not.
    store.append(LogLine("a.log", 1, "loss \u202e5.1\u202c ok\u200b\u2066 done", 0))
    assert store.text(0) == "loss 5.1 ok done"
    # A terminal title (OSC) and a line break inside the text: neither reaches the screen.
    store.append(LogLine("a.log", 2, "x\x1b]0;pwned\x07y\nz", 0))
    assert store.text(1) == "xy z"


async def test_the_title_is_cleaned():
    app = MonitorApp(ScriptedLogFeed(), None, clock=lambda: 0.0, title="python \x1b[31mtrain\u202e.py")
    async with app.run_test(size=(100, 30)):
        assert app.sub_title == "python train.py"


async def test_help_lists_itself_ctrl_c_and_how_to_close_it():
    from monitor.tui.screens import KEYS, HelpScreen

    keys = dict(KEYS)
    assert "Esc" in keys["?"] and "stop the job" in keys["ctrl+c"]
    assert {"n / N", "c", "t"} <= set(keys)  # not in the footer at 80 columns
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("question_mark")
        assert not isinstance(app.screen, HelpScreen)


async def test_the_launcher_reporting_our_own_stop_is_no_root_cause_on_screen(tmp_path):
    # torchrun prints "Received 15 death signal" when monitor run forwards the user's stop: the
    # end report calls that 'Stopped on request'; the screen must not call it a failure from outside.
    # The screen shows what the job session decides (one policy for every mode).
    from monitor.diagnosis.catalogue import load_catalogue
    from monitor.session.feeds import SessionFeed
    from monitor.session.job_session import JobSession
    from monitor.tui.findings_panel import FindingsPanel

    line = ("W1121 13:52:04.032000 4668 site-packages/torch/distributed/elastic/agent/server/api.py:753] "
            "Received 15 death signal, shutting down workers\n")
    log = tmp_path / "run.log"
    log.write_text("")
    job = StoppableJob()
    session = JobSession([str(log)], load_catalogue(include_user=False), stop_requested=lambda: job.stop_requested)
    app = MonitorApp(SessionFeed(session), FixedMetricsFeed(host_sample()), clock=lambda: 0.0, job=job)
    async with app.run_test(size=(100, 30)) as pilot:
        panel = app.query_one(FindingsPanel)
        with open(log, "a") as handle:
            handle.write(line)
        await wait_until(pilot, lambda: panel.root is not None)  # stopped by someone else: the root
        await pilot.press("ctrl+c")  # now the user stops it through the monitor
        await wait_until(pilot, lambda: panel.root is None)
        with open(log, "a") as handle:  # and it stays so
            handle.write(line.replace("13:52:04", "13:52:05"))
        await pilot.pause(0.3)
        assert panel.root is None and app.stopping
