"""GPU sampling through a fake NVML that raises the real pynvml error classes."""

from __future__ import annotations

import types

import pynvml
import pytest

from monitor.metrics import gpu as gpu_module
from monitor.metrics.nvml import Nvml, outdated_binding
from monitor.metrics.sampler import Sampler
from metrics_fake_nvml import GIB, OLD_DRIVER_NOT_FOUND, FakeMig, FakeNvml, FakeProcess, make_gpus


def sampler_for(fake: FakeNvml, visible: str | None = None, **kwargs) -> Sampler:
    return Sampler(nvml=fake, cuda_visible_devices=visible, **kwargs)


def test_full_sample_of_several_gpus_in_units():
    fake = FakeNvml(make_gpus(4))
    sample = sampler_for(fake).sample()
    assert sample.gpu_status == "ok"
    assert sample.driver_version == "550.54.15"
    assert [g.index for g in sample.gpus] == [0, 1, 2, 3]
    assert [g.cuda_index for g in sample.gpus] == [0, 1, 2, 3]
    gpu = sample.gpus[1]
    assert gpu.uuid == fake.gpus[1].uuid and gpu.name == "NVIDIA H100 80GB HBM3"
    assert gpu.status == "ok" and gpu.mig_index is None
    assert gpu.utilization_gpu_percent == 97.0 and gpu.utilization_memory_percent == 40.0
    assert gpu.memory_used_bytes == 40 * GIB and gpu.memory_total_bytes == 80 * GIB
    assert gpu.memory_used_fraction == 0.5
    assert gpu.temperature_c == 65.0
    assert gpu.power_w == 550.0 and gpu.power_limit_w == 700.0
    assert gpu.sm_clock_mhz == 1980 and gpu.memory_clock_mhz == 2619
    assert gpu.clock_event_reasons == []
    assert gpu.fan_percent == 40.0
    assert gpu.pcie_tx_bytes_per_s == 1000 * 1024 and gpu.pcie_rx_bytes_per_s == 2000 * 1024
    assert gpu.ecc_volatile_corrected == 0 and gpu.remapped_rows_pending is False
    assert sample.events == []


def test_not_supported_fields_read_as_none_and_the_rest_goes_on():
    gpus = make_gpus(2)
    gpus[0].unsupported = {
        "nvmlDeviceGetFanSpeed", "nvmlDeviceGetPcieThroughput", "nvmlDeviceGetTotalEccErrors",
        "nvmlDeviceGetRemappedRows", "nvmlDeviceGetPowerUsage", "nvmlDeviceGetMigMode",
    }
    sample = sampler_for(FakeNvml(gpus)).sample()
    first, second = sample.gpus
    assert first.fan_percent is None and first.pcie_tx_bytes_per_s is None
    assert first.ecc_volatile_uncorrected is None and first.remapped_rows_correctable is None
    assert first.power_w is None and first.power_limit_w == 700.0
    assert first.memory_used_bytes == 40 * GIB and first.status == "ok"
    assert second.fan_percent == 40.0 and second.power_w == 550.0


def test_gpu_lost_mid_run_is_marked_once_and_others_keep_working():
    fake = FakeNvml(make_gpus(3))
    sampler = sampler_for(fake)
    sampler.sample()
    fake.gpus[1].lost = True
    second = sampler.sample()
    assert second.gpus[1].status == "lost"
    assert "fallen off the bus" in second.gpus[1].message
    assert second.gpus[1].uuid == fake.gpus[1].uuid  # still named, from the cache
    assert [e.kind for e in second.events] == ["lost"] and second.events[0].gpu_index == 1
    assert second.gpus[0].status == "ok" and second.gpus[2].utilization_gpu_percent == 97.0
    calls_after_loss = fake.calls["nvmlDeviceGetUtilizationRates"]
    third = sampler.sample()
    assert third.events == [] and third.gpus[1].status == "lost"
    # The lost GPU is not asked again: only the two healthy GPUs were read.
    assert fake.calls["nvmlDeviceGetUtilizationRates"] == calls_after_loss + 2


def test_gpu_lost_before_start():
    gpus = make_gpus(2)
    gpus[0].lost = True
    sampler = sampler_for(FakeNvml(gpus))
    sample = sampler.sample()
    assert sample.gpus[0].status == "lost" and sample.gpus[0].utilization_gpu_percent is None
    assert sample.gpus[1].status == "ok"
    assert [(e.kind, e.gpu_index) for e in sample.events] == [("lost", 0)]
    assert sampler.sample().events == []


