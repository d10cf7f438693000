"""Benchmark: the time `--check-collectives` adds before a launch (#28).

    python benchmarks/collectives_check.py [--ranks 2 3 4] [--repeats 3] [--nodes]

Measured on real torchrun jobs (gloo on CPU, --standalone, one node):
- the check alone (`collectives_check.check`): its wall time from the launcher's start to the
  verdict, split by what the ranks measured: start (the launcher, Python, torch's import and the
  rendezvous), the collectives, the all_reduce by pairs of nodes (none on one node), the
  send/recv pairs; the rest is the launcher's own start and end; the baseline in the same run:
  the same torchrun of a script that does nothing;
- `monitor run --headless` of the demo job, from the command's start to "recording to" (the job's
  launch), without and with `--check-collectives`, in the same run;
- with ``--nodes`` (root: network namespaces, as tests/test_collectives_real.py builds them):
  `monitor check-collectives` on three nodes of one rank, balanced and with the third behind a
  200 Mbit/s link, the same split and what it named.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from monitor.runner.collectives_check import check  # noqa: E402

TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone"]


def check_alone(ranks: int, folder: Path) -> dict:
    result = check([*TORCHRUN, "--nproc-per-node", str(ranks), "train.py"], folder / f"run-{ranks}.log")
    assert result.verdict is not None, result.problem
    saved = json.loads(result.saved.read_text())
    phases = saved["measurement"]["phases"]
    return {"total": result.seconds, "nodes": 0.0, **{name: seconds for name, seconds in phases},
            "named": len(result.verdict.outliers)}


def empty_launch(ranks: int, folder: Path) -> float:
    """The launcher alone: torchrun of a script that does nothing."""
    script = folder / "empty.py"
    script.write_text("")
    started = time.perf_counter()
    subprocess.run([*TORCHRUN, "--nproc-per-node", str(ranks), str(script)], capture_output=True, check=True)
    return time.perf_counter() - started


def until_launch(ranks: int, folder: Path, with_check: bool) -> float:
    """Seconds from `monitor run`'s start to the job's launch ("recording to" on stderr)."""
    command = [sys.executable, "-m", "monitor", "run", "--headless", "--no-preflight", "--log-dir", str(folder),
               *(["--check-collectives"] if with_check else []), "--",
               *TORCHRUN, "--nproc-per-node", str(ranks), "-m", "monitor.demo.train", "--steps", "1"]
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                               env={**os.environ, "PYTHONPATH": str(ROOT)})
    launched = None
    assert process.stderr is not None
    for line in process.stderr:
        if b"recording to" in line and launched is None:
            launched = time.perf_counter() - started
    process.wait()
    assert launched is not None
    return launched


def three_nodes(rate: str | None, folder: Path) -> dict:
    """`monitor check-collectives` on three nodes (network namespaces, one rank each), the third
    behind ``rate``: node 0's wall time, the phases its ranks measured, what it named."""
    from tests.netns_helpers import Network
    from tests.runner_helpers import free_port

    tag = f"{os.getpid() % 1000:03d}"
    network = Network(tag, f"10.{200 + os.getpid() % 50}.{os.getpid() % 250}", bridge=f"mc{tag}br")
    try:
        nodes = [network.node(), network.node(), network.node(rate=rate)]
        port = str(free_port())
        processes = []
        for k, (node, hostname) in enumerate(zip(nodes, ("node-a", "node-b", "node-c"))):
            launch = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "3", "--nproc-per-node", "1",
                      "--node-rank", str(k), "--master-addr", nodes[0].address, "--master-port", port, "train.py"]
            command = ["env", f"GLOO_SOCKET_IFNAME={node.interface}", f"PYTHONPATH={ROOT}", sys.executable, "-m",
                       "monitor", "check-collectives", "--json", "--log-dir", str(folder / f"node{k}"), "--", *launch]
            processes.append(subprocess.Popen(node.command(command, hostname), stdout=subprocess.PIPE,
                                              stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL))
        first = [json.loads(process.communicate(timeout=240)[0]) for process in processes][0]
    finally:
        network.close()
    phases = json.loads(Path(first["saved"]).read_text())["measurement"]["phases"]
    named = [f"{o['node']} ({o['metric']}, {o['own_s'] / o['usual_s']:.0f}x)" for o in first["verdict"]["outliers"]]
    return {"total": first["seconds"], **{name: seconds for name, seconds in phases}, "named": named}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 3, 4])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--nodes", action="store_true", help="only the three nodes in network namespaces (root)")
    args = parser.parse_args()
    if args.nodes:
        with tempfile.TemporaryDirectory() as tmp:
            print("| three nodes | check, total | start | collectives | all_reduce by pairs of nodes | pairs | named |")
            print("|---|---|---|---|---|---|---|")
            for rate in (None, "200mbit"):
                for n in range(args.repeats):
                    run = three_nodes(rate, Path(tmp) / f"{rate}-{n}")
                    print(f"| {rate or 'balanced'} | {run['total']:.1f} s | {run['join']:.1f} s | "
                          f"{run['collectives']:.2f} s | {run['nodes']:.2f} s | {run['pairs']:.2f} s | "
                          f"{', '.join(run['named']) or 'nobody'} |", flush=True)
        return
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        print("| ranks | check, total | start: launcher + torch + rendezvous | collectives | all_reduce by pairs of "
              "nodes | pairs | launcher start/end | named | baseline: torchrun of an empty script |")
        print("|---|---|---|---|---|---|---|---|---|")
        for ranks in args.ranks:
            runs = [check_alone(ranks, folder) for _ in range(args.repeats)]
            median = {key: statistics.median(run[key] for run in runs)
                      for key in ("total", "join", "collectives", "nodes", "pairs")}
            rest = median["total"] - median["join"] - median["collectives"] - median["nodes"] - median["pairs"]
            empty = statistics.median(empty_launch(ranks, folder) for _ in range(args.repeats))
            print(f"| {ranks} | {median['total']:.1f} s | {median['join']:.1f} s | {median['collectives']:.2f} s | "
                  f"{median['nodes']:.2f} s | {median['pairs']:.2f} s | {rest:.1f} s | {sum(run['named'] for run in runs)} | {empty:.1f} s |",
                  flush=True)
        print()
        print("| ranks | monitor run to launch, without | with --check-collectives | added |")
        print("|---|---|---|---|")
        for ranks in args.ranks:
            without = statistics.median(until_launch(ranks, folder / f"a{ranks}-{n}", False) for n in range(args.repeats))
            with_check = statistics.median(until_launch(ranks, folder / f"b{ranks}-{n}", True) for n in range(args.repeats))
            print(f"| {ranks} | {without:.1f} s | {with_check:.1f} s | {with_check - without:.1f} s |", flush=True)


if __name__ == "__main__":
    main()
