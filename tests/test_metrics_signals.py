"""Metric signals: thresholds with hysteresis, numbers quoted, events fired once."""

from __future__ import annotations

from metrics_fake_nvml import GIB, FakeNvml, make_gpus

from monitor.metrics.history import History
from monitor.metrics.model import GpuEvent, GpuProcess, GpuSample, HostSample, JobProcess, JobSample, Sample
from monitor.metrics.sampler import Sampler
from monitor.metrics.signals import SignalDetector, Thresholds


def host(memory_available=20 * GIB, shm_used=0):
    return HostSample(
        cpu_percent=50.0, cpu_per_core_percent=[50.0], memory_total_bytes=64 * GIB,
        memory_used_bytes=64 * GIB - memory_available, memory_available_bytes=memory_available,
        swap_total_bytes=0, swap_used_bytes=0, load_1m=1.0, load_5m=1.0, load_15m=1.0,
        shm_total_bytes=32 * GIB, shm_used_bytes=shm_used,
    )


def gpu(index, util=95.0, used=40 * GIB, pid=None, reasons=None):
    return GpuSample(
        index=index, cuda_index=index, name="H100", uuid=f"GPU-{index}", utilization_gpu_percent=util,
        memory_used_bytes=used, memory_total_bytes=80 * GIB, temperature_c=88.0, sm_clock_mhz=1980,
        power_w=600.0, power_limit_w=700.0, clock_event_reasons=reasons if reasons is not None else [],
        processes=[GpuProcess(pid, used)] if pid else [],
    )


def job(alive=True, ranks=2):
    processes = [JobProcess(100 + r, 99, "python", 100.0, 2 * GIB, rank=r, local_rank=r,
                            gpu_memory_bytes=40 * GIB, gpu_indices=[r]) for r in range(ranks)]
    return JobSample(root_pids=[99], alive=alive, processes=processes, pid_mapping="mapped")


class Run:
    """Feeds samples one second apart through History and SignalDetector, as the app does."""

    def __init__(self, thresholds=None):
        self.history = History(600)
        self.detector = SignalDetector(thresholds)
        self.t = 1_000_000.0

    def step(self, gpus=(), host_sample=None, job_sample=None, events=(), seconds=1.0):
        self.t += seconds
        sample = Sample(time=self.t, host=host_sample or host(), gpu_status="ok", gpu_message="",
                        gpus=list(gpus), events=list(events), job=job_sample)
        self.history.add(sample)
        return self.detector.update(sample, self.history)

    def steps(self, n, **kwargs):
        return [f for _ in range(n) for f in self.step(**kwargs)]


def near_full(util=95.0):
    return [gpu(0, util=util, used=78 * GIB, pid=100), gpu(1, util=util, pid=101)]


def test_gpu_memory_near_full_after_sustain_once_with_rank_and_numbers():
    run = Run()
    assert run.steps(5, gpus=near_full(), job_sample=job()) == []  # 0..4 s: not yet sustained
    (finding,) = run.step(gpus=near_full(), job_sample=job())
    assert (finding.category, finding.severity, finding.role) == ("cuda_oom", "warning", "root")
    assert finding.title == "GPU memory near full on rank 0 (GPU 0: 78.0 of 80.0 GiB, 98%)"
    assert finding.rank == 0 and finding.ranks == [0] and finding.count == 1
    assert "2.0 GiB of 80.0 GiB is left on GPU 0" in finding.remedy
    assert finding.fields["used_bytes"] == str(78 * GIB)
    assert "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" in finding.remedy
    assert run.steps(60, gpus=near_full(), job_sample=job()) == []  # no re-firing every second
    assert run.detector.findings == [finding]