def test_handles_and_names_are_read_once():
    fake = FakeNvml(make_gpus(2))
    sampler = sampler_for(fake)
    for _ in range(4):
        sampler.sample()
    assert fake.calls["nvmlDeviceGetHandleByIndex"] == 2
    assert fake.calls["nvmlDeviceGetName"] == 2
    assert fake.calls["nvmlInit"] == 1
    assert fake.calls["nvmlDeviceGetUtilizationRates"] == 8


def test_slow_fields_are_read_every_few_samples():
    fake = FakeNvml(make_gpus(1))
    sampler = sampler_for(fake)
    samples = [sampler.sample() for _ in range(gpu_module.SLOW_EVERY + 1)]
    assert fake.calls["nvmlDeviceGetPcieThroughput"] == 2 * 2  # tx and rx, on reads 0 and SLOW_EVERY
    assert all(s.gpus[0].pcie_tx_bytes_per_s == 1000 * 1024 for s in samples)


@pytest.mark.parametrize("mode", ["not_found", "absent"])
def test_old_driver_symbols_fall_back_and_are_probed_once(mode):
    gpus = make_gpus(2)
    gpus[0].processes = [FakeProcess(4242, 3 * GIB)]
    gpus[0].clock_reasons = 0x40 | 0x1
    kwargs = {"not_found": OLD_DRIVER_NOT_FOUND} if mode == "not_found" else {"absent": OLD_DRIVER_NOT_FOUND}
    fake = FakeNvml(gpus, **kwargs)
    sampler = sampler_for(fake)
    for _ in range(3):
        sample = sampler.sample()
    assert [(p.pid, p.used_memory_bytes) for p in sample.gpus[0].processes] == [(4242, 3 * GIB)]
    assert sample.gpus[0].clock_event_reasons == ["gpu_idle", "hw_thermal_slowdown"]
    assert fake.calls["nvmlDeviceGetComputeRunningProcesses_v3"] == (1 if mode == "not_found" else 0)
    assert fake.calls["nvmlDeviceGetComputeRunningProcesses_v2"] == 6
    assert fake.calls["nvmlDeviceGetCurrentClocksEventReasons"] == (1 if mode == "not_found" else 0)
    assert fake.calls["nvmlDeviceGetCurrentClocksThrottleReasons"] == 6
    assert "nvmlDeviceGetComputeRunningProcesses_v3" in sample.gpu_message


def test_new_driver_uses_newest_symbols():
    fake = FakeNvml(make_gpus(1))
    sampler_for(fake).sample()
    assert fake.calls["nvmlDeviceGetComputeRunningProcesses_v3"] == 1
    assert fake.calls["nvmlDeviceGetComputeRunningProcesses_v2"] == 0
    assert fake.calls["nvmlDeviceGetCurrentClocksThrottleReasons"] == 0


@pytest.mark.parametrize(
    ("error", "status", "words"),
    [
        (pynvml.NVMLError_LibraryNotFound, "no_library", "libnvidia-ml.so not found"),
        (pynvml.NVMLError_DriverNotLoaded, "no_driver", "driver is not loaded"),
        (pynvml.NVMLError_LibRmVersionMismatch, "version_mismatch", "without a reboot"),
        (pynvml.NVMLError_Unknown, "error", "NVML failed to initialise"),
    ],
)
def test_init_failure_gives_a_clear_status_and_host_metrics(error, status, words):
    sample = sampler_for(FakeNvml(make_gpus(2), init_error=error)).sample()
    assert sample.gpu_status == status and words in sample.gpu_message
    assert sample.gpus == [] and sample.host.memory_total_bytes > 0


def test_missing_nvidia_ml_py_module():
    nvml = Nvml(None)
    assert nvml.status == "no_library" and "nvidia-ml-py" in nvml.message


def test_outdated_binding_is_named():
    old_binding = types.ModuleType("pynvml")  # nvidia-ml-py3 era: no _nvmlGetFunctionPointer
    old_binding.NVMLError = pynvml.NVMLError
    old_binding.nvmlInit = lambda: None
    nvml = Nvml(old_binding, check_binding=True)
    assert nvml.status == "error" and "pip uninstall pynvml nvidia-ml-py3" in nvml.message
    assert not outdated_binding(pynvml)  # the installed nvidia-ml-py passes


