"""Whole logs for the rules of the third and fourth audits against the libraries' own format
strings (#34): hangs (ProcessGroupNCCL's heartbeat monitor, file locks), JAX/XLA and TensorFlow
between hosts, the engines and actors of RL training (SGLang, Ray), the fabric under NCCL and MPI
(EFA, UCX, Open MPI), what launchers print as they stop, Kubernetes' schedulers and operators,
Megatron/NeMo and NVIDIA's fault tolerance, DeepSpeed's fp16 and inference messages, Ascend
(torch_npu, HCCL, MindSpore), PaddlePaddle, ROCm and PyTorch 1.x. Each text is a
probe an auditor wrote from the source's format string; the test says which finding becomes the
root cause, in which category, naming which rank. Last, the texts that say which rank failed
(torchrun's summary and prefixes, Lightning's, srun's, XLA's)."""

from __future__ import annotations

from pathlib import Path

import pytest

import regex

from diagnosis_helpers import diagnosed_root

TEMPLATE = regex.compile(r"\{\w+(?:\|[^{}]*)?\}")

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
                 'tf-collective-peer-down', 'node_failure', 1, id='tf-collective-peer-down-16'),
    # ProcessGroupNCCL's heartbeat monitor before it kills the process.
    pytest.param('[E ProcessGroupNCCL.cpp:1154] [Rank 5] monitoring thread detects no heartbeat and will finally kill the process! terminateProcessGroup_0 collectiveDebugInfoMode_0\n',
                 'nccl-watchdog-stuck', 'hang', 5, id='nccl-watchdog-stuck-04'),
    # a rank told through the store that another rank timed out.
    pytest.param('[rank2]:[E ProcessGroupNCCL.cpp:1294] [PG 0 Rank 2] Received a global timeout from another rank and will start to dump the debug info.\n',
                 'nccl-global-timeout-heard', 'nccl_timeout', 2, id='nccl-global-timeout-heard-06'),
    # huggingface_hub's WeakFileLock, the log ending while it waits.
    pytest.param('Still waiting to acquire lock on /root/.cache/huggingface/hub/.locks/models--meta-llama--Llama-3.1-8B/0b5e8e.lock (elapsed: 10.0 seconds)\nStill waiting to acquire lock on /root/.cache/huggingface/hub/.locks/models--meta-llama--Llama-3.1-8B/0b5e8e.lock (elapsed: 20.0 seconds)\n',
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
    # kubelet's eviction of a pod whose emptyDir went over its sizeLimit.
    pytest.param('Events:\n  Type     Reason   Age   From     Message\n  ----     ------   ----  ----     -------\n  Warning  Evicted  44s   kubelet  Usage of EmptyDir volume "dshm" exceeds the limit "16Gi". \n',
                 'k8s-evicted-disk', 'disk_full', None, id='k8s-evicted-disk-05'),
    # the kubelet's OOM watcher's SystemOOM event.
    pytest.param('LAST SEEN   TYPE      REASON      OBJECT            MESSAGE\n2m10s       Warning   SystemOOM   node/gpu-node-7   System OOM encountered, victim process: python, pid: 48211\n',
                 'host-oom-kill', 'host_oom', None, id='host-oom-kill-10'),
    # Kueue preempting the workload.
    pytest.param('LAST SEEN   TYPE     REASON                 OBJECT                                MESSAGE\n8s          Normal   EvictedDueToPreempted  workload/pytorchjob-llama-ft-3f2a1    Preempted to accommodate a workload (UID: 6b1c0e7a-2f1d-4c55-9a0e-51f0c2d9e8a4, JobUID: 9d2e4f10-7c3b-4a8e-b6d1-0f5e3a2c7b19) due to prioritization in the ClusterQueue; preemptor path: /team-a; preemptee path: /team-a\n8s          Normal   Preempted              workload/pytorchjob-llama-ft-3f2a1    Preempted to accommodate a workload (UID: 6b1c0e7a-2f1d-4c55-9a0e-51f0c2d9e8a4, JobUID: 9d2e4f10-7c3b-4a8e-b6d1-0f5e3a2c7b19) due to prioritization in the ClusterQueue; preemptor path: /team-a; preemptee path: /team-a; preemptor effective priority: 1000 (base: 1000, boost: 0); preemptee effective priority: 100 (base: 100, boost: 0)\n',
                 'k8s-job-stopped-by-scheduler', 'stopped', None, id='k8s-job-stopped-by-scheduler-11'),
    # Kueue evicting a workload whose node failed.
    pytest.param('LAST SEEN   TYPE     REASON                    OBJECT                              MESSAGE\n20s         Normal   EvictedDueToNodeFailures  workload/pytorchjob-llama-ft-3f2a1  Workload was evicted as there was no replacement for unhealthy node(s): gpu-node-7\n',
                 'scheduler-worker-lost', 'node_failure', None, id='scheduler-worker-lost-13'),
    # a node whose kubelet stopped posting its status.
    pytest.param('Conditions:\n  Type             Status    LastHeartbeatTime                 LastTransitionTime                Reason              Message\n  ----             ------    -----------------                 ------------------                ------              -------\n  MemoryPressure   Unknown   Fri, 14 Mar 2025 10:02:11 +0000   Fri, 14 Mar 2025 10:06:52 +0000   NodeStatusUnknown   Kubelet stopped posting node status.\n  DiskPressure     Unknown   Fri, 14 Mar 2025 10:02:11 +0000   Fri, 14 Mar 2025 10:06:52 +0000   NodeStatusUnknown   Kubelet stopped posting node status.\n  PIDPressure      Unknown   Fri, 14 Mar 2025 10:02:11 +0000   Fri, 14 Mar 2025 10:06:52 +0000   NodeStatusUnknown   Kubelet stopped posting node status.\n  Ready            Unknown   Fri, 14 Mar 2025 10:02:11 +0000   Fri, 14 Mar 2025 10:06:52 +0000   NodeStatusUnknown   Kubelet stopped posting node status.\n',
                 'scheduler-worker-lost', 'node_failure', None, id='scheduler-worker-lost-18'),
    # Megatron's rerun machine reproducing a NaN on the same GPU.
    pytest.param("ERROR:megatron.core.rerun_state_machine:Rank 10, node gpu-node-007, device 2, iteration #5120: First rerun: unexpected result is reproducible within the tolerance (tensor(nan, device='cuda:2') = tensor(nan, device='cuda:2')). Need to rerun on a different GPU to verify correctness.!\nWARNING:megatron.core.rerun_state_machine:Saving a checkpoint and exiting now. Please resume the job from the checkpoint to rerun the last iteration and establish a diagnostic\n",
                 'megatron-rerun-reproducible', 'nan_loss', 10, id='megatron-rerun-reproducible-05'),
    # Megatron's rerun machine finding the first GPU computed wrong.
    pytest.param("WARNING:megatron.core.rerun_state_machine:Second rerun: unexpected result is not reproducible on a different GPU, therefore was likely incorrect (tensor(5.2188, device='cuda:6') != tensor(nan, device='cuda:2'))\nERROR:megatron.core.rerun_state_machine:Rank 10, node gpu-node-012, device 6, iteration #5120: Possible persistent error!!\nWARNING:megatron.core.rerun_state_machine:Exiting now. A checkpoint at the last iteration already exists if further examination is needed\n",
                 'megatron-rerun-gpu-fault', 'gpu_hardware', None, id='megatron-rerun-gpu-fault-06'),
    # Megatron's exit-signal handler.
    pytest.param('[exiting program after receiving SIGTERM.] datetime: 2025-03-14 02:17:45.118204 \n',
                 'megatron-exit-on-signal', 'stopped', None, id='megatron-exit-on-signal-07'),
    # Megatron's tracker file holding no iteration.
    pytest.param('ERROR: Invalid metadata file /lustre/ckpts/gpt3-8b/latest_checkpointed_iteration.txt. Exiting\n',
                 'megatron-tracker-file-invalid', 'corrupt_checkpoint', None, id='megatron-tracker-file-invalid-10'),
    # NeMo refusing to resume from an unfinished checkpoint.
    pytest.param('Traceback (most recent call last):\n  File "/opt/NeMo/nemo/lightning/resume.py", line 225, in _find_trainer_ckpt_path\n    raise ValueError(\nValueError: Last checkpoint is unfinished and cannot be used to resume the training. Please remove the checkpoint manually to avoid unexpected cosequences, such as restarting from scratch. Hint: Iteration number can be added to the checkpoint name pattern to maximize chance that there is at least one finished last checkpoint to resume from.\n',
                 'nemo-last-checkpoint-unfinished', 'corrupt_checkpoint', None, id='nemo-last-checkpoint-unfinished-14'),
    # nvidia-resiliency-ext's rank monitor missing a rank's heartbeats.
    pytest.param('2025-03-14 02:17:45,118 [WARNING] [node-017] [workload:3(3) infra:3(3)] rank_monitor_server.py:497 [Cycle 0] Did not get subsequent heartbeat. Waited 1800.00 seconds.\n',
                 'nvrx-rank-hang-detected', 'hang', None, id='nvrx-rank-hang-detected-18'),
    # DeepSpeed's plain fp16 optimizer at the loss scale floor, floats.
    pytest.param('[2025-03-14 11:02:10,219] [INFO] [logging.py:123:log_dist] [Rank 0] Overflow detected. Skipping step. Attempted loss scale: 2.0, reducing to 1.0\n[2025-03-14 11:02:11,005] [INFO] [logging.py:123:log_dist] [Rank 0] Overflow detected. Skipping step. Attempted loss scale: 1.0, reducing to 1.0\n[2025-03-14 11:02:11,792] [INFO] [logging.py:123:log_dist] [Rank 0] Overflow detected. Skipping step. Attempted loss scale: 1.0, reducing to 1.0\n[2025-03-14 11:02:12,580] [INFO] [logging.py:123:log_dist] [Rank 0] Overflow detected. Skipping step. Attempted loss scale: 1.0, reducing to 1.0\n',
                 'fp16-loss-scale-at-floor', 'nan_loss', 0, id='fp16-loss-scale-at-floor-04'),
    # DeepSpeed-Inference's workspace allocation.
    pytest.param('Requested:\t212860928\nFree:\t150994944\nTotal:\t84974239744\nTraceback (most recent call last):\n  File "/workspace/infer.py", line 58, in <module>\n    outputs = engine.module.generate(**inputs, max_new_tokens=256)\n  File "/usr/local/lib/python3.10/dist-packages/deepspeed/model_implementations/transformers/ds_transformer.py", line 143, in forward\n    self.allocate_workspace(input.size())\n  File "/usr/local/lib/python3.10/dist-packages/deepspeed/model_implementations/transformers/ds_transformer.py", line 97, in allocate_workspace\n    DeepSpeedTransformerInference.workspace.allocate_workspace(\n  File "/usr/local/lib/python3.10/dist-packages/deepspeed/ops/transformer/inference/op_binding/workspace.py", line 182, in allocate_workspace\n    return self.allocate_workspace_func(*args, **kwargs)\nRuntimeError: Workspace can\'t be allocated, no enough memory.\n',
                 'deepspeed-inference-workspace-oom', 'cuda_oom', None, id='deepspeed-inference-workspace-oom-17'),
    # DeepSpeed's launcher reporting exit status 1: no OOM kill (that is -9), whatever the learned
    # opinion finds the lines resemble.
    pytest.param("[2025-03-14 09:02:11,512] [INFO] [launch.py:256:main] process 48210 spawned with command: ['/usr/bin/python3', '-u', 'train.py', '--local_rank=0', '--deepspeed', 'ds_config.json']\n[2025-03-14 09:02:11,515] [INFO] [launch.py:256:main] process 48211 spawned with command: ['/usr/bin/python3', '-u', 'train.py', '--local_rank=1', '--deepspeed', 'ds_config.json']\n[2025-03-14 09:02:11,518] [INFO] [launch.py:256:main] process 48212 spawned with command: ['/usr/bin/python3', '-u', 'train.py', '--local_rank=2', '--deepspeed', 'ds_config.json']\n[2025-03-14 09:02:11,521] [INFO] [launch.py:256:main] process 48213 spawned with command: ['/usr/bin/python3', '-u', 'train.py', '--local_rank=3', '--deepspeed', 'ds_config.json']\n[2025-03-14 09:12:42,108] [INFO] [launch.py:319:sigkill_handler] Killing subprocess 48210\n[2025-03-14 09:12:42,110] [INFO] [launch.py:319:sigkill_handler] Killing subprocess 48211\n[2025-03-14 09:12:42,112] [INFO] [launch.py:319:sigkill_handler] Killing subprocess 48212\n[2025-03-14 09:12:42,113] [INFO] [launch.py:319:sigkill_handler] Killing subprocess 48213\n[2025-03-14 09:12:42,115] [ERROR] [launch.py:325:sigkill_handler] ['/usr/bin/python3', '-u', 'train.py', '--local_rank=3', '--deepspeed', 'ds_config.json'] exits with return code = 1\n",
                 'launcher-subprocess-failed', 'launcher', None, id='deepspeed-exit-1-is-no-oom'),
    # NCCL's non-fatal IB event (a port that went down and came back) does not outrank a rank's own error (the review of this audit).
    pytest.param('gpu-node-11:9021:9188 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_4:1/IB ; OOB eth0:10.0.0.1<0>\ngpu-node-11:9021:9188 [0] transport/net_ib.cc:101 NCCL WARN NET/IB : mlx5_4:1 Got async event : port error\ngpu-node-11:9021:9188 [0] transport/net_ib.cc:101 NCCL WARN NET/IB : mlx5_4:1 Got async event : port active\n[rank3]: Traceback (most recent call last):\n[rank3]:   File "/workspace/train.py", line 88, in main\n[rank3]:     batch = next(it)\n[rank3]: KeyError: \'input_ids\'\n',
                 'python-exception', 'python_exception', 3, id='ib-port-flap-then-error'),
    # every waiting rank's fault-tolerance monitor fires: the rank the timeouts waited for is still the root (the review of this audit).
    pytest.param("[rank0]:[I314 02:00:00.000000000 ProcessGroupNCCL.cpp:900] [PG ID 0 PG GUID 0(default_pg) Rank 0] ProcessGroupNCCL initialization options: size: 4, global rank: 0\n[rank1]:[I314 02:00:00.000000000 ProcessGroupNCCL.cpp:900] [PG ID 0 PG GUID 0(default_pg) Rank 1] ProcessGroupNCCL initialization options: size: 4, global rank: 1\n[rank2]:[I314 02:00:00.000000000 ProcessGroupNCCL.cpp:900] [PG ID 0 PG GUID 0(default_pg) Rank 2] ProcessGroupNCCL initialization options: size: 4, global rank: 2\n[rank3]:[I314 02:00:00.000000000 ProcessGroupNCCL.cpp:900] [PG ID 0 PG GUID 0(default_pg) Rank 3] ProcessGroupNCCL initialization options: size: 4, global rank: 3\n2025-03-14 02:07:45,000 [INFO] [node-017] [workload:0(0) infra:0(0)] rank_monitor_server.py:300 [Cycle 0] Section 'step' opened\n2025-03-14 02:07:45,000 [INFO] [node-017] [workload:1(1) infra:1(1)] rank_monitor_server.py:300 [Cycle 0] Section 'step' opened\n2025-03-14 02:07:45,000 [INFO] [node-017] [workload:2(2) infra:2(2)] rank_monitor_server.py:300 [Cycle 0] Section 'step' opened\n2025-03-14 02:07:45,000 [INFO] [node-017] [workload:3(3) infra:3(3)] rank_monitor_server.py:300 [Cycle 0] Section 'step' opened\n[rank0]:[E314 02:17:40.000000000 ProcessGroupNCCL.cpp:632] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=41, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600012 milliseconds before timing out.\n[rank1]:[E314 02:17:40.000000000 ProcessGroupNCCL.cpp:632] [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=41, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600012 milliseconds before timing out.\n[rank3]:[E314 02:17:40.000000000 ProcessGroupNCCL.cpp:632] [Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=41, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600012 milliseconds before timing out.\n2025-03-14 02:17:45,100 [WARNING] [node-017] [workload:0(0) infra:0(0)] rank_monitor_server.py:522 [Cycle 0] Section 'step' has been open for 600.10 seconds. Timeout is 600.00 seconds.\n2025-03-14 02:17:45,101 [WARNING] [node-017] [workload:1(1) infra:1(1)] rank_monitor_server.py:522 [Cycle 0] Section 'step' has been open for 600.11 seconds. Timeout is 600.00 seconds.\n2025-03-14 02:17:45,102 [WARNING] [node-017] [workload:2(2) infra:2(2)] rank_monitor_server.py:522 [Cycle 0] Section 'step' has been open for 600.12 seconds. Timeout is 600.00 seconds.\n2025-03-14 02:17:45,103 [WARNING] [node-017] [workload:3(3) infra:3(3)] rank_monitor_server.py:522 [Cycle 0] Section 'step' has been open for 600.13 seconds. Timeout is 600.00 seconds.\n",
                 'nccl-watchdog-timeout', 'nccl_timeout', 2, id='nvrx-after-nccl-timeouts'),
    # TensorFlow 2.9+'s 'Detected at node ... defined at' frames are part of its message (the review of this audit).
    pytest.param('Traceback (most recent call last):\n  File "/home/u/train.py", line 88, in <module>\n    model.fit(dataset, epochs=10)\n  File "/usr/lib/python3.10/site-packages/tensorflow/python/eager/execute.py", line 52, in quick_execute\n    tensors = pywrap_tfe.TFE_Py_Execute(ctx._handle, device_name, op_name,\ntensorflow.python.framework.errors_impl.UnavailableError: Graph execution error:\n\nDetected at node \'CollectiveReduceV2\' defined at (most recent call last):\n    File "/home/u/train.py", line 88, in <module>\n      model.fit(dataset, epochs=10)\n    File "/usr/lib/python3.10/site-packages/keras/engine/training.py", line 1650, in fit\n      tmp_logs = self.train_function(iterator)\nNode: \'CollectiveReduceV2\'\nCollective ops is aborted by: cluster check alive failed, /job:worker/replica:0/task:1 is down\nThe error could be from a previous operation. Restart your program to reset.\n\t [[{{node CollectiveReduceV2}}]] [Op:__inference_train_function_5678]\n',
                 'tf-collective-peer-down', 'node_failure', 1, id='tf-graph-detected-at'),
    # under srun --label, the worker reporting a peer down is not the one down (the review of this audit).
    pytest.param('0: Epoch 3/10\n2: Epoch 3/10\n0: ERROR:tensorflow:Cluster check alive failed, /job:worker/replica:0/task:1 is down, aborting collectives: Deadline Exceeded\n2: ERROR:tensorflow:Cluster check alive failed, /job:worker/replica:0/task:1 is down, aborting collectives: Deadline Exceeded\n',
                 'tf-collective-peer-down', 'node_failure', 1, id='tf-peer-down-labelled'),
    # a process reporting that it lost the coordinator is not the lost one (the review of this audit).
    pytest.param("3: F0315 09:12:44.318806   48211 client.h:84] Terminating process because of missing heartbeat response from the coordinator. This most likely indicates that the coordinator task died; see the coordinator's task logs for more details. Status: DEADLINE_EXCEEDED: Deadline Exceeded\n2: F0315 09:12:44.519806   48111 client.h:84] Terminating process because of missing heartbeat response from the coordinator. This most likely indicates that the coordinator task died; see the coordinator's task logs for more details. Status: DEADLINE_EXCEEDED: Deadline Exceeded\n",
                 'xla-coordinator-lost', 'node_failure', None, id='xla-coord-lost-labelled'),
    # a lost gRPC connection names no worker (the review of this audit).
    pytest.param('Collective ops is aborted by: Socket closed\n',
                 'tf-collective-peer-down', 'node_failure', None, id='tf-socket-closed'),
    # the second rerun's lines are printed on the GPU that checked the faulty one (the review of this audit).
    pytest.param("WARNING:megatron.core.rerun_state_machine:Second rerun: unexpected result is not reproducible on a different GPU, therefore was likely incorrect (tensor(5.2188, device='cuda:6') != tensor(nan, device='cuda:2'))\nERROR:megatron.core.rerun_state_machine:Rank 10, node gpu-node-012, device 6, iteration #5120: Possible persistent error!!\nWARNING:megatron.core.rerun_state_machine:Exiting now. A checkpoint at the last iteration already exists if further examination is needed\n",
                 'megatron-rerun-gpu-fault', 'gpu_hardware', None, id='megatron-second-rerun'),
    # DeepSpeed-Inference's min_out_tokens check (the review of this audit).
    pytest.param('Allocatable workspace available (1024 tokens) is less than minimum requested workspace (2048 tokens)\nTraceback (most recent call last):\n  File "/workspace/infer.py", line 58, in <module>\n    outputs = engine.module.generate(**inputs, max_new_tokens=256)\nRuntimeError: Workspace can\'t be allocated, not enough memory\n',
                 'deepspeed-inference-workspace-oom', 'cuda_oom', None, id='ds-inference-min-tokens'),
    # torch_npu's NPU function error for an AI Core exception.
    pytest.param('Traceback (most recent call last):\n  File "/home/user/train.py", line 141, in <module>\n    torch.npu.synchronize()\n  File "/usr/local/lib/python3.10/site-packages/torch_npu/npu/utils.py", line 73, in synchronize\n    return torch_npu._C._npu_synchronize()\nRuntimeError: npuSynchronizeDevice:build/CMakeFiles/torch_npu.dir/compiler_depend.ts:748 NPU function error: AclrtSynchronizeDeviceWithTimeout, error code is 507015\n[ERROR] 2025-03-12-10:21:33 (PID:41234, Device:0, RankID:3) ERR00100 PTA call acl api failed\n[Error]: The aicore execution is abnormal. \n        Rectify the fault based on the error information in the ascend log.\n',
                 'npu-kernel-exception', 'cuda_assert', None, id='npu-kernel-exception-ascend02'),
    # torch_npu's HBM multi-bit ECC fault.
    pytest.param('Traceback (most recent call last):\n  File "/home/user/train.py", line 163, in <module>\n    total_loss += loss.item()\nRuntimeError: HBM MULTI BIT ECC ERROR, \n[ERROR] 2025-03-12-10:21:33 (PID:41234, Device:3, RankID:3) ERR00100 PTA call acl api failed\n',
                 'npu-device-fault', 'gpu_hardware', None, id='npu-device-fault-ascend08'),
    # torch_npu's HCCL function error.
    pytest.param('Traceback (most recent call last):\n  File "/home/user/train.py", line 160, in <module>\n    dist.all_reduce(loss_tensor)\n  File "/usr/local/lib/python3.10/site-packages/torch/distributed/distributed_c10d.py", line 2501, in all_reduce\n    work = group.allreduce([tensor], opts)\nRuntimeError: collective:build/CMakeFiles/torch_npu.dir/compiler_depend.ts:4197 HCCL function error: ALLREDUCE, error code is 4 \n[ERROR] 2025-03-12-10:21:33 (PID:41234, Device:3, RankID:3) ERR02200 DIST call hccl api failed.\n',
                 'hccl-error', 'nccl_error', None, id='hccl-error-ascend05'),
    # MindSpore's task error whose message, under 'Ascend Error Message', is HCCL's timeout.
    pytest.param('Traceback (most recent call last):\n  File "/home/miniconda3/envs/ci/lib/python3.7/site-packages/mindspore/common/api.py", line 98, in wrapper\n    results = fn(*arg, **kwargs)\n  File "/home/miniconda3/envs/ci/lib/python3.7/site-packages/mindspore/common/api.py", line 1390, in _exec_pip\n    return self._graph_executor(args, phase)\nRuntimeError: Run task for graph:kernel_graph_1 error! The details refer to \'Ascend Error Message\'.\n\n----------------------------------------------------\n- Ascend Error Message:\n----------------------------------------------------\nEI0002: The wait execution of the Notify register times out. Reason: The Notify register has not received the Notify record from remote rank [0].base information: [streamID:[27], taskID[10], taskType[Notify Wait], tag[HcomAllReduce_6629421139219749105_0].] task information: [notify id:[0x0000000100000000], stage:[ffffffff], remote rank:[0].\nthere are(is) 1 abnormal device(s):\n        serverId[10.90.55.95], deviceId[0], Heartbeat Lost Occurred, Possible Reason: 1. Process has exited, 2. Network Disconnected\n]\n',
                 'hccl-timeout', 'nccl_timeout', None, id='hccl-timeout-ascend15'),
    # torch_npu's blocking-wait timeout of a WorkHCCL.
    pytest.param('[E compiler_depend.ts:1073] [Rank 3] Work WorkHCCL(SeqNum=5821, OpType=ALLREDUCE, NumelIn=262144, NumelOut=262144, Timeout(ms)=1800000) timed out in blocking wait (TORCH_HCCL_BLOCKING_WAIT=1 or HCCL_BLOCKING_WAIT=1).\n',
                 'hccl-timeout', 'nccl_timeout', 3, id='hccl-timeout-ascend12'),
    # Paddle's NCCL error in its C++ traceback and 'Error Message Summary'.
    pytest.param('Traceback (most recent call last):\n  File "train.py", line 31, in <module>\n    paddle.distributed.init_parallel_env()\nOSError: \n\n--------------------------------------\nC++ Traceback (most recent call last):\n--------------------------------------\n0 paddle::platform::NCCLCommContext::CreateComm(ncclUniqueId*, int, int, int, int)\n\n----------------------\nError Message Summary:\n----------------------\nExternalError: NCCL error(2), unhandled system error.  (at /paddle/paddle/fluid/platform/collective_helper.cc:86)\n',
                 'nccl-error', 'nccl_error', None, id='nccl-error-paddle04'),
    # Paddle's GPU OOM raised as MemoryError.
    pytest.param('Traceback (most recent call last):\n  File "train.py", line 142, in <module>\n    loss.backward()\nMemoryError: \n\n--------------------------------------\nC++ Traceback (most recent call last):\n--------------------------------------\n\n----------------------\nError Message Summary:\n----------------------\nResourceExhaustedError: \n\nOut of memory error on GPU 0. Cannot allocate 1.000000GB memory on GPU 0, available memory is only 612.437500MB.\n',
                 'paddle-gpu-oom', 'cuda_oom', None, id='paddle-gpu-oom-paddle17'),
    # Paddle's fleet launcher naming the aborted trainer.
    pytest.param('INFO 2022-06-14 10:41:07,904 launch_utils.py:343] terminate process group gid:41872\nINFO 2022-06-14 10:41:11,910 launch_utils.py:370] terminate all the procs\nERROR 2022-06-14 10:41:11,911 launch_utils.py:642] ABORT!!! Out of all 8 trainers, the trainer process with rank=[3] was aborted. Please check its log.\nINFO 2022-06-14 10:41:14,915 launch_utils.py:370] terminate all the procs\n',
                 'paddle-launch-trainer-failed', 'launcher', 3, id='paddle-launch-trainer-failed-paddle01'),
    # Paddle's collective watchdog.
    pytest.param('W0614 10:41:07.904123 41872 comm_task_manager.cc:170] Find timeout start but not finish task:group_key:group_0,group_ranks:[0,1,2,3,4,5,6,7],global_rank:3,local_rank:3,comm_count:1523,op:AllReduce,started:1,completed:0,numel:25165824,nranks:8\n',
                 'paddle-comm-timeout', 'nccl_timeout', 3, id='paddle-comm-timeout-paddle08'),
    # ROCm's memory fault whose reason is DRAM ECC.
    pytest.param('Memory access fault by GPU node-4 (Agent handle: 0x5581e27b9a40) on address 0x7fa8d1200000. Reason: DRAM ECC failure.\n',
                 'gpu-ecc', 'gpu_hardware', None, id='gpu-ecc-rocm03'),
    # torch on ROCm: 'HIP error: invalid device function'.
    pytest.param('Traceback (most recent call last):\n  File "/workspace/train.py", line 214, in <module>\n    main()\n  File "/workspace/train.py", line 187, in main\n    model = model.to(device)\ntorch.AcceleratorError: HIP error: invalid device function\nSearch for `hipErrorInvalidDeviceFunction\' in https://rocm.docs.amd.com/projects/HIP/en/latest/index.html for more information.\nFor more detailed error information, run with CUDA_LOG_FILE=stderr\nCompile with `TORCH_USE_HIP_DSA` to enable device-side assertions.\n',
                 'cuda-illegal-access', 'cuda_assert', None, id='cuda-illegal-access-rocm09'),
    # torch 1.x taking the process down after NCCL failures.
    pytest.param('[E ProcessGroupNCCL.cpp:325] Some NCCL operations have failed or timed out. Due to the asynchronous nature of CUDA kernels, subsequent GPU operations might run on corrupted/incomplete data. To avoid this inconsistency, we are taking the entire process down.\n',
                 'nccl-error', 'nccl_error', None, id='nccl-error-oldtorch06'),
]


