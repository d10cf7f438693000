"""Overhead of metrics sampling: one full sample (8 fake GPUs, host, a 50-process job tree),
and the CPU cost of sampling once a second as a percentage of one core.

Run: python benchmarks/metrics_overhead.py [--samples N] [--seconds S]

Baselines measured in the same run: host only (no NVML, no job), and host + job tree
without GPUs, so the cost of each part can be read off. The GPUs are the fake NVML of the
tests (pure Python): the real driver's calls are C and mostly cheaper, except
nvmlDeviceGetPcieThroughput, which blocks ~20 ms in the driver and is therefore read only
on every 5th sample.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from metrics_fake_nvml import GIB, FakeNvml, FakeProcess, make_gpus  # noqa: E402

from monitor.metrics.history import History  # noqa: E402
from monitor.metrics.samples_file import SamplesFile  # noqa: E402
from monitor.metrics.sampler import Sampler  # noqa: E402
from monitor.metrics.signals import SignalDetector  # noqa: E402

RANKS = 8
WORKERS_PER_RANK = 5  # DataLoader-like children: 1 launcher + 1 helper + 8 ranks + 40 workers = 50

# A launcher (no RANK) starting 8 ranks, each with 5 children of its own; prints the rank PIDs.
LAUNCHER = r"""
import os, subprocess, sys
ranks = []
for rank in range(int(sys.argv[1])):
    env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank))
    script = " ".join(["sleep 600 &"] * int(sys.argv[2])) + " wait"
    ranks.append(subprocess.Popen(["sh", "-c", script], env=env))
ranks.append(subprocess.Popen(["sleep", "600"]))  # a helper of the launcher, as torchrun has
print(" ".join(str(r.pid) for r in ranks[:-1]), flush=True)
import time; time.sleep(600)
"""


def start_tree() -> tuple[subprocess.Popen, list[int]]:
    launcher = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER, str(RANKS), str(WORKERS_PER_RANK)], stdout=subprocess.PIPE, text=True
    )
    ranks = [int(p) for p in launcher.stdout.readline().split()]
    time.sleep(0.5)  # let every rank start its children
    return launcher, ranks


def stop_tree(launcher: subprocess.Popen) -> None:
    import psutil

    tree = psutil.Process(launcher.pid).children(recursive=True)
    for process in tree:
        process.kill()
    launcher.kill()
    launcher.wait()
    psutil.wait_procs(tree, timeout=5)


def fake_nvml(rank_pids: list[int]) -> FakeNvml:
    gpus = make_gpus(8)
    for index, gpu in enumerate(gpus):
        gpu.processes = [FakeProcess(rank_pids[index], 30 * GIB)]
    return FakeNvml(gpus)


def measure(sampler: Sampler, samples: int, pipeline: bool) -> dict[str, float]:
    """Wall and CPU (this thread) seconds per sample; with ``pipeline`` also history, signals, recording."""
    history, detector = History(), SignalDetector()
    with tempfile.TemporaryDirectory() as tmp:
        recorder = SamplesFile(Path(tmp) / "metrics.jsonl") if pipeline else None
        sampler.sample()  # baselines (CPU percentages, rates), NVML init
        walls, cpus = [], []
        for _ in range(samples):
            wall, cpu = time.perf_counter(), time.thread_time()
            sample = sampler.sample()
            if pipeline:
                history.add(sample)
                detector.update(sample, history)
                recorder.write(sample)
            cpus.append(time.thread_time() - cpu)
            walls.append(time.perf_counter() - wall)
        if recorder:
            recorder.close()
    walls.sort()
    return {
        "wall_ms_median": 1000 * statistics.median(walls),
        "wall_ms_p95": 1000 * walls[int(0.95 * (len(walls) - 1))],
        "cpu_ms_mean": 1000 * statistics.fmean(cpus),
    }


def one_core_percent_at_1s(sampler: Sampler, seconds: float) -> float:
    """Sample once a second for ``seconds`` (polls never overlap) and measure this process's CPU."""
    history, detector = History(), SignalDetector()
    sampler.sample()
    cpu, wall = time.process_time(), time.monotonic()
    deadline = wall + seconds
    while time.monotonic() < deadline:
        started = time.monotonic()
        sample = sampler.sample()
        history.add(sample)
        detector.update(sample, history)
        time.sleep(max(0.0, 1.0 - (time.monotonic() - started)))
    return 100 * (time.process_time() - cpu) / (time.monotonic() - wall)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args()

    launcher, ranks = start_tree()
    try:
        import psutil

        tree_size = 1 + len(psutil.Process(launcher.pid).children(recursive=True))
        print(f"machine: {os.cpu_count()} cores, python {sys.version.split()[0]}; job tree: {tree_size} processes")
        dirs = [tempfile.gettempdir(), str(Path.cwd())]
        cases = [
            ("host only (baseline)", lambda: Sampler(nvml=FakeNvml([]), watch_dirs=dirs)),
            ("host + 50-process job", lambda: Sampler(job_pids=[launcher.pid], nvml=FakeNvml([]), watch_dirs=dirs)),
            ("8 GPUs + host + job", lambda: Sampler(job_pids=[launcher.pid], nvml=fake_nvml(ranks), watch_dirs=dirs)),
        ]
        print(f"{'case':<44} {'wall median':>12} {'wall p95':>10} {'CPU mean':>10}")
        for name, make in cases:
            for pipeline in (False, True):
                sampler = make()
                result = measure(sampler, args.samples, pipeline)
                sampler.close()
                label = name + (" + history/signals/record" if pipeline else "")
                print(f"{label:<44} {result['wall_ms_median']:>9.2f} ms {result['wall_ms_p95']:>7.2f} ms "
                      f"{result['cpu_ms_mean']:>7.2f} ms")
        sampler = Sampler(job_pids=[launcher.pid], nvml=fake_nvml(ranks), watch_dirs=dirs)
        percent = one_core_percent_at_1s(sampler, args.seconds)
        sampler.close()
        print(f"CPU of 1 s sampling (8 GPUs + host + job + history + signals), measured over "
              f"{args.seconds:.0f} s: {percent:.2f}% of one core")
    finally:
        stop_tree(launcher)


if __name__ == "__main__":
    main()
