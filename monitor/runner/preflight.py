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
from typing import Any, cast

import psutil

from monitor.diagnosis.advice import advice
from monitor.model import Category, Finding, Severity
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
# variable: (the values that cost, None for any; severity; the advice in advice.toml)
KNOBS: dict[str, tuple[set[str] | None, Severity, str]] = {
    "NCCL_DEBUG": ({"INFO", "TRACE"}, "warning", "knob-nccl-debug"),
    "NCCL_DEBUG_SUBSYS": (None, "info", "knob-nccl-debug-subsys"),
    "CUDA_LAUNCH_BLOCKING": ({"1"}, "warning", "knob-cuda-launch-blocking"),
    "TORCH_DISTRIBUTED_DEBUG": ({"DETAIL"}, "warning", "knob-torch-distributed-debug"),
    "NCCL_P2P_DISABLE": ({"1"}, "info", "knob-nccl-p2p-disable"),
    "NCCL_TIMEOUT": (None, "warning", "knob-nccl-timeout"),
}


def _finding(name: str, severity: Severity, title: str, remedy: str, evidence: list[str],
             category: str = "preflight", **fields: str) -> Finding:
    return Finding(rule=f"preflight-{name}", category=Category(category), severity=severity, role="confirm",
                   title=title, evidence=evidence, fields=dict(fields), remedy=remedy, origin="preflight")


def check_knobs(env: dict[str, str]) -> list[Finding]:
    found = []
    for name, (bad_values, severity, advice_id) in KNOBS.items():
        value = env.get(name)
        if value is None or (bad_values is not None and value.upper() not in bad_values):
            continue
        found.append(_finding(f"knob-{name.lower()}", severity, advice("title-knob-set", variable=name, value=value),
                              advice(advice_id, value=value), [f"{name}={value}"], variable=name, value=value))
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
        return [_finding("nvml-error", "info", advice("title-gpu-checks-failed"), advice("nvml-error", error=str(exc)),
                         [f"{type(exc).__name__}: {exc}"])]
    finally:
        if reader is not None:
            reader.close()
        nvml.shutdown()


# Why NVML shows no GPU, in a title's few words (the finding's remedy says it in full): the advice.
_NO_GPU_REASONS = {"no_library": "no-gpu-no-library", "no_driver": "no-gpu-no-driver",
                   "version_mismatch": "no-gpu-version-mismatch", "ok": "no-gpu-none"}


def _no_gpu(status: str, message: str) -> Finding:
    # A driver that is installed but broken is a GPU machine the job cannot use; the rest is
    # what a CPU machine looks like.
    severity: Severity = "warning" if status in ("no_driver", "version_mismatch") else "info"
    return _finding("no-gpu", severity,
                    advice("title-no-gpu", reason=advice(_NO_GPU_REASONS.get(status, "no-gpu-unavailable"))),
                    advice("no-gpu", message=message),
                    [message], status=status)


def _check_devices(plan: LaunchPlan, env: dict[str, str], devices: list[GpuSample]) -> list[Finding]:
    visible = sorted((d for d in devices if d.cuda_index is not None), key=lambda d: cast(int, d.cuda_index))
    found = _check_count(plan, env.get("CUDA_VISIBLE_DEVICES"), visible)
    for device in visible:
        if device.status == "lost":
            found.append(_finding(
                "gpu-lost", "warning", advice("title-gpu-lost", gpu=_device_name(device)),
                advice("gpu-lost-before-launch", message=device.message),
                [device.message], category="gpu_hardware", **_device_fields(device)))
        elif device.status != "ok":
            found.append(_finding("nvml-error", "info", advice("title-gpu-unreadable", device=_device_name(device)),
                                  advice("gpu-unreadable", error=device.message),
                                  [device.message], **_device_fields(device)))
        elif (busy := _check_busy(device)) is not None:
            found.append(busy)
    return found


def _check_count(plan: LaunchPlan, cvd: str | None, visible: list[GpuSample]) -> list[Finding]:
    wanted = plan.processes
    if wanted is None or wanted <= len(visible):
        return []
    where = f'CUDA_VISIBLE_DEVICES="{cvd}"' if cvd is not None else advice("gpu-count-this-machine")
    evidence = [f"{plan.launcher} processes per node: {plan.nproc_per_node}"]
    if cvd is not None:
        evidence.append(f'CUDA_VISIBLE_DEVICES="{cvd}"')
    evidence += [f"{_device_name(d)} {d.uuid or ''}".rstrip() for d in visible]
    # CUDA reads the list up to its first entry that names no device here (-1, a typo, an
    # index past the last GPU, an unknown or ambiguous UUID prefix) and ignores the rest.
    cut = (advice("gpu-count-cut")
           if cvd is not None and cvd.strip() and len(cvd.split(",")) > len(visible) else "")
    if not visible:
        remedy = advice("gpu-count-none", where=where, cut=cut, asked=str(wanted))
    else:
        more = advice("gpu-count-more-visible" if cvd is not None else "gpu-count-no-more")
        remedy = advice("gpu-count-fewer", where=where, visible=str(len(visible)), cut=cut, asked=str(wanted),
                        option=_processes_option(plan, len(visible)), more=more)
    return [_finding("gpu-count", "warning",
                     advice("title-gpu-count", asked=str(wanted), visible=str(len(visible))),
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
    by = advice("gpu-busy-by", owners=", ".join(owners)) if owners else advice("gpu-busy-by-nobody")
    name = _device_name(device)
    return _finding(
        "gpu-busy", "warning",
        advice("title-gpu-busy", device=name, used=f"{used / GIB:.1f}", total=f"{total / GIB:.1f}"),
        advice("gpu-busy", free=f"{(total - used) / GIB:.1f}", device=name, by=by),
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
            "port", "warning", advice("title-port-in-use", port=str(plan.master_port), source=str(plan.port_source)),
            advice("port-in-use", port=str(plan.master_port), free_port=str(port)),
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
    return [_finding("master-addr", "warning", advice("title-master-addr", host=host),
                     advice("master-addr", host=host, error=error),
                     [f"MASTER_ADDR={host}"], host=host)]


def _existing(path: Path) -> Path:
    path = path.absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


# What a disk is for -> the advice of its title and remedy.
_DISK_ADVICE = {"logs": ("title-disk-logs", "disk-logs"), "checkpoints": ("title-disk-checkpoints", "disk-checkpoints")}


def check_disk(path: Path, minimum: int, what: str) -> list[Finding]:
    try:
        usage = shutil.disk_usage(_existing(path))
    except OSError:
        return []
    if usage.free >= minimum:
        return []
    place = {"free": f"{usage.free / GIB:.1f}", "path": str(path)}
    title, remedy = (advice(advice_id, **place) for advice_id in _DISK_ADVICE[what])
    return [_finding(f"disk-{what}", "warning", title, remedy,
                     [f"{path}: {usage.free} bytes free"], category="disk_full", path=str(path))]


def check_shm(shm: Path = Path("/dev/shm")) -> list[Finding]:
    try:
        total = shutil.disk_usage(shm).total
    except OSError:
        return []
    if total >= MIN_SHM:
        return []
    size = f"{total / (1 << 20):.0f}"
    return [_finding("shm", "warning", advice("title-shm-small", size=size),
                     advice("shm-small", size=size, shm=advice("shm")),
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
    return [_finding("checkpoint", "warning",
                     advice("title-newest-checkpoint-bad", name=result.path.name, detail=result.detail),
                     advice("newest-checkpoint-bad", path=str(result.path)),
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
