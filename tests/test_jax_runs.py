"""Real two-process JAX jobs on the CPU (tests/data/jax_runs): a process's own failure, not the
coordination service's later report of the processes that did not come, is the cause."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.diagnosis_helpers import diagnose_json

DATA = Path(__file__).parent / "data" / "jax_runs"


@pytest.mark.parametrize(("case", "category", "rank", "rule"), [
    # The KeyError came 16 s before process 0's shutdown barrier timed out ("# of tasks that
    # reached the barrier: 1/2"): the barrier's report is of the process that did not come.
    ("eval-split-keyerror-p1", "python_exception", 1, "python-exception"),
    # Process 0 raised before it started the service; process 1 then failed to register with it.
    ("env-report-before-init-p0", "python_exception", 0, "python-exception"),
    # Process 0 could not bind the coordinator's port; process 1 then failed to register.
    ("coordinator-port-dashboard-p0", "port_in_use", None, "xla-coordinator-bind-failed"),
    # Killed with no word of its own: the coordinator's "Task 1 heartbeat timeout" (JAX 0.10 names
    # a task by its number) names the process the other lost, not gloo's lost connection.
    ("rss-watchdog-sigkill-p1", "node_failure", 1, "xla-task-heartbeat-lost"),
])
def test_the_failing_process_is_the_cause(case, category, rank, rule):
    root = diagnose_json("--no-user-rules", str(DATA / f"{case}.log"))["root_cause"]
    assert (root["category"], root["rank"], root["rule"]) == (category, rank, rule)
