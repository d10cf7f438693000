"""What looking inside a job costs: one capture of every rank's stack (py-spy) of an 8-rank job,
and the job's step time with and without a capture every 10 s; then the time from the stall to
the named rank under `monitor run`.

    python benchmarks/hang_stacks.py [--ranks 8] [--seconds 40] [--every 10]

The job: torchrun, gloo on CPU, each step three 256x256 matmuls and an all_reduce (timed), then a
small all_reduce to agree on stopping; rank 0 records every step's time. Baseline: the same job in the same run with no capture.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from monitor.runner.processes import descendants
from monitor.stacks.capture import take

JOB = """
import json, sys, time, torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.randn(256, 256)
x = torch.ones(1000)
dist.all_reduce(x)
times = []
end = time.monotonic() + float(sys.argv[1])
done = torch.zeros(1)
while not done.item():
    start = time.perf_counter()
    for _ in range(3):
        t = torch.tanh(t @ t.T / 256)
    dist.all_reduce(x)
    times.append(time.perf_counter() - start)
    # Every rank stops after the same step: the one where any rank's time is up.
    done = torch.tensor([float(time.monotonic() >= end)])
    dist.all_reduce(done, op=dist.ReduceOp.MAX)
if dist.get_rank() == 0:
    print("STEPS " + json.dumps(times), flush=True)
dist.destroy_process_group()
"""


def run_job(ranks: int, seconds: float, every: float | None) -> tuple[list[float], list]:
    """Step times of rank 0, and the captures taken meanwhile (every ``every`` s)."""
    with tempfile.TemporaryDirectory() as folder:
        script = Path(folder) / "job.py"
        script.write_text(JOB)
        env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
        launcher = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--standalone",
                                     "--nproc-per-node", str(ranks), str(script), str(seconds)],
                                    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
        captures = []
        stop = threading.Event()

        def dump_every() -> None:
            while not stop.wait(every):
                pids = [launcher.pid, *descendants(launcher.pid)]
                captures.append(take(pids, "benchmark"))

        dumper = threading.Thread(target=dump_every, daemon=True) if every else None
        if dumper:
            time.sleep(5)  # the ranks import torch and join the group first
            dumper.start()
        out, _ = launcher.communicate(timeout=seconds + 120)
        stop.set()
        if dumper:
            dumper.join()
    match = re.search(rb"^STEPS (.*)$", out, re.M)
    return json.loads(match.group(1)), captures


def summary(times: list[float]) -> str:
    ordered = sorted(times)
    p99 = ordered[int(len(ordered) * 0.99) - 1]
    return (f"{len(times)} steps, median {statistics.median(times) * 1e3:.2f} ms, mean "
            f"{statistics.mean(times) * 1e3:.2f} ms, p99 {p99 * 1e3:.2f} ms, max {max(times) * 1e3:.1f} ms")


def stall_to_named(ranks: int) -> tuple[float, float]:
    """Seconds from `monitor run`'s possible-hang line to its stacks line, and the capture time."""
    with tempfile.TemporaryDirectory() as folder:
        command = [sys.executable, "-m", "monitor", "run", "--headless", "--no-preflight", "--log-dir", folder,
                   "--stall-after", "10", "--", sys.executable, "-m", "torch.distributed.run", "--standalone",
                   "--nproc-per-node", str(ranks), "-m", "monitor.demo.train", "--scenario", "hang",
                   "--rank-to-fail", "2", "--timeout", "60"]
        monitor = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        stall = named = None
        for raw in monitor.stderr:
            now = time.monotonic()
            if b"possible hang" in raw and stall is None:
                stall = now
            if b"rank 2 is in load_batch" in raw:
                named = now
                break
        monitor.terminate()
        monitor.communicate(timeout=90)
        stacks = json.loads(next(Path(folder).glob("*.stacks.json")).read_text())["captures"][0]
        return named - stall, stacks["took_s"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=40)
    parser.add_argument("--every", type=float, default=10)
    args = parser.parse_args()
    base, _ = run_job(args.ranks, args.seconds, None)
    probed, captures = run_job(args.ranks, args.seconds, args.every)
    print(f"{args.ranks} ranks, gloo on CPU, {os.cpu_count()} cores")
    print(f"  no capture (baseline):          {summary(base)}")
    print(f"  a capture every {args.every:g} s:          {summary(probed)}")
    slowdown = statistics.mean(probed) / statistics.mean(base) - 1
    print(f"  mean step time change: {slowdown * 100:+.1f}%")
    for capture in captures:
        per_process = [p.took_s for p in capture.processes]
        print(f"  capture of {len(capture.ranked())} ranks: {capture.took_s * 1e3:.0f} ms in all; py-spy per process "
              f"median {statistics.median(per_process) * 1e3:.0f} ms, max {max(per_process) * 1e3:.0f} ms")
    seconds, took = stall_to_named(min(args.ranks, 4))
    print(f"  monitor run, 4 ranks: the stuck rank named {seconds:.2f} s after the possible-hang line "
          f"(the capture took {took * 1e3:.0f} ms)")


if __name__ == "__main__":
    main()
