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
