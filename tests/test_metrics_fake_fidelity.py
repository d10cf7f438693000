"""The fake NVML and the sampler held against what real GPUs answered (tests/device/recorded/,
written by tests/device/check.sh on a lent H200 and H100, driver 580.159.04): every call the
sampler makes, the sample it made there, an Xid the driver raised, and NCCL's flight-recorder dump."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pynvml
import pytest

from monitor.diagnosis.catalogue import load_catalogue
from monitor.diagnosis.diagnose import diagnose_paths
from monitor.diagnosis.root_cause import choose
from monitor.flight_recorder import dumps
from monitor.metrics.history import History
from monitor.metrics.model import Sample
from monitor.metrics.sampler import Sampler
from monitor.metrics.signals import SignalDetector
from metrics_fake_nvml import FakeGpu, FakeNvml

RECORDED = Path(__file__).parent / "device" / "recorded"
SAMPLES = Path(__file__).parent.parent / "sample_logs" / "gpu"
PROBES = sorted(RECORDED.glob("nvml-probe-*.json"))
MIB = 1 << 20


def probe_calls(path: Path) -> list[dict]:
    return json.loads(path.read_text())["calls"]


def as_the_gpu_answered(calls: list[dict]) -> FakeGpu:
    """A fake GPU that refuses what the real one refused (NotSupported), nothing else."""
    refused = {c["call"] for c in calls if c.get("error") == "NVMLError_NotSupported"}
    return FakeGpu(name="NVIDIA H200", unsupported=refused)


def kind(value) -> str:
    if isinstance(value, dict) and "type" in value:
        return "struct:" + ",".join(sorted(k for k in value if k != "type"))
    if isinstance(value, list):
        return "list"
    return type(value).__name__


def fake_kind(value) -> str:
    if hasattr(value, "__dict__") and not isinstance(value, (int, str)):
        return "struct:" + ",".join(sorted(vars(value)))
    if isinstance(value, (list, tuple)):
        return "list"
    return type(value).__name__


@pytest.mark.parametrize("probe", PROBES, ids=lambda p: p.stem)
def test_the_fake_answers_each_call_in_the_shape_the_driver_did(probe):
    fake = FakeNvml([as_the_gpu_answered(probe_calls(probe))])
    fake.nvmlInit()
    handle = fake.nvmlDeviceGetHandleByIndex(0)
    compared = 0
    for call in probe_calls(probe):
        args = _args_of(call, handle)
        if args is None:
            continue
        if call["outcome"] == "error":
            with pytest.raises(getattr(pynvml, call["error"])):
                getattr(fake, call["call"])(*args)
            continue
        value = getattr(fake, call["call"])(*args)
        assert fake_kind(value) == kind(call["value"]), call["call"]
        compared += 1
    assert compared >= 20


def _args_of(call: dict, handle) -> tuple | None:
    """The arguments the probe gave (tests/device/nvml_probe.py), for the calls the fake models."""
    name = call["call"]
    if name in ("nvmlSystemGetDriverVersion", "nvmlDeviceGetCount"):
        return ()
    if name.startswith("nvmlEvent") or name == "nvmlDeviceRegisterEvents":
        return None  # event sets are pointers: the Xid test below drives them
    if name == "nvmlDeviceGetMemoryInfo" and call.get("type") == "c_nvmlMemory_v2_t":
        return (handle, pynvml.nvmlMemory_v2)
    if name in ("nvmlDeviceGetTemperature",):
        return (handle, 0)
    if name in ("nvmlDeviceGetClockInfo",):
        return (handle, 1)
    if name in ("nvmlDeviceGetRetiredPages", "nvmlDeviceGetPcieThroughput"):
        return (handle, 0)
    if name == "nvmlDeviceGetTotalEccErrors":
        return (handle, 0, 0)
    return (handle,)


def test_the_sampler_on_the_fake_fills_the_fields_the_real_gpu_filled():
    """The real H200's sample (``monitor metrics --json``): the same fields, null where it was."""
    real = json.loads((RECORDED / "metrics-idle-h200.jsonl").read_text().splitlines()[0])["gpus"][0]
    calls = probe_calls(RECORDED / "nvml-probe-h200.json")
    sample = Sampler(nvml=FakeNvml([as_the_gpu_answered(calls)]), cuda_visible_devices=None).sample()
    faked = sample.to_json()["gpus"][0]
    assert set(faked) == set(real)
    assert {k for k, v in faked.items() if v is None} == {k for k, v in real.items() if v is None}
    assert real["fan_percent"] is None and real["retired_pages_sbe"] is None  # what an H200 lacks


