"""How much does recording slow the job down? The job's own write time, three ways, same run.

Baseline: the job's stdout is a plain file (what `python train.py > log` does). Against it: the
job under the recorder with a pipe, with a pipe and the headless copy going to a file (`monitor
run --headless ... > out.txt`, SLURM's .out: written in the read loop, every byte), and with a
pseudo-terminal (raw mode). Each job writes the same bytes and times its own writes, so the
figure is what training would feel.

    python benchmarks/runner_throughput.py [--mb 200] [--lines 300000]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from monitor.runner.job import Job, CaptureOptions, new_log_path

BULK = """
import os, sys, time
chunk = os.urandom(1 << 16); n = int(sys.argv[1]) * 16
t = time.perf_counter()
for _ in range(n):
    sys.stdout.buffer.write(chunk)
sys.stdout.flush()
open(sys.argv[2], "w").write(str(time.perf_counter() - t))
"""
LINES = """
import sys, time
n = int(sys.argv[1])
t = time.perf_counter()
for i in range(n):
    print(f"step {i} loss 0.1234 lr 3e-4 throughput 1234.5 samples/s", flush=True)
open(sys.argv[2], "w").write(str(time.perf_counter() - t))
"""


def direct(code: str, arg: str, work: Path) -> float:
    timing = work / "t.txt"
    with open(work / "direct.log", "wb") as out:
        subprocess.run([sys.executable, "-c", code, arg, str(timing)], stdout=out, check=True)
    return float(timing.read_text())


@contextlib.contextmanager
def stdout_to(path: Path):
    """Our fd 1 is the file while the recorder starts, so the recorder's copy goes there."""
    sys.stdout.flush()
    saved = os.dup(1)
    with open(path, "wb") as out:
        os.dup2(out.fileno(), 1)
    try:
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def recorded(code: str, arg: str, work: Path, use_pty: bool, copy_to_file: bool) -> tuple[float, float]:
    timing, copy = work / "t.txt", work / "copy.out"
    log = new_log_path(work / "logs")
    start = time.perf_counter()
    with stdout_to(copy) if copy_to_file else contextlib.nullcontext():
        job = Job.start([sys.executable, "-c", code, arg, str(timing)], log,
                        CaptureOptions(use_pty=use_pty, tee=copy_to_file))
    assert job.wait() == 0
    if copy_to_file:
        assert copy.stat().st_size == log.stat().st_size, "the copy to a file lost bytes"
    return float(timing.read_text()), time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=int, default=200)
    parser.add_argument("--lines", type=int, default=300_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    for name, code, arg, size_mb in (
        (f"bulk {args.mb} MB in 64 KiB writes", BULK, str(args.mb), args.mb),
        (f"{args.lines} flushed lines", LINES, str(args.lines), args.lines * 57 / 1e6),
    ):
        print(name)
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp)
            base = statistics.median(direct(code, arg, work) for _ in range(args.repeat))
            baseline = "baseline (stdout to a file)"
            print(f"  {baseline:31} job writes {base:6.3f} s  {size_mb / base:8.1f} MB/s")
            for label, use_pty, copy_to_file in (("recorder, pipe", False, False),
                                                 ("recorder, pipe, copy to a file", False, True),
                                                 ("recorder, pty", True, False)):
                runs = [recorded(code, arg, work, use_pty, copy_to_file) for _ in range(args.repeat)]
                job_s = statistics.median(r[0] for r in runs)
                total = statistics.median(r[1] for r in runs)
                print(f"  {label:31} job writes {job_s:6.3f} s  {size_mb / job_s:8.1f} MB/s"
                      f"  ({job_s / base:4.2f}x baseline; start to log complete {total:.3f} s)")


if __name__ == "__main__":
    main()
