"""Checks before a launch. Each problem is a ``Finding``; a check never raises and never blocks.

The checks read the command (``launchers.parse``), the environment and the machine: GPUs visible
against processes asked for, GPU memory already in use, the rendezvous port, MASTER_ADDR, free
disk for logs and checkpoints, /dev/shm, and debugging knobs left on.
"""

from __future__ import annotations

import errno
import os
import shutil
import socket
import threading
from pathlib import Path
from typing import Any

import psutil

from monitor.diagnosis.advice import advice
from monitor.model import Finding, Severity
from monitor.metrics.gpu import GpuReader
from monitor.metrics.model import GpuSample
from monitor.metrics.nvml import Nvml, import_pynvml
from monitor.runner.launchers import LaunchPlan

GIB = 1 << 30
MIN_LOG_FREE = 1 * GIB
MIN_CKPT_FREE = 20 * GIB
MIN_SHM = 1 * GIB
# GPU memory already taken by someone else before we start, as a share of the total.
GPU_BUSY_SHARE = 0.10
RESOLVE_TIMEOUT_S = 3.0

# Knobs that cost speed or flood the log; fine while debugging, harmful left on.
KNOBS = {
    "NCCL_DEBUG": ({"INFO", "TRACE"}, "warning",
                   "NCCL_DEBUG={value} writes every ring and channel setup to the log and slows "
                   "start-up on large jobs; use NCCL_DEBUG=WARN in production (it still prints the "
                   "reason for any NCCL error)."),
    "NCCL_DEBUG_SUBSYS": (None, "info",
                          "NCCL_DEBUG_SUBSYS={value} is a debugging setting; unset it for production runs."),
    "CUDA_LAUNCH_BLOCKING": ({"1"}, "warning",
                             "CUDA_LAUNCH_BLOCKING=1 makes every kernel launch synchronous and "
                             "slows training many times over; set it only to locate a CUDA error."),
    "TORCH_DISTRIBUTED_DEBUG": ({"DETAIL"}, "warning",
                                "TORCH_DISTRIBUTED_DEBUG=DETAIL checks every collective across ranks "
                                "and slows training; use OFF (or INFO) outside debugging."),
    "NCCL_P2P_DISABLE": ({"1"}, "info",
                         "NCCL_P2P_DISABLE=1 routes GPU-to-GPU traffic through host memory; keep it "
                         "only if peer-to-peer hangs on this machine."),
    "NCCL_TIMEOUT": (None, "warning",
                     "NCCL_TIMEOUT={value} has no effect: NCCL has no such variable. The collective "
                     "timeout is init_process_group(timeout=timedelta(...)) (accelerate: "
                     "InitProcessGroupKwargs(timeout=...))."),
}


def _finding(name: str, severity: Severity, title: str, remedy: str, evidence: list[str],
             category: str = "preflight", **fields: str) -> Finding:
    return Finding(rule=f"preflight-{name}", category=category, severity=severity, role="confirm",
                   title=title, evidence=evidence, fields=dict(fields), remedy=remedy, origin="preflight")


def check_knobs(env: dict[str, str]) -> list[Finding]:
    found = []
    for name, (bad_values, severity, remedy) in KNOBS.items():
        value = env.get(name)
        if value is None or (bad_values is not None and value.upper() not in bad_values):
            continue
        found.append(_finding(f"knob-{name.lower()}", severity, f"{name}={value} is set",
                              remedy.format(value=value), [f"{name}={value}"], variable=name, value=value))
    return found


