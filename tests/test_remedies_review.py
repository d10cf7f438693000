"""One test per remedy mended after the review of 2026-11-25 (shared/reviews/remedies-2026-11-25.md):
each diagnoses a real line (the project's sample logs, or the library's own text) and checks that
the advice says what the library really does, and no longer what it did not."""

from __future__ import annotations

from pathlib import Path

import pytest

from monitor.diagnosis.catalogue import load_catalogue
from monitor.diagnosis.diagnose import diagnose_paths
from monitor.diagnosis.engine import Engine
from monitor.model import LogLine
from monitor.text import clean
from monitor.metrics.history import History
from monitor.metrics.model import GpuEvent, GpuSample, HostSample, JobProcess, JobSample, Sample
from monitor.metrics.signals import SignalDetector

SAMPLES = Path(__file__).resolve().parent.parent / "sample_logs"
GIB = 1 << 30


@pytest.fixture(scope="module")
def catalogue():
    return load_catalogue(include_user=False)


def findings_of(catalogue, *lines: str):
    engine = Engine(catalogue)
    for number, text in enumerate(lines, start=1):
        engine.feed(LogLine("job.log", number, clean(text)))
    engine.flush()
    return {f.rule: f for f in engine.findings}


def test_1_port_in_use_names_a_free_port_rendezvous_that_works(catalogue):
    diagnosis = diagnose_paths([SAMPLES / "demo" / "port-in-use.log"], catalogue)
    remedy = diagnosis.root_cause.remedy
    assert "--rdzv-backend c10d --rdzv-endpoint localhost:0" in remedy
    assert "torchrun --standalone or --rdzv-endpoint localhost:0" not in remedy


def test_2_a_full_dev_shm_is_not_sent_to_the_file_system_strategy(catalogue):
    (finding,) = findings_of(
        catalogue,
        "RuntimeError: DataLoader worker (pid 18211) is killed by signal: Bus error. It is possible that dataloader's "
        "workers are out of shared memory. Please try to raise your shared memory limit.",
    ).values()
    assert "does not help here" in finding.remedy and "file descriptors" in finding.remedy
    assert "or use torch.multiprocessing.set_sharing_strategy('file_system')" not in finding.remedy


def test_3_a_new_86_character_wandb_key_means_upgrading_wandb(catalogue):
    long_key = findings_of(catalogue, "ValueError: API key must be 40 characters long, yours was 86")["wandb-auth"]
    assert "pip install -U 'wandb>=0.22.3'" in long_key.remedy
    assert "truncated" not in long_key.remedy
    short_key = findings_of(catalogue, "ValueError: API key must be 40 characters long, yours was 39")["wandb-auth"]
    assert "39 characters instead of 40" in short_key.remedy and "0.22.3" not in short_key.remedy


NCCL_TIMEOUT = (
    "[rank3]:[E1218 20:27:21.426415540 ProcessGroupNCCL.cpp:629] [Rank 3] Watchdog caught collective operation "
    "timeout: WorkNCCL(SeqNum=2816, OpType=ALLREDUCE, NumelIn=26214400, NumelOut=26214400, Timeout(ms)=600000) "
    "ran for 600034 milliseconds before timing out."
)
# What torch prints when its flight recorder was off (torch 2.13 ProcessGroupNCCL.cpp).
FR_DISABLED = (
    "[rank3]:[E1218 20:27:21.500000000 ProcessGroupNCCL.cpp:2220] [Rank 3] Stack trace of the failed collective not "
    "found, potentially because FlightRecorder is disabled. You can enable it by setting TORCH_NCCL_TRACE_BUFFER_SIZE "
    "to a non-zero value."
)


def test_4_the_flight_recorder_dumps_are_where_torch_2_13_writes_them(catalogue):
    remedy = findings_of(catalogue, NCCL_TIMEOUT)["nccl-watchdog-timeout"].remedy
    assert "TORCH_FR_DUMP_TEMP_FILE<rank> (default ~/.cache/torch/comm_lib_trace_rank_<rank>" in remedy
    assert "torchfrtrace <folder>" in remedy and "Copy every node's dumps into one folder" in remedy
    assert "files TORCH_NCCL_DEBUG_INFO_TEMP_FILE, default /tmp/nccl_trace_rank_<N>" not in remedy


