"""Rotation under pressure, swept: how many lines on disk a follower never reports, and how many it
reports twice, with writers that rotate their logs as fast as they can.

    python benchmarks/rotation_sweep.py [--repeats 1] [--lines 2000] [--every 7,20,50,200]

Five writer threads (no pause between lines, each line in two writes) each rotate their own file
every N lines with one kind of rotation (tests/test_follow_rotation_stress.py's RotatingWriter:
rename and create with copies shifted .1 -> .2 ..., copytruncate, delete and create, truncate to
zero, ``truncate -s`` to half its lines); every copy is kept, so a writer that rotates every 7
lines ends with hundreds of copies shifting on at each rotation. Each mix runs against a folder
and against the five files, with file events and with a 0.02 s poll. The oracle: every line still
on disk somewhere at the end must be reported, and none twice.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from test_follow_rotation_stress import RotatingWriter, by_rank, follow, on_disk  # noqa: E402

MIXES = {
    "five kinds": ["rename", "copytruncate", "delete", "truncate", "keep"],
    "copytruncate x5": ["copytruncate"] * 5,
    "keep x2, rename x2, truncate": ["keep", "keep", "rename", "rename", "truncate"],
}


def run_once(kinds: list[str], every: int, lines: int, target: str, poll: bool) -> tuple[int, int, int]:
    """(lines on disk, of them never reported, lines reported more than once)."""
    with tempfile.TemporaryDirectory() as folder:
        writers = [RotatingWriter(f"{folder}/rank{r}.log", r, kind, lines, every) for r, kind in enumerate(kinds)]
        reported = by_rank(line.text for line in follow(Path(folder), writers, target=target, poll=poll))
        disk = on_disk(Path(folder))
    on = lost = twice = 0
    for rank in range(len(kinds)):
        counts = Counter(reported.get(rank, []))
        on += len(disk.get(rank, set()))
        lost += len(disk.get(rank, set()) - set(counts))
        twice += sum(1 for n in counts.values() if n > 1)
    return on, lost, twice


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=1, help="runs of the 4 ways of following, per cell")
    parser.add_argument("--lines", type=int, default=2000, help="lines per writer")
    parser.add_argument("--every", default="7,20,50,200", help="rotate every N lines (comma-separated)")
    args = parser.parse_args()
    print(f"{'mix':<28} {'every':>5} {'runs':>5} {'runs wrong':>10} {'lines on disk':>13} {'lost':>6} {'twice':>6} {'s/run':>6}")
    for (name, kinds), every in itertools.product(MIXES.items(), map(int, args.every.split(","))):
        runs = wrong = on = lost = twice = 0
        started = time.monotonic()
        for _, target, poll in itertools.product(range(args.repeats), ["dir", "file"], [False, True]):
            o, l, t = run_once(kinds, every, args.lines, target, poll)
            runs, wrong, on, lost, twice = runs + 1, wrong + bool(l or t), on + o, lost + l, twice + t
        per_run = (time.monotonic() - started) / runs
        print(f"{name:<28} {every:>5} {runs:>5} {wrong:>10} {on:>13} {lost:>6} {twice:>6} {per_run:>6.1f}", flush=True)


if __name__ == "__main__":
    main()
