"""Ring-buffer history: fixed memory, chronological series, windowed stats."""

from __future__ import annotations

import pytest

from monitor.metrics.history import History, gpu_series
from monitor.metrics.model import GpuSample, HostSample, JobProcess, JobSample, Sample


def sample(t, cpu, util=None, job=None):
    host = HostSample(cpu, [cpu], 100, 50, 50, 0, 0, None, None, None)
    gpus = [GpuSample(0, 0, "H100", "GPU-0", utilization_gpu_percent=util)] if util is not None else []
    return Sample(time=t, host=host, gpu_status="ok", gpu_message="", gpus=gpus, job=job)


def test_ring_keeps_the_newest_in_order_without_growing():
    history = History(capacity=5)
    for t in range(12):
        history.add(sample(float(t), cpu=float(t)))
    buffers_before = {name: id(history._series[name]) for name in history.names()}
    history.add(sample(12.0, cpu=12.0))
    assert len(history) == 5
    assert history.times() == [8.0, 9.0, 10.0, 11.0, 12.0]
    assert history.values("host.cpu_percent") == [8.0, 9.0, 10.0, 11.0, 12.0]
    assert {name: id(history._series[name]) for name in history.names()} == buffers_before
    assert len(history._series["host.cpu_percent"]) == 5
    assert history.span_s() == 4.0


def test_stats_over_a_window_and_gaps():
    history = History(capacity=100)
    for t, util in enumerate([10.0, 20.0, None, 40.0, 90.0]):
        history.add(sample(float(t), cpu=1.0, util=util) if util is not None else sample(float(t), cpu=1.0))
    name = gpu_series(0, "utilization_gpu_percent")
    assert history.values(name) == [10.0, 20.0, None, 40.0, 90.0]
    stats = history.stats(name)
    assert (stats.min, stats.mean, stats.max, stats.last, stats.count) == (10.0, 40.0, 90.0, 90.0, 4)
    recent = history.stats(name, seconds=2.0)  # t = 2, 3, 4
    assert (recent.min, recent.max, recent.count) == (40.0, 90.0, 2)
    assert history.stats("gpu.7.power_w") is None
    assert history.values("gpu.7.power_w") == [None] * 5


def test_job_totals_and_per_rank_series():
    processes = [
        JobProcess(1, None, "torchrun", 5.0, 100, None),
        JobProcess(2, 1, "python", 100.0, 1000, rank=0, gpu_memory_bytes=7000),
        JobProcess(3, 2, "pt_data_worker", 50.0, 500, rank=0),  # a DataLoader worker inherits RANK
        JobProcess(4, 1, "python", 90.0, 1000, rank=1, gpu_memory_bytes=8000),
    ]
    history = History(capacity=10)
    history.add(sample(0.0, cpu=1.0, job=JobSample([1], True, processes)))
    assert history.values("job.cpu_percent") == [245.0]
    assert history.values("rank.0.rss_bytes") == [1500.0]
    assert history.values("rank.1.gpu_memory_bytes") == [8000.0]
    assert history.values("job.gpu_memory_bytes") == [15000.0]


def test_capacity_must_be_positive():
    with pytest.raises(ValueError):
        History(0)