def test_advice_the_job_already_follows_is_left_out():
    configured = job()
    for process in configured.processes:
        process.env = {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True,max_split_size_mb:512"}
    run = Run()
    (finding,) = run.steps(6, gpus=near_full(), job_sample=configured)
    assert "expandable_segments" not in finding.remedy


def test_gpu_memory_hysteresis_rearms_only_after_a_clear_spell():
    run = Run()
    run.steps(6, gpus=near_full(), job_sample=job())
    between = [gpu(0, used=74 * GIB, pid=100), gpu(1, pid=101)]  # 92.5%: below fire, above clear
    assert run.steps(40, gpus=between, job_sample=job()) == []
    assert run.steps(6, gpus=near_full(), job_sample=job()) == []  # never cleared: still the same episode
    clear = [gpu(0, used=60 * GIB, pid=100), gpu(1, pid=101)]
    run.steps(31, gpus=clear, job_sample=job())
    fuller = [gpu(0, used=79 * GIB, pid=100), gpu(1, pid=101)]
    again = run.steps(6, gpus=fuller, job_sample=job())
    assert len(again) == 1 and again[0].count == 2 and len(run.detector.findings) == 1
    assert "79.0 of 80.0 GiB" in again[0].title  # the numbers of the new episode


def test_host_memory_and_shm_near_full():
    run = Run()
    found = run.steps(6, host_sample=host(memory_available=2 * GIB, shm_used=31 * GIB), job_sample=job())
    by_category = {f.category: f for f in found}
    assert set(by_category) == {"host_oom", "shm_exhausted"}
    assert by_category["host_oom"].title == "Host memory near full: 62.0 of 64.0 GiB (97%)"
    assert "largest job process: rank 0 pid 100" in by_category["host_oom"].evidence[-1]
    assert by_category["shm_exhausted"].title == "/dev/shm near full: 31.0 of 32.0 GiB (97%)"
    assert "--shm-size" in by_category["shm_exhausted"].remedy


def test_all_job_gpus_idle_while_alive_is_a_hang():
    run = Run(Thresholds(idle_s=60))
    busy = [gpu(0, pid=100), gpu(1, pid=101)]
    idle = [gpu(0, util=0.0, pid=100), gpu(1, util=0.0, pid=101)]
    run.steps(10, gpus=busy, job_sample=job())
    assert run.steps(60, gpus=idle, job_sample=job()) == []
    (finding,) = run.step(gpus=idle, job_sample=job())
    assert (finding.category, finding.role) == ("hang", "cascade")
    assert finding.title == "All 2 job GPUs idle for 60 s while the job is alive"
    assert finding.ranks == [0, 1] and "py-spy dump --pid" in finding.remedy and "100, 101" in finding.remedy
    assert "init_process_group(timeout=...)" in finding.remedy


def test_idle_is_not_a_hang_when_the_job_ended_or_never_started_work():
    run = Run(Thresholds(idle_s=30))
    idle = [gpu(0, util=0.0, pid=100), gpu(1, util=0.0, pid=101)]
    assert run.steps(90, gpus=idle, job_sample=job()) == []  # never busy: still starting up
    run = Run(Thresholds(idle_s=30))
    run.steps(5, gpus=[gpu(0, pid=100), gpu(1, pid=101)], job_sample=job())
    assert run.steps(60, gpus=idle, job_sample=job(alive=False)) == []


def test_thermal_throttle_sustained_but_not_power_cap():
    run = Run()
    capped = [gpu(0, reasons=["sw_power_cap"])]
    assert run.steps(30, gpus=capped) == []
    hot = [gpu(0, reasons=["hw_thermal_slowdown"])]
    found = run.steps(11, gpus=hot)
    assert len(found) == 1
    assert found[0].title == "GPU 0 throttled (hw_thermal_slowdown) at 88 °C, SM clock 1980 MHz"
    assert found[0].category == "gpu_throttle" and "cooling" in found[0].remedy


def test_hardware_events_fire_once_and_count_repeats():
    run = Run()
    xid = GpuEvent("xid", 1, 0.0, code=79)
    (finding,) = run.step(gpus=[gpu(0), gpu(1, pid=101)], job_sample=job(), events=[xid])
    assert finding.title == "Xid 79 on GPU 1: GPU has fallen off the bus"
    assert (finding.severity, finding.category, finding.ranks) == ("error", "gpu_hardware", [1])
    assert "nvidia-smi -r -i 1" in finding.remedy
    assert run.step(gpus=[gpu(0), gpu(1)], events=[xid]) == []
    # Findings are frozen: the repeat is a new value of the same finding, which the session takes.
    (again,) = run.detector.take_changed()
    assert again.source_key == finding.source_key and again.count == 2 and finding.count == 1
    ecc = run.step(gpus=[gpu(0)], events=[GpuEvent("ecc_corrected", 0, 0.0, count=3)])
    assert [(f.severity, f.title) for f in ecc] == [("info", "3 new corrected ECC error(s) on GPU 0")]


def test_whole_pipeline_on_fake_nvml():
    gpus = make_gpus(2)
    gpus[0].memory_used = 79 * GIB
    fake = FakeNvml(gpus)
    sampler = Sampler(nvml=fake, cuda_visible_devices=None)
    history, detector = History(100), SignalDetector(Thresholds(sustain_s=0))
    sample = sampler.sample()
    history.add(sample)
    found = detector.update(sample, history)
    assert [f.title for f in found] == ["GPU memory near full on GPU 0 (GPU 0: 79.0 of 80.0 GiB, 99%)"]
    fake.emit_xid(1, 48)
    sample = sampler.sample()
    history.add(sample)
    assert [f.title for f in detector.update(sample, history)] == ["Xid 48 on GPU 1: double-bit ECC error"]
