"""``monitor`` as a user runs it, on a machine with ``FAKE_GPUS`` NVIDIA GPUs (default 8): the
metrics sampler gets the tests' fake NVML (the real ``pynvml.NVMLError_*`` classes), and NVML
reports each rank of the job on the GPU of its LOCAL_RANK, as the driver would. Everything else
is the real command: ``python tests/jobs/fake_gpu_monitor.py run --metrics-port P -- CMD``.
"""

import os
import sys

import psutil

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from metrics_fake_nvml import FakeNvml, FakeProcess, make_gpus  # noqa: E402

import monitor.metrics.sampler  # noqa: E402
from monitor.cli import main  # noqa: E402

GIB = 1024**3


class RanksOnTheirGpus(FakeNvml):
    """Each of the job's ranks (a descendant of this process with LOCAL_RANK=i) on GPU i, as a
    real NVML answers at once. A rank's LOCAL_RANK is read until found: a child caught between
    fork and exec still shows its parent's environment, without it."""

    _local_ranks: dict[int, int] = {}

    def _processes(self, handle, name):
        index = self.gpus.index(self._gpu(handle, name))
        if index == 0:
            self._place_ranks()
        return super()._processes(handle, name)

    def _place_ranks(self) -> None:
        children = psutil.Process().children(recursive=True)
        local_ranks = {}
        for process in children:
            local = self._local_ranks.get(process.pid)
            if local is None:
                try:
                    value = process.environ().get("LOCAL_RANK", "")
                except (psutil.Error, OSError):
                    continue
                if not value.isdigit() or int(value) >= len(self.gpus):
                    continue
                local = int(value)
            local_ranks[process.pid] = local
        if local_ranks == self._local_ranks:
            return
        self._local_ranks = local_ranks
        for gpu in self.gpus:
            gpu.processes = []
        for pid, local in local_ranks.items():
            self.gpus[local].processes.append(FakeProcess(pid, 2 * GIB))


fake = RanksOnTheirGpus(make_gpus(int(os.environ.get("FAKE_GPUS", "8"))))
monitor.metrics.sampler.import_pynvml = lambda: fake
sys.exit(main(sys.argv[1:]))
