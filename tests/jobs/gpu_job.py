"""Real GPU jobs (NCCL, one GPU) for the device check (tests/device/check.sh); their logs,
recorded on a real GPU, are kept in tests/recordings/gpu and diagnosed in CI.

- ``ok``: a few NCCL all-reduces and steps, then a clean exit (run with NCCL_DEBUG=INFO: the
  noise of a healthy NCCL job must give no finding);
- ``oom``: the allocator runs the GPU out of memory, 8 GiB at a time (torch's own message);
- ``assert``: an embedding lookup with an index past its table (a device-side assert);
- ``timeout``: a kernel that spins for a minute ahead of an all-reduce, under a 10 s process
  group timeout: NCCL's watchdog times the collective out and takes the process down; the rank
  waits for it in ``torch.cuda.synchronize``;
- ``timeout-item``: the same, the rank waiting for it in ``.item()`` (its own line, no frame of
  torch's: the stacks read it from the source);
- ``duplicate``: two ranks on the same GPU (NCCL refuses: duplicate GPU).

Run: ``torchrun --nproc-per-node 1 tests/jobs/gpu_job.py SCENARIO`` (2 for ``duplicate``).
"""

from __future__ import annotations

import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

TIMEOUT_S = 10
GIB = 1 << 30


def main() -> int:
    scenario = sys.argv[1]
    torch.cuda.set_device(0)  # every rank on GPU 0: there is one (``duplicate`` relies on it)
    dist.init_process_group("nccl", timeout=timedelta(seconds=TIMEOUT_S))
    rank = dist.get_rank()
    weights = torch.randn(1024, 1024, device="cuda")
    for number in range(8):
        grads = weights @ weights.T
        dist.all_reduce(grads)
        print(f"rank {rank}: step {number} loss {grads.mean().item() / (number + 1):.4f}", flush=True)
        time.sleep(0.5)
        if number == 2 and scenario == "oom":
            held = []
            while True:  # as a growing activation cache would, until the allocator gives up
                held.append(torch.empty(8 * GIB, dtype=torch.uint8, device="cuda"))
        if number == 2 and scenario == "assert":
            table = torch.randn(1000, 64, device="cuda")
            tokens = torch.tensor([3, 7, 1000], device="cuda")
            print(torch.nn.functional.embedding(tokens, table).sum().item(), flush=True)
        if number == 2 and scenario in ("timeout", "timeout-item"):
            torch.cuda._sleep(120 * 2_000_000_000)  # about two minutes of GPU cycles
            dist.all_reduce(grads)
            if scenario == "timeout":
                torch.cuda.synchronize()
            print(f"rank {rank}: held {grads.sum().item():.4f}", flush=True)
    dist.destroy_process_group()
    print(f"rank {rank}: done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
