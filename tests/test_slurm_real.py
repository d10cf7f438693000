"""`monitor` under a real SLURM (a one-node cluster of Debian's slurmctld and slurmd, started by
``tests/slurm_helpers.py``; skipped where SLURM is not installed): a torch job (gloo, 2 tasks)
started by `monitor run -- srun -l` that crashes on task 1 is diagnosed on rank 1, by torch's
``[rank1]:`` or by srun's ``1:`` label alone; a job ended by its time limit and a step ended by
scancel print slurmstepd's and srun's own lines, which `monitor diagnose` and `monitor run` read
as SLURM's doing (slurm_event), with no rank (srun's label on them is no rank's); the collective
test starts its ranks under the real srun (`monitor run --check-collectives -- srun ...`, and
`monitor check-collectives` inside an allocation) and a balanced run names nobody."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

from tests.runner_helpers import free_port, monitor_cmd, only_log, read_json, wait_for
from tests.slurm_helpers import Cluster, slurm_cluster  # noqa: F401  (the fixture)

PYTHON = sys.executable
JOB = str(Path(__file__).parent / "jobs" / "srun_crash_job.py")
MONITOR = (PYTHON, "-m", "monitor")


def _job_env(cluster: Cluster, **extra: str) -> dict[str, str]:
    return {**cluster.env, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), **extra}


def _diagnose(cluster: Cluster, path: Path) -> tuple[subprocess.CompletedProcess, dict]:
    text = subprocess.run([*MONITOR, "diagnose", str(path)], env=cluster.env, capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL)
    as_json = subprocess.run([*MONITOR, "diagnose", "--json", str(path)], env=cluster.env, capture_output=True,
                             text=True, timeout=60, stdin=subprocess.DEVNULL)
    return text, json.loads(as_json.stdout)


def test_a_crash_on_task_1_is_diagnosed_on_rank_1_through_torchs_prefix(slurm_cluster: Cluster, tmp_path: Path):  # noqa: F811
    result = subprocess.run(monitor_cmd(tmp_path, "srun", "-l", "-n", "2", PYTHON, JOB), env=_job_env(slurm_cluster),
                            capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL)
    assert result.returncode == 1, result.stderr[-3000:]
    log = only_log(tmp_path)
    text = log.read_text()
    assert "1: [rank1]: ValueError: bad batch at step 2 on task 1" in text
    assert f"srun: error: {slurm_cluster.node}: task 1: Exited with exit code 1" in text
    assert f"monitor: root cause: ValueError on rank 1 at {log}:" in result.stderr
    root = read_json(log.with_suffix(".diagnosis.json"))["root_cause"]
    assert (root["rank"], root["rank_source"]) == (1, "prefix")
    assert read_json(log.with_suffix(".job.json"))["exit_code"] == 1


def test_a_crash_on_task_1_is_diagnosed_on_rank_1_by_sruns_label_alone(slurm_cluster: Cluster, tmp_path: Path):  # noqa: F811
    # Python's own excepthook: no [rank1]: from torch, only srun's "1: " says whose traceback it is.
    result = subprocess.run(monitor_cmd(tmp_path, "srun", "--label", "-n", "2", PYTHON, JOB),
                            env=_job_env(slurm_cluster, PLAIN_TRACEBACK="1"), capture_output=True, text=True,
                            timeout=180, stdin=subprocess.DEVNULL)
    assert result.returncode == 1, result.stderr[-3000:]
    log = only_log(tmp_path)
    text = log.read_text()
    assert "1: ValueError: bad batch at step 2 on task 1" in text and "[rank1]" not in text
    assert f"monitor: root cause: ValueError on rank 1 at {log}:" in result.stderr
    report, diagnosis = _diagnose(slurm_cluster, log)
    assert report.returncode == 1
    assert "Root cause: ValueError on rank 1\n" in report.stdout
    assert "rank 1 (from its line's rank prefix)" in report.stdout
    # srun's word on each task is a consequence, not the cause.
    assert re.search(r"error \[cascade\] SLURM: task \d on .* ended \(Exited with exit code 1\)", report.stdout)
    assert diagnosis["root_cause"]["rank"] == 1


def _batch(cluster: Cluster, tmp_path: Path, srun_options: str = "") -> tuple[str, Path]:
    """A batch job (5 minutes' --time) whose script runs `monitor run -- srun -l -n 2` of a job
    that steps until it is stopped; returns its id once the ranks are stepping."""
    script = tmp_path / "job.sh"
    port = free_port()
    script.write_text(
        "#!/bin/bash\n"
        f"export MASTER_ADDR=127.0.0.1 MASTER_PORT={port} CRASH_STEP=-1 STEPS=100000\n"
        f"exec {PYTHON} -m monitor run --headless --no-preflight --log-dir {tmp_path / 'logs'} -- "
        f"srun -l -n 2 {srun_options} {PYTHON} {JOB}\n")
    submitted = cluster.run("sbatch", "--parsable", "--time=5", f"--chdir={Path.cwd()}",
                            f"--output={tmp_path}/slurm-%j.out", str(script))
    assert submitted.returncode == 0, submitted.stderr
    job = submitted.stdout.strip()
    wait_for(lambda: any("1: step 1 loss" in p.read_text() for p in (tmp_path / "logs").glob("run-*.log")),
             timeout=90, interval=0.5)
    return job, tmp_path / f"slurm-{job}.out"


def test_a_job_ended_by_its_time_limit_is_slurms_doing_on_no_rank(slurm_cluster: Cluster, tmp_path: Path):  # noqa: F811
    job, out = _batch(slurm_cluster, tmp_path)
    # The limit is in minutes; one lowered under the time already run ends the job at slurmctld's
    # next check of the limits (every 30 s), as --time would after its minutes.
    started = time.monotonic()
    assert slurm_cluster.run("scontrol", "update", f"JobId={job}", "TimeLimit=0").returncode == 0
    slurm_cluster.wait_gone(job, timeout=90)
    assert time.monotonic() - started < 60
    state = slurm_cluster.run("scontrol", "show", "job", job).stdout
    assert "JobState=TIMEOUT Reason=TimeLimit" in state, state
    node = slurm_cluster.node
    # slurmstepd's own lines as they came out: the batch script's (into the .out) and the step's
    # (through srun, under task 0's label, into the run's log). slurmstepd names itself
    # slurmstepd-<node> where SLURM was built for several slurmd per host (Debian's is).
    batch_line = re.compile(rf"^slurmstepd(?:-{node})?: error: \*\*\* JOB {job} ON {node} CANCELLED AT \S+ "
                            r"DUE TO TIME LIMIT \*\*\*$", re.M)
    step_line = re.compile(rf"^0: slurmstepd(?:-{node})?: error: \*\*\* STEP {job}\.0 ON {node} CANCELLED AT \S+ "
                           r"DUE TO TIME LIMIT \*\*\*$", re.M)
    text = out.read_text()
    assert batch_line.search(text), text[-3000:]
    log = only_log(tmp_path / "logs")
    assert step_line.search(log.read_text())

    report, diagnosis = _diagnose(slurm_cluster, out)
    assert report.returncode == 1
    # The batch script's line and the step's (through `monitor run`'s copy) come in either order.
    assert re.search(rf"^Root cause: SLURM ended (?:JOB {job}|STEP {job}\.0) on {node}: TIME LIMIT$", report.stdout,
                     re.M), report.stdout
    assert "  slurm_event · " in report.stdout and "confidence: certain" in report.stdout
    assert diagnosis["root_cause"]["category"] == "slurm_event" and diagnosis["root_cause"]["rank"] is None

    # `monitor run`'s own diagnosis of the step (printed into the .out before it ended): srun's
    # "0: " label is no rank of the step's end.
    assert f"monitor: root cause: SLURM ended STEP {job}.0 on {node}: TIME LIMIT at {log}:" in text
    root = read_json(log.with_suffix(".diagnosis.json"))["root_cause"]
    assert (root["rule"], root["category"], root["rank"], root["ranks"]) == ("slurm-cancelled", "slurm_event", None, [])


def test_a_step_ended_by_scancel_is_slurms_doing(slurm_cluster: Cluster, tmp_path: Path):  # noqa: F811
    job, out = _batch(slurm_cluster, tmp_path)
    assert slurm_cluster.run("scancel", f"{job}.0").returncode == 0
    slurm_cluster.wait_gone(job, timeout=60)
    node = slurm_cluster.node
    log = only_log(tmp_path / "logs")
    text = log.read_text()
    assert re.search(rf"^0: slurmstepd(?:-{node})?: error: \*\*\* STEP {job}\.0 ON {node} CANCELLED AT \S+ \*\*\*$",
                     text, re.M), text[-3000:]
    assert f"srun: error: {node}: tasks 0-1: Killed" in text
    report, diagnosis = _diagnose(slurm_cluster, log)
    assert report.returncode == 1
    assert f"Root cause: SLURM stopped STEP {job}.0 on {node}\n" in report.stdout
    assert f"error [cascade] SLURM: tasks 0-1 on {node} ended (Killed)" in report.stdout
    assert diagnosis["root_cause"]["category"] == "slurm_event" and diagnosis["root_cause"]["rank"] is None
    # `monitor run` (the batch script itself) outlived its step and said so in the .out.
    assert f"monitor: root cause: SLURM stopped STEP {job}.0 on {node} at {log}:" in out.read_text()


def test_check_collectives_starts_its_ranks_under_srun_and_a_balanced_run_names_nobody(
        slurm_cluster: Cluster, tmp_path: Path):  # noqa: F811
    result = subprocess.run(
        monitor_cmd(tmp_path, "srun", "-l", "-n", "3", PYTHON, JOB, extra=("--check-collectives",)),
        env=_job_env(slurm_cluster, CRASH_STEP="-1"), capture_output=True, text=True, timeout=240,
        stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "monitor: collectives check (gloo, 3 ranks on 1 node, " in result.stderr
    assert "monitor: no node, rank or link stands out (the check took " in result.stderr
    assert result.stderr.index("no node, rank or link stands out") < result.stderr.index("recording to")
    log = only_log(tmp_path)
    assert all(f"{rank}: done" in log.read_text() for rank in range(3))
    [saved] = tmp_path.glob("run-*.collectives.json")
    record = read_json(saved)
    assert record["command"][:5] == ["srun", "-l", "-n", "3", PYTHON]
    assert record["command"][5].endswith("monitor/collectives/exercise.py")
    assert [site["rank"] for site in record["measurement"]["ranks"]] == [0, 1, 2]
    assert record["verdict"]["outliers"] == []


def test_check_collectives_inside_an_allocation_runs_on_its_tasks(slurm_cluster: Cluster, tmp_path: Path):  # noqa: F811
    # No command: srun on every task of the allocation; the rendezvous's address and port come
    # from SLURM's variables (no MASTER_ADDR or MASTER_PORT here).
    result = subprocess.run(
        ["salloc", "-n", "3", *MONITOR, "check-collectives", "--log-dir", str(tmp_path), "--timeout", "150"],
        env=slurm_cluster.env, capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    lines = result.stdout.splitlines()
    assert lines[0].startswith("collectives check (gloo, 3 ranks on 1 node, "), result.stdout
    assert lines[-1].startswith("no node, rank or link stands out (the check took ")
    assert re.search(r"salloc: Granted job allocation \d+", result.stderr)
    [saved] = tmp_path.glob("check-*.collectives.json")
    record = read_json(saved)
    assert record["command"][0] == "srun" and record["exit_code"] == 0
    assert [site["rank"] for site in record["measurement"]["ranks"]] == [0, 1, 2]
