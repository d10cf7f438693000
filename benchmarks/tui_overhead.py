"""CPU of the monitor's screen while it follows a busy job.

    python benchmarks/tui_overhead.py [--seconds 20] [--rate 1000] [--files 8]

A separate writer process appends realistic training lines (rank prefixes, progress, HF
dicts, now and then a warning) to ``--files`` per-rank files at ``--rate`` lines/s in total.
Measured in this process, over the same window, as a share of one core:

1. baseline: the headless pipeline alone (JobSession.step in a loop + Sampler at 1 Hz);
2. the app: ``watch_app`` (the same JobSession and Sampler in the app's thread workers,
   the log view, panels and findings) under ``App.run_test`` (headless: the screen is
   composed and rendered, but not written to a terminal).

Both follow the same growing files; the writer's own CPU is not counted.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

WRITER = textwrap.dedent("""
    import sys, time, random
    folder, files, rate, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
    handles = [open(f"{folder}/rank{r}.log", "a", buffering=1) for r in range(files)]
    random.seed(0)
    start = time.monotonic(); n = 0
    while time.monotonic() - start < seconds:
        due = int((time.monotonic() - start) * rate)
        while n < due:
            r = n % files; step = n // files
            kind = n % 50
            if kind == 7:
                line = f"[rank{r}]:[W socket.cpp:697] [c10d] The client socket has timed out after 60s while trying to connect"
            elif kind % 5 == 0:
                line = f"[rank{r}]: {{'loss': {2.5 - step * 1e-4:.4f}, 'grad_norm': {random.random():.3f}, 'learning_rate': 0.0001, 'epoch': {step / 1e4:.3f}}}"
            else:
                line = f"[rank{r}]: step {step}/100000 loss {2.5 - step * 1e-4:.4f} lr 1.0e-04 {random.randint(900, 1100)} tokens/s"
            handles[r].write(line + "\\n")
            n += 1
        time.sleep(0.005)
""")


def cpu() -> float:
    times = os.times()
    return times.user + times.system


def start_writer(folder: Path, files: int, rate: float, seconds: float) -> subprocess.Popen:
    for rank in range(files):
        (folder / f"rank{rank}.log").touch()
    return subprocess.Popen([sys.executable, "-c", WRITER, str(folder), str(files), str(rate), str(seconds)])


def baseline(folder: Path, seconds: float, catalogue) -> tuple[float, int]:
    from monitor.session.job_session import JobSession
    from monitor.metrics.sampler import Sampler

    session = JobSession([folder], catalogue)
    sampler = Sampler(watch_dirs=[str(folder)])
    lines = 0
    next_sample = 0.0
    start_wall, start_cpu = time.monotonic(), cpu()
    while time.monotonic() - start_wall < seconds:
        lines += len(session.step(timeout=0.2).lines)
        if time.monotonic() >= next_sample:
            sampler.sample()
            next_sample = time.monotonic() + 1.0
    used = cpu() - start_cpu
    wall = time.monotonic() - start_wall
    session.close()
    sampler.close()
    return used / wall, lines


async def with_app(folder: Path, seconds: float, catalogue) -> tuple[float, int]:
    from monitor.tui import watch_app

    app = watch_app([folder], catalogue=catalogue)
    async with app.run_test(size=(160, 45)) as pilot:
        await pilot.pause(1.0)  # let startup (compose, first sample) pass
        start_wall, start_cpu, first = time.monotonic(), cpu(), len(app.store)
        await asyncio.sleep(seconds)
        used = cpu() - start_cpu
        wall = time.monotonic() - start_wall
        lines = len(app.store) - first
    app.metrics_feed.close()
    return used / wall, lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--rate", type=float, default=1000, help="lines per second, all files together")
    parser.add_argument("--files", type=int, default=8)
    args = parser.parse_args()

    from monitor.diagnosis.catalogue import load_catalogue

    catalogue = load_catalogue()
    results = {}
    for name in ("baseline", "app"):
        with tempfile.TemporaryDirectory(prefix="monitor-tui-bench-") as folder:
            writer = start_writer(Path(folder), args.files, args.rate, args.seconds + 3)
            time.sleep(0.5)
            if name == "baseline":
                results[name] = baseline(Path(folder), args.seconds, catalogue)
            else:
                results[name] = asyncio.run(with_app(Path(folder), args.seconds, catalogue))
            writer.wait()
    print(f"{args.files} files, {args.rate:g} lines/s in total, metrics at 1 Hz, {args.seconds:g} s each")
    for name, (share, lines) in results.items():
        label = "headless pipeline (baseline)" if name == "baseline" else "app (watch_app, headless run_test)"
        print(f"{label:40s} {share * 100:5.1f}% of one core   {lines / args.seconds:7.0f} lines/s shown")
    return 0


if __name__ == "__main__":
    sys.exit(main())
