"""Whole logs for the services and nodes rules audited against their libraries' own format strings
(#34): which finding becomes the root cause, in which category, naming which rank, where the
rule examples only show that a rule matches one line. Every text is written from the source's
format string (SLURM's slurmstepd/srun, wandb, XLA's coordination service, TensorFlow, Ray)."""

from __future__ import annotations

from pathlib import Path

from diagnosis_helpers import diagnosed_root


def test_a_time_limit_line_wrapped_at_80_columns_is_still_slurms_time_limit(tmp_path: Path) -> None:
    """slurmstepd's "*** %s ON %s CANCELLED AT %s DUE TO TIME LIMIT ***" cut by a terminal's wrap."""
    root = diagnosed_root(tmp_path, (
        "epoch 3 step 1200 loss 2.113\n"
        "slurmstepd: error: *** JOB 81234 ON gpu-node-12 CANCELLED AT 2024-03-02T10:00:0\n"
        "0 DUE TO TIME LIMIT ***\n"
    ))
    assert (root["rule"], root["category"]) == ("slurm-cancelled", "slurm_event")
    assert root["title"] == "SLURM ended the job on its node: TIME LIMIT"
    assert "--signal=USR1@300" in root["remedy"]


def test_a_cancellation_due_to_node_failure_is_a_node_failure(tmp_path: Path) -> None:
    """SIG_NODE_FAIL's text, before 15.08 with the printing node inside the reason."""
    root = diagnosed_root(tmp_path, (
        "srun: error: gpu-node-12: task 3: Killed\n"
        "slurmstepd: error: *** JOB 81234 CANCELLED AT 2014-11-02T10:00:00 DUE TO NODE gpu-node-03 FAILURE ***\n"
    ))
    assert (root["rule"], root["category"]) == ("slurm-cancelled-node-failure", "node_failure")
    assert "sacct -j 81234" in root["remedy"]
    assert "gpu-node-03 is the node that printed this" in root["remedy"]


def test_a_403_on_the_runs_entity_is_permission_not_login(tmp_path: Path) -> None:
    """wandb-core's upsert error at wandb.init, inside the traceback it ends."""
    root = diagnosed_root(tmp_path, (
        "Traceback (most recent call last):\n"
        '  File "/home/u/train.py", line 12, in <module>\n'
        '    wandb.init(project="llm", entity="my-team")\n'
        "wandb.errors.errors.CommError: failed to upsert bucket: returned error 403 Forbidden: "
        '{"errors":[{"message":"permission denied","path":["upsertBucket"]}],"data":{"upsertBucket":null}}\n'
    ))
    assert (root["rule"], root["category"]) == ("wandb-permission", "wandb")
    assert "WANDB_ENTITY" in root["remedy"]
    assert "WANDB_API_KEY" not in root["remedy"]


def test_a_short_key_in_the_new_wording_names_its_length(tmp_path: Path) -> None:
    """wbauth/validation.py check_api_key(): "API key must have 40+ characters, has {n}."."""
    root = diagnosed_root(tmp_path, "wandb.errors.errors.AuthenticationError: WANDB_API_KEY invalid: "
                           "API key must have 40+ characters, has 38.\n")
    assert root["rule"] == "wandb-auth"
    assert "The key has 38 characters instead of 40" in root["remedy"]


def test_the_wandb_service_timing_out_advises_a_longer_wait(tmp_path: Path) -> None:
    root = diagnosed_root(tmp_path, "wandb.sdk.service.service.ServiceStartTimeoutError: Timed out waiting for "
                           "wandb service to start after 30.0 seconds. Try increasing the timeout with "
                           "the `_service_wait` setting.\n")
    assert root["rule"] == "wandb-service-failed"
    assert "within 30.0 s" in root["remedy"] and "WANDB__SERVICE_WAIT=300" in root["remedy"]


