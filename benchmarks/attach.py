"""Benchmark: opening a watch on a big existing log (instant attach, #14).

    python benchmarks/attach.py [--size-mb 1000] [--old-size-mb 100]

The log is diagnose_bench.py's (8 ranks, NCCL noise, progress bars; a CUDA OOM near the end).
Measured, each from the start of the command:
- the job session alone (what `watch --headless` and the screen's worker run): the first
  step with attach (fast scan of what is there, the tail for the screen) until the root cause is
  known; and, on a smaller log, the same without attach (every line through the engine);
- the screen: `monitor watch LOG` in tmux (120x40) until "ROOT CAUSE" is on it;
- the baseline in the same run: `less +G LOG` in tmux until the file's last line is on screen.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from diagnose_bench import DATA, generate  # noqa: E402
from monitor.diagnosis.catalogue import load_catalogue  # noqa: E402
from monitor.session.job_session import JobSession  # noqa: E402


def session_until_root(log: Path, attach: bool) -> float:
    catalogue = load_catalogue(include_user=False)
    started = time.perf_counter()
    session = JobSession([log], catalogue, attach=attach)
    try:
        while session.root_cause() is None or session.root_cause().rule != "cuda-oom":
            session.step(timeout=0.05)
        return time.perf_counter() - started
    finally:
        session.close()


def tmux_until(command: str, wanted: str, timeout: float = 600.0) -> float:
    subprocess.run(["tmux", "kill-session", "-t", "bench"], capture_output=True)
    started = time.perf_counter()
    subprocess.run(["tmux", "new", "-d", "-x", "120", "-y", "40", "-s", "bench", command], check=True)
    try:
        while time.perf_counter() - started < timeout:
            screen = subprocess.run(["tmux", "capture-pane", "-p", "-t", "bench"], capture_output=True, text=True).stdout
            if wanted in screen:
                return time.perf_counter() - started
            time.sleep(0.05)
        raise TimeoutError(command)
    finally:
        subprocess.run(["tmux", "kill-session", "-t", "bench"], capture_output=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size-mb", type=int, default=1000)
    parser.add_argument("--old-size-mb", type=int, default=100, help="the every-line path's log (it is slow)")
    args = parser.parse_args()
    big = DATA / f"train-{args.size_mb}mb.log"
    small = DATA / f"train-{args.old_size_mb}mb.log"
    for path, size in ((big, args.size_mb), (small, args.old_size_mb)):
        if not path.exists():
            generate(path, size)
    last_line = big.read_bytes()[-200:].decode().splitlines()[-1][:40]
    print("| case | log | seconds |\n|---|---|---|")
    print(f"| `less +G` (baseline): last line on screen | {args.size_mb} MB | {tmux_until(f'less +G {big}', last_line):.2f} |")
    monitor = f"{sys.executable} -m monitor watch --no-user-rules --no-bell {big}"
    print(f"| `monitor watch` screen: first screen | {args.size_mb} MB | {tmux_until(monitor, 'monitor — watching'):.2f} |")
    print(f"| `monitor watch` screen: root cause on screen | {args.size_mb} MB | {tmux_until(monitor, 'ROOT CAUSE'):.2f} |")
    print(f"| job session, attach: root cause known | {args.size_mb} MB | {session_until_root(big, True):.2f} |")
    print(f"| job session, attach: root cause known | {args.old_size_mb} MB | {session_until_root(small, True):.2f} |")
    print(f"| job session, every line (before): root cause known | {args.old_size_mb} MB | {session_until_root(small, False):.2f} |")


if __name__ == "__main__":
    main()
