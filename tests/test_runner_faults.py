"""Faults of the monitor's own never change the job's fate (issue #11): a full disk under `monitor
run`, secrets in the files beside the log, Ctrl-C's exit code."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.runner_helpers import monitor_cmd, only_log, read_json, run_monitor, wait_for


@pytest.fixture
def small_disk(tmp_path: Path):
    """A real 1 MiB file system (tmpfs), as a log folder that fills up."""
    mount = tmp_path / "small"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], capture_output=True)


# Fills the disk, says so in a file of the test's, waits until the test frees space, then writes
# its last lines and exits 0.
FILLING_JOB = """
import os, sys, time
burst_done, go_on = sys.argv[1], sys.argv[2]
for i in range(30000):
    print("burst %06d " % i + "x" * 60)
sys.stdout.flush()
open(burst_done, "w").close()
while not os.path.exists(go_on):
    time.sleep(0.05)
print("after the gap", flush=True)
print("the end", flush=True)
"""


def test_a_full_disk_keeps_the_jobs_exit_code_marks_the_gap_and_says_one_line(small_disk: Path, tmp_path: Path):
    filler = small_disk / "filler"
    filler.write_bytes(b"\0" * 600_000)
    burst_done, go_on = tmp_path / "burst-done", tmp_path / "go-on"
    # The copy on our stdout may drop chunks when we read slowly: it goes to a file, never waited on.
    with open(tmp_path / "copy.txt", "wb") as copy:
        proc = subprocess.Popen(monitor_cmd(small_disk, sys.executable, "-c", FILLING_JOB, str(burst_done), str(go_on)),
                                stdout=copy, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
        wait_for(burst_done.exists, timeout=60)
        filler.unlink()  # space comes back
        go_on.touch()
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0  # the job exited 0: a full disk does not make it a failure
    text = err.decode()
    assert "Traceback" not in text
    assert "No space left on device" in text
    log = only_log(small_disk).read_bytes()
    assert log.startswith(b"burst 000000 ")
    marker = [line for line in log.splitlines() if line.startswith(b"[monitor: ")]
    assert len(marker) == 1 and marker[0].endswith(b"bytes lost here: No space left on device]")
    assert log.endswith(b"after the gap\nthe end\n")  # written again once there was room
    assert not list(small_disk.glob("*.tmp"))  # no half-written side files left behind


def test_side_files_mask_secrets_and_are_private(tmp_path: Path):
    done = run_monitor(
        tmp_path, "env", "WANDB_API_KEY=0123456789abcdef0123456789abcdef01234567", "HF_TOKEN=hf_abcdefghijklmnopqrstuvwx",
        sys.executable, "-c", "print('ok')", "--hf-token", "plainvalue123", "--api-key=another-secret",
    )
    assert done.returncode == 0, done.stderr
    log = only_log(tmp_path)
    for kind in ("job", "meta", "diagnosis"):
        path = log.with_name(f"{log.stem}.{kind}.json")
        text = path.read_text()
        for secret in ("0123456789abcdef", "hf_abcdefghijklmnop", "plainvalue123", "another-secret"):
            assert secret not in text, (kind, secret)
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, kind
    command = read_json(log.with_name(f"{log.stem}.meta.json"))["command"]
    assert command[1:3] == ["WANDB_API_KEY=****", "HF_TOKEN=****"] and "--hf-token" in command


def test_ctrl_c_to_monitor_run_exits_like_an_interrupted_job(tmp_path: Path):
    import signal

    proc = subprocess.Popen(monitor_cmd(tmp_path, sys.executable, "-c",
                                        "import time\nprint('up', flush=True)\ntime.sleep(60)\n"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    wait_for(lambda: list(tmp_path.glob("run-*.log")) and b"up" in only_log(tmp_path).read_bytes())
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=30)
    assert proc.returncode == 130


# Numbered lines for about three seconds, then exit 3; with SIGPIPE at its default, a write to a
# pipe nobody reads would kill it.
COUNTING_JOB = """
import signal, sys, time
signal.signal(signal.SIGPIPE, signal.SIG_DFL)
for i in range(60):
    print("line", i, flush=True)
    time.sleep(0.05)
sys.exit(3)
"""


@pytest.mark.parametrize("use_pty", [False, True])
def test_killing_the_recorder_leaves_the_job_running_and_every_line_recorded(tmp_path: Path, use_pty: bool):
    import signal

    from monitor.runner.job import Job, CaptureOptions, new_log_path

    log = new_log_path(tmp_path)
    job = Job.start([sys.executable, "-c", COUNTING_JOB], log, CaptureOptions(use_pty=use_pty))
    wait_for(lambda: b"line 10\n" in log.read_bytes())
    os.kill(job._recorder.pid, signal.SIGKILL)
    assert job.wait(30) == 3  # the job ran to its end and its own exit code is known
    text = log.read_text()
    numbers = [int(line.split()[1]) for line in text.splitlines() if line.startswith("line ")]
    assert numbers == list(range(60))
    assert "[monitor: the recorder (pid " in text and "was killed by SIGKILL" in text
    assert "may be missing" not in text  # the recorder spliced: nothing was only in its memory
    assert job.state()["recorder_killed"] == "was killed by SIGKILL"
    assert not job.recorder_lost


# As many lines as it can print, in one stream: the recorder is killed while it moves them.
FLOODING_JOB = """
import sys
for i in range(300000):
    sys.stdout.write(f"line {i}\\n")
sys.stdout.flush()
sys.exit(3)
"""


def without_takeover_line(text: str) -> set[str]:
    """The log as the job wrote it, the monitor's takeover line taken out: the line stands on its
    own, after the job's newline or after one of its own (the job had stopped mid-line)."""
    start = text.index("[monitor: the recorder (pid ")
    end = text.index("\n", start) + 1
    return {text[:start] + text[end:], text[:start - 1] + text[end:]}


@pytest.mark.parametrize("use_pty", [False, True])
@pytest.mark.parametrize("attempt", range(1, 6))
def test_a_recorder_killed_while_it_moves_output_loses_no_byte(tmp_path: Path, use_pty: bool, attempt: int):
    """Killed at whatever instant, every byte is in the log or still in a pipe the monitor holds
    (a recorder that read a chunk and then wrote it lost the chunk in about one kill in five)."""
    import signal

    from monitor.runner.job import Job, CaptureOptions, new_log_path

    log = new_log_path(tmp_path)
    job = Job.start([sys.executable, "-c", FLOODING_JOB], log, CaptureOptions(use_pty=use_pty))
    wait_for(lambda: log.stat().st_size > 100_000 * attempt, interval=0.001)
    os.kill(job._recorder.pid, signal.SIGKILL)
    assert job.wait(60) == 3
    assert "".join(f"line {i}\n" for i in range(300000)) in without_takeover_line(log.read_text())


def test_monitor_run_says_what_happened_to_the_recorder_and_the_job(tmp_path: Path):
    import signal

    proc = subprocess.Popen(monitor_cmd(tmp_path, sys.executable, "-c", COUNTING_JOB),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    state = wait_for(lambda: list(tmp_path.glob("run-*.job.json")) and read_json(next(tmp_path.glob("run-*.job.json"))))
    wait_for(lambda: b"line 5\n" in only_log(tmp_path).read_bytes())
    os.kill(state["recorder_pid"], signal.SIGKILL)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 3
    assert "the recorder was killed by SIGKILL while the job ran; the job went on" in " ".join(err.decode().split())
    assert "Traceback" not in err.decode()
    diagnosis = read_json(next(tmp_path.glob("run-*.diagnosis.json")))
    assert diagnosis["run"]["exit_code"] == 3
