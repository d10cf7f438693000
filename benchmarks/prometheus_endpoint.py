"""Benchmark: the Prometheus endpoint of `monitor run --metrics-port` with 8 (fake) GPUs and 64 ranks.

    python benchmarks/prometheus_endpoint.py [--seconds 30] [--ranks 64] [--gpus 8]

A real `monitor run --headless --metrics-port P` (tests/jobs/fake_gpu_monitor.py: the fake
NVML of the tests, each rank on the GPU of its LOCAL_RANK) launches a job of N ranks (plain
Python processes with RANK/LOCAL_RANK, each printing a step and a loss line a second). After a
warm-up, the endpoint is scraped once a second for --seconds; measured: the time of each scrape
(HTTP GET /metrics, whole body), its size and series, and the monitor's CPU (its own process,
user+system, psutil). Baseline in the same run: the same job under `monitor run --headless`
without an endpoint.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import psutil

HERE = Path(__file__).resolve().parent
WRAPPER = HERE.parent / "tests" / "jobs" / "fake_gpu_monitor.py"
JOB = """
import os, subprocess, sys, time
ranks, seconds = int(sys.argv[1]), float(sys.argv[2])
if len(sys.argv) == 3:
    per_node = int(os.environ["FAKE_GPUS"])
    procs = [subprocess.Popen([sys.executable, __file__, str(ranks), str(seconds), str(r)],
                              env={**os.environ, "RANK": str(r), "LOCAL_RANK": str(r % per_node)}) for r in range(ranks)]
    sys.exit(max(p.wait() for p in procs))
rank, start, step = int(sys.argv[3]), time.monotonic(), 0
while time.monotonic() - start < seconds:
    step += 1
    print(f"[rank{rank}]: step {step} loss {1.0 / step:.4f}", flush=True)
    time.sleep(1.0)
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run(args, endpoint: bool) -> dict:
    work = Path(tempfile.mkdtemp(prefix="monitor-prom-bench-"))
    job = work / "job.py"
    job.write_text(JOB)
    port = free_port()
    extra = ["--metrics-port", str(port)] if endpoint else []
    warmup = 15.0
    monitor = subprocess.Popen(
        [sys.executable, str(WRAPPER), "run", "--headless", "--no-preflight", "--log-dir", str(work / "logs"), *extra,
         "--", sys.executable, str(job), str(args.ranks), str(warmup + args.seconds + 5)],
        env={**os.environ, "FAKE_GPUS": str(args.gpus)}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    process = psutil.Process(monitor.pid)
    time.sleep(warmup)
    cpu0, t0 = process.cpu_times(), time.monotonic()
    scrapes, size, series = [], 0, 0
    while time.monotonic() - t0 < args.seconds:
        started = time.monotonic()
        if endpoint:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
                body = response.read()
            scrapes.append(time.monotonic() - started)
            size = len(body)
            series = sum(1 for line in body.splitlines() if line and not line.startswith(b"#"))
        time.sleep(max(0.0, 1.0 - (time.monotonic() - started)))
    cpu1, t1 = process.cpu_times(), time.monotonic()
    monitor.terminate()
    monitor.wait(60)
    cpu = (cpu1.user + cpu1.system - cpu0.user - cpu0.system) / (t1 - t0)
    return {"cpu": cpu, "scrapes": scrapes, "size": size, "series": series}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--ranks", type=int, default=64)
    parser.add_argument("--gpus", type=int, default=8)
    args = parser.parse_args()
    base = run(args, endpoint=False)
    served = run(args, endpoint=True)
    scrapes = sorted(served["scrapes"])
    print(f"{args.ranks} ranks, {args.gpus} fake GPUs, {args.seconds:g} s, a scrape a second")
    print(f"monitor CPU without endpoint: {base['cpu']:.1%} of a core")
    print(f"monitor CPU with endpoint:    {served['cpu']:.1%} of a core")
    print(f"scrape: median {statistics.median(scrapes) * 1000:.1f} ms, p95 {scrapes[int(len(scrapes) * 0.95) - 1] * 1000:.1f} ms, "
          f"max {scrapes[-1] * 1000:.1f} ms; {served['size']:,} bytes, {served['series']} series")


if __name__ == "__main__":
    main()
