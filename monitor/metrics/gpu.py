"""Read every GPU (and MIG device) through NVML into ``GpuSample``s, and turn counters into events.

Handles, names and UUIDs are read once. Fields a driver does not support read as None and
the rest goes on; a GPU that falls off the bus is marked ``lost`` once and not asked again,
while the others keep being read. Xid errors come from an NVML event set where the driver
offers one; ECC, retired pages and remapped rows are counters whose *increases* since the
monitor started become ``GpuEvent``s; throttling becomes an event when it starts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from monitor.metrics.model import DeviceStatus, GpuEvent, GpuEventKind, GpuProcess, GpuSample
from monitor.metrics.nvml import GpuLost, Nvml
from monitor.metrics.visible import DeviceId, cuda_ordinals

# NVML constants (nvml.h; stable across driver generations, so a fake need not define them).
_TEMPERATURE_GPU = 0
_CLOCK_SM, _CLOCK_MEM = 1, 2
_PCIE_TX_BYTES, _PCIE_RX_BYTES = 0, 1
_ERROR_CORRECTED, _ERROR_UNCORRECTED = 0, 1
_VOLATILE_ECC = 0
_RETIRED_SBE, _RETIRED_DBE = 0, 1
_EVENT_XID = 0x8  # nvmlEventTypeXidCriticalError
_MIG_ENABLED = 1

# nvmlClocksEventReason* bits (formerly nvmlClocksThrottleReason*, same values).
CLOCK_EVENT_REASONS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
# The reasons that mean the GPU is held back by heat or power (the rest are benign or chosen).
THROTTLE_REASONS = (
    "sw_power_cap", "hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown",
)

_PROCESS_SYMBOLS = (
    "nvmlDeviceGetComputeRunningProcesses_v3",
    "nvmlDeviceGetComputeRunningProcesses_v2",
    "nvmlDeviceGetComputeRunningProcesses",
)
_CLOCK_REASON_SYMBOLS = ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons")
_POWER_LIMIT_SYMBOLS = ("nvmlDeviceGetEnforcedPowerLimit", "nvmlDeviceGetPowerManagementLimit")
_EVENT_WAIT_SYMBOLS = ("nvmlEventSetWait_v2", "nvmlEventSetWait")
# Slow-changing or slow-to-read fields (PCIe throughput blocks ~20 ms per call in the driver)
# are read on every SLOW_EVERY-th sample and repeated in between.
SLOW_EVERY = 5
# At most this many Xid events drained per sample, so a storm cannot stall the sampler.
_MAX_EVENTS_PER_SAMPLE = 256


@dataclass(slots=True)
class _Device:
    index: int
    mig_index: int | None
    handle: Any
    name: str | None
    uuid: str | None
    status: DeviceStatus = "ok"
    message: str = ""
    mig_enabled: bool = False
    parent: _Device | None = None
    gpu_instance_id: int | None = None
    lost_reported: bool = False
    counters: dict[str, int] = field(default_factory=dict)
    throttling: frozenset[str] = frozenset()
    slow: dict[str, Any] = field(default_factory=dict)
    # Whether to ask NVML's memory query v2 (R510 drivers on); False once the driver showed it lacks it.
    memory_v2: bool = True


def decode_clock_reasons(mask: int) -> list[str]:
    return [name for bit, name in CLOCK_EVENT_REASONS.items() if mask & bit]


class GpuReader:
    """All NVML devices of this machine, read one sample at a time."""

    def __init__(self, nvml: Nvml, visible_devices: str | None) -> None:
        self.nvml = nvml
        self.visible_devices = visible_devices
        self.devices: list[_Device] = []
        self._by_uuid: dict[str, _Device] = {}
        self._event_set: Any = None
        self._reads = 0
        self.driver_version: str | None = nvml.call("nvmlSystemGetDriverVersion")
        self._enumerate()

    # -- setup -------------------------------------------------------------------------------

    def _enumerate(self) -> None:
        try:
            count = self.nvml.call("nvmlDeviceGetCount") or 0
        except GpuLost:  # a GPU so broken that counting fails: no GPU rows, host metrics go on
            count = 0
        for index in range(count):
            device = self._open(index)
            self.devices.append(device)
            if device.mig_enabled:
                self.devices.extend(self._open_mig(device))
        self._by_uuid = {d.uuid: d for d in self.devices if d.uuid}
        ids = [
            DeviceId(d.index, d.mig_index, d.uuid, d.parent.uuid if d.parent else None, d.gpu_instance_id)
            for d in self.devices
        ]
        self._ordinals = cuda_ordinals(self.visible_devices, ids)
        self._register_xid_events()

    def _open(self, index: int) -> _Device:
        try:
            handle = self.nvml.call("nvmlDeviceGetHandleByIndex", index)
            if handle is None:
                return _Device(index, None, None, None, None, "error", "NVML gave no handle for this GPU")
            device = _Device(
                index, None, handle, self.nvml.call("nvmlDeviceGetName", handle),
                self.nvml.call("nvmlDeviceGetUUID", handle),
            )
            mode = self.nvml.call("nvmlDeviceGetMigMode", handle)
            device.mig_enabled = bool(mode) and mode[0] == _MIG_ENABLED
        except GpuLost as exc:
            return _Device(index, None, None, None, None, "lost", _lost_message(index, exc))
        return device

    def _open_mig(self, parent: _Device) -> list[_Device]:
        migs: list[_Device] = []
        try:
            slots = self.nvml.call("nvmlDeviceGetMaxMigDeviceCount", parent.handle) or 0
            for slot in range(slots):
                handle = self.nvml.call("nvmlDeviceGetMigDeviceHandleByIndex", parent.handle, slot)
                if handle is None:  # NotFound: an empty MIG slot
                    continue
                device = _Device(
                    parent.index, len(migs), handle, self.nvml.call("nvmlDeviceGetName", handle),
                    self.nvml.call("nvmlDeviceGetUUID", handle), parent=parent,
                )
                device.gpu_instance_id = self.nvml.call("nvmlDeviceGetGpuInstanceId", handle)
                migs.append(device)
        except GpuLost as exc:
            parent.status, parent.message = "lost", _lost_message(parent.index, exc)
        return migs

    def _register_xid_events(self) -> None:
        full = [d for d in self.devices if d.mig_index is None and d.handle is not None]
        if not full:
            return
        event_set = self.nvml.call("nvmlEventSetCreate")
        if event_set is None:
            return
        registered = [d for d in full if self.nvml.call_ok("nvmlDeviceRegisterEvents", d.handle, _EVENT_XID, event_set)]
        if registered:
            self._event_set = event_set
        else:
            self.nvml.call_ok("nvmlEventSetFree", event_set)

    @property
    def xid_events_available(self) -> bool:
        return self._event_set is not None

    # -- sampling ----------------------------------------------------------------------------

    def read(self, now: float) -> tuple[list[GpuSample], list[GpuEvent]]:
        """One sample of every device, and the events new since the previous read."""
        slow = self._reads % SLOW_EVERY == 0
        self._reads += 1
        events: list[GpuEvent] = []
        samples = [self._read_device(d, now, slow, events) for d in self.devices]
        events.extend(self._drain_xid_events(now))
        return samples, events

    def read_memory(self) -> list[GpuSample]:
        """Every device's identity, CUDA ordinal, status, memory and processes, nothing more:
        what a check before a launch needs. A first ``read`` also waits on the PCIe counters
        (~20 ms each, two per GPU); counters, throttle state and events are left to ``read``."""
        samples = []
        for device in self.devices:
            sample = self._identity(device)
            source = device.parent if device.parent is not None and device.parent.status == "lost" else device
            if source.status == "ok":
                try:
                    self._read_memory(device, sample)
                    if not device.mig_enabled:  # with MIG on, processes are listed per MIG device
                        sample.processes = self._read_processes(device.handle)
                except GpuLost as exc:
                    device.status, device.message = "lost", _lost_message(device.index, exc)
            sample.status, sample.message = source.status, source.message
            samples.append(sample)
        return samples

    def _identity(self, device: _Device) -> GpuSample:
        """A sample holding only what identifies ``device``, for a read to fill in."""
        return GpuSample(
            index=device.index,
            cuda_index=self._ordinals.get((device.index, device.mig_index)),
            name=device.name,
            uuid=device.uuid,
            mig_index=device.mig_index,
        )

    def _read_device(self, device: _Device, now: float, slow: bool, events: list[GpuEvent]) -> GpuSample:
        sample = self._identity(device)
        lost_parent = device.parent if device.parent is not None and device.parent.status == "lost" else None
        if device.status == "ok" and lost_parent is None:
            try:
                if device.mig_index is None:
                    self._read_full(device, sample, slow, now, events)
                else:
                    self._read_mig(device, sample)
            except GpuLost as exc:
                device.status, device.message = "lost", _lost_message(device.index, exc)
        if lost_parent is not None:
            sample.status, sample.message = "lost", lost_parent.message
        else:
            sample.status, sample.message = device.status, device.message
        # Reported once, also for a GPU already lost when the monitor started.
        if device.status == "lost" and device.mig_index is None and not device.lost_reported:
            device.lost_reported = True
            events.append(GpuEvent("lost", device.index, now, detail=device.message, uuid=device.uuid))
        return sample

    def _read_full(self, device: _Device, s: GpuSample, slow: bool, now: float, events: list[GpuEvent]) -> None:
        call, h = self.nvml.call, device.handle
        util = call("nvmlDeviceGetUtilizationRates", h)
        if util is not None:
            s.utilization_gpu_percent, s.utilization_memory_percent = float(util.gpu), float(util.memory)
        self._read_memory(device, s)
        s.temperature_c = _num(call("nvmlDeviceGetTemperature", h, _TEMPERATURE_GPU), float)
        s.power_w = _milli(call("nvmlDeviceGetPowerUsage", h))
        s.power_limit_w = _milli(self.nvml.call_versioned("power_limit", _POWER_LIMIT_SYMBOLS, h))
        s.sm_clock_mhz = _num(call("nvmlDeviceGetClockInfo", h, _CLOCK_SM), int)
        s.memory_clock_mhz = _num(call("nvmlDeviceGetClockInfo", h, _CLOCK_MEM), int)
        mask = self.nvml.call_versioned("clock_reasons", _CLOCK_REASON_SYMBOLS, h)
        s.clock_event_reasons = decode_clock_reasons(int(mask)) if mask is not None else None
        if slow:
            device.slow.update(self._read_slow(h))
        for name, value in device.slow.items():
            setattr(s, name, value)
        if not device.mig_enabled:  # with MIG on, processes are listed per MIG device
            s.processes = self._read_processes(h)
        self._counter_events(device, s, now, events)
        self._throttle_events(device, s, now, events)

    def _read_slow(self, h: Any) -> dict[str, Any]:
        call = self.nvml.call
        remapped = call("nvmlDeviceGetRemappedRows", h)
        retired_sbe = call("nvmlDeviceGetRetiredPages", h, _RETIRED_SBE)
        retired_dbe = call("nvmlDeviceGetRetiredPages", h, _RETIRED_DBE)
        return {
            "fan_percent": _num(call("nvmlDeviceGetFanSpeed", h), float),
            "pcie_tx_bytes_per_s": _kib(call("nvmlDeviceGetPcieThroughput", h, _PCIE_TX_BYTES)),
            "pcie_rx_bytes_per_s": _kib(call("nvmlDeviceGetPcieThroughput", h, _PCIE_RX_BYTES)),
            "ecc_volatile_corrected": _num(call("nvmlDeviceGetTotalEccErrors", h, _ERROR_CORRECTED, _VOLATILE_ECC), int),
            "ecc_volatile_uncorrected": _num(
                call("nvmlDeviceGetTotalEccErrors", h, _ERROR_UNCORRECTED, _VOLATILE_ECC), int
            ),
            "retired_pages_sbe": len(retired_sbe) if retired_sbe is not None else None,
            "retired_pages_dbe": len(retired_dbe) if retired_dbe is not None else None,
            "remapped_rows_correctable": int(remapped[0]) if remapped else None,
            "remapped_rows_uncorrectable": int(remapped[1]) if remapped else None,
            "remapped_rows_pending": bool(remapped[2]) if remapped else None,
            "remapped_rows_failed": bool(remapped[3]) if remapped else None,
        }

    def _read_mig(self, device: _Device, s: GpuSample) -> None:
        self._read_memory(device, s)
        s.processes = self._read_processes(device.handle)

    def _read_memory(self, device: _Device, s: GpuSample) -> None:
        # "Used" as nvidia-smi, nvitop and DCGM's FB_USED count it: the v2 query keeps the driver's
        # reserved memory apart; v1 counts it as used (615 MiB of an idle H200, read on one).
        h, memory = device.handle, None
        version = getattr(self.nvml.lib, "nvmlMemory_v2", None)
        if device.memory_v2 and version is not None:
            outcome, memory = self.nvml.call_outcome("nvmlDeviceGetMemoryInfo", h, version)
            # A driver before R510 lacks v2: v1 from now on. Any other failure is this sample's
            # alone (v1 would count the reserve as used from then on).
            device.memory_v2 = outcome != "missing"
        if memory is None:
            memory = self.nvml.call("nvmlDeviceGetMemoryInfo", h)
        if memory is not None:
            s.memory_used_bytes, s.memory_total_bytes = int(memory.used), int(memory.total)

    def _read_processes(self, h: Any) -> list[GpuProcess]:
        processes = self.nvml.call_versioned("compute_processes", _PROCESS_SYMBOLS, h) or []
        return [GpuProcess(int(p.pid), _num(getattr(p, "usedGpuMemory", None), int)) for p in processes]

    # -- events ------------------------------------------------------------------------------

    def _counter_events(self, device: _Device, s: GpuSample, now: float, events: list[GpuEvent]) -> None:
        counters: tuple[tuple[str, GpuEventKind, str], ...] = (
            ("ecc_volatile_corrected", "ecc_corrected", "corrected ECC errors (volatile)"),
            ("ecc_volatile_uncorrected", "ecc_uncorrected", "uncorrected ECC errors (volatile)"),
            ("remapped_rows_correctable", "remapped_rows", "rows remapped after correctable errors"),
            ("remapped_rows_uncorrectable", "remapped_rows", "rows remapped after uncorrectable errors"),
            ("retired_pages_sbe", "retired_pages", "pages retired after single-bit errors"),
            ("retired_pages_dbe", "retired_pages", "pages retired after double-bit errors"),
        )
        for name, kind, detail in counters:
            value = getattr(s, name)
            if value is None:
                continue
            before = device.counters.get(name)
            device.counters[name] = value
            # A drop means the driver reset its volatile counters: a new baseline, no event.
            if before is not None and value > before:
                events.append(GpuEvent(kind, device.index, now, count=value - before, detail=detail, uuid=device.uuid))

    def _throttle_events(self, device: _Device, s: GpuSample, now: float, events: list[GpuEvent]) -> None:
        if s.clock_event_reasons is None:
            return
        active = frozenset(r for r in s.clock_event_reasons if r in THROTTLE_REASONS)
        started = active - device.throttling
        device.throttling = active
        if started:
            events.append(GpuEvent("throttle", device.index, now, detail=", ".join(sorted(started)), uuid=device.uuid))

    def _drain_xid_events(self, now: float) -> list[GpuEvent]:
        if self._event_set is None:
            return []
        events = []
        for _ in range(_MAX_EVENTS_PER_SAMPLE):
            try:
                data = self.nvml.call_versioned("event_wait", _EVENT_WAIT_SYMBOLS, self._event_set, 0)
            except GpuLost:
                continue
            if data is None:  # NVMLError_Timeout: nothing pending
                break
            if int(getattr(data, "eventType", 0)) & _EVENT_XID == 0:
                continue
            try:
                uuid = self.nvml.call("nvmlDeviceGetUUID", data.device)
            except GpuLost:
                uuid = None
            device = self._by_uuid.get(uuid) if uuid else None
            index = device.index if device else -1
            events.append(GpuEvent("xid", index, now, code=int(data.eventData), uuid=uuid))
        return events

    def close(self) -> None:
        if self._event_set is not None:
            self.nvml.call_ok("nvmlEventSetFree", self._event_set)
            self._event_set = None


def _lost_message(index: int, exc: Exception) -> str:
    return f"GPU {index} has fallen off the bus ({exc}); it needs a reset or a reboot (check dmesg for Xid 79)"


def _num(value: Any, kind: type) -> Any:
    return kind(value) if value is not None else None


def _milli(value: Any) -> float | None:
    return value / 1000.0 if value is not None else None


def _kib(value: Any) -> float | None:
    # nvmlDeviceGetPcieThroughput reports KB/s (KiB, as nvidia-smi and nvitop read it).
    return value * 1024.0 if value is not None else None