def test_xla_names_the_task_that_stopped_its_heartbeats_as_the_rank(tmp_path: Path) -> None:
    root = diagnosed_root(tmp_path, (
        "I0301 09:59:00.000000  4242 coordination_service_agent.cc:100] Coordination agent has successfully connected.\n"
        "E0301 10:00:00.000000  4242 coordination_service.cc:500] UNAVAILABLE: Task /job:jax_worker/replica:0/task:5 "
        "heartbeat timeout. This indicates that the remote task has failed, got preempted, or crashed unexpectedly.\n"
    ))
    assert (root["rule"], root["category"], root["rank"]) == ("xla-task-heartbeat-lost", "node_failure", 5)


def test_a_tasks_own_crash_wins_over_xla_reporting_it_lost(tmp_path: Path) -> None:
    """The heartbeat loss is a cascade: the crash the lost task logged is the root cause."""
    root = diagnosed_root(tmp_path, (
        "Traceback (most recent call last):\n"
        '  File "/home/u/train.py", line 40, in <module>\n'
        "    state = step(state, batch)\n"
        "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 33762398024 bytes.\n"
        "jaxlib.xla_extension.XlaRuntimeError: UNAVAILABLE: The following tasks are unhealthy (stopped sending heartbeats):\n"
    ))
    assert root["category"] == "cuda_oom"


def test_ray_and_mpirun_say_a_node_where_the_line_names_none(tmp_path: Path) -> None:
    ray = diagnosed_root(tmp_path, "The node with client ID 5f0c9a has been marked dead because the monitor has "
                          "missed too many heartbeats from it.\n")
    assert ray["title"] == "Ray lost a node"
    assert ray["remedy"].startswith("A node stopped answering Ray")
    mpi = diagnosed_root(tmp_path, "PRTE has lost communication with a remote daemon.\n")
    assert (mpi["rule"], mpi["title"]) == ("mpirun-lost-daemon", "mpirun lost a node")
    assert mpi["remedy"].startswith("mpirun lost its daemon on a node")


def test_slurm_refusing_to_start_the_step_says_so_with_the_advice_for_its_reason(tmp_path: Path) -> None:
    # src/api/step_launch.c "Task launch for %ps failed on node %s: %m", %m = ESLURMD_CREDENTIAL_EXPIRED.
    root = diagnosed_root(tmp_path, "srun: error: Task launch for StepId=881.0 failed on node gpu-node-07: Job credential expired\n")
    assert root["category"] == "slurm_event" and root["rule"] == "slurm-launch-failed" and root["rank"] is None
    assert "step StepId=881.0 on gpu-node-07" in root["remedy"] and "clocks" in root["remedy"]
    assert "SLURM_MEM_PER" not in root["remedy"] and "--overlap" not in root["remedy"]
    # src/common/slurm_opt.c: the allocation's variables beside srun's own option.
    fatal = diagnosed_root(tmp_path, "srun: fatal: SLURM_MEM_PER_CPU, SLURM_MEM_PER_GPU, and SLURM_MEM_PER_NODE are mutually exclusive.\n")
    assert "which overrides them" in fatal["remedy"] and "clocks" not in fatal["remedy"]


def test_submitit_catching_slurms_signal_says_preempted_or_timed_out_and_whether_it_requeued(tmp_path: Path) -> None:
    # submitit/core/job_environment.py checkpoint_and_try_requeue and slurm/slurm.py _requeue.
    root = diagnosed_root(tmp_path, (
        "submitit INFO (2024-01-02 03:04:05,000) - Job has timed out. Ran 54 minutes out of requested 60 minutes.\n"
        "submitit WARNING (2024-01-02 03:04:05,001) - Caught signal SIGUSR2 on gpu-node-03: this job is timed-out.\n"
        "submitit INFO (2024-01-02 03:04:05,100) - Job not requeued because: timed-out and not checkpointable.\n"
    ))
    assert (root["rule"], root["category"], root["rank"]) == ("submitit-preempted", "slurm_event", None)
    assert root["title"] == "SLURM stopped the job (timed-out): submitit caught SIGUSR2 on gpu-node-03"
    assert "did not requeue the job: timed-out and not checkpointable." in root["remedy"]
    assert "requeued job" not in root["remedy"] and "timeout_min" in root["remedy"]
