"""Faults of round 3 (F2, F14, F17, F18), each shown with real processes, files and sockets on
127.0.0.1: the metrics endpoint listens on loopback unless told otherwise, a textfile that cannot
be written is said once, a screen never goes into a file, and no numeric option takes NaN, inf
or a number out of range."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
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


# -- F14: a textfile that cannot be written is said, once -------------------------------------
def test_run_textfile_that_cannot_be_written_is_said_once_and_the_job_goes_on(tmp_path: Path):
    target = tmp_path / "missing" / "m.prom"
    code, out, err = run_until(
        [*MONITOR, "run", "--headless", "--no-preflight", "--no-flight-recorder", "--log-dir", str(tmp_path / "logs"),
         "--textfile", str(target),
         # Long enough for several samples (one a second), each rewriting the textfile.
         "--", sys.executable, "-c", "import time; print('hi', flush=True); time.sleep(3.5); raise SystemExit(3)"],
        60)
    assert code == 3 and out == "hi\n"
    said = [line for line in err.splitlines() if "cannot write metrics" in line]
    assert said == [f"monitor: cannot write metrics to {target}: No such file or directory"], err


def test_the_exporter_says_a_textfile_failure_once_until_it_is_written_again(tmp_path: Path):
    from monitor.metrics.sampler import Sampler
    from monitor.session.prometheus import JobExporter

    said: list[str] = []
    exporter = JobExporter(node="n", hostname="h", warn=said.append)
    folder = tmp_path / "prom"
    exporter.keep_textfile(str(folder / "m.prom"))
    sampler = Sampler(cuda_visible_devices=None)
    try:
        for _ in range(3):
            exporter.observe(sampler.sample())
        assert said == [f"cannot write metrics to {folder / 'm.prom'}: No such file or directory"]
        folder.mkdir()
        exporter.observe(sampler.sample())
        assert exporter.error is None and "monitor_gpu_status" in (folder / "m.prom").read_text()
        (folder / "m.prom").unlink()
        folder.rmdir()
        exporter.observe(sampler.sample())
        exporter.observe(sampler.sample())
    finally:
        sampler.close()
    assert len(said) == 2 and said[1] == said[0]  # failing again after a write is news


def test_metrics_textfile_that_cannot_be_written_is_said_once(tmp_path: Path):
    target = tmp_path / "missing" / "m.prom"
    code, _, err = run_until([*MONITOR, "metrics", "--textfile", str(target), "--interval", "0.1", "--count", "4"], 60)
    assert code == 0
    assert err == f"monitor: cannot write metrics to {target}: No such file or directory\n"


# -- F17: no screen drawn into a file -----------------------------------------------------------
def test_watch_into_a_file_falls_back_to_headless(tmp_path: Path):
    log = tmp_path / "a.log"
    log.write_text('Traceback (most recent call last):\n  File "t.py", line 1, in <module>\nValueError: x\n')
    out_path, err_path = tmp_path / "out.txt", tmp_path / "err.txt"
    with out_path.open("wb") as out, err_path.open("wb") as err:
        watch = subprocess.Popen([*MONITOR, "watch", "--no-user-rules", str(log)], stdin=subprocess.DEVNULL,
                                 stdout=out, stderr=err, env=ENV)
        try:
            wait_for(lambda: b"ValueError" in out_path.read_bytes(), timeout=30)
        finally:
            watch.send_signal(signal.SIGTERM)
            try:
                watch.wait(timeout=30)
            except subprocess.TimeoutExpired:
                watch.kill()
                watch.wait()
    written = out_path.read_bytes()
    assert b"\x1b" not in written, written[:200]
    assert "Root cause" in written.decode() and watch.returncode == 1
    assert err_path.read_text().startswith("monitor: not attached to a terminal (batch job?); running headless\n")


def test_demo_into_a_pipe_falls_back_to_headless():
    code, out, err = run_until([*MONITOR, "demo", "--speed", "40"], 90)
    assert "\x1b" not in out, out[:200]
    assert code == 1 and "Root cause: ValueError on rank 2" in out
    assert err == "monitor: not attached to a terminal (batch job?); running headless\n"


# -- F18: numeric options are finite and in range, or one usage line ------------------------------
BAD_NUMBERS = [
    (["run", "--restart-delay", "nan"], "--restart-delay nan: not a finite number"),
    (["run", "--restart-delay=inf"], "--restart-delay inf: not a finite number"),
    (["run", "--restart-delay", "1e999"], "--restart-delay inf: not a finite number"),
    (["run", "--restart-delay", "1e300"], "--restart-delay 1e+300: must be at most 604800 seconds"),
    (["run", "--restart-delay", "-1"], "--restart-delay -1.0: must be at least 0 seconds"),
    (["run", "--grace", "nan"], "--grace nan: not a finite number"),
    (["run", "--grace=-inf"], "--grace -inf: not a finite number"),
    (["run", "--stall-after", "nan"], "--stall-after nan: not a finite number"),
    (["run", "--stall-after", "0"], "--stall-after 0.0: must be more than 0 seconds"),
    (["run", "--restart", "-1"], "--restart -1: must be at least 0"),
    (["run", "--metrics-port", "70000"], "--metrics-port 70000: must be at most 65535"),
    (["run", "--metrics-port", "0"], "--metrics-port 0: must be at least 1"),
    (["watch", "--stall-after", "nan", "a.log"], "--stall-after nan: not a finite number"),
    (["metrics", "--interval", "nan"], "--interval nan: not a finite number"),
    (["metrics", "--interval", "inf"], "--interval inf: not a finite number"),
    (["metrics", "--interval", "0"], "--interval 0.0: must be at least 0.1 seconds"),
    (["metrics", "--count", "0"], "--count 0: must be at least 1"),
    (["metrics", "--pid", "99999999999999999999"], "--pid 99999999999999999999: must be at most 4194304"),
    (["metrics", "--serve", "99999"], "--serve 99999: must be at most 65535"),
    (["demo", "--speed", "inf"], "--speed inf: not a finite number"),
    (["demo", "--speed", "nan"], "--speed nan: not a finite number"),
    (["demo", "--speed", "1e-300"], "--speed 1e-300: must be at least 0.01"),
    (["stacks", "--pid", "99999999999999999999"], "--pid 99999999999999999999: must be at most 4194304"),
    (["stacks", "--pid", "0"], "--pid 0: must be at least 1"),
]


@pytest.mark.parametrize(("argv", "message"), BAD_NUMBERS, ids=[" ".join(a) for a, _ in BAD_NUMBERS])
def test_a_bad_number_is_one_usage_line_and_exit_2(tmp_path: Path, argv: list[str], message: str):
    (tmp_path / "a.log").write_text("step 1\n")
    job = ["--", sys.executable, "-c", "pass"] if argv[0] == "run" else []
    code, _, err = run_until([*MONITOR, *argv, *job], 60, cwd=tmp_path)
    assert (code, err) == (2, f"monitor: {message}\n")
    assert not (tmp_path / "logs").exists()  # nothing was launched
