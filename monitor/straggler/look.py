"""One look at every rank (``stacks.capture.take``: py-spy on each rank's process, in parallel)
read as where each rank is: inside a collective (``stacks.compare.place_of``, the reader the
hang probe uses) or not."""

from __future__ import annotations

from monitor.metrics.gpu import THROTTLE_REASONS
from monitor.metrics.model import Sample
from monitor.stacks.compare import place_of
from monitor.stacks.model import Capture
from monitor.straggler.model import RankGpu, RankLook, Round

# Collectives of the job's set-up, not of its steps: a rank that waits in them waits for a peer
# still starting (importing torch), which says nothing about the steps to come.
SET_UP = frozenset({"init_process_group", "new_group"})


def round_of(capture: Capture) -> Round:
    """Each rank with a stack as waiting (the collective's name) or not; a rank without a stack
    (py-spy failed on it, it is exiting) or in the job's set-up is left out of this look."""
    looks = []
    for stack in capture.ranked():
        place = place_of(stack)
        if stack.rank is None or place is None or place.collective in SET_UP:
            continue
        looks.append(RankLook(stack.rank, place.collective))
    return Round(capture.taken, tuple(looks))


def rank_gpus(sample: Sample) -> dict[int, RankGpu]:
    """rank -> its GPU in ``sample`` (the first the rank's own process uses), where NVML maps it."""
    if sample.job is None:
        return {}
    by_index = {gpu.index: gpu for gpu in sample.gpus if gpu.status == "ok"}
    found = {}
    for process in sample.job.processes:
        if process.rank is None or process.worker or not process.gpu_indices:
            continue
        gpu = by_index.get(process.gpu_indices[0])
        if gpu is None:
            continue
        reasons = tuple(r for r in gpu.clock_event_reasons or () if r in THROTTLE_REASONS)
        found[process.rank] = RankGpu(gpu.label, gpu.sm_clock_mhz, gpu.utilization_gpu_percent, reasons)
    return found
