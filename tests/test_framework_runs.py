"""Real two-process jobs of JAX, TensorFlow and Ray Train on the CPU (tests/data/framework_runs): a
process's own failure is the cause, not what its peers then report of losing it, and the rank is
the one the framework's or the launcher's words give."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.diagnosis_helpers import diagnose_json

DATA = Path(__file__).parent / "data" / "framework_runs"


@pytest.mark.parametrize(("case", "category", "rank", "rule"), [
    # The KeyError came 16 s before process 0's shutdown barrier timed out ("# of tasks that
    # reached the barrier: 1/2"): the barrier's report is of the process that did not come.
    ("jax-eval-split-keyerror", "python_exception", 1, "python-exception"),
    # Process 0 raised before it started the service; process 1 then failed to register with it.
    ("jax-env-report-before-init", "python_exception", 0, "python-exception"),
    # Process 0 could not bind the coordinator's port; process 1 then failed to register.
    ("jax-coordinator-port-dashboard", "port_in_use", None, "xla-coordinator-bind-failed"),
    # Killed with no word of its own: the coordinator's "Task 1 heartbeat timeout" (JAX 0.10 names
    # a task by its number) names the process the other lost, not gloo's lost connection.
    ("jax-rss-watchdog-sigkill", "node_failure", 1, "xla-task-heartbeat-lost"),
    # Worker 1's KeyError (UnknownError around it), then worker 0's "Collective ops is aborted by:
    # Socket closed"; each line behind the launcher's "[workerN] " tag.
    ("tf-generator-keyerror", "python_exception", 1, "python-exception"),
    # "!!! Detected Infinity or NaN in output 0 of graph op "Square"": enable_check_numerics' own words.
    ("tf-keras-fit-check-numerics", "nan_loss", 0, "nan-detected-by-framework"),
    # py_checkpoint_reader's "IndexError: Read less bytes than requested" in a checkpoint's restore.
    ("tf-resume-truncated-ckpt", "corrupt_checkpoint", 0, "tf-checkpoint-short-read"),
    # "UnknownError: Could not start gRPC server" after gRPC's "Failed to add port to server".
    ("tf-chief-port-taken", "port_in_use", 0, "tf-grpc-server-bind-failed"),
    # Ray Train's WorkerGroupError reports "[Rank 1 Error Snippet]:" and rank 1's traceback.
    ("ray-empty-val-shard", "python_exception", 1, "python-exception"),
    # Rank 1's gloo timeout in its snippet; rank 0 had stopped early and never called the all_reduce.
    # Ray's controller line "Error: Training failed due to worker errors:" is no exception.
    ("ray-early-stop-allreduce", "gloo_timeout", 0, "gloo-timeout"),
])
def test_the_failing_process_is_the_cause(case, category, rank, rule):
    root = diagnose_json("--no-user-rules", str(DATA / f"{case}.log"))["root_cause"]
    assert (root["category"], root["rank"], root["rule"]) == (category, rank, rule)
