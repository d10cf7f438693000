"""Launcher parsing and preflight checks (real sockets and disks; NVML faked with its real errors)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections import namedtuple
from pathlib import Path

import pynvml
import pytest

from monitor.runner import launchers, preflight
from monitor.runner.launchers import parse


@pytest.mark.parametrize("command, launcher, nproc, port, source", [
    (["torchrun", "--nproc-per-node=4", "--master_port", "1234", "train.py", "--master_port", "9"],
     "torchrun", "4", 1234, "--master-port"),
    (["torchrun", "--nproc_per_node", "2", "train.py"], "torchrun", "2", 29500, "torchrun default"),
    (["python", "-u", "-m", "torch.distributed.run", "--rdzv-endpoint=node1:5555", "t.py"],
     "torchrun", None, 5555, "--rdzv-endpoint"),
    (["srun", "-N", "2", "--label", "torchrun", "--standalone", "--nproc-per-node", "gpu", "t.py"],
     "torchrun", "gpu", None, None),
    (["accelerate", "launch", "--multi_gpu", "--num_processes", "8", "--main_process_port", "2222", "t.py"],
     "accelerate", "8", 2222, "--main_process_port"),
    (["accelerate", "launch", "--num_machines", "2", "--num_processes", "16", "t.py"],
     "accelerate", "8", 4321, "MASTER_PORT"),
    (["deepspeed", "--num_gpus", "2", "train.py", "--deepspeed"], "deepspeed", "2", 29500, "deepspeed default"),
    (["python", "train.py", "--nproc-per-node", "8"], "python", None, 4321, "MASTER_PORT"),
    (["./run.sh"], "other", None, 4321, "MASTER_PORT"),
])
def test_launch_plans(command, launcher, nproc, port, source):
    plan = parse(command, {"MASTER_PORT": "4321"})
    assert (plan.launcher, plan.nproc_per_node, plan.master_port, plan.port_source) == (
        launcher, nproc, port, source)
    assert plan.under_srun == (command[0] == "srun")


def test_torchrun_log_dir_files_of_this_run(tmp_path: Path):
    old = tmp_path / "old" / "attempt_0" / "0" / "stdout.log"
    new = tmp_path / "new" / "attempt_0" / "1" / "stderr.log"
    for path in (old, new):
        path.parent.mkdir(parents=True)
        path.write_text("x")
    os.utime(old, (1, 1))
    command = ["torchrun", "--log-dir", str(tmp_path), "--redirects", "3", "t.py"]
    assert launchers.rank_log_files(command, since=100) == [new]


def test_slurm_context():
    env = {"SLURM_JOB_ID": "42", "SLURM_STEP_ID": "0", "SLURMD_NODENAME": "gpu-07", "HOME": "/x"}
    assert launchers.slurm_context(env) == {"SLURM_JOB_ID": "42", "SLURM_STEP_ID": "0",
                                            "SLURMD_NODENAME": "gpu-07"}


def test_port_in_use_suggests_a_free_one():
    with socket.socket() as taken:
        taken.bind(("", 0))
        taken.listen()
        port = taken.getsockname()[1]
        plan = parse(["torchrun", "--nproc-per-node", "2", "--master-port", str(port), "t.py"], {})
        [found] = preflight.check_port(plan)
    assert found.category == "port_in_use" and found.severity == "warning"
    assert f"Port {port} (--master-port) is already in use" == found.title
    suggested = int(found.fields["free_port"])
    with socket.socket() as probe:
        probe.bind(("", suggested))  # really free
    assert preflight.check_port(plan) == []  # released: nothing to say


def test_remote_master_port_is_not_checked_here():
    plan = parse(["torchrun", "--rdzv-endpoint", "192.0.2.10:29400", "t.py"], {})
    assert preflight.check_port(plan) == []


def test_unresolvable_master_addr():
    plan = parse(["python", "t.py"], {"MASTER_ADDR": "no-such-host.invalid"})
    [found] = preflight.check_master_addr(plan, {"MASTER_ADDR": "no-such-host.invalid"})
    assert "no-such-host.invalid does not resolve" in found.title
    assert preflight.check_master_addr(parse(["python", "t.py"], {}), {"MASTER_ADDR": "localhost"}) == []


def test_knobs_left_on():
    env = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "ALL", "CUDA_LAUNCH_BLOCKING": "1",
           "TORCH_DISTRIBUTED_DEBUG": "DETAIL", "NCCL_TIMEOUT": "3600"}
    found = {f.fields["variable"]: f for f in preflight.check_knobs(env)}
    assert set(found) == set(env)
    assert "init_process_group(timeout=" in found["NCCL_TIMEOUT"].remedy
    assert "NCCL_DEBUG=WARN" in found["NCCL_DEBUG"].remedy
    assert preflight.check_knobs({"NCCL_DEBUG": "WARN", "CUDA_LAUNCH_BLOCKING": "0"}) == []


def test_disk_and_shm_thresholds(tmp_path: Path, monkeypatch):
    assert preflight.check_disk(tmp_path / "not" / "yet", minimum=1, what="logs") == []
    [low] = preflight.check_disk(tmp_path / "ckpt", minimum=1 << 60, what="checkpoints")
    assert low.category == "disk_full" and "checkpoints" in low.title
    monkeypatch.setattr(preflight, "MIN_SHM", 1 << 60)
    [shm] = preflight.check_shm(tmp_path)
    assert "--shm-size" in shm.remedy


# -- GPUs through a fake NVML that keeps the real pynvml names and error classes ----------------
Memory = namedtuple("Memory", "total free used")
Proc = namedtuple("Proc", "pid usedGpuMemory")
GIB = 1 << 30


@pytest.fixture
def fake_nvml(monkeypatch):
    gpus = [Memory(80 * GIB, 79 * GIB, 1 * GIB), Memory(80 * GIB, 20 * GIB, 60 * GIB)]
    monkeypatch.setattr(pynvml, "nvmlInit", lambda: None)
    monkeypatch.setattr(pynvml, "nvmlShutdown", lambda: None)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetCount", lambda: len(gpus))
    monkeypatch.setattr(pynvml, "nvmlDeviceGetHandleByIndex", lambda i: i)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetMemoryInfo", lambda h: gpus[h])
    monkeypatch.setattr(pynvml, "nvmlDeviceGetComputeRunningProcesses",
                        lambda h: [Proc(4242, 60 * GIB)] if h == 1 else [])
    return gpus


def test_more_processes_than_visible_gpus(fake_nvml):
    plan = parse(["torchrun", "--nproc-per-node", "4", "t.py"], {})
    found = preflight.check_gpus(plan, {"CUDA_VISIBLE_DEVICES": "0"})
    assert [f.rule for f in found] == ["preflight-gpu-count"]
    assert "4 processes per node asked for, 1 GPUs visible" == found[0].title
    assert "CUDA_VISIBLE_DEVICES=0" in found[0].remedy


def test_gpu_memory_already_in_use_names_the_process(fake_nvml):
    plan = parse(["torchrun", "--nproc-per-node", "2", "t.py"], {})
    [busy] = preflight.check_gpus(plan, {})
    assert busy.rule == "preflight-gpu-busy" and busy.fields["gpu"] == "1"
    assert "60.0 GiB of 80.0 GiB" in busy.title and "pid 4242" in busy.remedy


def test_no_driver_is_an_info_finding_not_a_crash(monkeypatch):
    def no_driver():
        raise pynvml.NVMLError_DriverNotLoaded(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)
    monkeypatch.setattr(pynvml, "nvmlInit", no_driver)
    [info] = preflight.check_gpus(parse(["python", "t.py"], {}), {})
    assert info.severity == "info" and info.rule == "preflight-no-gpu"


def test_nvml_failing_midway_is_contained(fake_nvml, monkeypatch):
    def lost(handle):
        raise pynvml.NVMLError_GpuIsLost(pynvml.NVML_ERROR_GPU_IS_LOST)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetMemoryInfo", lost)
    [info] = preflight.check_gpus(parse(["python", "t.py"], {}), {})
    assert info.rule == "preflight-nvml-error" and info.severity == "info"


def test_visible_devices_parsing():
    assert preflight.visible_gpu_indices({}, 4) == ["0", "1", "2", "3"]
    assert preflight.visible_gpu_indices({"CUDA_VISIBLE_DEVICES": "2,0"}, 4) == ["2", "0"]
    assert preflight.visible_gpu_indices({"CUDA_VISIBLE_DEVICES": "0,7,1"}, 4) == ["0"]
    assert preflight.visible_gpu_indices({"CUDA_VISIBLE_DEVICES": "-1"}, 4) == []
    assert preflight.visible_gpu_indices({"CUDA_VISIBLE_DEVICES": ""}, 4) == []
    assert preflight.visible_gpu_indices({"CUDA_VISIBLE_DEVICES": "GPU-abc"}, 1) == ["GPU-abc"]


def test_preflight_is_printed_before_the_job_and_never_blocks(tmp_path: Path):
    with socket.socket() as taken:
        taken.bind(("", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "monitor", "run", "--headless", "--log-dir", str(tmp_path), "--",
             sys.executable, "-c", "print('job ran')"],
            capture_output=True, env={**os.environ, "NCCL_DEBUG": "INFO",
                                      "MASTER_PORT": str(port)}, timeout=60)
    assert result.returncode == 0 and result.stdout == b"job ran\n"
    err = result.stderr.decode()
    assert "preflight [warning] NCCL_DEBUG=INFO is set" in err
    assert f"preflight [warning] Port {port} (MASTER_PORT) is already in use" in err
    assert err.index("preflight") < err.index("recording to")
    meta = json.loads(next(tmp_path.glob("*.meta.json")).read_text())
    assert {f["rule"] for f in meta["preflight"]} >= {"preflight-knob-nccl_debug", "preflight-port"}


def test_the_newest_checkpoint_is_checked_before_a_resume(tmp_path: Path):
    import torch
    good, bad = tmp_path / "step100.pt", tmp_path / "step200.pt"
    torch.save({"w": torch.zeros(100)}, good)
    bad.write_bytes(good.read_bytes()[:300])
    os.utime(good, (1000, 1000))
    [found] = preflight.check_latest_checkpoint(tmp_path)
    assert found.category == "corrupt_checkpoint" and "step200.pt" in found.title
    bad.unlink()
    assert preflight.check_latest_checkpoint(tmp_path) == []
    assert preflight.check_latest_checkpoint(tmp_path / "absent") == []
