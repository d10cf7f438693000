"""Launcher parsing and preflight checks (real sockets and disks; NVML faked with its real errors)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pynvml
import pytest

from metrics_fake_nvml import GIB, FakeMig, FakeNvml, FakeProcess, make_gpus
from monitor.metrics.sampler import Sampler
from monitor.runner import launchers, preflight
from monitor.runner.launchers import parse

# Above the kernel's largest PID: a process NVML reports that does not exist in this namespace.
NO_SUCH_PID = int(Path("/proc/sys/kernel/pid_max").read_text()) + 1


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


@pytest.mark.parametrize("command, env, world", [
    (["torchrun", "--nproc-per-node", "2", "train.py", "--nnodes", "4"], {}, 2),  # the script's --nnodes
    (["python3", "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=8", "t.py"], {}, 8),
    (["torchrun", "--nnodes", "1:1", "--nproc-per-node", "4", "t.py"], {}, 4),
    (["torchrun", "--nnodes", "2", "--nproc-per-node", "4", "t.py"], {}, None),  # the other node's ranks
    (["torchrun", "--nproc-per-node", "4", "t.py"], {"PET_NNODES": "2"}, None),
    (["torchrun", "t.py"], {"PET_NPROC_PER_NODE": "3"}, 3),
    (["torchrun", "--nproc-per-node", "gpu", "t.py"], {}, None),
    (["srun", "torchrun", "--nproc-per-node", "4", "t.py"], {}, None),  # one torchrun per node
    (["deepspeed", "--num_gpus", "2", "train.py"], {}, None),
    (["accelerate", "launch", "--multi_gpu", "--num_processes", "2", "t.py"], {}, 2),
    (["accelerate", "launch", "--num_machines", "2", "--num_processes", "8", "t.py"], {}, None),
    # env(1) before the launcher: the variables it sets count, those it unsets do not.
    (["env", "-u", "PYTHONPATH", "HF_HUB_OFFLINE=1", "accelerate", "launch", "--num_processes", "2", "t.py"], {}, 2),
    (["env", "PET_NPROC_PER_NODE=3", "torchrun", "t.py"], {}, 3),
    (["env", "-u", "PET_NPROC_PER_NODE", "torchrun", "t.py"], {"PET_NPROC_PER_NODE": "3"}, None),
    (["env", "-i", "torchrun", "t.py"], {"PET_NPROC_PER_NODE": "3"}, None),
    # mpirun's -np counts every process, each a rank; its options' values are not the program.
    (["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2", "python3", "job.py"], {}, 2),
    (["mpirun", "--mca", "btl", "^openib", "-x", "NCCL_DEBUG", "-np", "8", "python", "t.py", "-n", "3"], {}, 8),
    (["mpiexec", "-genv", "OMP_NUM_THREADS", "1", "-n", "4", "python3", "train.py"], {}, 4),
    (["mpirun", "--np=6", "python", "t.py"], {}, 6),
    (["mpirun", "-H", "a,b", "python", "t.py"], {}, None),
    (["mpirun", "-np", "2", "torchrun", "--nproc-per-node", "4", "t.py"], {}, None),  # a torchrun per node
    (["mpirun", "-np", "2", "./node.sh"], {}, None),  # a script: it may start a launcher of its own
    (["mpirun", "-np", "2", "bash", "node.sh"], {}, None),
    (["mpiexec", "-n", "2", "-perhost", "1", "torchrun", "--nproc_per_node", "8", "t.py"], {}, None),  # an unknown option
    (["mpirun", "-np", "2", "singularity", "exec", "img.sif", "torchrun", "t.py"], {}, None),  # a wrapper
    (["mpirun", "-np", "1", "python", "a.py", ":", "-np", "4", "python", "b.py"], {}, None),  # MPMD
    (["mpirun", "-np", "2", "python", "-m", "deepspeed.launcher.launch", "t.py"], {}, None),
])
def test_the_world_size_a_command_fixes(command, env, world):
    assert parse(command, env).world_size == world


@pytest.mark.parametrize("script, launcher, world, log_dir", [
    ("ulimit -v 3000000 && exec python3 -m torch.distributed.run --nproc-per-node 2 --redirects 3 "
     "--log-dir logs/tlogs job.py", "torchrun", 2, "logs/tlogs"),
    ("cd /data; PET_NPROC_PER_NODE=3 torchrun t.py; echo done", "torchrun", 3, None),  # its own variables
    ("torchrun --nproc-per-node=2 t.py --lr=1e-3|tee out.log", "torchrun", 2, None),
    ("python t.py", "python", None, None),
    ('unbalanced "quote', "other", None, None),
    ("", "other", None, None),
])
def test_a_shells_command_line_is_read_for_the_launcher_it_runs(script, launcher, world, log_dir):
    plan = parse(["bash", "-c", script], {})
    assert (plan.launcher, plan.world_size, str(plan.log_dir) if plan.log_dir else None) == (launcher, world, log_dir)


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


# -- GPUs: the metrics core over tests/metrics_fake_nvml.py (real pynvml error classes) ---------
def torchrun(nproc: int) -> launchers.LaunchPlan:
    return parse(["torchrun", "--nproc-per-node", str(nproc), "t.py"], {})


def gpus_of(fake: FakeNvml, plan: launchers.LaunchPlan, cvd: str | None) -> list:
    env = {} if cvd is None else {"CUDA_VISIBLE_DEVICES": cvd}
    found = preflight.check_gpus(plan, env, fake)
    # Every check hands NVML back: the event set freed, the library shut down.
    assert fake.event_sets == [] and fake.shutdowns == 1
    return found


def by_rule(found: list) -> dict:
    return {f.rule.removeprefix("preflight-"): f for f in found}


def test_more_processes_than_visible_gpus():
    [count] = gpus_of(FakeNvml(make_gpus(2, memory_used=GIB)), torchrun(4), "0")
    assert count.rule == "preflight-gpu-count" and count.severity == "warning"
    assert count.title == "4 processes per node asked for, 1 GPUs visible"
    assert 'CUDA_VISIBLE_DEVICES="0" shows 1 GPU(s)' in count.remedy
    assert "Use --nproc-per-node=1, or make more GPUs visible." in count.remedy
    assert count.fields == {"asked": "4", "visible": "1"}
    assert gpus_of(FakeNvml(make_gpus(2, memory_used=GIB)), torchrun(2), None) == []


def test_a_machine_with_too_few_gpus_is_not_told_to_show_more():
    [count] = gpus_of(FakeNvml(make_gpus(2, memory_used=GIB)), torchrun(8), None)
    assert "this machine shows 2 GPU(s)" in count.remedy
    assert "Use --nproc-per-node=2, this machine has no more GPUs." in count.remedy


@pytest.mark.parametrize("command, env, option", [
    (["accelerate", "launch", "--num_machines", "2", "--num_processes", "16", "t.py"], {},
     "--num_processes=8 (4 on each of 2 machines)"),
    (["accelerate", "launch", "--num_processes", "8", "t.py"], {}, "--num_processes=4,"),
    (["deepspeed", "--num_gpus", "8", "t.py"], {}, "--num_gpus=4,"),
    (["torchrun", "t.py"], {"PET_NPROC_PER_NODE": "8"}, "PET_NPROC_PER_NODE=4,"),
])
def test_the_count_remedy_uses_the_launchers_own_setting(command, env, option):
    plan = parse(command, env)
    [count] = gpus_of(FakeNvml(make_gpus(4, memory_used=GIB)), plan, None)
    assert count.rule == "preflight-gpu-count" and f"Use {option}" in count.remedy


def test_uuid_prefix_is_resolved_like_cuda():
    gpus = make_gpus(4, memory_used=GIB)
    gpus[2].memory_used = 60 * GIB
    fake = FakeNvml(gpus)
    # "GPU-00000002" is a unique prefix of GPU 2's UUID: CUDA accepts it, so must we.
    [busy] = gpus_of(fake, torchrun(1), "GPU-00000002")
    assert busy.rule == "preflight-gpu-busy"
    assert busy.title == "cuda:0 (GPU 2, NVIDIA H100 80GB HBM3) already has 60.0 GiB of 80.0 GiB in use"
    assert (busy.fields["gpu"], busy.fields["cuda_device"], busy.fields["uuid"]) == ("2", "0", gpus[2].uuid)
    # A prefix that several GPUs share is no device for CUDA: the list stops there.
    [count] = gpus_of(FakeNvml(gpus), torchrun(2), "GPU-0000")
    assert count.fields == {"asked": "2", "visible": "0"}


def test_mig_devices_are_counted_and_named():
    gpus = make_gpus(2, memory_used=GIB)
    gpus[1].migs = [FakeMig("NVIDIA H100 80GB HBM3 MIG 3g.40gb", "MIG-1111aaaa-0000", 1, memory_total=40 * GIB),
                    FakeMig("NVIDIA H100 80GB HBM3 MIG 3g.40gb", "MIG-2222bbbb-0000", 2, memory_total=40 * GIB,
                            memory_used=30 * GIB, processes=[FakeProcess(NO_SUCH_PID, 30 * GIB)])]
    cvd = f"MIG-1111,MIG-{gpus[1].uuid}/2/0"  # a MIG UUID prefix, then the legacy MIG-GPU form
    found = by_rule(gpus_of(FakeNvml(gpus), torchrun(3), cvd))
    assert set(found) == {"gpu-count", "gpu-busy"}
    assert found["gpu-count"].fields == {"asked": "3", "visible": "2"}
    assert found["gpu-count"].evidence[2:] == [
        "cuda:0 (GPU 1 MIG 0, NVIDIA H100 80GB HBM3 MIG 3g.40gb) MIG-1111aaaa-0000",
        "cuda:1 (GPU 1 MIG 1, NVIDIA H100 80GB HBM3 MIG 3g.40gb) MIG-2222bbbb-0000"]
    busy = found["gpu-busy"]
    assert busy.title.startswith("cuda:1 (GPU 1 MIG 1, NVIDIA H100 80GB HBM3 MIG 3g.40gb) already has 30.0 GiB")
    assert busy.fields["mig"] == "1" and busy.fields["pids"] == str(NO_SUCH_PID)
    assert f"pid {NO_SUCH_PID} (not in this PID namespace: another container?)" in busy.remedy


def test_an_index_beyond_the_gpu_count_ends_the_list():
    [count] = gpus_of(FakeNvml(make_gpus(4, memory_used=GIB)), torchrun(3), "0,7,1")
    assert count.fields == {"asked": "3", "visible": "1"}  # CUDA sees GPU 0 only, not 0 and 1
    assert "CUDA uses its entries up to the first that names no device here" in count.remedy
    assert count.evidence[-1] == "cuda:0 (GPU 0, NVIDIA H100 80GB HBM3) GPU-00000000-aaaa-bbbb-cccc-000000000000"


@pytest.mark.parametrize("cvd", ["-1", "", "GPU-ffffffff"])
def test_a_value_that_hides_every_gpu(cvd):
    [count] = gpus_of(FakeNvml(make_gpus(4, memory_used=GIB)), torchrun(2), cvd)
    assert count.fields == {"asked": "2", "visible": "0"}
    assert f'CUDA_VISIBLE_DEVICES="{cvd}" hides every GPU' in count.remedy
    assert "nproc-per-node" not in count.remedy  # never "use 0 processes"
    assert gpus_of(FakeNvml(make_gpus(4, memory_used=GIB)), parse(["python", "t.py"], {}), cvd) == []


def test_busy_gpu_is_named_by_the_ordinal_the_job_sees_and_its_process():
    gpus = make_gpus(4, memory_used=GIB)
    gpus[2].memory_used = 60 * GIB
    with subprocess.Popen(["sleep", "60"]) as leftover:
        try:
            # Until the child has exec'd, /proc names it after this interpreter (a race under load).
            deadline = time.monotonic() + 10
            while psutil.Process(leftover.pid).cmdline() != ["sleep", "60"] and time.monotonic() < deadline:
                time.sleep(0.01)
            gpus[2].processes = [FakeProcess(leftover.pid, 59 * GIB), FakeProcess(NO_SUCH_PID, GIB)]
            fake = FakeNvml(gpus)
            [busy] = gpus_of(fake, torchrun(2), "3,2")
        finally:
            leftover.kill()
    assert busy.rule == "preflight-gpu-busy" and busy.severity == "warning"
    assert busy.title == "cuda:1 (GPU 2, NVIDIA H100 80GB HBM3) already has 60.0 GiB of 80.0 GiB in use"
    assert busy.remedy.startswith(
        f"Only 20.0 GiB free on cuda:1 (GPU 2, NVIDIA H100 80GB HBM3) before the job starts, used by "
        f"pid {leftover.pid} (sleep 60), pid {NO_SUCH_PID} (not in this PID namespace: another container?).")
    assert busy.fields["pids"] == f"{leftover.pid},{NO_SUCH_PID}"
    # Cheap reads only: a preflight delays the job, and PCIe counters block ~20 ms each.
    assert fake.calls["nvmlDeviceGetPcieThroughput"] == 0
    # A busy GPU the job does not see is none of its business.
    assert gpus_of(FakeNvml(gpus), torchrun(2), "0,1") == []


@pytest.mark.parametrize("error, severity", [
    (pynvml.NVMLError_LibraryNotFound, "info"),
    (pynvml.NVMLError_DriverNotLoaded, "warning"),
    (pynvml.NVMLError_LibRmVersionMismatch, "warning"),
    (pynvml.NVMLError_NoPermission, "info"),
    (pynvml.NVMLError_Unknown, "info"),
])
def test_init_failure_says_why_in_the_words_of_monitor_metrics(error, severity):
    sample = Sampler(nvml=FakeNvml([], init_error=error), cuda_visible_devices=None).sample()
    [info] = preflight.check_gpus(torchrun(2), {}, FakeNvml([], init_error=error))
    assert (info.rule, info.severity, info.fields["status"]) == ("preflight-no-gpu", severity, sample.gpu_status)
    assert info.evidence == [sample.gpu_message]
    assert info.remedy == f"{sample.gpu_message}. GPU checks skipped; fine for a CPU (gloo) job."


def test_nvml_without_gpus():
    sample = Sampler(nvml=FakeNvml([]), cuda_visible_devices=None).sample()
    [info] = gpus_of(FakeNvml([]), torchrun(2), None)
    assert info.rule == "preflight-no-gpu" and info.evidence == [sample.gpu_message]
    assert info.title == "No NVIDIA GPU visible (NVML reports none)"


def test_a_lost_gpu_the_job_would_use():
    gpus = make_gpus(3, memory_used=GIB)
    gpus[1].lost = True
    [lost] = gpus_of(FakeNvml(gpus), torchrun(3), None)
    assert (lost.rule, lost.category, lost.severity) == ("preflight-gpu-lost", "gpu_hardware", "warning")
    assert lost.title == "cuda:1 (GPU 1) has fallen off the bus"
    assert "Xid 79" in lost.remedy and "leave it out of CUDA_VISIBLE_DEVICES" in lost.remedy
    assert gpus_of(FakeNvml(gpus), torchrun(2), "0,2") == []


def test_a_gpu_lost_while_it_is_read():
    class FallsOff(FakeNvml):
        def nvmlDeviceGetMemoryInfo(self, handle, version=None):
            raise pynvml.NVMLError_GpuIsLost()

    [lost] = gpus_of(FallsOff(make_gpus(2)), torchrun(1), "1")
    assert lost.rule == "preflight-gpu-lost"
    assert lost.title == "cuda:0 (GPU 1, NVIDIA H100 80GB HBM3) has fallen off the bus"


def test_a_broken_binding_is_contained():
    class Broken(FakeNvml):
        def nvmlDeviceGetMemoryInfo(self, handle, version=None):
            raise TypeError("argument 1: wrong type")  # what a binding/driver mix-up looks like

    [info] = gpus_of(Broken(make_gpus(2)), torchrun(2), None)
    assert (info.rule, info.severity, info.title) == ("preflight-nvml-error", "info", "GPU checks failed")
    assert info.evidence == ["TypeError: argument 1: wrong type"]


def test_this_machine_without_a_fake():
    """The real path: pynvml against this machine's driver (none here: the library is missing)."""
    sample = Sampler(cuda_visible_devices=None).sample()
    found = preflight.check_gpus(parse(["python", "t.py"], {}), {})
    if sample.gpu_status == "ok" and sample.gpus:
        assert not any(f.rule == "preflight-no-gpu" for f in found)
    else:
        [info] = found
        assert info.rule == "preflight-no-gpu" and info.evidence == [sample.gpu_message]


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
