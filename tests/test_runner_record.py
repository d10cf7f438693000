"""`monitor run --headless`: the log holds the job's bytes exactly, the exit code is the job's."""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from monitor.runner.job import Job, JobStartError, CaptureOptions, new_log_path
from tests.runner_helpers import monitor_cmd, only_log, python_job, read_json, run_monitor

# 20 MB of random bytes (seeded, so the test can recompute them) with no final newline,
# written in uneven pieces from stdout and stderr alternately.
RANDOM_JOB = """
import os, random, sys
rng = random.Random(1234)
out, err = sys.stdout.buffer, sys.stderr.buffer
total = 0
while total < 20_000_000:
    piece = rng.randbytes(rng.randint(1, 70_000))
    stream = out if rng.random() < 0.7 else err
    stream.write(piece); stream.flush()
    total += len(piece)
sys.exit(7)
"""


def expected_random_bytes() -> bytes:
    rng = random.Random(1234)
    pieces, total = [], 0
    while total < 20_000_000:
        piece = rng.randbytes(rng.randint(1, 70_000))
        rng.random()
        pieces.append(piece)
        total += len(piece)
    return b"".join(pieces)


def test_20mb_random_bytes_are_recorded_exactly_and_exit_code_kept(tmp_path: Path):
    result = run_monitor(tmp_path / "logs", *python_job(RANDOM_JOB), timeout=120)
    assert result.returncode == 7, result.stderr.decode()[-2000:]
    expected = expected_random_bytes()
    log = only_log(tmp_path / "logs")
    assert hashlib.sha256(log.read_bytes()).hexdigest() == hashlib.sha256(expected).hexdigest()
    # Headless passes the output through unchanged (stdout here is a pipe, so no terminal).
    assert result.stdout == expected
    diagnosis = read_json(log.with_name(log.stem + ".diagnosis.json"))
    assert diagnosis["run"]["exit_code"] == 7
    assert diagnosis["root_cause"]["fields"]["exit_code"] == "7"


@pytest.mark.parametrize("use_pty", [True, False])
def test_line_ends_and_escapes_are_not_translated(tmp_path: Path, use_pty: bool):
    payload = b"a\nb\r\nprogress 10%\rprogress 20%\r\x1b[31mred\x1b[0m\n\x00\xff tail"
    code = f"import sys; sys.stdout.buffer.write({payload!r}); sys.stdout.flush()"
    log = new_log_path(tmp_path)
    job = Job.start([sys.executable, "-c", code], log, CaptureOptions(use_pty=use_pty))
    assert job.wait(timeout=30) == 0
    assert log.read_bytes() == payload
    assert job.state()["pty"] is use_pty


def test_the_job_sees_a_terminal_when_given_a_pty(tmp_path: Path):
    code = "import sys; print(sys.stdout.isatty(), sys.stderr.isatty(), sys.stdin.isatty())"
    log = new_log_path(tmp_path)
    job = Job.start([sys.executable, "-c", code], log, CaptureOptions(use_pty=True))
    assert job.wait(timeout=30) == 0
    assert log.read_bytes() == b"True True False\n"


def test_arguments_reach_the_job_unchanged_without_a_shell(tmp_path: Path):
    args = ["$HOME", "a b", "'q'", "*", "; rm -rf /", "", "--", "--log", "x", "--headless"]
    code = "import sys, json; print(json.dumps(sys.argv[1:]))"
    result = run_monitor(tmp_path, *python_job(code), *args)
    assert result.returncode == 0
    assert json.loads(only_log(tmp_path).read_text()) == args


def test_exit_code_is_128_plus_signal(tmp_path: Path):
    code = "import os, signal; print('bye', flush=True); os.kill(os.getpid(), signal.SIGSEGV)"
    result = run_monitor(tmp_path, *python_job(code))
    assert result.returncode == 128 + signal.SIGSEGV
    diagnosis = read_json(only_log(tmp_path).with_suffix(".diagnosis.json"))
    assert diagnosis["root_cause"]["fields"]["signal"] == "SIGSEGV"
    assert "SIGSEGV" in result.stderr.decode()


def test_a_command_that_does_not_exist_is_one_line_and_127(tmp_path: Path):
    result = run_monitor(tmp_path, "no-such-program-xyz", "--flag")
    assert result.returncode == 127
    assert "cannot start no-such-program-xyz: No such file or directory" in result.stderr.decode()
    with pytest.raises(JobStartError) as info:
        Job.start(["/dev/null"], new_log_path(tmp_path / "direct"))
    assert info.value.exit_code == 126


def test_no_command_is_a_usage_error(tmp_path: Path):
    result = run_monitor(tmp_path)
    assert result.returncode == 2
    assert b"no command given" in result.stderr


