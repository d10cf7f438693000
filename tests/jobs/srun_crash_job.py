"""A tiny torch job for srun (no torchrun): each task is a rank by SLURM's own variables
(SLURM_PROCID, SLURM_NTASKS), joins a gloo group at MASTER_ADDR:MASTER_PORT (from the
environment), all_reduces ``STEPS`` steps (default 5), and rank ``CRASH_RANK`` (default 1) raises ValueError at
step ``CRASH_STEP`` (default 2; -1: nobody crashes); its peers then fail in their next all_reduce.
With PLAIN_TRACEBACK set, Python's own excepthook prints the traceback, without torch's
``[rankN]:`` prefix.
"""
import os
import sys
import time

import torch
import torch.distributed as dist

rank, world = int(os.environ["SLURM_PROCID"]), int(os.environ["SLURM_NTASKS"])
crash_rank = int(os.environ.get("CRASH_RANK", "1"))
crash_step = int(os.environ.get("CRASH_STEP", "2"))
dist.init_process_group("gloo", rank=rank, world_size=world)
if os.environ.get("PLAIN_TRACEBACK"):
    sys.excepthook = sys.__excepthook__  # no [rankN]: from torch: srun's label alone says the rank
weights = torch.ones(1024)
for step in range(int(os.environ.get("STEPS", "5"))):
    if rank == crash_rank and step == crash_step:
        raise ValueError(f"bad batch at step {step} on task {rank}")
    dist.all_reduce(weights)
    print(f"step {step} loss {1.0 / (step + 1):.4f}", flush=True)
    time.sleep(0.2)
dist.destroy_process_group()
print("done", flush=True)
sys.exit(0)