@pytest.mark.parametrize(("text", "rule", "category", "rank"), CASES)
def test_the_librarys_own_message_names_its_failure(tmp_path: Path, text: str, rule: str, category: str,
                                                    rank: int | None) -> None:
    root = diagnosed_root(tmp_path, text)
    assert (root["rule"], root["category"], root["rank"]) == (rule, category, rank)
    # Every field the title and the remedy name was found: no template left in either ("{name}",
    # "{name|fallback}"; a remedy may quote a config's own braces, '"bf16": {"enabled": true}').
    assert not any(TEMPLATE.search(root[part]) for part in ("title", "remedy"))


# Which rank failed, where the log says it in the launchers' own words (the ranks audit).
RANKS = [
    # torchrun --tee's "[trainer1]:" is a local rank; the summary of the same file gives its global one.
    pytest.param('[trainer1]:Traceback (most recent call last):\n[trainer1]:  File "/workspace/train.py", line 88, in main\n[trainer1]:    logits = feats @ proj\n[trainer1]:RuntimeError: inconsistent tensor size, expected tensor [768] and src [1024] to have the same number of elements, but got 768 and 1024 elements respectively\nRoot Cause (first observed failure):\n[0]:\n  time      : 2025-03-14_09:12:41\n  host      : node-1\n  rank      : 3 (local_rank: 1)\n  exitcode  : 1 (pid: 48213) \n  error_file: <N/A>\n  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html\n============================================================\n',
                 'python-exception', 'python_exception', 3, id='tee-local-rank-made-global-by-summary'),
    # The same with the summary whole, after a peer's timeout.
    pytest.param('[default1]:Traceback (most recent call last):\n[default1]:  File "/workspace/train.py", line 88, in main\n[default1]:    logits = feats @ proj\n[default1]:RuntimeError: inconsistent tensor size\n[default0]:[E ProcessGroupNCCL.cpp:607] [Rank 8] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=41, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600012 milliseconds before timing out.\nE1121 10:00:00.000 2546 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: 1) local_rank: 1 (pid: 48213) of binary: /usr/bin/python3\nTraceback (most recent call last):\n  File "/usr/bin/torchrun", line 8, in <module>\n    sys.exit(main())\ntorch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n============================================================\ntrain.py FAILED\n------------------------------------------------------------\nFailures:\n  <NO_OTHER_FAILURES>\n------------------------------------------------------------\nRoot Cause (first observed failure):\n[0]:\n  time      : 2025-03-14_09:12:41\n  host      : node-1\n  rank      : 9 (local_rank: 1)\n  exitcode  : 1 (pid: 48213)\n  error_file: <N/A>\n  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html\n============================================================\n',
                 'python-exception', 'python_exception', 9, id='tee-local-rank-then-whole-summary'),
    # Lightning's "[rank: N] Received SIGTERM" lines of the other ranks are no part of rank 3's exception.
    pytest.param('[rank3]: Traceback (most recent call last):\n[rank3]:   File "/workspace/train.py", line 88, in training_step\n[rank3]:     logits = feats @ proj\n[rank3]: RuntimeError: inconsistent tensor size, expected tensor [768] and src [1024] to have the same number of elements, but got 768 and 1024 elements respectively\n[rank: 0] Received SIGTERM: 15\n[rank: 1] Received SIGTERM: 15\n[rank: 2] Received SIGTERM: 15\n',
                 'python-exception', 'python_exception', 3, id='lightning-sigterm-lines-after-rank3'),
    # srun's own "task 3: Exited" lines are no part of the labelled traceback before them.
    pytest.param('3: Traceback (most recent call last):\n3:   File "/workspace/train.py", line 88, in main\n3:     logits = feats @ proj\n3: RuntimeError: inconsistent tensor size, expected tensor [768] and src [1024] to have the same number of elements, but got 768 and 1024 elements respectively\nsrun: error: node-2: task 3: Exited with exit code 1\nsrun: error: node-1: tasks 0-1: Terminated\nsrun: error: node-2: task 2: Terminated\n',
                 'python-exception', 'python_exception', 3, id='srun-lines-after-labelled-traceback'),
    # XLA lists the tasks that stopped sending heartbeats on the lines after its message.
    pytest.param('Traceback (most recent call last):\n  File "/workspace/train.py", line 40, in <module>\n    state = train_step(state, batch)\njaxlib.xla_extension.XlaRuntimeError: UNAVAILABLE: The following tasks are unhealthy (stopped sending heartbeats):\n/job:jax_worker/replica:0/task:3\nThe tasks have crashed. Check the task logs for an earlier error, or scheduler events (e.g. preemption, eviction) to debug further.\n',
                 'xla-task-heartbeat-lost', 'node_failure', 3, id='xla-task-named-on-the-next-line'),
    # Under srun --label, XLA's coordinator reports the lost task on its own task's line: the label is
    # the reporter's, not the lost task's (the task named on the next line is a line of its own here).
    pytest.param("0: F0314 09:12:55.101502   48210 client.h:77] Terminating process because the JAX distributed service detected fatal errors. This most likely indicates that another task died; see the other task logs for more details. Disable Python buffering, i.e. `python -u`, to be sure to see all the previous output. absl::Status: UNAVAILABLE: The following tasks are unhealthy (stopped sending heartbeats):\n0: /job:jax_worker/replica:0/task:3\n0: The tasks have crashed. Check the task logs for an earlier error, or scheduler events (e.g. preemption, eviction) to debug further.\n0: \n0: RPC: /tensorflow.CoordinationService/PollForError [type.googleapis.com/tensorflow.CoordinationServiceError='']\n1: F0314 09:12:55.103877   48211 client.h:77] Terminating process because the JAX distributed service detected fatal errors. This most likely indicates that another task died; see the other task logs for more details. Disable Python buffering, i.e. `python -u`, to be sure to see all the previous output. absl::Status: UNAVAILABLE: The following tasks are unhealthy (stopped sending heartbeats):\n1: /job:jax_worker/replica:0/task:3\n1: The tasks have crashed. Check the task logs for an earlier error, or scheduler events (e.g. preemption, eviction) to debug further.\n1: \n1: RPC: /tensorflow.CoordinationService/PollForError [type.googleapis.com/tensorflow.CoordinationServiceError='']\n2: F0314 09:12:55.104120   48212 client.h:77] Terminating process because the JAX distributed service detected fatal errors. This most likely indicates that another task died; see the other task logs for more details. Disable Python buffering, i.e. `python -u`, to be sure to see all the previous output. absl::Status: UNAVAILABLE: The following tasks are unhealthy (stopped sending heartbeats):\n2: /job:jax_worker/replica:0/task:3\n2: The tasks have crashed. Check the task logs for an earlier error, or scheduler events (e.g. preemption, eviction) to debug further.\n2: \n2: RPC: /tensorflow.CoordinationService/PollForError [type.googleapis.com/tensorflow.CoordinationServiceError='']\n",
                 'xla-task-heartbeat-lost', 'node_failure', None, id='srun-label-is-the-reporter-not-the-lost-task'),
    # One file with two nodes' --tee output and summaries: local rank 1 is global 1 on one node and 9 on
    # the other, so the prefix's local rank is not made global by either.
    pytest.param('[default1]:Traceback (most recent call last):\n[default1]:  File "/workspace/train.py", line 88, in main\n[default1]:    batch = next(it)\n[default1]:KeyError: \'input_ids\'\n[default1]:Traceback (most recent call last):\n[default1]:  File "/workspace/train.py", line 90, in main\n[default1]:    loss.backward()\n[default1]:torch.distributed.DistBackendError: NCCL communicator was aborted on rank 9.\nTraceback (most recent call last):\n  File "/usr/bin/torchrun", line 8, in <module>\n    sys.exit(main())\ntorch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n============================================================\ntrain.py FAILED\n------------------------------------------------------------\nFailures:\n  <NO_OTHER_FAILURES>\n------------------------------------------------------------\nRoot Cause (first observed failure):\n[0]:\n  time      : 2025-03-14_09:12:41\n  host      : gpu-node-2\n  rank      : 9 (local_rank: 1)\n  exitcode  : 1 (pid: 50213)\n  error_file: <N/A>\n  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html\n============================================================\nTraceback (most recent call last):\n  File "/usr/bin/torchrun", line 8, in <module>\n    sys.exit(main())\ntorch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n============================================================\ntrain.py FAILED\n------------------------------------------------------------\nFailures:\n  <NO_OTHER_FAILURES>\n------------------------------------------------------------\nRoot Cause (first observed failure):\n[0]:\n  time      : 2025-03-14_09:12:41\n  host      : gpu-node-1\n  rank      : 1 (local_rank: 1)\n  exitcode  : 1 (pid: 48213)\n  error_file: <N/A>\n  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html\n============================================================\n',
                 'python-exception', 'python_exception', 1, id='two-nodes-summaries-leave-the-local-rank'),
]


@pytest.mark.parametrize(("text", "rule", "category", "rank"), RANKS)
def test_the_failed_rank_is_read_from_the_launchers_own_words(tmp_path: Path, text: str, rule: str, category: str,
                                                            rank: int | None) -> None:
    root = diagnosed_root(tmp_path, text)
    assert (root["rule"], root["category"], root["rank"]) == (rule, category, rank)
    # The title and the remedy name the global rank, not the local one the prefix gave.
    assert f"rank {rank}" in root["title"] or rule != "python-exception"
