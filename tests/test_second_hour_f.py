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
    """``monitor ARGS`` as a user types it; this checkout's code wherever it runs (``cwd``)."""
    env = {**(os.environ if env is None else env), "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "monitor", *args], capture_output=True, text=True, timeout=60,
                          cwd=cwd, env=env)


def start_headless_watch(*paths: str) -> subprocess.Popen:
    env = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONPATH=str(ROOT))
    return subprocess.Popen([sys.executable, "-m", "monitor", "watch", "--headless", "--no-user-rules", *paths],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def read_until(stream, wanted: str, timeout: float = 15.0) -> str:
    """What ``stream`` printed up to and including the first line holding ``wanted``, or all it
    printed within ``timeout``: a line that never comes fails the test, never hangs it. Read byte by
    byte from the pipe, so that nothing past that line is taken from a later ``communicate``."""
    import os
    import select

    fd, seen, line = stream.fileno(), "", b""
    deadline = time.monotonic() + timeout
    while (left := deadline - time.monotonic()) > 0 and select.select([fd], [], [], left)[0]:
        byte = os.read(fd, 1)
        if not byte:
            break
        line += byte
        if byte == b"\n":
            seen += line.decode("utf-8", "replace")
            if wanted in line.decode("utf-8", "replace"):
                break
            line = b""
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


def test_the_screen_says_a_watched_file_is_missing_and_follows_it_once_it_appears(tmp_path):
    import asyncio

    from monitor.diagnosis.catalogue import load_catalogue
    from monitor.tui import watch_app

    log = tmp_path / "train.log"
    app = watch_app([str(log)], catalogue=load_catalogue(include_user=False))

    async def drive():
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.pause(1.0)
            said = [str(n.message) for n in app._notifications]
            assert any("train.log: no such file yet; waiting for it to appear" in m for m in said), said
            log.write_text("step 1 loss 2.0\n")
            for _ in range(40):
                await pilot.pause(0.25)
                if len(app.store) == 1:
                    break
            said = [str(n.message) for n in app._notifications]
            assert any("train.log has appeared; following it" in m for m in said), said
            assert len(app.store) == 1

    asyncio.run(drive())
    app.metrics_feed.close()

# -- item 6: text output wrapped to the terminal, never when piped ------------------------------
LONG_MESSAGE = "target batch has 33 rows but the input has 32 " + "and the padding token is missing " * 4
LONG_CRASH = f"""[rank1]: Traceback (most recent call last):
[rank1]:   File "/job/train.py", line 125, in fail_now
[rank1]:     raise ValueError(msg)
[rank1]: ValueError: {LONG_MESSAGE.strip()}
"""


def tmux(*args: str) -> str:
    return subprocess.run(["tmux", *args], capture_output=True, text=True, timeout=30, check=True).stdout


def in_tmux(tmp_path, command: str, *, until: str, keys: tuple[str, ...] = (), timeout: float = 30.0) -> str:
    """``command`` run in a detached tmux session of 80x24; ``keys`` sent once ``until`` is on the
    screen; returns the whole pane (its history too), soft-wrapped lines joined."""
    session = f"second-hour-{os.getpid()}-{time.monotonic_ns()}"
    tmux("new-session", "-d", "-s", session, "-x", "80", "-y", "24", "-c", str(ROOT),
         f"env PYTHONPATH={ROOT} {command}; echo rc=$?; sleep 60")
    try:
        deadline = time.monotonic() + timeout
        pane = ""
        for wanted in (until, "rc="):
            while wanted not in pane and time.monotonic() < deadline:
                time.sleep(0.3)
                pane = tmux("capture-pane", "-p", "-J", "-S", "-", "-t", session)
            if keys and wanted == until:
                time.sleep(0.5)
                tmux("send-keys", "-t", session, *keys)
        return pane
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)


def test_diagnose_into_a_pipe_does_not_hard_wrap(tmp_path):
    (tmp_path / "job.log").write_text(LONG_CRASH)
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    result = subprocess.run(f"{sys.executable} -m monitor diagnose --no-user-rules {tmp_path / 'job.log'} | cat",
                            shell=True, capture_output=True, text=True, timeout=60, env=env, cwd=ROOT)
    assert result.stdout.startswith("Root cause: ValueError on rank 1")
    # A grep for the message finds the whole entry, on one line.
    assert any(f"ValueError: {LONG_MESSAGE.strip()}" in line for line in result.stdout.splitlines()), result.stdout


