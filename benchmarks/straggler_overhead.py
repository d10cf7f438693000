"""What the straggler scores cost the job, and how soon they name a slow rank.

    python benchmarks/straggler_overhead.py [--ranks 2] [--phase 20] [--phases 4] [--interval 1]

1. Overhead: one balanced job (tests/jobs/straggler_job.py under torchrun, gloo on CPU), its
   steps timed by the ranks themselves; the StragglerWatch looks at it every ``--interval`` s
   during every other phase of ``--phase`` s (off, on, off, on...): steps/s with and without
   sampling in the same run, and the CPU seconds py-spy took per look.
2. Time to verdict: the same job with rank 1 doing twice the work, sampled from its start: seconds
   from the launch to the rank named (and to its first step, for the part that is torch's start).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil

from monitor.session.straggler_watch import StragglerWatch

JOB = str(Path(__file__).resolve().parents[1] / "tests" / "jobs" / "straggler_job.py")
STEP = re.compile(r"\[rank0\]: step (\d+) ")


class Job:
    def __init__(self, ranks: int, **env: str) -> None:
        self.started = time.monotonic()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(ranks), "--rdzv-backend", "c10d",
             "--rdzv-endpoint", "localhost:0", JOB], env={**os.environ, **env}, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL)
        self.steps: list[float] = []  # when rank 0 printed each step
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for raw in self.process.stdout:
            if STEP.match(raw.decode("utf-8", "replace")):
                self.steps.append(time.monotonic())

    def pids(self) -> list[int]:
        try:
            return [self.process.pid] + [c.pid for c in psutil.Process(self.process.pid).children(recursive=True)]
        except psutil.Error:
            return []

    def rate(self, start: float, end: float) -> float:
        return sum(start <= t < end for t in self.steps) / (end - start)

    def end(self) -> None:
        self.process.terminate()
        self.process.wait(30)


def children_cpu() -> float:
    times = os.times()
    return times.children_user + times.children_system


def overhead(args) -> None:
    job = Job(args.ranks, STEPS="1000000")
    while not job.steps:
        time.sleep(0.2)
    time.sleep(5)  # past the first steps' warm-up
    watch = StragglerWatch(job.pids, lambda findings: None, interval=args.interval)
    off, on, cpu = [], [], []
    for phase in range(args.phases):
        sampling = phase % 2 == 1
        start = time.monotonic()
        looks_before, cpu_before = watch.looks, children_cpu()
        while time.monotonic() - start < args.phase:
            if sampling:
                watch.look()
                time.sleep(args.interval)
            else:
                time.sleep(0.2)
        end = time.monotonic()
        (on if sampling else off).append(job.rate(start, end))
        if sampling:
            cpu.append((children_cpu() - cpu_before) / max(1, watch.looks - looks_before))
    job.end()
    base, sampled = statistics.mean(off), statistics.mean(on)
    print(f"overhead ({args.ranks} ranks, a look every {args.interval:g} s, {args.phases} phases of {args.phase:g} s):")
    print(f"  steps/s without sampling {', '.join(f'{r:.2f}' for r in off)} (mean {base:.2f})")
    print(f"  steps/s with sampling    {', '.join(f'{r:.2f}' for r in on)} (mean {sampled:.2f})")
    print(f"  step time {1000 / base:.1f} ms -> {1000 / sampled:.1f} ms: {100 * (base - sampled) / base:+.1f} % slower")
    print(f"  a look: {1000 * watch.look_s / watch.looks:.0f} ms wall, {1000 * statistics.mean(cpu):.0f} ms of py-spy CPU "
          f"for {args.ranks} ranks")


def verdict(args) -> None:
    job = Job(args.ranks, STEPS="1000000", SLOW_RANK="1", EXTRA="1.0")
    named: list = []
    watch = StragglerWatch(job.pids, named.extend, interval=args.interval)
    first_step = None
    while not named and time.monotonic() - job.started < 180:
        watch.look()
        if first_step is None and job.steps:
            first_step = job.steps[0] - job.started
        time.sleep(args.interval)
    at = time.monotonic() - job.started
    job.end()
    print(f"time to verdict ({args.ranks} ranks, rank 1 with twice the work, a look every {args.interval:g} s):")
    if named:
        print(f"  named after {at:.1f} s from the launch ({first_step or 0:.1f} s to the first step): {named[0].title}")
    else:
        print("  not named within 180 s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--phase", type=float, default=20.0)
    parser.add_argument("--phases", type=int, default=4)
    parser.add_argument("--interval", type=float, default=1.0)
    args = parser.parse_args()
    overhead(args)
    verdict(args)


if __name__ == "__main__":
    main()