def test_5_rerun_with_the_recorder_only_when_torch_says_it_was_off(catalogue):
    on_by_default = findings_of(catalogue, NCCL_TIMEOUT)["nccl-watchdog-timeout"].remedy
    assert "rerun with TORCH_FR_BUFFER_SIZE" not in on_by_default
    assert "Look for the dumps before rerunning" in on_by_default
    was_off = findings_of(catalogue, NCCL_TIMEOUT, FR_DISABLED)["nccl-watchdog-timeout"].remedy
    assert "rerun with TORCH_FR_BUFFER_SIZE=2000 TORCH_NCCL_DUMP_ON_TIMEOUT=1" in was_off
    assert "Look for the dumps" not in was_off


def test_6_a_job_that_sets_the_new_buffer_variable_is_not_told_to(catalogue):
    remedy = findings_of(catalogue, "export TORCH_FR_BUFFER_SIZE=2000", NCCL_TIMEOUT, FR_DISABLED)[
        "nccl-watchdog-timeout"].remedy
    assert "rerun with TORCH_FR_BUFFER_SIZE" not in remedy


def test_7_wandb_service_failure_gets_start_method_not_network_advice(catalogue):
    found = findings_of(catalogue, "wandb: ERROR Error communicating with wandb process, exiting...")
    assert list(found) == ["wandb-service-failed"]
    remedy = found["wandb-service-failed"].remedy
    assert 'wandb.Settings(start_method="fork")' in remedy
    assert "curl https://api.wandb.ai" not in remedy and "outbound network" not in remedy


def test_8_time_limit_signal_advice_says_who_gets_it_and_that_a_handler_is_needed(catalogue):
    diagnosis = diagnose_paths([SAMPLES / "documented" / "slurm-time-limit.out"], catalogue)
    remedy = diagnosis.root_cause.remedy
    assert "--signal=B:USR1@300" in remedy
    assert "SIGUSR1 handler" in remedy and "without one SIGUSR1 ends the process" in remedy
    assert "TORCHELASTIC_SIGNALS_TO_HANDLE" in remedy


def test_9_a_weights_only_refusal_inside_a_library_has_an_environment_override(catalogue):
    (finding,) = findings_of(
        catalogue,
        "_pickle.UnpicklingError: Weights only load failed. This file can still be loaded, to do so you have two "
        "options, do those steps only if you trust the source of the checkpoint.",
    ).values()
    assert "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1" in finding.remedy


def test_10_xid_63_and_92_are_memory_health_not_the_application(catalogue):
    for line, advice in (
        ("NVRM: Xid (PCI:0000:3b:00): 63, pid=2291, name=python, Row Remapper: New row marked for remapping, reset gpu to activate.",
         "takes effect only after a GPU reset"),
        ("NVRM: Xid (PCI:0000:3b:00): 92, pid='<unknown>', name=<unknown>, High single-bit ECC error rate",
         "correctable (single-bit) ECC errors"),
    ):
        found = findings_of(catalogue, line)
        assert list(found) == ["gpu-xid-memory"]
        assert "usually the application" not in found["gpu-xid-memory"].title
        assert advice in found["gpu-xid-memory"].remedy
    app = findings_of(catalogue, "NVRM: Xid (PCI:0000:2b:00): 68, pid=1523, name=python, NVDEC0 Exception")
    assert "68 (video decoder exception)" in app["gpu-xid-application"].remedy


def _xid_finding(code: int):
    gpu = GpuSample(index=1, cuda_index=1, name="H100", uuid="GPU-1", utilization_gpu_percent=90.0,
                    memory_used_bytes=40 * GIB, memory_total_bytes=80 * GIB, temperature_c=60.0, sm_clock_mhz=1980,
                    power_w=500.0, power_limit_w=700.0, clock_event_reasons=[], processes=[])
    host = HostSample(cpu_percent=50.0, cpu_per_core_percent=[50.0], memory_total_bytes=64 * GIB,
                      memory_used_bytes=8 * GIB, memory_available_bytes=56 * GIB, swap_total_bytes=0,
                      swap_used_bytes=0, load_1m=1.0, load_5m=1.0, load_15m=1.0, shm_total_bytes=GIB, shm_used_bytes=0)
    sample = Sample(time=1.0, host=host, gpu_status="ok", gpu_message="", gpus=[gpu],
                    events=[GpuEvent("xid", 1, 0.0, code=code)], job=None)
    history = History(10)
    history.add(sample)
    (finding,) = SignalDetector().update(sample, history)
    return finding


def test_11_hardware_remedy_gives_users_exclude_first_and_marks_the_drain_admin_only(monkeypatch):
    monkeypatch.setenv("SLURMD_NODENAME", "gpu-07")
    remedy = _xid_finding(79).remedy
    assert remedy.index("--exclude=gpu-07") < remedy.index("scontrol update nodename=gpu-07 state=drain")
    assert "admin only" in remedy
    assert "Take this node out of the job (SLURM: scontrol" not in remedy


