"""A user's second hour (issue #31): watch on a missing file, output width, the end of a run, a
folder of unrelated logs, old logs and the smaller points. Real files, real processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

SAMPLES = Path(__file__).resolve().parent.parent / "sample_logs"
ROOT = Path(__file__).resolve().parent.parent


def monitor(*args: str, cwd=None, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "monitor", *args], capture_output=True, text=True, timeout=60,
                          cwd=cwd, env=env)


def start_headless_watch(*paths: str) -> subprocess.Popen:
    env = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONPATH=str(ROOT))
    return subprocess.Popen([sys.executable, "-m", "monitor", "watch", "--headless", "--no-user-rules", *paths],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def read_until(stream, wanted: str, timeout: float = 15.0) -> str:
    """What ``stream`` printed up to and including the first line holding ``wanted``."""
    seen = ""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = stream.readline()
        seen += line
        if wanted in line or not line:
            break
    return seen


# -- item 2: watch on a missing file -------------------------------------------------------------
def test_watch_of_a_missing_file_says_so_and_ends_with_exit_2(tmp_path):
    proc = start_headless_watch(str(tmp_path / "trian.log"))
    said = read_until(proc.stderr, "waiting")
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=20)
    said += err
    assert "trian.log: no such file" in said and "waiting for it to appear" in said, said
    assert "never appeared" in said, said
    assert "No failure found" not in out, out
    assert proc.returncode == 2


def test_watch_of_a_file_not_there_yet_follows_it_once_it_has_appeared(tmp_path):
    log = tmp_path / "train.log"
    proc = start_headless_watch(str(log))
    said = read_until(proc.stderr, "waiting")
    log.write_text((SAMPLES / "demo" / "crash-2ranks.log").read_text())
    said += read_until(proc.stderr, "has appeared")
    time.sleep(1.5)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=20)
    assert "waiting for it to appear" in said and "train.log has appeared" in said, said + err
    assert "ValueError on rank 1" in out
    assert proc.returncode == 1
