"""Launches that never started, jobs interrupted or losing a node: whole logs written from each
tool's own text (Open MPI/PRRTE's help files, OpenSSH, CPython, mpi-operator, Determined,
Lightning), with the remedy line that fits the case and not the others."""

from __future__ import annotations

from pathlib import Path

from diagnosis_helpers import diagnosed_root


ORTE_BOX = ("--------------------------------------------------------------------------\n"
            "ORTE was unable to reliably start one or more daemons.\n"
            "This usually is caused by:\n\n"
            "* not finding the required libraries and/or binaries on\n"
            "  one or more nodes. Please check your PATH and LD_LIBRARY_PATH\n")


def test_mpirun_that_could_not_start_its_daemons_says_which_cause_the_shell_printed(tmp_path: Path) -> None:
    missing = diagnosed_root(tmp_path, "bash: orted: command not found\n" + ORTE_BOX)
    assert (missing["category"], missing["rule"], missing["rank"]) == ("launcher", "mpirun-daemons-not-started", None)
    assert "mpirun --prefix" in missing["remedy"] and "ssh -p" not in missing["remedy"]
    refused = diagnosed_root(tmp_path, "ssh: connect to host 10.0.0.12 port 50000: Connection refused\n\n" + ORTE_BOX)
    assert "ssh -p <port> <host> hostname" in refused["remedy"] and "--prefix" not in refused["remedy"]
    assert "resolve" not in refused["remedy"]


def test_an_ssh_failure_of_other_work_is_no_launch_failure(tmp_path: Path) -> None:
    # pip installing from git over ssh, with no mpirun in sight.
    assert diagnosed_root(tmp_path, "ssh: Could not resolve hostname github.com: Temporary failure in name resolution\n"
                           "fatal: Could not read from remote repository.\nstep 10 loss 2.1\n") is None


