"""Benchmark: `monitor diagnose` of a SLURM job folder written one file per node
(`srun --label --output=%N.out`): 64, 256 and 1000 nodes of 8 ranks each.

    python benchmarks/slurm_folder_bench.py [--nodes 64,256,1000] [--mb-per-node 1] [--repeat 3]

Each node file holds its 8 ranks' lines with srun's global task labels (`301: ...`): step and
loss lines, NCCL INFO noise, a warning now and then; one node's rank raises a ValueError near the
end and the others' ranks then print gloo's lost-peer errors. Baseline in the same run: GNU
`grep -r -E -c -f patterns.txt` over the same folder (the catalogue's patterns, as
diagnose_bench.py converts them). Also says whether the root cause names the rank and its node.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from diagnose_bench import patterns_file, timed  # noqa: E402
from monitor.diagnosis.catalogue import load_catalogue  # noqa: E402

DATA = HERE / "data"
FAILING_NODE = 37
FAILING_LOCAL = 5


def write_folder(folder: Path, nodes: int, mb_per_node: float) -> None:
    random.seed(nodes)
    folder.mkdir(parents=True, exist_ok=True)
    for node in range(nodes):
        path = folder / f"gpu-{node:04d}.out"
        if path.exists():
            continue
        lines, size, step = [], 0, 0
        while size < mb_per_node * (1 << 20):
            rank = node * 8 + random.randrange(8)
            if step % 97 == 0:
                line = f"{rank}: gpu-{node:04d}:{4000 + rank % 8}:{4100 + rank % 8} [{rank % 8}] NCCL INFO Channel 00/02 : 0 1 2 3 4 5 6 7"
            elif step % 301 == 0:
                line = f"{rank}: /usr/lib/python3/site-packages/torch/utils/data/dataloader.py:557: UserWarning: This DataLoader will create 16 worker processes in total."
            else:
                line = f"{rank}: {{'loss': {random.random():.4f}, 'grad_norm': {random.random() * 3:.3f}, 'learning_rate': 3e-05, 'epoch': {step / 1e4:.2f}}}"
            lines.append(line)
            size += len(line) + 1
            step += 1
        if node == FAILING_NODE % nodes:
            rank = node * 8 + FAILING_LOCAL
            lines += [f"{rank}: Traceback (most recent call last):",
                      f'{rank}:   File "/work/train.py", line 214, in <module>',
                      f"{rank}:     loss = step(batch)",
                      f"{rank}: ValueError: batch 81723 has 0 samples after filtering"]
        else:
            rank = node * 8
            lines.append(f"{rank}: RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection closed by peer [10.0.0.{node % 250}]:4021")
        path.write_text("\n".join(lines) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default="64,256,1000")
    parser.add_argument("--mb-per-node", type=float, default=1.0)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    catalogue = load_catalogue(include_user=False)
    patterns, converted, skipped = patterns_file(catalogue)
    print(f"catalogue: {len(catalogue)} rules; grep gets {converted} patterns as ERE ({skipped} not convertible)")
    print("| nodes | MB | grep -r -E -c -f | monitor diagnose | ratio | root cause |")
    print("|---|---|---|---|---|---|")
    for nodes in map(int, args.nodes.split(",")):
        folder = DATA / f"slurm-{nodes}x{args.mb_per_node:g}mb"
        write_folder(folder, nodes, args.mb_per_node)
        mb = sum(f.stat().st_size for f in folder.iterdir()) / (1 << 20)
        grep_s, _, _ = timed(["grep", "-r", "-E", "-c", "-f", str(patterns), str(folder)], args.repeat)
        diag_s, _, out = timed([sys.executable, "-m", "monitor", "diagnose", "--json", "--no-user-rules", str(folder)],
                               args.repeat)
        root = json.loads(out)["root_cause"] or {}
        said = f"rank {root.get('rank')} on {root.get('node')} ({root.get('category')})"
        print(f"| {nodes} | {mb:.0f} | {grep_s:.2f} s | {diag_s:.2f} s | {diag_s / grep_s:.1f}x | {said} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
