"""Whole logs for the rules of the third audit against the libraries' own format strings (#34):
hangs (ProcessGroupNCCL's heartbeat monitor, file locks), JAX/XLA and TensorFlow between hosts, the
engines and actors of RL training (SGLang, Ray), the fabric under NCCL and MPI (EFA, UCX, Open MPI),
and what launchers print as they stop. Each text is a probe an auditor wrote from the source's format
string; the test says which finding becomes the root cause, in which category, naming which rank."""

from __future__ import annotations

from pathlib import Path

import pytest

from diagnosis_helpers import diagnosed_root

CASES = [
    # XLA's client.h: a process whose coordinator stopped answering its heartbeats.
    pytest.param("F0315 09:12:44.318806   48211 client.h:84] Terminating process because of missing heartbeat response from the coordinator. This most likely indicates that the coordinator task died; see the coordinator's task logs for more details. Status: DEADLINE_EXCEEDED: Deadline Exceeded\n",
                 'xla-coordinator-lost', 'node_failure', None, id='xla-coordinator-lost-04'),
    # coordination_service.cc: a task that came back as a new process.
    pytest.param('E0412 03:41:05.117702   91501 coordination_service.cc:560] /job:jax_worker/replica:0/task:5 unexpectedly tried to connect with a different incarnation. It has likely restarted.\n',
                 'xla-task-restarted', 'node_failure', 5, id='xla-task-restarted-19'),
    # base_collective_executor.cc's DEADLINE_EXCEEDED, raised as a Graph execution error.
    pytest.param('Traceback (most recent call last):\n  File "/home/user/train.py", line 88, in <module>\n    model.fit(dataset, epochs=10, steps_per_epoch=500)\n  File "/usr/local/lib/python3.10/site-packages/keras/utils/traceback_utils.py", line 70, in error_handler\n    raise e.with_traceback(filtered_tb) from None\n  File "/usr/local/lib/python3.10/site-packages/tensorflow/python/eager/execute.py", line 52, in quick_execute\n    tensors = pywrap_tfe.TFE_Py_Execute(ctx._handle, device_name, op_name,\ntensorflow.python.framework.errors_impl.DeadlineExceededError: Graph execution error:\n\nCollective has timed out during execution.\n\t [[{{node CollectiveReduceV2}}]] [Op:__inference_train_function_5678]\n',
                 'tf-collective-timeout', 'hang', None, id='tf-collective-timeout-14'),
    # collective_all_reduce_strategy.py's health check.
    pytest.param('ERROR:tensorflow:Cluster check alive failed, /job:worker/replica:0/task:1 is down, aborting collectives: Deadline Exceeded\n',
                 'tf-collective-peer-down', 'node_failure', None, id='tf-collective-peer-down-16'),
    # ProcessGroupNCCL's heartbeat monitor before it kills the process.
    pytest.param('[E ProcessGroupNCCL.cpp:1154] [Rank 5] monitoring thread detects no heartbeat and will finally kill the process! terminateProcessGroup_0 collectiveDebugInfoMode_0\n',
                 'nccl-watchdog-stuck', 'hang', 5, id='nccl-watchdog-stuck-04'),
    # the heartbeat monitor that cannot take the GIL to print the stacks.
    pytest.param('[rank1]:[E ProcessGroupNCCL.cpp:1201] Could not acquire GIL within 300 ms on exit, possible GIL induced hang\n',
                 'nccl-watchdog-stuck', 'hang', 1, id='nccl-watchdog-stuck-03'),
    # a rank told through the store that another rank timed out.
    pytest.param('[rank2]:[E ProcessGroupNCCL.cpp:1294] [PG 0 Rank 2] Received a global timeout from another rank and will start to dump the debug info.\n',
                 'nccl-global-timeout-heard', 'nccl_timeout', 2, id='nccl-global-timeout-heard-06'),
    # huggingface_hub's WeakFileLock, the log ending while it waits.
    pytest.param('still waiting to acquire lock on /root/.cache/huggingface/hub/.locks/models--meta-llama--Llama-3.1-8B/0b5e8e1f6c2d3a4b5c6d7e8f9a0b1c2d3e4f5a6b.lock\nstill waiting to acquire lock on /root/.cache/huggingface/hub/.locks/models--meta-llama--Llama-3.1-8B/0b5e8e1f6c2d3a4b5c6d7e8f9a0b1c2d3e4f5a6b.lock\nstill waiting to acquire lock on /root/.cache/huggingface/hub/.locks/models--meta-llama--Llama-3.1-8B/0b5e8e1f6c2d3a4b5c6d7e8f9a0b1c2d3e4f5a6b.lock\n',
                 'file-lock-wait', 'hang', None, id='file-lock-wait-17'),
    # SGLang's KV cache pool with no memory left, under its scheduler's report.
    pytest.param('[2025-03-29 18:56:25 TP0] Scheduler hit an exception: Traceback (most recent call last):\n  File "/usr/local/lib/python3.10/dist-packages/sglang/srt/model_executor/model_runner.py", line 1002, in init_memory_pool\n    raise RuntimeError(\nRuntimeError: Not enough memory. Please try to increase --mem-fraction-static.\n',
                 'sglang-kv-pool-memory', 'cuda_oom', None, id='sglang-kv-pool-memory-11'),
    # Ray's LocalRayletDiedError.
    pytest.param('Traceback (most recent call last):\n  File "/usr/local/lib/python3.10/dist-packages/ray/_private/client_mode_hook.py", line 105, in wrapper\n    return func(*args, **kwargs)\n  File "/usr/local/lib/python3.10/dist-packages/ray/worker.py", line 1811, in get\n    raise value\nray.exceptions.LocalRayletDiedError: The task\'s local raylet died. Check raylet.out for more information.\n',
                 'ray-node-dead', 'node_failure', None, id='ray-node-dead-03'),
    # aws-ofi-nccl's completion error with its security-group banner.
    pytest.param('\nip-172-31-40-17:18830:19112 [0] virtual void PlatformAWS::log_cq_error(void*, fid_cq*, fi_cq_err_entry*, const char*):1047 NCCL WARN NET/OFI Request 0x7f21d8a3c0c0 (cm) completed with error: err: 113, flags: 1026, prov_errno: 15, strerror: Unreachable remote - never received a response My EFA addr: fi_addr_efa://[fe80::8f:3aff:fe21:9c4d]:0:1785634931 My host id: i-0a1b2c3d4e5f60718 Peer EFA addr: fi_addr_efa://[fe80::9c:11ff:fe0e:27a1]:0:402217655 Peer host id: i-0f9e8d7c6b5a49382, len: 0\n\n**********************************************************************\n* This error indicates that the security group on either this instance or the peer instance\n* is not setup correctly.  For more information, please see the AWS documentation at\n* https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-start-nccl.html#nccl-start-base-setup\n**********************************************************************\n',
                 'fabric-transport-error', 'nccl_error', None, id='fabric-transport-error-12'),
    # Open MPI's openib BTL polling a completion error.
    pytest.param('[[54112,1],3][btl_openib_component.c:3648:handle_wc] from gpu-node-01 to: gpu-node-02 error polling LP CQ with status RETRY EXCEEDED ERROR status number 12 for wr_id 2b5b7c0 opcode 0  vendor error 129 qp_idx 0\n',
                 'fabric-transport-error', 'nccl_error', None, id='fabric-transport-error-18'),
    # UCX's memory registration under a low locked-memory limit.
    pytest.param("[1724226801.077120] [gpu-node-03:41233:0]           ib_md.c:316  UCX  ERROR ibv_reg_mr(address=0x7f2c40000000, length=268435456, access=0xf) failed: Cannot allocate memory : Please set max locked memory (ulimit -l) to 'unlimited' (current: 65536 kbytes)\n",
                 'nccl-ib-memlock', 'nccl_error', None, id='nccl-ib-memlock-17'),
    # DeepSpeed's launcher killing its children for a SIGTERM it received.
    pytest.param('[2025-03-14 09:41:27,518] [INFO] [launch.py:335:sigkill_handler] Killing subprocess 48211\n[2025-03-14 09:41:27,519] [INFO] [launch.py:335:sigkill_handler] Killing subprocess 48212\n[2025-03-14 09:41:27,731] [INFO] [launch.py:344:sigkill_handler] Main process received SIGTERM, exiting\n',
                 'deepspeed-launcher-stopped-by-signal', 'stopped', None, id='deepspeed-launcher-stopped-by-signal-16'),
    # Lightning's SLURM requeue before the time limit.
    pytest.param('Handling auto-requeue signal: 10\nrequeing job 4412093...\nRequeued SLURM job: 4412093\n',
                 'lightning-slurm-requeue', 'slurm_event', None, id='lightning-slurm-requeue-20'),
]


@pytest.mark.parametrize(("text", "rule", "category", "rank"), CASES)
def test_the_librarys_own_message_names_its_failure(tmp_path: Path, text: str, rule: str, category: str,
                                                    rank: int | None) -> None:
    root = diagnosed_root(tmp_path, text)
    assert (root["rule"], root["category"], root["rank"]) == (rule, category, rank)
    # Every field the title names was found: no template braces or empty fallbacks left in it.
    assert "{" not in root["title"] and "}" not in root["title"]