def test_real_pynvml_without_gpu_reports_why():
    sampler = Sampler()
    sample = sampler.sample()
    sampler.close()
    if sample.gpu_status == "ok":
        pytest.skip("this machine has a working NVIDIA driver")
    assert sample.gpu_status in ("no_library", "no_driver", "version_mismatch", "error")
    assert sample.gpu_message and sample.gpus == []
    assert sample.host.cpu_per_core_percent


def test_xid_events_are_reported_once():
    fake = FakeNvml(make_gpus(3))
    sampler = sampler_for(fake)
    sampler.sample()
    fake.emit_xid(2, 79)
    fake.emit_xid(0, 48)
    sample = sampler.sample()
    assert sorted((e.gpu_index, e.code) for e in sample.events if e.kind == "xid") == [(0, 48), (2, 79)]
    assert sampler.sample().events == []
    assert "Xid" not in sample.gpu_message


def test_xid_events_unavailable_is_said():
    gpus = make_gpus(2)
    for gpu in gpus:
        gpu.unsupported = {"nvmlDeviceRegisterEvents"}
    fake = FakeNvml(gpus)
    sample = sampler_for(fake).sample()
    assert "Xid events are not available" in sample.gpu_message
    assert fake.event_sets == []  # the unused set was freed


def test_counters_become_events_only_when_they_grow(monkeypatch):
    monkeypatch.setattr(gpu_module, "SLOW_EVERY", 1)
    gpus = make_gpus(2)
    gpus[0].ecc_corrected = 12  # errors from before the monitor started are not events
    fake = FakeNvml(gpus)
    sampler = sampler_for(fake)
    assert sampler.sample().events == []
    gpus[0].ecc_corrected = 15
    gpus[1].ecc_uncorrected = 1
    gpus[1].remapped = (0, 2, 1, 0)
    gpus[1].retired_dbe = [0x1000]
    events = sampler.sample().events
    got = sorted((e.gpu_index, e.kind, e.count) for e in events)
    assert got == [(0, "ecc_corrected", 3), (1, "ecc_uncorrected", 1), (1, "remapped_rows", 2), (1, "retired_pages", 1)]
    assert sampler.sample().events == []
    gpus[0].ecc_corrected = 0  # driver reload resets volatile counters: new baseline
    assert sampler.sample().events == []


def test_throttle_events_when_throttling_starts():
    gpus = make_gpus(1)
    fake = FakeNvml(gpus)
    sampler = sampler_for(fake)
    sampler.sample()
    gpus[0].clock_reasons = 0x40  # hw thermal slowdown
    first = sampler.sample()
    assert [(e.kind, e.detail) for e in first.events] == [("throttle", "hw_thermal_slowdown")]
    assert sampler.sample().events == []
    gpus[0].clock_reasons = 0x1  # idle is not throttling
    assert sampler.sample().events == []
    gpus[0].clock_reasons = 0x40 | 0x4
    assert [e.detail for e in sampler.sample().events] == ["hw_thermal_slowdown, sw_power_cap"]


def test_mig_devices_and_visible_devices():
    gpus = make_gpus(2)
    gpus[1].migs = [
        FakeMig("NVIDIA A100 MIG 3g.40gb", "MIG-aaaa-1111", 1, processes=[FakeProcess(777, 2 * GIB)]),
        FakeMig("NVIDIA A100 MIG 3g.40gb", "MIG-bbbb-2222", 2),
    ]
    sample = sampler_for(FakeNvml(gpus), visible="MIG-bbbb,GPU-00000000").sample()
    labels = [(g.label, g.cuda_index) for g in sample.gpus]
    assert labels == [("GPU 0", 1), ("GPU 1", None), ("GPU 1 MIG 0", None), ("GPU 1 MIG 1", 0)]
    parent, mig0 = sample.gpus[1], sample.gpus[2]
    assert parent.processes == [] and parent.temperature_c == 65.0
    assert [(p.pid, p.used_memory_bytes) for p in mig0.processes] == [(777, 2 * GIB)]
    assert mig0.memory_total_bytes == 10 * GIB and mig0.utilization_gpu_percent is None


def test_close_shuts_nvml_down():
    fake = FakeNvml(make_gpus(1))
    sampler = sampler_for(fake)
    sampler.sample()
    sampler.close()
    assert fake.shutdowns == 1 and fake.event_sets == []
