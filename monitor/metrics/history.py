"""Fixed-size history of every numeric series of the samples, with min/mean/max over a window.

All series share one ring of timestamps, and each series is a preallocated ``array('d')`` of
``capacity`` slots (NaN = no value), so hours at one sample a second never grow memory:
the default 4 h x ~100 series is about 12 MB.

Series names (``series_name`` helpers build them):
  ``host.<field>``                      e.g. host.cpu_percent, host.memory_used_bytes
  ``gpu.<index>.<field>``               e.g. gpu.3.utilization_gpu_percent
  ``gpu.<index>.mig<m>.<field>``        MIG devices
  ``job.<field>``                       job totals: cpu_percent, rss_bytes, gpu_memory_bytes
  ``rank.<r>.<field>``                  per rank, the rank's processes summed (dataloader
                                        workers inherit RANK, so they count with their rank)
"""

from __future__ import annotations

import math
from array import array
from dataclasses import dataclass

from monitor.metrics.model import GpuSample, Sample

DEFAULT_CAPACITY = 4 * 3600

HOST_FIELDS = (
    "cpu_percent", "memory_used_bytes", "memory_available_bytes", "swap_used_bytes", "load_1m",
    "disk_read_bytes_per_s", "disk_write_bytes_per_s", "net_sent_bytes_per_s", "net_recv_bytes_per_s",
    "shm_used_bytes",
)
GPU_FIELDS = (
    "utilization_gpu_percent", "utilization_memory_percent", "memory_used_bytes", "temperature_c",
    "power_w", "sm_clock_mhz", "memory_clock_mhz", "pcie_tx_bytes_per_s", "pcie_rx_bytes_per_s",
)
PROCESS_FIELDS = ("cpu_percent", "rss_bytes", "gpu_memory_bytes")

_NAN = float("nan")


def gpu_series(gpu: GpuSample | int, field: str, mig_index: int | None = None) -> str:
    if isinstance(gpu, GpuSample):
        index, mig_index, node = gpu.index, gpu.mig_index, gpu.node
    else:
        index, node = gpu, None
    device = f"{node}/{index}" if node else f"{index}"  # GPU 0 of every node is a series of its own
    return f"gpu.{device}.{field}" if mig_index is None else f"gpu.{device}.mig{mig_index}.{field}"


@dataclass(frozen=True, slots=True)
class Stats:
    """A series over a window: only the samples that had a value count."""

    min: float
    mean: float
    max: float
    last: float
    count: int


class History:
    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        if capacity < 1:
            raise ValueError("history capacity must be at least 1")
        self.capacity = capacity
        self._times = array("d", [_NAN]) * capacity
        self._series: dict[str, array] = {}
        self._next = 0
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def add(self, sample: Sample) -> None:
        position = self._next
        self._times[position] = sample.time
        values = flatten(sample)
        for name, value in values.items():
            series = self._series.get(name)
            if series is None:
                series = self._series[name] = array("d", [_NAN]) * self.capacity
            series[position] = _NAN if value is None else float(value)
        for name, series in self._series.items():
            if name not in values:
                series[position] = _NAN
        self._next = (position + 1) % self.capacity
        self._size = min(self._size + 1, self.capacity)

    def names(self) -> list[str]:
        return sorted(self._series)

    def _order(self) -> range | list[int]:
        """Ring positions, oldest first."""
        if self._size < self.capacity:
            return range(self._size)
        return list(range(self._next, self.capacity)) + list(range(self._next))

    def times(self) -> list[float]:
        return [self._times[i] for i in self._order()]

    def values(self, name: str) -> list[float | None]:
        """The series oldest first, aligned with ``times()``; None where a sample had no value."""
        series = self._series.get(name)
        if series is None:
            return [None] * self._size
        return [None if math.isnan(series[i]) else series[i] for i in self._order()]

    def span_s(self) -> float:
        """Seconds between the oldest and the newest sample held."""
        if self._size < 2:
            return 0.0
        newest = self._times[(self._next - 1) % self.capacity]
        oldest = self._times[0 if self._size < self.capacity else self._next]
        return newest - oldest

    def window(self, name: str, seconds: float | None = None) -> list[float]:
        """The values (no gaps) of the last ``seconds`` (everything when None), oldest first."""
        series = self._series.get(name)
        if series is None or not self._size:
            return []
        newest = self._times[(self._next - 1) % self.capacity]
        values = []
        for step in range(1, self._size + 1):
            position = (self._next - step) % self.capacity
            if seconds is not None and newest - self._times[position] > seconds:
                break
            value = series[position]
            if not math.isnan(value):
                values.append(value)
        values.reverse()
        return values

    def stats(self, name: str, seconds: float | None = None) -> Stats | None:
        """min/mean/max/last of a series over the last ``seconds``; None without any value."""
        values = self.window(name, seconds)
        if not values:
            return None
        return Stats(min(values), sum(values) / len(values), max(values), values[-1], len(values))


def flatten(sample: Sample) -> dict[str, float | None]:
    """Every numeric series of one sample, by series name."""
    values: dict[str, float | None] = {f"host.{f}": getattr(sample.host, f) for f in HOST_FIELDS}
    for gpu in sample.gpus:
        for field in GPU_FIELDS:
            values[gpu_series(gpu, field)] = getattr(gpu, field)
    if sample.job is not None:
        sums: dict[str, float] = {}
        for process in sample.job.processes:
            for field in PROCESS_FIELDS:
                value = getattr(process, field)
                if value is None:
                    continue
                names = [f"job.{field}"] + ([f"rank.{process.rank}.{field}"] if process.rank is not None else [])
                for name in names:
                    sums[name] = sums.get(name, 0.0) + value
        for field in PROCESS_FIELDS:
            values[f"job.{field}"] = sums.pop(f"job.{field}", None)
        values.update(sums)
    return values