def test_a_bare_keyboard_interrupt_is_a_stop_and_gives_way_to_an_earlier_error(tmp_path: Path) -> None:
    interrupted = ("Traceback (most recent call last):\n"
                   '  File "/home/u/train.py", line 40, in <module>\n'
                   "    batch = next(loader)\n"
                   "KeyboardInterrupt\n")
    root = diagnosed_root(tmp_path, interrupted)
    assert (root["category"], root["rule"]) == ("stopped", "python-interrupted")
    assert "where it was waiting" in root["remedy"]
    # A rank that failed first stays the cause.
    root = diagnosed_root(tmp_path, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n" + interrupted)
    assert root["category"] == "cuda_oom"


def test_a_scheduler_losing_a_workers_node_is_a_node_failure(tmp_path: Path) -> None:
    # mpi-operator's condition message and Determined's AgentFailed failure type.
    evicted = diagnosed_root(tmp_path, "  - lastTransitionTime: \"2024-05-01T10:00:00Z\"\n    message: 1/8 workers are evicted\n"
                              "    reason: MPIJobEvicted\n")
    assert (evicted["category"], evicted["rank"]) == ("node_failure", None)
    assert "1 of its 8 worker pods evicted" in evicted["remedy"] and "Determined" not in evicted["remedy"]
    agent = diagnosed_root(tmp_path, "allocation failed due to agent failure: agent failed while the container was running\n")
    assert agent["category"] == "node_failure" and "max_restarts" in agent["remedy"]


def test_lightning_refusing_a_process_strategy_in_a_notebook_is_a_launch_error(tmp_path: Path) -> None:
    root = diagnosed_root(tmp_path, "MisconfigurationException: `Trainer(strategy='ddp')` is not compatible with an interactive "
                           "environment. Run your code as a script, or choose a notebook-compatible strategy: "
                           "`Trainer(strategy='ddp_notebook')`.\n")
    assert (root["category"], root["title"]) == (
        "launcher", "Lightning will not start 'ddp' from a notebook or an interactive shell")


def test_an_agent_losing_the_rendezvous_store_mid_run_is_a_lost_node_not_a_rendezvous(tmp_path: Path) -> None:
    # torch dynamic_rendezvous.py _keep_alive: the store was reachable at the start.
    root = diagnosed_root(tmp_path, (
        "WARNING:torch.distributed.elastic.rendezvous.dynamic_rendezvous:The node 'worker-1_3427_0' has failed to "
        "send a keep-alive heartbeat to the rendezvous 'job7' due to an error of type RendezvousConnectionError.\n"
        "WARNING:torch.distributed.elastic.multiprocessing.api:Sending process 3494 closing signal SIGTERM\n"))
    assert (root["category"], root["rule"]) == ("node_failure", "rendezvous-store-lost")
    assert "--rdzv-endpoint host" in root["remedy"]
    # At the start, the same error type is the rendezvous failing.
    root = diagnosed_root(tmp_path, "torch.distributed.elastic.rendezvous.api.RendezvousConnectionError: The connection to the "
                           "C10d store has failed. See inner exception for details.\n")
    assert root["category"] == "rendezvous_timeout"


def test_a_cuda_failure_inside_nccl_gives_the_advice_for_its_error_only(tmp_path: Path) -> None:
    # nccl src/include/checks.h CUDACHECK: WARN("Cuda failure '%s'", cudaGetErrorString(err)).
    nvls = diagnosed_root(tmp_path, "node1:812:812 [0] transport/nvls.cc:245 NCCL WARN Cuda failure 'operation not supported'\n")
    assert (nvls["category"], nvls["rule"]) == ("nccl_error", "nccl-cuda-failure")
    assert "NCCL_NVLS_ENABLE=0" in nvls["remedy"] and "driver is older" not in nvls["remedy"]
    init = diagnosed_root(tmp_path, "node1:812:812 [0] init.cc:426 NCCL WARN Cuda failure 2 'initialization error'\n")
    assert "driver is older" in init["remedy"] and "NCCL_NVLS_ENABLE" not in init["remedy"]
    assert '"initialization error"' in init["remedy"].splitlines()[0]


def test_submitit_with_only_its_requeue_line_renders_a_whole_title(tmp_path: Path) -> None:
    root = diagnosed_root(tmp_path, "submitit INFO (2022-07-12 04:18:45,912) - Requeued job 60601445 (3 remaining timeouts)\n")
    assert root["title"] == "SLURM stopped the job (signalled): submitit caught its signal on a node"
    assert "requeued job 60601445 (3 timeouts left)" in root["remedy"] and "?" not in root["title"]


def test_the_forwarded_stop_and_the_time_between_speak_chinese() -> None:
    from monitor.diagnosis.root_cause import _later, as_requested_stop
    from monitor.model import Finding

    stop = Finding(rule="torchrun-stopped-by-signal", category="stopped", severity="error", role="cascade",
                   title="torchrun was stopped by signal 15 from outside the job")
    said = as_requested_stop(stop, "zh")
    assert said is not None and said.severity == "info" and said.title.startswith("启动器收到了停止请求")
    first = Finding(rule="a", category="hang", severity="info", role="root", title="t", first_seen=1000.0)
    assert _later(first, Finding(rule="b", category="stopped", severity="error", role="root", title="t",
                                 first_seen=1600.0), "zh") == "在 10 分钟后"
    assert _later(first, Finding(rule="b", category="stopped", severity="error", role="root", title="t",
                                 first_seen=1030.0), "en") == "30 s later, "


def test_a_lost_store_gives_way_to_a_ranks_own_error(tmp_path: Path) -> None:
    # The agent holding the store can leave because its own worker failed: that failure is the cause.
    root = diagnosed_root(tmp_path, (
        "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n"
        "WARNING:torch.distributed.elastic.rendezvous.dynamic_rendezvous:The node 'worker-1_3427_0' has failed to "
        "send a keep-alive heartbeat to the rendezvous 'job7' due to an error of type RendezvousConnectionError.\n"))
    assert root["category"] == "cuda_oom"


def test_slurm_failing_to_exec_the_program_says_the_fix_for_its_errno(tmp_path: Path) -> None:
    """slurmstepd's error("execve(): %s: %m") (mgr.c exec_task) and its bad-interpreter form."""
    step = "srun: error: gpu-07: task 0: Exited with exit code 2\n"
    missing = diagnosed_root(tmp_path, "slurmstepd: error: execve(): torchrun: No such file or directory\n" + step)
    assert (missing["category"], missing["rule"]) == ("launcher", "srun-exec-failed")
    assert missing["title"] == "SLURM could not start the job's program: No such file or directory"
    assert "looked up in the PATH" in missing["remedy"] and "chmod +x" not in missing["remedy"]
    denied = diagnosed_root(tmp_path, "slurmstepd: error: execve(): run.sh: Permission denied\n" + step)
    assert "chmod +x" in denied["remedy"] and "PATH" not in denied["remedy"]
    interpreter = diagnosed_root(
        tmp_path, "slurmstepd: error: execve(): bad interpreter(/opt/conda/bin/python): No such file or directory\n")
    assert "#! line of the script names /opt/conda/bin/python" in interpreter["remedy"]
    assert "?" not in interpreter["title"]


def test_a_loss_flag_or_a_best_so_far_is_no_nan_loss_and_a_sum_of_losses_is(tmp_path: Path) -> None:
    healthy = "step 1 loss 2.3\nloss_is_nan: False\nloss_min: inf\nloss_best = inf\nstep 2 loss 2.1\n"
    assert diagnosed_root(tmp_path, healthy) is None
    diverged = diagnosed_root(tmp_path, " iter 4600  lr: 0.000100 loss_c: nan   loss_s: nan losses: nan\n")
    assert (diverged["category"], diverged["rule"]) == ("nan_loss", "nan-loss")


def test_ncclgeterrorstrings_own_hint_does_not_hide_the_rerun_advice(tmp_path: Path) -> None:
    """NCCL's error string ends "(run with NCCL_DEBUG=INFO for details)": that is no sign the job
    ran with NCCL_DEBUG set; a WARN line of NCCL's is."""
    error = "RuntimeError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details)\n"
    assert "Rerun with NCCL_DEBUG=WARN" in diagnosed_root(tmp_path, error)["remedy"]
    warned = "gpu-07:123:456 [0] NCCL WARN Call to connect returned Connection refused\n" + error
    assert "Rerun with NCCL_DEBUG=WARN" not in diagnosed_root(tmp_path, warned)["remedy"]


def test_a_tpus_memory_gets_no_gpu_preallocation_advice(tmp_path: Path) -> None:
    tpu = diagnosed_root(tmp_path, "jax.errors.JaxRuntimeError: RESOURCE_EXHAUSTED: Error loading program 'jit_step': "
                                   "Attempting to reserve 13.50G at the bottom of memory. That was not possible. "
                                   "There are 7.48G free, 0B reserved, and 7.48G reservable.\n")
    assert (tpu["category"], tpu["rule"]) == ("cuda_oom", "xla-oom")
    assert "The TPU had 7.48G free." in tpu["remedy"] and "PREALLOCATE" not in tpu["remedy"]
    gpu = diagnosed_root(tmp_path, "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while "
                                   "trying to allocate 7406166528 bytes.\n")
    assert "XLA_PYTHON_CLIENT_PREALLOCATE=false" in gpu["remedy"]


def test_an_empty_nproc_per_node_is_said_as_empty_with_its_remedy(tmp_path: Path) -> None:
    """torch/distributed/run.py determine_local_world_size: int("") fails, then
    ValueError(f"Unsupported nproc_per_node value: {nproc_per_node}"), an unset shell variable's
    value: empty is the value, not a field the log lacks (the remedy was left out whole)."""
    root = diagnosed_root(tmp_path, "ValueError: Unsupported nproc_per_node value: \n")
    assert root["title"] == "torchrun cannot read --nproc-per-node (an empty value)"
    assert 'it got "", so no worker started' in root["remedy"] and "unset shell variable" in root["remedy"]
    # The same paste with its frame, source line and first exception run together on one line.
    glued = diagnosed_root(tmp_path, (
        '  File "/env/lib/python3.7/site-packages/torch/distributed/run.py", line 564, in determine_local_world_size'
        "    return int(nproc_per_node)ValueError: invalid literal for int() with base 10: ''\n"))
    assert (glued["rule"], glued["category"]) == ("torchrun-bad-nproc-per-node", "launcher")
