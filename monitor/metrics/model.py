"""Plain data for one metrics sample: GPUs (NVML), host (psutil) and the job's process tree.

Every field name carries its unit (``memory_used_bytes``, ``power_w``, ``sm_clock_mhz``,
``temperature_c``, ``..._percent``, ``..._per_s``), so ``monitor metrics --json`` and the
recording file are plain numbers. ``None`` means "not available" on this machine or driver
(NotSupported, FunctionNotFound, no permission), never zero.

``Sample.to_json()`` and ``Sample.from_json()`` round-trip exactly; the recording file
(``record.py``) is one ``to_json()`` per line.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Literal

# Why there are (or are not) GPU metrics in a sample.
#   ok: NVML works; no_library: libnvidia-ml not found; no_driver: the kernel driver is not
#   loaded; version_mismatch: driver and library differ (upgrade without reboot);
#   error: any other NVML init failure. ``Sample.gpu_message`` says it in words.
GpuStatus = Literal["ok", "no_library", "no_driver", "version_mismatch", "error"]

# One device's state: ok; lost: fell off the bus (NVMLError_GpuIsLost); error: its handle
# could not be read. ``GpuSample.message`` says why.
DeviceStatus = Literal["ok", "lost", "error"]

# How NVML's PIDs relate to ours: mapped (NVML PIDs are in our PID namespace);
# unmapped (NVML reports processes whose PIDs do not exist here: a container without the
# host PID namespace, so per-process GPU memory cannot be attributed); none (no GPU
# processes reported, or no GPU metrics).
PidMapping = Literal["mapped", "unmapped", "none"]

# A GPU event new since the monitor started (counters are turned into events by the sampler).
#   xid: an Xid critical error (``code`` is the Xid number); ecc_corrected / ecc_uncorrected:
#   the volatile ECC count rose by ``count``; remapped_rows: rows remapped (``detail`` says
#   which kind); retired_pages: pages retired (older GPUs without row remapping); throttle: a thermal or power clock-event reason became active (``detail``
#   lists them); lost: the GPU fell off the bus.
GpuEventKind = Literal[
    "xid", "ecc_corrected", "ecc_uncorrected", "remapped_rows", "retired_pages", "throttle", "lost"
]


@dataclass(slots=True)
class GpuProcess:
    """A process that NVML reports on a GPU."""

    pid: int
    used_memory_bytes: int | None
    # False when the PID does not exist in our PID namespace (see ``PidMapping``).
    visible: bool = True
    # Set when the PID belongs to the watched job.
    rank: int | None = None


@dataclass(slots=True)
class GpuSample:
    """One GPU (or one MIG device) at one moment."""

    index: int  # NVML index of the physical GPU
    # The CUDA ordinal the job sees (CUDA_VISIBLE_DEVICES order); None when not visible to it.
    cuda_index: int | None
    name: str | None
    uuid: str | None  # "GPU-..." or, for a MIG device, "MIG-..."
    status: DeviceStatus = "ok"
    message: str = ""
    # MIG: the index of this MIG device within its parent GPU ``index``; None for a full GPU.
    mig_index: int | None = None
    utilization_gpu_percent: float | None = None
    utilization_memory_percent: float | None = None
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    temperature_c: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    sm_clock_mhz: int | None = None
    memory_clock_mhz: int | None = None
    # Active clock-event (throttle) reasons, by name: "gpu_idle", "sw_power_cap",
    # "hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown",
    # "sync_boost", "applications_clocks_setting", "display_clock_setting". None: unknown.
    clock_event_reasons: list[str] | None = None
    fan_percent: float | None = None
    pcie_tx_bytes_per_s: float | None = None
    pcie_rx_bytes_per_s: float | None = None
    # Raw counters as the driver reports them (events are in ``Sample.events``).
    ecc_volatile_corrected: int | None = None
    ecc_volatile_uncorrected: int | None = None
    retired_pages_sbe: int | None = None
    retired_pages_dbe: int | None = None
    remapped_rows_correctable: int | None = None
    remapped_rows_uncorrectable: int | None = None
    remapped_rows_pending: bool | None = None
    remapped_rows_failed: bool | None = None
    processes: list[GpuProcess] = field(default_factory=list)
    # The node of a multi-node job this GPU is on, when a watch shows several nodes' GPUs.
    node: str | None = None

    @property
    def memory_used_fraction(self) -> float | None:
        if self.memory_used_bytes is None or not self.memory_total_bytes:
            return None
        return self.memory_used_bytes / self.memory_total_bytes

    @property
    def label(self) -> str:
        """How the UI names this device: "GPU 3", "GPU 3 MIG 1", "gpu-07 GPU 3" on a job of several nodes."""
        label = f"GPU {self.index}" if self.mig_index is None else f"GPU {self.index} MIG {self.mig_index}"
        return f"{self.node} {label}" if self.node else label


@dataclass(slots=True)
class GpuEvent:
    """Something that happened on a GPU since the monitor started (not a raw counter)."""

    kind: GpuEventKind
    gpu_index: int
    time: float  # time.time() when the sampler saw it
    count: int = 1
    code: int | None = None  # the Xid number for kind == "xid"
    detail: str = ""
    uuid: str | None = None


@dataclass(slots=True)
class DirUsage:
    """Free space of a watched directory (the logs, the checkpoints)."""

    path: str
    total_bytes: int | None
    used_bytes: int | None
    free_bytes: int | None
    message: str = ""  # why the numbers are missing (e.g. the directory does not exist)


@dataclass(slots=True)
class HostSample:
    """The machine, through psutil. Rates are per second since the previous sample (None on the first)."""

    cpu_percent: float
    cpu_per_core_percent: list[float]
    memory_total_bytes: int
    memory_used_bytes: int
    memory_available_bytes: int
    swap_total_bytes: int
    swap_used_bytes: int
    load_1m: float | None
    load_5m: float | None
    load_15m: float | None
    disk_read_bytes_per_s: float | None = None
    disk_write_bytes_per_s: float | None = None
    net_sent_bytes_per_s: float | None = None
    net_recv_bytes_per_s: float | None = None
    # /dev/shm (dataloader workers, NCCL's shared-memory transport); None where it does not exist.
    shm_total_bytes: int | None = None
    shm_used_bytes: int | None = None
    dirs: list[DirUsage] = field(default_factory=list)

    @property
    def memory_used_fraction(self) -> float:
        """Memory in use as the kernel sees it: 1 - available / total."""
        return 1.0 - self.memory_available_bytes / self.memory_total_bytes if self.memory_total_bytes else 0.0

    @property
    def shm_used_fraction(self) -> float | None:
        if self.shm_used_bytes is None or not self.shm_total_bytes:
            return None
        return self.shm_used_bytes / self.shm_total_bytes


@dataclass(slots=True)
class JobProcess:
    """One process of the watched job's tree."""

    pid: int
    ppid: int | None
    name: str
    cpu_percent: float | None  # of one core (can exceed 100); None on the first sample
    rss_bytes: int | None
    # From /proc/PID/environ where readable (RANK, LOCAL_RANK); None otherwise.
    rank: int | None = None
    local_rank: int | None = None
    # True for a helper of a rank (a DataLoader worker, a compile worker): its parent carries
    # the same RANK. The rank's own process is the one with ``worker`` False.
    worker: bool = False
    # The few environment variables that change advice (``job.ENV_KEPT``), where readable.
    env: dict[str, str] = field(default_factory=dict)
    # NVML memory of this PID summed over GPUs, and the NVML indices of those GPUs.
    gpu_memory_bytes: int | None = None
    gpu_indices: list[int] = field(default_factory=list)


