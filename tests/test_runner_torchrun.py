"""`monitor run` around real torchrun jobs (the demo job: tiny gloo DDP on CPU, 2 ranks)."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import psutil

from tests.runner_helpers import (
    alive, job_state, monitor_cmd, only_log, read_json, run_monitor, wait_for,
)

TORCHRUN = (sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2")
# A generous collective timeout: on a loaded machine one rank may import torch much later than
# the other, and only the hang test is about timeouts.
DEMO = ("-m", "monitor.demo.train", "--timeout", "120")


def test_success(tmp_path: Path):
    result = run_monitor(tmp_path, *TORCHRUN, *DEMO, "--scenario", "ok", "--ckpt-dir", str(tmp_path / "ck"),
                         extra=("--watch-ckpt", str(tmp_path / "ck")), timeout=120)
    assert result.returncode == 0, result.stderr.decode()[-3000:]
    log = only_log(tmp_path)
    assert b"[rank0] done" in log.read_bytes() and b"[rank1] done" in log.read_bytes()
    assert result.stdout == log.read_bytes()
    diagnosis = read_json(log.with_suffix(".diagnosis.json"))
    assert diagnosis["root_cause"] is None
    assert not [f for f in diagnosis["findings"] if f["severity"] == "error"]
    assert not list(tmp_path.glob("*.fr"))  # no dump was written: no folder left behind


def test_hang_ends_in_a_timeout_and_the_exit_code_is_kept(tmp_path: Path):
    result = run_monitor(tmp_path, *TORCHRUN, "-m", "monitor.demo.train", "--scenario", "hang",
                         "--timeout", "3", timeout=120)
    assert result.returncode != 0
    log = only_log(tmp_path)
    assert b"loading the batch will block" in log.read_bytes()
    diagnosis = read_json(log.with_suffix(".diagnosis.json"))
    assert diagnosis["run"]["exit_code"] == result.returncode
    assert diagnosis["root_cause"] is not None


def test_sigterm_stops_every_rank_torchrun_started(tmp_path: Path):
    monitor = subprocess.Popen(
        monitor_cmd(tmp_path, *TORCHRUN, *DEMO, "--steps", "5000", "--sleep-per-step", "0.05",
                    extra=("--grace", "3")),
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wait_for(lambda: list(tmp_path.glob("run-*.log")) and b"step 3 loss" in only_log(tmp_path).read_bytes(),
             timeout=60)
    recorder = psutil.Process(job_state(tmp_path)["recorder_pid"])
    tree = [p.pid for p in recorder.children(recursive=True)]
    assert len(tree) >= 3  # torchrun and its two ranks
    monitor.send_signal(signal.SIGTERM)
    _, err = monitor.communicate(timeout=60)
    assert monitor.returncode != 0, err.decode()[-2000:]
    wait_for(lambda: not any(alive(pid) for pid in tree), timeout=10)
    assert job_state(tmp_path)["stop_signal"] == "SIGTERM"


def test_crash_on_one_rank_is_explained_from_the_per_rank_files(tmp_path: Path):
    rank_logs = tmp_path / "ranklogs"
    result = run_monitor(tmp_path / "logs", *TORCHRUN, "--log-dir", str(rank_logs), "--redirects", "3",
                         *DEMO, "--scenario", "crash", timeout=120)
    assert result.returncode == 1
    diagnosis = read_json(only_log(tmp_path / "logs").with_suffix(".diagnosis.json"))
    assert diagnosis["run"]["exit_code"] == 1 and diagnosis["run"]["launcher"] == "torchrun"
    root = diagnosis["root_cause"]
    assert root is not None and root["rank"] == 1, [(f["rank"], f["title"], f["file"], f["line"]) for f in diagnosis["findings"]]
    extra = [Path(p) for p in diagnosis["run"]["extra_logs"]]
    assert {p.name for p in extra} >= {"stdout.log", "stderr.log"}
    assert all(rank_logs in p.parents for p in extra)
    assert set(map(str, extra)) <= set(diagnosis["files"])
    # The ValueError went to rank 1's own stderr file, and the diagnosis found it there.
    assert "ValueError" in diagnosis["root_cause"]["title"] + "".join(diagnosis["root_cause"]["evidence"])
