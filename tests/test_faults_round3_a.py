"""Faults of round 3 (F1, F22, F3, F4, F19, F20): the files `monitor run` writes in a folder
others may write, the job's stdin, `pkill -f monitor`, and helpers the job leaves running."""

from __future__ import annotations

import multiprocessing
import os
import signal
import stat
import subprocess
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path

import psutil
import pytest

from monitor.files import replace_file
from monitor.metrics.samples_file import SamplesFile, samples_path
from monitor.runner.job import CaptureOptions, Job, JobStartError, new_log_path
from monitor.runner.takeover import record_rest
from tests.runner_helpers import monitor_cmd, only_log, python_job, read_json, run_monitor, wait_for

VICTIM_TEXT = "ORIGINAL CONTENT\n"


def victim(folder: Path) -> Path:
    """A file a link planted in the log folder points at (in real life: /etc/...), mode 0644."""
    path = folder / "victim_existing"
    path.write_text(VICTIM_TEXT)
    path.chmod(0o644)
    return path


def assert_untouched(path: Path) -> None:
    assert path.read_text() == VICTIM_TEXT
    assert stat.S_IMODE(path.stat().st_mode) == 0o644


# -- F1: links planted at the names `monitor run` is about to write -------------------------------

def test_f1_monitor_run_follows_no_link_planted_at_its_log_or_tmp_names(tmp_path: Path):
    logs = tmp_path / "logs"
    logs.mkdir()
    existing = victim(tmp_path)
    now = datetime.now()
    for second in range(8):  # the stamps of the next seconds, as an attacker would plant them
        stamp = (now + timedelta(seconds=second)).strftime("%Y%m%d-%H%M%S")
        (logs / f"run-{stamp}.log").symlink_to(tmp_path / f"victim_new_{second}")
        (logs / f"run-{stamp}.job.json.tmp").symlink_to(existing)
        (logs / f"run-{stamp}.meta.json.tmp").symlink_to(existing)
    done = run_monitor(logs, "echo", "PWNED-LINE")
    assert done.returncode == 0, done.stderr.decode()
    assert not list(tmp_path.glob("victim_new_*"))  # nothing created through a dangling link
    assert_untouched(existing)
    log = next(path for path in logs.glob("run-*.log") if not path.is_symlink())
    assert log.read_bytes() == b"PWNED-LINE\n"
    assert read_json(log.with_name(f"{log.stem}.job.json"))["exit_code"] == 0


def test_f1_a_dangling_link_at_the_log_name_is_passed_over(tmp_path: Path):
    now = datetime(2026, 1, 1)
    (tmp_path / "run-20260101-000000.log").symlink_to(tmp_path / "created_through_link")
    path = new_log_path(tmp_path, now)
    assert path == tmp_path / "run-20260101-000000-2.log"
    assert not path.is_symlink() and path.stat().st_size == 0
    assert not (tmp_path / "created_through_link").exists()


def test_f1_a_side_file_is_never_written_through_a_link_at_its_tmp_name(tmp_path: Path):
    existing = victim(tmp_path)
    side = tmp_path / "run-x.job.json"
    (tmp_path / "run-x.job.json.tmp").symlink_to(existing)
    assert replace_file(side, b'{"ok": 1}') is None
    assert side.read_bytes() == b'{"ok": 1}' and stat.S_IMODE(side.stat().st_mode) == 0o600
    assert_untouched(existing)
    assert (tmp_path / "run-x.job.json.tmp").is_symlink()  # the planted link is left as it was


def test_f1_the_recorder_refuses_a_log_that_is_a_link(tmp_path: Path):
    existing = victim(tmp_path)
    log = tmp_path / "run-x.log"
    log.symlink_to(existing)
    with pytest.raises(JobStartError) as info:
        Job.start([sys.executable, "-c", "print('written through the link')"], log,
                  CaptureOptions(use_pty=False))
    assert "symbolic link" in str(info.value) and "\n" not in str(info.value)
    assert_untouched(existing)


def test_f1_recording_the_rest_follows_no_link_put_in_place_of_the_log(tmp_path: Path):
    existing = victim(tmp_path)
    log = tmp_path / "run-x.log"
    log.symlink_to(existing)
    read_end, write_end = os.pipe()
    os.write(write_end, b"the job's last words\n")
    os.close(write_end)
    state = record_rest(log, read_end, os.getpid(), 12345, "was killed by SIGKILL")
    assert "symbolic link" in state["log_error"]
    assert_untouched(existing)


def test_f1_a_runs_metrics_are_never_written_through_a_link(tmp_path: Path):
    existing = victim(tmp_path)
    path = samples_path(tmp_path / "run-x.log")
    path.symlink_to(existing)
    with pytest.raises(OSError):
        SamplesFile(path, new=True)
    assert_untouched(existing)


# -- F22: two runs starting in the same second --------------------------------------------------

def _take_log_name(folder: str, barrier, names) -> None:
    barrier.wait()
    names.put(str(new_log_path(Path(folder), datetime(2026, 1, 1))))


