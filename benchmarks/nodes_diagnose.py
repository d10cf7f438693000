"""Benchmark: `monitor diagnose <job-dir>` as the job grows from 1 to 16 node folders.

    python benchmarks/nodes_diagnose.py [--lines 200000] [--nodes 1,2,4,8,16]

Each node folder (node.json and run-X.log, as `monitor run --job-dir` writes them) holds the
same realistic node log: 8 ranks with torchrun's `[defaultN]:` prefixes (local ranks: the
node's map makes them global), NCCL INFO noise, progress lines; the last node's rank raises.
Times are wall-clock of the whole command, best of --repeat; baseline in the same run: GNU
`grep -r -E -c` with the catalogue's patterns over the same folder (as diagnose_bench.py).
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from diagnose_bench import installed_bytecode, patterns_file  # noqa: E402
from monitor.diagnosis.catalogue import load_catalogue  # noqa: E402


def node_log(lines: int, node_rank: int, fail: bool) -> str:
    rng = random.Random(node_rank)
    out = []
    for i in range(lines):
        local = i % 8
        kind = rng.random()
        if kind < 0.5:
            out.append(f"[default{local}]:gpu-{node_rank:02d}:1234:1240 [{local}] NCCL INFO Channel {i % 32:02d}/0 : {local}[{local}] -> {(local + 1) % 8}[{(local + 1) % 8}] via P2P/IPC\n")
        elif kind < 0.9:
            out.append(f"[default{local}]:step {i // 8} loss {1.0 / (1 + i / 1000):.4f} lr 3e-4 grad_norm 0.91 tokens/s 12345\n")
        else:
            out.append(f"[default{local}]:/opt/venv/lib/python3.11/site-packages/torch/utils/checkpoint.py:91: UserWarning: None of the inputs have requires_grad=True.\n")
    if fail:
        out.append("[default5]:Traceback (most recent call last):\n[default5]:  File \"train.py\", line 9, in <module>\n"
                   "[default5]:ValueError: bad batch\n")
    return "".join(out)


def best(command: list[str], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        times.append(time.perf_counter() - started)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lines", type=int, default=200_000, help="lines per node log")
    parser.add_argument("--nodes", default="1,2,4,8,16")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    counts = [int(n) for n in args.nodes.split(",")]
    installed_bytecode()
    work = Path(tempfile.mkdtemp(prefix="monitor-nodes-bench-"))
    patterns, _, _ = patterns_file(load_catalogue(include_user=False))
    print(f"{args.lines:,} lines per node; best of {args.repeat}")
    print("| nodes | size | grep -r -E -c | monitor diagnose | ratio |")
    print("|---|---|---|---|---|")
    try:
        for count in counts:
            job = work / f"job-{count}"
            for n in range(count):
                folder = job / f"gpu-{n:02d}"
                folder.mkdir(parents=True)
                (folder / "node.json").write_text(json.dumps(
                    {"node": folder.name, "ranks": {str(i): n * 8 + i for i in range(8)}, "rank_offset": n * 8}))
                (folder / "run-20261125-100000.log").write_text(node_log(args.lines, n, fail=n == count - 1))
            size = sum(p.stat().st_size for p in job.rglob("*.log"))
            grep = best(["grep", "-r", "-E", "-c", "-f", str(patterns), str(job)], args.repeat)
            diagnose = best([sys.executable, "-m", "monitor", "diagnose", "--no-user-rules", str(job)], args.repeat)
            print(f"| {count} | {size / 1e6:.0f} MB | {grep:.2f} s | {diagnose:.2f} s | {diagnose / grep:.2f}x |")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
