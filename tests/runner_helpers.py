"""Shared helpers for the runner tests: run `python -m monitor run` as a real subprocess."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
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


def wait_for(predicate, timeout: float = 20.0, interval: float = 0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {predicate}")


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
