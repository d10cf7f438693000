"""Read the host through psutil: CPU, memory, swap, load, disk and network rates, free space."""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

import psutil

from monitor.metrics.model import DirUsage, HostSample

SHM_PATH = "/dev/shm"


class HostReader:
    """Host metrics; rates are computed against the previous read (None on the first)."""

    def __init__(self, watch_dirs: Iterable[str | os.PathLike] = ()) -> None:
        self.watch_dirs = [os.fspath(p) for p in watch_dirs]
        # CPU percentages from our own cpu_times() baseline, not psutil.cpu_percent(None): that
        # keeps its baseline per calling thread, and a UI that samples from a fresh worker
        # thread each time would read 0% forever.
        self._cpu = psutil.cpu_times()
        self._cores = psutil.cpu_times(percpu=True)
        # (when, disk counters, net counters): psutil's named tuples, untyped (psutil has no stubs).
        self._last: tuple[float, Any, Any] | None = None

    def read(self, now: float) -> HostSample:
        memory = psutil.virtual_memory()
        swap = psutil.swap_memory()
        try:
            load = psutil.getloadavg()
        except (AttributeError, OSError):
            load = (None, None, None)
        cpu, cores = psutil.cpu_times(), psutil.cpu_times(percpu=True)
        cpu_percent = busy_percent(self._cpu, cpu)
        per_core = [busy_percent(before, after) for before, after in zip(self._cores, cores)]
        self._cpu, self._cores = cpu, cores
        sample = HostSample(
            cpu_percent=cpu_percent,
            cpu_per_core_percent=per_core,
            memory_total_bytes=memory.total,
            memory_used_bytes=memory.total - memory.available,
            memory_available_bytes=memory.available,
            swap_total_bytes=swap.total,
            swap_used_bytes=swap.used,
            load_1m=load[0],
            load_5m=load[1],
            load_15m=load[2],
        )
        self._read_rates(now, sample)
        shm = dir_usage(SHM_PATH) if os.path.isdir(SHM_PATH) else None
        if shm is not None and shm.total_bytes is not None:
            sample.shm_total_bytes, sample.shm_used_bytes = shm.total_bytes, shm.used_bytes
        sample.dirs = [dir_usage(path) for path in self.watch_dirs]
        return sample

    def _read_rates(self, now: float, sample: HostSample) -> None:
        disk = _safe(psutil.disk_io_counters)
        net = _safe(psutil.net_io_counters)
        if self._last is not None:
            before, last_disk, last_net = self._last
            elapsed = now - before
            if elapsed > 0:
                if disk is not None and last_disk is not None:
                    sample.disk_read_bytes_per_s = _rate(disk.read_bytes, last_disk.read_bytes, elapsed)
                    sample.disk_write_bytes_per_s = _rate(disk.write_bytes, last_disk.write_bytes, elapsed)
                if net is not None and last_net is not None:
                    sample.net_sent_bytes_per_s = _rate(net.bytes_sent, last_net.bytes_sent, elapsed)
                    sample.net_recv_bytes_per_s = _rate(net.bytes_recv, last_net.bytes_recv, elapsed)
        self._last = (now, disk, net)


def busy_percent(before, after) -> float:
    """CPU busy time between two ``cpu_times()`` readings, in percent (psutil's formula)."""
    delta = type(after)._make(max(0.0, a - b) for a, b in zip(after, before))
    # On Linux guest time is already counted in user/nice; iowait is idle time.
    total = sum(delta) - getattr(delta, "guest", 0.0) - getattr(delta, "guest_nice", 0.0)
    idle = delta.idle + getattr(delta, "iowait", 0.0)
    return round(100.0 * (total - idle) / total, 1) if total > 0 else 0.0


def dir_usage(path: str) -> DirUsage:
    """Space on the filesystem holding ``path``; the reason instead when it cannot be read."""
    try:
        usage = psutil.disk_usage(path)
    except OSError as exc:
        return DirUsage(path, None, None, None, f"{path}: {exc.strerror or exc}")
    return DirUsage(path, usage.total, usage.used, usage.free)


def _safe(read):
    # Containers without block devices make disk_io_counters fail or return None.
    try:
        return read()
    except (OSError, RuntimeError):
        return None


def _rate(now_value: int, before_value: int, elapsed: float) -> float | None:
    # Counters can wrap or reset (a NIC removed): no rate rather than a negative one.
    return (now_value - before_value) / elapsed if now_value >= before_value else None
