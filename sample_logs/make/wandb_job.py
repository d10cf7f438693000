"""A 2-rank gloo job whose rank 0 starts a Weights & Biases run, as training scripts do.

Run by record_wandb.py under torchrun; needs torch and wandb in the same interpreter.
"""

from __future__ import annotations

from datetime import timedelta

import torch
import torch.distributed as dist


def main() -> None:
    dist.init_process_group("gloo", timeout=timedelta(seconds=120))
    rank = dist.get_rank()
    print(f"[rank{rank}] process group ready (world size {dist.get_world_size()})", flush=True)
    if rank == 0:
        import wandb

        wandb.init(project="monitor-demo", config={"lr": 0.1})
    metric = torch.ones(1)
    dist.all_reduce(metric)  # the other ranks wait here for rank 0
    print(f"[rank{rank}] all_reduce -> {metric.item()}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
