"""Plain-text rendering of a sample and of metric findings, for ``monitor metrics``."""

from __future__ import annotations

import time

from monitor.model import Finding
from monitor.metrics.model import GpuSample, HostSample, JobSample, Sample
from monitor.units import binary_size


def render_sample(sample: Sample, why_no_gpu: bool = True) -> str:
    """The sample as lines of text; ``why_no_gpu``: say why there are no GPU metrics (once is
    enough in a stream of samples)."""
    lines = [time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(sample.time))]
    if sample.gpu_status != "ok" or not sample.gpus:
        if why_no_gpu:
            lines.append(f"GPU   none: {sample.gpu_message or 'no GPU found'}")
    else:
        if sample.driver_version:
            lines.append(f"GPU   driver {sample.driver_version}" + (f" ({sample.gpu_message})" if sample.gpu_message else ""))
        lines.extend(_gpu_line(gpu) for gpu in sample.gpus)
    for event in sample.events:
        code = f" {event.code}" if event.code is not None else ""
        detail = f": {event.detail}" if event.detail else ""
        lines.append(f"event GPU {event.gpu_index} {event.kind}{code}{detail}" + (f" (x{event.count})" if event.count > 1 else ""))
    lines.extend(_host_lines(sample.host))
    if sample.job is not None:
        lines.extend(_job_lines(sample.job))
    return "\n".join(lines)


def render_finding(finding: Finding) -> str:
    lines = [f"{finding.severity.upper()} [{finding.category}] {finding.title}"]
    lines.extend(f"  {line}" for line in finding.evidence)
    lines.append(f"  what to do: {finding.remedy}")
    return "\n".join(lines)


def _gpu_line(gpu: GpuSample) -> str:
    cuda = f" cuda:{gpu.cuda_index}" if gpu.cuda_index is not None else ""
    head = f"{gpu.label}{cuda}"
    if gpu.status != "ok":
        return f"{head}  {gpu.status.upper()}: {gpu.message}"
    parts = [head, gpu.name or "?"]
    if gpu.utilization_gpu_percent is not None:
        parts.append(f"util {gpu.utilization_gpu_percent:.0f}%")
    parts.append(f"mem {size(gpu.memory_used_bytes)}/{size(gpu.memory_total_bytes)}")
    if gpu.temperature_c is not None:
        parts.append(f"{gpu.temperature_c:.0f} °C")
    if gpu.power_w is not None:
        parts.append(f"{gpu.power_w:.0f}" + (f"/{gpu.power_limit_w:.0f}" if gpu.power_limit_w else "") + " W")
    if gpu.sm_clock_mhz is not None:
        parts.append(f"SM {gpu.sm_clock_mhz} MHz")
    if gpu.fan_percent is not None:
        parts.append(f"fan {gpu.fan_percent:.0f}%")
    active = [r for r in gpu.clock_event_reasons or [] if r != "gpu_idle"]
    if active:
        parts.append("clocks held by " + ",".join(active))
    if gpu.ecc_volatile_uncorrected:
        parts.append(f"ECC uncorrected {gpu.ecc_volatile_uncorrected}")
    if gpu.processes:
        parts.append(f"{len(gpu.processes)} process(es)")
    return "  ".join(parts)


def _host_lines(host: HostSample) -> list[str]:
    used = host.memory_total_bytes - host.memory_available_bytes
    parts = [
        f"host  cpu {host.cpu_percent:.0f}% of {len(host.cpu_per_core_percent)} cores",
        f"mem {size(used)}/{size(host.memory_total_bytes)}",
    ]
    if host.swap_total_bytes:
        parts.append(f"swap {size(host.swap_used_bytes)}/{size(host.swap_total_bytes)}")
    if host.load_1m is not None:
        parts.append(f"load {host.load_1m:.2f} {host.load_5m:.2f} {host.load_15m:.2f}")
    if host.shm_total_bytes is not None:
        parts.append(f"/dev/shm {size(host.shm_used_bytes)}/{size(host.shm_total_bytes)}")
    if host.disk_read_bytes_per_s is not None:
        parts.append(f"disk r {size(host.disk_read_bytes_per_s)}/s w {size(host.disk_write_bytes_per_s)}/s")
    if host.net_recv_bytes_per_s is not None:
        parts.append(f"net rx {size(host.net_recv_bytes_per_s)}/s tx {size(host.net_sent_bytes_per_s)}/s")
    lines = ["  ".join(parts)]
    for usage in host.dirs:
        if usage.free_bytes is None:
            lines.append(f"dir   {usage.message}")
        else:
            lines.append(f"dir   {usage.path}: {size(usage.free_bytes)} free of {size(usage.total_bytes)}")
    return lines


def _job_lines(job: JobSample) -> list[str]:
    state = "alive" if job.alive else "not running"
    lines = [f"job   roots {', '.join(map(str, job.root_pids))}: {len(job.processes)} process(es), {state}"]
    if job.pid_mapping_message:
        lines.append(f"job   {job.pid_mapping_message}")
    for process in job.processes:
        rank = f"rank {process.rank}" if process.rank is not None else "       "
        cpu = f"{process.cpu_percent:.0f}%" if process.cpu_percent is not None else "?"
        gpu = ""
        if process.gpu_indices:
            gpu = f"  GPU {','.join(map(str, process.gpu_indices))} {size(process.gpu_memory_bytes)}"
        lines.append(f"  {rank}  pid {process.pid:<7} {process.name:<16} cpu {cpu:>5}  rss {size(process.rss_bytes)}{gpu}")
    return lines


def size(value: float | None) -> str:
    """Bytes in binary units: 512 B, 3.2 MiB, 78.0 GiB; "?" when not available."""
    return "?" if value is None else binary_size(value)