def test_f22_runs_starting_together_never_share_a_log(tmp_path: Path):
    context = multiprocessing.get_context("fork")
    for trial in range(8):
        folder = tmp_path / f"trial{trial}"
        barrier, names = context.Barrier(6), context.Queue()
        workers = [context.Process(target=_take_log_name, args=(str(folder), barrier, names)) for _ in range(6)]
        for worker in workers:
            worker.start()
        taken = [names.get(timeout=30) for _ in workers]
        for worker in workers:
            worker.join(30)
        assert len(set(taken)) == 6, sorted(taken)


# -- F3: every file `run` writes is its owner's only ----------------------------------------------

def test_f3_the_log_and_the_metrics_are_readable_by_their_owner_only(tmp_path: Path):
    done = run_monitor(tmp_path, *python_job("import time; print('hello --password=hunter2'); time.sleep(1.5)"))
    assert done.returncode == 0, done.stderr.decode()
    log = only_log(tmp_path)
    for path in (log, samples_path(log), *tmp_path.glob("run-*.json")):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path.name


def test_f3_a_new_metrics_recording_is_private(tmp_path: Path):
    SamplesFile(tmp_path / "m.jsonl").close()
    assert stat.S_IMODE((tmp_path / "m.jsonl").stat().st_mode) == 0o600


# -- F4: the job's stdin ------------------------------------------------------------------------

def test_f4_headless_run_passes_stdin_to_the_job(tmp_path: Path):
    code = "x = input('name? '); print('got', x)"
    done = subprocess.run(monitor_cmd(tmp_path, *python_job(code)), input=b"answer42\n",
                          capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr.decode()
    assert only_log(tmp_path).read_bytes() == b"name? got answer42\n"


def test_f4_under_the_screen_the_job_reads_dev_null_and_is_told_so(tmp_path: Path, monkeypatch, capsys):
    from monitor.diagnosis.catalogue import load_catalogue
    from monitor.runner import supervise

    def screen(job, session, metrics):
        wait_for(lambda: job.exit_code() is not None)

    monkeypatch.setattr(supervise, "_attached_to_terminal", lambda: True)
    code = supervise.run(supervise.RunOptions(
        command=[sys.executable, "-c", "import sys; print(repr(sys.stdin.read()))"], log_dir=tmp_path,
        preflight=False), load_catalogue(include_user=False), screen)
    assert code == 0
    assert next(tmp_path.glob("run-*[0-9].log")).read_bytes() == b"''\n"
    err = capsys.readouterr().err
    assert "stdin" in err and "/dev/null" in err and "--headless" in err


# -- F19: `pkill -9 -f monitor` -----------------------------------------------------------------

TICKING_JOB = "import time\nfor i in range(16):\n    print('tick', i, flush=True)\n    time.sleep(0.25)\n"


def test_f19_pkill_f_monitor_takes_the_monitor_but_not_the_recorder_or_the_job(tmp_path: Path):
    # The log folder's path holds "monitor" too (this test's name): it must not be in the recorder's
    # command line either. `pkill` itself is emulated on this monitor's process tree alone.
    monitor = subprocess.Popen(monitor_cmd(tmp_path, *python_job(TICKING_JOB)), stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    try:
        state = wait_for(lambda: list(tmp_path.glob("run-*.job.json")) and read_json(next(tmp_path.glob("run-*.job.json"))))
        wait_for(lambda: b"tick 2\n" in only_log(tmp_path).read_bytes())
        tree = [psutil.Process(monitor.pid), *psutil.Process(monitor.pid).children(recursive=True)]
        matched = [process for process in tree if "monitor" in " ".join(process.cmdline())]
        for process in matched:
            process.send_signal(signal.SIGKILL)
        assert [process.pid for process in matched] == [monitor.pid]
        monitor.wait(10)
        wait_for(lambda: "exit_code" in read_json(next(tmp_path.glob("run-*.job.json"))), timeout=30)
    finally:
        if monitor.poll() is None:
            monitor.kill()
    log = only_log(tmp_path).read_text()
    assert log == "".join(f"tick {i}\n" for i in range(16))
    final = read_json(next(tmp_path.glob("run-*.job.json")))
    assert final["exit_code"] == 0 and final["recorder_pid"] == state["recorder_pid"]


# -- F20: a helper the job leaves running with its output ----------------------------------------

def test_f20_a_helper_stopped_after_the_job_ended_is_named_on_stderr(tmp_path: Path):
    pid_file = tmp_path / "helper.pid"
    job = ("bash", "-c", f"nohup sleep 300 & echo $! > {pid_file}; echo started helper; exit 0")
    started = time.monotonic()
    done = run_monitor(tmp_path / "logs", *job)
    assert done.returncode == 0
    helper = int(pid_file.read_text())
    assert not psutil.pid_exists(helper) or psutil.Process(helper).status() == psutil.STATUS_ZOMBIE
    lines = [line for line in done.stderr.decode().splitlines() if f"pid {helper} (sleep 300)" in line]
    assert len(lines) == 1 and "held its output" in lines[0] and "stopped" in lines[0], done.stderr.decode()
    assert time.monotonic() - started < 30
