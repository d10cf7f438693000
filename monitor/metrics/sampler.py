"""One call, one ``Sample``: GPUs (NVML), host (psutil) and the job's processes, joined.

The API is synchronous and may block for a few milliseconds in the driver: call it from a
worker thread, never from a UI thread, and schedule the next call when this one returned.
NVML is initialised on the first ``sample()``, not in the constructor, so a Sampler can be
built anywhere. Without NVML (no driver, no library, version mismatch) samples still carry the
host and the job, with ``gpu_status`` and ``gpu_message`` saying why there are no GPUs.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from typing import Any

import psutil

from monitor.metrics.gpu import GpuReader
from monitor.metrics.host import HostReader
from monitor.metrics.job import JobPids, JobReader
from monitor.metrics.model import GpuSample, JobSample, Sample
from monitor.metrics.nvml import Nvml, import_pynvml

_FROM_ENVIRONMENT: Any = object()


class Sampler:
    """Samples the machine and, when given, the job.

    ``job_pids``: root PIDs of the job, or a callable returning them (a launcher whose ranks
    change on restart). ``watch_dirs``: directories whose free space matters (logs,
    checkpoints). ``nvml``: the NVML module (``pynvml`` when None; tests pass a fake).
    ``cuda_visible_devices``: the job's CUDA_VISIBLE_DEVICES (this process's by default),
    used to tell which devices the job sees and under which CUDA ordinal.
    """

    def __init__(
        self,
        job_pids: JobPids | None = None,
        watch_dirs: Iterable[str | os.PathLike] = (),
        nvml: Any = None,
        *,
        cuda_visible_devices: str | None = _FROM_ENVIRONMENT,
    ) -> None:
        if cuda_visible_devices is _FROM_ENVIRONMENT:
            cuda_visible_devices = os.environ.get("CUDA_VISIBLE_DEVICES")
        self._visible = cuda_visible_devices
        self._nvml_lib = nvml
        self._nvml: Nvml | None = None
        self._gpus: GpuReader | None = None
        self._host = HostReader(watch_dirs)
        self._job = JobReader(job_pids) if job_pids is not None else None

    def _open_nvml(self) -> Nvml:
        if self._nvml_lib is not None:
            self._nvml = Nvml(self._nvml_lib)
        else:
            self._nvml = Nvml(import_pynvml(), check_binding=True)
        if self._nvml.ok:
            self._gpus = GpuReader(self._nvml, self._visible)
        return self._nvml

    def sample(self) -> Sample:
        cpu_before = time.thread_time()
        nvml = self._nvml if self._nvml is not None else self._open_nvml()
        now = time.time()
        gpus, events = self._gpus.read(now) if self._gpus else ([], [])
        job = self._job.read() if self._job else None
        _map_gpu_processes(gpus, job)
        sample = Sample(
            time=now,
            host=self._host.read(now),
            gpu_status=nvml.status,
            gpu_message=self._gpu_message(nvml, gpus),
            gpus=gpus,
            events=events,
            job=job,
            driver_version=self._gpus.driver_version if self._gpus else None,
        )
        sample.sample_cpu_s = time.thread_time() - cpu_before
        return sample

    def _gpu_message(self, nvml: Nvml, gpus: list[GpuSample]) -> str:
        if not nvml.ok:
            return nvml.message
        notes = []
        if not gpus:
            notes.append("NVML works but reports no GPUs")
        if self._gpus and gpus and not self._gpus.xid_events_available:
            notes.append("Xid events are not available from this driver")
        missing = sorted(nvml.missing_functions)
        if missing:
            notes.append(f"this driver lacks {', '.join(missing)} (older driver than nvidia-ml-py; fell back where possible)")
        return "; ".join(notes)

    def close(self) -> None:
        """Release NVML (event set, library). The Sampler must not be used afterwards."""
        if self._gpus is not None:
            self._gpus.close()
        if self._nvml is not None:
            self._nvml.shutdown()


def _map_gpu_processes(gpus: list[GpuSample], job: JobSample | None) -> None:
    """Attribute NVML's per-process GPU memory to the job's processes and ranks.

    NVML reports host PIDs. Inside a container without the host PID namespace those PIDs do
    not exist here: then the job says so plainly instead of attributing memory to whatever
    unrelated process happens to carry the same number.
    """
    job_by_pid = {p.pid: p for p in job.processes} if job else {}
    nvml_processes = [(gpu, p) for gpu in gpus for p in gpu.processes]
    for _, process in nvml_processes:
        process.visible = process.pid in job_by_pid or psutil.pid_exists(process.pid)
    if job is None or not nvml_processes:
        return
    matched = [(gpu, p) for gpu, p in nvml_processes if p.pid in job_by_pid]
    invisible = sorted({p.pid for _, p in nvml_processes if not p.visible})
    if invisible and not matched:
        shown = ", ".join(str(pid) for pid in invisible[:5]) + (" ..." if len(invisible) > 5 else "")
        job.pid_mapping = "unmapped"
        job.pid_mapping_message = (
            f"NVML reports GPU processes with PIDs ({shown}) that do not exist in this PID namespace: "
            "probably a container without the host PID namespace (docker run --pid=host), so GPU "
            "memory cannot be attributed to the job's processes or ranks"
        )
        return
    job.pid_mapping = "mapped"
    for gpu, process in matched:
        row = job_by_pid[process.pid]
        process.rank = row.rank
        if process.used_memory_bytes is not None:
            row.gpu_memory_bytes = (row.gpu_memory_bytes or 0) + process.used_memory_bytes
        if gpu.index not in row.gpu_indices:
            row.gpu_indices.append(gpu.index)