def test_side_files_describe_the_run(tmp_path: Path):
    result = run_monitor(tmp_path, *python_job("print('ok')"))
    assert result.returncode == 0
    log = only_log(tmp_path)
    meta = read_json(log.with_suffix(".meta.json"))
    assert meta["command"][-1] == "print('ok')" and meta["exit_code"] == 0
    state = read_json(log.with_suffix(".job.json"))
    assert state["exit_code"] == 0 and state["bytes"] == 3
    diagnosis = read_json(log.with_suffix(".diagnosis.json"))
    assert diagnosis["root_cause"] is None
    assert diagnosis["run"]["log"] == str(log)


def test_20mb_through_a_pseudo_terminal_are_exact_too(tmp_path: Path):
    log = new_log_path(tmp_path)
    job = Job.start([sys.executable, "-c", RANDOM_JOB], log, CaptureOptions(use_pty=True))
    assert job.wait(timeout=120) == 7
    assert log.read_bytes() == expected_random_bytes()


def test_unwritable_log_dir_and_missing_rules_are_one_line_errors(tmp_path: Path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    result = run_monitor(blocker / "logs", *python_job("print(1)"))
    assert result.returncode == 2
    assert result.stderr.decode().strip().startswith(f"monitor: run: cannot write logs to {blocker / 'logs'}")
    result = run_monitor(tmp_path, *python_job("print(1)"), extra=("--rules", str(tmp_path / "nope")))
    assert result.returncode == 2 and b"no such rules directory" in result.stderr


def test_slurm_names_are_in_the_report(tmp_path: Path):
    env = {**os.environ, "SLURM_JOB_ID": "4242", "SLURM_STEP_ID": "3", "SLURMD_NODENAME": "gpu-07"}
    result = subprocess.run(monitor_cmd(tmp_path, *python_job("raise SystemExit(2)")),
                            capture_output=True, env=env, timeout=60)
    assert result.returncode == 2
    assert "SLURM SLURM_JOB_ID=4242, SLURM_STEP_ID=3, SLURMD_NODENAME=gpu-07" in result.stderr.decode()
    diagnosis = read_json(only_log(tmp_path).with_suffix(".diagnosis.json"))
    assert diagnosis["run"]["slurm"]["SLURMD_NODENAME"] == "gpu-07"


def test_a_monitor_package_in_the_jobs_directory_does_not_shadow_ours(tmp_path: Path, monkeypatch):
    fake = tmp_path / "monitor"
    fake.mkdir()
    (fake / "__init__.py").write_text("raise ImportError('the user project shadowed monitor')\n")
    (tmp_path / "train.py").write_text("print('trained')\n")
    log = new_log_path(tmp_path / "logs")
    monkeypatch.chdir(tmp_path)
    job = Job.start([sys.executable, "train.py"], log, CaptureOptions(use_pty=False))
    assert job.wait(timeout=30) == 0
    assert log.read_bytes() == b"trained\n"


def test_without_a_terminal_the_ui_is_skipped(tmp_path: Path):
    command = [arg for arg in monitor_cmd(tmp_path, *python_job("print('batch')")) if arg != "--headless"]
    result = subprocess.run(command, capture_output=True, stdin=subprocess.DEVNULL, timeout=60)
    assert result.returncode == 0 and result.stdout == b"batch\n"
    assert b"not attached to a terminal" in result.stderr


def test_a_log_write_failure_never_blocks_or_kills_the_job(tmp_path: Path):
    # The recorder may only write 1000 bytes (RLIMIT_FSIZE: what a full disk looks like to it);
    # the job writes 200 kB through a pipe, which the limit does not touch. The job must finish
    # normally and the failure must be reported.
    import resource

    from monitor.runner.job import recorder_process
    log, state = tmp_path / "run.log", tmp_path / "run.job.json"
    job = "import sys\nfor i in range(2000):\n    sys.stdout.write('x' * 99 + '\\n')\n"
    command, env = recorder_process(["--log", str(log), "--state", str(state)], [sys.executable, "-c", job])
    recorder = subprocess.run(
        command, env=env,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (1000, 1000)),
        capture_output=True, timeout=60)
    assert recorder.returncode == 0, recorder.stderr.decode()
    result = read_json(state)
    assert result["exit_code"] == 0 and result["bytes"] == 200_000
    assert "File too large" in result["log_error"]
    assert log.stat().st_size == 1000


def test_a_100_mb_line_is_recorded_whole_and_diagnosed(tmp_path: Path):
    job = ("import sys\nsys.stdout.write('[rank0]: ' + 'x' * 100_000_000)\n"
           "sys.stdout.write('\\nRuntimeError: CUDA error: an illegal memory access was encountered\\n')\n"
           "sys.exit(1)\n")
    result = run_monitor(tmp_path, *python_job(job), timeout=120)
    assert result.returncode == 1
    log = only_log(tmp_path)
    tail = b"\nRuntimeError: CUDA error: an illegal memory access was encountered\n"
    assert log.stat().st_size == len(b"[rank0]: ") + 100_000_000 + len(tail)
    with log.open("rb") as f:
        f.seek(-len(tail), 2)
        assert f.read() == tail
    diagnosis = read_json(log.with_suffix(".diagnosis.json"))
    assert diagnosis["run"]["exit_code"] == 1 and diagnosis["root_cause"] is not None
