"""Closing the terminal under `monitor run` (ssh drops, tmux kill-session): the job is stopped,
and the monitor still finishes its work (saves the diagnosis) instead of hanging on writes to a
terminal that is gone."""

from __future__ import annotations

import json
import os
import pty
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.runner_helpers import wait_for

JOB = "import time\nfor i in range(600):\n    print(f'line {i}', flush=True)\n    time.sleep(0.1)\n"


def test_hang_up_with_the_screen_open_stops_the_job_and_saves_the_diagnosis(tmp_path: Path):
    master, slave = pty.openpty()
    env = dict(os.environ, TERM="xterm-256color", COLUMNS="100", LINES="30")
    monitor = subprocess.Popen(
        [sys.executable, "-m", "monitor", "run", "--no-preflight", "--grace", "2", "--log-dir", str(tmp_path),
         "--", sys.executable, "-c", JOB],
        stdin=slave, stdout=slave, stderr=slave, env=env, start_new_session=True,
    )
    os.close(slave)
    drained = bytearray()
    try:
        log = wait_for(lambda: next(tmp_path.glob("run-*[0-9].log"), None), timeout=60)
        # The screen is up once the job's lines are being recorded; keep the terminal drained.
        deadline = time.monotonic() + 60
        while b"line 5" not in log.read_bytes() and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(1.0)
        os.set_blocking(master, False)
        try:
            drained += os.read(master, 1 << 20)
        except OSError:
            pass
        os.close(master)  # the terminal is gone ...
        master = -1
        monitor.send_signal(signal.SIGHUP)  # ... and the kernel's hang-up reaches the monitor
        assert monitor.wait(timeout=60) == 128 + signal.SIGHUP
    finally:
        if master >= 0:
            os.close(master)
        if monitor.poll() is None:
            monitor.kill()
    diagnosis = json.loads(next(tmp_path.glob("run-*.diagnosis.json")).read_text())
    assert diagnosis["run"]["exit_code"] == 128 + signal.SIGHUP
    assert any("Stopped on request (SIGHUP" in f["title"] for f in diagnosis["findings"])
    job = json.loads(next(tmp_path.glob("run-*.job.json")).read_text())
    assert "exit_code" in job
