"""Host metrics through real psutil."""

from __future__ import annotations

import os
import threading
import time

import pytest

from monitor.metrics.host import HostReader, busy_percent


def read_in_fresh_thread(reader: HostReader, now: float):
    result = []
    thread = threading.Thread(target=lambda: result.append(reader.read(now)))
    thread.start()
    thread.join()
    return result[0]


def test_cpu_percent_is_measured_when_every_read_comes_from_a_new_thread():
    # A UI runs each sample in a fresh worker thread; psutil.cpu_percent(None) would read 0.0.
    reader = HostReader()
    read_in_fresh_thread(reader, time.time())
    spin_until = time.monotonic() + 0.3
    while time.monotonic() < spin_until:
        pass
    sample = read_in_fresh_thread(reader, time.time())
    assert sample.cpu_percent > 0.0
    assert len(sample.cpu_per_core_percent) == os.cpu_count()
    assert all(0.0 <= p <= 100.0 for p in sample.cpu_per_core_percent)


def test_memory_rates_shm_and_dirs(tmp_path):
    reader = HostReader([tmp_path, tmp_path / "missing"])
    first = reader.read(time.time())
    assert first.disk_read_bytes_per_s is None and first.net_sent_bytes_per_s is None  # no baseline yet
    time.sleep(0.05)
    second = reader.read(time.time())
    assert second.memory_total_bytes > second.memory_available_bytes > 0
    assert 0.0 < second.memory_used_fraction < 1.0
    assert second.net_recv_bytes_per_s is not None and second.net_recv_bytes_per_s >= 0
    if os.path.isdir("/dev/shm"):
        assert second.shm_total_bytes > 0 and second.shm_used_bytes >= 0
    present, missing = second.dirs
    assert present.path == str(tmp_path) and present.free_bytes > 0 and present.message == ""
    assert missing.free_bytes is None and "No such file or directory" in missing.message


@pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="no /dev/shm on this system")
def test_shm_use_is_seen():
    reader = HostReader()
    before = reader.read(time.time()).shm_used_bytes
    path = f"/dev/shm/monitor-test-{os.getpid()}"
    try:
        with open(path, "wb") as handle:
            handle.write(b"\0" * (8 * 1024 * 1024))
        after = reader.read(time.time()).shm_used_bytes
    finally:
        os.unlink(path)
    assert after - before >= 4 * 1024 * 1024


def test_busy_percent_formula():
    import psutil

    fields = psutil.cpu_times()._fields
    zero = psutil.cpu_times()._make([0.0] * len(fields))
    later = zero._replace(user=3.0, system=1.0, idle=5.0, **({"iowait": 1.0} if "iowait" in fields else {}))
    expected = 40.0 if "iowait" in fields else 4 / 9 * 100
    assert abs(busy_percent(zero, later) - expected) < 0.1
    assert busy_percent(zero, zero) == 0.0
