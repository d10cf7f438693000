"""The job's process tree from real processes, ranks from their environment, GPU memory mapped."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest
from metrics_fake_nvml import GIB, FakeNvml, FakeProcess, make_gpus

from monitor.metrics.job import DISCOVER_EVERY, ENV_KEPT, MPI_RANK_VARIABLES, JobReader
from monitor.metrics.sampler import Sampler

# A launcher like torchrun's agent: no RANK itself, starts workers with RANK/LOCAL_RANK set,
# prints their PIDs, and waits.
LAUNCHER = r"""
import os, subprocess, sys, time
workers = []
for rank in range(int(sys.argv[1])):
    env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=sys.argv[1],
               PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True")
    # Each worker starts a helper of its own (like a DataLoader worker), inheriting RANK.
    helper = "import subprocess, sys, time; subprocess.Popen(['sleep', '60']); time.sleep(60)"
    workers.append(subprocess.Popen([sys.executable, "-c", helper], env=env))
print(" ".join(str(w.pid) for w in workers), flush=True)
time.sleep(60)
"""


@pytest.fixture
def job():
    yield from _launched(LAUNCHER)


def _launched(script: str, **extra: str):
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "LOCAL_RANK", *MPI_RANK_VARIABLES, *ENV_KEPT)}
    launcher = subprocess.Popen(
        [sys.executable, "-c", script, "2"], stdout=subprocess.PIPE, text=True, env={**env, **extra}
    )
    workers = [int(p) for p in launcher.stdout.readline().split()]
    helpers: list[int] = []
    deadline = time.monotonic() + 10
    while len(helpers) < len(workers) and time.monotonic() < deadline:
        time.sleep(0.02)
        helpers = [c.pid for w in workers for c in psutil.Process(w).children()]
    yield launcher, workers
    for pid in workers + helpers:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    launcher.kill()
    launcher.wait()
    for pid in workers:
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass


def by_pid(sample):
    return {p.pid: p for p in sample.processes}


def test_tree_with_ranks_from_environ(job):
    launcher, workers = job
    reader = JobReader([launcher.pid])
    first = reader.read()
    rows = by_pid(first)
    assert first.alive and first.root_pids == [launcher.pid]
    helpers = set(rows) - {launcher.pid, *workers}
    assert len(helpers) == 2 and all(rows[h].ppid in workers for h in helpers)
    assert sorted(rows[h].rank for h in helpers) == [0, 1] and all(rows[h].worker for h in helpers)
    assert not any(rows[w].worker for w in workers)
    assert rows[launcher.pid].rank is None
    assert [(rows[w].rank, rows[w].local_rank) for w in workers] == [(0, 0), (1, 1)]
    assert rows[workers[0]].env == {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True", "WORLD_SIZE": "2"}
    assert rows[workers[0]].ppid == launcher.pid
    assert rows[workers[0]].rss_bytes > 1_000_000
    assert rows[workers[0]].cpu_percent is None  # the first read is only a baseline
    time.sleep(0.05)
    second = by_pid(reader.read())
    assert second[workers[1]].cpu_percent is not None and second[workers[1]].cpu_percent >= 0


def test_ranks_mpirun_started_are_read_from_its_variable():
    # mpirun gives each process OMPI_COMM_WORLD_RANK, no RANK; a rank's helper inherits it.
    for launcher, workers in _launched(LAUNCHER.replace("RANK=str(rank), LOCAL_RANK=str(rank)",
                                                        "OMPI_COMM_WORLD_RANK=str(rank)")):
        rows = by_pid(JobReader([launcher.pid]).read())
        assert [(rows[w].rank, rows[w].worker) for w in workers] == [(0, False), (1, False)]
        assert sorted(p.rank for p in rows.values() if p.worker) == [0, 1]


def test_a_launcher_mpirun_started_is_no_rank_of_the_job():
    # torchrun under mpirun, one a node: its MPI rank (0) is its node's; its workers carry RANK,
    # and rank 0's process is not taken for a helper of the launcher.
    for launcher, workers in _launched(LAUNCHER, OMPI_COMM_WORLD_RANK="0"):
        rows = by_pid(JobReader([launcher.pid]).read())
        assert rows[launcher.pid].rank is None
        assert [(rows[w].rank, rows[w].worker) for w in workers] == [(0, False), (1, False)]


def test_dead_worker_leaves_and_orphans_stay(job):
    launcher, workers = job
    reader = JobReader(lambda: [launcher.pid])
    reader.read()
    os.kill(workers[0], signal.SIGKILL)
    launcher.kill()  # the launcher dies; its surviving worker is re-parented but still the job
    launcher.wait()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        rows = by_pid(reader.read())
        if workers[0] not in rows and launcher.pid not in rows:
            break
        time.sleep(0.05)
    # The surviving rank and the orphaned helpers (still running, still the job's) remain.
    assert workers[0] not in rows and launcher.pid not in rows and rows[workers[1]].rank == 1
    assert [rows[pid].worker for pid in rows if rows[pid].ppid == workers[1]] == [True]
    assert {rows[pid].rank for pid in rows} == {0, 1}  # the dead rank's orphaned helper is kept


def test_vanished_root_is_not_alive():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    sample = JobReader([proc.pid]).read()
    assert sample.alive is False and sample.processes == []


def test_gpu_memory_mapped_to_ranks_and_vanished_pid(job):
    launcher, workers = job
    gpus = make_gpus(2)
    vanished = 4_000_000  # above any pid_max: a PID that exists nowhere
    gpus[0].processes = [FakeProcess(workers[0], 30 * GIB), FakeProcess(vanished, 1 * GIB)]
    gpus[1].processes = [FakeProcess(workers[1], 20 * GIB)]
    sampler = Sampler(job_pids=[launcher.pid], nvml=FakeNvml(gpus), cuda_visible_devices=None)
    sample = sampler.sample()
    rows = by_pid(sample.job)
    assert sample.job.pid_mapping == "mapped"
    assert (rows[workers[0]].gpu_memory_bytes, rows[workers[0]].gpu_indices) == (30 * GIB, [0])
    assert (rows[workers[1]].gpu_memory_bytes, rows[workers[1]].gpu_indices) == (20 * GIB, [1])
    assert rows[launcher.pid].gpu_memory_bytes is None
    assert sample.job.gpu_indices == [0, 1]
    procs = {p.pid: p for p in sample.gpus[0].processes}
    assert procs[workers[0]].rank == 0 and procs[workers[0]].visible
    assert procs[vanished].visible is False and procs[vanished].rank is None


def test_container_pids_are_said_plainly(job):
    launcher, _ = job
    gpus = make_gpus(1)
    gpus[0].processes = [FakeProcess(4_000_001, 30 * GIB), FakeProcess(4_000_002, 30 * GIB)]
    sample = Sampler(job_pids=[launcher.pid], nvml=FakeNvml(gpus), cuda_visible_devices=None).sample()
    assert sample.job.pid_mapping == "unmapped"
    assert "4000001, 4000002" in sample.job.pid_mapping_message
    assert "--pid=host" in sample.job.pid_mapping_message
    assert all(p.gpu_memory_bytes is None for p in sample.job.processes)


def test_children_started_later_are_found_within_a_few_reads():
    spawner = "import subprocess, sys\nsys.stdin.readline()\nsubprocess.Popen(['sleep', '60'])\nprint('started', flush=True)\nsys.stdin.readline()"
    root = subprocess.Popen([sys.executable, "-c", spawner], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        reader = JobReader([root.pid])
        assert [p.pid for p in reader.read().processes] == [root.pid]
        root.stdin.write("go\n")
        root.stdin.flush()
        assert root.stdout.readline().strip() == "started"
        seen = [len(reader.read().processes) for _ in range(DISCOVER_EVERY)]
        assert seen[-1] == 2  # found by the periodic discovery, not later
        child = next(p for p in reader.read().processes if p.pid != root.pid)
        assert child.ppid == root.pid and child.name == "sleep"
        os.kill(child.pid, signal.SIGKILL)
    finally:
        root.kill()
        root.wait()


# A launcher's child between fork and exec: /proc/PID/environ is still the launcher's (no RANK)
# until the child execs with its own.
FORK_THEN_EXEC = r"""
import os, sys, time
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    os.close(w)
    os.read(r, 1)
    os.execve(sys.executable, [sys.executable, "-c", "import time; time.sleep(60)"],
              dict(os.environ, RANK="3", LOCAL_RANK="3"))
os.close(r)
print(pid, flush=True)
sys.stdin.readline()
os.write(w, b"x")
time.sleep(60)
"""


def test_a_child_read_between_fork_and_exec_gets_its_rank_once_it_execs():
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "LOCAL_RANK")}
    launcher = subprocess.Popen([sys.executable, "-c", FORK_THEN_EXEC], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True, env=env)
    child = None
    try:
        child = int(launcher.stdout.readline())
        reader = JobReader([launcher.pid])
        assert by_pid(reader.read())[child].rank is None  # forked, not yet exec'd
        launcher.stdin.write("go\n")
        launcher.stdin.flush()
        deadline = time.monotonic() + 10
        while "import time; time.sleep(60)" not in psutil.Process(child).cmdline() and time.monotonic() < deadline:
            time.sleep(0.01)
        row = by_pid(reader.read())[child]
        assert (row.rank, row.local_rank) == (3, 3)
    finally:
        launcher.kill()
        launcher.wait()
        if child is not None:
            try:
                os.kill(child, signal.SIGKILL)
            except ProcessLookupError:
                pass