@dataclass(slots=True)
class JobSample:
    """The watched job: its root PIDs and their process tree."""

    root_pids: list[int]
    alive: bool  # any process of the tree still running
    processes: list[JobProcess] = field(default_factory=list)
    pid_mapping: PidMapping = "none"
    pid_mapping_message: str = ""  # said plainly when NVML PIDs cannot be mapped

    @property
    def gpu_indices(self) -> list[int]:
        """The NVML indices of the GPUs the job's processes use, sorted."""
        return sorted({i for p in self.processes for i in p.gpu_indices})


@dataclass(slots=True)
class Sample:
    """Everything measured at one moment."""

    time: float  # time.time()
    host: HostSample
    gpu_status: GpuStatus
    gpu_message: str  # why there are no GPU metrics, or notes (e.g. functions this driver lacks)
    gpus: list[GpuSample] = field(default_factory=list)
    events: list[GpuEvent] = field(default_factory=list)  # new since the previous sample
    job: JobSample | None = None
    driver_version: str | None = None
    # CPU seconds the sampler itself spent on this sample (its own overhead).
    sample_cpu_s: float | None = None

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> Sample:
        """The inverse of ``to_json``; unknown keys (from a newer version) are ignored."""
        host = dict(_known(HostSample, data["host"]))
        host["dirs"] = [DirUsage(**_known(DirUsage, d)) for d in host.get("dirs", [])]
        gpus = []
        for raw in data.get("gpus", []):
            gpu = dict(_known(GpuSample, raw))
            gpu["processes"] = [GpuProcess(**_known(GpuProcess, p)) for p in gpu.get("processes", [])]
            gpus.append(GpuSample(**gpu))
        job = None
        if data.get("job") is not None:
            raw_job = dict(_known(JobSample, data["job"]))
            raw_job["processes"] = [JobProcess(**_known(JobProcess, p)) for p in raw_job.get("processes", [])]
            job = JobSample(**raw_job)
        top = _known(cls, data)
        top.update(
            host=HostSample(**host),
            gpus=gpus,
            events=[GpuEvent(**_known(GpuEvent, e)) for e in data.get("events", [])],
            job=job,
        )
        return cls(**top)


def _known(cls: type, data: dict) -> dict:
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in data.items() if k in names}