def check_gpus(plan: LaunchPlan, env: dict[str, str], nvml_lib: Any = None) -> list[Finding]:
    """The GPUs the job will see, read by the metrics core: the device walk, CUDA ordinals
    (``metrics/visible.py``: indices, UUID prefixes, MIG devices, the stop at the first entry
    CUDA cannot use) and NVML error handling of the metrics panel, with the job's
    CUDA_VISIBLE_DEVICES. ``nvml_lib``: the pynvml module (default) or a module-like fake."""
    nvml = Nvml(nvml_lib) if nvml_lib is not None else Nvml(import_pynvml(), check_binding=True)
    if not nvml.ok:
        return [_no_gpu(nvml.status, nvml.message)]
    reader = None
    try:
        reader = GpuReader(nvml, env.get("CUDA_VISIBLE_DEVICES"))
        devices = reader.read_memory()
        if not devices:
            return [_no_gpu("ok", "NVML works but reports no GPUs")]
        return _check_devices(plan, env, devices)
    except Exception as exc:  # a broken binding or driver must not stop the launch
        return [_finding("nvml-error", "info", "GPU checks failed", f"NVML error: {exc}",
                         [f"{type(exc).__name__}: {exc}"])]
    finally:
        if reader is not None:
            reader.close()
        nvml.shutdown()


# Why NVML shows no GPU, in a title's few words (the finding's remedy says it in full).
_NO_GPU_REASONS = {"no_library": "no NVIDIA driver", "no_driver": "NVIDIA driver not loaded",
                   "version_mismatch": "driver/library version mismatch", "ok": "NVML reports none"}


def _no_gpu(status: str, message: str) -> Finding:
    # A driver that is installed but broken is a GPU machine the job cannot use; the rest is
    # what a CPU machine looks like.
    severity = "warning" if status in ("no_driver", "version_mismatch") else "info"
    return _finding("no-gpu", severity,
                    f"No NVIDIA GPU visible ({_NO_GPU_REASONS.get(status, 'NVML unavailable')})",
                    f"{message}. GPU checks skipped; fine for a CPU (gloo) job.",
                    [message], status=status)


def _check_devices(plan: LaunchPlan, env: dict[str, str], devices: list[GpuSample]) -> list[Finding]:
    visible = sorted((d for d in devices if d.cuda_index is not None), key=lambda d: d.cuda_index)
    found = _check_count(plan, env.get("CUDA_VISIBLE_DEVICES"), visible)
    for device in visible:
        if device.status == "lost":
            found.append(_finding(
                "gpu-lost", "warning", f"{_device_name(device)} has fallen off the bus",
                f"{device.message}. Until then leave it out of CUDA_VISIBLE_DEVICES: a rank on it "
                "fails at its first CUDA call.",
                [device.message], category="gpu_hardware", **_device_fields(device)))
        elif device.status != "ok":
            found.append(_finding("nvml-error", "info", f"{_device_name(device)} could not be read",
                                  f"NVML error: {device.message}; this GPU was not checked.",
                                  [device.message], **_device_fields(device)))
        elif (busy := _check_busy(device)) is not None:
            found.append(busy)
    return found


def _check_count(plan: LaunchPlan, cvd: str | None, visible: list[GpuSample]) -> list[Finding]:
    wanted = plan.processes
    if wanted is None or wanted <= len(visible):
        return []
    where = f'CUDA_VISIBLE_DEVICES="{cvd}"' if cvd is not None else "this machine"
    evidence = [f"{plan.launcher} processes per node: {plan.nproc_per_node}"]
    if cvd is not None:
        evidence.append(f'CUDA_VISIBLE_DEVICES="{cvd}"')
    evidence += [f"{_device_name(d)} {d.uuid or ''}".rstrip() for d in visible]
    # CUDA reads the list up to its first entry that names no device here (-1, a typo, an
    # index past the last GPU, an unknown or ambiguous UUID prefix) and ignores the rest.
    cut = (" (CUDA uses its entries up to the first that names no device here, each device once)"
           if cvd is not None and cvd.strip() and len(cvd.split(",")) > len(visible) else "")
    if not visible:
        remedy = (f"{where} hides every GPU{cut}: the {wanted} processes would fail at their first "
                  "CUDA call (fine only for a CPU job with gloo). List the GPUs to use in "
                  "CUDA_VISIBLE_DEVICES (`nvidia-smi -L` shows them), or unset it.")
    else:
        more = ("or make more GPUs visible" if cvd is not None
                else "this machine has no more GPUs")
        remedy = (f"{where} shows {len(visible)} GPU(s){cut} but the command starts {wanted} "
                  "processes per node: ranks would share a GPU or fail with 'invalid device "
                  f"ordinal'. Use {_processes_option(plan, len(visible))}, {more}.")
    return [_finding("gpu-count", "warning",
                     f"{wanted} processes per node asked for, {len(visible)} GPUs visible",
                     remedy, evidence, asked=str(wanted), visible=str(len(visible)))]


