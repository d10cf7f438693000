"""Real CPU jobs (gloo, two ranks under torchrun) for the classes of misses of issue #34:

- ``retry-ok``: rank 0's upload fails twice, is logged with its traceback and retried, then works;
  training goes on and the job exits 0 (nothing failed);
- ``retry-then-crash``: rank 0 retries as above and goes on; rank 1 then raises a ValueError in
  its own code (the cause: rank 1);
- ``size-mismatch``: rank 1 all-reduces a tensor of another size than rank 0's;
- ``cpu-alloc``: rank 1 runs under an address-space limit (RLIMIT_AS) and torch's CPU allocator
  cannot give it a batch;
- ``loader-keyerror``: a DataLoader worker of rank 1 raises KeyError in ``__getitem__``.

Run: ``python -m torch.distributed.run --nproc-per-node 2 tests/jobs/classes_job.py SCENARIO``.
"""

from __future__ import annotations

import resource
import sys
import time
import traceback
from datetime import timedelta

import torch
import torch.distributed as dist

TIMEOUT_S = 20


def upload_with_retries(rank: int) -> None:
    """A flaky upload: two failures, each logged with its traceback, then success."""
    for attempt in range(3):
        try:
            if attempt < 2:
                raise ConnectionError(f"metrics endpoint refused the upload (attempt {attempt + 1})")
            print(f"rank {rank}: upload done", flush=True)
            return
        except ConnectionError:
            traceback.print_exc()
            print(f"rank {rank}: retrying in 0.2 s", file=sys.stderr, flush=True)
            time.sleep(0.2)


class Labels(torch.utils.data.Dataset):
    """Samples by id; id 3 is missing from the labels (a KeyError inside the worker)."""

    labels = {0: 1, 1: 0, 2: 1}

    def __len__(self) -> int:
        return 4

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.tensor([float(self.labels[index])])


def step(rank: int, number: int, size: int = 4) -> None:
    grads = torch.ones(size) * (rank + 1)
    dist.all_reduce(grads)
    print(f"rank {rank}: step {number} loss {1.0 / (number + 1):.4f}", flush=True)


def main() -> int:
    scenario = sys.argv[1]
    dist.init_process_group("gloo", timeout=timedelta(seconds=TIMEOUT_S))
    rank = dist.get_rank()
    if scenario in ("retry-ok", "retry-then-crash") and rank == 0:
        upload_with_retries(rank)  # rank 0 reports to a service, as a tracker or logger does
    for number in range(3):
        if rank == 1 and number == 1:
            if scenario == "retry-then-crash":
                raise ValueError(f"batch {number} has 0 samples after filtering")
            if scenario == "size-mismatch":
                step(rank, number, size=6)
                continue
            if scenario == "cpu-alloc":
                limit = 1 << 30
                resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
                torch.empty(4 << 30, dtype=torch.uint8)
            if scenario == "loader-keyerror":
                for _ in torch.utils.data.DataLoader(Labels(), batch_size=4, num_workers=1):
                    pass
        step(rank, number)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
