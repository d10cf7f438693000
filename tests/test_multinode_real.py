"""Two nodes on one machine: two `monitor run --job-dir` processes with different node names,
each launching `torchrun --nnodes 2` of the demo job (gloo, CPU) against one c10d rendezvous on
localhost, into one job folder. Rank 3 raises; node-b's monitor is SIGKILLed mid-run (its
recorder keeps the job's log); a `watch --headless` of the job folder runs throughout."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from monitor.logs.nodes import read_node
from tests.runner_helpers import free_port, wait_for

STEPS, FAIL_STEP = 28, 24  # about 1 s a step: node-b's monitor dies at step 2, rank 3 raises at 24


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    job_dir = tmp_path_factory.mktemp("multinode") / "job-4242"
    port = free_port()
    env = {**os.environ, "SLURM_JOB_ID": "4242"}
    job_dir.mkdir()  # the sbatch script makes it; the watch starts before the nodes
    watch = subprocess.Popen(
        [sys.executable, "-m", "monitor", "watch", "--headless", "--json", "--no-user-rules", str(job_dir)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    runs = {}
    for node_rank, node in enumerate(("node-a", "node-b")):
        runs[node] = subprocess.Popen(
            [sys.executable, "-m", "monitor", "run", "--headless", "--no-preflight", "--no-user-rules",
             "--job-dir", str(job_dir), "--node", node, "--",
             sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "2",
             "--node-rank", str(node_rank), "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}",
             "--rdzv-id", "job-4242", "-m", "monitor.demo.train", "--scenario", "crash", "--rank-to-fail", "3",
             "--steps", str(STEPS), "--fail-step", str(FAIL_STEP), "--sleep-per-step", "1", "--timeout", "60"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, env=env)
    try:
        # node-b's monitor is killed once its ranks train; the job there keeps running and recording.
        # (Only rank 0 prints its steps, on whichever node c10d put it.)
        wait_for(lambda: any(b"step 2 loss" in log.read_bytes() for log in job_dir.glob("*/run-*.log")), timeout=120)
        runs["node-b"].send_signal(signal.SIGKILL)
        runs["node-b"].wait(timeout=10)
        code_a = runs["node-a"].wait(timeout=240)
        # The job on node-b ends too (its recorder records to the end), with nobody watching it.
        wait_for(lambda: "exit_code" in json.loads(next((job_dir / "node-b").glob("run-*.job.json")).read_text()),
                 timeout=120)
        time.sleep(1)
    finally:
        for process in runs.values():
            if process.poll() is None:
                process.kill()
        watch.send_signal(signal.SIGTERM)
        watch_out, _ = watch.communicate(timeout=60)
    return job_dir, code_a, [json.loads(line) for line in watch_out.splitlines() if line.startswith("{")]


def _node_of_rank(job_dir: Path, rank: int) -> str:
    """Which node ran ``rank``, from the ranks' own environment (node.json) cross-checked
    against the lines the rank printed: c10d assigns node ranks by arrival."""
    holders = {node.name for node in map(read_node, job_dir.iterdir()) if node and rank in node.ranks.values()}
    printed = {log.parent.name for log in job_dir.glob("*/run-*.log") if f"[rank{rank}] world_size=4".encode() in log.read_bytes()}
    assert holders == printed and len(printed) == 1, (holders, printed)
    return printed.pop()


def test_diagnose_the_job_folder_names_node_and_rank(job):
    job_dir, code_a, _ = job
    assert code_a != 0
    result = subprocess.run([sys.executable, "-m", "monitor", "diagnose", "--json", "--no-user-rules", str(job_dir)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 1, result.stderr
    diagnosis = json.loads(result.stdout)
    root = diagnosis["root_cause"]
    assert (root["rank"], root["category"]) == (3, "python_exception"), root
    assert root["node"] == _node_of_rank(job_dir, 3)
    text = subprocess.run([sys.executable, "-m", "monitor", "diagnose", "--no-user-rules", str(job_dir)],
                          capture_output=True, text=True, timeout=120).stdout
    assert text.startswith(f"Root cause: node {root['node']}: ValueError on rank 3")
    # The monitor killed on node-b: said, with the node, while its log went on.
    (lost,) = [f for f in diagnosis["findings"] if f["rule"] == "node-monitor-lost"]
    assert lost["node"] == "node-b" and lost["severity"] == "warning"
    # The ranks' environment mapped every local rank of both nodes to a global one.
    assert sorted(r for node in ("node-a", "node-b") for r in read_node(job_dir / node).ranks.values()) == [0, 1, 2, 3]


def test_watch_of_the_job_folder_saw_both_nodes_and_the_quiet_monitor(job):
    job_dir, _, printed = job
    live, summary = printed[:-1], printed[-1]["diagnosis"]  # the findings as they came, then the summary
    # Both nodes' logs were followed, and the findings say on which nodes they were seen (a
    # finding seen on both is printed once, when it first appears, with the node it appeared on).
    assert {Path(f).parent.name for f in summary["files"]} >= {"node-a", "node-b"}
    assert {n for f in summary["findings"] for n in [f["node"], *f["nodes"]]} >= {"node-a", "node-b"}
    assert any(f["rule"] == "node-monitor-lost" and f["node"] == "node-b" for f in live), live
    (exception,) = [f for f in live if f["rule"] == "python-exception" and f["rank"] == 3]
    assert exception["node"] == _node_of_rank(job_dir, 3)
