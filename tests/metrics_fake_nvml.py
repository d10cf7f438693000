"""A fake NVML with pynvml's API surface, raising the REAL ``pynvml.NVMLError_*`` classes.

``FakeNvml`` is module-like: inject it as ``Sampler(nvml=fake)`` / ``Nvml(fake)``. Its GPUs
are plain dataclasses that a test changes between samples (memory grows, a GPU falls off the
bus, an Xid arrives). Driver generations are modelled the way real nvidia-ml-py behaves on
them: the Python function exists but raises NVMLError_FunctionNotFound (``not_found``), or,
for very old bindings, the name is missing altogether (``absent``). ``calls`` counts every
NVML call by name, so tests can check what is probed once and what is cached.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from types import SimpleNamespace

import pynvml

GIB = 1024**3

# Symbols a pre-R535-era driver lacks: processes _v3, the "clocks event" rename, EventSetWait_v2.
OLD_DRIVER_NOT_FOUND = frozenset({
    "nvmlDeviceGetComputeRunningProcesses_v3",
    "nvmlDeviceGetCurrentClocksEventReasons",
    "nvmlEventSetWait_v2",
})


@dataclass
class FakeProcess:
    pid: int
    usedGpuMemory: int | None  # noqa: N815 (pynvml's name)


@dataclass
class FakeMig:
    name: str
    uuid: str
    gpu_instance_id: int
    memory_used: int = 1 * GIB
    memory_total: int = 10 * GIB
    processes: list[FakeProcess] = field(default_factory=list)


@dataclass
class FakeGpu:
    name: str = "NVIDIA H100 80GB HBM3"
    uuid: str = "GPU-00000000-0000-0000-0000-000000000000"
    utilization_gpu: int = 97
    utilization_memory: int = 40
    memory_used: int = 40 * GIB
    memory_total: int = 80 * GIB
    memory_reserved: int = 0  # the driver's own (v2's reserved; v1 counts it as used)
    temperature: int = 65
    power_mw: int = 550_000
    power_limit_mw: int = 700_000
    sm_clock: int = 1980
    memory_clock: int = 2619
    clock_reasons: int = 0
    fan: int = 40
    pcie_tx_kb: int = 1000
    pcie_rx_kb: int = 2000
    ecc_corrected: int = 0
    ecc_uncorrected: int = 0
    retired_sbe: list[int] = field(default_factory=list)
    retired_dbe: list[int] = field(default_factory=list)
    remapped: tuple[int, int, int, int] = (0, 0, 0, 0)
    processes: list[FakeProcess] = field(default_factory=list)
    migs: list[FakeMig] = field(default_factory=list)
    # Function names that raise NVMLError_NotSupported on this GPU.
    unsupported: set[str] = field(default_factory=set)
    lost: bool = False


@dataclass(frozen=True)
class FakeHandle:
    gpu: FakeGpu
    mig: FakeMig | None = None


class FakeEventSet:
    def __init__(self) -> None:
        self.handles: list[FakeHandle] = []
        self.pending: list[SimpleNamespace] = []


def make_gpus(count: int, **fields) -> list[FakeGpu]:
    return [FakeGpu(uuid=f"GPU-{i:08d}-aaaa-bbbb-cccc-{i:012d}", **fields) for i in range(count)]


class FakeNvml:
    NVMLError = pynvml.NVMLError
    nvmlMemory_v2 = pynvml.nvmlMemory_v2

    def __init__(
        self,
        gpus: list[FakeGpu],
        *,
        init_error: type[pynvml.NVMLError] | None = None,
        not_found: frozenset[str] | set[str] = frozenset(),
        absent: frozenset[str] | set[str] = frozenset(),
        driver_version: str = "550.54.15",
    ) -> None:
        self.gpus = gpus
        self.init_error = init_error
        self.not_found = set(not_found)
        self.absent = set(absent)
        self.driver_version = driver_version
        self.calls: Counter[str] = Counter()
        self.event_sets: list[FakeEventSet] = []
        self.initialised = False
        self.shutdowns = 0

    def __getattribute__(self, name: str):
        if name.startswith("NVMLError"):
            return getattr(pynvml, name)
        if name.startswith("nvml"):
            if name in object.__getattribute__(self, "absent"):
                raise AttributeError(name)
            fn = object.__getattribute__(self, name)
            if not callable(fn):  # a constant (nvmlMemory_v2)
                return fn
            calls = object.__getattribute__(self, "calls")
            not_found = object.__getattribute__(self, "not_found")

            def counted(*args):
                calls[name] += 1
                if name in not_found:
                    raise pynvml.NVMLError_FunctionNotFound()
                return fn(*args)

            return counted
        return object.__getattribute__(self, name)

    # -- test controls -------------------------------------------------------------------

    def emit_xid(self, gpu_index: int, xid: int) -> None:
        gpu = self.gpus[gpu_index]
        for event_set in self.event_sets:
            for handle in event_set.handles:
                if handle.gpu is gpu:
                    event_set.pending.append(
                        SimpleNamespace(device=handle, eventType=0x8, eventData=xid, gpuInstanceId=0, computeInstanceId=0)
                    )

    # -- library -------------------------------------------------------------------------

    def nvmlInit(self):
        if self.init_error is not None:
            raise self.init_error()
        self.initialised = True

    def nvmlInitWithFlags(self, flags):
        self.nvmlInit()

    def _nvmlGetFunctionPointer(self, name):
        if name in self.absent or name in self.not_found:
            raise pynvml.NVMLError_FunctionNotFound()
        return getattr(self, name)

    def nvmlShutdown(self):
        self.shutdowns += 1
        self.initialised = False

    def nvmlSystemGetDriverVersion(self):
        return self.driver_version

    def nvmlDeviceGetCount(self):
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index):
        if index >= len(self.gpus):
            raise pynvml.NVMLError_InvalidArgument()
        gpu = self.gpus[index]
        self._check(gpu, "nvmlDeviceGetHandleByIndex")
        return FakeHandle(gpu)

    def _check(self, gpu: FakeGpu, name: str) -> None:
        if not self.initialised:
            raise pynvml.NVMLError_Uninitialized()
        if gpu.lost:
            raise pynvml.NVMLError_GpuIsLost()
        if name in gpu.unsupported:
            raise pynvml.NVMLError_NotSupported()

    def _gpu(self, handle: FakeHandle, name: str) -> FakeGpu:
        self._check(handle.gpu, name)
        return handle.gpu

    def nvmlDeviceGetName(self, handle):
        gpu = self._gpu(handle, "nvmlDeviceGetName")
        return handle.mig.name if handle.mig else gpu.name

    def nvmlDeviceGetUUID(self, handle):
        gpu = self._gpu(handle, "nvmlDeviceGetUUID")
        return handle.mig.uuid if handle.mig else gpu.uuid

    def nvmlDeviceGetUtilizationRates(self, handle):
        gpu = self._gpu(handle, "nvmlDeviceGetUtilizationRates")
        if handle.mig:
            raise pynvml.NVMLError_NotSupported()
        return SimpleNamespace(gpu=gpu.utilization_gpu, memory=gpu.utilization_memory)

    def nvmlDeviceGetMemoryInfo(self, handle, version=None):
        """As nvidia-ml-py: v1 (``c_nvmlMemory_t``) counts the driver's reserved memory as used;
        with ``version=nvmlMemory_v2`` (``c_nvmlMemory_v2_t``, nvmlDeviceGetMemoryInfo_v2) it is
        apart, and ``used`` is what nvidia-smi shows."""
        gpu = self._gpu(handle, "nvmlDeviceGetMemoryInfo")
        if version and "nvmlDeviceGetMemoryInfo_v2" in self.not_found:
            raise pynvml.NVMLError_FunctionNotFound()
        used, total = (handle.mig.memory_used, handle.mig.memory_total) if handle.mig else (gpu.memory_used, gpu.memory_total)
        reserved = 0 if handle.mig else gpu.memory_reserved
        if version:
            return SimpleNamespace(version=version, total=total, reserved=reserved, free=total - used - reserved, used=used)
        return SimpleNamespace(total=total, free=total - used - reserved, used=used + reserved)

    def nvmlDeviceGetTemperature(self, handle, sensor):
        return self._gpu(handle, "nvmlDeviceGetTemperature").temperature

    def nvmlDeviceGetPowerUsage(self, handle):
        return self._gpu(handle, "nvmlDeviceGetPowerUsage").power_mw

    def nvmlDeviceGetEnforcedPowerLimit(self, handle):
        return self._gpu(handle, "nvmlDeviceGetEnforcedPowerLimit").power_limit_mw

    def nvmlDeviceGetPowerManagementLimit(self, handle):
        return self._gpu(handle, "nvmlDeviceGetPowerManagementLimit").power_limit_mw

    def nvmlDeviceGetClockInfo(self, handle, clock):
        gpu = self._gpu(handle, "nvmlDeviceGetClockInfo")
        return {1: gpu.sm_clock, 2: gpu.memory_clock}[clock]

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle):
        return self._gpu(handle, "nvmlDeviceGetCurrentClocksEventReasons").clock_reasons

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle):
        return self._gpu(handle, "nvmlDeviceGetCurrentClocksThrottleReasons").clock_reasons

    def nvmlDeviceGetFanSpeed(self, handle):
        return self._gpu(handle, "nvmlDeviceGetFanSpeed").fan

    def nvmlDeviceGetPcieThroughput(self, handle, counter):
        gpu = self._gpu(handle, "nvmlDeviceGetPcieThroughput")
        return {0: gpu.pcie_tx_kb, 1: gpu.pcie_rx_kb}[counter]

    def nvmlDeviceGetTotalEccErrors(self, handle, error_type, counter_type):
        gpu = self._gpu(handle, "nvmlDeviceGetTotalEccErrors")
        return {0: gpu.ecc_corrected, 1: gpu.ecc_uncorrected}[error_type]

    def nvmlDeviceGetRetiredPages(self, handle, cause):
        gpu = self._gpu(handle, "nvmlDeviceGetRetiredPages")
        return list({0: gpu.retired_sbe, 1: gpu.retired_dbe}[cause])

    def nvmlDeviceGetRemappedRows(self, handle):
        return self._gpu(handle, "nvmlDeviceGetRemappedRows").remapped

    def _processes(self, handle, name):
        gpu = self._gpu(handle, name)
        procs = handle.mig.processes if handle.mig else gpu.processes
        return [SimpleNamespace(pid=p.pid, usedGpuMemory=p.usedGpuMemory) for p in procs]

    def nvmlDeviceGetComputeRunningProcesses_v3(self, handle):
        return self._processes(handle, "nvmlDeviceGetComputeRunningProcesses_v3")

    def nvmlDeviceGetComputeRunningProcesses_v2(self, handle):
        return self._processes(handle, "nvmlDeviceGetComputeRunningProcesses_v2")

    def nvmlDeviceGetComputeRunningProcesses(self, handle):
        return self._processes(handle, "nvmlDeviceGetComputeRunningProcesses")

    def nvmlDeviceGetMigMode(self, handle):
        gpu = self._gpu(handle, "nvmlDeviceGetMigMode")
        return (1, 1) if gpu.migs else (0, 0)

    def nvmlDeviceGetMaxMigDeviceCount(self, handle):
        self._gpu(handle, "nvmlDeviceGetMaxMigDeviceCount")
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle, index):
        gpu = self._gpu(handle, "nvmlDeviceGetMigDeviceHandleByIndex")
        if index >= len(gpu.migs):
            raise pynvml.NVMLError_NotFound()
        return FakeHandle(gpu, gpu.migs[index])

    def nvmlDeviceGetGpuInstanceId(self, handle):
        self._gpu(handle, "nvmlDeviceGetGpuInstanceId")
        if handle.mig is None:
            raise pynvml.NVMLError_InvalidArgument()
        return handle.mig.gpu_instance_id

    def nvmlEventSetCreate(self):
        event_set = FakeEventSet()
        self.event_sets.append(event_set)
        return event_set

    def nvmlDeviceRegisterEvents(self, handle, event_types, event_set):
        self._gpu(handle, "nvmlDeviceRegisterEvents")
        event_set.handles.append(handle)

    def _wait(self, event_set, timeout_ms):
        if not event_set.pending:
            raise pynvml.NVMLError_Timeout()
        return event_set.pending.pop(0)

    def nvmlEventSetWait_v2(self, event_set, timeout_ms):
        return self._wait(event_set, timeout_ms)

    def nvmlEventSetWait(self, event_set, timeout_ms):
        return self._wait(event_set, timeout_ms)

    def nvmlEventSetFree(self, event_set):
        self.event_sets.remove(event_set)