def _processes_option(plan: LaunchPlan, per_node: int) -> str:
    """The launcher's own setting for ``per_node`` processes on each node."""
    if plan.launcher == "accelerate":  # counts the processes of all machines
        machines = plan.options.get("num_machines") or "1"
        machines_n = int(machines) if machines.isdigit() and int(machines) > 0 else 1
        total = f"--num_processes={per_node * machines_n}"
        return total if machines_n == 1 else f"{total} ({per_node} on each of {machines_n} machines)"
    if plan.launcher == "deepspeed":
        return f"--num_gpus={per_node}"
    if not plan.options.get("nproc_per_node"):  # torchrun read it from its environment
        return f"PET_NPROC_PER_NODE={per_node}"
    return f"--nproc-per-node={per_node}"


def _check_busy(device: GpuSample) -> Finding | None:
    used, total = device.memory_used_bytes, device.memory_total_bytes
    if used is None or not total or used <= GPU_BUSY_SHARE * total:
        return None
    owners = [_describe_process(p.pid) for p in device.processes]
    by = f"used by {', '.join(owners)}" if owners else "no process that NVML can name (another container or VM?)"
    name = _device_name(device)
    return _finding(
        "gpu-busy", "warning", f"{name} already has {used / GIB:.1f} GiB of {total / GIB:.1f} GiB in use",
        f"Only {(total - used) / GIB:.1f} GiB free on {name} before the job starts, {by}. "
        "A leftover run? Stop it, or expect CUDA out of memory.",
        [f"{device.label}: used {used} of {total} bytes"],
        pids=",".join(str(p.pid) for p in device.processes), **_device_fields(device))


def _describe_process(pid: int) -> str:
    try:
        process = psutil.Process(pid)
        with process.oneshot():
            argv = process.cmdline()
            command = " ".join([os.path.basename(argv[0]), *argv[1:]]) if argv else process.name()
    except psutil.ZombieProcess:
        return f"pid {pid} (exited)"
    except psutil.NoSuchProcess:  # NVML reports host PIDs
        return f"pid {pid} (not in this PID namespace: another container?)"
    except psutil.AccessDenied:
        return f"pid {pid}"
    command = " ".join(command.split())  # a `python -c` program has newlines
    if len(command) > 60:
        command = command[:57] + "..."
    return f"pid {pid} ({command})"


def _device_name(device: GpuSample) -> str:
    """The CUDA ordinal the job will use, then the physical device: ``cuda:1 (GPU 3, NVIDIA H100)``."""
    name = f", {device.name}" if device.name else ""
    return f"cuda:{device.cuda_index} ({device.label}{name})"


def _device_fields(device: GpuSample) -> dict[str, str]:
    fields = {"gpu": str(device.index), "cuda_device": str(device.cuda_index),
              "gpu_name": device.name or "", "uuid": device.uuid or ""}
    if device.mig_index is not None:
        fields["mig"] = str(device.mig_index)
    return fields


