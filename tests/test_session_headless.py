"""`monitor watch --headless`: findings printed as they occur, summary and exit code at the end."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import threading
import time

from monitor.diagnosis.catalogue import load_catalogue
from monitor.session.headless import watch_headless

from live_helpers import SAMPLES, ProgressiveCopy

CRASH = SAMPLES / "demo" / "crash-2ranks.log"


class Output(io.StringIO):
    """Collects what the watch prints; counts flushes (one per finding is expected)."""

    flushes = 0

    def flush(self) -> None:
        self.flushes += 1


def run_watch(tmp_path, *, as_json: bool):
    log = tmp_path / "job.log"
    log.touch()
    out, stop = Output(), threading.Event()
    result = {}
    watcher = threading.Thread(
        target=lambda: result.update(code=watch_headless([str(log)], load_catalogue(include_user=False), as_json=as_json, out=out, stop=stop))
    )
    watcher.start()
    writer = ProgressiveCopy(CRASH, log)
    writer.start()
    writer.join()
    deadline = time.monotonic() + 10
    while "ValueError" not in out.getvalue() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)
    stop.set()
    watcher.join(10)
    return result["code"], out


def test_headless_prints_findings_then_summary(tmp_path):
    code, out = run_watch(tmp_path, as_json=False)
    text = out.getvalue()
    first = text.splitlines()[0]
    assert code == 1
    assert "ValueError on rank 1" in text.split("\n\n")[0]
    assert first.startswith(("ERROR", "WARNING", "INFO")) and "job.log:" in first
    assert "Root cause" in text or "root cause" in text.lower()
    assert out.flushes >= len([l for l in text.split("\n\n")[0].splitlines() if l])


def test_headless_json_is_one_object_per_line(tmp_path):
    code, out = run_watch(tmp_path, as_json=True)
    objects = [json.loads(line) for line in out.getvalue().splitlines()]
    assert code == 1
    *findings, summary = objects
    assert findings and all({"rule", "severity", "rank", "file", "line", "remedy"} <= set(f) for f in findings)
    assert summary["diagnosis"]["root_cause"]["title"] == "ValueError on rank 1"
    assert len(summary["diagnosis"]["findings"]) >= len(findings)


def test_cli_sigterm_prints_summary_and_exit_code(tmp_path):
    log = tmp_path / "train.log"
    log.write_text("step 1 loss=2.0\nstep 2 loss=1.9\n")
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(
        [sys.executable, "-m", "monitor", "watch", "--headless", "--no-user-rules", str(log)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )
    # Wait until the watch says it is up (a loaded machine can take seconds to import).
    ready = proc.stderr.readline()
    assert ready.startswith("monitor: watching 1 file(s)"), ready
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    assert out.strip() == "No failure found in 1 file(s)."


def test_cli_missing_path_is_a_usage_error(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "monitor", "watch", "--headless", str(tmp_path / "nope" / "x.log")],
        capture_output=True, text=True,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [f"monitor: {tmp_path / 'nope' / 'x.log'}: no such file or directory"]
