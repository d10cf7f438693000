"""Signals and survival: the job outlives a killed monitor; a stopped monitor leaves nothing behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.runner_helpers import (
    alive, job_state, log_tail, monitor_cmd, only_log, python_job, read_json, wait_for,
)

# Prints numbered lines for a while; the test checks that none is missing.
COUNTING_JOB = """
import sys, time
for i in range(60):
    print(f"line {i}", flush=True)
    time.sleep(0.03)
print("done", flush=True)
"""

# A job with children and grandchildren: one grandchild left the process group (setsid), one
# double-forked so it was re-parented away from its parent, and one child ignores SIGTERM (and
# says so once it does: on a loaded machine its start-up may outlast the others').
TREE_JOB = r"""
import os, signal, subprocess, sys, time
SLEEPER = "import time; time.sleep(600)"
IGNORER = ("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
           "print('ignoring SIGTERM', flush=True); time.sleep(600)")
DOUBLE = ("import os, subprocess, sys; "
          "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'], start_new_session=True); "
          "print('pid', p.pid, flush=True); os._exit(0)")
CHILD = f'''
import subprocess, sys, time
a = subprocess.Popen([sys.executable, "-c", {SLEEPER!r}], start_new_session=True)
b = subprocess.Popen([sys.executable, "-c", {DOUBLE!r}])
b.wait()
print("pid", a.pid, flush=True)
time.sleep(600)
'''
c1 = subprocess.Popen([sys.executable, "-c", CHILD])
c2 = subprocess.Popen([sys.executable, "-c", IGNORER])
print("pid", c1.pid, flush=True)
print("pid", c2.pid, flush=True)
print("pid", os.getpid(), flush=True)
time.sleep(600)
"""


def logged_pids(log: Path) -> list[int]:
    # Complete lines only: with PYTHONUNBUFFERED a print reaches the log in pieces.
    lines = log.read_text().split("\n")[:-1]
    return [int(line.split()[1]) for line in lines if line.startswith("pid ")]


def test_job_survives_monitor_sigkill_and_log_is_complete(tmp_path: Path):
    monitor = subprocess.Popen(monitor_cmd(tmp_path, *python_job(COUNTING_JOB)),
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for(lambda: list(tmp_path.glob("run-*.log")) and b"line 5\n" in only_log(tmp_path).read_bytes())
    monitor.kill()
    monitor.wait()
    job_pid = job_state(tmp_path)["job_pid"]
    state = wait_for(lambda: "exit_code" in job_state(tmp_path) and job_state(tmp_path), timeout=30)
    assert state["exit_code"] == 0
    expected = "".join(f"line {i}\n" for i in range(60)) + "done\n"
    assert only_log(tmp_path).read_text() == expected
    assert not alive(job_pid)


def test_sigterm_to_monitor_stops_the_whole_tree_and_escalates(tmp_path: Path):
    monitor = subprocess.Popen(monitor_cmd(tmp_path, *python_job(TREE_JOB), extra=("--grace", "1")),
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    # Every process started, and the one that ignores SIGTERM ignores it already (else the
    # SIGTERM would end it and no SIGKILL would be needed). Deadlines for a loaded machine.
    wait_for(lambda: list(tmp_path.glob("run-*.log")) and len(logged_pids(only_log(tmp_path))) == 5
             and "ignoring SIGTERM\n" in only_log(tmp_path).read_text(), timeout=60,
             explain=lambda: f"{log_tail(tmp_path)}; monitor exit {monitor.poll()}")
    pids = logged_pids(only_log(tmp_path))
    assert all(alive(pid) for pid in pids)
    monitor.send_signal(signal.SIGTERM)
    _, err = monitor.communicate(timeout=60)
    assert monitor.returncode == 128 + signal.SIGTERM, err.decode()[-2000:]
    wait_for(lambda: not any(alive(pid) for pid in pids), timeout=30)
    state = job_state(tmp_path)
    assert state["stop_signal"] == "SIGTERM"
    assert state["killed"] is True  # the SIGTERM-ignoring child needed SIGKILL
    diagnosis = read_json(only_log(tmp_path).with_suffix(".diagnosis.json"))
    # Stopped on request: said so, but not a failure of the job.
    assert diagnosis["root_cause"] is None
    assert [f["rule"] for f in diagnosis["findings"]] == ["job-stopped"]
    # ... with the SIGKILL it took (it was reported as a plain SIGTERM), and no "No failure found".
    assert "then SIGKILL to those left after the grace period" in diagnosis["findings"][0]["title"]
    report = " ".join(err.decode().split())  # wrapped at the terminal width
    assert "No failure found" not in report and "; no failure before it." in report, report


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_ctrl_c_sigterm_and_sighup_reach_the_job_as_themselves(tmp_path: Path, signum: int):
    job = ("import signal, sys, time\n"
           "def bye(n, _):\n    print('got', signal.Signals(n).name, flush=True); sys.exit(10 + n)\n"
           "for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):\n    signal.signal(s, bye)\n"
           "print('ready', flush=True)\ntime.sleep(60)\n")
    monitor = subprocess.Popen(monitor_cmd(tmp_path, *python_job(job)),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    wait_for(lambda: list(tmp_path.glob("run-*.log")) and b"ready\n" in only_log(tmp_path).read_bytes())
    monitor.send_signal(signum)
    out, _ = monitor.communicate(timeout=30)
    assert monitor.returncode == 10 + signum  # the job's own exit code, passed through
    assert out == f"ready\ngot {signal.Signals(signum).name}\n".encode()


def test_a_terminal_that_is_not_read_never_stalls_the_job(tmp_path: Path):
    # Nobody reads the monitor's stdout: the pipe fills after 64 KiB. The job must still finish
    # at full speed and the log must still hold every byte.
    job = "import sys\nfor i in range(200_000):\n    sys.stdout.write(f'{i:09d} padding padding\\n')\n"
    read_end, write_end = os.pipe()
    monitor = subprocess.Popen(monitor_cmd(tmp_path, *python_job(job)), stdout=write_end,
                               stderr=subprocess.DEVNULL)
    try:
        state = wait_for(lambda: "exit_code" in job_state(tmp_path) and job_state(tmp_path), timeout=60)
        assert state["exit_code"] == 0
        monitor.wait(timeout=30)
        assert monitor.returncode == 0
        assert only_log(tmp_path).stat().st_size == 200_000 * 26
        assert state["tee_dropped_bytes"] > 0
    finally:
        os.close(write_end)
        os.close(read_end)
        if monitor.poll() is None:
            monitor.kill()


def test_leftover_processes_are_cleared_after_the_launcher_exits(tmp_path: Path):
    # The launcher exits but a child it started keeps the output open: after the linger period
    # the recorder stops it, so nothing is left running and the recorder finishes.
    job = ("import subprocess, sys\n"
           "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
           "print('pid', p.pid, flush=True)\n")
    from monitor.runner.job import Job, CaptureOptions, new_log_path
    log = new_log_path(tmp_path)
    job_handle = Job.start([sys.executable, "-c", job], log,
                           CaptureOptions(use_pty=False, linger_s=0.5, grace_s=1))
    assert job_handle.wait(timeout=30) == 0
    pids = logged_pids(log)
    assert pids and not any(alive(pid) for pid in pids)
    assert [leftover["pid"] for leftover in job_handle.state()["leftovers"]] == pids


def test_a_job_that_closed_its_output_is_still_waited_for_and_stopped(tmp_path: Path):
    # The job closes stdout/stderr (end of file for the recorder) but keeps running, ignoring
    # SIGTERM: the recorder must keep waiting, and a stop must still escalate to SIGKILL.
    job = ("import os, signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
           "print('closing', flush=True)\nos.close(1); os.close(2)\ntime.sleep(60)\n")
    from monitor.runner.job import Job, CaptureOptions, new_log_path
    log = new_log_path(tmp_path)
    handle = Job.start([sys.executable, "-c", job], log, CaptureOptions(use_pty=False, grace_s=0.5))
    wait_for(lambda: log.read_bytes() == b"closing\n")
    assert handle.wait(timeout=1) is None and alive(handle.pid)
    handle.stop()
    assert handle.wait(timeout=20) == 128 + signal.SIGKILL
    assert handle.state()["killed"] is True


def test_a_stop_signal_during_start_up_reaches_the_job_once_it_exists(tmp_path: Path):
    from monitor.runner.job import Job, CaptureOptions, new_log_path
    from monitor.runner.supervise import StopForwarder

    with StopForwarder() as forwarder:
        os.kill(os.getpid(), signal.SIGTERM)  # arrives before there is a job to pass it to
        wait_for(lambda: forwarder.received == "SIGTERM")
        job = Job.start([sys.executable, "-c", "import time; time.sleep(60)"], new_log_path(tmp_path),
                        CaptureOptions(use_pty=False))
        forwarder.attach(job)
        assert job.wait(timeout=20) == 128 + signal.SIGTERM
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL


def test_under_nohup_a_hang_up_does_not_stop_the_job(tmp_path: Path):
    job = "import time\nprint('ready', flush=True)\ntime.sleep(1.5)\nprint('finished', flush=True)\n"
    monitor = subprocess.Popen(monitor_cmd(tmp_path, *python_job(job)), stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL,
                               preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN))
    wait_for(lambda: list(tmp_path.glob("run-*.log")) and b"ready\n" in only_log(tmp_path).read_bytes())
    monitor.send_signal(signal.SIGHUP)
    out, _ = monitor.communicate(timeout=30)
    assert monitor.returncode == 0 and out == b"ready\nfinished\n"


def test_after_the_monitor_is_killed_monitor_watch_picks_the_log_up(tmp_path: Path):
    job = ("import time\nfor i in range(30):\n    print(f'step {i}', flush=True)\n    time.sleep(0.05)\n"
           "raise ValueError('labels out of range after the monitor died')\n")
    monitor = subprocess.Popen(monitor_cmd(tmp_path, *python_job(job)),
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for(lambda: list(tmp_path.glob("run-*.log")) and b"step 3" in only_log(tmp_path).read_bytes())
    monitor.kill()
    monitor.wait()
    watch = subprocess.Popen([sys.executable, "-m", "monitor", "watch", "--headless", str(only_log(tmp_path))],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    said = []
    while not any(b"watching" in line for line in said):  # up: a SIGTERM now gets the summary
        said.append(watch.stdout.readline())
        assert said[-1], said
    wait_for(lambda: "exit_code" in job_state(tmp_path), timeout=30)
    watch.send_signal(signal.SIGTERM)  # the watch reads what is left of the log as it ends
    out, _ = watch.communicate(timeout=60)
    out = b"".join(said) + out
    assert watch.returncode == 1, out.decode()[-2000:]
    assert b"labels out of range after the monitor died" in out