def test_headless_watch_summary_fits_an_80_column_terminal(tmp_path):
    (tmp_path / "job.log").write_text(LONG_CRASH)
    pane = in_tmux(tmp_path, f"{sys.executable} -m monitor watch --headless --no-user-rules {tmp_path / 'job.log'}",
                   until="ValueError on rank 1", keys=("C-c",))
    assert "Root cause: ValueError on rank 1" in pane, pane
    report = pane.split("Root cause:", 1)[1].splitlines()
    # A line longer than the terminal is one the terminal wrapped (-J joined it back).
    assert max(map(len, report)) <= 80, "\n".join(line for line in report if len(line) > 80)


# -- item 7: the end of monitor run names the verdict last ---------------------------------------
def test_the_last_lines_of_a_run_name_the_root_cause_its_rank_and_what_to_do(tmp_path):
    crash = SAMPLES / "demo" / "crash-2ranks.log"
    result = monitor("run", "--headless", "--no-preflight", "--log-dir", str(tmp_path), "--",
                     "sh", "-c", f"cat {crash}; exit 1", cwd=tmp_path)
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    last = "\n".join(lines[-3:])
    assert "root cause: ValueError on rank 1" in last, last
    # The remedy's first line is where to start (the raising frame), as the screen shows it first.
    assert "what to do first: Raised from" in last and "train.py:125 in fail_now: start there." in last, last
    cascade = max(i for i, line in enumerate(lines) if "torchrun: monitor.demo.train failed" in line)
    assert cascade < len(lines) - 3


# -- item 9: a folder of unrelated logs is not merged into one root cause ------------------------
def test_a_folder_of_unrelated_failed_logs_is_said_to_be_separate_jobs_each_diagnosed(tmp_path):
    import shutil

    for sample in ("demo/crash-2ranks.log", "demo/bad-ckpt-2ranks.log", "documented/cuda-oom-tee-8ranks.log",
                   "demo/ok-2ranks.log"):
        shutil.copy(SAMPLES / sample, tmp_path)
    shutil.copytree(SAMPLES / "documented" / "host-oom-dmesg", tmp_path / "host-oom-dmesg")
    result = monitor("diagnose", "--no-user-rules", str(tmp_path))
    assert result.returncode == 1
    out = result.stdout
    assert "look like 5 separate jobs" in out.splitlines()[0], out
    for alone in ("crash-2ranks.log", "bad-ckpt-2ranks.log", "cuda-oom-tee-8ranks.log", "host-oom-dmesg"):
        single = monitor("diagnose", "--json", "--no-user-rules", str(tmp_path / alone))
        title = __import__("json").loads(single.stdout)["root_cause"]["title"]
        assert f"root cause: {title}" in out, (alone, title, out)
    assert "ok-2ranks.log" in out and "No failure found" in out
    merged = monitor("diagnose", "--one-job", "--no-user-rules", str(tmp_path))
    assert merged.stdout.startswith("Root cause:"), merged.stdout


def test_the_files_of_one_job_are_still_read_as_one(tmp_path):
    for layout in ("demo/hang-gloo-logdir", "documented/host-oom-dmesg", "documented/gpu-xid79-node"):
        result = monitor("diagnose", "--no-user-rules", str(SAMPLES / layout))
        assert "separate jobs" not in result.stdout, (layout, result.stdout)
    for rank in (0, 1):  # one job's files, one per rank
        (tmp_path / f"rank{rank}.log").write_text(
            f"[rank{rank}]: Traceback (most recent call last):\n[rank{rank}]: ValueError: boom {rank}\n")
    assert "separate jobs" not in monitor("diagnose", "--no-user-rules", str(tmp_path)).stdout


# -- item 11: an old, finished log is shown by its own times ------------------------------------
def test_an_old_finished_log_shows_no_eta_and_its_findings_by_the_logs_times(tmp_path):
    import asyncio
    import shutil

    from monitor.diagnosis.catalogue import load_catalogue
    from monitor.tui import watch_app
    from monitor.tui.findings_panel import FindingsPanel
    from monitor.tui.progress_panel import ProgressPanel

    log = tmp_path / "old.log"
    shutil.copy(SAMPLES / "documented" / "cuda-oom-tee-8ranks.log", log)
    two_days_ago = time.time() - 2 * 86400 - 3 * 3600
    os.utime(log, (two_days_ago, two_days_ago))
    app = watch_app([str(log)], catalogue=load_catalogue(include_user=False))

    async def drive():
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.pause(1.5)
            progress = app.query_one(ProgressPanel).render().plain
            assert "ETA" not in progress and "no progress for 2d03h" in progress, progress
            panel = app.query_one(FindingsPanel)
            oom = next(f for f in panel.findings if f.rule == "cuda-oom")
            assert panel.first_time(oom) == "~10:21:43"  # the next time its log gives, not when it was read
            for finding in panel.findings:  # none shows today's time of reading
                assert time.strftime("%H:%M", time.localtime()) not in panel.first_time(finding), finding.title
            await pilot.press("c")
            await pilot.pause()
            detail = str(panel.query_one("#finding-text").render())
            assert "written by 10:21:43 (its line has no time)" in detail, detail

    asyncio.run(drive())
    app.metrics_feed.close()


