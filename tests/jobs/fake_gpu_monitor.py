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
    """Each of the job's ranks (a descendant of this process with LOCAL_RANK=i) on GPU i."""

    def _processes(self, handle, name):
        index = self.gpus.index(self._gpu(handle, name))
        ranks = []
        for process in psutil.Process().children(recursive=True):
            try:
                if process.environ().get("LOCAL_RANK") == str(index):
                    ranks.append(FakeProcess(process.pid, 2 * GIB))
            except (psutil.Error, OSError):
                continue
        self.gpus[index].processes = ranks
        return super()._processes(handle, name)


fake = RanksOnTheirGpus(make_gpus(int(os.environ.get("FAKE_GPUS", "8"))))
monitor.metrics.sampler.import_pynvml = lambda: fake
sys.exit(main(sys.argv[1:]))
