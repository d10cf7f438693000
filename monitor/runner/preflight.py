"""Checks before a launch. Each problem is a ``Finding``; a check never raises and never blocks.

The checks read the command (``launchers.parse``), the environment and the machine: GPUs visible
against processes asked for, GPU memory already in use, the rendezvous port, MASTER_ADDR, free
disk for logs and checkpoints, /dev/shm, and debugging knobs left on.
"""

from __future__ import annotations

import errno
import shutil
import socket
import threading
from pathlib import Path

from monitor.diagnosis.model import Finding, Severity
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
                   title=title, rank=None, ranks=[], file="", line=0, count=1, evidence=evidence,
                   fields=dict(fields), remedy=remedy)


def check_knobs(env: dict[str, str]) -> list[Finding]:
    found = []
    for name, (bad_values, severity, remedy) in KNOBS.items():
        value = env.get(name)
        if value is None or (bad_values is not None and value.upper() not in bad_values):
            continue
        found.append(_finding(f"knob-{name.lower()}", severity, f"{name}={value} is set",
                              remedy.format(value=value), [f"{name}={value}"], variable=name, value=value))
    return found


def visible_gpu_indices(env: dict[str, str], count: int) -> list[str]:
    """The devices a job sees given CUDA_VISIBLE_DEVICES (indices or UUIDs, as written)."""
    value = env.get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return [str(i) for i in range(count)]
    visible = []
    for item in (x.strip() for x in value.split(",")):
        # CUDA stops at the first invalid entry (e.g. -1 hides every GPU).
        if not item or item.startswith("-") or (item.isdigit() and int(item) >= count):
            break
        visible.append(item)
    return visible


def check_gpus(plan: LaunchPlan, env: dict[str, str]) -> list[Finding]:
    try:
        import pynvml
        pynvml.nvmlInit()
    except Exception as exc:  # ImportError, NVMLError_LibraryNotFound, NVMLError_DriverNotLoaded...
        return [_finding("no-gpu", "info", "No NVIDIA GPU visible (NVML unavailable)",
                         f"NVML could not start ({exc}); GPU checks skipped. Fine for a CPU/gloo job.",
                         [str(exc)])]
    try:
        return _check_devices(pynvml, plan, env)
    except pynvml.NVMLError as exc:
        return [_finding("nvml-error", "info", "GPU checks failed", f"NVML error: {exc}", [str(exc)])]
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass


def _check_devices(pynvml, plan: LaunchPlan, env: dict[str, str]) -> list[Finding]:
    found = []
    visible = visible_gpu_indices(env, pynvml.nvmlDeviceGetCount())
    wanted = plan.processes
    if wanted is not None and wanted > len(visible):
        cvd = env.get("CUDA_VISIBLE_DEVICES")
        where = f"CUDA_VISIBLE_DEVICES={cvd}" if cvd is not None else "this machine"
        found.append(_finding(
            "gpu-count", "warning",
            f"{wanted} processes per node asked for, {len(visible)} GPUs visible",
            f"{where} shows {len(visible)} GPU(s) but the command starts {wanted} processes per "
            f"node: ranks would share a GPU or fail with 'invalid device ordinal'. Use "
            f"--nproc-per-node={len(visible)} or make more GPUs visible.",
            [f"nproc_per_node={plan.nproc_per_node}", f"visible={','.join(visible)}"],
            asked=str(wanted), visible=str(len(visible))))
    for item in visible:
        handle = (pynvml.nvmlDeviceGetHandleByIndex(int(item)) if item.isdigit()
                  else pynvml.nvmlDeviceGetHandleByUUID(item))
        memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
        if memory.total and memory.used > GPU_BUSY_SHARE * memory.total:
            try:
                pids = [p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle)]
            except pynvml.NVMLError:
                pids = []
            owners = f" by pid {', '.join(map(str, pids))}" if pids else ""
            found.append(_finding(
                "gpu-busy", "warning",
                f"GPU {item} already has {memory.used / GIB:.1f} GiB of {memory.total / GIB:.1f} GiB in use",
                f"Only {memory.free / GIB:.1f} GiB free on GPU {item} before the job starts (used{owners}). "
                "A leftover run? Stop it, or expect CUDA out of memory.",
                [f"GPU {item}: used {memory.used} of {memory.total} bytes"], gpu=item))
    return found


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
                     f"/dev/shm holds {total / (1 << 20):.0f} MiB: DataLoader workers and NCCL's "
                     "shared-memory transport fail with 'Bus error' or 'Error while attaching to "
                     "shared memory'. Run the container with --shm-size=16g or --ipc=host.",
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