# -- item 15: the smaller points ----------------------------------------------------------------
def test_a_finding_with_no_log_line_is_not_placed_at_colon_zero():
    from monitor.model import Finding
    from monitor.tui.findings_panel import describe

    preflight = Finding("preflight-port", "launcher", "warning", "root", "Port 29500 is taken", origin="preflight")
    text = describe(preflight, False, "22:22:32").plain
    assert ":0" not in text and "first from preflight, logged 22:22:32" in text, text


def test_the_report_has_no_empty_evidence_heading():
    from monitor.diagnosis.report import render_text
    from monitor.model import Diagnosis, Finding

    segfault = Finding("job-exit", "launcher", "error", "root", "The job was ended by SIGSEGV (exit code 139)",
                       file="run.log", remedy="A crash in native code prints nothing of its own.", origin="exit")
    text = render_text(Diagnosis(root_cause=segfault, findings=[segfault], files=["run.log"]))
    assert "Evidence:" not in text and "What to do:" in text, text


def test_a_watch_that_read_no_file_does_not_say_no_failure_in_0_files(tmp_path):
    (tmp_path / "empty").mkdir()
    proc = start_headless_watch(str(tmp_path / "empty"))
    read_until(proc.stderr, "watching")
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=20)
    assert "0 file(s)" not in out and "No failure found" not in out, out
    assert f"no log file appeared in {tmp_path / 'empty'}" in err and proc.returncode == 2, err


def test_the_log_status_line_says_1_line_not_1_lines(tmp_path):
    import asyncio

    from textual.widgets import Static

    from monitor.diagnosis.catalogue import load_catalogue
    from monitor.tui import watch_app

    (tmp_path / "train.log").write_text("step 1 loss 2.0\n")
    app = watch_app([str(tmp_path / "train.log")], catalogue=load_catalogue(include_user=False))

    async def drive():
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.pause(1.0)
            status = " ".join(str(widget.render()) for widget in app.query(Static))
            assert "1 line from 1 file" in status and "1 lines" not in status, status

    asyncio.run(drive())
    app.metrics_feed.close()


def test_ctrl_c_in_the_headless_demo_ends_it_with_the_summary_as_the_screen_does():
    env = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-m", "monitor", "demo", "--headless"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    read_until(proc.stdout, "replaying")
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert "Traceback" not in err
    assert proc.returncode in (0, 1), (proc.returncode, err)  # the screen's Ctrl-C: the diagnosis's code
    assert "stopped (Ctrl-C)" in out and ("No failure found" in out or "Root cause" in out), out


def test_a_clean_run_says_the_job_exited_0(tmp_path):
    result = monitor("run", "--headless", "--no-preflight", "--log-dir", str(tmp_path), "--",
                     sys.executable, "-c", "print('step 1 loss 2.0')", cwd=tmp_path)
    assert result.returncode == 0
    assert "The job exited 0 and its log shows no failure." in result.stderr, result.stderr
    assert "file(s)" not in result.stderr


def test_random_bytes_named_log_are_skipped_as_a_binary_file(tmp_path):
    import random

    generator = random.Random(7)
    for number in range(8):  # random bytes hold about a tenth control bytes: the old test missed some
        garbage = tmp_path / f"bin{number}.log"
        garbage.write_bytes(bytes(generator.getrandbits(8) for _ in range(20_000)))
        result = monitor("diagnose", str(garbage))
        assert result.returncode == 2 and "binary file, skipped" in result.stderr, (number, result)


def test_a_rank_killed_by_a_segfault_is_named_sigsegv(tmp_path):
    log = tmp_path / "torchrun.log"
    log.write_text("E1125 22:30:01.000000 123 torch/distributed/elastic/multiprocessing/api.py:869] failed "
                   "(exitcode: -11) local_rank: 1 (pid: 4242) of binary: /usr/bin/python3\n")
    result = monitor("diagnose", "--no-user-rules", str(log))
    assert "torchrun: local rank 1 crashed in native code (exit code -11 (SIGSEGV))" in result.stdout, result.stdout
