"""Shared helpers for the runner tests: run `python -m monitor run` as a real subprocess."""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil


def monitor_cmd(log_dir: Path, *job: str, extra: tuple[str, ...] = ()) -> list[str]:
    return [sys.executable, "-m", "monitor", "run", "--headless", "--no-preflight",
            "--log-dir", str(log_dir), *extra, "--", *job]


def run_monitor(log_dir: Path, *job: str, extra: tuple[str, ...] = (),
                timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(monitor_cmd(log_dir, *job, extra=extra), capture_output=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def only_log(log_dir: Path) -> Path:
    logs = sorted(log_dir.glob("run-*.log"))
    assert len(logs) == 1, logs
    return logs[0]


def read_json(path: Path) -> dict:
    return json.loads(path.read_text())


def wait_for(predicate, timeout: float = 20.0, interval: float = 0.05, explain=None):
    """``predicate()`` once it is true; else fails after ``timeout`` seconds, with what
    ``explain()`` says (what was there instead) when given."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {predicate}" + (f": {explain()}" if explain else ""))


def log_tail(log_dir: Path, size: int = 2000) -> str:
    """The end of the folder's one log, for a failure message (what the job had printed)."""
    logs = sorted(log_dir.glob("run-*.log"))
    return repr(logs[0].read_bytes()[-size:]) if len(logs) == 1 else f"logs: {logs}"


def job_state(log_dir: Path) -> dict:
    states = list(log_dir.glob("run-*.job.json"))
    return read_json(states[0]) if states else {}


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def python_job(code: str) -> tuple[str, ...]:
    return (sys.executable, "-c", code)


def run_session(job, stall_after: float | None = None):
    """(session, metrics) for ``job`` as ``monitor run`` opens them (``supervise.open_session``)."""
    from monitor.diagnosis.catalogue import load_catalogue
    from monitor.runner.supervise import open_session

    return open_session(job, load_catalogue(include_user=False), stall_after=stall_after)


def free_port() -> int:
    """A port nothing listens on now (for a job's rendezvous, a metrics endpoint)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class MonitorRun:
    """`monitor run --headless` of ``job`` with every line timed as it comes (seconds since the
    start): the monitor's own (stderr, ``lines``) and the job's it passes on (stdout,
    ``job_lines``); a test waits for a line and measures when it came."""

    def __init__(self, log_dir: Path, *job: str, extra: tuple[str, ...] = (), env: dict[str, str] | None = None) -> None:
        self.started = time.monotonic()
        self.process = subprocess.Popen(monitor_cmd(log_dir, *job, extra=extra), stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, env=env)
        self.lines: list[tuple[float, str]] = []
        self.job_lines: list[tuple[float, str]] = []
        self._reader = threading.Thread(target=self._read, args=(self.process.stderr, self.lines), daemon=True)
        self._reader.start()
        # Drained as it comes: a full pipe would hold the job's output back.
        threading.Thread(target=self._read, args=(self.process.stdout, self.job_lines), daemon=True).start()

    def _read(self, stream, lines: list[tuple[float, str]]) -> None:
        for raw in stream:
            lines.append((time.monotonic() - self.started, raw.decode("utf-8", "replace").rstrip("\n")))

    def wait_line(self, pattern: str, timeout: float, job: bool = False) -> tuple[float, str]:
        """(when, the line) of the first line ``pattern`` finds, the monitor's or (``job``) the
        job's; fails after ``timeout``."""
        lines = self.job_lines if job else self.lines
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for at, line in list(lines):
                if re.search(pattern, line):
                    return at, line
            time.sleep(0.1)
        raise AssertionError(f"no line matching {pattern!r} in:\n" + "\n".join(line for _, line in lines))

    def text(self) -> str:
        return "\n".join(line for _, line in self.lines)

    def stop(self) -> str:
        """SIGTERM, as a user's Ctrl-C or scancel would: the end report follows."""
        self.process.send_signal(signal.SIGTERM)
        self.process.wait(timeout=90)
        self._reader.join(10)
        return self.text()
