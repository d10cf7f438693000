"""Live-follow latency and footprint: from a line written to its finding reported.

8 writer processes append to ``rank<i>.log`` at a combined ``--rate`` lines/s (in 10 ms batches,
as buffered training output arrives). Every line carries its write time. Every ``--every``-th
line of a writer starts a Python traceback with its own frame line, so each is a *new* finding;
the normal line after it completes the record. The monitor process runs a JobSession
(inotify, or ``--poll``) and measures:

- line latency: written -> returned by ``JobSession.step`` (baseline in the same run: the
  Follower alone, without the engine),
- finding latency: the traceback's last line written -> the finding returned as new,
- the monitor process's CPU (all its threads, watchdog's observer included) as a share of one
  core, and its RSS at the start and the end of the run.

Run: ``python benchmarks/follow_latency.py [--seconds 10] [--rate 10000] [--poll]``.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import re
import resource
import sys
import tempfile
import time
from pathlib import Path

import psutil

from monitor.diagnosis.catalogue import load_catalogue
from monitor.session.job_session import JobSession
from monitor.logs import follow
from monitor.logs.follow import Follower
from monitor.logs.watchdog_events import WatchdogEvents

WRITERS = 8
STAMP = re.compile(r"t=(\d+\.\d+)")


def writer(path: str, rank: int, rate: float, seconds: float, every: int, start_at: float) -> None:
    """Appends lines at ``rate`` lines/s in 10 ms batches until ``seconds`` have passed."""
    while time.time() < start_at:
        time.sleep(0.001)
    batch_period = 0.01
    per_batch = rate * batch_period
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    written = 0.0
    n = 0
    next_batch = time.monotonic()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        written += per_batch
        parts = []
        while n < int(written):
            now = time.time()
            if n % every == every - 1:
                parts.append(
                    f"[rank{rank}]: Traceback (most recent call last):\n"
                    f'[rank{rank}]:   File "train.py", line {n * WRITERS + rank}, in step\n'
                    f"[rank{rank}]: ValueError: bad batch {n} t={now:.6f}\n"
                )
            else:
                parts.append(f"[rank{rank}]: step {n} loss={1.0 / (n + 1):.5f} t={now:.6f}\n")
            n += 1
        os.write(fd, "".join(parts).encode())
        next_batch += batch_period
        delay = next_batch - time.monotonic()
        if delay > 0:
            time.sleep(delay)
    os.close(fd)


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run_case(label: str, use_engine: bool, args, watchdog: bool = False) -> dict:
    """``watchdog``: file events through watchdog's observer threads instead of inotify read in
    the follower's thread (what the follower used before; the baseline for its cost)."""
    chosen = follow.open_file_events
    if watchdog:
        follow.open_file_events = WatchdogEvents
    try:
        return _run_case(label, use_engine, args)
    finally:
        follow.open_file_events = chosen


def _run_case(label: str, use_engine: bool, args) -> dict:
    with tempfile.TemporaryDirectory(prefix="monitor-follow-bench-") as folder:
        paths = [str(Path(folder) / f"rank{i}.log") for i in range(WRITERS)]
        for path in paths:
            Path(path).touch()
        if use_engine:
            session = JobSession([folder], load_catalogue(include_user=False), poll=args.poll)
            step = session.step
        else:
            follower = Follower([folder], poll=args.poll)
            step = follower.read
        start_at = time.time() + 0.5
        procs = [
            mp.Process(target=writer, args=(p, i, args.rate / WRITERS, args.seconds, args.every, start_at))
            for i, p in enumerate(paths)
        ]
        for proc in procs:
            proc.start()
        me = psutil.Process()
        line_lat: list[float] = []
        finding_lat: list[float] = []
        lines = 0
        while time.time() < start_at:
            step(0.05)
        rss_start = me.memory_info().rss
        cpu_start = sum(resource.getrusage(resource.RUSAGE_SELF)[:2])
        wall_start = time.monotonic()
        rss_peak = rss_start
        writing, next_check = True, 0.0
        while writing:
            if time.monotonic() >= next_check:  # waitpid per writer: not on every step
                writing, next_check = any(p.is_alive() for p in procs), time.monotonic() + 0.1
            update = step(0.2)
            now = time.time()
            lines += len(update.lines)
            for line in update.lines[::10]:  # every 10th line: enough samples, little overhead
                match = STAMP.search(line.text)
                if match:
                    line_lat.append(now - float(match.group(1)))
            for finding in getattr(update, "new_findings", []):
                match = STAMP.search(" ".join(finding.evidence))
                if match:
                    finding_lat.append(now - float(match.group(1)))
            rss_peak = max(rss_peak, me.memory_info().rss) if lines % 50 == 0 else rss_peak
        # Drain what the writers left.
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline:
            update = step(0.1)
            lines += len(update.lines)
        wall = time.monotonic() - wall_start
        cpu = sum(resource.getrusage(resource.RUSAGE_SELF)[:2]) - cpu_start
        rss_end = me.memory_info().rss
        if use_engine:
            session.close()
        else:
            follower.close()
    return {
        "case": label, "lines": lines, "line_p50_ms": percentile(line_lat, 0.5) * 1000,
        "line_p99_ms": percentile(line_lat, 0.99) * 1000, "findings": len(finding_lat),
        "finding_p50_ms": percentile(finding_lat, 0.5) * 1000, "finding_p99_ms": percentile(finding_lat, 0.99) * 1000,
        "cpu_pct": 100 * cpu / wall, "rss_start_mb": rss_start / 2**20, "rss_end_mb": rss_end / 2**20,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rate", type=float, default=10_000.0, help="combined lines per second")
    parser.add_argument("--every", type=int, default=500, help="a traceback every N lines per writer")
    parser.add_argument("--poll", action="store_true", help="poll instead of inotify")
    args = parser.parse_args()
    mode = "poll" if args.poll else "inotify"
    print(f"{WRITERS} writers, {args.rate:.0f} lines/s combined, {args.seconds:g} s, {mode}; "
          f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs")
    results = [run_case("Follower, inotify read in its own thread", False, args),
               run_case("JobSession (follow + engine)", True, args)]
    if not args.poll:
        results.insert(0, run_case("Follower, events from watchdog's observer threads", False, args, watchdog=True))
    print("| case | lines | line p50 | line p99 | findings | finding p50 | finding p99 | CPU (one core) | RSS start -> end |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in results:
        print(
            f"| {r['case']} | {r['lines']} | {r['line_p50_ms']:.1f} ms | {r['line_p99_ms']:.1f} ms | {r['findings']} | "
            f"{r['finding_p50_ms']:.1f} ms | {r['finding_p99_ms']:.1f} ms | {r['cpu_pct']:.1f}% | "
            f"{r['rss_start_mb']:.0f} -> {r['rss_end_mb']:.0f} MiB |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