def free_port() -> int:
    """A port the kernel says is free right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("", 0))
        return sock.getsockname()[1]


def check_port(plan: LaunchPlan) -> list[Finding]:
    if plan.master_port is None:
        return []
    host = plan.master_addr or ""
    if host in ("localhost", "127.0.0.1", "::1"):
        host = ""  # rank 0's store listens on every address
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, plan.master_port))
    except OSError as exc:
        if exc.errno != errno.EADDRINUSE:
            return []  # not an address of this machine: rank 0 runs elsewhere
        port = free_port()
        return [_finding(
            "port", "warning", f"Port {plan.master_port} ({plan.port_source}) is already in use",
            f"Rank 0 cannot listen on port {plan.master_port}: another job or a stale rank holds it "
            f"(`ss -ltnp 'sport = :{plan.master_port}'`). Port {port} is free now; or use "
            "`torchrun --standalone` on one node.",
            [f"{plan.port_source}={plan.master_port}"], category="port_in_use",
            port=str(plan.master_port), free_port=str(port))]
    return []


def _resolves(host: str) -> str | None:
    """None when ``host`` resolves, else the error, within RESOLVE_TIMEOUT_S."""
    result: list[str | None] = ["timed out"]

    def lookup() -> None:
        try:
            socket.getaddrinfo(host, None)
            result[0] = None
        except OSError as exc:
            result[0] = str(exc)

    thread = threading.Thread(target=lookup, daemon=True)
    thread.start()
    thread.join(RESOLVE_TIMEOUT_S)
    return result[0]


def check_master_addr(plan: LaunchPlan, env: dict[str, str]) -> list[Finding]:
    host = plan.master_addr or env.get("MASTER_ADDR")
    if not host:
        return []
    error = _resolves(host)
    if error is None:
        return []
    return [_finding("master-addr", "warning", f"MASTER_ADDR {host} does not resolve",
                     f"Looking up {host} failed ({error}): every rank would time out at the "
                     "rendezvous. Use an address that every node can resolve, e.g. the first "
                     "host of `scontrol show hostnames $SLURM_JOB_NODELIST`.",
                     [f"MASTER_ADDR={host}"], host=host)]


def _existing(path: Path) -> Path:
    path = path.absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def check_disk(path: Path, minimum: int, what: str) -> list[Finding]:
    try:
        usage = shutil.disk_usage(_existing(path))
    except OSError:
        return []
    if usage.free >= minimum:
        return []
    return [_finding(f"disk-{what}", "warning",
                     f"Only {usage.free / GIB:.1f} GiB free for {what} in {path}",
                     f"{path} has {usage.free / GIB:.1f} GiB free: a {what} write may fail half-way "
                     "('No space left on device', truncated file). Free space or write elsewhere.",
                     [f"{path}: {usage.free} bytes free"], category="disk_full", path=str(path))]


def check_shm(shm: Path = Path("/dev/shm")) -> list[Finding]:
    try:
        total = shutil.disk_usage(shm).total
    except OSError:
        return []
    if total >= MIN_SHM:
        return []
    return [_finding("shm", "warning", f"/dev/shm is only {total / (1 << 20):.0f} MiB",
                     f"/dev/shm holds {total / (1 << 20):.0f} MiB. {advice('shm')}",
                     [f"/dev/shm: {total} bytes"], category="shm_exhausted", size=str(total))]


def check_latest_checkpoint(directory: Path) -> list[Finding]:
    """The checkpoint a job would resume from is the newest one: a quick structural check."""
    from monitor.checkpoints.verify import check_checkpoint, checkpoint_files

    if not directory.is_dir():
        return []
    files = []
    for path in checkpoint_files(directory):
        try:
            files.append((path.stat().st_mtime, path))
        except OSError:
            continue
    if not files:
        return []
    result = check_checkpoint(max(files)[1], deep=False)
    if result.ok:
        return []
    return [_finding("checkpoint", "warning", f"The newest checkpoint {result.path.name} is bad: {result.detail}",
                     f"A job that resumes from {result.path} will fail to load it. Resume from the "
                     "previous checkpoint (move the bad one aside), and check free disk space.",
                     [result.line()], category="corrupt_checkpoint", path=str(result.path))]


def run_checks(plan: LaunchPlan, env: dict[str, str], log_dir: Path,
               checkpoint_dirs: list[Path]) -> list[Finding]:
    found = check_knobs(env)
    found += check_gpus(plan, env)
    found += check_port(plan)
    found += check_master_addr(plan, env)
    found += check_disk(log_dir, MIN_LOG_FREE, "logs")
    for directory in checkpoint_dirs:
        found += check_disk(directory, MIN_CKPT_FREE, "checkpoints")
        found += check_latest_checkpoint(directory)
    found += check_shm()
    return found
