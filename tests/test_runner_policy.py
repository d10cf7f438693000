"""The restart policy, alone and through `monitor run --restart N` with real processes."""

from __future__ import annotations

from pathlib import Path

import pytest

from monitor.model import Category, Diagnosis, Finding
from monitor.runner.restart import decide
from tests.runner_helpers import python_job, read_json, run_monitor


def finding(category: str, title: str = "t", **fields: str) -> Finding:
    return Finding(rule=category, category=category, severity="error", role="root", title=title,
                   rank=0, ranks=[0], file="x.log", line=1, count=1, evidence=[], fields=fields,
                   remedy="")


def diagnosis(root: Finding | None) -> Diagnosis:
    return Diagnosis(root_cause=root, findings=[root] if root else [], files=["x.log"])


@pytest.mark.parametrize("category", ["nccl_error", "nccl_timeout", "gloo_timeout",
                                      "rendezvous_timeout", "slurm_event"])
def test_transient_failures_are_retried(category: str):
    decision = decide(diagnosis(finding(category)), exit_code=1, attempt=1, max_restarts=2)
    assert decision.retry and category in decision.reason and "restart 1 of 2" in decision.reason


RETRIED = {"nccl_error", "nccl_timeout", "gloo_timeout", "rendezvous_timeout", "slurm_event"}


# Every other category, the ones added after the policy was written included: a retry only
# for what it knows a retry can fix ("stopped" and "launcher", the exit alone, have tests of their own).
@pytest.mark.parametrize("category", sorted(c.value for c in Category if c.value not in RETRIED | {"stopped", "launcher"}))
def test_deterministic_failures_are_not(category: str):
    decision = decide(diagnosis(finding(category)), exit_code=1, attempt=1, max_restarts=5)
    assert not decision.retry and category in decision.reason


def test_a_job_stopped_from_outside_is_not_restarted():
    stop = finding("stopped", title="torchrun was stopped by signal 15 from outside the job")
    decision = decide(diagnosis(stop), exit_code=1, attempt=1, max_restarts=3)
    assert not decision.retry and decision.reason.startswith("torchrun was stopped by signal 15")
    assert "--requeue" in decision.reason


def test_limits_success_user_stop_and_unexplained_failures():
    root = finding("nccl_error")
    assert not decide(diagnosis(root), 1, attempt=3, max_restarts=2).retry
    assert decide(diagnosis(root), 0, 1, 2).reason == "the job succeeded"
    assert not decide(diagnosis(root), 143, 1, 2, stopped_by_user=True).retry
    unexplained = decide(diagnosis(None), 137, 1, 2)
    assert not unexplained.retry and "137" in unexplained.reason


def test_a_timeout_is_retried_once_not_twice():
    timeout = diagnosis(finding("gloo_timeout"))
    assert decide(timeout, 1, attempt=1, max_restarts=5).retry
    again = decide(timeout, 1, attempt=2, max_restarts=5, previous_category="gloo_timeout")
    assert not again.retry and "in the program" in again.reason
    # A flaky link may flake twice: not limited the same way.
    assert decide(diagnosis(finding("nccl_error")), 1, 2, 5, previous_category="nccl_error").retry


def test_slurm_time_limit_is_not_retried_but_node_failure_is():
    limit = finding("slurm_event", "Step cancelled", why="TIME LIMIT")
    node = finding("slurm_event", "Step cancelled", why="NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS")
    assert not decide(diagnosis(limit), 1, 1, 3).retry
    assert decide(diagnosis(node), 1, 1, 3).retry


NCCL_RULE = """
[[rule]]
id = "test-nccl-remote"
category = "nccl_error"
severity = "error"
role = "root"
title = "NCCL remote error"
patterns = ['''ncclRemoteError: (?P<why>.+)''']
remedy = "A peer went away or the link failed: {why}"
"""