def test_used_memory_is_what_nvidia_smi_shows_not_the_drivers_reserve():
    """An idle H100: nvidia-smi 0 MiB used, 480 MiB reserved; NVML v1 says 480 MiB used, v2 0."""
    v1, v2 = (c["value"] for c in probe_calls(RECORDED / "nvml-probe-h100.json") if c["call"] == "nvmlDeviceGetMemoryInfo")
    assert (v1["used"], v2["used"], v2["reserved"]) == (480 * MIB, 0, 480 * MIB)
    idle = FakeGpu(memory_used=0, memory_reserved=480 * MIB, memory_total=v2["total"])
    assert Sampler(nvml=FakeNvml([idle]), cuda_visible_devices=None).sample().gpus[0].memory_used_bytes == 0
    # A driver from before R510 has no v2: v1's figure, and no note of a missing function.
    old = FakeNvml([replace(idle)], not_found={"nvmlDeviceGetMemoryInfo_v2"})
    sampler = Sampler(nvml=old, cuda_visible_devices=None)
    for _ in range(2):
        sample = sampler.sample()
        assert sample.gpus[0].memory_used_bytes == 480 * MIB
    assert "nvmlDeviceGetMemoryInfo" not in sample.gpu_message
    assert old.calls["nvmlDeviceGetMemoryInfo"] == 3  # v2 asked once, then v1 alone


def test_an_application_xid_confirms_the_cuda_error_its_process_printed():
    """Recorded on an H100: an embedding index past its table; NVML raised Xid 43 within a second
    of the device-side assert. The assert is the cause whichever arrived first; the Xid confirms it."""
    sample = Sample.from_json(json.loads((RECORDED / "metrics-xid43-h100.jsonl").read_text()))
    history = History(10)
    history.add(sample)
    (xid,) = SignalDetector().update(sample, history)
    assert (xid.rule, xid.role, xid.rank, xid.fields["xid"]) == ("metrics-gpu-xid", "confirm", 0, "43")
    log = diagnose_paths([str(SAMPLES / "device-assert-1rank.log")], load_catalogue())
    early = replace(xid, arrival=-1, seq=10_000)  # read before any log line
    assert choose([early, *log.findings]).rule == "cuda-device-assert"
    # With no CUDA error in the log (only the launcher's report of the exit), the Xid names it.
    reports = [f for f in log.findings if f.category == "launcher"]
    assert reports and choose([early, *reports]).rule == "metrics-gpu-xid"
    # Nor when the other ranks only timed out waiting for the rank whose GPU faulted.
    timeout = diagnose_paths([str(SAMPLES / "nccl-timeout-1rank.log")], load_catalogue()).root_cause
    assert timeout is not None and timeout.category == "nccl_timeout"
    assert choose([replace(timeout, rank=1, seq=20_000), early]).rule == "metrics-gpu-xid"


def test_nccls_own_flight_recorder_dump_is_read():
    """torch 2.11 + NCCL 2.28 dumped on the watchdog's timeout: three all-reduces completed, the
    fourth (behind a spinning kernel) never started."""
    dump = dumps.load(RECORDED / "nccl-timeout-fr-dump-rank0")
    assert dump.rank == 0
    assert [(e.seq, e.op, e.state) for e in dump.entries] == [
        (1, "nccl:all_reduce", "completed"), (2, "nccl:all_reduce", "completed"),
        (3, "nccl:all_reduce", "completed"), (4, "nccl:all_reduce", "scheduled")]
    last = dump.entries[-1]
    assert (last.timeout_ms, last.input_sizes) == (10000, [[1024, 1024]])
    site = last.call_site()
    assert site is not None and (Path(site.file).name, site.line) == ("gpu_job.py", 49)

