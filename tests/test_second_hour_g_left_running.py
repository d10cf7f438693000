"""A user's second hour (issue 31, item 10): a job that `monitor run` started and the user left
running when quitting its screen. A `monitor watch` of its log knows the job from the recorder's
run-X.job.json: `s` takes its stacks, the watch shows the job's end, and the end report
(run-X.diagnosis.json) the monitor that left could not write is written then. Real processes:
the job runs under the same recorder `monitor run` uses; the watch is typed in tmux at 80x24."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from monitor.runner.job import CaptureOptions, Job, new_log_path, side_file
from tests.runner_helpers import wait_for
from tests.tmux_helpers import Terminal

# The job: a line, then it waits (in a function the stacks name) until the test lets it fail.
JOB = """
import os, sys, time
print("[rank0]: step 1 loss 2.0", flush=True)
def wait_for_go(go):
    while not os.path.exists(go):
        time.sleep(0.05)
wait_for_go(sys.argv[1])
raise ValueError("bad batch at step 2")
"""


def left_running(tmp_path: Path) -> tuple[Job, Path, Path]:
    """A job started under `monitor run`'s recorder, nobody following its log any more (the
    monitor that started it was quit with "Leave it running"); the file that lets it fail."""
    go = tmp_path / "go"
    log = new_log_path(tmp_path / "logs")
    job = Job.start([sys.executable, "-c", JOB, str(go)], log, CaptureOptions(use_pty=False))
    wait_for(lambda: "step 1" in log.read_text())
    return job, log, go


@pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")
def test_a_watch_of_a_job_left_running_takes_its_stacks_and_shows_its_end(tmp_path):
    job, log, go = left_running(tmp_path)
    command = (f"cd {shlex.quote(os.getcwd())} && TERM=xterm-256color {shlex.quote(sys.executable)} "
               f"-m monitor watch --no-bell {shlex.quote(str(log))}; sleep 30")
    terminal = Terminal(tmp_path, f"second-hour-g-{os.getpid()}", command)
    wait_for_text = terminal.wait_for_text
    try:
        wait_for_text("step 1 loss")
        wait_for_text("job    1 process, running")  # the job's processes, as `monitor run` shows them
        terminal.keys("s")
        shown = wait_for_text("wait_for_go")  # the job's own frame, from the pids in run-X.job.json
        assert "stacks need" not in shown
        terminal.keys("Escape")
        go.touch()
        shown = wait_for_text("job exited with code 1")
        assert "ValueError" in shown
        report = json.loads(wait_for(lambda: side_file(log, "diagnosis").is_file() and side_file(log, "diagnosis"))
                            .read_text())
        assert report["run"]["exit_code"] == 1
        assert report["root_cause"]["title"].startswith("ValueError")
    finally:
        terminal.close()
        go.touch()
        job.wait(10)


def test_a_headless_watch_of_a_job_left_running_ends_with_it_and_writes_its_report(tmp_path):
    job, log, go = left_running(tmp_path)
    watch = subprocess.Popen([sys.executable, "-m", "monitor", "watch", "--headless", str(log)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    try:
        time.sleep(1.0)
        go.touch()
        out, err = watch.communicate(timeout=20)
    finally:
        if watch.poll() is None:
            watch.kill()
        go.touch()
        job.wait(10)
    assert watch.returncode == 1, err
    assert "job exited with code 1" in err
    assert "Root cause: ValueError" in out
    report = json.loads(side_file(log, "diagnosis").read_text())
    assert report["run"]["exit_code"] == 1 and report["root_cause"]["title"].startswith("ValueError")


def test_a_report_written_by_monitor_run_is_kept(tmp_path):
    """The monitor that started the job wrote the end report: a later watch leaves it as it is."""
    job, log, go = left_running(tmp_path)
    go.touch()
    job.wait(10)
    report = side_file(log, "diagnosis")
    report.write_text('{"written by": "monitor run"}')
    watch = subprocess.run([sys.executable, "-m", "monitor", "watch", "--headless", str(log)], capture_output=True,
                           text=True, timeout=20, stdin=subprocess.DEVNULL)
    assert watch.returncode == 1, watch.stderr
    assert "job exited with code 1" in watch.stderr
    assert report.read_text() == '{"written by": "monitor run"}'


def test_the_run_log_is_found_as_a_watch_is_given_it(tmp_path):
    """A run-X.log, the folder holding it, or the glob a folder of several runs is followed by;
    nothing for logs `monitor run` did not write, or for several of its jobs at once."""
    import glob

    from monitor.logs.runs import recorded_job_log

    logs = tmp_path / "logs"
    logs.mkdir()
    log = logs / "run-20261125-222353.log"
    log.write_text("step 1\n")
    assert recorded_job_log([str(log)]) is None  # no job.json: not recorded by `monitor run`
    (logs / "run-20261125-222353.job.json").write_text('{"job_pid": 1}')
    assert recorded_job_log([str(log)]) == log
    assert recorded_job_log([str(logs)]) == log
    assert recorded_job_log([glob.escape(str(logs / "run-20261125-222353")) + ".*"]) == log
    (logs / "run-20261125-222400.log").write_text("step 1\n")
    (logs / "run-20261125-222400.job.json").write_text('{"job_pid": 2}')
    assert recorded_job_log([str(logs)]) is None  # --all-runs: two jobs, none of them is "the" job
    (tmp_path / "rank0.log").write_text("step 1\n")
    assert recorded_job_log([str(tmp_path / "rank0.log")]) is None
