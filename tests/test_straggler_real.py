"""Straggler scores on real torchrun jobs (gloo, CPU, 2 ranks) under `monitor run --headless`:
the slow rank named within 60 s of the job's first step, on the finding line, the Prometheus gauge,
the end report and its JSON; a balanced job never named.

- rank 1 does twice the work of rank 0 each step (tests/jobs/straggler_job.py: a real straggler);
- rank 1 held back from outside: stopped and continued by this test on a duty cycle (what a CPU
  quota does to a process), the job's code the same on every rank;
- the same job with every rank doing the same work: nobody named, and the end says so.
"""

from __future__ import annotations

import os
import re
import signal
import sys
import threading
import time
import urllib.request
from pathlib import Path

import psutil
import pytest

pytest.importorskip("torch")

from tests.runner_helpers import MonitorRun, free_port, only_log, read_json  # noqa: E402
from tests.test_stacks import needs_ptrace  # noqa: E402

JOB = str(Path(__file__).parent / "jobs" / "straggler_job.py")
TORCHRUN = (sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--rdzv-backend", "c10d",
            "--rdzv-endpoint", "localhost:0", JOB)
VERDICT_S = 60


class Monitored(MonitorRun):
    """`monitor run --headless` of the straggler job, with its Prometheus port."""

    def __init__(self, log_dir: Path, extra: tuple[str, ...] = (), **job_env: str) -> None:
        self.port = free_port()
        super().__init__(log_dir, *TORCHRUN, extra=("--metrics-port", str(self.port), *extra), env={**os.environ, **job_env})

    def scrape(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as response:
            return response.read().decode()

    def rank_pid(self, rank: int, timeout: float = 60) -> int:
        """The pid of the job's process with RANK=``rank``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for process in psutil.Process(self.process.pid).children(recursive=True):
                try:
                    if process.environ().get("RANK") == str(rank) and "straggler_job" in " ".join(process.cmdline()):
                        return process.pid
                except psutil.Error:
                    continue
            time.sleep(0.5)
        raise AssertionError(f"no process of rank {rank}")


def wait_fractions(metrics: str) -> dict[int, float]:
    return {int(rank): float(value) for rank, value in
            re.findall(r'^monitor_rank_wait_fraction\{[^}]*rank="(\d+)"\} ([0-9.e+-]+)$', metrics, re.M)}


@needs_ptrace
def test_a_rank_doing_twice_the_work_is_named_within_a_minute(tmp_path):
    run = Monitored(tmp_path, SLOW_RANK="1", EXTRA="1.0", STEPS="3000")
    try:
        first_step, _ = run.wait_line(r"^\[rank1\]: step \d+ ", timeout=90, job=True)
        at, line = run.wait_line(r"WARNING +rank 1 is slow: rank 0 waits for it \d+ % of each step", timeout=VERDICT_S + 30)
        waits = wait_fractions(run.scrape())
    finally:
        report = run.stop()
    # From the first step passed on (the terminal copy may skip lines when behind; the log never
    # does): torch's import and the rendezvous before it take 5-20 s on a busy VM.
    assert at - first_step <= VERDICT_S, f"named {at - first_step:.0f} s after the first step"
    assert waits[1] < waits[0] - 0.2, waits
    assert "is slow" not in "\n".join(l for _, l in run.lines if "rank 0 is slow" in l)
    assert re.search(r"straggler scores \(in a collective, last \d+ looks over \d+ s\): rank 0 \d+ %, rank 1 \d+ %; "
                     r"rank 1 is slow", report)
    diagnosis = read_json(only_log(tmp_path).with_suffix(".diagnosis.json"))
    assert any(f["rule"] == "straggler" and f["rank"] == 1 for f in diagnosis["findings"])
    fractions = diagnosis["run"]["rank_wait_fraction"]
    assert fractions["1"] < fractions["0"]


@needs_ptrace
def test_a_rank_held_back_from_outside_is_named(tmp_path):
    """Rank 1 runs the same code, but is stopped 60 ms of every 100 (a CPU quota's effect)."""
    run = Monitored(tmp_path, STEPS="3000")
    stop = threading.Event()

    def duty_cycle(pid: int) -> None:
        while not stop.is_set():
            try:
                os.kill(pid, signal.SIGSTOP)
                time.sleep(0.06)
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                return
            time.sleep(0.04)

    try:
        pid = run.rank_pid(1)
        cycler = threading.Thread(target=duty_cycle, args=(pid,), daemon=True)
        cycler.start()
        first_step, _ = run.wait_line(r"^\[rank1\]: step \d+ ", timeout=90, job=True)
        at, _ = run.wait_line(r"WARNING +rank 1 is slow: rank 0 waits for it", timeout=VERDICT_S + 30)
    finally:
        stop.set()
        os.kill(pid, signal.SIGCONT)
        run.stop()
    # From the first step passed on (the terminal copy may skip lines when behind; the log never
    # does): torch's import and the rendezvous before it take 5-20 s on a busy VM.
    assert at - first_step <= VERDICT_S, f"named {at - first_step:.0f} s after the first step"


@needs_ptrace
def test_a_balanced_job_is_never_named(tmp_path):
    run = Monitored(tmp_path, STEPS="900")  # about a minute of steps
    code = run.process.wait(timeout=180)
    run._reader.join(10)
    report = run.text()
    assert code == 0, report
    assert "is slow" not in report.replace("no rank is slower", "")
    assert re.search(r"straggler scores \(in a collective, last \d+ looks over \d+ s\): rank 0 \d+ %, rank 1 \d+ %; "
                     r"no rank is slower than the others", report), report
    diagnosis = read_json(only_log(tmp_path).with_suffix(".diagnosis.json"))
    assert not any(f["category"] == "straggler" for f in diagnosis["findings"])