# Fails like a flaky link the first time, succeeds the second (a marker file remembers).
FLAKY_JOB = """
import pathlib, sys
marker = pathlib.Path(sys.argv[1])
if not marker.exists():
    marker.touch()
    print("ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.", flush=True)
    sys.exit(1)
print("trained", flush=True)
"""


def test_monitor_run_retries_a_flaky_link_and_records_why(tmp_path: Path):
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "nccl.toml").write_text(NCCL_RULE)
    logs = tmp_path / "logs"
    result = run_monitor(logs, *python_job(FLAKY_JOB), str(tmp_path / "marker"),
                         extra=("--restart", "2", "--restart-delay", "0", "--rules", str(rules)))
    assert result.returncode == 0, result.stderr.decode()[-3000:]
    first, second = sorted(logs.glob("run-*.meta.json"), key=lambda p: read_json(p)["attempt"])
    assert read_json(first)["restart"]["retry"] is True
    assert "nccl_error" in read_json(first)["restart"]["reason"]
    assert read_json(second)["restart"] == {"retry": False, "reason": "the job succeeded"}
    assert b"restarting in 0 s: nccl_error" in result.stderr


def test_monitor_run_does_not_retry_a_python_exception(tmp_path: Path):
    job = "raise ValueError('bad shape')"
    result = run_monitor(tmp_path, *python_job(job), extra=("--restart", "3"))
    assert result.returncode == 1
    metas = list(tmp_path.glob("run-*.meta.json"))
    assert len(metas) == 1
    decision = read_json(metas[0])["restart"]
    assert not decision["retry"] and "python_exception" in decision["reason"]
    diagnosis = read_json(next(tmp_path.glob("run-*.diagnosis.json")))
    assert diagnosis["run"]["restart"] == decision


def test_a_cause_its_rule_says_a_retry_meets_again_is_not_retried():
    # gloo finding no address for its interface: the rank's configuration, not a peer or the network.
    setup = Finding(rule="gloo-device-address", category="gloo_timeout", severity="error", role="root",
                    title="Gloo found no usable local address on rank 1", rank=1, own_error=True, retryable=False)
    decision = decide(diagnosis(setup), exit_code=1, attempt=1, max_restarts=5)
    assert not decision.retry and "a retry meets the same cause" in decision.reason


@pytest.mark.parametrize("line, rule", [
    ("srun: error: Unable to allocate resources: Invalid account or account/partition combination specified",
     "slurm-launch-failed"),
    ("submitit WARNING (2024-01-02 03:04:05,001) - Caught signal SIGTERM on node-a17: this job is preempted.",
     "submitit-preempted"),
    ("node1:812:812 [0] transport/nvls.cc:245 NCCL WARN Cuda failure 'operation not supported'", "nccl-cuda-failure"),
    ("RuntimeError: [enforce fail at ../third_party/gloo/gloo/transport/tcp/device.cc:83] ifa != nullptr. "
     "Unable to find address for: eth1", "gloo-device-address"),
])
def test_causes_in_retried_categories_that_a_retry_meets_again_are_not_retried(tmp_path: Path, line: str, rule: str):
    from monitor.diagnosis.catalogue import load_catalogue
    from monitor.diagnosis.diagnose import diagnose_paths

    log = tmp_path / "job.log"
    log.write_text(line + "\n")
    found = diagnose_paths([log], load_catalogue(include_user=False))
    assert found.root_cause is not None and found.root_cause.rule == rule
    decision = decide(found, exit_code=1, attempt=1, max_restarts=5)
    assert not decision.retry and "a retry meets the same cause" in decision.reason


def test_submitit_timing_out_is_a_time_limit_a_retry_does_not_lengthen():
    timed_out = finding("slurm_event", title="SLURM stopped the job (timed-out): submitit caught SIGUSR2 on n1",
                        case="timed-out")
    decision = decide(diagnosis(timed_out), exit_code=1, attempt=1, max_restarts=5)
    assert not decision.retry and "does not give more time" in decision.reason
