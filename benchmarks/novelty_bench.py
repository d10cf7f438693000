"""Benchmark: what "new since the last good run" (`diagnose --against`) adds to `monitor diagnose`.

    python benchmarks/novelty_bench.py [--size-mb 100] [--repeat 3]

A folder of two `monitor run`-style runs of diagnose_bench.py's log (benchmarks/data/, made by
it): the good one (exit 0 in its job.json) and a failed one, the same log with three lines no good
run printed. Times (best of --repeat, whole command) of `diagnose --against none`, `--against
auto` reading the good run's log, and `--against auto` reading its saved templates
(run-X.templates, as `monitor run` leaves them), with `grep -c` over both logs in the same run.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from monitor.diagnosis.novelty import save_templates, templates_of  # noqa: E402

NEW = (
    "WARNING trainer: prefetch queue for shard 3 is empty; waiting for the reader\n"
    "ERROR trainer: shard 7 checksum mismatch: expected a1b2c3d4 got ffee0011\n"
    "[rank3]: RuntimeError: the reader thread died\n"
)


def best(command: list[str], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size-mb", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    source = HERE / "data" / f"train-{args.size_mb}mb.log"
    if not source.exists():
        subprocess.run([sys.executable, str(HERE / "diagnose_bench.py"), "--size-mb", str(args.size_mb), "--repeat", "1"], check=True)
    folder = HERE / "data" / "novelty"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    good, bad = folder / "run-20260101-000000.log", folder / "run-20260101-010000.log"
    shutil.copy(source, good)
    (folder / "run-20260101-000000.job.json").write_text(json.dumps({"exit_code": 0}))
    text = source.read_bytes()
    cut = len(text) // 2
    bad.write_bytes(text[:cut] + NEW.encode() + text[cut:])
    (folder / "run-20260101-010000.job.json").write_text(json.dumps({"exit_code": 1}))
    diagnose = [sys.executable, "-m", "monitor", "diagnose", str(folder)]
    grep = best(["grep", "-c", "-F", "ERROR", str(good), str(bad)], args.repeat)
    none = best([*diagnose, "--against", "none"], args.repeat)
    derived = best([*diagnose, "--against", "auto"], args.repeat)
    start = time.perf_counter()
    saved = templates_of([good])
    took = time.perf_counter() - start
    save_templates(good, saved)
    with_saved = best([*diagnose, "--against", "auto"], args.repeat)
    size = (folder / "run-20260101-000000.templates").stat().st_size
    print(f"{args.size_mb} MB a run; grep -c over both logs {grep:.2f} s")
    print(f"  diagnose --against none                   {none:.2f} s")
    print(f"  diagnose --against auto (good run's log)  {derived:.2f} s  (+{(derived - none) / none:.0%})")
    print(f"  diagnose --against auto (saved templates) {with_saved:.2f} s  (+{(with_saved - none) / none:.0%})")
    print(f"  the good run's templates: {len(saved)} ({size / 1024:.1f} KiB saved), made in {took:.2f} s")


if __name__ == "__main__":
    main()
