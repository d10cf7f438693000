"""Faults of round 3 (F2, F14, F17, F18), each shown with real processes, files and sockets on
127.0.0.1: the metrics endpoint listens on loopback unless told otherwise, a textfile that cannot
be written is said once, a screen never goes into a file, and no numeric option takes NaN, inf
or a number out of range."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psutil
import pytest

from tests.runner_helpers import free_port, wait_for

ROOT = Path(__file__).resolve().parents[1]
# The worktree's monitor, whatever folder the command runs in.
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
MONITOR = (sys.executable, "-m", "monitor")
UNASSIGNED = "192.0.2.1"  # TEST-NET-1: no interface of this machine has it, so nothing can listen there


def listening(pid: int, port: int) -> list[str]:
    """The addresses process ``pid`` listens on at ``port``."""
    return [c.laddr.ip for c in psutil.Process(pid).net_connections(kind="tcp")
            if c.status == psutil.CONN_LISTEN and c.laddr.port == port]


def scrape(port: int) -> bytes:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        return response.read()


def run_until(cmd, timeout: float, **kwargs) -> tuple[int | None, str, str]:
    """Run ``cmd`` to its end or ``timeout``, then kill it: (exit code or None, stdout, stderr)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                            env=ENV, **kwargs)
    try:
        out, err = proc.communicate(timeout=timeout)
        return proc.returncode, out.decode(errors="replace"), err.decode(errors="replace")
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        return None, out.decode(errors="replace"), err.decode(errors="replace")


# -- F2: the metrics endpoint listens on loopback by default ----------------------------------
def test_run_metrics_port_listens_on_loopback_by_default(tmp_path: Path):
    port = free_port()
    run = subprocess.Popen(
        [*MONITOR, "run", "--headless", "--no-preflight", "--log-dir", str(tmp_path), "--metrics-port", str(port),
         "--", sys.executable, "-c", "import time; print('hi', flush=True); time.sleep(4)"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, env=ENV)
    try:
        addresses = wait_for(lambda: listening(run.pid, port), timeout=30)
        assert addresses == ["127.0.0.1"]
        wait_for(lambda: b"monitor_job_running" in scrape(port), timeout=30)  # once the session is up
    finally:
        out, err = run.communicate(timeout=60)
    assert run.returncode == 0 and out == b"hi\n"
    assert f"monitor: serving the job's metrics for Prometheus at http://127.0.0.1:{port}/metrics\n" in err.decode()


def test_run_metrics_addr_is_the_address_listened_on(tmp_path: Path):
    port = free_port()
    code, out, err = run_until(
        [*MONITOR, "run", "--headless", "--no-preflight", "--log-dir", str(tmp_path), "--metrics-port", str(port),
         "--metrics-addr", UNASSIGNED, "--", sys.executable, "-c", "print('hi'); raise SystemExit(3)"], 60)
    # Asked for an address that is not this machine's: one line, and the job runs without the endpoint.
    assert code == 3 and out == "hi\n"
    assert (f"monitor: cannot serve metrics on {UNASSIGNED} port {port}: Cannot assign requested address; "
            "the job runs without it\n") in err
    assert "Traceback" not in err


def test_metrics_serve_listens_on_loopback_by_default_and_takes_an_address(tmp_path: Path):
    port = free_port()
    serve = subprocess.Popen([*MONITOR, "metrics", "--serve", str(port), "--interval", "0.2", "--count", "100"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, env=ENV)
    try:
        assert wait_for(lambda: listening(serve.pid, port), timeout=30) == ["127.0.0.1"]
    finally:
        serve.terminate()
        serve.communicate(timeout=30)
    for option in ("--addr", "--metrics-addr"):
        code, _, err = run_until([*MONITOR, "metrics", "--serve", str(port), option, UNASSIGNED, "--once"], 60)
        assert code == 2 and err == f"monitor: cannot serve metrics on {UNASSIGNED} port {port}: " \
                                     "Cannot assign requested address\n"


def test_help_says_how_to_open_the_endpoint_to_the_cluster():
    for command, option in (("run", "--metrics-addr ADDR"), ("metrics", "--addr ADDR, --metrics-addr ADDR")):
        code, out, _ = run_until([*MONITOR, command, "--help"], 60)
        assert code == 0 and option in out
        assert "default 127.0.0.1" in " ".join(out.split()) and "0.0.0.0" in out