def test_12_the_stall_remedy_names_an_option_run_has_too():
    import subprocess
    import sys

    for command in ("watch", "run"):
        out = subprocess.run([sys.executable, "-m", "monitor", command, "--help"], capture_output=True, text=True)
        assert "--stall-after" in out.stdout, command


def test_12_run_passes_stall_after_to_the_screen(monkeypatch, tmp_path):
    import inspect

    from monitor import tui
    from monitor.cli import main
    from monitor.runner import supervise

    passed = []
    monkeypatch.setattr(supervise, "run", lambda options, catalogue, present: passed.append(options) or 0)
    assert main(["run", "--stall-after", "12.5", "--log-dir", str(tmp_path), "--", "true"]) == 0
    assert passed[0].stall_after_s == 12.5
    # The screen shows the runner's session, which has the threshold (one session, every mode).
    assert "session" in inspect.signature(tui.launch_run).parameters
    assert "stall_after" in inspect.signature(supervise.JobSession).parameters


def test_13_the_new_allocator_variable_counts_as_already_set(catalogue):
    line = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a total capacity of "
            "79.15 GiB of which 1.12 GiB is free. Of the allocated memory 71.50 GiB is allocated by PyTorch, and "
            "5.91 GiB is reserved by PyTorch but unallocated.")
    fresh = findings_of(catalogue, line)["cuda-oom"].remedy
    assert "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" in fresh and "PYTORCH_ALLOC_CONF" in fresh
    already = findings_of(catalogue, "PYTORCH_ALLOC_CONF=expandable_segments:True", line)["cuda-oom"].remedy
    assert "expandable_segments" not in already


def test_13_metrics_advice_sees_the_new_allocator_variable():
    from monitor.metrics.job import ENV_KEPT
    from monitor.metrics.signals import _job_sets  # the check the near-full remedy makes

    assert "PYTORCH_ALLOC_CONF" in ENV_KEPT
    job = JobSample(root_pids=[9], alive=True, pid_mapping="mapped", processes=[
        JobProcess(10, 9, "python", 10.0, GIB, rank=0, local_rank=0, env={"PYTORCH_ALLOC_CONF": "expandable_segments:True"}),
    ])
    assert _job_sets(job, "PYTORCH_ALLOC_CONF", "expandable_segments:true")


def test_14_hf_trainer_users_get_their_timeout_knob(catalogue):
    remedy = findings_of(catalogue, NCCL_TIMEOUT)["nccl-watchdog-timeout"].remedy
    assert "HF Trainer: --ddp_timeout <seconds>" in remedy


def test_15_tee_alone_keeps_files_and_console(catalogue):
    summary = findings_of(catalogue, *"""torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
train.py FAILED
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2024-12-26_02:11:16
  host      : node1.cluster
  rank      : 0 (local_rank: 0)
  exitcode  : 1 (pid: 937052)
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
============================================================""".splitlines())["torchrun-child-failed"]
    assert "torchrun --log-dir <dir> --tee 3" in summary.remedy
    assert "--redirects 3 --tee 3" not in summary.remedy


def test_16_xid_remedy_fills_the_node_from_the_kernel_log_and_puts_exclude_first(catalogue):
    line = "Mar 04 02:11:09 gpu-07 kernel: NVRM: Xid (PCI:0000:2b:00): 79, pid=1523, name=python, GPU has fallen off the bus."
    remedy = findings_of(catalogue, line)["gpu-xid"].remedy
    assert "--exclude=gpu-07" in remedy
    assert remedy.index("--exclude=gpu-07") < remedy.index("scontrol update nodename=gpu-07")
    assert "admin only" in remedy
    # Without a host in the line the command keeps its placeholder rather than vanishing.
    bare = findings_of(catalogue, "NVRM: Xid (PCI:0000:2b:00): 79, pid=1523, name=python, GPU has fallen off the bus.")
    assert "--exclude=<node>" in bare["gpu-xid"].remedy


def test_sacct_gets_the_job_id_the_log_holds(catalogue):
    found = findings_of(catalogue, "slurmstepd: error: Detected 1 oom_kill event in StepId=4242.0. Some of the step "
                                   "tasks have been OOM Killed.")
    assert "sacct -j 4242 -o JobID,MaxRSS,ReqMem" in found["host-oom-kill"].remedy
